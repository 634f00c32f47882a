#include "runtime/train/zero3.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/core/random.h"
#include "schedule/simulator.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

absl::Status NodeError(const Node& n, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("node '", n.name(), "': ", message));
}

// Elements [begin, end) of a contiguous tensor's flat view.
absl::StatusOr<Tensor> FlatSlice(const Tensor& t, int64_t begin, int64_t end) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor flat, t.View({t.numel()}));
  return flat.Slice(0, begin, end);
}

// dst += src, elementwise (same shape).
void AddInto(const Tensor& src, Tensor& dst) {
  for (int64_t i = 0; i < dst.numel(); ++i) {
    SetElement(dst, i, GetElement(dst, i) + GetElement(src, i));
  }
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

absl::Status Zero3Trainer::MakeShards(const TensorMap& params) {
  const int world = comm_->size(), rank = comm_->rank();
  const bool device_comm = comm_->device() != Device::kCpu;
  // Shards, by parameter name.
  for (const auto& [name, p] : params) {
    const int64_t n = p.numel(), s = (n + world - 1) / world;
    OVERLAP_ASSIGN_OR_RETURN(Tensor shard, Tensor::Empty(shard_alloc_, p.dtype(), {s}));
    const int64_t begin = std::min(n, rank * s), end = std::min(n, (rank + 1) * s);
    if (end > begin) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor whole, Tensor::Empty(shard_alloc_, p.dtype(), p.shape()));
      OVERLAP_RETURN_IF_ERROR(CopyConvert(p, whole));  // contiguous
      OVERLAP_ASSIGN_OR_RETURN(Tensor src, FlatSlice(whole, begin, end));
      OVERLAP_ASSIGN_OR_RETURN(Tensor dst, shard.Slice(0, 0, end - begin));
      OVERLAP_RETURN_IF_ERROR(CopyConvert(src, dst));
    }
    if (device_comm) {
      OVERLAP_ASSIGN_OR_RETURN(device_shards_[name], Tensor::Empty(*comm_alloc_, p.dtype(), {s}));
    }
    shards_[name] = std::move(shard);
    shapes_[name] = p.shape();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Zero3Trainer::NameOf(const Node& node) const {
  const int64_t ds = DsId(node);
  if (ds < 0 || ds >= static_cast<int64_t>(names_.size())) {
    return NodeError(node, absl::StrCat("ds_id ", ds, " is not a row of the parameter table"));
  }
  if (shards_.count(names_[ds]) == 0) {
    return NodeError(node, absl::StrCat("no parameter '", names_[ds], "' was given"));
  }
  return names_[ds];
}

absl::Status Zero3Trainer::MakeBuckets(const TensorMap& params) {
  const int world = comm_->size();
  const bool device_comm = comm_->device() != Device::kCpu;
  // Reduce-scatter buckets, in the backward's order: {"bucket": b} groups, else one each.
  absl::flat_hash_map<int64_t, int> bucket_of_kwarg;
  for (NodeId id : pair_.backward.order()) {
    const Node& node = pair_.backward.node(id);
    if (!IsReduce(node)) continue;
    const int64_t kw = ReduceBucket(node);
    int b;
    if (kw >= 0 && bucket_of_kwarg.contains(kw)) {
      b = bucket_of_kwarg[kw];
    } else {
      b = static_cast<int>(buckets_.size());
      buckets_.emplace_back();
      if (kw >= 0) bucket_of_kwarg[kw] = b;
    }
    ScatterBucket& bucket = buckets_[b];
    OVERLAP_ASSIGN_OR_RETURN(const std::string name, NameOf(node));
    const Tensor& shard = shards_.at(name);
    if (shard.dtype() != DType::kFloat32 && shard.dtype() != DType::kFloat64) {
      return NodeError(node, absl::StrCat("parameter '", name, "' is ", DTypeName(shard.dtype()),
                                          ": reduced gradients must be float32 or float64"));
    }
    if (!bucket.members.empty() && bucket.dtype != shard.dtype()) {
      return NodeError(node, "its bucket mixes dtypes (one flat buffer per bucket)");
    }
    bucket.dtype = shard.dtype();
    Member m;
    m.param = name;
    m.numel = params.at(name).numel();
    m.shard = shard.numel();
    m.offset = bucket.segment;
    bucket.segment += m.shard;
    reduce_slot_[id] = {b, static_cast<int>(bucket.members.size())};
    bucket.members.push_back(std::move(m));
  }
  for (ScatterBucket& b : buckets_) {
    OVERLAP_ASSIGN_OR_RETURN(b.in, Tensor::Empty(*comm_alloc_, b.dtype, {world * b.segment}));
    OVERLAP_ASSIGN_OR_RETURN(b.out, Tensor::Empty(*comm_alloc_, b.dtype, {b.segment}));
    b.filled.assign(b.members.size(), 0);
    if (device_comm) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(shard_alloc_, b.dtype, {b.segment}));
      host_out_.push_back(std::move(host));
    }
  }
  return absl::OkStatus();
}

namespace {

// The last position whose compute start is before `t`, -1 when none: where something the
// simulation completes at `t` is released (it frees at a time before the allocations at that
// time). `start` is non-decreasing.
int64_t LastPositionBefore(const std::vector<double>& start, double t) {
  return static_cast<int64_t>(std::lower_bound(start.begin(), start.end(), t) - start.begin()) - 1;
}

}  // namespace

absl::StatusOr<StepPrediction> Zero3Trainer::PredictStep(const AotPair& timed) const {
  OVERLAP_RETURN_IF_ERROR(CheckTimedPair(pair_, timed));
  CollectiveModel model = options_.collectives;
  model.world_size = comm_->size();
  SimulationOptions so;
  so.record_trace = false;
  StepPrediction p;
  // Each graph starts with the communication stream idle: the forward's last allgather is
  // waited for inside it, and the backward's reduce-scatters are drained at its end.
  for (const Graph* g : {&timed.forward, &timed.backward}) {
    OVERLAP_ASSIGN_OR_RETURN(SimulationResult r, Simulator(*g, model).Run(g->OrderVector(), so));
    p.step_s += r.step_time_s;
    p.compute_s += r.compute_s;
    p.comm_s += r.comm_s;
  }
  p.exposed_s = std::max(0.0, p.step_s - p.compute_s);
  return p;
}

absl::Status Zero3Trainer::PlanReleases() {
  const int world = comm_->size();
  // The simulator's figures for this schedule at this world size.
  CollectiveModel model = options_.collectives;
  model.world_size = world;
  SimulationOptions so;
  so.record_trace = true;  // the collectives' and copies' completion times
  const std::vector<NodeId> forward_order = pair_.forward.OrderVector();
  OVERLAP_ASSIGN_OR_RETURN(SimulationResult f,
                           Simulator(pair_.forward, model).Run(forward_order, so));
  const std::vector<NodeId> order = pair_.backward.OrderVector();
  OVERLAP_ASSIGN_OR_RETURN(SimulationResult b, Simulator(pair_.backward, model).Run(order, so));
  sim_forward_peak_ = f.peak_memory_bytes;
  sim_backward_peak_ = b.peak_memory_bytes;
  // Where each offload's simulated copy completes, and each bucket's reduce-scatter.
  for (size_t i = 0; i < forward_order.size(); ++i) {
    forward_pos_[forward_order[i]] = static_cast<int64_t>(i);
  }
  for (const SimEvent& e : f.events) {
    if (e.stream != 2 || !IsOffload(pair_.forward.node(e.node))) continue;
    offload_done_after_[e.node] =
        std::max(forward_pos_[e.node], LastPositionBefore(f.reached_s, e.end_s));
  }
  std::vector<double> done(buckets_.size(), 0);
  for (const SimEvent& e : b.events) {
    auto slot = reduce_slot_.find(e.node);
    if (e.stream == 1 && slot != reduce_slot_.end()) {
      done[slot->second.first] = std::max(done[slot->second.first], e.end_s);
    }
  }
  for (size_t i = 0; i < order.size(); ++i) backward_pos_[order[i]] = static_cast<int64_t>(i);
  release_after_.assign(buckets_.size(), -1);
  for (size_t k = 0; k < buckets_.size(); ++k) {
    release_after_[k] = LastPositionBefore(b.reached_s, done[k]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Zero3Trainer>> Zero3Trainer::Create(const AotPair& pair,
                                                                   const TensorMap& params,
                                                                   Communicator* comm,
                                                                   const Zero3Options& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("ZeRO-3 needs a communicator");
  if (!HasZero3Ops(pair.forward) || !HasZero3Ops(pair.backward)) {
    return absl::InvalidArgumentError(
        "the graphs have no ZeRO-3 ops: insert and schedule them first (overlap schedule)");
  }
  std::unique_ptr<Zero3Trainer> t(new Zero3Trainer());
  t->pair_ = pair;
  t->comm_ = comm;
  t->options_ = options;
  t->optimizer_ = std::make_unique<TrainOptimizer>(options.optimizer);
  const bool device_comm = comm->device() != Device::kCpu;
  if (device_comm && options.device == nullptr) {
    return absl::InvalidArgumentError("a device communicator needs Zero3Options::device");
  }
  t->comm_alloc_ = std::make_unique<Allocator>(device_comm ? options.device : nullptr);
  t->resident_alloc_ = std::make_unique<Allocator>(options.device);
  t->staging_alloc_ = std::make_unique<Allocator>();
  t->streams_ = dynamic_cast<DeviceStreams*>(options.device);
  for (const Param& p : pair.forward.params()) t->names_.push_back(p.name);
  for (size_t i = 0; i < pair.backward.params().size(); ++i) {
    if (i >= t->names_.size() || pair.backward.params()[i].name != t->names_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the backward's parameter table differs from the forward's at row ", i,
                       " (ds_ids must name the same parameters in both graphs)"));
    }
  }
  OVERLAP_RETURN_IF_ERROR(t->MakeShards(params));
  for (const Graph* g : {&pair.forward, &pair.backward}) {
    for (NodeId id : g->order()) {
      const Node& node = g->node(id);
      if (IsAllgather(node) || IsReduce(node)) OVERLAP_RETURN_IF_ERROR(t->NameOf(node).status());
    }
  }
  OVERLAP_RETURN_IF_ERROR(t->MakeBuckets(params));
  OVERLAP_RETURN_IF_ERROR(t->PlanReleases());
  return t;
}

absl::Status Zero3Trainer::CopyTo(const Tensor& src, Tensor& dst) {
  return options_.device != nullptr ? options_.device->Copy(src, dst) : CopyConvert(src, dst);
}

absl::Status Zero3Trainer::AwaitWork(const std::shared_ptr<Work>& w, absl::string_view why) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = w->Wait(options_.timeout);
  exposed_s_ += Since(start);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(why, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Zero3Trainer::Allgather(const Node& node, const Tensor& shard,
                                               const TensorType& full, bool resident,
                                               Allocator& alloc) {
  const int world = comm_->size();
  OVERLAP_ASSIGN_OR_RETURN(const DType dtype, ParseDType(full.dtype));
  const std::vector<int64_t> shape(full.shape.begin(), full.shape.end());
  const int64_t n = Elements(shape);
  const int64_t s = (n + world - 1) / world;
  if (shard.dim() != 1 || shard.numel() != s) {
    return NodeError(node, absl::StrCat("the shard has ", shard.numel(), " elements, a ", n,
                                        "-element parameter in a world of ", world, " needs ", s));
  }
  const int64_t ds = DsId(node);
  const bool backward = InBackwardGraph(node);
  Tensor buffer;
  if (resident) {
    Tensor& kept = residents_[ds];
    if (!kept.defined() || kept.dtype() != dtype) {
      OVERLAP_ASSIGN_OR_RETURN(kept, Tensor::Empty(*resident_alloc_, dtype, {world * s}));
    } else if (backward && refreshed_.contains(ds)) {
      return FlatSlice(kept, 0, n).value().View(shape);  // gathered by this step's forward
    }
    buffer = kept;
    refreshed_.insert(ds);
  } else {
    // The step's memory holds the parameter's n elements, as the simulator counts it; the
    // allgather writes every element it is given (no zeroing).
    OVERLAP_ASSIGN_OR_RETURN(buffer, Tensor::Uninitialized(alloc, dtype, {n}));
  }
  // Staged: the collective lands in a buffer of world * s elements apart from the step's
  // memory and is copied at the wait, when the step's buffer is on another device than the
  // communicator's or is shorter (padded shards: n not a multiple of the world).
  const bool staged = buffer.device() != comm_->device() || buffer.numel() != world * s;
  Tensor target = buffer;
  if (staged) {
    Allocator& landing =
        buffer.device() != comm_->device() ? *staging_alloc_ : *comm_alloc_;  // the comm's side
    OVERLAP_ASSIGN_OR_RETURN(target, Tensor::Uninitialized(landing, dtype, {world * s}));
  }
  Tensor source = shard;
  if (shard.dtype() != dtype) {  // a fused down-cast (insertion rule 4): gather the cast
    OVERLAP_ASSIGN_OR_RETURN(source, Tensor::Empty(*comm_alloc_, dtype, {s}));
    OVERLAP_RETURN_IF_ERROR(CopyTo(shard, source));
  }
  CollectiveOptions co;
  co.stream = options_.stream;
  std::shared_ptr<Work> w = comm_->AllGather(source, target, co);
  if (streams_ != nullptr && !staged) {
    streams_->MarkCommunicated(target);
    streams_->MarkCommunicated(source);
  }
  step_works_.push_back(w);
  pending_[{backward, node.id()}] = {w, source, staged ? target : Tensor(),
                                     staged ? buffer : Tensor()};
  OVERLAP_ASSIGN_OR_RETURN(Tensor whole, FlatSlice(buffer, 0, n));
  return whole.View(shape);
}

absl::Status Zero3Trainer::Wait(const Node& node) {
  if (node.inputs().empty()) return NodeError(node, "a wait without its allgather");
  auto it = pending_.find(Key{InBackwardGraph(node), node.inputs()[0]});
  if (it == pending_.end()) return absl::OkStatus();  // a resident gathered by the forward
  const Pending p = std::move(it->second);
  pending_.erase(it);
  if (p.staged.defined()) {  // through the host: there, then to the device
    OVERLAP_RETURN_IF_ERROR(
        AwaitWork(p.work, absl::StrCat("node '", node.name(), "' waiting for its allgather")));
    Tensor target = p.target;
    OVERLAP_ASSIGN_OR_RETURN(Tensor landed, FlatSlice(p.staged, 0, target.numel()));
    return CopyTo(landed, target);
  }
  if (streams_ != nullptr) {
    OVERLAP_ASSIGN_OR_RETURN(const bool on_device, streams_->ComputeWaitFor(*p.work));
    if (on_device) return absl::OkStatus();  // the device's compute waits, not the host
  }
  return AwaitWork(p.work, absl::StrCat("node '", node.name(), "' waiting for its allgather"));
}

absl::Status Zero3Trainer::Reduce(const Node& node, const Tensor& grad) {
  auto it = reduce_slot_.find(node.id());
  if (it == reduce_slot_.end() || !InBackwardGraph(node)) {
    return NodeError(node, "a reduce_grad outside the backward graph the trainer was built with");
  }
  ScatterBucket& b = buckets_[it->second.first];
  const int k = it->second.second;
  const Member& m = b.members[k];
  if (grad.numel() != m.numel) {
    return NodeError(node, absl::StrCat("the gradient has ", grad.numel(), " elements, parameter '",
                                        m.param, "' ", m.numel));
  }
  const int world = comm_->size();
  if (options_.copy_gradients) {
    // Host buckets may come back from Gloo's reduce-scatter scribbled on; NCCL leaves its
    // input alone, so a device bucket's padding stays as zeroed at creation.
    if (!b.filled[k] && b.in.device() == Device::kCpu) {  // clear this member's padding
      for (int r = 0; r < world; ++r) {
        const int64_t valid = std::clamp<int64_t>(m.numel - r * m.shard, 0, m.shard);
        if (valid == m.shard) continue;
        const int64_t at = r * b.segment + m.offset;
        OVERLAP_ASSIGN_OR_RETURN(Tensor pad, b.in.Slice(0, at + valid, at + m.shard));
        std::fill_n(pad.storage()->data() + pad.offset() * DTypeSize(pad.dtype()), pad.nbytes(),
                    std::byte{0});
      }
    }
    Tensor flat = grad;
    Allocator scratch(grad.device() != Device::kCpu ? options_.device : nullptr);
    if (!grad.IsContiguous()) {
      OVERLAP_ASSIGN_OR_RETURN(flat, Tensor::Uninitialized(scratch, grad.dtype(), grad.shape()));
      OVERLAP_RETURN_IF_ERROR(CopyTo(grad, flat));
    }
    for (int r = 0; r < world; ++r) {
      const int64_t begin = std::min(m.numel, r * m.shard),
                    end = std::min(m.numel, (r + 1) * m.shard);
      if (end <= begin) continue;
      OVERLAP_ASSIGN_OR_RETURN(Tensor src, FlatSlice(flat, begin, end));
      const int64_t at = r * b.segment + m.offset;
      OVERLAP_ASSIGN_OR_RETURN(Tensor dst, b.in.Slice(0, at, at + end - begin));
      if (b.filled[k]) {
        if (src.device() != Device::kCpu || dst.device() != Device::kCpu) {
          return NodeError(node, "a parameter reduced twice in one bucket, on a device");
        }
        AddInto(src, dst);  // a parameter reduced twice in one bucket
      } else {
        OVERLAP_RETURN_IF_ERROR(CopyTo(src, dst));
      }
    }
  }
  if (!b.filled[k]) ++b.arrived;
  b.filled[k] = 1;
  held_[it->second.first].push_back(grad);
  if (b.arrived == static_cast<int64_t>(b.members.size())) {
    CollectiveOptions co;
    co.stream = options_.stream;
    std::shared_ptr<Work> w = comm_->ReduceScatter(b.in, b.out, co);
    step_works_.push_back(w);
    bucket_work_[it->second.first] = w;
    launched_.push_back(it->second.first);
  }
  return absl::OkStatus();
}

absl::Status Zero3Trainer::ReleaseFinished(int64_t position) {
  for (size_t b = 0; b < held_.size(); ++b) {
    if (held_[b].empty() || position < release_after_[b] || bucket_work_[b] == nullptr) continue;
    if (!bucket_work_[b]->Done()) {
      OVERLAP_RETURN_IF_ERROR(
          AwaitWork(bucket_work_[b], absl::StrCat("reduce-scatter of bucket ", b,
                                                  " (its gradients' "
                                                  "planned release)")));
    }
    held_[b].clear();
  }
  return absl::OkStatus();
}

absl::Status Zero3Trainer::Offloaded(const Node& node, const Tensor& value) {
  auto it = offload_done_after_.find(node.id());
  if (it != offload_done_after_.end() && !InBackwardGraph(node)) {
    copied_.emplace_back(it->second, value);
  }
  return absl::OkStatus();
}

absl::Status Zero3Trainer::WaitReduce(const Node& node) {
  if (node.inputs().empty()) return NodeError(node, "a wait_reduce without its reduce_grad");
  auto it = reduce_slot_.find(node.inputs()[0]);
  if (it == reduce_slot_.end()) return NodeError(node, "waits on a reduce_grad of no bucket");
  const int b = it->second.first;
  if (bucket_work_[b] == nullptr) return absl::OkStatus();  // not launched: no wait
  OVERLAP_RETURN_IF_ERROR(AwaitWork(
      bucket_work_[b], absl::StrCat("node '", node.name(), "' waiting for its reduce-scatter")));
  held_[b].clear();  // the simulator frees the bucket's gradients at its completion
  return absl::OkStatus();
}

void Zero3Trainer::ReleaseCopied(int64_t position) {
  copied_.erase(std::remove_if(copied_.begin(), copied_.end(),
                               [&](const auto& c) { return position >= c.first; }),
                copied_.end());
}

absl::StatusOr<StepResult> Zero3Trainer::Step(const TensorMap& data) {
  const auto start = std::chrono::steady_clock::now();
  pending_.clear();
  refreshed_.clear();
  step_works_.clear();
  launched_.clear();
  exposed_s_ = 0;
  for (ScatterBucket& b : buckets_) {
    b.arrived = 0;
    std::fill(b.filled.begin(), b.filled.end(), 0);
  }
  held_.assign(buckets_.size(), {});
  bucket_work_.assign(buckets_.size(), nullptr);
  InterpreterOptions io;
  io.zero3 = this;
  io.kernels = options_.kernels;
  io.device = options_.device;
  io.memory_checked = true;  // before the ranks started (job.h's CheckJobMemory)
  io.random_seed = RandomSeed(options_.seed, comm_->rank(), ++steps_);
  for (auto& [name, d] : device_shards_) {  // this step's parameters, on the device
    OVERLAP_RETURN_IF_ERROR(CopyTo(shards_.at(name), d));
  }
  copied_.clear();
  io.after_node = [this](const Node& node, const std::vector<Tensor>&) {
    if (options_.node_hook) OVERLAP_RETURN_IF_ERROR(options_.node_hook(node));
    if (!copied_.empty()) {
      auto it = forward_pos_.find(node.id());
      ReleaseCopied(it == forward_pos_.end() ? 0 : it->second);
    }
    return absl::OkStatus();
  };
  InterpreterOptions backward = io;
  backward.after_node = [this](const Node& node, const std::vector<Tensor>&) {
    if (options_.node_hook) OVERLAP_RETURN_IF_ERROR(options_.node_hook(node));
    copied_.clear();  // the forward's offloaded values: its run is over
    auto it = backward_pos_.find(node.id());
    return ReleaseFinished(it == backward_pos_.end() ? 0 : it->second);
  };
  absl::StatusOr<AotStepResult> step =
      RunAotStep(pair_, device_shards_.empty() ? shards_ : device_shards_, data, io, &backward,
                 AotStepOptions{/*hand_over_saved=*/true});
  if (!step.ok()) {
    // Collectives still in flight read buffers that are about to go: end them first.
    comm_->Abort(step.status());
    for (const std::shared_ptr<Work>& w : step_works_) w->Wait(options_.timeout).IgnoreError();
    held_.assign(buckets_.size(), {});
    return step.status();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].arrived != static_cast<int64_t>(buckets_[b].members.size())) {
      return absl::InternalError(
          absl::StrCat("reduce-scatter bucket ", b, " never received all its gradients"));
    }
  }
  StepResult result;
  for (const std::shared_ptr<Work>& w : step_works_) {
    OVERLAP_RETURN_IF_ERROR(AwaitWork(w, "the step's collectives"));
  }
  held_.assign(buckets_.size(), {});
  result.graph_s = Since(start);
  // Averaged shard gradients: views of the buckets' outputs (summed into a copy for a
  // parameter reduced in two buckets).
  // Device buckets' outputs come to the host (the collectives are done).
  std::vector<Tensor> outs;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (host_out_.empty()) {
      outs.push_back(buckets_[k].out);
    } else {
      OVERLAP_RETURN_IF_ERROR(CopyTo(buckets_[k].out, host_out_[k]));
      outs.push_back(host_out_[k]);
    }
  }
  const double scale = 1.0 / comm_->size();
  for (Tensor& out : outs) {
    if (out.dtype() == DType::kFloat32) {
      float* d = out.data<float>();
      for (int64_t i = 0; i < out.numel(); ++i) d[i] *= static_cast<float>(scale);
    } else {
      double* d = out.data<double>();
      for (int64_t i = 0; i < out.numel(); ++i) d[i] *= scale;
    }
  }
  TensorMap grads;
  Allocator scratch;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    for (const Member& m : buckets_[k].members) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor g, outs[k].Slice(0, m.offset, m.offset + m.shard));
      auto it = grads.find(m.param);
      if (it == grads.end()) {
        grads[m.param] = g;
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor sum, Tensor::Empty(scratch, g.dtype(), g.shape()));
      OVERLAP_RETURN_IF_ERROR(CopyConvert(it->second, sum));
      AddInto(g, sum);
      it->second = sum;
    }
  }
  OVERLAP_RETURN_IF_ERROR(optimizer_->Step(shards_, grads));

  for (const std::shared_ptr<Work>& w : step_works_) result.comm_s += w->run_seconds();
  result.loss = step->loss;
  result.buffers = std::move(step->buffers);
  result.allgathers =
      static_cast<int64_t>(step_works_.size()) - static_cast<int64_t>(launched_.size());
  result.reduce_scatters = static_cast<int64_t>(launched_.size());
  result.works = step_works_;
  result.forward_peak_bytes = step->forward.peak_bytes;
  result.backward_peak_bytes = step->backward.peak_bytes;
  result.exposed_s = std::min(exposed_s_, result.comm_s);
  result.seconds = Since(start);
  return result;
}

absl::StatusOr<TensorMap> Zero3Trainer::GatherParams() {
  const int world = comm_->size();
  TensorMap out;
  Allocator alloc;
  for (const auto& [name, host_shard] : shards_) {  // name order: the same on every rank
    // Where the communicator takes tensors (the device for NCCL), then back here.
    Tensor shard = host_shard;
    if (!device_shards_.empty()) {
      shard = device_shards_.at(name);
      OVERLAP_RETURN_IF_ERROR(CopyTo(host_shard, shard));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor gathered,
                             Tensor::Empty(*comm_alloc_, shard.dtype(), {world * shard.numel()}));
    CollectiveOptions co;
    co.stream = options_.stream;
    OVERLAP_RETURN_IF_ERROR(comm_->AllGather(shard, gathered, co)->Wait(options_.timeout));
    OVERLAP_ASSIGN_OR_RETURN(Tensor buffer,
                             Tensor::Empty(alloc, shard.dtype(), {world * shard.numel()}));
    OVERLAP_RETURN_IF_ERROR(CopyTo(gathered, buffer));
    OVERLAP_ASSIGN_OR_RETURN(Tensor whole, FlatSlice(buffer, 0, Elements(shapes_.at(name))));
    OVERLAP_ASSIGN_OR_RETURN(out[name], whole.View(shapes_.at(name)));
  }
  return out;
}

TrainerStateBytes Zero3Trainer::state_bytes() const {
  TrainerStateBytes b;
  for (const auto& [name, s] : shards_) b.params += s.nbytes();
  b.optimizer = optimizer_->state_bytes();
  b.buffers = comm_alloc_->live(Pool::kValues) + resident_alloc_->live(Pool::kValues);
  for (const auto& [name, d] : device_shards_) b.buffers -= d.nbytes();  // counted as shards
  return b;
}

}  // namespace overlap
