#include "runtime/train/ddp.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/core/parallel.h"
#include "runtime/core/random.h"
#include "schedule/simulator.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<DdpTrainer>> DdpTrainer::Create(const AotPair& pair,
                                                               const TensorMap& params,
                                                               Communicator* comm,
                                                               const DdpOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("DDP needs a communicator");
  std::unique_ptr<DdpTrainer> t(new DdpTrainer());
  t->pair_ = pair;
  t->comm_ = comm;
  t->options_ = options;
  t->optimizer_ = std::make_unique<TrainOptimizer>(options.optimizer);
  const bool device_buckets = comm->device() != Device::kCpu;
  if (device_buckets && options.device == nullptr) {
    return absl::InvalidArgumentError("a device communicator needs DdpOptions::device");
  }
  t->bucket_alloc_ = std::make_unique<Allocator>(device_buckets ? options.device : nullptr);
  for (const auto& [name, p] : params) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Tensor::Empty(t->alloc_, p.dtype(), p.shape()));
    OVERLAP_RETURN_IF_ERROR(CopyConvert(p, copy));
    t->params_[name] = std::move(copy);
  }
  BucketOptions bo;
  bo.mode = PartitionMode::kDefault;
  bo.bucket_cap_bytes = options.bucket_cap_bytes;
  bo.first_bucket_cap_bytes = std::min(bo.first_bucket_cap_bytes, options.bucket_cap_bytes);
  OVERLAP_ASSIGN_OR_RETURN(std::vector<Bucket> all, AssignBuckets(pair.forward, bo));
  // The parameters whose gradients the backward computes.
  absl::flat_hash_set<std::string> with_grad;
  for (NodeId id : pair.backward.order()) {
    if (pair.backward.node(id).meta().has_grad_of) {
      with_grad.insert(pair.backward.node(id).meta().grad_of);
    }
  }
  for (Bucket& b : all) {
    std::vector<std::string> names;
    DType dtype = DType::kFloat32;
    int64_t elements = 0;
    for (const std::string& name : b.params) {
      if (!with_grad.contains(name)) continue;
      auto it = t->params_.find(name);
      if (it == t->params_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("no parameter '", name, "' was given"));
      }
      if (!names.empty() && it->second.dtype() != dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket ", b.index, " mixes dtypes (one flat buffer per bucket)"));
      }
      dtype = it->second.dtype();
      t->slots_[name] = {static_cast<int>(t->buckets_.size()), elements};
      elements += it->second.numel();
      names.push_back(name);
    }
    if (names.empty()) continue;  // nothing to reduce, on every rank alike
    b.params = names;
    OVERLAP_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty(*t->bucket_alloc_, dtype, {elements}));
    t->flat_.push_back(std::move(flat));
    if (device_buckets) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(t->alloc_, dtype, {elements}));
      t->host_flat_.push_back(std::move(host));
    }
    t->expected_.push_back(static_cast<int64_t>(names.size()));
    t->buckets_.push_back(std::move(b));
  }
  // Gradients complete from the loss backwards: the bucket nearest the loss first.
  for (int b = static_cast<int>(t->buckets_.size()) - 1; b >= 0; --b) t->launch_order_.push_back(b);
  for (const Graph* g : {&pair.forward, &pair.backward}) {
    SimulationOptions so;
    so.record_trace = false;
    OVERLAP_ASSIGN_OR_RETURN(SimulationResult r,
                             Simulator(*g, options.collectives).Run(g->OrderVector(), so));
    t->sim_peak_ = std::max(t->sim_peak_, r.peak_memory_bytes);
  }
  return t;
}

TrainerStateBytes DdpTrainer::state_bytes() const {
  TrainerStateBytes b;
  for (const auto& [name, p] : params_) b.params += p.nbytes();
  b.optimizer = optimizer_->state_bytes();
  for (const std::vector<Tensor>* buffers : {&flat_, &host_flat_}) {
    for (const Tensor& t : *buffers) b.buffers += t.nbytes();
  }
  return b;
}

absl::StatusOr<StepPrediction> DdpTrainer::PredictStep(const AotPair& timed) const {
  OVERLAP_RETURN_IF_ERROR(CheckTimedPair(pair_, timed));
  CollectiveModel model = options_.collectives;
  model.world_size = comm_->size();
  const auto seconds = [](const Node& n) {
    return n.op() == Op::kCallFunction && n.meta().has_device_time ? n.meta().device_time : 0.0;
  };
  StepPrediction p;
  for (NodeId id : timed.forward.order()) p.compute_s += seconds(timed.forward.node(id));
  double t = p.compute_s;  // the compute stream's clock
  double comm_free = t;    // when the communication stream is next idle
  std::vector<int64_t> arrived(buckets_.size(), 0);
  size_t next = 0;
  // Whether the backward computes after each position (the reducer never waits inside it):
  // an allreduce started on an idle stream then pays the model's busy_start_s.
  const std::vector<NodeId> order = timed.backward.OrderVector();
  std::vector<char> computes_after(order.size(), 0);
  for (size_t i = order.size(); i-- > 1;) {
    computes_after[i - 1] = computes_after[i] || seconds(timed.backward.node(order[i])) > 0;
  }
  size_t at = 0;  // the backward position being visited
  const auto launch_ready = [&] {
    while (next < launch_order_.size() &&
           arrived[launch_order_[next]] == expected_[launch_order_[next]]) {
      double d = model.Allreduce(flat_[launch_order_[next]].nbytes());
      if (d > 0 && comm_free <= t && computes_after[at]) d += model.busy_start_s;
      comm_free = std::max(comm_free, t) + d;
      p.comm_s += d;
      ++next;
    }
  };
  for (; at < order.size(); ++at) {
    const Node& n = timed.backward.node(order[at]);
    const double end = model.ComputeEnd(t, seconds(n), comm_free);  // slowed beside them
    p.compute_s += end - t;
    t = end;
    if (!n.meta().has_grad_of) continue;
    auto it = slots_.find(n.meta().grad_of);
    if (it == slots_.end()) continue;
    ++arrived[it->second.bucket];
    launch_ready();
  }
  if (next != launch_order_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("PredictStep: bucket ", launch_order_[next],
                                                   " never receives all its gradients"));
  }
  p.step_s = std::max(t, comm_free);
  p.exposed_s = p.step_s - p.compute_s;
  return p;
}

absl::StatusOr<StepResult> DdpTrainer::Step(const TensorMap& data) {
  const auto start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(buckets_.size());
  std::vector<int64_t> arrived(n, 0);
  std::vector<std::shared_ptr<Work>> works;
  size_t next = 0;
  bool backward_done = false;
  StepResult result;
  auto launch_ready = [&] {
    while (next < launch_order_.size() &&
           arrived[launch_order_[next]] == expected_[launch_order_[next]]) {
      works.push_back(comm_->AllReduce(flat_[launch_order_[next]]));
      if (!backward_done) ++result.launched_during_backward;
      ++next;
    }
  };
  InterpreterOptions forward;
  forward.kernels = options_.kernels;
  forward.device = options_.device;
  forward.memory_checked = true;  // before the ranks started (job.h's CheckJobMemory)
  forward.random_seed = RandomSeed(options_.seed, comm_->rank(), ++steps_);
  InterpreterOptions backward = forward;
  if (options_.node_hook) {
    forward.after_node = [&](const Node& node, const std::vector<Tensor>&) {
      return options_.node_hook(node);
    };
  }
  backward.after_node = [&](const Node& node, const std::vector<Tensor>& results) -> absl::Status {
    if (options_.node_hook) OVERLAP_RETURN_IF_ERROR(options_.node_hook(node));
    if (!node.meta().has_grad_of || results.empty() || !results[0].defined()) {
      return absl::OkStatus();
    }
    auto it = slots_.find(node.meta().grad_of);
    if (it == slots_.end()) return absl::OkStatus();
    const Slot& s = it->second;
    const Tensor& g = results[0];
    if (options_.copy_gradients) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor dst,
                               flat_[s.bucket].Slice(0, s.offset, s.offset + g.numel()));
      OVERLAP_ASSIGN_OR_RETURN(dst, dst.View(g.shape()));
      OVERLAP_RETURN_IF_ERROR(options_.device != nullptr ? options_.device->Copy(g, dst)
                                                         : CopyConvert(g, dst));
    }
    ++arrived[s.bucket];
    launch_ready();
    return absl::OkStatus();
  };
  OVERLAP_ASSIGN_OR_RETURN(AotStepResult step,
                           RunAotStep(pair_, params_, data, forward, &backward,
                                      AotStepOptions{/*hand_over_saved=*/true}));
  backward_done = true;
  launch_ready();
  if (next != launch_order_.size()) {
    return absl::InternalError(
        absl::StrCat("bucket ", launch_order_[next], " never received all its gradients"));
  }
  const auto drain = std::chrono::steady_clock::now();
  for (const std::shared_ptr<Work>& w : works) OVERLAP_RETURN_IF_ERROR(w->Wait(options_.timeout));
  result.exposed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - drain).count();
  for (const std::shared_ptr<Work>& w : works) result.comm_s += w->run_seconds();
  result.exposed_s = std::min(result.exposed_s, result.comm_s);
  result.graph_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.forward_peak_bytes = step.forward.peak_bytes;
  result.backward_peak_bytes = step.backward.peak_bytes;
  // Device buckets come to the host (the collectives are done: their results are ordered
  // before what the host issues next).
  for (size_t b = 0; b < host_flat_.size(); ++b) {
    OVERLAP_RETURN_IF_ERROR(options_.device->Copy(flat_[b], host_flat_[b]));
  }
  std::vector<Tensor>& flat = host_flat_.empty() ? flat_ : host_flat_;
  // Averaged gradients, as views of the flat buffers.
  const double scale = 1.0 / comm_->size();
  TensorMap grads;
  for (const auto& [name, s] : slots_) {
    const Tensor& p = params_.at(name);
    OVERLAP_ASSIGN_OR_RETURN(Tensor g, flat[s.bucket].Slice(0, s.offset, s.offset + p.numel()));
    OVERLAP_ASSIGN_OR_RETURN(g, g.View(p.shape()));
    grads[name] = g;
  }
  for (Tensor& f : flat) {  // contiguous, float32 or float64 (their parameters' dtype)
    // Raw pointers hoisted so the loops vectorize (the buckets hold every gradient: a pass
    // over them is a pass over the model).
    if (f.dtype() == DType::kFloat32) {
      float* d = f.data<float>();
      const float s = static_cast<float>(scale);
      ParallelFor(f.numel(), [d, s](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) d[i] *= s;
      });
    } else if (f.dtype() == DType::kFloat64) {
      double* d = f.data<double>();
      ParallelFor(f.numel(), [d, scale](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) d[i] *= scale;
      });
    } else {
      for (int64_t i = 0; i < f.numel(); ++i) SetElement(f, i, GetElement(f, i) * scale);
    }
  }
  OVERLAP_RETURN_IF_ERROR(optimizer_->Step(params_, grads));
  result.loss = step.loss;
  result.buffers = std::move(step.buffers);
  result.allreduces = static_cast<int64_t>(works.size());
  result.works = works;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace overlap
