// overlap plan: a training step's ZeRO-3 plan, the forward and backward graphs together.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/aot_files.h"
#include "graph/json_reader.h"
#include "graph/size.h"
#include "schedule/report.h"
#include "schedule/scheduler_registry.h"
#include "schedule/step_plan.h"
#include "schedule/timeline_svg.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"algorithm", 0, "A",
     "whose plan -o writes and whose fit decides the exit status (default\n"
     "lookahead, ours); every scheduler is planned and printed"},
    {"explain", 0, "",
     "print what ours recomputed or offloaded and why, and each resident\n"
     "prefix it tried: residents, their bytes, the forward's and backward's\n"
     "peaks, the step, whether it fits"},
    {"trace", 0, "OUT",
     "write the chosen plan's step as a Chrome / Perfetto trace (the forward,\n"
     "then the backward)",
     true},
    {"no-recompute", 0, "",
     "ours: never recompute saved tensors, even when nothing fits without\n"
     "(the smallest budget reported is then the prefetch floor)"},
    {"no-offload", 0, "",
     "ours: never keep saved tensors in host memory (over the host link,\n"
     "--host-bandwidth), even when nothing fits without"},
    {"no-reduce-waits", 0, "",
     "ours: never make compute wait for a reduce-scatter before the next\n"
     "gather (the last lever, for steps whose parameters dominate)"},
    {"svg", 0, "OUT",
     "draw the chosen plan's step as SVG: the forward then the backward on\n"
     "both streams above the memory curve, the boundary, the residents\n"
     "and the budget marked",
     true},
    {"output", 'o', "PREFIX",
     "write the planned graphs to PREFIX.forward.json and PREFIX.backward.json\n"
     "(`overlap simulate PREFIX.forward.json --backward-graph\n"
     "PREFIX.backward.json` reproduces the step's figures)",
     true},
};

// Inserts ZeRO-3 ops of `kind` into a graph read from `path` when it has none.
absl::Status WithZero3(const std::string& path, GraphKind kind, Graph* g) {
  if (HasZero3Ops(*g)) return absl::OkStatus();
  absl::StatusOr<bool> inserted = Zero3Insertion(kind).RunInPlace(g);
  if (!inserted.ok()) {
    return absl::Status(inserted.status().code(),
                        absl::StrCat(path, ": ", inserted.status().message()));
  }
  return absl::OkStatus();
}

int Run(Invocation& in) {
  const std::string algorithm =
      in.String("algorithm").value_or(std::string(DefaultSchedulerName()));
  if (!FindScheduler(algorithm).ok()) {
    in.AddUsageError(absl::StrCat("--algorithm: unknown scheduler \"", algorithm, "\""));
  }
  StepPlanOptions options;
  options.collectives = ReadCollectiveFlags(in);
  const BudgetRequest budget_request =
      ReadBudgetFlags(in, options.collectives.world_size, ReadOptimizerFlags(in));
  if (in.has_usage_error()) return in.UsageError();
  absl::StatusOr<AotPair> read =
      ReadAotPairFiles(ResolvePath(in.positional()[0]), ResolvePath(in.positional()[1]));
  if (!read.ok()) return in.BadInput(read.status());
  absl::StatusOr<Graph> forward = std::move(read->forward);
  absl::StatusOr<Graph> backward = std::move(read->backward);
  if (!HasZero3Ops(*forward) && !HasZero3Ops(*backward)) {
    // A plain AOT pair: tightened as the executor runs one (exec, train, run; graph/aot.h),
    // so the plan's figures are those of what executes.
    AotPair pair;
    pair.forward = *std::move(forward);
    pair.backward = *std::move(backward);
    if (absl::Status s = TightenPairMemory(&pair).status(); !s.ok()) return in.BadInput(s);
    forward = std::move(pair.forward);
    backward = std::move(pair.backward);
  }
  if (absl::Status s = WithZero3(in.positional()[0], GraphKind::kForward, &*forward); !s.ok()) {
    return in.BadInput(s);
  }
  if (absl::Status s = WithZero3(in.positional()[1], GraphKind::kBackward, &*backward); !s.ok()) {
    return in.BadInput(s);
  }
  NoteMissingDeviceTimes(in, *forward);
  NoteMissingDeviceTimes(in, *backward);
  absl::StatusOr<MemoryBudget> budget = ResolveBudget(budget_request, *forward);
  if (!budget.ok()) return in.BadInput(budget.status());
  options.budget_bytes = budget->budget_bytes;
  options.record_trace = in.Has("svg") || in.Has("trace");
  options.recompute = !in.Switch("no-recompute");
  options.offload = !in.Switch("no-offload");
  options.wait_for_reductions = !in.Switch("no-reduce-waits");

  std::fprintf(in.summary(), "step plan: forward %zu nodes, backward %zu nodes%s\n",
               static_cast<size_t>(forward->size()), static_cast<size_t>(backward->size()),
               budget->budget_bytes
                   ? absl::StrCat(", budget ", FormatBytes(*budget->budget_bytes)).c_str()
                   : "");
  std::optional<StepPlan> chosen;
  Graph chosen_forward, chosen_backward;
  std::vector<std::pair<std::string, StepPlan>> rows;
  for (const SchedulerEntry& e : Schedulers()) {
    Graph f = *forward, b = *backward;
    absl::StatusOr<StepPlan> p = PlanStep(e.name, &f, &b, options);
    if (!p.ok()) return in.BadInput(p.status());
    rows.emplace_back(std::string(e.name), *p);
    if (e.name == algorithm) {
      chosen = *std::move(p);
      chosen_forward = std::move(f);
      chosen_backward = std::move(b);
    }
  }
  std::fputs(FormatStepTable(rows).c_str(), in.summary());
  std::fputs(FormatStepSummary(*chosen).c_str(), in.summary());
  std::fputs(FormatBudget(*budget, chosen->simulation.figures.peak_memory_bytes).c_str(),
             in.summary());
  if (in.Switch("explain")) std::fputs(FormatStepExplainTable(*chosen).c_str(), in.summary());
  if (std::optional<std::string> prefix = in.Path("output")) {
    for (const auto& [suffix, g] :
         {std::pair<const char*, const Graph*>{".forward.json", &chosen_forward},
          {".backward.json", &chosen_backward}}) {
      if (absl::Status s = WriteGraphFile(in, *prefix + suffix, *g); !s.ok()) {
        return in.BadInput(s);
      }
    }
  }
  if (std::optional<std::string> path = in.Path("trace")) {
    const std::string text =
        StepChromeTraceJson(chosen_forward, chosen_backward, chosen->simulation);
    if (absl::Status s = WriteTextFile(in, *path, text); !s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> path = in.Path("svg")) {
    TimelineSvgOptions svg;
    svg.title = absl::StrCat(forward->name().empty() ? "step" : forward->name(), ", ", algorithm,
                             ": forward then backward");
    svg.budget_bytes = budget->budget_bytes;
    const std::string text =
        StepTimelineSvg(chosen_forward, chosen_backward, chosen->simulation, svg);
    if (absl::Status s = WriteTextFile(in, *path, text); !s.ok()) return in.BadInput(s);
  }
  if (!chosen->fits) {
    if (chosen->min_feasible_bytes > 0) {
      PrintNoFit(in, "step plan", *budget->budget_bytes, chosen->min_feasible_bytes);
    } else {
      std::fprintf(in.err(), "overlap: error: %s's step exceeds the memory budget of %s\n",
                   algorithm.c_str(), FormatBytes(*budget->budget_bytes).c_str());
    }
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& PlanCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "plan";
    s.synopsis = "FORWARD BACKWARD [options]";
    s.summary = "plan a training step: the forward and backward graphs together";
    s.description =
        "Plans one ZeRO-3 training step of an AOT pair (ZeRO-3 ops inserted where a graph has\n"
        "none) with every scheduler under one budget on the step's peak: the forward, then\n"
        "the backward; residents held from the forward's gather to the backward's end, in both\n"
        "graphs' peaks (schedule/step_plan.h, docs/schedule.md \"Step plans\"). Prints each\n"
        "scheduler's step; -o writes the chosen plan's two graphs. Exit 1 when it does not fit.\n";
    s.flags = {kFlags, BudgetFlags(), OptimizerStateFlags(), CollectiveFlags()};
    s.footer = "SIZE: bytes, or with KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).\n";
    s.min_positional = s.max_positional = 2;
    s.positional_name = "forward backward";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
