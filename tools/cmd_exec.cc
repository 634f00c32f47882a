// overlap exec: run a graph (and its backward) on the CPU kernels, or replay it without
// kernels (runtime/exec/replay.h), printing checksums, time and measured vs simulated memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/aot.h"
#include "graph/aot_files.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/output_file.h"
#include "graph/size.h"
#include "graph/value_bytes.h"
#include "runtime/core/blas.h"
#include "runtime/core/safetensors.h"
#include "runtime/exec/exec_report.h"
#include "runtime/exec/interpreter.h"
#include "runtime/exec/memory_plan.h"
#include "runtime/exec/replay.h"
#include "runtime/train/synthetic.h"
#include "runtime/train/train.h"
#include "schedule/simulator.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"backward-graph", 0, "FILE",
     "the backward graph of the pair (overlap gen M --backward): run after\n"
     "the forward on its saved tensors, with a tangent of 1 for the loss"},
    {"weights", 0, "W",
     "parameters (safetensors) by parameter or placeholder name: every\n"
     "parameter, else an error naming the missing ones (docs/runtime.md)"},
    {"inputs", 0, "I", "data inputs (safetensors) by placeholder name"},
    {"seed", 0, "S",
     "seed for every placeholder the files do not give (default 1):\n"
     "parameters as PyTorch initialises layers, indices in range"},
    {"save", 0, "OUT",
     "write the forward's outputs (by value name) and the gradients\n"
     "(grad:<parameter>) as safetensors"},
    {"double", 0, "", "compute in float64 whatever the graph's float dtypes"},
    {"repeat", 0, "K", "then run K more times and print the median times (steady state)"},
    {"profile", 0, "", "with --repeat: the time of each op, summed over its calls, top 20"},
    {"threads", 0, "N", "OpenBLAS and oneDNN threads (default: the core count)"},
    {"replay", 0, "",
     "run without kernels: each compute node waits its device_time\n"
     "(times --time-scale), buffers of each tensor_size are allocated\n"
     "and freed by the executor's rules; any graph runs"},
    {"time-scale", 0, "X", "with --replay: wait device_time * X per node (default 0)"},
    {"count-only", 0, "", "with --replay: count the buffers instead of allocating them"},
    {"guard", 0, "SIZE",
     "the memory guard: the most the run's buffers may take (default: the\n"
     "memory available now); a graph that needs more is refused up front"},
};

// An output's checksum line's figures: the sums of its elements and of their magnitudes.
OutputChecksum ChecksumOf(const std::string& name, const Tensor& t) {
  OutputChecksum c{name, t.DebugString()};
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = GetElement(t, i);
    c.sum += v;
    c.abs_sum += std::fabs(v);
  }
  return c;
}

int Replay(Invocation& in, const std::vector<std::string>& files) {
  ReplayOptions o;
  if (in.Has("time-scale")) o.time_scale = in.NonNegative("time-scale", 1e6, 0);
  o.count_only = in.Switch("count-only");
  o.guard_bytes = in.PositiveSize("guard", "the memory available");
  for (const char* f : {"weights", "inputs", "save", "double", "seed", "repeat", "profile"}) {
    if (in.Has(f)) in.AddUsageError(absl::StrCat("--", f, " runs kernels: not with --replay"));
  }
  if (in.has_usage_error()) return in.UsageError();
  for (const std::string& file : files) {
    absl::StatusOr<Graph> g = ReadGraphJsonFile(file);
    if (!g.ok()) return in.BadInput(g.status());
    absl::StatusOr<ReplayResult> r = overlap::Replay(*g, o);
    if (!r.ok()) return in.BadInput(r.status());
    ExecReplayReport report;
    report.nodes_run = r->nodes_run;
    report.wall_s = r->wall_s;
    report.count_only = o.count_only;
    report.peak_bytes = r->peak_bytes;
    report.simulated_peak_bytes = r->simulated_peak_bytes;
    report.final_bytes = r->final_bytes;
    std::fputs(FormatExecReplay(report).c_str(), in.summary());
  }
  return kExitOk;
}

// Reads the forward graph and, when given, its AOT backward, tightened for memory.
absl::StatusOr<AotPair> ReadPair(const std::string& forward_path,
                                 const std::optional<std::string>& backward_path) {
  if (!backward_path) {
    AotPair pair;
    absl::StatusOr<Graph> fwd = ReadGraphJsonFile(forward_path);
    if (!fwd.ok()) return fwd.status();
    pair.forward = *std::move(fwd);
    return pair;
  }
  absl::StatusOr<AotPair> read = ReadAotPairFiles(forward_path, *backward_path);
  if (!read.ok()) return read.status();
  AotPair pair = *std::move(read);
  // Saved reshapes handed over once, dead values' clones aliased (graph/aot.h).
  if (absl::Status s = TightenPairMemory(&pair).status(); !s.ok()) return s;
  return pair;
}

// Refused before a byte is seeded or read: the graphs' simulated peaks of graph values
// (float32 run as float64 under --double) against the guard. A graph of a kilobyte may
// declare gigabytes, by tensor_size or by shape alone; the message names its largest value.
absl::Status CheckPairFits(const AotPair& pair, bool in_double, std::optional<int64_t> guard) {
  absl::StatusOr<int64_t> peak = LargestPeakBytes({&pair.forward, &pair.backward});
  if (!peak.ok()) return peak.status();
  return CheckMemoryGuard(MulBytes(in_double ? 2 : 1, *peak), guard, "the graph",
                          "its peak of graph values",
                          "a smaller preset or batch, or `overlap exec --replay --count-only`",
                          {&pair.forward, &pair.backward});
}

// The forward's placeholders split into parameters (by parameter name) and data, and where
// they came from.
struct ExecInputs {
  TensorMap params;
  TensorMap data;
  int64_t from_files = 0;
  int64_t from_seed = 0;
};

// Tensors: from --weights / --inputs first, seeded (from `seed`, in `alloc`) for the rest.
absl::StatusOr<ExecInputs> GatherInputs(Invocation& in, const Graph& forward, uint64_t seed,
                                        Allocator& alloc) {
  TensorMap given;
  for (const char* flag : {"weights", "inputs"}) {
    if (std::optional<std::string> path = in.Path(flag)) {
      absl::StatusOr<TensorMap> m = ReadSafetensorsFile(*path, alloc, IsReferenceTensor);
      if (!m.ok()) return m.status();
      // A weights file gives every parameter (runtime/train/train.h); --inputs only data.
      if (absl::string_view(flag) == "weights") {
        if (absl::Status s = CheckWeights(forward, *m); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(*path, ": ", s.message()));
        }
      }
      for (auto& [k, v] : *m) given[k] = v;
    }
  }
  SeededInputsOptions missing_only;
  for (NodeId id : forward.order()) {
    const Node& n = forward.node(id);
    if (n.op() == Op::kPlaceholder && FindInput(forward, n, given) != nullptr) {
      missing_only.skip.insert(n.name());
    }
  }
  absl::StatusOr<TensorMap> seeded = SeededInputs(forward, seed, alloc, missing_only);
  if (!seeded.ok()) return seeded.status();
  ExecInputs out;
  for (NodeId id : forward.order()) {
    const Node& n = forward.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    const Tensor* t = FindInput(forward, n, given);
    (t != nullptr ? out.from_files : out.from_seed) += 1;
    if (t == nullptr) t = &seeded->at(n.name());
    if (IsParameterPlaceholder(forward, id)) {
      out.params[ParamNameOf(n)] = *t;
    } else {
      out.data[n.name()] = *t;
    }
  }
  // torch's draws of the random ops (dropout's masks), which the interpreter takes as those
  // nodes' draws (docs/runtime.md, "Random ops").
  for (const auto& [key, t] : given) {
    if (absl::StartsWith(key, "random/")) out.data[key] = t;
  }
  return out;
}

// Prints one graph's run (time, memory) and its first kShownOutputs outputs' checksums;
// every output goes into `saved` by value name (grad:<parameter> for gradients).
void PrintOutputs(Invocation& in, const Graph& g, const RunResult& r, const char* what,
                  TensorMap& saved) {
  GraphRunReport report;
  report.what = what;
  report.nodes_run = r.nodes_run;
  report.wall_s = r.wall_s;
  report.peak_bytes = r.peak_bytes;
  report.simulated_peak_bytes = r.simulated_peak_bytes;
  report.scratch_peak_bytes = r.scratch_peak_bytes;
  report.total_peak_bytes = r.total_peak_bytes;
  report.view_copies = r.view_copies;
  report.view_copy_bytes = r.view_copy_bytes;
  const Node& out = g.node(g.last());
  const std::vector<Value> items = out.args().empty() ? std::vector<Value>{}
                                   : out.args()[0].kind() == Value::Kind::kList
                                       ? out.args()[0].items()
                                       : std::vector<Value>{out.args()[0]};
  for (size_t i = 0; i < r.outputs.size() && i < items.size(); ++i) {
    if (!r.outputs[i].defined() || !items[i].is_ref()) continue;
    const Node& v = g.node(items[i].as_ref());
    const std::string name =
        v.meta().has_grad_of ? absl::StrCat("grad:", v.meta().grad_of) : v.name();
    saved[name] = r.outputs[i];
    if (static_cast<int64_t>(report.shown.size()) < kShownOutputs) {
      report.shown.push_back(ChecksumOf(name, r.outputs[i]));
    } else {
      ++report.more_outputs;
    }
  }
  std::fputs(FormatGraphRun(report).c_str(), in.summary());
}

// One timed run's seconds: forward, backward (0 without one), together.
struct StepSeconds {
  double forward = 0;
  double backward = 0;
  double together = 0;
};

// Runs the forward alone (no backward graph) or the AOT pair once under `o`.
absl::StatusOr<StepSeconds> RunOnce(const AotPair& pair, bool has_backward,
                                    const ExecInputs& inputs, const InterpreterOptions& o,
                                    AotStepOptions step, TensorMap* saved, Invocation* print) {
  if (!has_backward) {
    TensorMap all = inputs.params;
    for (const auto& [k, v] : inputs.data) all[k] = v;
    absl::StatusOr<RunResult> r = Interpret(pair.forward, all, o);
    if (!r.ok()) return r.status();
    if (print != nullptr) PrintOutputs(*print, pair.forward, *r, "forward", *saved);
    return StepSeconds{r->wall_s, 0, r->wall_s};
  }
  absl::StatusOr<AotStepResult> r = RunAotStep(pair, inputs.params, inputs.data, o, nullptr, step);
  if (!r.ok()) return r.status();
  if (print != nullptr) {
    PrintOutputs(*print, pair.forward, r->forward, "forward", *saved);
    PrintOutputs(*print, pair.backward, r->backward, "backward", *saved);
  }
  return StepSeconds{r->forward.wall_s, r->backward.wall_s, r->forward.wall_s + r->backward.wall_s};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Steady-state timing: the first run paid the one-time costs (oneDNN's code generation,
// first-touch of the pools); these `repeat` runs skip the simulation and the guard.
absl::Status TimeRepeats(Invocation& in, const AotPair& pair, bool has_backward,
                         const ExecInputs& inputs, const InterpreterOptions& o, int64_t repeat,
                         bool profile) {
  InterpreterOptions timed = o;
  timed.simulate = false;
  timed.memory_checked = true;
  // --profile: each call node's time, from the previous node's end to its own (so a
  // graph's first node also carries the run's setup), summed by op.
  std::map<std::string, OpTimeRow> by_op;
  auto last = std::chrono::steady_clock::now();
  if (profile) {
    timed.after_node = [&](const Node& n, const std::vector<Tensor>&) {
      const auto now = std::chrono::steady_clock::now();
      OpTimeRow& t = by_op[n.target()];
      t.s += std::chrono::duration<double>(now - last).count();
      ++t.calls;
      last = now;
      return absl::OkStatus();
    };
  }
  std::vector<double> fwd_s, bwd_s, all_s;
  for (int64_t k = 0; k < repeat; ++k) {
    last = std::chrono::steady_clock::now();
    absl::StatusOr<StepSeconds> r =
        RunOnce(pair, has_backward, inputs, timed, AotStepOptions{/*hand_over_saved=*/true},
                nullptr, nullptr);
    if (!r.ok()) return r.status();
    fwd_s.push_back(r->forward);
    if (has_backward) bwd_s.push_back(r->backward);
    all_s.push_back(r->together);
  }
  ExecRepeatReport report;
  report.runs = repeat;
  report.forward_s = Median(fwd_s);
  if (has_backward) report.backward_s = Median(bwd_s);
  report.together_s = Median(all_s);
  for (auto& [op, t] : by_op) {
    t.op = op;
    report.profile.push_back(t);
  }
  std::fputs(FormatExecRepeat(report).c_str(), in.summary());
  return absl::OkStatus();
}

int Run(Invocation& in) {
  std::vector<std::string> files = {ResolvePath(in.positional()[0])};
  const std::optional<std::string> backward_path = in.Path("backward-graph");
  if (backward_path) files.push_back(*backward_path);
  if (in.Switch("replay")) return Replay(in, files);
  for (const char* f : {"time-scale", "count-only"}) {
    if (in.Has(f)) in.AddUsageError(absl::StrCat("--", f, " needs --replay"));
  }
  const uint64_t seed = static_cast<uint64_t>(in.Int("seed", 0, int64_t{1} << 62, 1));
  const int64_t threads = in.Int("threads", 1, 1024, 0);
  const int64_t repeat = in.Int("repeat", 1, 1000000, 0);
  if (in.Switch("profile") && repeat == 0) in.AddUsageError("--profile needs --repeat K");
  const std::optional<int64_t> guard = in.PositiveSize("guard", "the memory available");
  if (in.has_usage_error()) return in.UsageError();
  if (threads > 0) {
    SetBlasThreads(static_cast<int>(threads));  // OpenBLAS's pool and OpenMP's
  }

  absl::StatusOr<AotPair> pair = ReadPair(files[0], backward_path);
  if (!pair.ok()) return in.BadInput(pair.status());
  if (std::optional<std::string> out = in.Path("save")) {
    if (absl::Status s = CheckOutputPath(*out); !s.ok()) return in.BadInput(s);
  }
  if (absl::Status s = CheckPairFits(*pair, in.Switch("double"), guard); !s.ok()) {
    return in.BadInput(s);
  }
  Allocator alloc;
  absl::StatusOr<ExecInputs> inputs = GatherInputs(in, pair->forward, seed, alloc);
  if (!inputs.ok()) return in.BadInput(inputs.status());
  ExecInputsReport inputs_report;
  inputs_report.from_files = inputs->from_files;
  inputs_report.from_seed = inputs->from_seed;
  inputs_report.seed = seed;
  std::fputs(FormatExecInputs(inputs_report).c_str(), in.summary());
  InterpreterOptions o;
  o.simulate = true;
  o.compute_in_double = in.Switch("double");
  o.guard_bytes = guard;

  TensorMap saved;
  const bool has_backward = backward_path.has_value();
  if (absl::Status s =
          RunOnce(*pair, has_backward, *inputs, o, AotStepOptions{}, &saved, &in).status();
      !s.ok()) {
    return in.BadInput(s);
  }
  if (repeat > 0) {
    absl::Status s = TimeRepeats(in, *pair, has_backward, *inputs, o, repeat, in.Switch("profile"));
    if (!s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> out = in.Path("save")) {
    absl::Status written =
        WriteTextFile(in, *out, WriteSafetensors(saved, {{"producer", "overlap exec"}}));
    if (!written.ok()) return in.BadInput(written);
    std::fputs(FormatExecSaved(static_cast<int64_t>(saved.size()), *out).c_str(), in.summary());
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& ExecCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "exec";
    s.synopsis = "FILE [--backward-graph FILE] [options]";
    s.summary = "run a graph on the CPU kernels (or replay it), memory vs the simulator's";
    s.description =
        "Runs a graph with lifted parameters in its node order on the CPU kernels\n"
        "(docs/runtime.md), on tensors from --weights / --inputs and seeded ones for the\n"
        "rest; with --backward-graph, then its AOT backward (graph/aot.h's convention).\n"
        "Prints each output's checksum, the time, and the measured peak of graph values\n"
        "beside the simulator's at world size 1. Shape or dtype mismatches with meta, a\n"
        "missing parameter and an op without a kernel are errors naming the node.\n"
        "With --replay, no kernels: each compute node waits its device_time and buffers of\n"
        "each value's tensor_size are allocated and freed by the same rules, so any graph\n"
        "runs (random and exported ones too); a graph whose buffers exceed the available\n"
        "memory is refused up front (--count-only counts them instead).\n";
    s.flags = {kFlags};
    s.footer = "SIZE: bytes, or with KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).\n";
    s.min_positional = s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
