// Our ZeRO-3 scheduler: memory-bounded lookahead prefetch, with selective unsharding and
// reduce-scatter bucketing, over its own orders and the DeepCompile baselines' orders.
//
// Start from the just-in-time order (every allgather and its wait right before the first
// node that needs the parameter; releases and compute where the graph has them). Schedule
// S_k issues each allgather k parameters early (the allgather of the j-th parameter, in
// order of first use, goes before the first use of the (j-k)-th), so up to k gathered
// parameters are in flight ahead of compute. The candidate orders are S_k for k = 0, 1, 2,
// 3, 4, 6, 8, ... (about sqrt(2) apart, in order, while S_k fits the budget), then the
// orders of fast_free, list and simple_prefetch as they are (which also reorder compute).
// For each order that fits and each reduce-scatter bucket cap (backward graphs; by default
// 0, 4, 16, 64 MiB) that still fits, backward graphs keep parameters resident with the
// memory left over: ranked by allgather time saved per byte, the longest prefix of the
// ranking that fits (shrunk by binary search while the simulated peak exceeds the budget).
// Forward graphs keep none: a resident is refreshed every forward step (simulator.h), so
// it saves no communication there. Every choice is simulated (simulator.h); the fastest
// within the budget wins (ties: the first found).
//
// Why this shape: the orders examined (the fitting prefix of the k sequence, then the
// baselines' orders) and the caps that fit only grow with the budget, and each gets a
// resident prefix at least as long, which in a backward graph is never slower (a resident
// moves nothing); so a larger budget never gives a longer step (a property checks it). The
// budget is never exceeded (each choice is simulated, not estimated). Each baseline's own
// order, with no residents and no buckets, is a candidate, so wherever a baseline fits the
// budget ours fits it and is no slower (a property checks this too). When nothing fits,
// the result is infeasible and reports the smallest peak of the orders tried, the smallest
// budget at which this scheduler succeeds. The scan of S_k stops at the first choice whose
// step equals the total compute time, which nothing beats (the baselines' orders are still
// simulated, as they are: a sum of the same times in another order can be an ulp shorter).
//
// Cost: the four baselines once, then O(log A) orders x caps x (1 + log A) simulations of
// O(N log N + E) each in the worst case; a budget that admits the compute bound early, or
// a tight one, costs a few simulations. On graphs above LookaheadOptions::
// baseline_max_nodes the simple_prefetch and fast_free_0.19 orders are not tried (the first
// grows ~N^2.6, the second runs on bitsets or counts, up to O(A x N)).
#ifndef OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_
#define OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

// Every knob that changes ours' result. The defaults are what the CLI and docs/schedule.md
// use.
struct LookaheadOptions {
  // Budget on the simulated peak memory, in bytes; none: no limit.
  std::optional<int64_t> budget_bytes;
  // At most this many allgathers issued ahead of the compute that needs them (caps k); none:
  // up to the number of parameters. Apart from memory because each in-flight collective also
  // holds communication buffers and stream slots the simulator does not model. Must be >= 0.
  std::optional<int> max_in_flight;
  // Reduce-scatter bucket caps tried on graphs with reduce_grads (0: one collective per
  // gradient), in order; graphs without reduce_grads try 0 only.
  std::vector<int64_t> reduce_bucket_caps = {0, int64_t{4} << 20, int64_t{16} << 20,
                                             int64_t{64} << 20};
  // Keep parameters resident in backward graphs with the memory left over. false: none
  // (a step plan, schedule/step_plan.h, chooses residents for both graphs together).
  bool keep_residents = true;
  // Also try the DeepCompile baselines' orders as candidates (what makes ours dominate
  // them); false: only S_k.
  bool baseline_orders = true;
  // simple_prefetch's and fast_free_0.19's orders are tried only on graphs of at most this
  // many nodes: the first costs ~N^2.6 (5 s at 47k nodes, docs/benchmarks.md), the second up
  // to O(A x N); fast_free and list are near-linear and always tried. Above it, ours is not
  // guaranteed to beat those two.
  int64_t baseline_max_nodes = 30000;
  // Ratio between consecutive lookaheads k (1, 2, 3, 4, 6, 8, ... at sqrt(2)); above
  // `large_graph_nodes` nodes `large_graph_k_ratio`, which halves the simulations at a small
  // cost in choice (each simulation there takes a fraction of a second).
  double k_ratio = 1.4142135623730951;
  double large_graph_k_ratio = 2.0;
  int64_t large_graph_nodes = 250000;
  // The scan stops at the first choice whose step is within this relative tolerance of the
  // total compute time (nothing can be faster). Must be >= 0.
  double compute_bound_tolerance = 1e-9;
  // Candidates are evaluated a batch at a time on up to `max_threads` threads for graphs of
  // at least `parallel_min_nodes` nodes (same scan, same result; a batch wastes at most the
  // candidates after a stop). max_threads = 1: serial.
  int64_t parallel_min_nodes = 20000;
  int max_threads = 4;
};

// OK when every field is in its documented range (ratios > 1, caps >= 0, in-flight cap >= 0,
// tolerance >= 0, max_threads >= 1); InvalidArgument naming the field otherwise.
absl::Status ValidateLookaheadOptions(const LookaheadOptions& options);

// The default LookaheadOptions with the given memory limit (none: no limit).
LookaheadOptions WithBudget(std::optional<int64_t> budget_bytes);

// Why a candidate choice was or was not taken.
enum class CandidateVerdict {
  kChosen,      // the fastest choice within the budget (exactly one, when feasible)
  kSlower,      // a choice within the budget compared with the others: not faster
  kSuperseded,  // within the budget, but a longer resident prefix of the same k and cap fits
  kOverBudget,  // its simulated peak exceeds the memory limit
  // A lookahead the scan did not consider: an earlier choice reached the total compute time
  // (no figures; on large graphs it may have been evaluated in the same parallel batch).
  kStoppedAtComputeBound,
};
// The verdict as the explanation table and the result JSON print it ("chosen", "slower",
// "superseded", "over budget", "stopped at the compute bound").
absl::string_view CandidateVerdictName(CandidateVerdict v);

// The base of ours' own orders S_k in LookaheadCandidate::base; the baselines' orders are
// named by their scheduler ("fast_free", "list", "simple_prefetch").
inline constexpr absl::string_view kPrefetchBase = "prefetch";

// One choice the scan considered: the order it started from (`base`), lookahead k (0 for a
// baseline's order), reduce-scatter bucket cap, how many of the
// ranked parameters it kept resident, and its simulated figures (0 when not simulated).
struct LookaheadCandidate {
  absl::string_view base = kPrefetchBase;  // static storage
  int k = 0;
  int64_t reduce_bucket_bytes = 0;
  int64_t residents = 0;
  int64_t peak_memory_bytes = 0;
  double step_time_s = 0;
  CandidateVerdict verdict = CandidateVerdict::kSlower;
};

// What ours decided. Apply `resident` with MakeResident and `reduce_bucket_bytes` with
// BucketReduces (zero3_ops.h), or let RunScheduler (scheduler_registry.h) do it.
struct LookaheadResult {
  std::vector<NodeId> order;
  absl::string_view base = kPrefetchBase;  // the chosen order's base (static storage)
  int lookahead = 0;                       // the chosen k
  std::vector<int64_t> resident;           // ds_ids kept gathered, each a parameter-table index
  int64_t reduce_bucket_bytes = 0;         // reduce-scatter bucket cap (apply with BucketReduces)
  bool feasible = true;                    // false: no candidate fits the budget
  // The smallest peak of the orders tried: the smallest budget that succeeds (when
  // infeasible).
  int64_t min_feasible_bytes = 0;
  int64_t peak_memory_bytes = 0;  // of the chosen order (simulated)
  double step_time_s = 0;         // of the chosen order (simulated)
  // Every choice the scan simulated, in scan order, then the lookaheads it did not reach
  // because it stopped at the compute bound. Exactly one kChosen row when feasible.
  std::vector<LookaheadCandidate> candidates;
};

// A parameter a scheduler may keep resident: its ds_id, the bytes it holds gathered, the
// allgather time keeping it saves.
struct ResidentChoice {
  int64_t ds = 0;
  int64_t bytes = 0;
  double saved_s = 0;
};

// The ranking ours keeps residents by: time saved per byte held, highest first (0 bytes
// first of all), ties by ds_id. Fills `ds` in rank order and `prefix_bytes` with the bytes of
// each prefix (size + 1 entries from 0, saturating at INT64_MAX). O(P log P).
void RankResidents(std::vector<ResidentChoice> choices, std::vector<int64_t>* ds,
                   std::vector<int64_t>* prefix_bytes);

// Schedules a graph with ZeRO-3 ops under `options` (see above). When infeasible, `order`
// is S_0 and no candidate is kChosen. InvalidArgument for options out of range or an
// invalid collective model; an unsupported-graph error (graph/errors.h) when a candidate is
// not a schedule of the graph (hand-written dc ops with dependencies the prefetch cannot
// see). Only allgathers whose ds_id indexes the parameter table are candidates to keep
// resident. Does not change the graph: apply the result with
// MakeResident and BucketReduces, or run the "lookahead" scheduler of
// scheduler_registry.h, which leaves the graph final.
absl::StatusOr<LookaheadResult> LookaheadPrefetchSchedule(const Graph& g,
                                                          const LookaheadOptions& options = {},
                                                          const CollectiveModel& model = {});

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_LOOKAHEAD_PREFETCH_H_
