// A training step as the unit of ZeRO-3 scheduling: an AOT pair's forward and backward
// graphs (ZeRO-3 ops inserted in both) planned together under one memory budget.
//
// The step model (docs/schedule.md, "Step plans"): the forward runs, then the backward
// (the boundary is a barrier: the backward's first collective waits for the forward's
// end). The step's time is the forward's simulated step plus the backward's. Its peak is the
// larger of the two graphs' peaks, each counting what the step holds while it runs:
//   - its own transient tensors, per simulator.h (the forward holds the saved activations
//     to its end as its outputs; the backward holds them from its start as placeholders:
//     the same bytes, handed over);
//   - the resident parameters: a parameter kept gathered from the forward's gather to the
//     backward's end (its allgathers persistent in both graphs, its releases erased). Each
//     graph's simulation counts the residents it gathers from time 0 (the forward pays
//     their allgather time, a refresh at its start; the backward moves nothing); a resident
//     only one graph gathers is added to the other's peak.
// Baselines are planned the same way: their forward order and backward order, no residents,
// so step figures compare like with like.
//
// Ours (the "lookahead" entry of scheduler_registry.h) at the step level: parameters ranked
// by backward allgather time saved per byte; for a resident prefix R (none, the longest
// prefix that fits the budget, and prefixes between), both graphs with R applied are
// scheduled by ours under the step budget less the residents the other graph gathers
// alone, keeping no residents of their own; the fastest step that fits wins. With no
// residents the two graphs are independent (the step's time is a sum, its peak a max), so
// ours' per-graph domination (each baseline's order is one of its candidates) carries
// over: at any budget where a baseline's step fits, ours' fits and is no longer.
//
//   StepPlanOptions o;
//   o.budget_bytes = int64_t{8} << 30;
//   absl::StatusOr<StepPlan> p = PlanStep("lookahead", &forward, &backward, o);
//   // forward and backward are final; p->simulation.figures.step_time_s, ...
#ifndef OVERLAP_SCHEDULE_STEP_PLAN_H_
#define OVERLAP_SCHEDULE_STEP_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "graph/saved_rewrites.h"
#include "schedule/lookahead_prefetch.h"
#include "schedule/simulator.h"

namespace overlap {

// One step's figures (see above).
struct StepFigures {
  int64_t peak_memory_bytes = 0;    // max(forward_peak_bytes, backward_peak_bytes)
  int64_t forward_peak_bytes = 0;   // the forward's peak + residents only the backward gathers
  int64_t backward_peak_bytes = 0;  // the backward's peak + residents only the forward gathers
  int64_t resident_bytes = 0;       // parameters held gathered for the whole step
  int64_t residents = 0;            // how many
  double step_time_s = 0;           // forward_time_s + backward_time_s
  double forward_time_s = 0;
  double backward_time_s = 0;
  double compute_s = 0;       // both graphs' device time
  double comm_s = 0;          // both graphs' collective time
  double host_s = 0;          // both graphs' host-link copy time (offloads and reloads)
  double exposed_comm_s = 0;  // step_time_s - compute_s
};

// Both graphs' simulations and the step's figures.
struct StepSimulation {
  SimulationResult forward;
  SimulationResult backward;
  StepFigures figures;
};

// Simulates a step of two final graphs in their own orders: residents are the ds_ids of
// persistent allgathers in either graph. What `overlap simulate FWD --backward-graph BWD`
// prints, and what PlanStep's figures must equal. Errors: either simulation's.
// O(simulation of both).
absl::StatusOr<StepSimulation> SimulateStep(const Graph& forward, const Graph& backward,
                                            const CollectiveModel& model = {},
                                            bool record_trace = false);

// The step's Chrome / Perfetto trace: the forward's events, then the backward's from the
// forward's end (an instant event marks each graph's start), the memory counter of each with
// the residents only the other graph gathers added. Both simulations must carry their traces.
// O(events + memory changes).
std::string StepChromeTraceJson(const Graph& forward, const Graph& backward,
                                const StepSimulation& s);

// What PlanStep is given.
struct StepPlanOptions {
  // The cap on the step's peak (StepFigures::peak_memory_bytes); none: no limit. The
  // baselines ignore it (their plan says whether it fits).
  std::optional<int64_t> budget_bytes;
  CollectiveModel collectives;
  // Ours' per-graph knobs; budget_bytes and keep_residents are set by the step search.
  LookaheadOptions lookahead;
  // Resident prefixes ours tries besides none and the longest that fits: this many more,
  // spread evenly below the longest (0: only those two).
  int resident_steps = 3;
  // Record both simulations' traces in the plan (what --trace and --svg draw).
  bool record_trace = false;
  // Ours, when no plan fits: recompute saved tensors in the backward instead of keeping
  // them (graph/saved_rewrites.h's RecomputeSaved), the fewest that make the step fit, cheapest
  // first (bytes saved per second recomputed). false: no recomputation.
  bool recompute = true;
  // Ours, when no plan fits: keep saved tensors in host memory between the graphs instead
  // (graph/saved_rewrites.h's OffloadSaved; copies over the host link of `collectives`). Each saved
  // group gets the cheaper of the levers allowed (recomputation's device time against the
  // copies' host-link time both ways); the fewest groups that make the step fit are taken,
  // most bytes per second first. false: no offloading.
  bool offload = true;
  // Ours, when neither saved-tensor lever makes the step fit: compute waits for each
  // reduce-scatter before the next gather (zero3_ops.h's AddReduceWaits; the costliest
  // lever, tried last). false: never.
  bool wait_for_reductions = true;
};

// One resident prefix ours tried.
struct StepCandidate {
  int64_t residents = 0;
  int64_t resident_bytes = 0;
  bool fits = false;
  StepFigures figures;  // with each graph's best order under the budget
};

// A plan: what was decided and the step simulation of the final graphs.
struct StepPlan {
  std::string algorithm;
  std::vector<int64_t> resident;    // ds_ids held gathered for the whole step (ours)
  int64_t reduce_bucket_bytes = 0;  // the backward's reduce-scatter bucket cap (ours)
  int forward_lookahead = 0;        // ours' k in each graph
  int backward_lookahead = 0;
  bool fits = true;  // the step's peak is within the budget (or none given)
  // When ours does not fit: the smallest step budget at which it would (the larger of the
  // two graphs' smallest peaks over the orders ours tries). 0 otherwise.
  int64_t min_feasible_bytes = 0;
  StepSimulation simulation;
  std::vector<StepCandidate> candidates;  // ours: each resident prefix tried, in order
  // Ours: the saved tensors the backward recomputes, and those kept in host memory (none
  // unless nothing fit without).
  std::vector<RecomputeCandidate> recomputed;
  std::vector<OffloadCandidate> offloaded;
  int64_t reduce_waits = 0;  // ours: the dc.wait_reduce nodes the last lever added
};

// Plans one step with scheduler `algorithm` (scheduler_registry.h) and leaves both graphs
// final: each one's order set, ours' residents applied to both (MakeResident) and its
// reduce-scatter buckets to the backward, verified. `forward` and `backward` must carry
// ZeRO-3 ops (forward and backward insertion) of one parameter table. NotFound for an
// unknown scheduler; the schedulers' errors otherwise. Ours when nothing fits: fits false,
// min_feasible_bytes set, the graphs in ours' smallest-peak orders. Cost: baselines, one
// schedule of each graph; ours, (2 + resident_steps + log P) schedules of each.
absl::StatusOr<StepPlan> PlanStep(absl::string_view algorithm, Graph* forward, Graph* backward,
                                  const StepPlanOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_STEP_PLAN_H_
