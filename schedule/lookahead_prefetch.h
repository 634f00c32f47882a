// Our ZeRO-3 scheduler: memory-bounded lookahead prefetch.
//
// Start from the just-in-time order (every allgather and its wait right before the first
// node that needs the parameter; releases and compute where the graph has them). Schedule
// S_k issues each allgather k parameters early (the allgather of the j-th parameter, in
// order of first use, goes before the first use of the (j-k)-th), so up to k gathered
// parameters are in flight ahead of compute. Every S_k is simulated (simulator.h); among
// those whose peak memory fits the budget, the one with the shortest step time wins (ties:
// the smaller k, which holds less memory).
//
// Why this shape: the feasible set {k : peak(S_k) <= budget} only grows with the budget,
// so a larger budget never gives a longer step time (monotone by construction, and a
// property checks it); the budget is never exceeded (each candidate is simulated, not
// estimated); and k trades memory for overlap directly. When even S_0 does not fit, the
// result is infeasible and reports the smallest peak among the candidates as the smallest
// feasible budget.
//
// Candidates: k = 0, 1, 2, 3, 4, 6, 8, 12, 16, ... (about sqrt(2) apart) up to the number of
// parameters, stopping early at the first feasible candidate that reaches the lower bound
// max(compute, communication). Cost: O(log A) simulations, O(N log N) each.
//
// Not yet (docs/notes): selective unsharding (keeping parameters resident when memory is
// left over), bucketing reduce-scatters, an in-flight limit separate from memory.
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
  int lookahead = 0;               // the chosen k
  std::vector<int64_t> resident;   // ds_ids kept gathered (apply with MakeResident)
  int64_t reduce_bucket_bytes = 0; // reduce-scatter bucket cap (apply with BucketReduces)
  bool feasible = true;            // false: no candidate fits the budget
  int64_t min_feasible_bytes = 0;  // the smallest candidate peak (set when infeasible)
  int64_t peak_memory_bytes = 0;   // of the chosen order (simulated)
  double step_time_s = 0;          // of the chosen order (simulated)
};

// Schedules a graph with ZeRO-3 ops under `memory_limit` bytes of simulated peak memory
// (none: no limit). When infeasible, `order` is the smallest-memory candidate.
absl::StatusOr<LookaheadResult> LookaheadPrefetchSchedule(
    const Graph& g, std::optional<int64_t> memory_limit, const CollectiveModel& model = {});

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_
