// overlap simulate: one step of a (ZeRO-3) graph in its file order on two streams.
#include "absl/strings/str_cat.h"
#include "graph/json_reader.h"
#include "graph/size.h"
#include "schedule/simulator.h"
#include "schedule/step_plan.h"
#include "schedule/timeline_svg.h"
#include "schedule/zero3_ops.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"backward-graph", 0, "FILE",
     "FILE is the step's backward graph: simulate the step, FILE's forward\n"
     "then FILE (what `overlap plan -o` writes; residents held across both)",
     true},
    {"json", 0, "OUT", "write the figures (overlap-result JSON)", true},
    {"trace", 0, "OUT", "write a Chrome / Perfetto trace (open in ui.perfetto.dev)", true},
    {"svg", 0, "OUT",
     "draw the step as SVG: both streams above the memory curve, the peak\n"
     "marked, the budget as a line",
     true},
};

int Run(Invocation& in) {
  const CollectiveModel model = ReadCollectiveFlags(in);
  const BudgetRequest budget_request =
      ReadBudgetFlags(in, model.world_size, ReadOptimizerFlags(in));
  if (in.has_usage_error()) return in.UsageError();
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  NoteMissingDeviceTimes(in, *g);
  absl::StatusOr<MemoryBudget> budget = ResolveBudget(budget_request, *g);
  if (!budget.ok()) return in.BadInput(budget.status());
  if (std::optional<std::string> path = in.Path("backward-graph")) {
    absl::StatusOr<Graph> b = ReadGraphJsonFile(*path);
    if (!b.ok()) return in.BadInput(b.status());
    NoteMissingDeviceTimes(in, *b);
    absl::StatusOr<StepSimulation> step = SimulateStep(*g, *b, model);
    if (!step.ok()) return in.BadInput(step.status());
    const StepFigures& x = step->figures;
    std::fprintf(in.summary(),
                 "step %s = forward %s + backward %s (compute %s, communication %s, exposed "
                 "%s); peak memory %s (forward %s, backward %s); %lld resident parameters "
                 "(%s)\n",
                 FormatSeconds(x.step_time_s).c_str(), FormatSeconds(x.forward_time_s).c_str(),
                 FormatSeconds(x.backward_time_s).c_str(), FormatSeconds(x.compute_s).c_str(),
                 FormatSeconds(x.comm_s).c_str(), FormatSeconds(x.exposed_comm_s).c_str(),
                 FormatBytes(x.peak_memory_bytes).c_str(),
                 FormatBytes(x.forward_peak_bytes).c_str(),
                 FormatBytes(x.backward_peak_bytes).c_str(), static_cast<long long>(x.residents),
                 FormatBytes(x.resident_bytes).c_str());
    std::fputs(FormatBudget(*budget, x.peak_memory_bytes).c_str(), in.summary());
    return kExitOk;
  }
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector(), model);
  if (!r.ok()) return in.BadInput(r.status());
  std::fprintf(in.summary(),
               "peak memory %s, peak gathered %s, step %s (compute %s, communication %s, "
               "exposed %s, lower bound %s)\n",
               FormatBytes(r->peak_memory_bytes).c_str(),
               FormatBytes(r->peak_gathered_bytes).c_str(), FormatSeconds(r->step_time_s).c_str(),
               FormatSeconds(r->compute_s).c_str(), FormatSeconds(r->comm_s).c_str(),
               FormatSeconds(r->exposed_comm_s).c_str(), FormatSeconds(r->lower_bound_s).c_str());
  std::fputs(FormatBudget(*budget, r->peak_memory_bytes).c_str(), in.summary());
  if (!HasZero3Ops(*g)) std::fputs("(no ZeRO-3 ops in the graph: compute only)\n", in.summary());
  if (std::optional<std::string> path = in.Path("json")) {
    absl::Status s = WriteTextFile(
        in, *path,
        absl::StrCat("{\"format\": \"overlap-result\", \"version\": 1, ", SimulationJsonFields(*r),
                     MemoryBudgetJsonFields(*budget, r->peak_memory_bytes), "}\n"));
    if (!s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> path = in.Path("trace")) {
    absl::Status s = WriteTextFile(in, *path, ChromeTraceJson(*g, *r));
    if (!s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> path = in.Path("svg")) {
    TimelineSvgOptions svg;
    svg.title = g->name().empty() ? "graph" : g->name();
    svg.budget_bytes = budget->budget_bytes;
    absl::Status s = WriteTextFile(in, *path, TimelineSvg(*g, *r, svg));
    if (!s.ok()) return in.BadInput(s);
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& SimulateCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "simulate";
    s.synopsis = "FILE [options]";
    s.summary = "simulate a (ZeRO-3) graph in its order on two streams";
    s.description =
        "Simulates one step of the graph in its file order: compute on one stream,\n"
        "collectives (dc.allgather_param, dc.reduce_grad) on another, waits blocking compute\n"
        "(schedule/simulator.h). Prints peak memory, peak gathered bytes, step time, exposed\n"
        "communication and the lower bound max(compute, communication).\n";
    s.flags = {kFlags, BudgetFlags(), OptimizerStateFlags(), CollectiveFlags()};
    s.min_positional = s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
