// ZeRO-3 training on scheduled graphs, one rank per process: each rank holds 1/world of
// every parameter and runs the scheduled AOT forward and backward (ZeRO-3 ops inserted and
// ordered by any scheduler of schedule/scheduler_registry.h) through the interpreter, whose
// dc.* ops this class carries out with a Communicator:
//   - dc.allgather_param starts an allgather of the rank's shard into a full buffer of the
//     step's memory on the communication stream; dc.wait_allgather blocks compute until it
//     is done; dc.release_param frees the buffer when its count reaches n_users;
//   - residents (allgathers marked persistent) keep a gathered copy across steps, refreshed
//     once per step by the forward's allgather (issued before the first node, as the
//     simulator models it); the backward uses it without communication;
//   - dc.reduce_grad copies the gradient into its bucket's flat buffer ({"bucket": b}; a
//     reduce_grad without one is a bucket of its own) and, when the bucket's last gradient
//     has arrived, reduce-scatters it: one collective per bucket, launched in graph order.
//     The gradient's own storage is kept until compute has passed the position where the
//     simulated schedule completes that collective (checked after every node); there, a
//     collective still running is waited for. That is the simulator's memory rule for
//     reduced storages at the simulated time, so measured peaks do not depend on how fast
//     the real network was: the measured peak is the simulated one, and a network slower
//     than modelled costs time, not memory. (The copy would allow freeing at once; the flat
//     buffers are communication buffers, reported apart.);
//   - dc.offload_tensor (activation offloading) copies its value to host memory where it
//     stands; the value is kept until compute passes the position where the simulated copy
//     completes (the simulator's rule for an offload's source), and the backward's
//     dc.reload_tensor copies it back (interpreter.h);
//   - after the backward the reduced shards are averaged over the ranks and the optimizer
//     steps on the shards.
//
// Sharding: parameter p of n elements, in a world of P ranks, is padded with zeros to
// P * s elements, s = ceil(n / P); rank r holds elements [r s, (r + 1) s) as a flat tensor
// of s elements (the padding is on the last ranks and stays zero: its gradient is zero).
// A gathered parameter in the step's memory holds its n elements (what the simulator counts);
// when P * s > n the allgather lands in a padded buffer of P * s elements apart from the
// step's memory (a communication buffer) and is copied at the wait. A
// bucket's buffer is P segments, one per rank, each the members' shard-sized slices in
// bucket order, so a reduce-scatter leaves each rank exactly its shards.
//
//   absl::StatusOr<std::unique_ptr<Zero3Trainer>> t = Zero3Trainer::Create(pair, params, comm, {});
//   absl::StatusOr<StepResult> s = (*t)->Step(my_batch);
#ifndef OVERLAP_RUNTIME_TRAIN_ZERO3_H_
#define OVERLAP_RUNTIME_TRAIN_ZERO3_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/aot.h"
#include "graph/cost_model.h"
#include "runtime/comm/communicator.h"
#include "runtime/exec/interpreter.h"
#include "runtime/train/distributed_trainer.h"
#include "runtime/train/train.h"

namespace overlap {

// The options every strategy takes (distributed_trainer.h), and the stream. With a device
// communicator (NCCL) the shards are copied to the device each step, gathered and
// reduce-scattered there, dc.wait_allgather makes the device's compute wait for the
// allgather (no host wait: exposed_s counts only the final drain), and gathered buffers are
// freed in the communication stream's order; with a host one (Gloo) collectives are staged
// through the host (an allgather lands on the host and is copied to the device at its wait;
// gradients are copied out into host buckets).
struct Zero3Options : TrainerOptions {
  int stream = 0;  // the communication stream every collective uses
};

class Zero3Trainer final : public DistributedTrainer, private Zero3Collectives {
 public:
  // `pair`: forward and backward with ZeRO-3 ops, scheduled (their node orders run as
  // they are); `params`: every parameter, whole, by parameter name, identical on every
  // rank (each rank keeps its shard). Errors: graphs without ZeRO-3 ops, a ds_id outside
  // the parameter table or naming a parameter not given, a bucket mixing dtypes, a reduced
  // parameter that is not floating point.
  static absl::StatusOr<std::unique_ptr<Zero3Trainer>> Create(const AotPair& pair,
                                                              const TensorMap& params,
                                                              Communicator* comm,
                                                              const Zero3Options& options);
  // One step on this rank's batch (data placeholders by name). Errors: the interpreter's
  // (naming the node), a collective's or a timeout (naming the collective).
  absl::StatusOr<StepResult> Step(const TensorMap& data) override;
  // Every parameter, whole, gathered from the shards: a collective (every rank must call
  // it). For checks and saving.
  absl::StatusOr<TensorMap> GatherParams() override;
  int64_t bucket_count() const override { return static_cast<int64_t>(buckets_.size()); }
  int64_t simulated_peak_bytes() const override {
    return std::max(sim_forward_peak_, sim_backward_peak_);
  }
  // `params` counts the host shards (their device copies are neither params nor buffers).
  TrainerStateBytes state_bytes() const override;
  // The simulator on the forward and the backward as scheduled (schedule/simulator.h), their
  // steps added.
  absl::StatusOr<StepPrediction> PredictStep(const AotPair& timed) const override;

  const TensorMap& shards() const { return shards_; }
  // The simulator's peaks of graph values for the two graphs as scheduled, at this world
  // size, under options.collectives.
  int64_t simulated_forward_peak_bytes() const { return sim_forward_peak_; }
  int64_t simulated_backward_peak_bytes() const { return sim_backward_peak_; }

 private:
  struct Member {
    std::string param;
    int64_t numel = 0, shard = 0;  // whole and shard elements
    int64_t offset = 0;            // in the bucket's per-rank segment
  };
  struct ScatterBucket {  // one reduce-scatter
    std::vector<Member> members;
    int64_t segment = 0;  // elements per rank
    DType dtype = DType::kFloat32;
    Tensor in, out;  // P * segment, segment
    int64_t arrived = 0;
    std::vector<char> filled;  // per member, this step
  };
  // A started allgather: its work and the tensor it reads (kept alive until done).
  struct Pending {
    std::shared_ptr<Work> work;
    Tensor source;
    Tensor staged, target;  // staged through the host: the landing buffer, the device copy
  };
  using Key = std::pair<bool, NodeId>;  // (backward graph, node id)

  Zero3Trainer() = default;
  // Create's steps: this rank's 1/world shard of each parameter (and its device copy); the
  // parameter a ZeRO-3 op's ds_id names (an error naming the node otherwise); the
  // reduce-scatter buckets in the backward's order and their flat buffers; and, from the
  // simulated backward, after which node each bucket's buffers may be released.
  absl::Status MakeShards(const TensorMap& params);
  absl::StatusOr<std::string> NameOf(const Node& node) const;
  absl::Status MakeBuckets(const TensorMap& params);
  absl::Status PlanReleases();
  absl::StatusOr<Tensor> Allgather(const Node& node, const Tensor& shard, const TensorType& full,
                                   bool resident, Allocator& alloc) override;
  absl::Status Wait(const Node& node) override;
  absl::Status Reduce(const Node& node, const Tensor& grad) override;
  absl::Status Offloaded(const Node& node, const Tensor& value) override;
  absl::Status WaitReduce(const Node& node) override;
  absl::Status AwaitWork(const std::shared_ptr<Work>& w, absl::string_view why);
  // src into dst across the host and options_.device (CopyConvert without a device).
  absl::Status CopyTo(const Tensor& src, Tensor& dst);

  AotPair pair_;
  Communicator* comm_ = nullptr;
  Zero3Options options_;
  int64_t steps_ = 0;               // steps run, for the random ops' seed
  std::vector<std::string> names_;  // by ds_id (the forward's parameter table)
  Allocator shard_alloc_;
  // Where the communicator takes its tensors (buckets, cast sources), and where residents
  // and staged landings live.
  std::unique_ptr<Allocator> comm_alloc_, resident_alloc_, staging_alloc_;
  DeviceStreams* streams_ = nullptr;  // options_.device's, when it has them
  TensorMap shards_;
  TensorMap device_shards_;       // with a device communicator: the shards on the device
  std::vector<Tensor> host_out_;  // with a device communicator: the buckets' outputs, here
  std::map<std::string, std::vector<int64_t>> shapes_;  // whole parameters' shapes
  std::unique_ptr<TrainOptimizer> optimizer_;
  std::vector<ScatterBucket> buckets_;
  absl::flat_hash_map<NodeId, std::pair<int, int>>
      reduce_slot_;                                 // backward reduce -> (bucket, member)
  absl::flat_hash_map<int64_t, Tensor> residents_;  // by ds_id
  int64_t sim_forward_peak_ = 0, sim_backward_peak_ = 0;
  // Per step.
  absl::flat_hash_map<Key, Pending> pending_;
  absl::flat_hash_set<int64_t> refreshed_;
  std::vector<std::shared_ptr<Work>> step_works_;
  std::vector<int> launched_;  // buckets, in launch order
  // Gradients kept (their storages counted in the step's memory) until their bucket's
  // reduce-scatter has finished, by bucket: the simulator's rule for reduced storages.
  std::vector<std::vector<Tensor>> held_;
  std::vector<std::shared_ptr<Work>> bucket_work_;  // by bucket, this step's
  std::vector<int64_t> release_after_;  // by bucket: the simulated completion's position
  absl::flat_hash_map<NodeId, int64_t> backward_pos_;
  // Offloaded values of the forward, kept until compute passes the position where the
  // simulated copy to the host completes (the copy itself is done where the offload
  // stands): by offload node, that position, and this step's held values.
  absl::flat_hash_map<NodeId, int64_t> offload_done_after_;
  absl::flat_hash_map<NodeId, int64_t> forward_pos_;
  std::vector<std::pair<int64_t, Tensor>> copied_;  // (release position, value)
  // At `position` of the backward: the buckets whose simulated reduce-scatter has completed
  // release their gradients, waiting for the real collective when it has not finished (the
  // plan's memory is honoured over the network's speed).
  absl::Status ReleaseFinished(int64_t position);
  void ReleaseCopied(int64_t position);
  double exposed_s_ = 0;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_ZERO3_H_
