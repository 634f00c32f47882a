// Human and machine reports of a schedule: the summary line, ours' explanation table, and
// the schedule result JSON (docs/format.md, "Result files"), as partition/report.h does for
// partitions.
#ifndef OVERLAP_SCHEDULE_REPORT_H_
#define OVERLAP_SCHEDULE_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "graph/graph.h"
#include "schedule/budget.h"
#include "schedule/scheduler_registry.h"
#include "schedule/step_plan.h"

namespace overlap {

// Bytes of the parameters ours keeps resident (ids outside the table count 0). O(residents).
int64_t ResidentBytes(const Graph& g, const LookaheadResult& r);

// "<algorithm>: N nodes; peak gathered X, peak memory Y, step Z (lower bound L, exposed
// communication E)\n", plus ours' line (k, residents, buckets) when it kept any. `g` is
// the scheduled graph. O(residents).
std::string FormatScheduleSummary(const Graph& g, const ScheduleReport& r);

// Ours' candidates as a table, one line per (order, k, reduce cap) showing its best choice
// (the chosen one, else the fastest within the budget, else the first) and how many
// resident prefixes were tried; at most `max_rows` lines, then a line counting those left
// out (the chosen line is always shown). Empty for the baselines. O(rows).
std::string FormatExplainTable(const ScheduleReport& r, size_t max_rows = 40);

// The schedule result as deterministic JSON: format, version, algorithm, order (node
// names), the simulation's figures, scheduler_s, the budget's keys (MemoryBudgetJsonFields:
// state_bytes, and with a budget budget_bytes and feasible, for every scheduler); ours adds
// base, lookahead, reduce_bucket_bytes, resident_params, candidates, and when infeasible
// min_feasible_bytes. O(N + candidates).
std::string ScheduleResultJson(const Graph& g, const ScheduleReport& r,
                               const SchedulerOptions& options, const MemoryBudget& budget = {});

// A table of step plans (step_plan.h), one line per (name, plan): step, forward, backward,
// exposed communication, peak, residents, whether it fits. The header line first. O(rows).
std::string FormatStepTable(absl::Span<const std::pair<std::string, StepPlan>> plans);

// "<algorithm>: step S = forward F + backward B; peak P (forward X, backward Y); N resident
// parameters (R)[; reduce-scatter buckets of C][; recomputes K saved tensors (B not kept, T
// of compute)][; offloads K saved tensors (B in host memory, T on the host link)]\n".
// O(recomputed + offloaded).
std::string FormatStepSummary(const StepPlan& p);

// Ours' explanation: the saved tensors it recomputes and those it offloads (when it had to),
// then its resident prefixes as a table: residents, their bytes, each graph's peak, the step,
// whether it fits, the chosen one marked. Empty when ours tried none. O(candidates +
// recomputed + offloaded).
std::string FormatStepExplainTable(const StepPlan& p);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_REPORT_H_
