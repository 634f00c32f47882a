// overlap train: a built-in model's AOT pair trained in one process on a synthetic task
// (runtime/train/train.h), printing `step k loss x` lines.
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/output_file.h"
#include "graph/size.h"
#include "runtime/core/blas.h"
#include "runtime/core/safetensors.h"
#include "runtime/train/train.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"model", 0, "M", "the model (mlp, gpt2, llama-7b, llama-70b, resnet18, moe; default gpt2)"},
    {"preset", 0, "P", "model sizes: tiny (default; CPU sizes) or default (the real model)"},
    {"graph", 0, "FILE", "an AOT forward graph instead of --model (with --backward-graph)"},
    {"backward-graph", 0, "FILE", "the AOT backward of --graph"},
    {"data", 0, "D",
     "the batches (safetensors: inputs by placeholder name, or batch/<k>/<input> for step\n"
     "k+1, cycling; default: the synthetic task)"},
    {"steps", 0, "K", "optimizer steps (default 50)"},
    {"seed", 0, "S", "seed for the parameters and the data (default 1)"},
    {"weights", 0, "W", "start from these parameters (safetensors, by parameter name)"},
    {"save", 0, "OUT", "write the trained parameters (safetensors, by parameter name)"},
    {"threads", 0, "N", "OpenBLAS threads (default: OpenBLAS's own choice, the core count)"},
};

int Run(Invocation& in) {
  const std::string model = in.String("model").value_or(std::string(kDefaultModel));
  if (model == "random") {
    in.AddUsageError(
        "--model random has no kernels to train (its ops are placeholders): use mlp, gpt2, "
        "llama-7b, llama-70b, resnet18 or moe, or `overlap exec --replay` for a random graph");
  }
  absl::StatusOr<Preset> preset = ParsePreset(in.String("preset").value_or("tiny"));
  if (!preset.ok()) in.AddUsageError(std::string(preset.status().message()));
  const int64_t steps = in.Int("steps", 1, 1000000, 50);
  TrainOptions o;
  o.optimizer = ReadOptimizerFlags(in);
  const std::optional<std::string> graph = in.Path("graph");
  const std::optional<std::string> backward = in.Path("backward-graph");
  if (graph.has_value() != backward.has_value()) {
    in.AddUsageError("--graph and --backward-graph go together (an AOT pair)");
  }
  if (graph && in.Has("model")) in.AddUsageError("--graph or --model, not both");
  o.seed = static_cast<uint64_t>(in.Int("seed", 0, int64_t{1} << 62, 1));
  const int64_t threads = in.Int("threads", 1, 1024, 0);
  if (in.has_usage_error()) return in.UsageError();
  if (std::optional<std::string> out = in.Path("save")) {
    // Checked before step 1, not found wanting after the last.
    if (absl::Status s = CheckOutputPath(*out); !s.ok()) return in.BadInput(s);
  }
  if (threads > 0) SetBlasThreads(static_cast<int>(threads));
  Allocator alloc;
  if (std::optional<std::string> path = in.Path("weights")) {
    absl::StatusOr<TensorMap> w = ReadSafetensorsFile(*path, alloc);
    if (!w.ok()) return in.BadInput(w.status());
    o.initial_params = *std::move(w);
  }
  if (std::optional<std::string> path = in.Path("data")) {
    absl::StatusOr<TensorMap> all = ReadSafetensorsFile(*path, alloc);
    if (!all.ok()) return in.BadInput(all.status());
    absl::StatusOr<std::vector<TensorMap>> batches = SplitBatches(*all);
    if (!batches.ok()) return in.BadInput(batches.status());
    o.batches = *std::move(batches);
  }
  absl::StatusOr<Trainer> t = absl::InternalError("unset");
  std::string task;
  if (graph) {
    AotPair pair;
    absl::StatusOr<Graph> f = ReadGraphJsonFile(*graph);
    if (!f.ok()) return in.BadInput(f.status());
    absl::StatusOr<Graph> b = ReadGraphJsonFile(*backward);
    if (!b.ok()) return in.BadInput(b.status());
    pair.forward = *std::move(f);
    pair.backward = *std::move(b);
    t = Trainer::FromPair(std::move(pair), *graph, o);
    task = o.batches.empty() ? "one seeded batch, memorised"
                             : absl::StrCat(o.batches.size(), " batch(es) from the data file");
  } else {
    t = Trainer::Create(model, *preset, o);
    if (!o.batches.empty()) task = absl::StrCat(o.batches.size(), " batch(es) from the data file");
  }
  if (!t.ok()) return in.BadInput(t.status());
  if (task.empty()) {
    task = t->pair().forward.FindNode("input_ids") != kNoNode
               ? "copy task (the labels are the input tokens)"
               : (t->pair().forward.FindNode("targets") != kNoNode
                      ? "regression onto a fixed linear teacher"
                      : "one fixed batch, memorised");
  }
  const std::string name = graph ? *graph : model;
  int64_t param_count = 0;
  for (const auto& [name, p] : t->params()) param_count += p.numel();
  const BlasInfo blas = GetBlasInfo();
  std::fprintf(in.summary(), "OpenBLAS %s kernels, %d thread(s)\n", blas.corename.c_str(),
               blas.threads);
  std::fprintf(
      in.summary(), "training %s (%s, %s parameters) with %s, lr %g, seed %llu: %s\n", name.c_str(),
      graph ? "AOT pair from files" : (*preset == Preset::kTiny ? "tiny preset" : "default preset"),
      FormatCount(param_count).c_str(), o.optimizer.kind == OptimizerKind::kSgd ? "sgd" : "adamw",
      o.optimizer.lr, static_cast<unsigned long long>(o.seed), task.c_str());
  double first = 0, last = 0, seconds = 0;
  int64_t peak = 0;
  for (int64_t k = 1; k <= steps; ++k) {
    absl::StatusOr<StepResult> s = t->Step();
    if (!s.ok()) return in.BadInput(s.status());
    if (k == 1) first = s->loss;
    last = s->loss;
    seconds += s->seconds;
    peak = std::max(peak, s->peak_bytes());
    std::fprintf(in.out(), "step %lld loss %.6f\n", static_cast<long long>(k), s->loss);
    std::fflush(in.out());
  }
  std::fprintf(in.summary(),
               "%lld steps in %s (%s per step); loss %.4f -> %.4f (%.1f%% of the first); peak "
               "of graph values %s\n",
               static_cast<long long>(steps), FormatSeconds(seconds).c_str(),
               FormatSeconds(seconds / steps).c_str(), first, last,
               first != 0 ? 100 * last / first : 0.0, FormatBytes(peak).c_str());
  if (std::optional<std::string> out = in.Path("save")) {
    absl::Status written = WriteTextFile(
        in, *out, WriteSafetensors(t->params(), {{"producer", "overlap train"}, {"model", name}}));
    if (!written.ok()) return in.BadInput(written);
    std::fprintf(in.summary(), "wrote %lld parameters to %s\n",
                 static_cast<long long>(t->params().size()), out->c_str());
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& TrainCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "train";
    s.synopsis = "[--model M | --graph F --backward-graph B] [--data D] [--steps K] [options]";
    s.summary = "train a built-in model or an AOT pair in one process";
    s.description =
        "Trains a built-in model's AOT pair (overlap gen M --lifted / --backward) on the CPU\n"
        "kernels: forward, backward, then the optimizer, one batch per step. The task is\n"
        "synthetic: language models copy their input tokens (fresh sequences each step),\n"
        "mlp regresses onto a fixed random linear teacher, resnet18 memorises one batch.\n"
        "--graph / --backward-graph train an AOT pair read from files (e.g. the exporter's,\n"
        "docs/interop.md) from --weights, on the batches of --data.\n"
        "Prints `step k loss x` per step on stdout and a summary with the time per step.\n";
    s.flags = {kFlags, TrainingOptimizerFlags()};
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
