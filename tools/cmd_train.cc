// overlap train: a built-in model's AOT pair trained in one process on a synthetic task
// (runtime/train/train.h), printing `step k loss x` lines.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/aot_files.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/output_file.h"
#include "graph/size.h"
#include "runtime/core/blas.h"
#include "runtime/core/safetensors.h"
#include "runtime/train/train.h"
#include "runtime/train/train_report.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"steps", 0, "K", "optimizer steps (default 50)"},
    {"threads", 0, "N", "OpenBLAS and oneDNN threads (default: the core count)"},
    {"double", 0, "",
     "train in float64 whatever the graph's float dtypes (parameters, buffers and --save too)"},
};

int Run(Invocation& in) {
  const TrainingInputs inputs = ReadTrainingInputFlags(in);
  const std::string& model = inputs.model;
  const Preset preset = inputs.preset;
  const int64_t steps = in.Int("steps", 1, 1000000, 50);
  TrainOptions o;
  o.optimizer = ReadOptimizerFlags(in);
  const std::optional<std::string> graph =
      inputs.graph_path.empty() ? std::nullopt : std::optional<std::string>(inputs.graph_path);
  const std::string& backward = inputs.backward_graph_path;
  o.seed = inputs.seed;
  o.compute_in_double = in.Switch("double");
  const int64_t threads = in.Int("threads", 1, 1024, 0);
  if (in.has_usage_error()) return in.UsageError();
  if (!inputs.save_path.empty()) {
    // Checked before step 1, not found wanting after the last.
    if (absl::Status s = CheckOutputPath(inputs.save_path); !s.ok()) return in.BadInput(s);
  }
  if (threads > 0) {
    SetBlasThreads(static_cast<int>(threads));  // OpenBLAS's pool and OpenMP's
  }
  Allocator alloc;
  if (!inputs.weights_path.empty()) {
    absl::StatusOr<TensorMap> w =
        ReadSafetensorsFile(inputs.weights_path, alloc, IsReferenceTensor);
    if (!w.ok()) return in.BadInput(w.status());
    o.initial_params = *std::move(w);
  }
  if (!inputs.data_path.empty()) {
    absl::StatusOr<TensorMap> all = ReadSafetensorsFile(inputs.data_path, alloc, IsReferenceTensor);
    if (!all.ok()) return in.BadInput(all.status());
    absl::StatusOr<std::vector<TensorMap>> batches = SplitBatches(*all);
    if (!batches.ok()) return in.BadInput(batches.status());
    o.batches = *std::move(batches);
  }
  absl::StatusOr<Trainer> t = absl::InternalError("unset");
  std::string task;
  if (graph) {
    absl::StatusOr<AotPair> pair = ReadAotPairFiles(*graph, backward);
    if (!pair.ok()) return in.BadInput(pair.status());
    t = Trainer::FromPair(*std::move(pair), *graph, o);
    task = o.batches.empty() ? "one seeded batch, memorised"
                             : absl::StrCat(o.batches.size(), " batch(es) from the data file");
  } else {
    t = Trainer::Create(model, preset, o);
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
  const BlasInfo blas = GetBlasInfo();
  TrainStartReport start;
  start.float32_products = blas.float32;
  start.pool_threads = blas.pool_threads;
  start.float64_core = blas.corename;
  start.float64_threads = blas.threads;
  start.name = name;
  start.source =
      graph ? "AOT pair from files" : (preset == Preset::kTiny ? "tiny preset" : "default preset");
  for (const auto& [param, p] : t->params()) start.parameters += p.numel();
  start.optimizer = OptimizerLabel(o.optimizer);
  start.lr = o.optimizer.lr;
  start.seed = o.seed;
  start.task = task;
  std::fputs(FormatTrainStart(start).c_str(), in.summary());
  TrainSummaryReport summary;
  summary.steps = steps;
  for (int64_t k = 1; k <= steps; ++k) {
    absl::StatusOr<StepResult> s = t->Step();
    if (!s.ok()) return in.BadInput(s.status());
    if (k == 1) summary.first_loss = s->loss;
    summary.last_loss = s->loss;
    summary.seconds += s->seconds;
    summary.peak_bytes = std::max(summary.peak_bytes, s->peak_bytes());
    std::fputs(FormatTrainStep(k, s->loss, s->seconds).c_str(), in.out());
    std::fflush(in.out());
  }
  std::fputs(FormatTrainSummary(summary).c_str(), in.summary());
  if (!inputs.save_path.empty()) {
    // The parameters by name and the buffers as the steps left them (buffer/<name>).
    TensorMap trained = t->params();
    int64_t buffers = 0;
    for (const auto& [key, b] : t->buffers()) {
      if (!absl::StartsWith(key, "buffer/")) continue;
      trained[key] = b;
      ++buffers;
    }
    absl::Status written =
        WriteTextFile(in, inputs.save_path,
                      WriteSafetensors(trained, {{"producer", "overlap train"}, {"model", name}}));
    if (!written.ok()) return in.BadInput(written);
    std::fputs(FormatTrainSaved(static_cast<int64_t>(t->params().size()), buffers, inputs.save_path)
                   .c_str(),
               in.summary());
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
    s.flags = {kFlags, TrainingInputFlags(), TrainingOptimizerFlags()};
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
