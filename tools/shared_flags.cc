#include "tools/shared_flags.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/dc_ops.h"
#include "graph/errors.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "graph/output_file.h"
#include "graph/random_graph.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "graph/structural_backward.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

constexpr FlagSpec kCollectiveFlags[] = {
    {"world-size", 0, "N", "ranks (default 32)"},
    {"latency-us", 0, "X", "collective latency in microseconds (default 20)"},
    {"bandwidth", 0, "X", "per-rank bandwidth in GB/s (default 50)"},
    {"host-bandwidth", 0, "X",
     "the host link's bandwidth in GB/s, what offloaded tensors move over\n"
     "(default 25, PCIe-like)"},
    {"collective-model", 0, "FILE",
     "a fitted model (overlap bench-comm --save): per-collective latency and\n"
     "bandwidth; --world-size overrides its world size, --latency-us and\n"
     "--bandwidth replace its fits with one shared figure"},
};

constexpr FlagSpec kBudgetFlags[] = {
    {"memory-limit", 0, "SIZE",
     "the budget on the simulated peak memory (transient tensors; the\n"
     "per-rank state is not in it)"},
    {"device-memory", 0, "SIZE",
     "the device's memory: the budget is SIZE minus the per-rank state\n"
     "(parameter, gradient and optimizer shards) minus --reserve"},
    {"reserve", 0, "SIZE", "with --device-memory: what tensors cannot use (default 512 MiB + 5%)"},
};

// The optimizer as the budget sees it: its per-rank state (schedule/optimizer.h).
constexpr FlagSpec kOptimizerStateFlags[] = {
    {"optimizer", 0, "O", "sgd or adamw (default): its per-rank state"},
    {"momentum", 0, "X", "sgd's momentum (default 0.9; 0: plain SGD, no state)"},
};

constexpr FlagSpec kDeviceFlags[] = {
    {"peak-tflops", 0, "X", "16-bit peak of the roofline cost model (default 989, H100 SXM)"},
    {"peak-tflops-fp32", 0, "X", "32-bit (TF32) peak (default 494)"},
    {"mem-bandwidth", 0, "X", "memory bandwidth in GB/s (default 3350)"},
};

constexpr FlagSpec kTrainingOptimizerFlags[] = {
    {"optimizer", 0, "O", "sgd or adamw (default)"},
    {"lr", 0, "X", "learning rate (default 0.01 for adamw, 0.1 for sgd)"},
    {"momentum", 0, "X", "sgd's momentum (default 0.9; 0: plain SGD, no state)"},
    {"weight-decay", 0, "X", "decoupled for adamw, L2 for sgd (default 0)"},
};

// What a training command trains and on what (train, run, worker).
constexpr FlagSpec kTrainingInputFlags[] = {
    {"model", 0, "M",
     "a built-in model (mlp, gpt2, llama-7b, llama-70b, resnet18, moe;\n"
     "default gpt2)"},
    {"preset", 0, "P", "model sizes: tiny (default; CPU sizes) or default (the real one)"},
    {"graph", 0, "FILE", "an AOT forward graph instead of --model (with --backward-graph)"},
    {"backward-graph", 0, "FILE", "the AOT backward of --graph"},
    {"weights", 0, "W",
     "initial parameters (safetensors, by parameter name; default seeded):\n"
     "every parameter, else an error naming the missing ones; a tensor\n"
     "that is no parameter or input is an error (docs/runtime.md)"},
    {"data", 0, "D",
     "the batches (safetensors: inputs by placeholder name, or\n"
     "batch/<k>/<input> for step k+1, cycling; under run each rank trains\n"
     "on its block of rows; default: the synthetic task, or seeded inputs\n"
     "for graph files)"},
    {"save", 0, "OUT",
     "write the trained parameters (safetensors, by parameter name; run:\n"
     "rank 0)"},
    {"seed", 0, "S", "seed for the parameters and the data (default 1)"},
};

constexpr FlagSpec kModelFlags[] = {
    {"lifted", 0, "",
     "parameters as placeholders with meta.param (AOT / ZeRO-3 style);\n"
     "default: owned by call_module / get_attr nodes (torch.fx style)"},
    {"loss", 0, "KIND",
     "cross_entropy, mse or none: the loss the forward ends in\n"
     "(default: cross_entropy for the language models and resnet18, mse for mlp)"},
    {"preset", 0, "NAME",
     "default or tiny: the model's sizes (tiny: float32, milliseconds on a CPU)"},
    {"batch", 0, "N", "override the preset's batch (transformers, mlp, resnet18)"},
    {"seq", 0, "N", "override the preset's sequence length (transformers)"},
    {"layers", 0, "N", "override the preset's layer count (transformers; mlp: N linear layers)"},
    {"width", 0, "W", "mlp only: the hidden layers' width (default: the preset's)"},
    {"nodes", 0, "N", "random only: total nodes (default 100)"},
    {"seed", 0, "S", "random only: seed (default 1); the same seed gives the same graph"},
    {"sparse-meta", 0, "", "random only: give metadata to about half of the nodes only"},
};

// Limits that fit the machine (docs/limits.md): a graph of kMaxNodes nodes takes about
// 8 GiB in memory; the preset overrides keep every tensor size within int64 (an attention
// score tensor is batch x heads x seq^2 elements).
constexpr int64_t kMaxNodes = 10'000'000;
constexpr int64_t kMaxBatch = int64_t{1} << 16;
constexpr int64_t kMaxSeq = int64_t{1} << 17;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 20;
// The cost-model flags: below these a device time can overflow to infinity.
constexpr double kMinTflops = 1e-6;
constexpr double kMinBandwidthGbps = 1e-6;

}  // namespace

absl::Span<const FlagSpec> CollectiveFlags() { return kCollectiveFlags; }

std::optional<CollectiveModel> ReadCollectiveModelFlag(Invocation& in) {
  std::optional<std::string> path = in.Path("collective-model");
  if (!path) return std::nullopt;
  absl::StatusOr<CollectiveModel> m = ReadCollectiveModelFile(*path);
  if (!m.ok()) {
    in.AddUsageError(absl::StrCat("--collective-model: ", m.status().message()));
    return std::nullopt;
  }
  return *m;
}

CollectiveModel ReadCollectiveFlags(Invocation& in) {
  CollectiveModel model = ReadCollectiveModelFlag(in).value_or(CollectiveModel());
  model.world_size = static_cast<int>(in.Int("world-size", 1, int64_t{1} << 24, model.world_size));
  // Only a given flag changes a default (a unit round trip could change its last bit).
  if (in.Has("latency-us") || in.Has("bandwidth")) {
    model.allgather = model.reduce_scatter = model.allreduce = CollectiveModel::Fit{};
  }
  if (in.Has("latency-us")) model.latency_s = in.NonNegative("latency-us", 1e9, 0) * 1e-6;
  if (in.Has("bandwidth")) {
    model.bandwidth_bytes_per_s = in.Bounded("bandwidth", kMinBandwidthGbps, 1e30, 1) * 1e9;
  }
  if (in.Has("host-bandwidth")) {
    model.host_bandwidth_bytes_per_s =
        in.Bounded("host-bandwidth", kMinBandwidthGbps, 1e30, 1) * 1e9;
  }
  return model;
}

absl::Span<const FlagSpec> BudgetFlags() { return kBudgetFlags; }

BudgetRequest ReadBudgetFlags(Invocation& in, int world_size, const OptimizerOptions& optimizer) {
  BudgetRequest r;
  r.state.world_size = world_size;
  r.state.optimizer = optimizer;
  if (in.Has("memory-limit") && in.Has("device-memory")) {
    in.AddUsageError("--memory-limit and --device-memory both set the budget: give one");
  }
  if (in.Has("reserve") && !in.Has("device-memory")) {
    in.AddUsageError("--reserve applies only with --device-memory");
  }
  r.device_memory_bytes = in.Size("device-memory");
  r.reserve_bytes = in.Size("reserve");
  r.budget_bytes = in.PositiveSize("memory-limit", "no limit");
  return r;
}

void PrintNoFit(const Invocation& in, absl::string_view what, int64_t budget_bytes,
                int64_t min_feasible_bytes) {
  std::fprintf(in.err(),
               "overlap: error: no %s fits the memory budget of %s; the smallest feasible "
               "budget found is %s (%lld bytes)\n",
               std::string(what).c_str(), FormatBytes(budget_bytes).c_str(),
               FormatBytes(min_feasible_bytes).c_str(), static_cast<long long>(min_feasible_bytes));
}

std::string FormatBudget(const MemoryBudget& b, int64_t peak_memory_bytes) {
  if (!b.budget_bytes) return "";
  std::string out = absl::StrCat("budget ", FormatBytes(*b.budget_bytes));
  if (b.device_bytes) {
    absl::StrAppend(&out, " (device ", FormatBytes(*b.device_bytes), " - per-rank state ",
                    FormatBytes(b.state_bytes), " - reserve ", FormatBytes(b.reserve_bytes), ")");
  }
  absl::StrAppend(&out, peak_memory_bytes <= *b.budget_bytes ? ": the peak fits\n"
                                                             : ": the peak does NOT fit\n");
  return out;
}

void NoteMissingDeviceTimes(const Invocation& in, const Graph& g) {
  int64_t calls = 0, missing = 0;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kCallFunction && n.op() != Op::kCallMethod && n.op() != Op::kCallModule) {
      continue;
    }
    if (absl::StartsWith(n.target(), kZero3Prefix)) continue;  // ZeRO-3's ops take no compute time
    ++calls;
    missing += !n.meta().has_device_time;
  }
  if (missing == 0) return;
  std::fprintf(in.err(),
               "overlap: note: %lld of %lld compute nodes have no device_time and count as 0 "
               "(graphs exported from PyTorch have none): `overlap annotate FILE -o OUT` "
               "estimates them (docs/cost-model.md)\n",
               static_cast<long long>(missing), static_cast<long long>(calls));
}

absl::Span<const FlagSpec> ModelFlags() { return kModelFlags; }

absl::Span<const FlagSpec> TrainingOptimizerFlags() { return kTrainingOptimizerFlags; }

absl::Span<const FlagSpec> OptimizerStateFlags() { return kOptimizerStateFlags; }

absl::Span<const FlagSpec> TrainingInputFlags() { return kTrainingInputFlags; }

TrainingInputs ReadTrainingInputFlags(Invocation& in) {
  TrainingInputs t;
  t.model = in.String("model").value_or(std::string(kDefaultModel));
  if (t.model == "random") {
    in.AddUsageError(
        "--model random has no kernels to train (its ops are placeholders): use mlp, gpt2, "
        "llama-7b, llama-70b, resnet18 or moe, or `overlap exec --replay` for a random graph");
  }
  absl::StatusOr<Preset> preset = ParsePreset(in.String("preset").value_or("tiny"));
  if (preset.ok()) {
    t.preset = *preset;
  } else {
    in.AddUsageError(std::string(preset.status().message()));
  }
  t.graph_path = in.Path("graph").value_or("");
  t.backward_graph_path = in.Path("backward-graph").value_or("");
  if (t.graph_path.empty() != t.backward_graph_path.empty()) {
    in.AddUsageError("--graph and --backward-graph go together (an AOT pair)");
  }
  if (!t.graph_path.empty() && in.Has("model")) in.AddUsageError("--graph or --model, not both");
  t.weights_path = in.Path("weights").value_or("");
  t.data_path = in.Path("data").value_or("");
  t.save_path = in.Path("save").value_or("");
  t.seed = static_cast<uint64_t>(in.Int("seed", 0, int64_t{1} << 62, 1));
  return t;
}

OptimizerOptions ReadOptimizerFlags(Invocation& in) {
  OptimizerOptions o;
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(in.String("optimizer").value_or("adamw"));
  if (kind.ok()) {
    o.kind = *kind;
  } else {
    in.AddUsageError(absl::StrCat("--optimizer: ", kind.status().message()));
  }
  o.lr = in.Positive("lr", 1e3, o.kind == OptimizerKind::kSgd ? 0.1 : 0.01);
  o.momentum = in.NonNegative("momentum", 1, 0.9);
  o.weight_decay = in.NonNegative("weight-decay", 1e3, 0);
  return o;
}
absl::Span<const FlagSpec> DeviceFlags() { return kDeviceFlags; }

DeviceSpec ReadDeviceFlags(Invocation& in) {
  DeviceSpec d;
  // Only a given flag changes a default (a unit round trip could change its last bit).
  if (in.Has("peak-tflops")) {
    d.peak_flops_16bit = in.Bounded("peak-tflops", kMinTflops, 1e30, 1) * 1e12;
  }
  if (in.Has("peak-tflops-fp32")) {
    d.peak_flops_32bit = in.Bounded("peak-tflops-fp32", kMinTflops, 1e30, 1) * 1e12;
  }
  if (in.Has("mem-bandwidth")) {
    d.memory_bandwidth = in.Bounded("mem-bandwidth", kMinBandwidthGbps, 1e30, 1) * 1e9;
  }
  return d;
}

namespace {

absl::StatusOr<Graph> BuildUnchecked(Invocation& in, const std::string& name, bool lifted) {
  ModelOptions o;
  o.style = lifted ? ParamStyle::kLifted : ParamStyle::kModule;
  if (in.Has("loss")) {
    absl::StatusOr<LossKind> loss = ParseLossKind(in.String("loss").value_or(""));
    if (!loss.ok()) {
      in.AddUsageError(absl::StrCat("--loss: ", loss.status().message()));
    } else {
      o.loss = *loss;
    }
  }
  o.device = ReadDeviceFlags(in);
  Preset preset = Preset::kDefault;
  if (in.Has("preset")) {
    absl::StatusOr<Preset> p = ParsePreset(in.String("preset").value_or(""));
    if (!p.ok()) {
      in.AddUsageError(absl::StrCat("--preset: ", p.status().message()));
    } else {
      preset = *p;
    }
  }
  const int64_t batch = in.Int("batch", 1, kMaxBatch, 0);
  const int64_t seq = in.Int("seq", 1, kMaxSeq, 0);
  const int64_t layers = in.Int("layers", 1, kMaxLayers, 0);
  if (name == "random") {
    RandomGraphOptions r;
    r.nodes = in.Int("nodes", 2, kMaxNodes, r.nodes);
    r.seed = static_cast<uint64_t>(in.Int("seed", 0, INT64_MAX, 1));
    r.lifted = o.style == ParamStyle::kLifted;
    r.full_meta = !in.Switch("sparse-meta");
    if (in.Has("loss") || in.Has("preset")) {
      in.AddUsageError("--loss and --preset apply to the built-in models only");
    }
    if (in.has_usage_error()) return Graph();
    return RandomGraph(r);
  }
  if (in.Has("nodes") || in.Has("seed") || in.Has("sparse-meta")) {
    in.AddUsageError("--nodes, --seed and --sparse-meta apply to the random model only");
  }
  const bool transformer =
      name == "gpt2" || name == "llama-7b" || name == "llama-70b" || name == "moe";
  const int64_t width = in.Int("width", 1, kMaxWidth, 0);
  if (seq && !transformer) in.AddUsageError("--seq applies to the transformer models only");
  if (layers && !transformer && name != "mlp") {
    in.AddUsageError("--layers applies to the transformer models and mlp only");
  }
  if (width && name != "mlp") in.AddUsageError("--width applies to mlp only");
  if (in.has_usage_error()) return Graph();
  if (transformer) {
    TransformerConfig c = name == "gpt2"        ? Gpt2Config(preset)
                          : name == "llama-7b"  ? Llama7bConfig(preset)
                          : name == "llama-70b" ? Llama70bConfig(preset)
                                                : MoeConfig(preset);
    if (batch) c.batch = batch;
    if (seq) c.seq = seq;
    if (layers) c.layers = layers;
    return BuildTransformer(c, o);
  }
  if (name == "mlp") {
    MlpConfig c = MlpPreset(preset);
    if (batch) c.batch = batch;
    if (layers || width) c = ResizeMlp(c, layers, width);
    return BuildMlp(c, o);
  }
  if (name == "resnet18") {
    ResNetConfig c = ResNetPreset(preset);
    if (batch) c.batch = batch;
    return BuildResNet(c, o);
  }
  absl::StatusOr<Graph> g = BuildModel(name, o, preset);
  if (IsUnknownName(g.status())) in.AddUsageError(std::string(g.status().message()));
  return g;
}

}  // namespace

namespace {

// The graph the flags describe, verified (a failure is the flags' fault: a usage error).
absl::StatusOr<Graph> BuildVerified(Invocation& in, const std::string& name, bool lifted) {
  absl::StatusOr<Graph> g = BuildUnchecked(in, name, lifted);
  if (in.has_usage_error() || !g.ok()) return g;
  // Whatever the flags asked for must be a graph the CLI can read back (finite times, sizes
  // within int64): otherwise it is the flags' fault.
  if (absl::Status s = Verify(*g); !s.ok()) {
    in.AddUsageError(absl::StrCat("the model these flags describe is invalid: ", s.message()));
  }
  return g;
}

}  // namespace

absl::StatusOr<AotPair> BuildAotPairFromFlags(Invocation& in, const std::string& name) {
  if (name == "random") {
    in.AddUsageError("the random model has no AOT pair (its backward is structural)");
    return absl::InvalidArgumentError("usage");
  }
  absl::StatusOr<Graph> g = BuildVerified(in, name, /*lifted=*/true);
  if (in.has_usage_error()) return absl::InvalidArgumentError("usage");
  if (!g.ok()) return g.status();
  AotOptions aot;
  aot.device = ReadDeviceFlags(in);
  absl::StatusOr<AotPair> pair = BuildAotPair(*g, aot);
  if (!pair.ok()) return pair.status();
  OVERLAP_RETURN_IF_ERROR(CheckAfter(pair->forward, "building the AOT forward"));
  OVERLAP_RETURN_IF_ERROR(CheckAfter(pair->backward, "building the AOT backward"));
  return pair;
}

absl::StatusOr<Graph> BuildModelFromFlags(Invocation& in, const std::string& name,
                                          ModelGraph which) {
  if (which == ModelGraph::kAsFlagged) {
    which = in.Switch("lifted") ? ModelGraph::kForward : ModelGraph::kModule;
  }
  if (which == ModelGraph::kModule) return BuildVerified(in, name, /*lifted=*/false);
  if (name == "random") {
    absl::StatusOr<Graph> g = BuildVerified(in, name, /*lifted=*/true);
    if (in.has_usage_error() || !g.ok() || which == ModelGraph::kForward) return g;
    absl::StatusOr<Graph> b = BuildStructuralBackward(*g);
    if (!b.ok()) return b.status();
    OVERLAP_RETURN_IF_ERROR(CheckAfter(*b, "building the structural backward graph"));
    return b;
  }
  absl::StatusOr<AotPair> pair = BuildAotPairFromFlags(in, name);
  if (in.has_usage_error()) return Graph();
  if (!pair.ok()) return pair.status();
  return std::move(which == ModelGraph::kForward ? pair->forward : pair->backward);
}

std::string WorkerExecutable() {
  const char* b = std::getenv("OVERLAP_WORKER_BINARY");
  if (b != nullptr) return b;
  // The real path, not /proc/self/exe: the kernel names a process after the file it runs,
  // so the ranks show as `overlap`, not `exe`, in ps and top.
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(path, static_cast<size_t>(n));
}

absl::Status WriteTextFile(const Invocation& in, const std::string& path, absl::string_view text) {
  return WriteFileAtomically(path, text, in.out());
}

absl::Status WriteGraphFile(const Invocation& in, const std::string& path, const Graph& g) {
  return path == "-" ? WriteGraphJsonStream(g, in.out()) : WriteGraphJsonFile(g, path);
}

absl::Status CheckAfter(const Graph& g, absl::string_view step) {
  absl::Status s = Verify(g);
  if (s.ok()) return s;
  return absl::InternalError(absl::StrCat("the graph is invalid after ", step, ": ", s.message()));
}

}  // namespace overlap
