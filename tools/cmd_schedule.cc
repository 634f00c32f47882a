// overlap schedule: insert ZeRO-3 ops if needed, schedule, verify, simulate, explain.
#include <climits>

#include "absl/strings/str_cat.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "schedule/report.h"
#include "schedule/scheduler_registry.h"
#include "schedule/simulator.h"
#include "schedule/timeline_svg.h"
#include "schedule/zero3_insertion.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"algorithm", 0, "A",
     "the scheduler (default lookahead, ours); --list-algorithms lists\n"
     "them all"},
    {"list-algorithms", 0, "", "print each scheduler's name and description, then exit"},
    {"max-inflight", 0, "N",
     "lookahead: at most N allgathers issued ahead of the compute that\n"
     "needs them (default: no cap besides memory)"},
    {"gathered-budget", 0, "SIZE",
     "fast_free_0.19: DeepSpeed 0.19's scheduler memory budget, the\n"
     "gathered parameters resident at once (SchedulerMemoryBudget's\n"
     "max_gathered_bytes; 0 is a budget: the least overage each round)"},
    {"explain", 0, "",
     "lookahead: print every candidate it considered (k, reduce-scatter\n"
     "bucket cap, residents, simulated peak and step, verdict)"},
    {"backward", 0, "", "the graph is a backward graph (reduce_grad inserted)"},
    {"insert-only", 0, "",
     "insert the dc.* ops, verify, write -o and stop: the graph another\n"
     "scheduler (DeepSpeed's own) orders"},
    {"json", 0, "OUT", "write the schedule result (order, figures, ours' candidates)", true},
    {"output", 'o', "OUT", "write the scheduled graph (its order, the output node last)", true},
    {"trace", 0, "OUT", "write a Chrome / Perfetto trace of the simulation", true},
    {"svg", 0, "OUT",
     "draw the simulated step as SVG: both streams above the memory curve,\n"
     "the peak marked, the budget as a line",
     true},
};

int ListAlgorithms(Invocation& in) {
  for (const SchedulerEntry& e : Schedulers()) {
    std::fprintf(in.out(), "%s\t%s\n", std::string(e.name).c_str(),
                 std::string(e.description).c_str());
  }
  return kExitOk;
}

// Reads the scheduler's name and options; usage errors are recorded in `in`.
std::string ReadSchedulerFlags(Invocation& in, SchedulerOptions* o) {
  const std::string algorithm =
      in.String("algorithm").value_or(std::string(DefaultSchedulerName()));
  absl::StatusOr<const SchedulerEntry*> e = FindScheduler(algorithm);
  if (!e.ok()) {
    in.AddUsageError(absl::StrCat("--algorithm: ", e.status().message()));
    return algorithm;
  }
  if (in.Has("max-inflight") && !(*e)->honours_budget) {
    in.AddUsageError(
        absl::StrCat("--max-inflight does not apply to ", algorithm, ", which ignores memory"));
  }
  if (in.Has("explain") && !(*e)->explains) {
    in.AddUsageError(absl::StrCat("--explain: ", algorithm, " makes no choices to explain"));
  }
  if (in.Has("gathered-budget") && algorithm != "fast_free_0.19") {
    in.AddUsageError(
        absl::StrCat("--gathered-budget is DeepSpeed 0.19's, for fast_free_0.19, "
                     "not ",
                     algorithm));
  }
  if (std::optional<int64_t> b = in.Size("gathered-budget")) o->gathered_budget_bytes = *b;
  if (in.Has("max-inflight")) o->lookahead.max_in_flight = in.Int("max-inflight", 0, INT_MAX, 0);
  o->collectives = ReadCollectiveFlags(in);
  return algorithm;
}

absl::Status WriteOutputs(Invocation& in, const Graph& g, const ScheduleReport& r,
                          const SchedulerOptions& o, const MemoryBudget& budget) {
  if (std::optional<std::string> path = in.Path("json")) {
    OVERLAP_RETURN_IF_ERROR(WriteTextFile(in, *path, ScheduleResultJson(g, r, o, budget)));
  }
  if (std::optional<std::string> path = in.Path("output")) {
    OVERLAP_RETURN_IF_ERROR(WriteGraphFile(in, *path, g));
  }
  if (std::optional<std::string> path = in.Path("trace")) {
    OVERLAP_RETURN_IF_ERROR(WriteTextFile(in, *path, ChromeTraceJson(g, r.simulation)));
  }
  if (std::optional<std::string> path = in.Path("svg")) {
    TimelineSvgOptions svg;
    svg.title = absl::StrCat(g.name().empty() ? "graph" : g.name(), ", ", r.algorithm);
    svg.budget_bytes = budget.budget_bytes;
    OVERLAP_RETURN_IF_ERROR(WriteTextFile(in, *path, TimelineSvg(g, r.simulation, svg)));
  }
  return absl::OkStatus();
}

int Run(Invocation& in) {
  if (in.Switch("list-algorithms")) return ListAlgorithms(in);
  if (in.positional().size() != 1) in.AddUsageError("schedule takes exactly one file");
  SchedulerOptions options;
  const std::string algorithm = ReadSchedulerFlags(in, &options);
  const BudgetRequest budget_request =
      ReadBudgetFlags(in, options.collectives.world_size, ReadOptimizerFlags(in));
  if (in.has_usage_error()) return in.UsageError();
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  NoteMissingDeviceTimes(in, *g);
  bool inserted_here = false;
  if (!HasZero3Ops(*g)) {
    const GraphKind kind = in.Switch("backward") ? GraphKind::kBackward : GraphKind::kForward;
    absl::StatusOr<bool> inserted = Zero3Insertion(kind).RunInPlace(&*g);
    if (!inserted.ok()) return in.BadInput(inserted.status());
    inserted_here = true;
  }
  if (in.Switch("insert-only")) {
    if (!in.Has("output")) {
      in.AddUsageError("--insert-only writes -o OUT: give it");
      return in.UsageError();
    }
    if (absl::Status s = CheckAfter(*g, "ZeRO-3 insertion"); !s.ok()) return in.BadInput(s);
    std::optional<std::string> path = in.Path("output");
    if (absl::Status s = WriteGraphFile(in, *path, *g); !s.ok()) return in.BadInput(s);
    return kExitOk;
  }
  absl::StatusOr<MemoryBudget> budget = ResolveBudget(budget_request, *g);
  if (!budget.ok()) return in.BadInput(budget.status());
  options.lookahead.budget_bytes = budget->budget_bytes;
  options.record_trace = in.Has("trace") || in.Has("svg");
  absl::StatusOr<ScheduleReport> r = RunScheduler(algorithm, &*g, options);
  if (!r.ok()) {
    // The scheduler verifies its final graph, which covers the insertion; when that fails,
    // say whether the insertion was at fault.
    if (inserted_here) {
      if (absl::Status s = CheckAfter(*g, "ZeRO-3 insertion"); !s.ok()) return in.BadInput(s);
    }
    return in.BadInput(r.status());
  }
  std::fputs(FormatScheduleSummary(*g, *r).c_str(), in.summary());
  std::fputs(FormatBudget(*budget, r->simulation.peak_memory_bytes).c_str(), in.summary());
  if (in.Switch("explain")) std::fputs(FormatExplainTable(*r).c_str(), in.summary());
  if (absl::Status s = WriteOutputs(in, *g, *r, options, *budget); !s.ok()) return in.BadInput(s);
  if (r->lookahead && !r->lookahead->feasible) {
    PrintNoFit(in, "schedule", *budget->budget_bytes, r->lookahead->min_feasible_bytes);
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& ScheduleCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "schedule";
    s.synopsis = "FILE [options]";
    s.summary = "insert ZeRO-3 ops if needed, schedule, verify, simulate";
    s.description =
        "Schedules a ZeRO-3 graph. A graph without dc.* ops gets them first (parameters must\n"
        "be lifted: `overlap gen <model> --lifted`). The scheduler leaves the graph final\n"
        "(its order set, ours' residents and buckets applied, verified); the figures are the\n"
        "two-stream simulation of that graph (schedule/simulator.h). See docs/schedule.md.\n";
    s.flags = {kFlags, BudgetFlags(), OptimizerStateFlags(), CollectiveFlags()};
    s.footer = "SIZE: bytes, or with KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).\n";
    s.min_positional = 0;
    s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
