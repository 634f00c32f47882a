// overlap run / overlap worker: data-parallel training across processes (runtime/job/job.h).
// `run` starts N local ranks of `worker` (runtime/job/launcher.h) and merges their traces;
// `worker` is one rank, joining a job from the torchrun variables (so two hosts each run
// `overlap worker` with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set).
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "graph/models.h"
#include "graph/output_file.h"
#include "graph/size.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/core/blas.h"
#include "runtime/job/backend.h"
#include "runtime/job/job.h"
#include "runtime/job/job_report.h"
#include "runtime/job/launcher.h"
#include "schedule/scheduler_registry.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

// The job's flags, shared by run and worker (run forwards them to its workers).
constexpr FlagSpec kJobFlags[] = {
    {"strategy", 0, "S", "ddp (default) or zero3"},
    {"device", 0, "D",
     "cpu (default); cuda: one GPU per rank (LOCAL_RANK), NCCL collectives,\n"
     "exits 1 saying why when no usable GPU is present; cuda-emulated: the\n"
     "CUDA backend on an emulated device (host memory, stream order checked)"},
    {"collectives", 0, "L",
     "with a device: nccl (cuda's default) or gloo (through the host; the\n"
     "emulated device's default and only choice across processes)"},
    {"batch", 0, "B", "rows per rank (default: the preset's); the global batch is B x ranks"},
    {"layers", 0, "N", "built-in models: the transformers' layers, or mlp's linear layers"},
    {"width", 0, "W", "mlp: the hidden layers' width (default: the preset's)"},
    {"steps", 0, "K", "optimizer steps (default 20)"},
    {"threads", 0, "N",
     "OpenBLAS and oneDNN threads per rank (default: this machine's cores\n"
     "divided among its ranks, LOCAL_WORLD_SIZE, at least 1)"},
    {"algorithm", 0, "A",
     "zero3: the scheduler (default lookahead; overlap schedule\n"
     "--list-algorithms); A,B,... or all: train with each in turn and\n"
     "print measured against predicted steps"},
    {"calibrate", 0, "",
     "measure first, every rank at once, and schedule and predict with it:\n"
     "the collectives (as bench-comm) and, with real kernels on the CPU,\n"
     "each node's run time (the median of 3 forward and backward runs)"},
    {"bucket-cap", 0, "SIZE", "ddp: bucket cap, or auto (default: chosen by the cost model)"},
    {"timeout", 0, "SECONDS", "collectives, rendezvous and the watchdog (default 60)"},
    {"deterministic", 0, "", "sum every element in rank order (results independent of buckets)"},
    {"collective-model", 0, "FILE", "bench-comm's fitted model for the scheduler and predictions"},
    {"time-scale", 0, "X",
     "timed replay: compute waits device_time x X (>= 1 ms) instead of\n"
     "running kernels; collectives stay real"},
    {"race-check", 0, "",
     "debug: random delays on the communication threads, NaN in freed\n"
     "buffers"},
};

constexpr FlagSpec kRunFlags[] = {
    {"nproc", 0, "N", "ranks to start on this machine (default 2)"},
    {"trace", 0, "FILE", "write one Chrome / Perfetto trace: a track per rank and stream"},
};

constexpr FlagSpec kWorkerFlags[] = {
    {"trace", 0, "FILE", "write this rank's trace events to FILE.rank<R>"},
};

// The job options the flags describe; usage errors are recorded in `in`.
JobOptions ReadJobFlags(Invocation& in) {
  JobOptions o;
  if (std::optional<std::string> s = in.String("strategy")) {
    absl::StatusOr<Strategy> st = ParseStrategy(*s);
    if (st.ok()) {
      o.strategy = *st;
    } else {
      in.AddUsageError(std::string(st.status().message()));
    }
  }
  if (std::optional<std::string> d = in.String("device")) {
    absl::StatusOr<ComputeDevice> device = ParseComputeDevice(*d);
    if (device.ok()) {
      o.device = *device;
    } else {
      in.AddUsageError(std::string(device.status().message()));
    }
  }
  if (std::optional<std::string> c = in.String("collectives")) {
    absl::StatusOr<CollectiveLibrary> lib = ParseCollectiveLibrary(*c);
    if (lib.ok()) {
      o.collective_library = *lib;
    } else {
      in.AddUsageError(std::string(lib.status().message()));
    }
  }
  const TrainingInputs inputs = ReadTrainingInputFlags(in);
  o.model = inputs.model;
  o.preset = inputs.preset;
  o.graph_path = inputs.graph_path;
  o.backward_graph_path = inputs.backward_graph_path;
  o.weights_path = inputs.weights_path;
  o.data_path = inputs.data_path;
  o.save_path = inputs.save_path;
  o.seed = inputs.seed;
  o.batch = in.Int("batch", 1, int64_t{1} << 30, 0);
  o.layers = in.Int("layers", 1, 4096, 0);
  o.width = in.Int("width", 1, int64_t{1} << 20, 0);
  if ((o.layers > 0 || o.width > 0) && !o.graph_path.empty()) {
    in.AddUsageError("--layers and --width resize a built-in model, not --graph");
  }
  o.steps = in.Int("steps", 1, 1000000, 20);
  o.algorithm = in.String("algorithm").value_or("lookahead");
  if (o.algorithm == "all") {
    o.compare_algorithms.clear();
    for (const SchedulerEntry& e : Schedulers()) o.compare_algorithms.emplace_back(e.name);
  } else if (absl::StrContains(o.algorithm, ',')) {
    o.compare_algorithms = absl::StrSplit(o.algorithm, ',', absl::SkipEmpty());
  }
  for (const std::string& a : o.compare_algorithms.empty() ? std::vector<std::string>{o.algorithm}
                                                           : o.compare_algorithms) {
    if (!FindScheduler(a).ok()) {
      in.AddUsageError(std::string(FindScheduler(a).status().message()));
      break;
    }
  }
  if (!o.compare_algorithms.empty()) o.algorithm = o.compare_algorithms.front();
  o.calibrate = in.Switch("calibrate");
  if (std::optional<std::string> cap = in.String("bucket-cap"); cap && *cap != "auto") {
    o.bucket_cap_bytes = in.Size("bucket-cap").value_or(0);
    if (o.bucket_cap_bytes <= 0 && !in.has_usage_error()) {
      in.AddUsageError("--bucket-cap must be > 0 (or auto)");
    }
  }
  o.optimizer = ReadOptimizerFlags(in);
  // zero3: the budget; the job counts the state at its world size.
  o.budget = ReadBudgetFlags(in, /*world_size=*/1, o.optimizer);
  o.timeout = absl::Seconds(in.Positive("timeout", 86400, 60));
  o.deterministic = in.Switch("deterministic");
  o.time_scale = in.NonNegative("time-scale", 1e9, 0);
  o.race_check = in.Switch("race-check");
  if (std::optional<CollectiveModel> m = ReadCollectiveModelFlag(in)) o.collectives = *m;
  return o;
}

// --threads, checked where it is read: by `run` before any rank starts, and by each worker.
int64_t ReadThreadsFlag(Invocation& in) { return in.Int("threads", 1, 4096, 0); }

// What a ZeRO-3 step's prediction is for: the simulator runs the graphs' device_time (the
// cost model's device, docs/cost-model.md), which is not the CPU whose kernels were timed,
// unless the step replayed those times (--time-scale).
std::string PredictionBasis(const JobOptions& o, const JobSummary& s) {
  if (o.time_scale > 0) {
    return absl::StrFormat(" (the replayed device times x %g: comparable with the measured step)",
                           o.time_scale);
  }
  if (s.profiled) return " (this machine's kernels, timed before training)";
  return " on the cost model's device (the graphs' device_time), not this CPU's kernels";
}

// --device cuda needs a usable GPU: the reason otherwise (exit 1) before any rank starts.
int CheckDevice(Invocation& in, const JobOptions& o) {
  absl::Status usable = CheckComputeDevice(o.device);
  return usable.ok() ? kExitOk : in.BadInput(usable);
}

// A worker's start, once its flags are read: its BLAS threads (`threads`, 0: this machine's
// cores shared among its ranks), its place in the job (`info`, from the environment), the
// checks made before step 1, and the injected fault (into `o`). kExitOk, or the exit code
// of what was wrong.
int StartWorker(Invocation& in, int64_t threads, JobOptions& o, RendezvousInfo& info_out) {
  // The machine's cores shared among its ranks: a rank taking every core oversubscribes
  // them N-fold (each rank's OpenBLAS and OpenMP pools would spin on all of them).
  if (threads == 0) {
    int64_t local = 1;
    if (const char* v = std::getenv("LOCAL_WORLD_SIZE");
        v == nullptr || !absl::SimpleAtoi(v, &local) || local < 1) {
      local = 1;
    }
    threads =
        std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) / local);
  }
  SetBlasThreads(static_cast<int>(threads));  // OpenBLAS's pool and OpenMP's
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  if (!info.ok()) {
    in.AddUsageError(std::string(info.status().message()));
    return in.UsageError();
  }
  if (info->rank == 0 && !info->agent_store && info->secret.empty()) {
    std::fprintf(in.err(),
                 "overlap: note: the store at %s:%d has no secret: any process that reaches "
                 "that port can read and steer this job (set OVERLAP_STORE_SECRET or "
                 "OVERLAP_STORE_SECRET_FILE on every rank; docs/runtime.md)\n",
                 info->master_addr.c_str(), info->master_port);
  }
  if (!o.save_path.empty() && info->rank == 0) {
    // Checked before step 1, not found wanting after the last.
    if (absl::Status s = CheckOutputPath(o.save_path); !s.ok()) return in.BadInput(s);
  }
  absl::StatusOr<std::optional<FaultSpec>> fault = FaultFromEnv();
  if (!fault.ok()) return in.BadInput(fault.status());
  o.fault = *fault;
  info_out = *std::move(info);
  return kExitOk;
}

// Rank 0's line for each step.
void PrintStep(Invocation& in, const JobOptions& o, const StepReport& r) {
  if (o.time_scale > 0) {  // no kernels ran: there is no loss
    std::fprintf(in.out(), "step %lld (timed replay) time %s hidden %s\n",
                 static_cast<long long>(r.step), FormatSeconds(r.seconds).c_str(),
                 FormatFraction(r.hidden).c_str());
  } else {
    std::fprintf(in.out(), "step %lld loss %.9g time %s hidden %s\n",
                 static_cast<long long>(r.step), r.loss, FormatSeconds(r.seconds).c_str(),
                 FormatFraction(r.hidden).c_str());
  }
  std::fflush(in.out());
}

int Worker(Invocation& in) {
  // Named in ps and top as what it is (the kernel's name is the executable's otherwise);
  // set before any thread starts, so that its threads inherit it.
  prctl(PR_SET_NAME, "overlap worker");
  JobOptions o = ReadJobFlags(in);
  const int64_t threads = ReadThreadsFlag(in);
  if (in.has_usage_error()) return in.UsageError();
  if (int d = CheckDevice(in, o); d != kExitOk) return d;
  RendezvousInfo info;
  if (int started = StartWorker(in, threads, o, info); started != kExitOk) return started;
  const std::optional<std::string> trace = in.Path("trace");
  o.record_trace = trace.has_value();
  const int rank = info.rank;
  if (rank == 0) {
    std::fprintf(in.summary(), "%s on %d rank(s): %s%s, %lld steps\n",
                 std::string(StrategyName(o.strategy)).c_str(), info.world_size,
                 o.graph_path.empty() ? o.model.c_str() : o.graph_path.c_str(),
                 o.graph_path.empty() ? (o.preset == Preset::kTiny ? " (tiny)" : " (default)") : "",
                 static_cast<long long>(o.steps));
    std::fflush(in.summary());
  }
  absl::StatusOr<JobSummary> s = RunJobRank(o, info, [&](const StepReport& r) {
    if (rank == 0) PrintStep(in, o, r);
  });
  if (!s.ok()) return in.BadInput(s.status());
  // Every rank: its memory beside the simulator's, and its state apart (runtime/job/job_report.h).
  std::fprintf(in.err(), "%s\n", FormatRankMemory(rank, *s, o.strategy).c_str());
  if (rank == 0) {
    JobReportFacts facts;
    facts.strategy = o.strategy;
    facts.replayed = o.time_scale > 0;
    facts.prediction_basis = PredictionBasis(o, *s);
    std::fputs(FormatJobTotals(*s, facts).c_str(), in.summary());
    std::fputs(FormatSchedulerComparison(*s, facts.replayed).c_str(), in.out());
  }
  if (trace) {
    const std::string part = absl::StrCat(*trace, ".rank", rank);
    absl::Status w = WriteTextFile(in, part, TraceEventsJson(s->trace, rank));
    if (!w.ok()) return in.BadInput(w);
  }
  return kExitOk;
}

int Run(Invocation& in) {
  const int64_t nproc = in.Int("nproc", 1, 256, 2);
  // Read here so that a bad flag fails before any rank starts.
  const JobOptions o = ReadJobFlags(in);
  ReadThreadsFlag(in);  // every flag is checked once, here, not by each rank
  if (in.has_usage_error()) return in.UsageError();
  if (int d = CheckDevice(in, o); d != kExitOk) return d;
  // Refused before any rank starts: outputs that cannot be written, and a job whose ranks
  // would not fit in this machine's memory together.
  for (const char* flag : {"save", "trace"}) {
    if (std::optional<std::string> path = in.Path(flag)) {
      if (absl::Status s = CheckOutputPath(*path); !s.ok()) return in.BadInput(s);
    }
  }
  if (absl::Status w = CheckJobWeights(o); !w.ok()) return in.BadInput(w);
  if (o.device == ComputeDevice::kCpu) {
    absl::Status fits = CheckJobMemory(o, static_cast<int>(nproc), static_cast<int>(nproc));
    if (!fits.ok()) return in.BadInput(fits);
  }
  const bool gloo =
      o.collective_library == CollectiveLibrary::kGloo ||
      (o.collective_library == CollectiveLibrary::kDefault && o.device != ComputeDevice::kCuda);
  if (gloo) {
    if (absl::Status ports = CheckLocalPorts(static_cast<int>(nproc)); !ports.ok()) {
      return in.BadInput(ports);
    }
  }
  LaunchOptions lo;
  lo.nproc = static_cast<int>(nproc);
  lo.argv = {WorkerExecutable(), "worker"};
  for (absl::Span<const FlagSpec> group :
       {absl::Span<const FlagSpec>(kJobFlags), TrainingInputFlags(), BudgetFlags(),
        TrainingOptimizerFlags()}) {
    for (const FlagSpec& f : group) {
      if (!in.Has(f.name)) continue;
      lo.argv.push_back(absl::StrCat("--", f.name));
      if (!f.value.empty()) lo.argv.push_back(*in.String(f.name));
    }
  }
  const std::optional<std::string> trace = in.Path("trace");
  if (trace) {
    lo.argv.push_back("--trace");
    lo.argv.push_back(*trace);
  }
  lo.grace = o.timeout;
  lo.finish_grace = o.timeout;
  std::fflush(in.out());
  std::fflush(in.err());
  absl::StatusOr<LaunchResult> r = Launch(lo);
  if (!r.ok()) return in.BadInput(r.status());
  if (r->exit_code != 0) {
    in.BadInput(absl::UnavailableError(absl::StrCat("the job failed: ", r->message)));
    return r->signal != 0 ? 128 + r->signal : kExitBadInput;
  }
  if (trace) {
    std::string merged = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    for (int rank = 0; rank < lo.nproc; ++rank) {
      const std::string part = absl::StrCat(*trace, ".rank", rank);
      std::ifstream f(part);
      std::stringstream ss;
      ss << f.rdbuf();
      if (!f) return in.BadInput(absl::NotFoundError(absl::StrCat("no trace part ", part)));
      absl::StrAppend(&merged, rank > 0 ? ",\n" : "", ss.str());
      std::remove(part.c_str());
    }
    absl::StrAppend(&merged, "\n]}\n");
    absl::Status w = WriteTextFile(in, *trace, merged);
    if (!w.ok()) return in.BadInput(w);
    std::fprintf(in.summary(), "wrote the trace of %d ranks to %s (chrome://tracing, Perfetto)\n",
                 lo.nproc, trace->c_str());
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& RunCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "run";
    s.synopsis = "--nproc N [--strategy ddp|zero3] [--model M] [options]";
    s.summary = "train across N local processes (DDP or ZeRO-3 over Gloo)";
    s.description =
        "Starts N ranks of `overlap worker` on this machine, as `torchrun --standalone` does\n"
        "(the launcher serves the rendezvous store), and supervises them: when one fails,\n"
        "the others get the collective timeout to report it and are then killed. Each step\n"
        "prints `step k loss x` (the mean over ranks), its time and the hidden-communication\n"
        "fraction (1 - exposed / total communication; docs/runtime.md). Each rank prints its\n"
        "peak of graph values beside the simulator's prediction.\n";
    s.flags = {kRunFlags, kJobFlags, TrainingInputFlags(), BudgetFlags(), TrainingOptimizerFlags()};
    s.footer = "Faults for tests: OVERLAP_FAULT=rank=R,step=K,node=NAME,action=kill|hang.\n";
    s.run = &Run;
    return s;
  }();
  return spec;
}

const CommandSpec& WorkerCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "worker";
    s.synopsis = "[--strategy ddp|zero3] [--model M] [options]";
    s.summary = "one rank of a job, joined from the torchrun variables";
    s.description =
        "Joins a job from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (LOCAL_RANK and\n"
        "LOCAL_WORLD_SIZE optional; rank 0 serves the store unless\n"
        "TORCHELASTIC_USE_AGENT_STORE=True, where torchrun's agent serves PyTorch's TCPStore),\n"
        "or under srun from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the first host of\n"
        "SLURM_JOB_NODELIST, so a job spans hosts with one command per host (docs/runtime.md,\n"
        "\"Under the launchers users already have\").\n"
        "Every rank must be given the same flags: the start-up check compares a hash of the\n"
        "compiled graphs and flags and fails naming the first rank that differs.\n";
    s.flags = {kWorkerFlags, kJobFlags, TrainingInputFlags(), BudgetFlags(),
               TrainingOptimizerFlags()};
    s.footer =
        "Two hosts: on host A (10.0.0.1)\n"
        "  RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 overlap worker --model gpt2\n"
        "and on host B the same with RANK=1.\n";
    s.run = &Worker;
    return s;
  }();
  return spec;
}

}  // namespace overlap
