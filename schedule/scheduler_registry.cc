#include "schedule/scheduler_registry.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "graph/text.h"
#include "graph/verifier.h"
#include "schedule/fast_free.h"
#include "schedule/list_schedule.h"
#include "schedule/schedule_verifier.h"
#include "schedule/simple_prefetch.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

absl::StatusOr<ScheduleChoice> Lookahead(const Graph& g, const SchedulerOptions& options) {
  ScheduleChoice choice;
  OVERLAP_ASSIGN_OR_RETURN(choice.lookahead,
                           LookaheadPrefetchSchedule(g, options.lookahead, options.collectives));
  choice.order = choice.lookahead->order;
  return choice;
}

// A baseline: an order from the graph alone.
template <absl::StatusOr<std::vector<NodeId>> (*Schedule)(const Graph&)>
absl::StatusOr<ScheduleChoice> Baseline(const Graph& g, const SchedulerOptions&) {
  ScheduleChoice choice;
  OVERLAP_ASSIGN_OR_RETURN(choice.order, Schedule(g));
  return choice;
}

absl::StatusOr<ScheduleChoice> FastFree019(const Graph& g, const SchedulerOptions& options) {
  FastFreeOptions o;
  o.rules = FastFreeOptions::Rules::kDeepSpeed019;
  o.gathered_budget_bytes = options.gathered_budget_bytes;
  ScheduleChoice choice;
  OVERLAP_ASSIGN_OR_RETURN(choice.order, FastFreeScheduleWith(g, o));
  return choice;
}

constexpr SchedulerEntry kSchedulers[] = {
    {"lookahead",
     "ours: memory-bounded lookahead prefetch with selective unsharding and reduce-scatter "
     "bucketing",
     /*honours_budget=*/true, /*explains=*/true, &Lookahead},
    {"fast_free", "DeepSpeed DeepCompile's fast_free_schedule (exact, efficient)", false, false,
     &Baseline<&FastFreeSchedule>},
    {"fast_free_0.19",
     "fast_free under DeepSpeed 0.19's rules (what needs no allgather scheduled early; "
     "--gathered-budget)",
     false, false, &FastFree019},
    {"list", "DeepCompile's list scheduler, as intended: smallest memory delta first", false, false,
     &Baseline<&ListSchedule>},
    {"simple_prefetch",
     "DeepCompile's simple_prefetch: the allgather that unblocks the most compute, issued early",
     false, false, &Baseline<&SimplePrefetchSchedule>},
};

// Applies ours' residents and buckets, sets the order with the output node last, and
// checks the result.
absl::Status Finish(Graph* g, std::vector<NodeId>* order,
                    const std::optional<LookaheadResult>& ours) {
  if (ours) {
    OVERLAP_RETURN_IF_ERROR(MakeResident(g, ours->resident, order));
    OVERLAP_RETURN_IF_ERROR(BucketReduces(g, *order, ours->reduce_bucket_bytes));
  }
  std::vector<NodeId> final_order;
  final_order.reserve(order->size());
  NodeId output = kNoNode;
  for (NodeId id : *order) {
    if (g->node(id).op() == Op::kOutput) {
      output = id;
    } else {
      final_order.push_back(id);
    }
  }
  if (output != kNoNode) final_order.push_back(output);
  OVERLAP_RETURN_IF_ERROR(g->SetOrder(final_order));
  *order = std::move(final_order);
  OVERLAP_RETURN_IF_ERROR(Verify(*g));
  return VerifySchedule(*g, *order);
}

SimulationOptions Traced(const SchedulerOptions& options) {
  SimulationOptions o;
  o.record_trace = options.record_trace;
  return o;
}

}  // namespace

absl::Span<const SchedulerEntry> Schedulers() { return kSchedulers; }

absl::string_view DefaultSchedulerName() { return kSchedulers[0].name; }

absl::StatusOr<const SchedulerEntry*> FindScheduler(absl::string_view name) {
  std::vector<absl::string_view> names;
  for (const SchedulerEntry& e : kSchedulers) {
    if (e.name == name) return &e;
    names.push_back(e.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown scheduler \"", Printable(name),
                                          "\" (known: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<ScheduleReport> RunScheduler(absl::string_view name, Graph* g,
                                            const SchedulerOptions& options) {
  OVERLAP_ASSIGN_OR_RETURN(const SchedulerEntry* entry, FindScheduler(name));
  ScheduleReport report;
  report.algorithm = std::string(entry->name);
  const auto start = std::chrono::steady_clock::now();
  OVERLAP_ASSIGN_OR_RETURN(ScheduleChoice choice, entry->schedule(*g, options));
  report.order = std::move(choice.order);
  report.lookahead = std::move(choice.lookahead);
  report.scheduler_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool rewrites = report.lookahead && (!report.lookahead->resident.empty() ||
                                             report.lookahead->reduce_bucket_bytes > 0);
  if (rewrites) {  // residents and buckets rewrite the graph: a failure must not show
    Graph scheduled = *g;
    OVERLAP_RETURN_IF_ERROR(Finish(&scheduled, &report.order, report.lookahead));
    *g = std::move(scheduled);
  } else {  // only the order changes, and can be put back (large graphs: no copy)
    const std::vector<NodeId> before = g->OrderVector();
    absl::Status s = Finish(g, &report.order, report.lookahead);
    if (s.ok()) {
      absl::StatusOr<SimulationResult> sim =
          Simulator(*g, options.collectives).Run(report.order, Traced(options));
      if (sim.ok()) {
        report.simulation = *std::move(sim);
        return report;
      }
      s = sim.status();
    }
    if (!g->SetOrder(before).ok()) return absl::InternalError("cannot restore the order");
    return s;
  }
  OVERLAP_ASSIGN_OR_RETURN(report.simulation,
                           Simulator(*g, options.collectives).Run(report.order, Traced(options)));
  return report;
}

}  // namespace overlap
