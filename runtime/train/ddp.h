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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph/aot.h"
#include "partition/buckets.h"
#include "runtime/comm/communicator.h"
#include "runtime/train/train.h"

namespace overlap {

struct DdpOptions {
  // The seed of the step's random ops (dropout): step k on rank r draws from
  // RandomSeed(seed, r, k) (runtime/core/random.h), so each rank has its own stream, as each
  // torch process has its own generator, and a run is reproducible from the seed.
  uint64_t seed = 1;
  // The partitioner's cap (default mode); the first bucket's cap is its default (1 MiB) or
  // this, whichever is smaller.
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  OptimizerOptions optimizer;
  absl::Duration timeout = absl::Seconds(60);  // waiting for the allreduces of a step
  // Called after every call node of the forward and the backward (fault injection, traces);
  // an error ends the step.
  std::function<absl::Status(const Node&)> node_hook;
  // The kernels (nullptr: CpuKernels()); timed replay passes waiting ones. Not owned.
  const KernelRegistry* kernels = nullptr;
  // Copy each gradient into its bucket; timed replay turns it off (Zero3Options says why).
  bool copy_gradients = true;
  // The device the forward and backward run on (runtime/cuda/cuda_device.h; `kernels` must
  // be its own); nullptr: the host. Parameters and the optimizer stay on the host (copied in
  // each step). Gradients go to buckets where the communicator takes them: device buckets
  // for a device communicator (NCCL), host buckets (each gradient copied out as it is made)
  // for a host one (Gloo: collectives staged through the host). Not owned.
  DeviceMemory* device = nullptr;
};

class DdpTrainer {
 public:
  // `params` (by parameter name, identical on every rank) are copied. Errors: a bucket whose
  // parameters differ in dtype, parameters the pair does not have.
  static absl::StatusOr<std::unique_ptr<DdpTrainer>> Create(const AotPair& pair,
                                                            const TensorMap& params,
                                                            Communicator* comm,
                                                            const DdpOptions& options);
  // One step on this rank's batch (data placeholders by name). Errors: the interpreter's,
  // and a collective's (naming it) or a timeout.
  absl::StatusOr<StepResult> Step(const TensorMap& data);
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
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_DDP_H_
