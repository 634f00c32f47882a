// One rank of data-parallel training, whatever the strategy: DDP (ddp.h: whole replicas,
// bucketed allreduces) and ZeRO-3 (zero3.h: sharded parameters, allgathers and
// reduce-scatters) both implement DistributedTrainer, and take the options they share as
// TrainerOptions, so a job (runtime/job/job.h) holds one trainer and never asks which.
// strategy.h creates either from a Strategy.
//
//   std::unique_ptr<DistributedTrainer> t = ...;  // CreateTrainer (strategy.h)
//   absl::StatusOr<StepResult> s = t->Step(my_batch);
//   absl::StatusOr<TensorMap> trained = t->GatherParams();  // every rank calls it
#ifndef OVERLAP_RUNTIME_TRAIN_DISTRIBUTED_TRAINER_H_
#define OVERLAP_RUNTIME_TRAIN_DISTRIBUTED_TRAINER_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/kernel.h"
#include "runtime/train/train.h"

namespace overlap {

// What every strategy's trainer takes alike.
struct TrainerOptions {
  // The seed of the step's random ops (dropout): step k on rank r draws from
  // RandomSeed(seed, r, k) (runtime/core/random.h), so each rank has its own stream, as each
  // torch process has its own generator, and a run is reproducible from the seed.
  uint64_t seed = 1;
  OptimizerOptions optimizer;
  // Waiting for collectives: DDP, the allreduces of a step; ZeRO-3, any one wait.
  absl::Duration timeout = absl::Seconds(60);
  // The collectives' model for the simulated figures reported beside the measured ones
  // (its world_size is set to the communicator's).
  CollectiveModel collectives;
  // Called after every call node of the forward and the backward (fault injection, traces);
  // an error ends the step.
  std::function<absl::Status(const Node&)> node_hook;
  // The kernels (nullptr: CpuKernels()); timed replay passes waiting ones
  // (runtime/exec/replay_kernels.h). Not owned.
  const KernelRegistry* kernels = nullptr;
  // Copy each gradient into its bucket. Timed replay turns it off: its values mean nothing,
  // and the copies are CPU work the simulator does not model, competing with the loopback
  // collectives for the same cores (the buckets are still reduced at full size).
  bool copy_gradients = true;
  // The device the forward and backward run on (runtime/cuda/cuda_device.h; `kernels` must
  // be its own); nullptr: the host. Parameters (or shards) and the optimizer stay on the
  // host; how each strategy moves them and its buckets: ddp.h, zero3.h. Not owned.
  DeviceMemory* device = nullptr;
};

// Per-rank state outside the step's graph values, in bytes.
struct TrainerStateBytes {
  int64_t params = 0;     // the rank's parameters: whole (DDP) or its shards (ZeRO-3)
  int64_t optimizer = 0;  // optimizer state on them
  int64_t buffers = 0;    // bucket buffers and resident copies (communication buffers)
};

// What the simulator predicts of a step's graph part (StepResult::graph_s: the forward, the
// backward and the wait for the step's collectives; not the update).
struct StepPrediction {
  double step_s = 0;
  double compute_s = 0;  // the compute stream's busy time: the graphs' summed device_time,
                         // slowed beside collectives by the model's compute_slowdown
  double comm_s = 0;     // the collectives' summed time under the model
  double exposed_s = 0;  // step_s - compute_s: communication nothing hid
  // The hidden-communication fraction, as the trainers measure it (1 without collectives).
  double hidden() const { return comm_s > 0 ? 1 - exposed_s / comm_s : 1; }
};

// PredictStep's check of its argument: OK when `timed` has `mine`'s node counts (the same
// pair, device times aside), InvalidArgument otherwise. O(1).
inline absl::Status CheckTimedPair(const AotPair& mine, const AotPair& timed) {
  if (timed.forward.size() != mine.forward.size() ||
      timed.backward.size() != mine.backward.size()) {
    return absl::InvalidArgumentError("PredictStep: the pair is not the one the trainer runs");
  }
  return absl::OkStatus();
}

// One rank's trainer. Every rank of a job holds the same strategy's and calls the same
// methods in the same order: a step is a collective.
class DistributedTrainer {
 public:
  virtual ~DistributedTrainer() = default;
  // One optimizer step on this rank's batch (data placeholders by name). Errors: the
  // interpreter's (naming the node), a collective's or a timeout (naming the collective).
  virtual absl::StatusOr<StepResult> Step(const TensorMap& data) = 0;
  // Every parameter, whole, by parameter name, as the steps so far left it: what a job
  // saves. A collective under ZeRO-3 (every rank must call it); DDP copies its replica.
  virtual absl::StatusOr<TensorMap> GatherParams() = 0;
  // The gradient buckets, one collective each per step (DDP allreduces, ZeRO-3
  // reduce-scatters).
  virtual int64_t bucket_count() const = 0;
  // The simulator's peak of graph values, the larger of the forward's and the backward's as
  // they run (ZeRO-3: as scheduled, at this world size), under options.collectives. O(1).
  virtual int64_t simulated_peak_bytes() const = 0;
  // The state beside the step's graph values, now. O(parameters).
  virtual TrainerStateBytes state_bytes() const = 0;
  // The step this trainer would take on the simulator, under options.collectives, with the
  // device times of `timed`: the pair it was created with, nodes and order unchanged, its
  // device_time replaced (timed replay's, or a profile of this machine's kernels). Errors:
  // a pair that is not this trainer's. O(N + E) over both graphs.
  virtual absl::StatusOr<StepPrediction> PredictStep(const AotPair& timed) const = 0;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_DISTRIBUTED_TRAINER_H_
