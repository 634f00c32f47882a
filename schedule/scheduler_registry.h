// Every ZeRO-3 scheduler behind one table. The CLI, the fuzzers, the tests and
// tools/schedule_table.py (through `overlap schedule --list-algorithms`) enumerate this
// table; adding a scheduler is one entry in scheduler_registry.cc.
//
// A scheduler here is a pass: RunScheduler takes a graph with ZeRO-3 ops and leaves it
// final (its node order set to the schedule with the output node last, ours' residents
// and reduce-scatter buckets applied, verified by Verify and VerifySchedule), and returns a
// report whose figures are the simulation of that final graph in its own order.
//
//   SchedulerOptions options;
//   options.lookahead.budget_bytes = int64_t{8} << 30;
//   absl::StatusOr<ScheduleReport> r = RunScheduler("lookahead", &graph, options);
//   // graph.OrderVector() == r->order; r->simulation.step_time_s, ...
#ifndef OVERLAP_SCHEDULE_SCHEDULER_REGISTRY_H_
#define OVERLAP_SCHEDULE_SCHEDULER_REGISTRY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "schedule/lookahead_prefetch.h"
#include "schedule/simulator.h"

namespace overlap {

// What every scheduler is given.
struct SchedulerOptions {
  // The collectives' cost model, for ours' search and for the report's simulation.
  CollectiveModel collectives;
  // Whether the report's simulation records its trace (events, memory timeline: what
  // --trace and --svg draw). false: the same figures, less memory on large graphs.
  bool record_trace = true;
  // Ours' knobs (memory limit, in-flight cap, bucket caps, parallelism); the DeepCompile
  // baselines ignore them.
  LookaheadOptions lookahead;
  // fast_free_0.19's scheduler memory budget (FastFreeOptions::gathered_budget_bytes);
  // < 0: none. The other schedulers ignore it.
  int64_t gathered_budget_bytes = -1;
};

// What a scheduler decided, and the simulation of the final graph.
struct ScheduleReport {
  std::string algorithm;
  std::vector<NodeId> order;    // the final graph's order (output node last)
  SimulationResult simulation;  // of that order, with the trace
  double scheduler_s = 0;       // wall time of the scheduling algorithm alone
  // Ours only: k, residents, bucket cap, feasibility and every candidate (the explanation).
  std::optional<LookaheadResult> lookahead;
};

// What a scheduling algorithm decides, before RunScheduler applies it.
struct ScheduleChoice {
  std::vector<NodeId> order;  // a topological permutation of the graph's nodes
  // For schedulers that choose residents and buckets and explain themselves (ours).
  std::optional<LookaheadResult> lookahead;
};

// One row of the table.
struct SchedulerEntry {
  absl::string_view name;
  absl::string_view description;  // one line
  // Whether it reads options.lookahead (memory limit, in-flight cap, ...); the others
  // ignore memory.
  bool honours_budget = false;
  // Whether its choice carries a LookaheadResult with candidates (`--explain`).
  bool explains = false;
  // Orders `g` (a graph with ZeRO-3 ops, unchanged). Errors: the scheduler's own.
  absl::StatusOr<ScheduleChoice> (*schedule)(const Graph& g, const SchedulerOptions& options);
};

// The table, default scheduler first. O(1).
absl::Span<const SchedulerEntry> Schedulers();

// The entry named `name`; NotFound (an unknown-name error, graph/errors.h) listing the
// names otherwise. O(table size).
absl::StatusOr<const SchedulerEntry*> FindScheduler(absl::string_view name);

// The default scheduler's name ("lookahead").
absl::string_view DefaultSchedulerName();

// Runs scheduler `name` on `g` (with ZeRO-3 ops) and leaves `g` final, as described at the
// top. On error `g` is unchanged. Cost: the scheduler's, plus O(N log N) for the checks
// and the simulation.
absl::StatusOr<ScheduleReport> RunScheduler(absl::string_view name, Graph* g,
                                            const SchedulerOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_SCHEDULER_REGISTRY_H_
