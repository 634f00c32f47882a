// overlap demo: the README's first command, the whole pipeline on a built-in model.
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/annotate.h"
#include "graph/errors.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "graph/op_schema.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "graph/summary.h"
#include "graph/verifier.h"
#include "partition/bucket_cap.h"
#include "partition/ddp_partitioner.h"
#include "runtime/comm/store_server.h"
#include "runtime/core/blas.h"
#include "runtime/core/dnnl_conv.h"
#include "runtime/job/backend.h"
#include "runtime/job/launcher.h"
#include "runtime/train/train.h"
#include "schedule/budget.h"
#include "schedule/report.h"
#include "schedule/scheduler_registry.h"
#include "schedule/step_plan.h"
#include "schedule/timeline_svg.h"
#include "schedule/zero3_insertion.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

using Clock = std::chrono::steady_clock;

constexpr FlagSpec kDemoFlags[] = {
    {"svg", 0, "OUT", "where step [8] draws its picture (default /tmp/overlap_demo_MODEL.svg)",
     true},
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One scheduler's line of step [5].
void PrintRow(Invocation& in, const std::string& label, const SimulationResult& sim,
              const std::string& note) {
  std::fprintf(
      in.out(),
      "  %-16s: peak gathered %s, peak memory %s, step %s (lower bound %s, exposed %s)%s\n",
      label.c_str(), FormatBytes(sim.peak_gathered_bytes).c_str(),
      FormatBytes(sim.peak_memory_bytes).c_str(), FormatSeconds(sim.step_time_s).c_str(),
      FormatSeconds(sim.lower_bound_s).c_str(), FormatSeconds(sim.exposed_comm_s).c_str(),
      note.c_str());
}

// [4] DDP partitioning: PyTorch's reference next to ours, and the cap the model picks.
absl::Status ShowPartitions(Invocation& in, const Graph& g) {
  std::fputs("[4] DDP bucket partitioning (25 MiB cap, first bucket 1 MiB):\n", in.out());
  for (PartitionMode mode :
       {PartitionMode::kReference, PartitionMode::kReference2x, PartitionMode::kDefault}) {
    PartitionOptions po;
    po.buckets.mode = mode;
    const auto start = Clock::now();
    OVERLAP_ASSIGN_OR_RETURN(const PartitionResult r, DdpPartitioner(po).Run(g));
    int empty = 0;
    for (const Submodule& s : r.pieces.submodules) empty += s.outputs.empty();
    int64_t counted = 0;
    for (const Bucket& b : r.buckets) counted += b.size_bytes;
    std::fprintf(in.out(),
                 "  %-12s: %zu buckets, %s counted, %zu subgraphs (%d without outputs), "
                 "split in %.1f ms\n",
                 std::string(PartitionModeName(mode)).c_str(), r.buckets.size(),
                 FormatBytes(counted).c_str(), r.pieces.submodules.size(), empty,
                 Ms(Clock::now() - start));
  }
  std::fputs(
      "  (reference: PyTorch 2.0's DDPOptimizer; reference-2x: 2.x's, equal to torch 2.14.1's "
      "own buckets on 30 models: tools/ddp_optimizer_oracle.py)\n",
      in.out());
  OVERLAP_ASSIGN_OR_RETURN(const CapChoice cap,
                           ChooseBucketCap(g, PartitionMode::kDefault, CollectiveModel()));
  for (const CapCandidate& c : cap.candidates) {
    if (c.cap_bytes == kDefaultBucketCapBytes || c.cap_bytes == cap.cap_bytes) {
      std::fprintf(in.out(), "  cap %-9s -> %2d buckets, predicted exposed allreduce %s%s\n",
                   FormatBytes(c.cap_bytes).c_str(), c.buckets, FormatSeconds(c.exposed_s).c_str(),
                   c.cap_bytes == cap.cap_bytes ? "  (best of --bucket-cap auto)" : "");
    }
  }
  return absl::OkStatus();
}

// [5] The AOT pair: forward and backward sizes, the loss, what the forward saves.
void ShowAotPair(Invocation& in, const AotPair& pair, double build_ms) {
  const Graph& f = pair.forward;
  const Graph& b = pair.backward;
  std::string loss = "none (the model's output)";
  const Node& out = f.node(f.last());
  if (!out.args().empty() && out.args()[0].kind() == Value::Kind::kList &&
      !out.args()[0].items().empty() && out.args()[0].items()[0].is_ref()) {
    const Node& first = f.node(out.args()[0].items()[0].as_ref());
    // The loss is a scalar; its producer says which (docs/ops.md).
    if (first.meta().has_shape && first.meta().shape.empty()) {
      const NodeId src = first.target() == "operator.getitem" ? first.inputs()[0] : first.id();
      loss = f.node(src).target() == "aten.nll_loss_forward.default"
                 ? "cross-entropy (aten._log_softmax + aten.nll_loss_forward), a scalar"
                 : absl::StrCat(f.node(src).target(), ", a scalar");
    }
  }
  int64_t gradients = 0;
  const Node& bout = b.node(b.last());
  if (!bout.args().empty() && bout.args()[0].kind() == Value::Kind::kList) {
    for (const Value& v : bout.args()[0].items()) gradients += v.is_ref();
  }
  std::fprintf(in.out(), "[5] AOT pair (graph/aot.h, built in %.1f ms); loss: %s\n", build_ms,
               loss.c_str());
  std::fprintf(in.out(),
               "  forward : %s nodes; returns the loss and %lld saved tensors (%s of activations "
               "kept for the backward)\n",
               FormatCount(f.size()).c_str(), static_cast<long long>(pair.num_saved),
               FormatBytes(pair.saved_bytes).c_str());
  std::fprintf(in.out(),
               "  backward: %s nodes; reads %lld of %zu parameters (%lld absent from it), "
               "returns %lld gradients\n",
               FormatCount(b.size()).c_str(), static_cast<long long>(pair.num_primals),
               f.params().size(), static_cast<long long>(ClassifyParams(b).absent),
               static_cast<long long>(gradients));
  // Every operator of both graphs is declared once (graph/op_schema.h); the shape rules,
  // kernels, cost and backward formulas read its arguments by name from there.
  std::set<std::string> ops;
  int64_t views = 0;
  for (const Graph* g : {&f, &b}) {
    for (NodeId id : g->order()) {
      const OpSchema* s = FindOpSchema(g->node(id).target());
      if (s != nullptr && ops.insert(s->target).second) views += s->ViewOf() >= 0;
    }
  }
  std::fprintf(in.out(),
               "  operators: %zu ATen overloads, %lld of them views, each declared once in "
               "graph/op_schema.cc (of %zu declared; docs/ops.md is rendered from it)\n",
               ops.size(), static_cast<long long>(views), OpSchemas().size());
  std::fputs(
      "  exported models run too: tools/zoo.py takes every torchvision classifier, torch.nn's "
      "common layers (LSTM, GRU, attention, GroupNorm, ConvTranspose2d, Upsample), 19 "
      "transformers families (GPT-2, Llama, Mistral, Qwen2, Gemma, Phi-3, BERT, T5, BART, "
      "Whisper, wav2vec2, ViT, Swin, CLIP, ...) and 12 timm families through every pass and "
      "the executor against torch 2.x (docs/gallery.md)\n",
      in.out());
}

// [6] ZeRO-3: every scheduler of the registry on the AOT forward with the ops inserted;
// ours with a budget of 1.25x fast_free's peak (the smallest baseline peak when fast_free
// cannot schedule the graph), and its explanation.
absl::Status ShowSchedules(Invocation& in, Graph zg, const char* what) {
  Graph* z = &zg;
  OVERLAP_RETURN_IF_ERROR(Zero3Insertion(GraphKind::kForward).Run(z).status());
  OVERLAP_RETURN_IF_ERROR(CheckAfter(*z, "ZeRO-3 insertion"));
  int64_t gathers = 0;
  for (NodeId id : z->order()) gathers += IsAllgather(z->node(id));
  std::fprintf(in.out(),
               "[6] ZeRO-3 on the %s (32 ranks, 20 us, 50 GB/s): %lld allgathers inserted\n", what,
               static_cast<long long>(gathers));
  OVERLAP_ASSIGN_OR_RETURN(const SimulationResult plain, Simulate(*z, z->OrderVector()));
  PrintRow(in, "insertion order", plain, "");
  std::optional<int64_t> smallest_peak, fast_free_peak;
  for (const SchedulerEntry& e : Schedulers()) {
    if (e.honours_budget) continue;  // after the baselines, with a budget
    Graph g = *z;
    absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &g);
    if (!r.ok()) {
      if (!IsUnsupported(r.status())) return r.status();
      std::fprintf(in.out(), "  %-16s: cannot schedule this graph: %s\n",
                   std::string(e.name).c_str(), std::string(r.status().message()).c_str());
      continue;
    }
    const SimulationResult& sim = r->simulation;
    if (!smallest_peak || sim.peak_memory_bytes < *smallest_peak) {
      smallest_peak = sim.peak_memory_bytes;
    }
    if (e.name == "fast_free") fast_free_peak = sim.peak_memory_bytes;
    PrintRow(in, std::string(e.name), sim, "");
  }
  SchedulerOptions ours_options;
  const std::optional<int64_t> base = fast_free_peak ? fast_free_peak : smallest_peak;
  if (base) ours_options.lookahead.budget_bytes = *base * 5 / 4;
  Graph g = *z;
  OVERLAP_ASSIGN_OR_RETURN(const ScheduleReport ours,
                           RunScheduler(DefaultSchedulerName(), &g, ours_options));
  const std::string budget =
      base ? absl::StrCat("1.25x ", fast_free_peak ? "fast_free's" : "the smallest baseline",
                          " peak, ", FormatBytes(*base * 5 / 4))
           : "none";
  PrintRow(in, absl::StrCat(DefaultSchedulerName(), " (ours)"), ours.simulation,
           absl::StrCat("  [budget ", budget, "]"));
  std::fprintf(in.out(),
               "  ours: %s; no parameter kept resident (in the forward step each would be "
               "refreshed every step: no communication saved)\n",
               ours.lookahead->base == kPrefetchBase
                   ? absl::StrCat("k = ", ours.lookahead->lookahead,
                                  " allgathers in flight ahead of compute")
                         .c_str()
                   : absl::StrCat(ours.lookahead->base, "'s order").c_str());
  std::fputs(
      "[7] why ours chose that (`overlap schedule --explain`): the candidates it simulated\n",
      in.out());
  std::fputs(FormatExplainTable(ours, 12).c_str(), in.out());
  return absl::OkStatus();
}

// [8] A budget from the device: 80 GB less the per-rank state (adam) and the reserve; ours
// schedules the AOT backward (or the random graph) under it, and the step is drawn as SVG.
absl::Status ShowDeviceBudget(Invocation& in, Graph g, GraphKind kind, const std::string& model) {
  OVERLAP_RETURN_IF_ERROR(Zero3Insertion(kind).Run(&g).status());
  OVERLAP_RETURN_IF_ERROR(CheckAfter(g, "ZeRO-3 insertion"));
  StateOptions state;  // AdamW (two fp32 moments), 32 ranks
  OVERLAP_ASSIGN_OR_RETURN(const RankState parts, PerRankState(g, state));
  OVERLAP_ASSIGN_OR_RETURN(const MemoryBudget budget,
                           DeviceMemoryBudget(g, int64_t{80} * 1000 * 1000 * 1000, state));
  std::fprintf(in.out(),
               "[8] a budget from the device (`--device-memory 80GB --optimizer adamw`): per-rank "
               "state %s (parameter shards %s, gradient shards %s, adamw %s, fp32 master %s), "
               "reserve %s: %s for the step\n",
               FormatBytes(parts.total()).c_str(), FormatBytes(parts.params).c_str(),
               FormatBytes(parts.grads).c_str(), FormatBytes(parts.optimizer).c_str(),
               FormatBytes(parts.master).c_str(), FormatBytes(budget.reserve_bytes).c_str(),
               FormatBytes(*budget.budget_bytes).c_str());
  SchedulerOptions options;
  options.lookahead.budget_bytes = budget.budget_bytes;
  OVERLAP_ASSIGN_OR_RETURN(const ScheduleReport ours,
                           RunScheduler(DefaultSchedulerName(), &g, options));
  const char* what = kind == GraphKind::kBackward ? "AOT backward" : "graph";
  PrintRow(in, absl::StrCat(DefaultSchedulerName(), " (ours)"), ours.simulation,
           absl::StrCat("  [", what, "]"));
  std::fputs(absl::StrCat("  ", FormatScheduleSummary(g, ours).substr(
                                    FormatScheduleSummary(g, ours).find('\n') + 1))
                 .c_str(),
             in.out());
  const std::string path =
      in.Path("svg").value_or(absl::StrCat("/tmp/overlap_demo_", model, ".svg"));
  TimelineSvgOptions svg;
  svg.title = absl::StrCat(model, " ", what, ", lookahead under an 80 GB device");
  svg.budget_bytes = budget.budget_bytes;
  OVERLAP_RETURN_IF_ERROR(WriteTextFile(in, path, TimelineSvg(g, ours.simulation, svg)));
  std::fprintf(in.out(),
               "  the step as a picture (both streams above the memory curve): %s "
               "(`overlap schedule --svg`)\n",
               path.c_str());
  return absl::OkStatus();
}

// [9] The graphs run: the model's tiny AOT pair with ZeRO-3 ops scheduled by ours, on the
// CPU kernels, its measured memory beside the simulator's; then a short training run.
absl::Status ShowExecution(Invocation& in, const std::string& model) {
  if (model == "random") {
    std::fputs(
        "[9] execution: random graphs have no kernels (`overlap exec --replay` runs them "
        "without: timed buffers, memory checked against the simulator)\n",
        in.out());
    return absl::OkStatus();
  }
  TrainOptions options;
  OVERLAP_ASSIGN_OR_RETURN(Trainer trainer, Trainer::Create(model, Preset::kTiny, options));
  AotPair pair = trainer.pair();
  OVERLAP_RETURN_IF_ERROR(Zero3Insertion(GraphKind::kForward).Run(&pair.forward).status());
  OVERLAP_RETURN_IF_ERROR(Zero3Insertion(GraphKind::kBackward).Run(&pair.backward).status());
  OVERLAP_RETURN_IF_ERROR(RunScheduler("lookahead", &pair.forward).status());
  OVERLAP_RETURN_IF_ERROR(RunScheduler("lookahead", &pair.backward).status());
  Allocator alloc;
  SeededInputsOptions data_only;
  data_only.parameters = false;
  OVERLAP_ASSIGN_OR_RETURN(TensorMap data, SeededInputs(pair.forward, 1, alloc, data_only));
  InterpreterOptions io;
  io.simulate = true;
  OVERLAP_ASSIGN_OR_RETURN(AotStepResult step, RunAotStep(pair, trainer.params(), data, io));
  auto line = [](const RunResult& r) {
    return absl::StrCat(
        FormatBytes(r.peak_bytes), " measured, ", FormatBytes(r.simulated_peak_bytes),
        " simulated: ", r.peak_bytes == r.simulated_peak_bytes ? "equal" : "DIFFERENT");
  };
  std::fprintf(in.out(),
               "[9] the graphs run (tiny %s on the CPU kernels, ZeRO-3 ops scheduled by ours, one "
               "process): loss %.4f in %s; peak of graph values: forward %s, backward %s "
               "(`overlap exec`)\n",
               model.c_str(), step.loss,
               FormatSeconds(step.forward.wall_s + step.backward.wall_s).c_str(),
               line(step.forward).c_str(), line(step.backward).c_str());
  const int kSteps = 30;
  std::fprintf(in.out(),
               "    and train (`overlap train --model %s --steps %d`, AdamW, a synthetic task):",
               model.c_str(), kSteps);
  double seconds = 0;
  for (int k = 1; k <= kSteps; ++k) {
    OVERLAP_ASSIGN_OR_RETURN(StepResult s, trainer.Step());
    seconds += s.seconds;
    if (k == 1 || k % 10 == 0)
      std::fprintf(in.out(), " step %d loss %.3f%s", k, s.loss, k < kSteps ? "," : "");
  }
  std::fprintf(in.out(), " (%s per step)\n", FormatSeconds(seconds / kSteps).c_str());
  const BlasInfo blas = GetBlasInfo();
  std::fprintf(in.out(),
               "    kernels: matrix products on %s, convolutions %s, %d thread(s); against "
               "PyTorch eager on the same cores: docs/benchmarks.md (`tools/bench.py`)\n",
               blas.float32.c_str(),
               DnnlAvailable() ? "on oneDNN (few-position images as batch GEMMs)"
                               : "as im2col + GEMM loops (built without oneDNN)",
               blas.pool_threads);
  return absl::OkStatus();
}

// WorkerExecutable() when it is the overlap CLI, `overlap` or `overlap_compute` (or named by
// OVERLAP_WORKER_BINARY); "" otherwise: the CLI's tests run commands in-process, where this process
// is a test binary.
std::string OverlapBinary() {
  if (std::getenv("OVERLAP_WORKER_BINARY") != nullptr) return WorkerExecutable();
  const std::string self = WorkerExecutable();  // this process's real path
  return absl::EndsWith(self, "/overlap") || absl::EndsWith(self, "/overlap_compute") ? self : "";
}

// [11] The CUDA backend: what this machine offers it (the reason when it has no usable GPU:
// `overlap run --device cuda` exits 1 with it), then the same two ranks with the forward and
// backward on the CUDA backend's kernels: on the GPU when there is one, else on emulated
// devices (host memory, stream order checked).
absl::Status ShowCuda(Invocation& in, const std::string& model) {
#ifdef OVERLAP_NO_CUDA
  std::fputs("[11] CUDA backend: not in this build\n", in.out());
  return absl::OkStatus();
#else
  // The real device's plugin (and with it the CUDA libraries) is opened here, as
  // `--device cuda` would; a machine without them goes on with the emulated device.
  OVERLAP_ASSIGN_OR_RETURN(const CudaAvailability cuda, ProbeCuda());
  const absl::Status& usable = cuda.usable;
  if (cuda.plugin_loaded) {
    std::fprintf(in.out(), "[11] CUDA backend (built for %s, NCCL %s): %s\n",
                 cuda.cuda_version.c_str(), cuda.nccl_version.c_str(),
                 usable.ok() ? absl::StrCat("device 0 is ", cuda.device_name).c_str()
                             : std::string(usable.message()).c_str());
    std::fputs(
        "     CUDA's libraries come with the plugin (liboverlap_cuda.so, "
        "runtime/cuda/cuda_plugin.h), "
        "opened just now for the first time: steps [1]-[10] ran without any of them\n",
        in.out());
  } else {
    std::fprintf(in.out(), "[11] CUDA backend: %s\n", std::string(usable.message()).c_str());
  }
  if (model == "random") return absl::OkStatus();
  // Which kernel each op of the tiny model's forward and backward gets on the device.
  OVERLAP_ASSIGN_OR_RETURN(Trainer trainer, Trainer::Create(model, Preset::kTiny, TrainOptions()));
  std::map<std::string, int> kinds;
  for (const Graph* g : {&trainer.pair().forward, &trainer.pair().backward}) {
    for (NodeId id = 0; id < g->id_bound(); ++id) {
      if (!g->IsLive(id) || g->node(id).op() != Op::kCallFunction) continue;
      if (absl::StartsWith(g->node(id).target(), "operator.")) continue;  // tuple access
      ++kinds[CudaKernelKindOf(g->node(id).target())];
    }
  }
  std::string counts;
  for (const auto& [kind, n] : kinds) {
    absl::StrAppend(&counts, counts.empty() ? "" : ", ", n, " ", kind.empty() ? "?" : kind);
  }
  std::fprintf(in.out(),
               "     tiny %s's forward and backward ops by device kernel (`host`: the CPU "
               "kernel through host copies): %s\n",
               model.c_str(), counts.c_str());
  const std::string binary = OverlapBinary();
  if (binary.empty()) return absl::OkStatus();
  const std::string device = usable.ok() ? "cuda" : "cuda-emulated";
  const std::string collectives = usable.ok() && cuda.device_count < 2 ? "gloo" : "";
  std::fprintf(in.out(),
               "     two ranks on it (`overlap run --nproc 2 --strategy zero3 --device %s%s "
               "--steps 5`; GPU checks: tools/gpu_check.sh):\n",
               device.c_str(), collectives.empty() ? "" : " --collectives gloo");
  std::fflush(in.out());
  std::fflush(in.err());
  LaunchOptions lo;
  lo.nproc = 2;
  lo.argv = {binary, "worker",  "--strategy", "zero3",    "--model",
             model,  "--steps", "5",          "--device", device};
  if (!collectives.empty()) {
    lo.argv.push_back("--collectives");
    lo.argv.push_back(collectives);
  }
  OVERLAP_ASSIGN_OR_RETURN(LaunchResult r, Launch(lo));
  if (r.exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("the ranks failed: ", r.message));
  }
  return absl::OkStatus();
#endif
}

// [12] Graphs from PyTorch: an export has shapes but no device times. The demo strips the
// backward's times, as an export would have them, and lets `overlap annotate` estimate them
// per op, next to the builder's own figures (the two count FLOPs independently).
absl::Status ShowAnnotate(Invocation& in, Graph g, const char* what) {
  double builder = 0;
  for (NodeId id : g.order()) {
    NodeMeta& m = g.mutable_node(id).mutable_meta();
    builder += m.has_device_time ? m.device_time : 0;
    m.device_time = 0;
    m.has_device_time = false;
  }
  OVERLAP_ASSIGN_OR_RETURN(AnnotateReport r, AnnotateCosts(g));
  std::fprintf(in.out(),
               "[12] graphs from PyTorch (tools/overlap_export: docs/interop.md, "
               "docs/gallery.md) have no device times; `overlap annotate` estimates them per "
               "op: the %s without its times gets %lld by formula, %lld by the "
               "fallback; total %s (the builder's own: %s)\n",
               what, static_cast<long long>(r.by_formula), static_cast<long long>(r.fallback),
               FormatSeconds(r.total_device_time).c_str(), FormatSeconds(builder).c_str());
  return absl::OkStatus();
}

// [10] Two ranks: the same model trained by two processes with ZeRO-3 over Gloo (the
// launcher of `overlap run`, each rank a `overlap worker`).
absl::Status ShowRanks(Invocation& in, const std::string& model) {
  if (model == "random") return absl::OkStatus();
  const std::string binary = OverlapBinary();
  if (binary.empty()) {
    std::fputs("[10] two ranks: skipped (not running as the overlap executable)\n", in.out());
    return absl::OkStatus();
  }
  std::fprintf(in.out(),
               "[10] two ranks, ZeRO-3 over Gloo on 127.0.0.1 (`overlap run --nproc 2 --strategy "
               "zero3 --model %s --steps 10`):\n",
               model.c_str());
  std::fflush(in.out());
  std::fflush(in.err());
  LaunchOptions lo;
  lo.nproc = 2;
  lo.argv = {binary, "worker", "--strategy", "zero3", "--model", model, "--steps", "10"};
  OVERLAP_ASSIGN_OR_RETURN(LaunchResult r, Launch(lo));
  if (r.exit_code != 0)
    return absl::UnavailableError(absl::StrCat("the ranks failed: ", r.message));
  std::fprintf(in.out(),
               "     the store: one thread for every connection, this job's secret required "
               "(%lld refused), at most %d connections awaiting the handshake; a rank that "
               "does not exit within --timeout of a finished one is killed and named "
               "(docs/runtime.md, \"The store's trust model\")\n",
               static_cast<long long>(r.store_rejected), store_wire::kMaxPendingHandshakes);
  return absl::OkStatus();
}

// [13] The training step as the unit: the AOT pair planned together (`overlap plan`), every
// scheduler's step, then ours under the smallest baseline step peak, with residents held
// from the forward's gather to the backward's end.
absl::Status ShowStepPlan(Invocation& in, Graph forward, Graph backward, const std::string& model) {
  OVERLAP_RETURN_IF_ERROR(Zero3Insertion(GraphKind::kForward).Run(&forward).status());
  OVERLAP_RETURN_IF_ERROR(Zero3Insertion(GraphKind::kBackward).Run(&backward).status());
  std::vector<std::pair<std::string, StepPlan>> rows;
  std::optional<int64_t> smallest;
  for (const SchedulerEntry& e : Schedulers()) {
    if (e.honours_budget) continue;  // last, under the budget the baselines set
    Graph f = forward, b = backward;
    OVERLAP_ASSIGN_OR_RETURN(StepPlan p, PlanStep(e.name, &f, &b));
    const int64_t peak = p.simulation.figures.peak_memory_bytes;
    if (!smallest || peak < *smallest) smallest = peak;
    rows.emplace_back(std::string(e.name), std::move(p));
  }
  if (!smallest) return absl::OkStatus();  // no baseline: nothing to compare with
  for (auto& [name, p] : rows) p.fits = p.simulation.figures.peak_memory_bytes <= *smallest;
  StepPlanOptions o;
  o.budget_bytes = smallest;
  o.record_trace = true;
  OVERLAP_ASSIGN_OR_RETURN(StepPlan ours, PlanStep(DefaultSchedulerName(), &forward, &backward, o));
  rows.emplace(rows.begin(), absl::StrCat(DefaultSchedulerName(), " (ours)"), ours);
  std::fprintf(in.out(),
               "[13] the training step as the unit (`overlap plan FWD BWD`): forward then "
               "backward under one budget, ours at the smallest baseline step peak (%s)\n",
               FormatBytes(smallest.value_or(0)).c_str());
  std::fputs(FormatStepTable(rows).c_str(), in.out());
  std::fputs(absl::StrCat("  ", FormatStepSummary(ours)).c_str(), in.out());
  // Below every baseline: ours recomputes or offloads saved tensors when no order fits with
  // all kept.
  StepPlanOptions below;
  below.budget_bytes = *smallest * 70 / 100;
  below.record_trace = true;
  Graph bf = forward, bb = backward;
  OVERLAP_ASSIGN_OR_RETURN(const StepPlan tight, PlanStep(DefaultSchedulerName(), &bf, &bb, below));
  if (tight.fits) {
    std::fprintf(in.out(), "  at 70%% of that (%s, below every baseline): %s",
                 FormatBytes(*below.budget_bytes).c_str(), FormatStepSummary(tight).c_str());
  } else {
    std::fprintf(in.out(),
                 "  at 70%% of that (%s): no plan fits even recomputing and offloading; the "
                 "smallest is %s\n",
                 FormatBytes(*below.budget_bytes).c_str(),
                 FormatBytes(tight.min_feasible_bytes).c_str());
  }
  const std::string path = absl::StrCat("/tmp/overlap_demo_", model, "_step.svg");
  TimelineSvgOptions svg;
  // The picture: the tight plan when it fits (recomputation and the host link drawn), else
  // ours at the smallest baseline step peak.
  svg.title = absl::StrCat(model, " training step, lookahead at ", tight.fits ? "70% of " : "",
                           "the smallest baseline step peak");
  svg.budget_bytes = tight.fits ? below.budget_bytes : smallest;
  if (tight.fits) {
    OVERLAP_RETURN_IF_ERROR(
        WriteTextFile(in, path, StepTimelineSvg(bf, bb, tight.simulation, svg)));
  } else {
    OVERLAP_RETURN_IF_ERROR(
        WriteTextFile(in, path, StepTimelineSvg(forward, backward, ours.simulation, svg)));
  }
  std::fprintf(in.out(),
               "  the step as a picture (forward then backward, the residents, recomputed and "
               "offloaded tensors marked): %s (`overlap plan --svg`)\n",
               path.c_str());
  return absl::OkStatus();
}

int Run(Invocation& in) {
  const std::string model =
      in.positional().empty() ? std::string(kDefaultModel) : in.positional()[0];
  const auto t0 = Clock::now();
  absl::StatusOr<Graph> g = BuildModelFromFlags(in, model, ModelGraph::kAsFlagged);
  if (in.has_usage_error()) return in.UsageError();
  if (!g.ok()) return in.BadInput(g.status());
  const auto t1 = Clock::now();
  const std::string json = WriteGraphJson(*g);
  absl::StatusOr<Graph> back = ReadGraphJson(json);
  if (!back.ok()) return in.BadInput(back.status());
  const auto t2 = Clock::now();
  std::fprintf(in.out(), "== overlap demo: %s (%s parameters) ==\n", model.c_str(),
               in.Switch("lifted") ? "lifted" : "module-owned");
  std::fprintf(in.out(), "[1] built the forward graph in %.1f ms\n", Ms(t1 - t0));
  std::fprintf(in.out(),
               "[2] wrote %s of interchange JSON and read it back in %.1f ms: round trip %s, "
               "verifier %s\n",
               FormatBytes(static_cast<int64_t>(json.size())).c_str(), Ms(t2 - t1),
               *back == *g ? "exact" : "MISMATCH", Verify(*back).ok() ? "ok" : "FAILED");
  std::fputs("[3] summary:\n", in.out());
  std::fputs(FormatSummary(*back, Summarize(*back)).c_str(), in.out());
  if (absl::Status s = ShowPartitions(in, *back); !s.ok()) return in.BadInput(s);
  Graph zero3, last, step_forward, step_backward;
  GraphKind last_kind = GraphKind::kBackward;
  if (model == "random") {  // no AOT pair: its lifted graph as generated
    std::fputs("[5] AOT pair: none for random graphs (their backward is structural)\n", in.out());
    absl::StatusOr<Graph> z = BuildModelFromFlags(in, model, ModelGraph::kForward);
    if (!z.ok()) return in.BadInput(z.status());
    zero3 = std::move(*z);
    last = zero3;
    last_kind = GraphKind::kForward;
  } else {
    const auto t3 = Clock::now();
    absl::StatusOr<AotPair> pair = BuildAotPairFromFlags(in, model);
    if (in.has_usage_error()) return in.UsageError();
    if (!pair.ok()) return in.BadInput(pair.status());
    ShowAotPair(in, *pair, Ms(Clock::now() - t3));
    step_forward = pair->forward;
    step_backward = pair->backward;
    zero3 = std::move(pair->forward);
    last = std::move(pair->backward);
  }
  if (absl::Status s =
          ShowSchedules(in, std::move(zero3), model == "random" ? "lifted graph" : "AOT forward");
      !s.ok()) {
    return in.BadInput(s);
  }
  Graph unannotated = last;
  if (absl::Status s = ShowDeviceBudget(in, std::move(last), last_kind, model); !s.ok()) {
    return in.BadInput(s);
  }
  if (absl::Status s = ShowExecution(in, model); !s.ok()) return in.BadInput(s);
  if (absl::Status s = ShowRanks(in, model); !s.ok()) return in.BadInput(s);
  if (absl::Status s = ShowCuda(in, model); !s.ok()) return in.BadInput(s);
  if (absl::Status s = ShowAnnotate(in, std::move(unannotated),
                                    model == "random" ? "lifted graph" : "AOT backward");
      !s.ok())
    return in.BadInput(s);
  if (model != "random") {
    if (absl::Status s = ShowStepPlan(in, std::move(step_forward), std::move(step_backward), model);
        !s.ok()) {
      return in.BadInput(s);
    }
  }
  std::fputs(
      "next: `overlap gen <model> -o g.json`, `overlap inspect g.json`, `overlap print g.json`, "
      "`overlap partition g.json --bucket-cap auto`, `overlap schedule z.json --explain`, "
      "`overlap plan f.json b.json --explain`, "
      "`overlap exec f.json --backward-graph b.json`, `overlap train --model <model>`, "
      "`overlap run --nproc 4 --strategy zero3`, `overlap run --device cuda`, `overlap "
      "bench-comm`, "
      "`overlap annotate exported.json -o a.json` (see --help)\n",
      in.out());
  return *back == *g ? kExitOk : kExitBadInput;
}

}  // namespace

const CommandSpec& DemoCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "demo";
    s.synopsis = "[MODEL] [options]";
    s.summary = "run the pipeline on a built-in model (default gpt2)";
    s.description =
        "Runs what overlap can do today on a built-in model (default gpt2): builds its graph,\n"
        "writes it in the interchange format, reads it back (checking the round trip),\n"
        "verifies it, prints its summary, then partitions it into DDP buckets in PyTorch's\n"
        "reference mode and in ours, predicts the exposed allreduce time at the default cap\n"
        "and at the best cap, builds the model's AOT forward / backward pair (the loss,\n"
        "the saved activations, the primals the backward reads), inserts the ZeRO-3 ops\n"
        "into the AOT forward, compares every scheduler in the two-stream simulator, and\n"
        "shows why ours chose its schedule; then schedules the AOT backward under the\n"
        "budget an 80 GB device leaves after the per-rank state and draws that step as SVG;\n"
        "finally runs the model's tiny pair on the CPU kernels (measured memory beside the\n"
        "simulator's) and trains it for 30 steps; last, plans the AOT pair as one training\n"
        "step with every scheduler (`overlap plan`).\n";
    s.flags = {kDemoFlags, ModelFlags(), DeviceFlags()};
    s.min_positional = 0;
    s.max_positional = 1;
    s.positional_name = "model name";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
