// One rank of a data-parallel training job: what `overlap worker` runs, and what each of
// the N processes `overlap run` starts runs. It builds (or reads) the AOT pair, compiles it
// for the strategy (DDP: the partitioner's buckets; ZeRO-3: insertion and a scheduler),
// joins the job through the torchrun variables (tcp_store.h), checks that every rank
// compiled the same program, starts a watchdog (watchdog.h) and trains.
//
//   JobOptions o; o.strategy = Strategy::kZero3; o.model = "gpt2";
//   absl::StatusOr<JobSummary> s = RunJobRank(o, *RendezvousFromEnv(), print_step);
//
// Data: each step's global batch is the synthetic task's (runtime/train/train.h) at
// batch x world rows, and rank r trains on its block of rows (ShardRows), so N ranks see
// what one process would on the whole batch. Graph files (--graph) get seeded inputs per
// rank and step instead, unless a data file (data_path: global batches, split by rows the
// same way) gives them; the graph is then one rank's, at global rows / world.
//
// The hidden-communication fraction (docs/runtime.md) of a step is 1 - exposed / total:
// total = the summed run time of the step's collectives on the communication thread,
// exposed = the time compute spent blocked waiting for them (ZeRO-3: waits and the final
// drain; DDP: the drain after the backward). 1 when nothing was communicated.
#ifndef OVERLAP_RUNTIME_JOB_JOB_H_
#define OVERLAP_RUNTIME_JOB_JOB_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "graph/aot.h"
#include "graph/cost_model.h"
#include "graph/models.h"
#include "graph/value_bytes.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/job/backend.h"
#include "runtime/train/distributed_trainer.h"
#include "runtime/train/strategy.h"
#include "runtime/train/train.h"
#include "schedule/budget.h"

namespace overlap {

// Strategy, ParseStrategy and StrategyName: runtime/train/strategy.h. ComputeDevice and
// CollectiveLibrary: runtime/job/backend.h.

// The fault a test injects (OVERLAP_FAULT="rank=1,step=3,node=mm_2,action=kill"): when rank
// `rank` has run node `node` (forward or backward) in step `step` (from 1), it kills itself
// with SIGKILL or hangs (its compute thread stops; its watchdog keeps beating).
struct FaultSpec {
  int rank = 0;
  int64_t step = 1;
  std::string node;
  enum class Action { kKill, kHang } action = Action::kKill;
};
// The spec in OVERLAP_FAULT, none when unset; InvalidArgument naming the bad field.
absl::StatusOr<std::optional<FaultSpec>> FaultFromEnv();

// Forward and backward runs each rank times for JobOptions::calibrate (after one to warm up).
inline constexpr int kProfileRuns = 3;

struct JobOptions {
  Strategy strategy = Strategy::kDdp;
  // Where the forward and backward run and who reduces (above): DDP and ZeRO-3 alike.
  ComputeDevice device = ComputeDevice::kCpu;
  CollectiveLibrary collective_library = CollectiveLibrary::kDefault;
  // A built-in model at a preset and per-rank batch (0: the preset's), or an AOT pair read
  // from files (graph_path and backward_graph_path), with parameters from weights_path
  // (safetensors) or seeded.
  std::string model = "gpt2";
  Preset preset = Preset::kTiny;
  int64_t batch = 0;
  int64_t layers = 0, width = 0;  // > 0: the preset's resized (ModelOptions)
  std::string graph_path, backward_graph_path, weights_path;
  // Global batches (safetensors, SplitBatches: one batch, or "batch/<k>/<input>" keys;
  // dimension 0 = rows x world): step s trains on batch (s - 1) mod K, rank r on its block
  // of rows. Empty: the synthetic task (built-in models) or seeded inputs per rank and step
  // (graph files).
  std::string data_path;
  // Write the trained parameters here (rank 0; safetensors by parameter name), if set.
  std::string save_path;
  int64_t steps = 20;
  std::string algorithm = "lookahead";  // ZeRO-3's scheduler
  // ZeRO-3: the scheduler's budget on graph values, given or derived from the device's
  // memory by schedule/budget.h's one rule (ResolveBudget; its state from `optimizer` and the
  // world size, which the job fills in); none by default.
  BudgetRequest budget;
  int64_t bucket_cap_bytes = 0;  // DDP: 0 chooses it (partition/bucket_cap.h)
  OptimizerOptions optimizer;
  uint64_t seed = 1;
  absl::Duration timeout = absl::Seconds(60);  // collectives, the store, the watchdog
  bool deterministic = false;
  // The collectives' model (bench-comm's fit) for the schedulers and the predictions.
  CollectiveModel collectives;
  // > 0: timed replay: compute nodes wait device_time x time_scale (at least 1 ms; nodes
  // without device time do not wait) instead of running kernels; collectives stay real.
  double time_scale = 0;
  // Measure before training, every rank at once, and schedule and predict with what was
  // measured: the collectives (bench_comm.h, 4 KiB to 16 MiB; the fit replaces
  // `collectives`) and, with this machine's kernels on the host (no time_scale, device
  // cpu), each compute node's run time (the mean over ranks of each rank's median over
  // kProfileRuns forward and backward runs replaces its device_time), so the prediction is
  // of this CPU as its ranks share it; and kProfileRuns more with collectives in flight,
  // whose slowdown becomes the model's compute_slowdown, and 2 kProfileRuns issuing small
  // collectives from the compute thread, with and without waiting for each, whose
  // difference becomes its busy_start_s (contention for the cores). Costs the collectives'
  // sweep and 4 kProfileRuns + 1 single-process steps (whole parameters, also under
  // ZeRO-3).
  bool calibrate = false;
  // ZeRO-3: train with each of these schedulers in turn (same ranks, same start), for
  // measured-against-predicted comparisons; empty: `algorithm` only.
  std::vector<std::string> compare_algorithms;
  // Debug: random delays (0-2 ms) before each collective and NaN in freed buffers.
  bool race_check = false;
  bool record_trace = false;
  // The fault to inject (FaultFromEnv), if any.
  std::optional<FaultSpec> fault;
};

struct StepReport {
  int64_t step = 0;        // from 1
  double loss = 0;         // the mean over ranks
  double seconds = 0;      // this rank's step, optimizer included
  double comm_s = 0;       // this rank's collectives' run time
  double exposed_s = 0;    // compute blocked on them
  double hidden = 1;       // 1 - exposed / comm
  int64_t peak_bytes = 0;  // measured graph values (larger of forward and backward)
};

// One Chrome trace event of this rank (complete event, microseconds since the epoch).
struct TraceEvent {
  std::string name;
  int track = 0;  // 0 compute, 1 communication
  int64_t start_us = 0, duration_us = 0;
};

// One scheduler's figures in a comparison (JobOptions::compare_algorithms).
struct AlgorithmTiming {
  std::string algorithm;
  double predicted_step_s = 0;  // simulated forward + backward under the job's model
  double measured_step_s = 0;   // forward + backward + drain: the median step after the first
  double predicted_hidden = 1;  // the simulated hidden-communication fraction
  double hidden = 1;            // measured hidden-communication fraction, all steps
  int64_t peak_bytes = 0, simulated_peak_bytes = 0;
};

struct JobSummary {
  std::vector<StepReport> steps;
  int64_t simulated_peak_bytes = -1;    // the larger graph's simulated peak of graph values
  double predicted_step_s = -1;         // simulated forward + backward step (and DDP's drain)
  bool profiled = false;                // device times measured here (JobOptions::calibrate)
  std::optional<int64_t> budget_bytes;  // the budget the schedule was made under, if any
  TrainerStateBytes state;              // ZeRO-3: shards, optimizer, buffers
  int64_t buckets = 0;                  // DDP allreduce / ZeRO-3 reduce-scatter buckets
  int64_t bucket_cap_bytes = 0;         // DDP
  std::string algorithm;
  std::vector<TraceEvent> trace;
  CollectiveModel collectives;              // the model used (calibrated or given)
  std::vector<AlgorithmTiming> comparison;  // one per scheduler trained, in order
};

// What one rank of a job needs, estimated before anything is allocated: the larger
// graph's simulated peak of graph values (the unscheduled order), the forward's saved
// tensors, and the state beside the graphs: parameters, gradients and the optimizer's
// moments (in the parameters' dtype: AdamW two, SGD with momentum one), whole under DDP (plus its
// buckets, one more copy of the gradients) and 1/world each under ZeRO-3 (plus the gathered
// parameters, at most one whole copy). An estimate, not a bound: kernels' scratch and the
// process itself come on top.
struct RankMemoryEstimate {
  int64_t graph_peak = 0, saved = 0, params = 0, gradients = 0, optimizer = 0, buffers = 0;
  // Their sum, the largest int64 when it overflows (refused, never wrapped small).
  int64_t total() const {
    return AddBytes(AddBytes(AddBytes(graph_peak, saved), AddBytes(params, gradients)),
                    AddBytes(optimizer, buffers));
  }
};
absl::StatusOr<RankMemoryEstimate> EstimateRankMemory(const AotPair& pair, const JobOptions& o,
                                                      int world);

// The job's AOT pair as the options give it (a built-in model or the files), estimated for
// one rank, times `local_ranks` against the memory available now: ResourceExhausted naming
// every figure when it does not fit. What `run` checks before starting ranks and each
// worker before allocating. O(graph) plus the simulator's run.
absl::Status CheckJobMemory(const JobOptions& o, int world, int local_ranks);

// The job's --weights file against its forward graph (CheckWeights, runtime/train/train.h):
// what `run` checks once before starting ranks, so a bad file is one message, not one per
// rank. OK without a weights file. Reads the whole file once: O(file) time and memory.
absl::Status CheckJobWeights(const JobOptions& o);

// Runs this rank's part of the job; `on_step` (may be empty) sees each step's report on
// every rank. Errors: the model's or files', the start-up check (naming the first rank
// whose program differs), a collective's failure with the lost rank named (watchdog.h).
absl::StatusOr<JobSummary> RunJobRank(const JobOptions& options, const RendezvousInfo& info,
                                      const std::function<void(const StepReport&)>& on_step);

// A stable 64-bit fingerprint (FNV-1a) of `text`, as 16 hex digits. O(size).
std::string Fingerprint(absl::string_view text);

// `events` of rank `rank` as Chrome trace JSON objects (one per line, comma-separated),
// with the process and thread names: what a launcher concatenates into one trace.
std::string TraceEventsJson(const std::vector<TraceEvent>& events, int rank);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_JOB_JOB_H_
