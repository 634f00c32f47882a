// Our ZeRO-3 scheduler: memory-bounded lookahead prefetch, with selective unsharding and
// reduce-scatter bucketing.
//
// Start from the just-in-time order (every allgather and its wait right before the first
// node that needs the parameter; releases and compute where the graph has them). Schedule
// S_k issues each allgather k parameters early (the allgather of the j-th parameter, in
// order of first use, goes before the first use of the (j-k)-th), so up to k gathered
// parameters are in flight ahead of compute. For each S_k (k = 0, 1, 2, 3, 4, 6, 8, ...,
// about sqrt(2) apart, in order) that fits the budget, and each reduce-scatter bucket cap
// (backward graphs: 0, 4, 16, 64 MiB) that still fits, the memory left over keeps
// parameters resident (ranked by allgather time saved per byte; the longest prefix of the
// ranking that fits, shrunk by binary search while the simulated peak exceeds the budget).
// Every choice is simulated (simulator.h); the fastest wins (ties: the first found).
//
// Why this shape: the scan stops at the first S_k that does not fit, so the candidates
// examined are the longest fitting prefix of the k sequence, which only grows with the
// budget, and each gets a resident prefix at least as long; neither makes a step longer, so
// a larger budget never gives a longer step (monotone by construction; a property checks
// it). The budget is never exceeded (each choice is simulated, not estimated). When even S_0
// does not fit, the result is infeasible and reports S_0's peak, the smallest budget at
// which this scheduler succeeds. The scan also stops at the first choice whose step equals
// the total compute time, which nothing beats.
//
// Cost: O(log A) candidates x (1 + caps x (1 + log A)) simulations of O(N log N) each in
// the worst case; a budget that admits the compute bound early, or a tight one, costs a
// few simulations.
#ifndef OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_
#define OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

struct LookaheadResult {
  std::vector<NodeId> order;
  int lookahead = 0;                // the chosen k
  std::vector<int64_t> resident;    // ds_ids kept gathered (apply with MakeResident)
  int64_t reduce_bucket_bytes = 0;  // reduce-scatter bucket cap (apply with BucketReduces)
  bool feasible = true;             // false: no candidate fits the budget
  int64_t min_feasible_bytes =
      0;                          // S_0's peak: the smallest budget that succeeds (when infeasible)
  int64_t peak_memory_bytes = 0;  // of the chosen order (simulated)
  double step_time_s = 0;         // of the chosen order (simulated)
};

// Schedules a graph with ZeRO-3 ops under `memory_limit` bytes of simulated peak memory
// (none: no limit). `max_in_flight` caps k, the number of allgathers issued ahead of the
// compute that needs them (none: up to the number of parameters); it is a separate knob
// from memory because each in-flight collective also holds communication buffers and
// stream slots the simulator does not model. When infeasible, `order` is S_0.
absl::StatusOr<LookaheadResult> LookaheadPrefetchSchedule(
    const Graph& g, std::optional<int64_t> memory_limit, const CollectiveModel& model = {},
    std::optional<int> max_in_flight = std::nullopt);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_
