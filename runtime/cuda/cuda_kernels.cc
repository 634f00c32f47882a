#include "runtime/cuda/cuda_kernels.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "graph/status_macros.h"
#include "graph/type_promotion.h"
#include "runtime/kernels/conv_args.h"

namespace overlap {
namespace {

// cuBLAS products (attention: its products, with the nn kernel's softmax rows between).
constexpr absl::string_view kCublasOps[] = {
    "aten.mm.default", "aten.addmm.default", "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_backward.default"};

const absl::flat_hash_set<std::string>& ViewTargets() {
  static const auto* targets = [] {
    KernelRegistry views;
    RegisterViewKernels(views);
    std::vector<std::string> t = views.Targets();
    return new absl::flat_hash_set<std::string>(t.begin(), t.end());
  }();
  return *targets;
}

// The CPU kernel on host copies of the inputs; results copied to the device.
Kernel OnHost(Kernel cpu, CudaDevice* dev) {
  return [cpu = std::move(cpu), dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    Allocator host;
    absl::flat_hash_map<NodeId, Tensor> staged;
    for (NodeId in : c.node().inputs()) {
      const Tensor* t = c.TensorOf(in);
      if (t == nullptr || !t->defined() || staged.contains(in)) continue;
      if (t->device() == Device::kCpu) {
        staged[in] = *t;
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor h, Tensor::Uninitialized(host, t->dtype(), t->shape()));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(*t, h));
      staged[in] = std::move(h);
    }
    KernelCall on_host(c.node(), host, [&](NodeId id) -> const Tensor* {
      auto it = staged.find(id);
      return it != staged.end() ? &it->second : nullptr;
    });
    OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> results, cpu(on_host));
    std::vector<Tensor> out;
    out.reserve(results.size());
    for (const Tensor& r : results) {
      if (!r.defined()) {
        out.emplace_back();
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor d, c.NewUninitializedOutput(r.dtype(), r.shape()));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(r, d));
      out.push_back(std::move(d));
    }
    return out;
  };
}

// How cuBLAS reads a logical row-major [rows, cols] matrix in place: not transposed with
// ld = stride 0, or transposed with ld = stride 1; neither: it needs a contiguous copy.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
};

absl::StatusOr<Operand> AsOperand(KernelCall& c, const Tensor& x, CudaDevice& dev) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (x.strides()[1] == 1 && x.strides()[0] >= std::max<int64_t>(1, cols)) {
    return Operand{x, false, x.strides()[0]};
  }
  if (x.strides()[0] == 1 && x.strides()[1] >= std::max<int64_t>(1, rows)) {
    return Operand{x, true, x.strides()[1]};
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor packed, c.NewScratch(x.dtype(), x.shape()));
  OVERLAP_RETURN_IF_ERROR(dev.Copy(x, packed));
  return Operand{packed, false, std::max<int64_t>(1, cols)};
}

// out (m x n, contiguous) = alpha a @ b + beta out, through cuBLAS's column-major view:
// out^T = b^T a^T.
absl::Status MatMul(KernelCall& c, CudaDevice& dev, const Tensor& a, const Tensor& b, double alpha,
                    double beta, Tensor& out) {
  OVERLAP_ASSIGN_OR_RETURN(Operand oa, AsOperand(c, a, dev));
  OVERLAP_ASSIGN_OR_RETURN(Operand ob, AsOperand(c, b, dev));
  GemmArgs g;
  g.m = b.shape()[1];
  g.n = a.shape()[0];
  g.k = a.shape()[1];
  g.trans_a = ob.trans;
  g.a = ViewOf(ob.t).data;
  g.lda = ob.ld;
  g.trans_b = oa.trans;
  g.b = ViewOf(oa.t).data;
  g.ldb = oa.ld;
  g.c = ViewOf(out).data;
  g.ldc = std::max<int64_t>(1, g.m);
  g.alpha = alpha;
  g.beta = beta;
  g.dtype = out.dtype();
  if (g.m == 0 || g.n == 0) return absl::OkStatus();
  return dev.api().Gemm(g, dev.compute());
}

absl::Status CheckMatrices(KernelCall& c, const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0]) {
    return c.Error(absl::StrCat("matrix product of ", a.DebugString(), " and ", b.DebugString()));
  }
  if (a.dtype() != b.dtype() || (a.dtype() != DType::kFloat32 && a.dtype() != DType::kFloat64)) {
    return c.Error("cuBLAS products take two float32 or two float64 matrices");
  }
  return absl::OkStatus();
}

// The elementwise family on the device: which op, on what. nullopt: a case the device
// kernel does not take (integer division, a 0-d operand of another dtype, a bad argument:
// the host path handles it, errors included).
struct EwPlan {
  EwOp op = EwOp::kAdd;
  Tensor a;
  std::optional<Tensor> b;
  double b_scalar = 0;
  double s = 0;
};
using Planner = std::function<absl::StatusOr<std::optional<EwPlan>>(KernelCall&)>;

// `t` viewed over `shape` (stride 0 on broadcast dimensions).
DeviceView Spread(const Tensor& t, const std::vector<int64_t>& shape) {
  DeviceView v = ViewOf(t);
  const size_t lead = shape.size() - t.shape().size();
  v.shape = shape;
  v.strides.assign(shape.size(), 0);
  for (size_t i = 0; i < t.shape().size(); ++i) {
    v.strides[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  return v;
}

Kernel OnDevice(Planner plan, Kernel host, CudaDevice* dev) {
  return [plan = std::move(plan), host = std::move(host),
          dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    absl::StatusOr<std::optional<EwPlan>> p = plan(c);
    if (!p.ok() || !p->has_value()) return host(c);
    const EwPlan& e = **p;
    const DType dtype = e.a.dtype();
    if ((dtype != DType::kFloat32 && dtype != DType::kFloat64) || (e.b && e.b->dtype() != dtype) ||
        e.a.dim() > DeviceView::kMaxDims) {
      return host(c);
    }
    std::vector<int64_t> shape = e.a.shape();
    if (e.b) {
      std::optional<std::vector<int64_t>> both = BroadcastShapes(e.a.shape(), e.b->shape());
      if (!both || both->size() > DeviceView::kMaxDims) return host(c);  // its error
      shape = *both;
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(dtype, shape));
    ElementwiseArgs args;
    args.op = e.op;
    args.a = Spread(e.a, shape);
    if (e.b) args.b = Spread(*e.b, shape);
    args.b_scalar = e.b_scalar;
    args.s = e.s;
    args.out = ViewOf(out);
    OVERLAP_RETURN_IF_ERROR(dev->api().Elementwise(args, dev->compute()));
    return std::vector<Tensor>{out};
  };
}

// `other` (argument 1): a number, or a tensor; nullopt for a 0-d tensor of another dtype
// (PyTorch takes it as a number: the host path reads it).
absl::StatusOr<std::optional<EwPlan>> WithOther(KernelCall& c, EwOp op, double s) {
  EwPlan p;
  p.op = op;
  p.s = s;
  OVERLAP_ASSIGN_OR_RETURN(p.a, c.TensorArg("self"));
  const Value* other = c.Arg("other");
  if (other != nullptr && !other->is_ref()) {
    OVERLAP_ASSIGN_OR_RETURN(p.b_scalar, c.DoubleArg("other"));
    return p;
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg("other"));
  if (b.dim() == 0 && b.dtype() != p.a.dtype()) return std::nullopt;
  p.b = b;
  return p;
}

absl::StatusOr<std::optional<EwPlan>> Unary(KernelCall& c, EwOp op, double b = 0) {
  EwPlan p;
  p.op = op;
  p.b_scalar = b;
  OVERLAP_ASSIGN_OR_RETURN(p.a, c.TensorArg("self"));
  return p;
}

// op(grad_output, `second`): `second` is the forward's input (self) or, for a backward
// written in the forward's result, `output`.
absl::StatusOr<std::optional<EwPlan>> GradOf(KernelCall& c, EwOp op, double s = 0,
                                             absl::string_view second = "self") {
  EwPlan p;
  p.op = op;
  p.s = s;
  OVERLAP_ASSIGN_OR_RETURN(p.a, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(second));
  p.b = b;
  return p;
}

// GELU's approximate argument: the op, or nullopt for a bad one (the host path errs).
std::optional<EwOp> GeluOp(KernelCall& c, EwOp exact, EwOp tanh) {
  absl::StatusOr<std::string> a = c.StringArg("approximate");
  if (!a.ok()) return std::nullopt;
  if (*a == "none") return exact;
  if (*a == "tanh") return tanh;
  return std::nullopt;
}

// The elementwise ops the device kernel takes, by target.
std::vector<std::pair<std::string, Planner>> ElementwisePlanners() {
  using R = absl::StatusOr<std::optional<EwPlan>>;
  return {
      {"aten.add.Tensor",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
         return WithOther(c, EwOp::kAdd, alpha);
       }},
      {"aten.mul.Tensor", [](KernelCall& c) { return WithOther(c, EwOp::kMul, 0); }},
      {"aten.add.Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
         OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg("other"));
         OVERLAP_ASSIGN_OR_RETURN(std::optional<EwPlan> p, Unary(c, EwOp::kAdd, other));
         p->s = alpha;
         return p;
       }},
      {"aten.mul.Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg("other"));
         return Unary(c, EwOp::kMul, other);
       }},
      {"aten.div.Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg("other"));
         return Unary(c, EwOp::kDiv, other);
       }},
      {"aten.div.Tensor", [](KernelCall& c) { return WithOther(c, EwOp::kDiv, 0); }},
      {"aten.div.Tensor_mode",
       [](KernelCall& c) -> R {
         const Value* m = c.Arg("rounding_mode");
         std::string mode = "none";
         if (m != nullptr && m->kind() == Value::Kind::kString) mode = m->as_string();
         if (mode != "none" && mode != "floor" && mode != "trunc") return std::nullopt;
         return WithOther(c,
                          mode == "floor"   ? EwOp::kDivFloor
                          : mode == "trunc" ? EwOp::kDivTrunc
                                            : EwOp::kDiv,
                          0);
       }},
      {"aten.pow.Tensor_Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double e, c.DoubleArg("exponent"));
         if (e == 2) return Unary(c, EwOp::kSquare);
         if (e == 3) return Unary(c, EwOp::kCube);
         return Unary(c, EwOp::kPow, e);
       }},
      {"aten.rsqrt.default", [](KernelCall& c) { return Unary(c, EwOp::kRsqrt); }},
      {"aten.relu.default", [](KernelCall& c) { return Unary(c, EwOp::kRelu); }},
      {"aten.silu.default", [](KernelCall& c) { return Unary(c, EwOp::kSilu); }},
      {"aten.gelu.default",
       [](KernelCall& c) -> R {
         std::optional<EwOp> op = GeluOp(c, EwOp::kGelu, EwOp::kGeluTanh);
         if (!op) return std::nullopt;
         return Unary(c, *op);
       }},
      {"aten.gelu_backward.default",
       [](KernelCall& c) -> R {
         std::optional<EwOp> op = GeluOp(c, EwOp::kGeluBackward, EwOp::kGeluTanhBackward);
         if (!op) return std::nullopt;
         return GradOf(c, *op);
       }},
      {"aten.silu_backward.default", [](KernelCall& c) { return GradOf(c, EwOp::kSiluBackward); }},
      {"aten.sigmoid.default", [](KernelCall& c) { return Unary(c, EwOp::kSigmoid); }},
      {"aten.sigmoid_backward.default",
       [](KernelCall& c) { return GradOf(c, EwOp::kSigmoidBackward, 0, "output"); }},
      {"aten.exp.default", [](KernelCall& c) { return Unary(c, EwOp::kExp); }},
      {"aten.hardswish.default", [](KernelCall& c) { return Unary(c, EwOp::kHardswish); }},
      {"aten.hardswish_backward.default",
       [](KernelCall& c) { return GradOf(c, EwOp::kHardswishBackward); }},
      {"aten.hardsigmoid.default", [](KernelCall& c) { return Unary(c, EwOp::kHardsigmoid); }},
      {"aten.hardsigmoid_backward.default",
       [](KernelCall& c) { return GradOf(c, EwOp::kHardsigmoidBackward); }},
      {"aten.tanh.default", [](KernelCall& c) { return Unary(c, EwOp::kTanh); }},
      {"aten.tanh_backward.default",
       [](KernelCall& c) { return GradOf(c, EwOp::kTanhBackward, 0, "output"); }},
      {"aten.neg.default", [](KernelCall& c) { return Unary(c, EwOp::kMul, -1); }},
      {"aten.sub.Tensor",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
         return WithOther(c, EwOp::kAdd, -alpha);
       }},
      {"aten.threshold_backward.default",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double threshold, c.DoubleArg("threshold"));
         return GradOf(c, EwOp::kThresholdBackward, threshold);
       }},
  };
}

using Results = absl::StatusOr<std::vector<Tensor>>;

int64_t Prod(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= v[i];
  return p;
}

// `t`, or a contiguous copy of it in the call's scratch.
absl::StatusOr<Tensor> Packed(KernelCall& c, CudaDevice& dev, const Tensor& t) {
  if (t.IsContiguous()) return t;
  OVERLAP_ASSIGN_OR_RETURN(Tensor packed, c.NewScratch(t.dtype(), t.shape()));
  OVERLAP_RETURN_IF_ERROR(dev.Copy(t, packed));
  return packed;
}

bool FloatType(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

// The softmax family on the device; the host path for what it does not take (its errors).
Kernel SoftmaxOnDevice(bool backward, bool log, Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg(backward ? "grad_output" : "self");
    absl::StatusOr<Tensor> y = backward ? c.TensorArg("output") : x;
    absl::StatusOr<int64_t> dim = c.IntArg("dim");
    if (!x.ok() || !y.ok() || !dim.ok() || !FloatType(x->dtype()) || x->dim() == 0 ||
        x->shape() != y->shape() || x->dtype() != y->dtype() || *dim < -x->dim() ||
        *dim >= x->dim()) {
      return host(c);
    }
    const int64_t d = *dim < 0 ? *dim + x->dim() : *dim;
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor py, Packed(c, *dev, *y));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), x->shape()));
    ReduceArgs r;
    r.op = backward ? (log ? ReduceOp::kLogSoftmaxBackward : ReduceOp::kSoftmaxBackward)
                    : (log ? ReduceOp::kLogSoftmax : ReduceOp::kSoftmax);
    r.dtype = x->dtype();
    r.outer = Prod(x->shape(), 0, d);
    r.n = x->shape()[d];
    r.inner = Prod(x->shape(), d + 1, x->shape().size());
    r.x = ViewOf(px).data;
    r.y = backward ? ViewOf(py).data : nullptr;
    r.out = ViewOf(out).data;
    OVERLAP_RETURN_IF_ERROR(dev->api().Reduce(r, dev->compute()));
    return std::vector<Tensor>{out};
  };
}

// sum / mean over dimensions on the device: reduced dimensions that form one block of a
// contiguous input are read in place ([outer, n, inner]); otherwise the input is copied
// with the kept dimensions first ([kept, reduced], inner 1).
Kernel SumOnDevice(bool mean, Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    if (!x.ok() || !FloatType(x->dtype()) || x->dim() == 0) return host(c);
    // A result of another dtype (a dtype keyword): the host path converts the input.
    const Value* dtype = c.Arg("dtype");
    const absl::StatusOr<std::string> result = ReductionResultType(
        mean ? ReductionOp::kMean : ReductionOp::kSum, DTypeName(x->dtype()),
        dtype != nullptr && dtype->kind() == Value::Kind::kString ? dtype->as_string() : "");
    if (!result.ok() || *result != DTypeName(x->dtype())) return host(c);
    const Value* dv = c.Arg("dim");
    std::vector<int64_t> dims;
    if (dv != nullptr && !dv->is_none()) {
      absl::StatusOr<std::vector<int64_t>> got = c.IntListArg("dim");
      if (!got.ok()) return host(c);
      dims = *got;
    }
    absl::StatusOr<bool> keepdim = c.BoolArg("keepdim", false);  // sum.default: none declared
    if (!keepdim.ok()) return host(c);
    const int64_t rank = x->dim();
    std::vector<bool> reduced(rank, dims.empty());
    for (int64_t d : dims) {
      if (d < -rank || d >= rank || reduced[d < 0 ? d + rank : d]) return host(c);  // refuses
      reduced[d < 0 ? d + rank : d] = true;
    }
    std::vector<int64_t> keep_shape, out_shape, kept, gone;
    int64_t count = 1;
    for (int64_t i = 0; i < rank; ++i) {
      keep_shape.push_back(reduced[i] ? 1 : x->shape()[i]);
      if (reduced[i]) {
        count *= x->shape()[i];
        gone.push_back(i);
      } else {
        out_shape.push_back(x->shape()[i]);
        kept.push_back(i);
      }
    }
    ReduceArgs r;
    r.op = ReduceOp::kSum;
    r.dtype = x->dtype();
    r.scale = mean ? (count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / count) : 1.0;
    Tensor in = *x;
    const bool block = x->IsContiguous() && (gone.empty() || gone.back() - gone.front() + 1 ==
                                                                 static_cast<int64_t>(gone.size()));
    if (block && !gone.empty()) {
      r.outer = Prod(x->shape(), 0, gone.front());
      r.n = count;
      r.inner = Prod(x->shape(), gone.back() + 1, rank);
    } else {
      std::vector<int64_t> shape, strides;
      for (const std::vector<int64_t>* part : {&kept, &gone}) {
        for (int64_t i : *part) {
          shape.push_back(x->shape()[i]);
          strides.push_back(x->strides()[i]);
        }
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor view, x->AsStrided(shape, strides, x->offset()));
      OVERLAP_ASSIGN_OR_RETURN(in, c.NewScratch(x->dtype(), shape));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(view, in));
      r.outer = Prod(out_shape, 0, out_shape.size());
      r.n = count;
      r.inner = 1;
    }
    OVERLAP_ASSIGN_OR_RETURN(
        Tensor out, c.NewUninitializedOutput(x->dtype(), *keepdim ? keep_shape : out_shape));
    r.x = ViewOf(in).data;
    r.out = ViewOf(out).data;
    OVERLAP_RETURN_IF_ERROR(dev->api().Reduce(r, dev->compute()));
    return std::vector<Tensor>{out};
  };
}

ConvShape ShapeOf(const ConvGeometry& g, DType dtype) {
  ConvShape s;
  s.n = g.n, s.c = g.c, s.h = g.h, s.w = g.w, s.o = g.o, s.kh = g.kh, s.kw = g.kw;
  s.groups = g.groups, s.sh = g.sh, s.sw = g.sw, s.ph = g.ph, s.pw = g.pw, s.dh = g.dh;
  s.dw = g.dw, s.ho = g.ho, s.wo = g.wo, s.dtype = dtype;
  return s;
}

// aten.convolution on cuDNN, the bias added by the elementwise kernel (as the CPU adds it,
// after the product); the host path for what it does not take (its errors included).
Kernel ConvolutionOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("input");
    absl::StatusOr<Tensor> w = c.TensorArg("weight");
    absl::StatusOr<std::optional<Tensor>> bias = c.OptionalTensorArg("bias");
    if (!x.ok() || !w.ok() || !bias.ok() || !FloatType(x->dtype()) || w->dtype() != x->dtype() ||
        (*bias && (*bias)->dtype() != x->dtype())) {
      return host(c);
    }
    absl::StatusOr<ConvGeometry> g = ConvArgs(c, *x, *w);
    if (!g.ok() || g->transposed ||  // transposed: the CPU kernel
        (*bias && ((*bias)->dim() != 1 || (*bias)->numel() != g->o))) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pw, Packed(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(Tensor y,
                             c.NewUninitializedOutput(x->dtype(), {g->n, g->o, g->ho, g->wo}));
    OVERLAP_RETURN_IF_ERROR(dev->api().Convolution(ConvPass::kForward, ShapeOf(*g, x->dtype()),
                                                   ViewOf(px).data, ViewOf(pw).data, ViewOf(y).data,
                                                   dev->compute()));
    if (*bias) {
      ElementwiseArgs e;
      e.op = EwOp::kAdd;
      e.s = 1;
      e.a = ViewOf(y);
      e.b = ViewOf(**bias);
      e.b.shape = y.shape();
      e.b.strides = {0, (*bias)->strides()[0], 0, 0};
      e.out = ViewOf(y);
      OVERLAP_RETURN_IF_ERROR(dev->api().Elementwise(e, dev->compute()));
    }
    return std::vector<Tensor>{y};
  };
}

// aten.convolution_backward on cuDNN (data and filter passes), the bias gradient by the
// reduction kernel (over each image's plane, then over the batch).
Kernel ConvolutionBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> gy = c.TensorArg("grad_output");
    absl::StatusOr<Tensor> x = c.TensorArg("input");
    absl::StatusOr<Tensor> w = c.TensorArg("weight");
    absl::StatusOr<std::vector<bool>> mask = c.BoolListArg("output_mask", {true, true, true});
    if (!gy.ok() || !x.ok() || !w.ok() || !mask.ok() || mask->size() != 3 ||
        !FloatType(x->dtype()) || w->dtype() != x->dtype() || gy->dtype() != x->dtype()) {
      return host(c);
    }
    absl::StatusOr<ConvGeometry> g = ConvArgs(c, *x, *w);
    if (!g.ok() || g->transposed || gy->shape() != std::vector<int64_t>{g->n, g->o, g->ho, g->wo}) {
      return host(c);
    }
    bool has_bias = false;
    const Value* bias_sizes = c.Arg("bias_sizes");
    if (bias_sizes != nullptr && bias_sizes->kind() == Value::Kind::kList) {
      absl::StatusOr<std::vector<int64_t>> bs = c.IntListArg("bias_sizes");
      if (!bs.ok()) return host(c);
      has_bias = !bs->empty() && (*bs)[0] != 0;
    }
    const DType dtype = x->dtype();
    const ConvShape shape = ShapeOf(*g, dtype);
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *gy));
    std::vector<Tensor> out(3);
    if ((*mask)[0]) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor pw, Packed(c, *dev, *w));
      OVERLAP_ASSIGN_OR_RETURN(out[0], c.NewUninitializedOutput(dtype, x->shape()));
      OVERLAP_RETURN_IF_ERROR(dev->api().Convolution(ConvPass::kBackwardData, shape,
                                                     ViewOf(pg).data, ViewOf(pw).data,
                                                     ViewOf(out[0]).data, dev->compute()));
    }
    if ((*mask)[1]) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
      OVERLAP_ASSIGN_OR_RETURN(out[1], c.NewUninitializedOutput(dtype, w->shape()));
      OVERLAP_RETURN_IF_ERROR(dev->api().Convolution(ConvPass::kBackwardFilter, shape,
                                                     ViewOf(px).data, ViewOf(pg).data,
                                                     ViewOf(out[1]).data, dev->compute()));
    }
    if ((*mask)[2] && has_bias) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor planes, c.NewScratch(dtype, {g->n, g->o}));
      OVERLAP_ASSIGN_OR_RETURN(out[2], c.NewUninitializedOutput(dtype, {g->o}));
      ReduceArgs r;
      r.op = ReduceOp::kSum;
      r.dtype = dtype;
      r.outer = g->n * g->o;
      r.n = g->ho * g->wo;
      r.inner = 1;
      r.x = ViewOf(pg).data;
      r.out = ViewOf(planes).data;
      OVERLAP_RETURN_IF_ERROR(dev->api().Reduce(r, dev->compute()));
      r.outer = 1;
      r.n = g->n;
      r.inner = g->o;
      r.x = ViewOf(planes).data;
      r.out = ViewOf(out[2]).data;
      OVERLAP_RETURN_IF_ERROR(dev->api().Reduce(r, dev->compute()));
    }
    return out;
  };
}

// ---- the nn kernel family (nn_ops.h), cuDNN batch norm, attention on cuBLAS ----

const void* Ptr(const Tensor& t) { return ViewOf(t).data; }
void* MutPtr(const Tensor& t) { return ViewOf(t).data; }
const void* OptPtr(const std::optional<Tensor>& t) { return t ? Ptr(*t) : nullptr; }

NnArgs NnFor(NnOp op, DType dtype) {
  NnArgs a;
  a.op = op;
  a.is_double = dtype == DType::kFloat64;
  return a;
}

// `t` packed, for the nn kernel: nullopt stays nullopt.
absl::StatusOr<std::optional<Tensor>> PackedOpt(KernelCall& c, CudaDevice& dev,
                                                const std::optional<Tensor>& t) {
  if (!t) return std::optional<Tensor>();
  OVERLAP_ASSIGN_OR_RETURN(Tensor p, Packed(c, dev, *t));
  return std::optional<Tensor>(p);
}

// Runs `a` on the compute stream; an op that reads indices records a bad one in the device's
// error word under "node '<name>' (<target>): <what>" (CudaDevice::ErrorWord).
absl::Status RunNn(KernelCall& c, CudaDevice& dev, NnArgs a, absl::string_view what = "") {
  if (a.index != nullptr) {
    OVERLAP_ASSIGN_OR_RETURN(a.error, dev.ErrorWord());
    a.tag = dev.ErrorTag(
        absl::StrCat("node '", c.node().name(), "' (", c.node().target(), "): ", what));
  }
  return dev.api().Nn(a, dev.compute());
}

bool IndexType(DType d) { return d == DType::kInt64 || d == DType::kInt32; }

// The product of `t`'s dimensions [begin, end).
int64_t ProdOf(const Tensor& t, int64_t begin, int64_t end) {
  return Prod(t.shape(), static_cast<size_t>(begin), static_cast<size_t>(end));
}

Kernel LayerNormOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("input");
    absl::StatusOr<std::vector<int64_t>> ns = c.IntListArg("normalized_shape");
    absl::StatusOr<std::optional<Tensor>> w = c.OptionalTensorArg("weight");
    absl::StatusOr<std::optional<Tensor>> b = c.OptionalTensorArg("bias");
    absl::StatusOr<double> eps = c.DoubleArg("eps");
    if (!x.ok() || !ns.ok() || !w.ok() || !b.ok() || !eps.ok() || !FloatType(x->dtype())) {
      return host(c);
    }
    const int64_t axis = x->dim() - static_cast<int64_t>(ns->size());
    if (axis < 0 || !std::equal(ns->begin(), ns->end(), x->shape().begin() + axis)) return host(c);
    const int64_t m = ProdOf(*x, 0, axis), n = ProdOf(*x, axis, x->dim());
    for (const std::optional<Tensor>* p : {&*w, &*b}) {
      if (*p && ((*p)->numel() != n || (*p)->dtype() != x->dtype())) return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pb, PackedOpt(c, *dev, *b));
    std::vector<int64_t> stat_shape(x->shape().begin(), x->shape().begin() + axis);
    stat_shape.resize(x->dim(), 1);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), x->shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor mean, c.NewUninitializedOutput(x->dtype(), stat_shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor rstd, c.NewUninitializedOutput(x->dtype(), stat_shape));
    NnArgs a = NnFor(NnOp::kLayerNorm, x->dtype());
    a.rows = m;
    a.cols = n;
    a.x = Ptr(px);
    a.w = OptPtr(pw);
    a.b = OptPtr(pb);
    a.eps = *eps;
    a.out = MutPtr(out);
    a.out2 = MutPtr(mean);
    a.out3 = MutPtr(rstd);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    return std::vector<Tensor>{out, mean, rstd};
  };
}

Kernel LayerNormBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g = c.TensorArg("grad_out");
    absl::StatusOr<Tensor> x = c.TensorArg("input");
    absl::StatusOr<std::vector<int64_t>> ns = c.IntListArg("normalized_shape");
    absl::StatusOr<Tensor> mean = c.TensorArg("mean");
    absl::StatusOr<Tensor> rstd = c.TensorArg("rstd");
    absl::StatusOr<std::optional<Tensor>> w = c.OptionalTensorArg("weight");
    absl::StatusOr<std::vector<bool>> mask = c.BoolListArg("output_mask", {true, true, true});
    if (!g.ok() || !x.ok() || !ns.ok() || !mean.ok() || !rstd.ok() || !w.ok() || !mask.ok() ||
        mask->size() != 3 || !FloatType(x->dtype()) || g->shape() != x->shape()) {
      return host(c);
    }
    const DType dt = x->dtype();
    const int64_t axis = x->dim() - static_cast<int64_t>(ns->size());
    if (axis < 0 || g->dtype() != dt || mean->dtype() != dt || rstd->dtype() != dt ||
        (*w && (*w)->dtype() != dt)) {
      return host(c);
    }
    const int64_t m = ProdOf(*x, 0, axis), n = ProdOf(*x, axis, x->dim());
    if (mean->numel() != m || rstd->numel() != m || (*w && (*w)->numel() != n)) return host(c);
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pm, Packed(c, *dev, *mean));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pr, Packed(c, *dev, *rstd));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    std::vector<Tensor> out(3);
    const std::vector<int64_t> shapes[3] = {x->shape(), *ns, *ns};
    for (int i = 0; i < 3; ++i) {
      if ((*mask)[i]) {
        OVERLAP_ASSIGN_OR_RETURN(out[i], c.NewUninitializedOutput(dt, shapes[i]));
      }
    }
    NnArgs a = NnFor(NnOp::kLayerNormBackward, dt);
    a.rows = m;
    a.cols = n;
    a.g = Ptr(pg);
    a.x = Ptr(px);
    a.w = OptPtr(pw);
    a.mean = Ptr(pm);
    a.var = Ptr(pr);
    if (out[0].defined()) {
      a.out = MutPtr(out[0]);
      OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    }
    if (out[1].defined() || out[2].defined()) {
      a.op = NnOp::kLayerNormParamBackward;
      a.out = nullptr;
      a.out2 = out[1].defined() ? MutPtr(out[1]) : nullptr;
      a.out3 = out[2].defined() ? MutPtr(out[2]) : nullptr;
      OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    }
    return out;
  };
}

// cuDNN takes a batch norm with weight and bias, at least two values per channel, and
// dimensions that fit its ints; the nn kernel takes the rest.
bool CudnnBatchNorm(const std::optional<Tensor>& w, const std::optional<Tensor>& b, int64_t batch,
                    int64_t channels, int64_t inner) {
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  return w && b && batch * inner >= 2 && batch <= kMaxInt && channels <= kMaxInt &&
         inner <= kMaxInt;
}

Kernel BatchNormOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("input");
    absl::StatusOr<std::optional<Tensor>> w = c.OptionalTensorArg("weight");
    absl::StatusOr<std::optional<Tensor>> b = c.OptionalTensorArg("bias");
    absl::StatusOr<std::optional<Tensor>> rm = c.OptionalTensorArg("running_mean");
    absl::StatusOr<std::optional<Tensor>> rv = c.OptionalTensorArg("running_var");
    absl::StatusOr<bool> training = c.BoolArg("training");
    absl::StatusOr<double> eps = c.DoubleArg("eps");
    if (!x.ok() || !w.ok() || !b.ok() || !rm.ok() || !rv.ok() || !training.ok() || !eps.ok() ||
        !FloatType(x->dtype()) || x->dim() < 2 || (!*training && (!*rm || !*rv))) {
      return host(c);  // its errors
    }
    if (*training) {  // the running statistics are not read (nor updated: the graph does that)
      *rm = std::nullopt;
      *rv = std::nullopt;
    }
    const DType dt = x->dtype();
    const int64_t batch = x->shape()[0], ch = x->shape()[1], inner = ProdOf(*x, 2, x->dim());
    for (const std::optional<Tensor>* p : {&*w, &*b, &*rm, &*rv}) {
      if (*p && ((*p)->numel() != ch || (*p)->dtype() != dt)) return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pb, PackedOpt(c, *dev, *b));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pm, PackedOpt(c, *dev, *rm));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pv, PackedOpt(c, *dev, *rv));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(dt, x->shape()));
    const int64_t saved = *training ? ch : 0;
    OVERLAP_ASSIGN_OR_RETURN(Tensor save_mean, c.NewUninitializedOutput(dt, {saved}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor save_invstd, c.NewUninitializedOutput(dt, {saved}));
    if (CudnnBatchNorm(pw, pb, batch, ch, inner)) {
      BatchNormArgs a;
      a.pass = *training ? BatchNormPass::kTraining : BatchNormPass::kInference;
      a.dtype = dt;
      a.batch = batch;
      a.channels = ch;
      a.inner = inner;
      a.eps = *eps;
      a.x = Ptr(px);
      a.weight = Ptr(*pw);
      a.bias = Ptr(*pb);
      a.mean = OptPtr(pm);
      a.var = OptPtr(pv);
      a.y = MutPtr(out);
      a.save_mean = *training ? MutPtr(save_mean) : nullptr;
      a.save_invstd = *training ? MutPtr(save_invstd) : nullptr;
      OVERLAP_RETURN_IF_ERROR(dev->api().BatchNorm(a, dev->compute()));
    } else {
      NnArgs a = NnFor(NnOp::kBatchNorm, dt);
      a.batch = batch;
      a.cols = ch;
      a.inner = inner;
      a.x = Ptr(px);
      a.w = OptPtr(pw);
      a.b = OptPtr(pb);
      a.mean = OptPtr(pm);
      a.var = OptPtr(pv);
      a.flag = *training ? 1 : 0;
      a.eps = *eps;
      a.out = MutPtr(out);
      a.out2 = MutPtr(save_mean);
      a.out3 = MutPtr(save_invstd);
      OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    }
    return std::vector<Tensor>{out, save_mean, save_invstd};
  };
}

Kernel BatchNormBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g = c.TensorArg("grad_out");
    absl::StatusOr<Tensor> x = c.TensorArg("input");
    absl::StatusOr<std::optional<Tensor>> w = c.OptionalTensorArg("weight");
    absl::StatusOr<std::optional<Tensor>> rm = c.OptionalTensorArg("running_mean");
    absl::StatusOr<std::optional<Tensor>> rv = c.OptionalTensorArg("running_var");
    absl::StatusOr<std::optional<Tensor>> sm = c.OptionalTensorArg("save_mean");
    absl::StatusOr<std::optional<Tensor>> si = c.OptionalTensorArg("save_invstd");
    absl::StatusOr<bool> training = c.BoolArg("train");
    absl::StatusOr<double> eps = c.DoubleArg("eps");
    absl::StatusOr<std::vector<bool>> mask = c.BoolListArg("output_mask", {true, true, true});
    if (!g.ok() || !x.ok() || !w.ok() || !rm.ok() || !rv.ok() || !sm.ok() || !si.ok() ||
        !training.ok() || !eps.ok() || !mask.ok() || mask->size() != 3 || !FloatType(x->dtype()) ||
        x->dim() < 2 || g->shape() != x->shape()) {
      return host(c);
    }
    const DType dt = x->dtype();
    const int64_t batch = x->shape()[0], ch = x->shape()[1], inner = ProdOf(*x, 2, x->dim());
    const std::optional<Tensor>& mean = *training ? *sm : *rm;
    const std::optional<Tensor>& var = *training ? *si : *rv;
    if (!mean || !var || g->dtype() != dt) return host(c);
    for (const std::optional<Tensor>* p : {&std::as_const(*w), &mean, &var}) {
      if (*p && ((*p)->numel() != ch || (*p)->dtype() != dt)) return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pm, Packed(c, *dev, *mean));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pv, Packed(c, *dev, *var));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    std::vector<Tensor> out(3);
    const std::vector<int64_t> shapes[3] = {x->shape(), {ch}, {ch}};
    for (int i = 0; i < 3; ++i) {
      if ((*mask)[i]) {
        OVERLAP_ASSIGN_OR_RETURN(out[i], c.NewUninitializedOutput(dt, shapes[i]));
      }
    }
    // cuDNN's backward is the training one (batch statistics); it writes all three.
    if (*training && CudnnBatchNorm(pw, pw, batch, ch, inner)) {
      std::vector<Tensor> dst = out;
      for (int i = 0; i < 3; ++i) {
        if (!dst[i].defined()) {
          OVERLAP_ASSIGN_OR_RETURN(dst[i], c.NewScratch(dt, shapes[i]));
        }
      }
      BatchNormArgs a;
      a.pass = BatchNormPass::kBackward;
      a.dtype = dt;
      a.batch = batch;
      a.channels = ch;
      a.inner = inner;
      a.eps = *eps;
      a.x = Ptr(px);
      a.dy = Ptr(pg);
      a.weight = Ptr(*pw);
      a.mean = Ptr(pm);
      a.var = Ptr(pv);
      a.y = MutPtr(dst[0]);
      a.dweight = MutPtr(dst[1]);
      a.dbias = MutPtr(dst[2]);
      OVERLAP_RETURN_IF_ERROR(dev->api().BatchNorm(a, dev->compute()));
      return out;
    }
    NnArgs a = NnFor(NnOp::kBatchNormBackward, dt);
    a.batch = batch;
    a.cols = ch;
    a.inner = inner;
    a.g = Ptr(pg);
    a.x = Ptr(px);
    a.w = OptPtr(pw);
    a.mean = Ptr(pm);
    a.var = Ptr(pv);
    a.flag = *training ? 1 : 0;
    a.eps = *eps;
    a.out = out[0].defined() ? MutPtr(out[0]) : nullptr;
    a.out2 = out[1].defined() ? MutPtr(out[1]) : nullptr;
    a.out3 = out[2].defined() ? MutPtr(out[2]) : nullptr;
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    return out;
  };
}

// Max pooling with indices: the nn kernel (cuDNN's pooling gives no indices, which the
// backward needs, so ATen has its own kernel too).
Kernel MaxPoolOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    if (!x.ok() || !FloatType(x->dtype())) return host(c);
    absl::StatusOr<NnPool> p = PoolArgs(c, *x);
    if (!p.ok()) return host(c);
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    std::vector<int64_t> shape = x->shape();
    shape[shape.size() - 2] = p->ho;
    shape[shape.size() - 1] = p->wo;
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor idx, c.NewUninitializedOutput(DType::kInt64, shape));
    NnArgs a = NnFor(NnOp::kMaxPool, x->dtype());
    a.pool = *p;
    a.x = Ptr(px);
    a.out = MutPtr(out);
    a.out2 = MutPtr(idx);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    return std::vector<Tensor>{out, idx};
  };
}

Kernel MaxPoolBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g = c.TensorArg("grad_output");
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    absl::StatusOr<Tensor> idx = c.TensorArg("indices");
    if (!g.ok() || !x.ok() || !idx.ok() || !IndexType(idx->dtype()) || idx->shape() != g->shape() ||
        g->dim() < 2 || x->dim() < 2 || g->dtype() != x->dtype() || !FloatType(x->dtype()) ||
        ProdOf(*g, 0, g->dim() - 2) != ProdOf(*x, 0, x->dim() - 2)) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pi, Packed(c, *dev, *idx));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), x->shape()));
    NnArgs a = NnFor(NnOp::kMaxPoolBackward, x->dtype());
    a.pool.planes = ProdOf(*g, 0, g->dim() - 2);
    a.pool.h = x->shape()[x->dim() - 2];
    a.pool.w = x->shape()[x->dim() - 1];
    a.pool.ho = g->shape()[g->dim() - 2];
    a.pool.wo = g->shape()[g->dim() - 1];
    a.g = Ptr(pg);
    a.index = Ptr(pi);
    a.index32 = pi.dtype() == DType::kInt32;
    a.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "pooling index"));
    return std::vector<Tensor>{out};
  };
}

Kernel NllLossOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    absl::StatusOr<Tensor> t = c.TensorArg("target");
    absl::StatusOr<std::optional<Tensor>> w = c.OptionalTensorArg("weight");
    absl::StatusOr<int64_t> reduction = c.IntArg("reduction");
    absl::StatusOr<int64_t> ignore = c.IntArg("ignore_index");
    if (!x.ok() || !t.ok() || !w.ok() || !reduction.ok() || !IsAtenReduction(*reduction) ||
        !ignore.ok() || !IndexType(t->dtype()) || !FloatType(x->dtype()) || x->dim() < 1 ||
        x->dim() > 2) {
      return host(c);
    }
    const int64_t n = x->dim() == 2 ? x->shape()[0] : 1, classes = x->shape().back();
    if (t->numel() != n || (*w && ((*w)->numel() != classes || (*w)->dtype() != x->dtype()))) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pt, Packed(c, *dev, *t));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    const bool none = *reduction == kReductionNone;
    std::vector<int64_t> loss_shape;
    if (none && x->dim() == 2) loss_shape = {n};
    OVERLAP_ASSIGN_OR_RETURN(Tensor loss, c.NewUninitializedOutput(x->dtype(), loss_shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor total, c.NewUninitializedOutput(x->dtype(), {}));
    NnArgs a = NnFor(NnOp::kNllLoss, x->dtype());
    a.rows = n;
    a.cols = classes;
    a.x = Ptr(px);
    a.index = Ptr(pt);
    a.index32 = pt.dtype() == DType::kInt32;
    a.w = OptPtr(pw);
    a.flag = *reduction;  // IsAtenReduction: checked above
    a.ignore = *ignore;
    a.out = MutPtr(loss);
    a.out2 = MutPtr(total);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "target"));
    return std::vector<Tensor>{loss, total};
  };
}

Kernel NllLossBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g = c.TensorArg("grad_output");
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    absl::StatusOr<Tensor> t = c.TensorArg("target");
    absl::StatusOr<std::optional<Tensor>> w = c.OptionalTensorArg("weight");
    absl::StatusOr<int64_t> reduction = c.IntArg("reduction");
    absl::StatusOr<int64_t> ignore = c.IntArg("ignore_index");
    absl::StatusOr<Tensor> total = c.TensorArg("total_weight");
    if (!g.ok() || !x.ok() || !t.ok() || !w.ok() || !reduction.ok() ||
        !IsAtenReduction(*reduction) || !ignore.ok() || !total.ok() || !IndexType(t->dtype()) ||
        !FloatType(x->dtype()) || x->dim() < 1 || x->dim() > 2 || g->dtype() != x->dtype() ||
        total->dtype() != x->dtype() || total->numel() != 1) {
      return host(c);
    }
    const int64_t n = x->dim() == 2 ? x->shape()[0] : 1, classes = x->shape().back();
    const bool none = *reduction == kReductionNone;
    if (t->numel() != n || (none ? g->numel() != n : g->numel() != 1) ||
        (*w && ((*w)->numel() != classes || (*w)->dtype() != x->dtype()))) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pt, Packed(c, *dev, *t));
    OVERLAP_ASSIGN_OR_RETURN(Tensor ptot, Packed(c, *dev, *total));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), x->shape()));
    NnArgs a = NnFor(NnOp::kNllLossBackward, x->dtype());
    a.rows = n;
    a.cols = classes;
    a.g = Ptr(pg);
    a.index = Ptr(pt);
    a.index32 = pt.dtype() == DType::kInt32;
    a.w = OptPtr(pw);
    a.mean = Ptr(ptot);
    a.flag = *reduction;  // IsAtenReduction: checked above
    a.ignore = *ignore;
    a.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "target"));
    return std::vector<Tensor>{out};
  };
}

Kernel MseLossOnDevice(bool backward, Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g =
        backward ? c.TensorArg("grad_output") : absl::StatusOr<Tensor>(Tensor());
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    absl::StatusOr<Tensor> t = c.TensorArg("target");
    absl::StatusOr<int64_t> reduction = c.IntArg("reduction");
    if (!g.ok() || !x.ok() || !t.ok() || !reduction.ok() || !IsAtenReduction(*reduction) ||
        !FloatType(x->dtype()) || t->shape() != x->shape() || t->dtype() != x->dtype()) {
      return host(c);
    }
    const bool none = *reduction == kReductionNone;
    if (backward &&
        (g->dtype() != x->dtype() || (none ? g->shape() != x->shape() : g->numel() != 1))) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pt, Packed(c, *dev, *t));
    NnArgs a = NnFor(backward ? NnOp::kMseLossBackward : NnOp::kMseLoss, x->dtype());
    a.rows = x->numel();
    a.x = Ptr(px);
    a.b = Ptr(pt);
    a.flag = *reduction;  // IsAtenReduction: checked above
    Tensor pg;
    if (backward) {
      OVERLAP_ASSIGN_OR_RETURN(pg, Packed(c, *dev, *g));
      a.g = Ptr(pg);
    }
    const std::vector<int64_t> shape = backward || none ? x->shape() : std::vector<int64_t>{};
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), shape));
    a.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    return std::vector<Tensor>{out};
  };
}

Kernel EmbeddingOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> w = c.TensorArg("weight");
    absl::StatusOr<Tensor> idx = c.TensorArg("indices");
    if (!w.ok() || !idx.ok() || !IndexType(idx->dtype()) || w->dim() != 2 ||
        !FloatType(w->dtype())) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor pw, Packed(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pi, Packed(c, *dev, *idx));
    std::vector<int64_t> shape = idx->shape();
    shape.push_back(w->shape()[1]);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(w->dtype(), shape));
    NnArgs a = NnFor(NnOp::kEmbedding, w->dtype());
    a.rows = idx->numel();
    a.cols = w->shape()[1];
    a.cols2 = w->shape()[0];
    a.w = Ptr(pw);
    a.index = Ptr(pi);
    a.index32 = pi.dtype() == DType::kInt32;
    a.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "embedding index"));
    return std::vector<Tensor>{out};
  };
}

Kernel EmbeddingBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g = c.TensorArg("grad_output");
    absl::StatusOr<Tensor> idx = c.TensorArg("indices");
    absl::StatusOr<int64_t> rows = c.IntArg("num_weights");
    absl::StatusOr<int64_t> padding = c.IntArg("padding_idx");
    absl::StatusOr<bool> by_freq = c.BoolArg("scale_grad_by_freq");
    if (!g.ok() || !idx.ok() || !rows.ok() || !padding.ok() || !by_freq.ok() || *by_freq ||
        !IndexType(idx->dtype()) || !FloatType(g->dtype()) || *rows < 0) {
      return host(c);
    }
    const int64_t d = g->dim() == 0 ? 1 : g->shape().back();
    if (g->numel() != idx->numel() * d) return host(c);
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pi, Packed(c, *dev, *idx));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(g->dtype(), {*rows, d}));
    NnArgs a = NnFor(NnOp::kEmbeddingBackward, g->dtype());
    a.rows = idx->numel();
    a.cols = d;
    a.cols2 = *rows;
    a.g = Ptr(pg);
    a.index = Ptr(pi);
    a.index32 = pi.dtype() == DType::kInt32;
    a.ignore = *padding;
    a.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "embedding index"));
    return std::vector<Tensor>{out};
  };
}

// `t` as [outer, n, inner] around dimension `dim` (wrapped); a 0-d tensor is [1, 1, 1].
struct AroundDim {
  int64_t outer = 1, n = 1, inner = 1;
};
AroundDim Around(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return {};
  return {ProdOf(t, 0, dim), t.shape()[dim], ProdOf(t, dim + 1, t.dim())};
}

// index_select: the nn kernel's row gathers (floats; other dtypes through the host).
Kernel IndexSelectOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> x = c.TensorArg("self");
    absl::StatusOr<int64_t> dim = c.IntArg("dim");
    absl::StatusOr<Tensor> idx = c.TensorArg("index");
    if (!x.ok() || !dim.ok() || !idx.ok() || !FloatType(x->dtype()) || !IndexType(idx->dtype()) ||
        idx->dim() > 1 || x->dim() == 0 || *dim < -x->dim() || *dim >= x->dim()) {
      return host(c);
    }
    const int64_t d = *dim < 0 ? *dim + x->dim() : *dim;
    const AroundDim a = Around(*x, d);
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pi, Packed(c, *dev, *idx));
    std::vector<int64_t> shape = x->shape();
    shape[d] = idx->numel();
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x->dtype(), shape));
    NnArgs n = NnFor(NnOp::kIndexSelect, x->dtype());
    n.batch = a.outer;
    n.rows = idx->numel();
    n.cols = a.inner;
    n.cols2 = a.n;
    n.x = Ptr(px);
    n.index = Ptr(pi);
    n.index32 = pi.dtype() == DType::kInt32;
    n.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, n, "index_select index"));
    return std::vector<Tensor>{out};
  };
}

// index_add (into a copy of self) and index_add_ (into self): the nn kernel's column
// accumulations.
Kernel IndexAddOnDevice(bool in_place, Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> self = c.TensorArg("self");
    absl::StatusOr<int64_t> dim = c.IntArg("dim");
    absl::StatusOr<Tensor> idx = c.TensorArg("index");
    absl::StatusOr<Tensor> src = c.TensorArg("source");
    absl::StatusOr<double> alpha = c.DoubleArg("alpha");
    if (!self.ok() || !dim.ok() || !idx.ok() || !src.ok() || !alpha.ok() ||
        !FloatType(self->dtype()) || src->dtype() != self->dtype() || !IndexType(idx->dtype()) ||
        idx->dim() > 1 || self->dim() == 0 || *dim < -self->dim() || *dim >= self->dim() ||
        (in_place && !self->IsContiguous())) {
      return host(c);
    }
    const int64_t d = *dim < 0 ? *dim + self->dim() : *dim;
    std::vector<int64_t> want = self->shape();
    want[d] = idx->numel();
    if (src->shape() != want) return host(c);
    const AroundDim a = Around(*self, d);
    OVERLAP_ASSIGN_OR_RETURN(Tensor ps, Packed(c, *dev, *src));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pi, Packed(c, *dev, *idx));
    Tensor out = *self;
    if (!in_place) {
      OVERLAP_ASSIGN_OR_RETURN(out, c.NewUninitializedOutput(self->dtype(), self->shape()));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(*self, out));
    }
    NnArgs n = NnFor(NnOp::kIndexAdd, self->dtype());
    n.batch = a.outer;
    n.rows = idx->numel();
    n.cols = a.inner;
    n.cols2 = a.n;
    n.b = Ptr(ps);
    n.index = Ptr(pi);
    n.index32 = pi.dtype() == DType::kInt32;
    n.scale = *alpha;
    n.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, n, "index_add index"));
    return std::vector<Tensor>{out};
  };
}

// Row-major C[M, N] = alpha op(A) op(B) + beta C, `batch` times (strides in elements),
// through cuBLAS's column-major view (C^T = op(B)^T op(A)^T).
struct RowGemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

absl::Status Run(CudaDevice& dev, const RowGemm& r, DType dtype) {
  GemmArgs g;
  g.trans_a = r.tb;
  g.trans_b = r.ta;
  g.m = r.n;
  g.n = r.m;
  g.k = r.k;
  g.alpha = r.alpha;
  g.beta = r.beta;
  g.a = r.b;
  g.lda = r.ldb;
  g.stride_a = r.stride_b;
  g.b = r.a;
  g.ldb = r.lda;
  g.stride_b = r.stride_a;
  g.c = r.c;
  g.ldc = r.ldc;
  g.stride_c = r.stride_c;
  g.batch = r.batch;
  g.dtype = dtype;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return absl::OkStatus();
  return dev.api().Gemm(g, dev.compute());
}

// Runs of query heads for one batched product each: heads [head, head + count) read key /
// value heads kv, kv + kv_step, ...
struct HeadRun {
  int64_t head, kv, count, kv_step;
};
// Grouped: one run per key / value head (its query heads share it: kv_step 0), or all heads
// at once without grouping. Per head: one run per query head (for products accumulating
// into a key / value head's gradient, which one batched call cannot do for shared heads).
std::vector<HeadRun> HeadRuns(const AttnShape& a, bool per_head) {
  if (a.h == a.hk) return {{0, 0, a.b * a.h, 1}};
  const int64_t r = a.h / a.hk;
  std::vector<HeadRun> runs;
  for (int64_t b = 0; b < a.b; ++b) {
    for (int64_t g = 0; g < a.hk; ++g) {
      if (!per_head) {
        runs.push_back({b * a.h + g * r, b * a.hk + g, r, 0});
        continue;
      }
      for (int64_t i = 0; i < r; ++i) runs.push_back({b * a.h + g * r + i, b * a.hk + g, 1, 0});
    }
  }
  return runs;
}

const void* At(const Tensor& t, int64_t elements) {
  return static_cast<const std::byte*>(Ptr(t)) + elements * DTypeSize(t.dtype());
}
void* MutAt(const Tensor& t, int64_t elements) {
  return static_cast<std::byte*>(MutPtr(t)) + elements * DTypeSize(t.dtype());
}

// P = softmax(scale Q K^T) for every head into p [b * h, s, sk] (cuBLAS, then the nn
// kernel's softmax rows), lse [b * h * s].
absl::Status AttentionScores(KernelCall& c, CudaDevice& dev, const AttnShape& a, const Tensor& q,
                             const Tensor& k, const Tensor& p, const Tensor& lse) {
  const DType dt = q.dtype();
  for (const HeadRun& run : HeadRuns(a, false)) {
    RowGemm r;
    r.tb = true;
    r.m = a.s, r.n = a.sk, r.k = a.d;
    r.alpha = a.scale;
    r.a = At(q, run.head * a.s * a.d), r.lda = a.d, r.stride_a = a.s * a.d;
    r.b = At(k, run.kv * a.sk * a.d), r.ldb = a.d, r.stride_b = run.kv_step * a.sk * a.d;
    r.c = MutAt(p, run.head * a.s * a.sk), r.ldc = a.sk, r.stride_c = a.s * a.sk;
    r.batch = run.count;
    OVERLAP_RETURN_IF_ERROR(Run(dev, r, dt));
  }
  NnArgs n = NnFor(NnOp::kAttentionSoftmax, dt);
  n.rows = a.b * a.h * a.s;
  n.cols = a.sk;
  n.inner = a.s;
  n.flag = a.causal ? 1 : 0;
  n.out = MutPtr(p);
  n.out2 = MutPtr(lse);
  return RunNn(c, dev, n);
}

Kernel AttentionOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> q = c.TensorArg("query");
    absl::StatusOr<Tensor> k = c.TensorArg("key");
    absl::StatusOr<Tensor> v = c.TensorArg("value");
    if (!q.ok() || !k.ok() || !v.ok() || !FloatType(q->dtype())) return host(c);
    absl::StatusOr<AttnShape> a = AttnArgs(c, *q, *k, *v);
    if (!a.ok()) return host(c);
    const DType dt = q->dtype();
    OVERLAP_ASSIGN_OR_RETURN(Tensor pq, Packed(c, *dev, *q));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pk, Packed(c, *dev, *k));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pv, Packed(c, *dev, *v));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(dt, {a->b, a->h, a->s, a->dv}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor lse, c.NewUninitializedOutput(dt, {a->b, a->h, a->s}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor p, c.NewScratch(dt, {a->b * a->h, a->s, a->sk}));
    OVERLAP_RETURN_IF_ERROR(AttentionScores(c, *dev, *a, pq, pk, p, lse));
    for (const HeadRun& run : HeadRuns(*a, false)) {  // O = P V
      RowGemm r;
      r.m = a->s, r.n = a->dv, r.k = a->sk;
      r.a = At(p, run.head * a->s * a->sk), r.lda = a->sk, r.stride_a = a->s * a->sk;
      r.b = At(pv, run.kv * a->sk * a->dv), r.ldb = a->dv;
      r.stride_b = run.kv_step * a->sk * a->dv;
      r.c = MutAt(out, run.head * a->s * a->dv), r.ldc = a->dv, r.stride_c = a->s * a->dv;
      r.batch = run.count;
      OVERLAP_RETURN_IF_ERROR(Run(*dev, r, dt));
    }
    return std::vector<Tensor>{out, lse};
  };
}

// dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO O)); dQ = scale dS K; dK = scale dS^T Q
// (the CPU kernel's formulas; P recomputed from Q and K).
Kernel AttentionBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    absl::StatusOr<Tensor> g = c.TensorArg("grad_out");
    absl::StatusOr<Tensor> q = c.TensorArg("query");
    absl::StatusOr<Tensor> k = c.TensorArg("key");
    absl::StatusOr<Tensor> v = c.TensorArg("value");
    absl::StatusOr<Tensor> o = c.TensorArg("out");
    if (!g.ok() || !q.ok() || !k.ok() || !v.ok() || !o.ok() || !FloatType(q->dtype())) {
      return host(c);
    }
    absl::StatusOr<AttnShape> a = AttnArgs(c, *q, *k, *v);
    if (!a.ok()) return host(c);
    const DType dt = q->dtype();
    const std::vector<int64_t> out_shape = {a->b, a->h, a->s, a->dv};
    if (g->shape() != out_shape || o->shape() != out_shape || g->dtype() != dt ||
        o->dtype() != dt) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pq, Packed(c, *dev, *q));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pk, Packed(c, *dev, *k));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pv, Packed(c, *dev, *v));
    OVERLAP_ASSIGN_OR_RETURN(Tensor po, Packed(c, *dev, *o));
    OVERLAP_ASSIGN_OR_RETURN(Tensor dq, c.NewUninitializedOutput(dt, q->shape()));
    // dK and dV accumulate over the query heads sharing them (beta 1 from zero).
    OVERLAP_ASSIGN_OR_RETURN(Tensor dk, c.NewOutput(dt, k->shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor dv, c.NewOutput(dt, v->shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor p, c.NewScratch(dt, {a->b * a->h, a->s, a->sk}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor dp, c.NewScratch(dt, {a->b * a->h, a->s, a->sk}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor lse, c.NewScratch(dt, {a->b * a->h * a->s}));
    OVERLAP_RETURN_IF_ERROR(AttentionScores(c, *dev, *a, pq, pk, p, lse));
    const int64_t s = a->s, sk = a->sk, d = a->d, dvn = a->dv;
    for (const HeadRun& run : HeadRuns(*a, true)) {  // dV += P^T dO
      RowGemm r;
      r.ta = true;
      r.m = sk, r.n = dvn, r.k = s;
      r.beta = 1;
      r.a = At(p, run.head * s * sk), r.lda = sk, r.stride_a = s * sk;
      r.b = At(pg, run.head * s * dvn), r.ldb = dvn, r.stride_b = s * dvn;
      r.c = MutAt(dv, run.kv * sk * dvn), r.ldc = dvn, r.stride_c = run.kv_step * sk * dvn;
      r.batch = run.count;
      OVERLAP_RETURN_IF_ERROR(Run(*dev, r, dt));
    }
    for (const HeadRun& run : HeadRuns(*a, false)) {  // dP = dO V^T
      RowGemm r;
      r.tb = true;
      r.m = s, r.n = sk, r.k = dvn;
      r.a = At(pg, run.head * s * dvn), r.lda = dvn, r.stride_a = s * dvn;
      r.b = At(pv, run.kv * sk * dvn), r.ldb = dvn, r.stride_b = run.kv_step * sk * dvn;
      r.c = MutAt(dp, run.head * s * sk), r.ldc = sk, r.stride_c = s * sk;
      r.batch = run.count;
      OVERLAP_RETURN_IF_ERROR(Run(*dev, r, dt));
    }
    NnArgs n = NnFor(NnOp::kAttentionSoftmaxBackward, dt);
    n.rows = a->b * a->h * s;
    n.cols = sk;
    n.inner = dvn;
    n.x = Ptr(p);
    n.out = MutPtr(dp);
    n.g = Ptr(pg);
    n.b = Ptr(po);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, n));
    for (const HeadRun& run : HeadRuns(*a, false)) {  // dQ = scale dS K
      RowGemm r;
      r.m = s, r.n = d, r.k = sk;
      r.alpha = a->scale;
      r.a = At(dp, run.head * s * sk), r.lda = sk, r.stride_a = s * sk;
      r.b = At(pk, run.kv * sk * d), r.ldb = d, r.stride_b = run.kv_step * sk * d;
      r.c = MutAt(dq, run.head * s * d), r.ldc = d, r.stride_c = s * d;
      r.batch = run.count;
      OVERLAP_RETURN_IF_ERROR(Run(*dev, r, dt));
    }
    for (const HeadRun& run : HeadRuns(*a, true)) {  // dK += scale dS^T Q
      RowGemm r;
      r.ta = true;
      r.m = sk, r.n = d, r.k = s;
      r.alpha = a->scale;
      r.beta = 1;
      r.a = At(dp, run.head * s * sk), r.lda = sk, r.stride_a = s * sk;
      r.b = At(pq, run.head * s * d), r.ldb = d, r.stride_b = s * d;
      r.c = MutAt(dk, run.kv * sk * d), r.ldc = d, r.stride_c = run.kv_step * sk * d;
      r.batch = run.count;
      OVERLAP_RETURN_IF_ERROR(Run(*dev, r, dt));
    }
    return std::vector<Tensor>{dq, dk, dv};
  };
}

constexpr absl::string_view kCudnnOps[] = {
    "aten.convolution.default", "aten.convolution_backward.default",
    "aten.native_batch_norm.default", "aten.native_batch_norm_backward.default"};

// The nn kernel family's ops (nn_ops.h).
constexpr absl::string_view kNnOps[] = {"aten.native_layer_norm.default",
                                        "aten.native_layer_norm_backward.default",
                                        "aten.max_pool2d_with_indices.default",
                                        "aten.max_pool2d_with_indices_backward.default",
                                        "aten.nll_loss_forward.default",
                                        "aten.nll_loss_backward.default",
                                        "aten.mse_loss.default",
                                        "aten.mse_loss_backward.default",
                                        "aten.embedding.default",
                                        "aten.embedding_dense_backward.default",
                                        "aten.index_select.default",
                                        "aten.index_add.default",
                                        "aten.index_add_.default"};

constexpr absl::string_view kReductionOps[] = {"aten.sum.dim_IntList",
                                               "aten.mean.dim",
                                               "aten.sum.default",
                                               "aten.mean.default",
                                               "aten._softmax.default",
                                               "aten._log_softmax.default",
                                               "aten._softmax_backward_data.default",
                                               "aten._log_softmax_backward_data.default"};

// Ops whose CPU kernel only allocates (zeroed): they run on the device as they are.
constexpr absl::string_view kAllocatingOps[] = {
    "aten.zeros_like.default", "aten.new_zeros.default", "aten.empty_like.default",
    "aten.zeros.default",      "aten.zero.default",      "aten.new_empty.default"};
// Ops whose CPU kernel only allocates and copies (kernel_util.h's CopyInto): on the device,
// its copies are the device's copy kernel.
constexpr absl::string_view kCopyingOps[] = {
    "aten.cat.default",           "aten.slice_backward.default",    "aten.select_backward.default",
    "aten.stack.default",         "aten.unsafe_split.Tensor",       "aten.lift_fresh_copy.default",
    "aten.slice_scatter.default", "aten.as_strided_scatter.default"};

}  // namespace

std::string CudaKernelKind(absl::string_view target) {
  for (absl::string_view t : kCublasOps) {
    if (t == target) return "cublas";
  }
  for (const auto& [t, planner] : ElementwisePlanners()) {
    if (t == target) return "elementwise";
  }
  for (absl::string_view t : kAllocatingOps) {
    if (t == target) return "allocation";
  }
  for (absl::string_view t : kCopyingOps) {
    if (t == target) return "copy";
  }
  for (absl::string_view t : kReductionOps) {
    if (t == target) return "reduction";
  }
  for (absl::string_view t : kCudnnOps) {
    if (t == target) return "cudnn";
  }
  for (absl::string_view t : kNnOps) {
    if (t == target) return "nn";
  }
  if (ViewTargets().contains(target)) return "view";
  return CpuKernels().Find(target) != nullptr ? "host" : "";
}

KernelRegistry CudaKernels(CudaDevice& device) {
  KernelRegistry r;
  CudaDevice* dev = &device;
  const KernelRegistry& cpu = CpuKernels();
  for (const std::string& target : cpu.Targets()) {
    if (ViewTargets().contains(target)) {
      r.Register(target, *cpu.Find(target));
    } else {
      r.Register(target, OnHost(*cpu.Find(target), dev));
    }
  }
  for (absl::string_view t : kAllocatingOps) r.Register(std::string(t), *cpu.Find(t));
  for (absl::string_view t : kCopyingOps) r.Register(std::string(t), *cpu.Find(t));
  for (auto& [target, planner] : ElementwisePlanners()) {
    r.Register(target, OnDevice(std::move(planner), OnHost(*cpu.Find(target), dev), dev));
  }
  auto host = [&](absl::string_view t) { return OnHost(*cpu.Find(t), dev); };
  r.Register("aten.sum.dim_IntList", SumOnDevice(false, host("aten.sum.dim_IntList"), dev));
  r.Register("aten.mean.dim", SumOnDevice(true, host("aten.mean.dim"), dev));
  r.Register("aten.sum.default", SumOnDevice(false, host("aten.sum.default"), dev));
  r.Register("aten.mean.default", SumOnDevice(true, host("aten.mean.default"), dev));
  r.Register("aten._softmax.default",
             SoftmaxOnDevice(false, false, host("aten._softmax.default"), dev));
  r.Register("aten._log_softmax.default",
             SoftmaxOnDevice(false, true, host("aten._log_softmax.default"), dev));
  r.Register("aten._softmax_backward_data.default",
             SoftmaxOnDevice(true, false, host("aten._softmax_backward_data.default"), dev));
  r.Register("aten._log_softmax_backward_data.default",
             SoftmaxOnDevice(true, true, host("aten._log_softmax_backward_data.default"), dev));
  r.Register("aten.convolution.default",
             ConvolutionOnDevice(host("aten.convolution.default"), dev));
  r.Register("aten.convolution_backward.default",
             ConvolutionBackwardOnDevice(host("aten.convolution_backward.default"), dev));
  const std::pair<const char*, Kernel (*)(Kernel, CudaDevice*)> nn[] = {
      {"aten.native_layer_norm.default", LayerNormOnDevice},
      {"aten.native_layer_norm_backward.default", LayerNormBackwardOnDevice},
      {"aten.native_batch_norm.default", BatchNormOnDevice},
      {"aten.native_batch_norm_backward.default", BatchNormBackwardOnDevice},
      {"aten.max_pool2d_with_indices.default", MaxPoolOnDevice},
      {"aten.max_pool2d_with_indices_backward.default", MaxPoolBackwardOnDevice},
      {"aten.nll_loss_forward.default", NllLossOnDevice},
      {"aten.nll_loss_backward.default", NllLossBackwardOnDevice},
      {"aten.embedding.default", EmbeddingOnDevice},
      {"aten.embedding_dense_backward.default", EmbeddingBackwardOnDevice},
      {"aten.index_select.default", IndexSelectOnDevice},
      {"aten._scaled_dot_product_flash_attention.default", AttentionOnDevice},
      {"aten._scaled_dot_product_flash_attention_backward.default", AttentionBackwardOnDevice},
  };
  for (const auto& [target, make] : nn) r.Register(target, make(host(target), dev));
  r.Register("aten.index_add.default",
             IndexAddOnDevice(false, host("aten.index_add.default"), dev));
  r.Register("aten.index_add_.default",
             IndexAddOnDevice(true, host("aten.index_add_.default"), dev));
  r.Register("aten.mse_loss.default", MseLossOnDevice(false, host("aten.mse_loss.default"), dev));
  r.Register("aten.mse_loss_backward.default",
             MseLossOnDevice(true, host("aten.mse_loss_backward.default"), dev));
  r.Register("aten.mm.default", [dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg("self"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg("mat2"));
    OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a, b));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewUninitializedOutput(a.dtype(), {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, 1, 0, out));
    return std::vector<Tensor>{out};
  });
  r.Register("aten.addmm.default", [dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(Tensor bias, c.TensorArg("self"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg("mat1"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg("mat2"));
    OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg("beta"));
    OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
    OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a, b));
    const int64_t m = a.shape()[0], n = b.shape()[1];
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a.dtype(), {m, n}));
    // The bias broadcast over the rows (a [n] or [1, n] or [m, n] tensor), then the product
    // accumulated onto it.
    std::vector<int64_t> strides;
    if (bias.dim() == 1 && bias.shape()[0] == n) {
      strides = {0, bias.strides()[0]};
    } else if (bias.dim() == 2 && bias.shape()[1] == n &&
               (bias.shape()[0] == m || bias.shape()[0] == 1)) {
      strides = {bias.shape()[0] == 1 ? 0 : bias.strides()[0], bias.strides()[1]};
    } else {
      return c.Error(
          absl::StrCat("addmm: a bias of ", bias.DebugString(), " for [", m, ", ", n, "]"));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor spread, bias.AsStrided({m, n}, strides, bias.offset()));
    OVERLAP_RETURN_IF_ERROR(dev->Copy(spread, out));
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, alpha, beta, out));
    return std::vector<Tensor>{out};
  });
  return r;
}

}  // namespace overlap
