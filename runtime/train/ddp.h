// Data-parallel training on compiled graphs, one rank per process: every rank runs the same
// AOT pair on its own batch; the backward's gradients are gathered into the partitioner's
// buckets (partition/buckets.h, default mode) and each bucket's flat buffer is allreduced on
// the communicator's stream as soon as its last gradient (`meta.grad_of` node) has run, while
// the backward continues, as PyTorch's DDP reducer does. Buckets launch strictly in the order
// their gradients complete in the graph (the highest index, nearest the loss, first), so
// every rank issues the same collectives in the same order; gradients are averaged over the
// ranks, then the optimizer steps.
//
//   absl::StatusOr<std::unique_ptr<DdpTrainer>> t = DdpTrainer::Create(pair, params, comm, {});
//   absl::StatusOr<StepResult> s = (*t)->Step(my_batch);
#ifndef OVERLAP_RUNTIME_TRAIN_DDP_H_
#define OVERLAP_RUNTIME_TRAIN_DDP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/aot.h"
#include "partition/buckets.h"
#include "runtime/comm/communicator.h"
#include "runtime/train/distributed_trainer.h"
#include "runtime/train/train.h"

namespace overlap {

// The options every strategy takes (distributed_trainer.h), and the bucket cap. Gradients
// go to buckets where the communicator takes them: device buckets for a device
// communicator (NCCL), host buckets (each gradient copied out as it is made) for a host one
// (Gloo: collectives staged through the host).
struct DdpOptions : TrainerOptions {
  // The partitioner's cap (default mode); the first bucket's cap is its default (1 MiB) or
  // this, whichever is smaller.
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
};

class DdpTrainer final : public DistributedTrainer {
 public:
  // `params` (by parameter name, identical on every rank) are copied. Errors: a bucket whose
  // parameters differ in dtype, parameters the pair does not have.
  static absl::StatusOr<std::unique_ptr<DdpTrainer>> Create(const AotPair& pair,
                                                            const TensorMap& params,
                                                            Communicator* comm,
                                                            const DdpOptions& options);
  // One step on this rank's batch (data placeholders by name). Errors: the interpreter's,
  // and a collective's (naming it) or a timeout.
  absl::StatusOr<StepResult> Step(const TensorMap& data) override;
  // A copy of params() (every rank holds them whole).
  absl::StatusOr<TensorMap> GatherParams() override { return params_; }
  int64_t bucket_count() const override { return static_cast<int64_t>(buckets_.size()); }
  // Graph values without ZeRO-3 ops: the simulator's peak is the interpreter's rule.
  int64_t simulated_peak_bytes() const override { return sim_peak_; }
  TrainerStateBytes state_bytes() const override;
  // The reducer's rule on the simulator: the forward, then the backward in order, each
  // bucket's allreduce queued on one communication stream once its last gradient is made
  // and every bucket before it in the launch order has been queued, as Step launches them;
  // the step ends when the backward and the last allreduce have. Contention as the ZeRO-3
  // simulator has it (graph/cost_model.h): a backward node runs slower by compute_slowdown
  // while allreduces are in flight, and an allreduce started on an idle stream before the
  // backward's last timed node takes busy_start_s longer.
  absl::StatusOr<StepPrediction> PredictStep(const AotPair& timed) const override;

  const TensorMap& params() const { return params_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  struct Slot {  // where a parameter's gradient lives in its bucket's flat buffer
    int bucket = -1;
    int64_t offset = 0;  // elements
  };
  DdpTrainer() = default;

  AotPair pair_;
  Communicator* comm_ = nullptr;
  DdpOptions options_;
  int64_t steps_ = 0;  // steps run, for the random ops' seed
  Allocator alloc_;
  TensorMap params_;
  std::unique_ptr<TrainOptimizer> optimizer_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<Allocator> bucket_alloc_;  // where the communicator takes its tensors
  std::vector<Tensor> flat_;                 // one buffer per bucket
  std::vector<Tensor> host_flat_;            // their host copies, when flat_ is on a device
  std::vector<int64_t> expected_;            // gradients per bucket
  std::vector<int> launch_order_;            // bucket indices, in launch order
  std::map<std::string, Slot> slots_;        // by parameter name
  int64_t sim_peak_ = 0;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_DDP_H_
