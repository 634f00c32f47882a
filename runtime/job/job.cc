#include "runtime/job/job.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "graph/aot.h"
#include "graph/aot_files.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/output_file.h"
#include "graph/shape_rules.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "partition/bucket_cap.h"
#include "runtime/comm/bench_comm.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/comm/watchdog.h"
#include "runtime/core/random.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/tensor.h"
#include "runtime/exec/replay_kernels.h"
#include "runtime/train/synthetic.h"
#include "schedule/budget.h"
#include "schedule/scheduler_registry.h"
#include "schedule/simulator.h"
#include "schedule/step_plan.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"

namespace overlap {

absl::StatusOr<std::optional<FaultSpec>> FaultFromEnv() {
  const char* v = std::getenv("OVERLAP_FAULT");
  if (v == nullptr || *v == '\0') return std::optional<FaultSpec>();
  FaultSpec f;
  bool has_node = false;
  for (absl::string_view field : absl::StrSplit(v, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    const std::string& key = kv.first;
    int64_t n = 0;
    if (key == "rank" && absl::SimpleAtoi(kv.second, &n) && n >= 0) {
      f.rank = static_cast<int>(n);
    } else if (key == "step" && absl::SimpleAtoi(kv.second, &n) && n >= 1) {
      f.step = n;
    } else if (key == "node" && !kv.second.empty()) {
      f.node = kv.second;
      has_node = true;
    } else if (key == "action" && (kv.second == "kill" || kv.second == "hang")) {
      f.action = kv.second == "kill" ? FaultSpec::Action::kKill : FaultSpec::Action::kHang;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("OVERLAP_FAULT: bad field '", field,
                       "' (rank=R,step=K,node=NAME,action=kill|hang; step from 1)"));
    }
  }
  if (!has_node) return absl::InvalidArgumentError("OVERLAP_FAULT: no node=NAME");
  return std::optional<FaultSpec>(f);
}

std::string Fingerprint(absl::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

std::string TraceEventsJson(const std::vector<TraceEvent>& events, int rank) {
  std::string out = absl::StrFormat(
      "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d\"}},\n"
      "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"thread_name\",\"args\":{\"name\":\"compute\"}}"
      ","
      "\n{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":"
      "\"communication\"}}",
      rank, rank, rank, rank);
  for (const TraceEvent& e : events) {
    std::string name;
    for (char c : e.name) {
      if (c == '"' || c == '\\') name += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) name += c;
    }
    absl::StrAppendFormat(&out,
                          ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%d,"
                          "\"dur\":%d}",
                          rank, e.track, name, e.start_us, std::max<int64_t>(e.duration_us, 1));
  }
  return out;
}

namespace {

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

// What a rank trains: the pair, its parameters, and each step's batch.
struct Program {
  AotPair pair;
  TensorMap params;
  std::function<absl::StatusOr<TensorMap>(int64_t step)> batch;  // this rank's rows
  // Buffers and constants every step adds to its batch ("buffer/<name>", "constant/<name>"),
  // as the weights file states them: each trainer starts from these.
  TensorMap buffers;
  std::unique_ptr<Allocator> alloc = std::make_unique<Allocator>();
  std::unique_ptr<Graph> global;  // the global batch's graph (built-in models)
  std::unique_ptr<SyntheticTask> task;
};

absl::Status CheckPairMemory(const AotPair& pair, const JobOptions& o, int world, int local_ranks) {
  if (o.device == ComputeDevice::kCuda) return absl::OkStatus();  // the device's memory, not ours
  OVERLAP_ASSIGN_OR_RETURN(const RankMemoryEstimate e, EstimateRankMemory(pair, o, world));
  const int64_t available = AvailableMemoryBytes();
  const int64_t per_rank = e.total();
  if (per_rank > 0 && local_ranks > 0 && per_rank > available / local_ranks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "each rank needs about ", FormatBytes(per_rank), " (graph values at their peak ",
        FormatBytes(e.graph_peak), ", saved tensors ", FormatBytes(e.saved), ", parameters ",
        FormatBytes(e.params), ", gradients ", FormatBytes(e.gradients), ", optimizer state ",
        FormatBytes(e.optimizer), ", communication buffers ", FormatBytes(e.buffers), "); ",
        local_ranks, " rank(s) on this machine need ", FormatBytes(MulBytes(local_ranks, per_rank)),
        ", more than the ", FormatBytes(available),
        " available (a smaller preset, batch or --nproc; ZeRO-3 shards the state)"));
  }
  return absl::OkStatus();
}

// The job's AOT pair as the options give it: read from the graph files and tightened
// (graph/aot.h), or built from the model's lifted forward, which `model` receives.
absl::StatusOr<AotPair> BuildJobPair(const JobOptions& o, Graph* model = nullptr) {
  AotPair pair;
  if (!o.graph_path.empty()) {
    if (o.backward_graph_path.empty()) {
      return absl::InvalidArgumentError("--graph needs --backward-graph (an AOT pair)");
    }
    OVERLAP_ASSIGN_OR_RETURN(pair, ReadAotPairFiles(o.graph_path, o.backward_graph_path));
    OVERLAP_RETURN_IF_ERROR(TightenPairMemory(&pair).status());
    return pair;
  }
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  mo.batch = o.batch;
  mo.layers = o.layers;
  mo.width = o.width;
  OVERLAP_ASSIGN_OR_RETURN(Graph g, BuildModel(o.model, mo, o.preset));
  OVERLAP_ASSIGN_OR_RETURN(pair, BuildAotPair(g));
  if (model != nullptr) *model = std::move(g);
  return pair;
}

absl::StatusOr<std::unique_ptr<Program>> LoadProgram(const JobOptions& o, int rank, int world,
                                                     int local_ranks) {
  auto p = std::make_unique<Program>();
  Graph g;
  OVERLAP_ASSIGN_OR_RETURN(p->pair, BuildJobPair(o, &g));
  OVERLAP_RETURN_IF_ERROR(CheckPairMemory(p->pair, o, world, local_ranks));
  if (!o.graph_path.empty()) {
    Program* raw = p.get();
    const uint64_t seed = o.seed;
    p->batch = [raw, seed, rank](int64_t step) -> absl::StatusOr<TensorMap> {
      SeededInputsOptions only_data;
      only_data.parameters = false;
      return SeededInputs(raw->pair.forward, seed * 7919 + step * 1000003 + rank, *raw->alloc,
                          only_data);
    };
  } else {
    // The global batch: the same model at batch x world rows.
    int64_t rows = 0;
    for (NodeId id : g.order()) {
      const Node& n = g.node(id);
      if (n.op() == Op::kPlaceholder && !IsParameterPlaceholder(g, id) && n.meta().has_shape &&
          !n.meta().shape.empty()) {
        rows = n.meta().shape[0];
        break;
      }
    }
    ModelOptions mo;
    mo.style = ParamStyle::kLifted;
    mo.batch = rows * world;
    mo.layers = o.layers;
    mo.width = o.width;
    OVERLAP_ASSIGN_OR_RETURN(Graph global, BuildModel(o.model, mo, o.preset));
    p->global = std::make_unique<Graph>(std::move(global));
    p->task = std::make_unique<SyntheticTask>(*p->global, o.seed);
    Program* raw = p.get();
    p->batch = [raw, rank, world](int64_t step) -> absl::StatusOr<TensorMap> {
      OVERLAP_ASSIGN_OR_RETURN(TensorMap all, raw->task->Batch(step));
      return ShardRows(all, rank, world);
    };
  }
  if (!o.data_path.empty()) {
    OVERLAP_ASSIGN_OR_RETURN(TensorMap all,
                             ReadSafetensorsFile(o.data_path, *p->alloc, IsReferenceTensor));
    OVERLAP_ASSIGN_OR_RETURN(std::vector<TensorMap> batches, SplitBatches(all));
    if (batches.empty()) return absl::InvalidArgumentError(absl::StrCat(o.data_path, " is empty"));
    std::vector<TensorMap> mine;
    for (size_t k = 0; k < batches.size(); ++k) {
      OVERLAP_ASSIGN_OR_RETURN(TensorMap rows, ShardRows(batches[k], rank, world));
      // The file holds global batches and the graph is one rank's: say so up front, naming
      // the placeholder, rather than failing inside the first step.
      const Graph& fwd = p->pair.forward;
      for (NodeId id : fwd.order()) {
        const Node& n = fwd.node(id);
        if (n.op() != Op::kPlaceholder || IsParameterPlaceholder(fwd, id) || !n.meta().has_shape) {
          continue;
        }
        const Tensor* t = FindInput(fwd, n, rows);
        if (t == nullptr || std::equal(t->shape().begin(), t->shape().end(), n.meta().shape.begin(),
                                       n.meta().shape.end()))
          continue;
        return absl::InvalidArgumentError(absl::StrCat(
            o.data_path, ": batch ", k, " gives placeholder '", n.name(), "' shape [",
            absl::StrJoin(t->shape(), ", "), "] on each of ", world,
            " rank(s) (the file's global batch split by rows), but the graph expects [",
            absl::StrJoin(n.meta().shape, ", "),
            "]: export the graph at the per-rank batch (global rows / ranks)"));
      }
      mine.push_back(std::move(rows));
    }
    p->batch = [mine](int64_t step) -> absl::StatusOr<TensorMap> {
      return mine[step % static_cast<int64_t>(mine.size())];
    };
  }
  // Parameters: seeded (the same on every rank), or read.
  SeededInputsOptions only_params;
  only_params.data = false;
  OVERLAP_ASSIGN_OR_RETURN(TensorMap seeded,
                           SeededInputs(p->pair.forward, o.seed, *p->alloc, only_params));
  TensorMap given;
  if (!o.weights_path.empty()) {
    OVERLAP_ASSIGN_OR_RETURN(given,
                             ReadSafetensorsFile(o.weights_path, *p->alloc, IsReferenceTensor));
    OVERLAP_RETURN_IF_ERROR(CheckWeights(p->pair.forward, given));  // runtime/train/train.h
  }
  // Buffers and constants (an exporter's "buffer/" and "constant/" entries) join every
  // batch (Train adds them, updated step by step).
  p->buffers = BufferInputs(p->pair.forward, given);
  for (NodeId id : p->pair.forward.order()) {
    const Node& n = p->pair.forward.node(id);
    if (n.op() != Op::kPlaceholder || !IsParameterPlaceholder(p->pair.forward, id)) continue;
    const std::string name = ParamNameOf(n);
    if (o.weights_path.empty()) {
      p->params[name] = seeded.at(n.name());
      continue;
    }
    p->params[name] = *FindInput(p->pair.forward, n, given);  // CheckWeights: found
  }
  return p;
}

// `params` in a safetensors file by parameter name (device tensors copied to the host
// first), through the output writer (graph/output_file.h): no partial file, never a device
// replaced, a link at `path` replaced, never written through.
absl::Status WriteParamsFile(const std::string& path, const TensorMap& params, Backend& backend) {
  DeviceMemory* device = backend.device();
  Allocator host;
  TensorMap on_host;
  for (const auto& [name, t] : params) {
    if (t.device() == Device::kCpu || device == nullptr) {
      on_host[name] = t;
      continue;
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor h, Tensor::Uninitialized(host, t.dtype(), t.shape()));
    OVERLAP_RETURN_IF_ERROR(device->Copy(t, h));
    on_host[name] = std::move(h);
  }
  OVERLAP_RETURN_IF_ERROR(backend.Synchronize());
  return WriteFileAtomically(path, WriteSafetensors(on_host, {{"producer", "overlap run"}}));
}

// ZeRO-3: insertion (unless the graphs have the ops), then the step plan (schedule/
// step_plan.h): both graphs scheduled together under one budget on the step's peak, ours'
// residents held from the forward's gather to the backward's end.
absl::Status Compile(const JobOptions& o, int world, AotPair& pair, JobSummary& summary) {
  for (auto [g, kind] : {std::pair{&pair.forward, GraphKind::kForward},
                         std::pair{&pair.backward, GraphKind::kBackward}}) {
    if (!HasZero3Ops(*g)) OVERLAP_RETURN_IF_ERROR(Zero3Insertion(kind).Run(g).status());
  }
  // The budget counts the state the update keeps (the job's optimizer, this world).
  BudgetRequest request = o.budget;
  request.state.optimizer = o.optimizer;
  request.state.world_size = world;
  OVERLAP_ASSIGN_OR_RETURN(const MemoryBudget b, ResolveBudget(request, pair.forward));
  StepPlanOptions options;
  options.collectives = o.collectives;
  options.collectives.world_size = world;
  options.budget_bytes = b.budget_bytes;
  if (b.budget_bytes) summary.budget_bytes = *b.budget_bytes;
  OVERLAP_ASSIGN_OR_RETURN(const StepPlan plan,
                           PlanStep(o.algorithm, &pair.forward, &pair.backward, options));
  if (!plan.fits && plan.min_feasible_bytes > 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no step plan keeps graph values within ", FormatBytes(*b.budget_bytes),
                     " (the smallest is ", FormatBytes(plan.min_feasible_bytes), ")"));
  }
  summary.algorithm = o.algorithm;
  return absl::OkStatus();
}

// The options every rank must share, as text for the fingerprints.
std::string JobText(const JobOptions& o, int world, bool nccl) {
  return absl::StrCat(StrategyName(o.strategy), " steps=", o.steps, " cap=", o.bucket_cap_bytes,
                      " budget=", o.budget.budget_bytes.value_or(0),
                      " device=", o.budget.device_memory_bytes.value_or(0),
                      " reserve=", o.budget.reserve_bytes.value_or(-1),
                      " opt=", static_cast<int>(o.optimizer.kind), " lr=", o.optimizer.lr,
                      " momentum=", o.optimizer.momentum, " wd=", o.optimizer.weight_decay,
                      " seed=", o.seed, " det=", o.deterministic, " scale=", o.time_scale,
                      " world=", world, " device=", static_cast<int>(o.device), " nccl=", nccl);
}

}  // namespace

absl::StatusOr<RankMemoryEstimate> EstimateRankMemory(const AotPair& pair, const JobOptions& o,
                                                      int world) {
  RankMemoryEstimate e;
  OVERLAP_ASSIGN_OR_RETURN(e.graph_peak, LargestPeakBytes({&pair.forward, &pair.backward}));
  e.saved = pair.saved_bytes;
  int64_t whole = 0;
  for (const Param& p : pair.forward.params()) whole += p.bytes;
  const int64_t moments = OptimizerStateTensors(o.optimizer);
  // The trainer keeps its state in the parameters' dtype: their bytes, per state tensor.
  const int64_t share =
      o.strategy == Strategy::kZero3 ? (whole + world - 1) / std::max(world, 1) : whole;
  e.params = share;
  e.gradients = share;
  e.optimizer = MulBytes(moments, share);
  e.buffers = whole;  // DDP's buckets; ZeRO-3's gathered parameters at most
  return e;
}

absl::Status CheckJobMemory(const JobOptions& o, int world, int local_ranks) {
  OVERLAP_ASSIGN_OR_RETURN(const AotPair pair, BuildJobPair(o));
  return CheckPairMemory(pair, o, world, local_ranks);
}

absl::Status CheckJobWeights(const JobOptions& o) {
  if (o.weights_path.empty()) return absl::OkStatus();
  OVERLAP_ASSIGN_OR_RETURN(const AotPair pair, BuildJobPair(o));
  Allocator alloc;
  OVERLAP_ASSIGN_OR_RETURN(TensorMap given,
                           ReadSafetensorsFile(o.weights_path, alloc, IsReferenceTensor));
  if (absl::Status s = CheckWeights(pair.forward, given); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(o.weights_path, ": ", s.message()));
  }
  return absl::OkStatus();
}

namespace {

// One rank's job, step by step: join, calibrate, compile, then train each program in turn.
// The state the steps share (the backend, the communicator, the watchdog, the step counter
// the fault hook reads) lives here, so each step is a function a reader can hold.
class RankJob {
 public:
  RankJob(const JobOptions& o, const RendezvousInfo& info,
          const std::function<void(const StepReport&)>& on_step)
      : o_(o), info_(info), on_step_(on_step), rank_(info.rank), world_(info.world_size) {}

  absl::StatusOr<JobSummary> Run() {
    OVERLAP_ASSIGN_OR_RETURN(program_,
                             LoadProgram(o_, rank_, world_, std::max(info_.local_world_size, 1)));
    BackendOptions bo;
    bo.device = o_.device;
    bo.collectives = o_.collective_library;
    bo.time_scale = o_.time_scale;
    OVERLAP_ASSIGN_OR_RETURN(backend_, Backend::Create(bo, world_, info_.local_rank));
    OVERLAP_RETURN_IF_ERROR(Join());
    OVERLAP_RETURN_IF_ERROR(Calibrate());
    if (o_.time_scale > 0) {
      // The replayed times replace the device times once, before anything is compiled: the
      // schedulers plan for the compute the run will have (planned on the unscaled times,
      // lookahead saw microseconds of compute beside milliseconds of collectives, and chose
      // not to prefetch), the waiting kernels wait them as they are, the predictions use them.
      program_->pair.forward = ReplayTimes(program_->pair.forward, o_.time_scale);
      program_->pair.backward = ReplayTimes(program_->pair.backward, o_.time_scale);
      replay_ = ReplayKernels(1.0);
    }
    OVERLAP_RETURN_IF_ERROR(CompileAll());
    for (size_t a = 0; a < pairs_.size(); ++a) {
      OVERLAP_RETURN_IF_ERROR(Train(a, /*save=*/a + 1 == pairs_.size()));
    }
    // Every rank is done before any tears its connections down.
    OVERLAP_RETURN_IF_ERROR(comm_->Barrier()->Wait(o_.timeout));
    OVERLAP_RETURN_IF_ERROR(backend_->Finish(rank_));
    return std::move(summary_);
  }

 private:
  // The store, the join check, the communicator and the watchdog, all within one deadline.
  // Every rank publishes its world size and a fingerprint of what it was given before Gloo
  // connects, so a mismatch is named instead of failing inside Gloo's mesh.
  absl::Status Join() {
    const absl::Time deadline = absl::Now() + o_.timeout;
    const auto left = [&] { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); };
    OVERLAP_ASSIGN_OR_RETURN(store_, TcpStore::Connect(info_, o_.timeout));
    std::string given = JobText(o_, world_, backend_->nccl());
    absl::StrAppend(&given, "\n", WriteGraphJson(program_->pair.forward), "\n",
                    WriteGraphJson(program_->pair.backward));
    OVERLAP_RETURN_IF_ERROR(CheckJoin(*store_, rank_, world_, Fingerprint(given), left()));
    GlooOptions go;
    go.connect_timeout = left();
    go.rank = rank_;
    go.world_size = world_;
    go.store = store_;
    go.key_prefix = "gloo";
    go.timeout = o_.timeout;
    go.deterministic = o_.deterministic;
    go.random_delays = o_.race_check;
    go.hostname = ListenAddress(info_);
    if (o_.race_check) SetPoisonFreedStorage(true);
    RendezvousInfo own = info_;
    own.agent_store = true;  // the watchdog's own connection: a client, never a second server
    OVERLAP_ASSIGN_OR_RETURN(comm_, backend_->Connect(go, own, o_.timeout));
    OVERLAP_ASSIGN_OR_RETURN(std::shared_ptr<TcpStore> watch_store,
                             TcpStore::Connect(own, o_.timeout));
    WatchdogOptions wo;
    wo.rank = rank_;
    wo.world_size = world_;
    wo.address = go.hostname;
    wo.timeout = o_.timeout + absl::Seconds(5);  // Gloo's own timeout reports first
    if (info_.protocol == StoreProtocol::kC10d) {
      wo.store_server = "torchrun's agent (the store's server)";
    }
    watchdog_ = std::make_unique<Watchdog>(watch_store, comm_.get(), wo);
    return absl::OkStatus();
  }

  // A failure with the lost rank named and the last collectives listed.
  absl::Status Explain(const absl::Status& failed, int64_t step) {
    if (watchdog_->aborted()) {
      const std::string self = absl::StrCat("rank ", rank_, ": ");
      const std::string reason = watchdog_->reason();  // this rank's own starts with `self`
      return absl::AbortedError(absl::StartsWith(reason, self) ? reason : self + reason);
    }
    absl::Status explained = watchdog_->Explain(failed);
    return absl::Status(
        explained.code(),
        absl::StrCat("rank ", rank_, step > 0 ? absl::StrCat(" at step ", step) : "", ": ",
                     explained.message(), "\nthe last collectives issued:\n",
                     watchdog_->RecentOperations()));
  }

  // The collectives' model: given, or measured here (every rank gets the same fit: each
  // size's time is the slowest rank's).
  absl::Status Calibrate() {
    summary_.collectives = o_.collectives;
    if (o_.calibrate) {
      BenchOptions bo;
      // From a few kilobytes (a small model's per-parameter collectives, where latency is
      // the time) to megabytes (where bandwidth is).
      OVERLAP_ASSIGN_OR_RETURN(bo.sizes, ParseSizeRange("4KiB..16MiB", 4 * world_));
      bo.bytes_per_size = int64_t{64} << 20;
      // 3 s a size: the bytes decide from about 50 MB/s up (the cluster's 400 Mbit/s
      // links); at 20 Mbit/s the bytes alone took about 7 minutes a job.
      bo.seconds_per_size = absl::Seconds(3);
      bo.timeout = o_.timeout;
      absl::StatusOr<std::vector<BenchRow>> rows = BenchCollectives(*comm_, bo);
      if (!rows.ok()) return Explain(rows.status(), 0);
      OVERLAP_ASSIGN_OR_RETURN(summary_.collectives, FitCollectiveModel(*rows, world_));
    }
    summary_.collectives.world_size = world_;
    if (o_.calibrate && o_.time_scale <= 0 && backend_->device() == nullptr) {
      OVERLAP_RETURN_IF_ERROR(ProfileCompute());
    }
    return absl::OkStatus();
  }

  // This machine's kernels, timed: kProfileRuns single-process forward and backward runs
  // of the unscheduled pair on this rank's first batch (after one to warm up), every rank
  // at once so the cores are shared as in training; each call node's time is from the
  // previous node's end to its own (the interpreter's frees included), the median of the
  // runs, averaged over the ranks (one allreduce: every rank schedules with the same
  // figures), and replaces its device_time before anything is compiled.
  absl::Status ProfileCompute() {
    AotPair& pair = program_->pair;
    std::vector<std::vector<double>> runs[2];  // [graph][node id] -> one time per run
    runs[0].assign(pair.forward.id_bound(), {});
    runs[1].assign(pair.backward.id_bound(), {});
    OVERLAP_ASSIGN_OR_RETURN(TensorMap batch, program_->batch(0));
    for (const auto& [key, t] : program_->buffers) batch.emplace(key, t);
    std::vector<double> alone;  // each measured run's total
    for (int run = 0; run <= kProfileRuns; ++run) {
      const int64_t began = NowUs();
      int64_t last = began;
      const auto timer = [&](int graph) {
        return [&, graph](const Node& node, const std::vector<Tensor>&) {
          const int64_t now = NowUs();
          if (run > 0) runs[graph][node.id()].push_back((now - last) * 1e-6);
          last = now;
          return absl::OkStatus();
        };
      };
      InterpreterOptions forward = ProfileOptions();
      InterpreterOptions backward = forward;
      forward.after_node = timer(0);
      backward.after_node = timer(1);
      OVERLAP_RETURN_IF_ERROR(RunAotStep(pair, program_->params, batch, forward, &backward,
                                         AotStepOptions{/*hand_over_saved=*/true})
                                  .status());
      if (run > 0) alone.push_back((NowUs() - began) * 1e-6);
    }
    const int64_t nf = pair.forward.id_bound();
    OVERLAP_ASSIGN_OR_RETURN(
        Tensor times, Tensor::Empty(scalars_, DType::kFloat64, {nf + pair.backward.id_bound()}));
    double* t = times.data<double>();
    for (int graph = 0; graph < 2; ++graph) {
      for (size_t id = 0; id < runs[graph].size(); ++id) {
        t[(graph == 0 ? 0 : nf) + id] = Median(std::move(runs[graph][id]));
      }
    }
    if (absl::Status s = comm_->AllReduce(times)->Wait(o_.timeout); !s.ok()) return Explain(s, 0);
    for (int graph = 0; graph < 2; ++graph) {
      Graph& g = graph == 0 ? pair.forward : pair.backward;
      for (NodeId id : g.order()) {
        const Node& n = g.node(id);
        if (n.op() != Op::kCallFunction) continue;
        // Whole nanoseconds: the same figures, and so the same schedule, on every rank.
        const double mean = std::round(t[(graph == 0 ? 0 : nf) + id] / world_ * 1e9) * 1e-9;
        g.mutable_node(id).mutable_meta().set_device_time(mean);
      }
    }
    summary_.profiled = true;
    return MeasureContention(batch, Median(alone));
  }

  // How much slower compute runs while a collective is in flight (CollectiveModel::
  // compute_slowdown): kProfileRuns forward and backward runs again, each with collectives
  // queued for about twice its length, every rank at once; the median run against `alone`
  // (this rank's median without them), averaged over the ranks. On a CPU the
  // communication's own work (the network stack, the communication thread's copies and
  // sums) competes with the kernels for the same cores. The collectives are the strategy's
  // (DDP: allreduces; ZeRO-3: allgathers and reduce-scatters in turn) at the largest
  // parameter's size (256 KiB to 16 MiB): a collective's CPU work depends on its kind and
  // on how it is cut into messages (segment_bytes).
  absl::Status MeasureContention(const TensorMap& batch, double alone) {
    int64_t largest = 0;
    for (const auto& [name, t] : program_->params) largest = std::max(largest, t.nbytes());
    const int64_t unit = 4 * world_;
    const int64_t bytes =
        std::clamp<int64_t>(largest, int64_t{256} << 10, int64_t{16} << 20) / unit * unit;
    OVERLAP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty(scalars_, DType::kFloat32, {bytes / 4}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor part,
                             Tensor::Empty(scalars_, DType::kFloat32, {bytes / 4 / world_}));
    const bool zero3 = o_.strategy == Strategy::kZero3;
    // The same count on every rank: from the shared profile and the shared fit.
    double step = 0;
    for (const Graph* g : {&program_->pair.forward, &program_->pair.backward}) {
      for (NodeId id : g->order()) {
        if (g->node(id).meta().has_device_time) step += g->node(id).meta().device_time;
      }
    }
    const CollectiveModel& m = summary_.collectives;
    const double each = std::max(
        zero3 ? (m.Allgather(bytes) + m.ReduceScatter(bytes)) / 2 : m.Allreduce(bytes), 1e-6);
    const int64_t count = std::clamp<int64_t>(static_cast<int64_t>(2 * step / each) + 1, 1, 20000);
    // Allgathers land in buffers of their own, as the trainer's do (their first touches
    // are the communication's work too), up to 64 MiB of them; later ones reuse them in
    // turn (the collectives run one after another, so a reused buffer is no longer
    // written). A fast link queues hundreds: fresh buffers for all would hold gigabytes.
    std::vector<Tensor> landed;
    const size_t pool = static_cast<size_t>(std::max<int64_t>(2, (int64_t{64} << 20) / bytes));
    int64_t gathers = 0;
    const auto issue = [&](int64_t k) -> absl::StatusOr<std::shared_ptr<Work>> {
      if (!zero3) return comm_->AllReduce(full);
      if (k % 2 == 1) return comm_->ReduceScatter(full, part);
      if (landed.size() < pool) {
        OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                                 Tensor::Uninitialized(scalars_, DType::kFloat32, {bytes / 4}));
        landed.push_back(out);
      }
      return comm_->AllGather(part, landed[gathers++ % pool]);
    };
    std::vector<double> busy;
    for (int run = 0; run < kProfileRuns; ++run) {
      std::vector<std::shared_ptr<Work>> works;
      for (int64_t k = 0; k < count; ++k) {
        OVERLAP_ASSIGN_OR_RETURN(std::shared_ptr<Work> w, issue(k));
        works.push_back(std::move(w));
      }
      const InterpreterOptions io = ProfileOptions();
      const int64_t began = NowUs();
      absl::Status ran = RunAotStep(program_->pair, program_->params, batch, io, &io,
                                    AotStepOptions{/*hand_over_saved=*/true})
                             .status();
      busy.push_back((NowUs() - began) * 1e-6);
      for (const std::shared_ptr<Work>& w : works) {  // every rank drains what it issued
        if (absl::Status s = w->Wait(o_.timeout); !s.ok() && ran.ok()) ran = s;
      }
      if (!ran.ok()) return Explain(ran, 0);
      landed.clear();
      gathers = 0;
    }
    OVERLAP_ASSIGN_OR_RETURN(const double wake, MeasureWakeUp(batch));
    OVERLAP_ASSIGN_OR_RETURN(Tensor measured, Tensor::Empty(scalars_, DType::kFloat64, {2}));
    measured.data<double>()[0] = alone > 0 ? std::max(0.0, Median(busy) / alone - 1) : 0;
    measured.data<double>()[1] = wake;
    if (absl::Status s = comm_->AllReduce(measured)->Wait(o_.timeout); !s.ok()) {
      return Explain(s, 0);
    }
    // Rounded (slowdown to 1e-6, seconds to whole nanoseconds): the same figures, and so the
    // same schedule, on every rank.
    summary_.collectives.compute_slowdown =
        std::round(measured.data<double>()[0] / world_ * 1e6) * 1e-6;
    summary_.collectives.busy_start_s =
        std::round(measured.data<double>()[1] / world_ * 1e9) * 1e-9;
    return absl::OkStatus();
  }

  // What a collective started beside compute costs on top (CollectiveModel::busy_start_s),
  // in seconds: forward and backward runs, every rank at once, issuing one small collective
  // (4 KiB) after every k-th node (about 16 a run) from the compute thread, as a schedule
  // issues them; in the runs of one kind compute goes on, in the others it waits for each at
  // once (kProfileRuns of each, interleaved). The mean collective of the first kind
  // against the mean of the second: what the cores' compute adds to a communication thread
  // woken from sleep, and the ranks' drift while none waits (the waited runs line the
  // ranks up at every collective; the lock-step simulator has no drift otherwise); the
  // collective's own latency cancels. Means,
  // not medians: the cost is a tail (on the one-machine cluster a few collectives in ten
  // stall 3-5 ms beside compute), which a median hides. Every rank issues the same
  // collectives (k depends on the graphs alone). >= 0.
  absl::StatusOr<double> MeasureWakeUp(const TensorMap& batch) {
    const bool zero3 = o_.strategy == Strategy::kZero3;
    const int64_t floats = world_ * std::max(1, 1024 / world_);  // a multiple of the world
    OVERLAP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty(scalars_, DType::kFloat32, {floats}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor part,
                             Tensor::Empty(scalars_, DType::kFloat32, {floats / world_}));
    int64_t calls = 0;
    for (const Graph* g : {&program_->pair.forward, &program_->pair.backward}) {
      for (NodeId id : g->order()) calls += g->node(id).op() == Op::kCallFunction;
    }
    const int64_t every = std::max<int64_t>(1, calls / 16);
    std::vector<double> seconds[2];  // [waited] -> each collective's run time
    for (int run = 0; run < 2 * kProfileRuns; ++run) {
      const bool waited = run % 2 == 1;
      std::vector<std::shared_ptr<Work>> works;
      int64_t visited = 0;
      const auto hook = [&](const Node& node, const std::vector<Tensor>&) -> absl::Status {
        if (node.op() != Op::kCallFunction || ++visited % every != 0) return absl::OkStatus();
        works.push_back(zero3 ? comm_->AllGather(part, full) : comm_->AllReduce(full));
        return waited ? works.back()->Wait(o_.timeout) : absl::OkStatus();
      };
      InterpreterOptions forward = ProfileOptions();
      forward.after_node = hook;
      InterpreterOptions backward = forward;
      absl::Status ran = RunAotStep(program_->pair, program_->params, batch, forward, &backward,
                                    AotStepOptions{/*hand_over_saved=*/true})
                             .status();
      for (const std::shared_ptr<Work>& w : works) {  // every rank drains what it issued
        if (absl::Status s = w->Wait(o_.timeout); !s.ok() && ran.ok()) ran = s;
      }
      if (!ran.ok()) return Explain(ran, 0);
      for (const std::shared_ptr<Work>& w : works) seconds[waited].push_back(w->run_seconds());
    }
    return std::max(0.0, Mean(seconds[0]) - Mean(seconds[1]));
  }

  // The median (of an even count, the mean of the middle two); 0 when empty.
  static double Median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t k = v.size();
    return k % 2 == 1 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
  }
  // The mean; 0 when empty.
  static double Mean(const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0 : sum / static_cast<double>(v.size());
  }

  // How the calibration runs the unscheduled pair: this machine's kernels, memory already
  // checked, step 0's random stream.
  InterpreterOptions ProfileOptions() const {
    InterpreterOptions io;
    io.kernels = backend_->kernels();
    io.memory_checked = true;
    io.random_seed = RandomSeed(o_.seed, rank_, 0);
    return io;
  }

  // Compiles every program this rank will train (one per scheduler compared), and checks
  // that every rank compiled the same.
  absl::Status CompileAll() {
    JobOptions compiled = o_;
    compiled.collectives = summary_.collectives;
    algorithms_ = o_.compare_algorithms;
    if (algorithms_.empty() || o_.strategy == Strategy::kDdp) algorithms_ = {o_.algorithm};
    std::string text = JobText(o_, world_, backend_->nccl());
    cap_ = o_.bucket_cap_bytes;
    for (const std::string& algorithm : algorithms_) {
      AotPair pair = program_->pair;
      if (o_.strategy == Strategy::kZero3) {
        compiled.algorithm = algorithm;
        OVERLAP_RETURN_IF_ERROR(Compile(compiled, world_, pair, summary_));
      } else if (cap_ <= 0) {
        OVERLAP_ASSIGN_OR_RETURN(
            CapChoice choice,
            ChooseBucketCap(pair.forward, PartitionMode::kDefault, summary_.collectives));
        cap_ = choice.cap_bytes;
      }
      absl::StrAppend(&text, "\n", algorithm, "\n", WriteGraphJson(pair.forward), "\n",
                      WriteGraphJson(pair.backward));
      pairs_.push_back(std::move(pair));
    }
    summary_.bucket_cap_bytes = o_.strategy == Strategy::kDdp ? cap_ : 0;
    return CheckSameProgram(*store_, rank_, world_, Fingerprint(text), o_.timeout);
  }

  // Runs before each node: the compute trace, and the injected fault when this is its node.
  absl::Status NodeHook(const Node& node) {
    const int64_t now = NowUs();
    if (o_.record_trace) summary_.trace.push_back({node.name(), 0, last_us_, now - last_us_});
    last_us_ = now;
    const std::optional<FaultSpec>& f = o_.fault;
    if (f && f->rank == rank_ && f->step == step_ && f->node == node.name()) {
      std::fprintf(stderr, "overlap: rank %d: injected fault at step %lld, node '%s': %s\n", rank_,
                   static_cast<long long>(step_), node.name().c_str(),
                   f->action == FaultSpec::Action::kKill ? "kill" : "hang");
      std::fflush(stderr);
      if (f->action == FaultSpec::Action::kKill) raise(SIGKILL);
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return absl::OkStatus();
  }

  // Program `a`'s trainer, and what the simulator says of it (its peak, its step: the
  // forward, the backward and the collectives' drain, without the update).
  absl::Status MakeTrainer(size_t a, AlgorithmTiming& timing) {
    const AotPair& pair = pairs_[a];
    TrainerOptions options;
    options.seed = o_.seed;
    options.optimizer = o_.optimizer;
    options.timeout = o_.timeout;
    options.collectives = summary_.collectives;
    options.node_hook = [this](const Node& node) { return NodeHook(node); };
    options.kernels = replay_ != nullptr ? replay_.get() : backend_->kernels();
    options.copy_gradients = replay_ == nullptr;
    options.device = backend_->device();
    OVERLAP_ASSIGN_OR_RETURN(
        trainer_, CreateTrainer(o_.strategy, pair, program_->params, comm_.get(), options, cap_));
    summary_.buckets = trainer_->bucket_count();
    timing.simulated_peak_bytes = trainer_->simulated_peak_bytes();
    OVERLAP_ASSIGN_OR_RETURN(StepPrediction p, trainer_->PredictStep(pair));
    timing.predicted_step_s = p.step_s;
    timing.predicted_hidden = p.hidden();
    return absl::OkStatus();
  }

  // One optimizer step of the current trainer on `batch`: the report (the loss averaged over
  // ranks), the step's graph time (what the prediction is compared with) and its
  // collectives; `buffers` takes the buffers the step updated. A failure comes back
  // unexplained.
  absl::Status Step(const TensorMap& batch, StepReport& report, double& graph_s,
                    std::vector<std::shared_ptr<Work>>& works, TensorMap& buffers) {
    OVERLAP_ASSIGN_OR_RETURN(StepResult s, trainer_->Step(batch));
    for (auto& [key, t] : s.buffers) buffers[key] = std::move(t);
    report.loss = s.loss;
    report.seconds = s.seconds;
    report.comm_s = s.comm_s;
    report.exposed_s = s.exposed_s;
    report.peak_bytes = s.peak_bytes();
    works = std::move(s.works);
    graph_s = s.graph_s;
    // The mean loss over ranks (one scalar allreduce after the step's collectives).
    OVERLAP_ASSIGN_OR_RETURN(Tensor loss, Tensor::Empty(scalars_, DType::kFloat64, {1}));
    loss.data<double>()[0] = report.loss;
    if (comm_->device() == Device::kCpu) {
      OVERLAP_RETURN_IF_ERROR(comm_->AllReduce(loss)->Wait(o_.timeout));
    } else {  // NCCL reduces device memory: there and back
      Allocator on_device(backend_->device());
      OVERLAP_ASSIGN_OR_RETURN(Tensor d, Tensor::Empty(on_device, DType::kFloat64, {1}));
      OVERLAP_RETURN_IF_ERROR(backend_->device()->Copy(loss, d));
      OVERLAP_RETURN_IF_ERROR(comm_->AllReduce(d)->Wait(o_.timeout));
      OVERLAP_RETURN_IF_ERROR(backend_->device()->Copy(d, loss));
    }
    report.loss = loss.data<double>()[0] / world_;
    report.hidden = report.comm_s > 0 ? 1 - report.exposed_s / report.comm_s : 1;
    return absl::OkStatus();
  }

  // Trains program `a` for o.steps steps and records its figures; with `save`, writes the
  // trained parameters (rank 0; ZeRO-3 gathers its shards, every rank taking part).
  absl::Status Train(size_t a, bool save) {
    AlgorithmTiming timing;
    timing.algorithm = o_.strategy == Strategy::kDdp ? "ddp" : algorithms_[a];
    trainer_.reset();
    OVERLAP_RETURN_IF_ERROR(MakeTrainer(a, timing));
    std::vector<double> graph_times;
    double comm_total = 0, exposed_total = 0;
    TensorMap buffers = program_->buffers;  // updated by the steps (batch norm's statistics)
    for (step_ = 1; step_ <= o_.steps; ++step_) {
      OVERLAP_ASSIGN_OR_RETURN(TensorMap batch, program_->batch(step_ - 1));
      for (const auto& [key, t] : buffers) batch.emplace(key, t);
      last_us_ = NowUs();
      StepReport report;
      report.step = step_;
      double graph_s = 0;
      std::vector<std::shared_ptr<Work>> works;
      if (absl::Status s = Step(batch, report, graph_s, works, buffers); !s.ok()) {
        return Explain(s, step_);
      }
      graph_times.push_back(graph_s);
      comm_total += report.comm_s;
      exposed_total += report.exposed_s;
      timing.peak_bytes = std::max(timing.peak_bytes, report.peak_bytes);
      if (o_.record_trace) {
        for (const std::shared_ptr<Work>& w : works) {
          const int64_t start = absl::ToUnixMicros(w->started());
          summary_.trace.push_back(
              {w->what(), 1, start, static_cast<int64_t>(w->run_seconds() * 1e6)});
        }
      }
      summary_.steps.push_back(report);
      if (on_step_) on_step_(report);
    }
    timing.measured_step_s = MedianAfterFirst(graph_times);
    timing.hidden = comm_total > 0 ? 1 - exposed_total / comm_total : 1;
    summary_.simulated_peak_bytes = timing.simulated_peak_bytes;
    if (save && !o_.save_path.empty()) {
      absl::StatusOr<TensorMap> gathered = trainer_->GatherParams();
      if (!gathered.ok()) return Explain(gathered.status(), o_.steps);
      TensorMap trained = *std::move(gathered);
      // This rank's buffers as its steps left them (rank 0's are written: DDP broadcasts
      // rank 0's before each forward; DeepSpeed's ZeRO-3 leaves each rank its own).
      for (const auto& [key, t] : buffers) {
        if (absl::StartsWith(key, "buffer/")) trained[key] = t;
      }
      if (rank_ == 0) OVERLAP_RETURN_IF_ERROR(WriteParamsFile(o_.save_path, trained, *backend_));
    }
    if (o_.strategy == Strategy::kZero3) summary_.state = trainer_->state_bytes();
    summary_.predicted_step_s = timing.predicted_step_s;
    summary_.comparison.push_back(timing);
    return absl::OkStatus();
  }

  // The median of the steps after the first (which pays the first touches of every
  // buffer): one noisy step on a shared machine moves it little. 0 without steps.
  static double MedianAfterFirst(std::vector<double> times) {
    if (times.size() > 1) times.erase(times.begin());
    return Median(std::move(times));
  }

  const JobOptions& o_;
  const RendezvousInfo& info_;
  const std::function<void(const StepReport&)>& on_step_;
  const int rank_, world_;
  JobSummary summary_;
  std::unique_ptr<Program> program_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<TcpStore> store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Watchdog> watchdog_;  // after comm_: it goes first
  std::vector<std::string> algorithms_;
  std::vector<AotPair> pairs_;
  int64_t cap_ = 0;  // DDP's bucket cap
  std::unique_ptr<KernelRegistry> replay_;
  std::unique_ptr<DistributedTrainer> trainer_;
  Allocator scalars_;
  int64_t step_ = 0;     // the step running now (from 1), for the fault hook
  int64_t last_us_ = 0;  // when the last node (or the step) began, for the trace
};

}  // namespace

absl::StatusOr<JobSummary> RunJobRank(const JobOptions& o, const RendezvousInfo& info,
                                      const std::function<void(const StepReport&)>& on_step) {
  return RankJob(o, info, on_step).Run();
}

}  // namespace overlap
