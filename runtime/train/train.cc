#include "runtime/train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "graph/op_schema.h"
#include "graph/shape_rules.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "graph/value_bytes.h"
#include "runtime/core/parallel.h"
#include "runtime/core/random.h"
#include "runtime/exec/memory_plan.h"
#include "schedule/simulator.h"
#include "schedule/zero3_ops.h"

namespace overlap {

std::string ParamNameOf(const Node& placeholder) {
  return placeholder.meta().has_param ? placeholder.meta().param : placeholder.name();
}

absl::Status CheckWeights(const Graph& forward, const TensorMap& weights) {
  constexpr int kNamed = 5;  // missing parameters named in the message
  std::vector<std::string> missing;
  int64_t params = 0;
  absl::flat_hash_set<const Tensor*> bound;
  for (NodeId id : forward.order()) {
    const Node& n = forward.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    const Tensor* t = FindInput(forward, n, weights);
    if (t != nullptr) bound.insert(t);
    if (!IsParameterPlaceholder(forward, id)) continue;
    ++params;
    if (t == nullptr) missing.push_back(ParamNameOf(n));
  }
  if (!missing.empty()) {
    const int64_t more = static_cast<int64_t>(missing.size()) - kNamed;
    if (more > 0) missing.resize(kNamed);
    return absl::InvalidArgumentError(
        absl::StrCat("the weights lack ", missing.size() + std::max<int64_t>(more, 0),
                     " of the graph's ", params, " parameters: '", absl::StrJoin(missing, "', '"),
                     "'", more > 0 ? absl::StrCat(" and ", more, " more") : "",
                     weights.empty() ? " (the weights file holds no tensors)" : "",
                     "; a weights file gives every parameter"));
  }
  for (const auto& [key, t] : weights) {
    if (bound.contains(&t)) continue;
    absl::string_view name = key;
    absl::ConsumePrefix(&name, "param/");
    if (forward.FindParam(name) >= 0) continue;  // a parameter the graph does not read
    const bool aside = key == "target" || absl::StartsWith(key, "batch/") ||
                       absl::StartsWith(key, "ref/") || absl::StartsWith(key, "ref64/") ||
                       absl::StartsWith(key, "ref64p/") || absl::StartsWith(key, "buffer/") ||
                       absl::StartsWith(key, "constant/") || absl::StartsWith(key, "input/");
    if (aside) continue;
    if (absl::ConsumePrefix(&name, "random/")) {  // torch's draw of a random op (exec)
      const NodeId node = forward.FindNode(name);
      const OpSchema* s = node != kNoNode ? FindOpSchema(forward.node(node).target()) : nullptr;
      if (s != nullptr && s->Random()) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "the weights hold tensor '", key, "', but the graph has no random op named '", name,
          "' (a draw is keyed random/<node>; docs/runtime.md, \"Random ops\")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the weights hold tensor '", key,
        "', which is no parameter or input of the graph (parameters by name or \"param/\" + "
        "name; docs/runtime.md, \"Weights files\")"));
  }
  return absl::OkStatus();
}

namespace {

// The forward's outputs whose node carries meta.updates_buffer, as "buffer/<name>" (host
// copies: a device run's outputs are read back).
absl::Status CollectBufferUpdates(const Graph& forward, const std::vector<Tensor>& outputs,
                                  const InterpreterOptions& options, TensorMap& buffers) {
  const Node& out = forward.node(forward.last());
  if (out.op() != Op::kOutput || out.args().empty() || out.args()[0].kind() != Value::Kind::kList) {
    return absl::OkStatus();
  }
  const std::vector<Value>& items = out.args()[0].items();
  for (size_t i = 0; i < items.size() && i < outputs.size(); ++i) {
    if (!items[i].is_ref()) continue;
    NodeId id = items[i].as_ref();  // through a ZeRO-3 release / wait, as the saved values
    while (IsRelease(forward.node(id)) || IsWait(forward.node(id))) {
      id = HandedOnFrom(forward.node(id));
    }
    std::optional<std::string> name = ExtraString(forward.node(id).meta(), "updates_buffer");
    if (!name.has_value() || !outputs[i].defined()) continue;
    Tensor value = outputs[i];
    if (value.device() != Device::kCpu && options.device != nullptr) {
      Allocator host;
      OVERLAP_ASSIGN_OR_RETURN(Tensor h, Tensor::Uninitialized(host, value.dtype(), value.shape()));
      OVERLAP_RETURN_IF_ERROR(options.device->Copy(value, h));
      value = std::move(h);
    }
    buffers[absl::StrCat("buffer/", *name)] = std::move(value);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AotStepResult> RunAotStep(const AotPair& pair, const TensorMap& params,
                                         const TensorMap& data, const InterpreterOptions& options,
                                         const InterpreterOptions* backward_options,
                                         const AotStepOptions& step) {
  AotStepResult r;
  TensorMap in = params;
  for (const auto& [name, t] : data) in[name] = t;
  OVERLAP_ASSIGN_OR_RETURN(r.forward, Interpret(pair.forward, in, options));
  if (r.forward.outputs.empty() || !r.forward.outputs[0].defined() ||
      r.forward.outputs[0].numel() != 1) {
    return absl::InvalidArgumentError("the forward graph's first output is not a scalar loss");
  }
  Tensor loss = r.forward.outputs[0];
  if (loss.device() != Device::kCpu && options.device != nullptr) {  // read on the host
    Allocator host;
    OVERLAP_ASSIGN_OR_RETURN(Tensor h, Tensor::Uninitialized(host, loss.dtype(), loss.shape()));
    OVERLAP_RETURN_IF_ERROR(options.device->Copy(loss, h));
    loss = std::move(h);
  }
  r.loss = GetElement(loss, 0);
  OVERLAP_RETURN_IF_ERROR(
      CollectBufferUpdates(pair.forward, r.forward.outputs, options, r.buffers));

  // The backward's inputs: primals by parameter name, saved tensors by the names of the
  // forward values they are, tangents.
  TensorMap bin = params;
  const Node& out = pair.forward.node(pair.forward.last());
  if (out.op() != Op::kOutput || out.args().empty() || out.args()[0].kind() != Value::Kind::kList) {
    return absl::InvalidArgumentError("the forward graph does not end in a list output");
  }
  const std::vector<Value>& items = out.args()[0].items();
  for (size_t i = 0; i < items.size() && i < r.forward.outputs.size(); ++i) {
    if (!items[i].is_ref()) continue;
    // A ZeRO-3 forward may return a release of the value: the saved name is the value's.
    NodeId id = items[i].as_ref();
    while (IsRelease(pair.forward.node(id)) || IsWait(pair.forward.node(id))) {
      id = HandedOnFrom(pair.forward.node(id));
    }
    Tensor& saved = r.forward.outputs[i];
    if (step.hand_over_saved && i > 0) {
      bin[pair.forward.node(id).name()] = std::move(saved);
      saved = Tensor();
    } else {
      bin[pair.forward.node(id).name()] = saved;
    }
  }
  // Tangents: tangents_k for forward output k (1 for the loss, zeros for the others).
  Allocator tangents;
  for (NodeId id : pair.backward.order()) {
    const Node& n = pair.backward.node(id);
    int64_t k = 0;
    if (n.op() != Op::kPlaceholder || !absl::StartsWith(n.name(), "tangents_") ||
        !absl::SimpleAtoi(n.name().substr(9), &k) || k < 1 ||
        k > static_cast<int64_t>(r.forward.outputs.size()) || !r.forward.outputs[k - 1].defined()) {
      continue;
    }
    const Tensor& o = r.forward.outputs[k - 1];
    OVERLAP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(tangents, o.dtype(), o.shape()));
    if (k == 1) {
      for (int64_t i = 0; i < t.numel(); ++i) SetElement(t, i, 1.0);
    }
    bin[n.name()] = std::move(t);
  }
  const InterpreterOptions& bo = backward_options ? *backward_options : options;
  if (step.hand_over_saved) {
    OVERLAP_ASSIGN_OR_RETURN(r.backward, InterpretTaking(pair.backward, std::move(bin), bo));
  } else {
    OVERLAP_ASSIGN_OR_RETURN(r.backward, Interpret(pair.backward, bin, bo));
  }

  // One backward output per forward placeholder, in order.
  int64_t k = 0;
  for (NodeId id : pair.forward.order()) {
    const Node& n = pair.forward.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    if (k < static_cast<int64_t>(r.backward.outputs.size()) && r.backward.outputs[k].defined() &&
        IsParameterPlaceholder(pair.forward, id)) {
      r.grads[ParamNameOf(n)] = r.backward.outputs[k];
    }
    ++k;
  }
  return r;
}

namespace {

// torch.optim's single-tensor SGD and AdamW in float32, op for op as PyTorch 1.13 runs them
// (each op rounds to float32; its scalars are the Python floats torch passes, rounded to
// float32 where the kernel takes them so). p, g and the state are contiguous, n elements.
void SgdFloat(const OptimizerOptions& o, int64_t step, float* __restrict__ p,
              const float* __restrict__ g, float* __restrict__ m, int64_t n) {
  const float neg_lr = static_cast<float>(-o.lr), wd = static_cast<float>(o.weight_decay);
  const float momentum = static_cast<float>(o.momentum);
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (wd != 0) gi = gi + wd * p[i];  // grad.add(param, alpha=weight_decay)
    if (m != nullptr) {                // buf = grad at step 1, else buf * momentum + grad
      m[i] = step == 1 ? gi : m[i] * momentum + gi;
      gi = m[i];
    }
    p[i] = p[i] + neg_lr * gi;  // param.add_(d_p, alpha=-lr)
  }
}

void AdamWFloat(const OptimizerOptions& o, int64_t step, float* __restrict__ p,
                const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                int64_t n) {
  const float decay = static_cast<float>(1 - o.lr * o.weight_decay);
  const float b1 = static_cast<float>(o.beta1), one_b1 = static_cast<float>(1 - o.beta1);
  const float b2 = static_cast<float>(o.beta2), one_b2 = static_cast<float>(1 - o.beta2);
  const double c1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double c2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  const float neg_step = static_cast<float>(-(o.lr / c1));
  const float c2_sqrt = static_cast<float>(std::sqrt(c2)), eps = static_cast<float>(o.eps);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    p[i] = p[i] * decay;                    // param.mul_(1 - lr * weight_decay)
    m[i] = m[i] * b1 + one_b1 * gi;         // exp_avg.mul_(beta1).add_(grad, 1 - beta1)
    v[i] = v[i] * b2 + one_b2 * (gi * gi);  // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(v[i]) / c2_sqrt + eps;
    p[i] = p[i] + neg_step * (m[i] / denom);  // param.addcdiv_(exp_avg, denom, -step_size)
  }
}

}  // namespace

absl::Status TrainOptimizer::Step(TensorMap& params, const TensorMap& grads) {
  const OptimizerOptions& o = options_;
  for (auto& entry : params) {  // not a structured binding: the lambdas below capture p
    const std::string& name = entry.first;
    Tensor& p = entry.second;
    auto git = grads.find(name);
    if (git == grads.end()) continue;
    const Tensor& g = git->second;
    if (g.shape() != p.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradient of '", name, "' is ", g.DebugString(), ", the parameter ", p.DebugString()));
    }
    // The state OptimizerStateTensors names, in the parameter's dtype, made at the
    // parameter's first step: the momentum buffer or the two moments (zeroed, as torch's
    // zeros_like); plain SGD keeps none.
    const int states = OptimizerStateTensors(o);
    const DType state_dtype = IsFloatingPoint(p.dtype()) ? p.dtype() : DType::kFloat64;
    Tensor& m = m_[name];
    if (states >= 1 && !m.defined()) {
      OVERLAP_ASSIGN_OR_RETURN(m, Tensor::Empty(state_alloc_, state_dtype, p.shape()));
    }
    if (states >= 2 && !v_[name].defined()) {
      OVERLAP_ASSIGN_OR_RETURN(v_[name], Tensor::Empty(state_alloc_, state_dtype, p.shape()));
    }
    const int64_t n = p.numel();
    const int64_t step = ++steps_[name];
    if (p.dtype() == DType::kFloat32 && g.dtype() == DType::kFloat32 && p.IsContiguous() &&
        g.IsContiguous()) {
      float* pp = p.data<float>();
      const float* gp = g.data<float>();
      float* mp = states ? m.data<float>() : nullptr;
      float* vp = states >= 2 ? v_[name].data<float>() : nullptr;
      ParallelFor(n, [&](int64_t begin, int64_t end) {  // elements are independent
        if (o.kind == OptimizerKind::kSgd) {
          SgdFloat(o, step, pp + begin, gp + begin, mp ? mp + begin : nullptr, end - begin);
        } else {
          AdamWFloat(o, step, pp + begin, gp + begin, mp + begin, vp + begin, end - begin);
        }
      });
      continue;
    }
    // Any other dtype (float64 under compute_in_double, 16-bit floats): the same rules in
    // double, element by element, the state in the parameter's dtype.
    if (states == 0) {
      for (int64_t i = 0; i < n; ++i) {
        const double pi = GetElement(p, i);
        SetElement(p, i, pi - o.lr * (GetElement(g, i) + o.weight_decay * pi));
      }
      continue;
    }
    if (o.kind == OptimizerKind::kSgd) {
      for (int64_t i = 0; i < n; ++i) {
        const double pi = GetElement(p, i), gi = GetElement(g, i) + o.weight_decay * pi;
        const double mi = step == 1 ? gi : o.momentum * GetElement(m, i) + gi;
        SetElement(m, i, mi);
        SetElement(p, i, pi - o.lr * mi);
      }
    } else {
      Tensor& v = v_[name];
      const double c1 = 1 - std::pow(o.beta1, static_cast<double>(step));
      const double c2 = 1 - std::pow(o.beta2, static_cast<double>(step));
      for (int64_t i = 0; i < n; ++i) {
        const double pi = GetElement(p, i) * (1 - o.lr * o.weight_decay), gi = GetElement(g, i);
        const double mi = o.beta1 * GetElement(m, i) + (1 - o.beta1) * gi;
        const double vi = o.beta2 * GetElement(v, i) + (1 - o.beta2) * gi * gi;
        SetElement(m, i, mi);
        SetElement(v, i, vi);
        SetElement(p, i, pi - o.lr * (mi / c1) / (std::sqrt(vi / c2) + o.eps));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer> Trainer::Create(absl::string_view model, Preset preset,
                                        TrainOptions options) {
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  OVERLAP_ASSIGN_OR_RETURN(Graph g, BuildModel(model, mo, preset));
  OVERLAP_ASSIGN_OR_RETURN(AotPair pair, BuildAotPair(g));
  return FromPair(std::move(pair), model, std::move(options));
}

absl::StatusOr<Trainer> Trainer::FromPair(AotPair pair, absl::string_view model,
                                          TrainOptions options) {
  // Saved reshapes handed over once, dead values' clones aliased (graph/aot.h).
  OVERLAP_RETURN_IF_ERROR(TightenPairMemory(&pair).status());
  // Refused up front by the memory guard: what the step would need (the larger graph's
  // peak, the parameters and their gradients, the optimizer's state in their dtype).
  {
    OVERLAP_ASSIGN_OR_RETURN(const int64_t peak, LargestPeakBytes({&pair.forward, &pair.backward}));
    int64_t param_bytes = 0;
    for (const Param& p : pair.forward.params()) param_bytes += p.bytes;
    // The forward's outputs (loss and saved tensors) stay alive while the backward copies
    // them into its own memory (RunAotStep's caller keeps them): counted once more.
    // Added without wrapping: sizes too large to add are refused, not counted small.
    const int64_t state = MulBytes(OptimizerStateTensors(options.optimizer), param_bytes);
    const int64_t need = MulBytes(
        options.compute_in_double ? 2 : 1,
        AddBytes(AddBytes(peak, pair.saved_bytes), AddBytes(MulBytes(2, param_bytes), state)));
    OVERLAP_RETURN_IF_ERROR(
        CheckMemoryGuard(need, options.guard_bytes, absl::StrCat("training ", model),
                         absl::StrCat("about: step peak ", FormatBytes(peak),
                                      ", parameters, gradients and optimizer state"),
                         "--preset tiny runs on a CPU", {&pair.forward, &pair.backward}));
  }
  Trainer t;
  t.pair_ = std::make_unique<AotPair>(std::move(pair));
  t.alloc_ = std::make_unique<Allocator>();
  t.seed_ = options.seed;
  t.optimizer_ = std::make_unique<TrainOptimizer>(options.optimizer);
  t.task_ = std::make_unique<SyntheticTask>(t.pair_->forward, options.seed);
  t.batches_ = std::move(options.batches);
  if (options.initial_params) {
    OVERLAP_RETURN_IF_ERROR(CheckWeights(t.pair_->forward, *options.initial_params));
    t.constants_ = BufferInputs(t.pair_->forward, *options.initial_params);
  }
  t.in_double_ = options.compute_in_double;
  // Parameters and buffers held in float64 from the start (seeded or given): every step's
  // update then rounds to float64, not to the graph's float32.
  auto widened = [&](const Tensor& x) -> absl::StatusOr<Tensor> {
    if (!t.in_double_ || !IsFloatingPoint(x.dtype()) || x.dtype() == DType::kFloat64) return x;
    OVERLAP_ASSIGN_OR_RETURN(Tensor w, Tensor::Empty(*t.alloc_, DType::kFloat64, x.shape()));
    OVERLAP_RETURN_IF_ERROR(CopyConvert(x, w));
    return w;
  };
  for (auto& [key, b] : t.constants_) {
    OVERLAP_ASSIGN_OR_RETURN(b, widened(b));
  }
  const Graph& fwd = t.pair_->forward;
  SeededInputsOptions only_params;
  only_params.data = false;
  OVERLAP_ASSIGN_OR_RETURN(TensorMap seeded,
                           SeededInputs(fwd, options.seed, *t.alloc_, only_params));
  for (NodeId id : fwd.order()) {
    const Node& n = fwd.node(id);
    if (n.op() != Op::kPlaceholder || !IsParameterPlaceholder(fwd, id)) continue;
    const std::string name = ParamNameOf(n);
    if (!options.initial_params) {
      OVERLAP_ASSIGN_OR_RETURN(t.params_[name], widened(seeded.at(n.name())));
      continue;
    }
    const Tensor* given = FindInput(fwd, n, *options.initial_params);  // CheckWeights: found
    const Tensor& want = seeded.at(n.name());
    if (given->shape() != want.shape() || given->dtype() != want.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is ",
                                                     given->DebugString(), ", the model's ",
                                                     want.DebugString()));
    }
    const DType held =
        t.in_double_ && IsFloatingPoint(want.dtype()) ? DType::kFloat64 : want.dtype();
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Tensor::Empty(*t.alloc_, held, want.shape()));
    OVERLAP_RETURN_IF_ERROR(CopyConvert(*given, copy));
    t.params_[name] = std::move(copy);
  }
  return t;
}

absl::StatusOr<TensorMap> Trainer::Batch() {
  TensorMap batch;
  if (batches_.empty()) {
    OVERLAP_ASSIGN_OR_RETURN(batch, task_->Batch(step_));
  } else {
    batch = batches_[(step_ - 1) % static_cast<int64_t>(batches_.size())];
  }
  for (const auto& [key, t] : constants_) batch.emplace(key, t);
  return batch;
}

absl::StatusOr<StepResult> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  ++step_;
  OVERLAP_ASSIGN_OR_RETURN(TensorMap batch, Batch());
  InterpreterOptions checked;
  checked.memory_checked = true;  // by FromPair, against the guard, for the whole step
  checked.compute_in_double = in_double_;
  checked.random_seed = RandomSeed(seed_, 0, step_);
  OVERLAP_ASSIGN_OR_RETURN(AotStepResult r, RunAotStep(*pair_, params_, batch, checked, nullptr,
                                                       AotStepOptions{/*hand_over_saved=*/true}));
  OVERLAP_RETURN_IF_ERROR(optimizer_->Step(params_, r.grads));
  for (auto& [key, t] : r.buffers) constants_[key] = t;
  StepResult s;
  s.buffers = r.buffers;
  s.step = step_;
  s.loss = r.loss;
  s.forward_peak_bytes = r.forward.peak_bytes;
  s.backward_peak_bytes = r.backward.peak_bytes;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.graph_s = s.seconds;
  return s;
}

}  // namespace overlap
