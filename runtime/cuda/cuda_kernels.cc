#include "runtime/cuda/cuda_kernels.h"

#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "graph/status_macros.h"
#include "runtime/conv_args.h"

namespace overlap {
namespace {

constexpr absl::string_view kCublasOps[] = {"aten.mm.default", "aten.addmm.default"};

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
  OVERLAP_ASSIGN_OR_RETURN(p.a, c.TensorArg(0, "self"));
  const Value* other = c.Arg(1, "other");
  if (other != nullptr && !other->is_ref()) {
    OVERLAP_ASSIGN_OR_RETURN(p.b_scalar, c.DoubleArg(1, "other"));
    return p;
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(1, "other"));
  if (b.dim() == 0 && b.dtype() != p.a.dtype()) return std::nullopt;
  p.b = b;
  return p;
}

absl::StatusOr<std::optional<EwPlan>> Unary(KernelCall& c, EwOp op, double b = 0) {
  EwPlan p;
  p.op = op;
  p.b_scalar = b;
  OVERLAP_ASSIGN_OR_RETURN(p.a, c.TensorArg(0, "self"));
  return p;
}

absl::StatusOr<std::optional<EwPlan>> GradOf(KernelCall& c, EwOp op, double s = 0) {
  EwPlan p;
  p.op = op;
  p.s = s;
  OVERLAP_ASSIGN_OR_RETURN(p.a, c.TensorArg(0, "grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(1, "self"));
  p.b = b;
  return p;
}

// GELU's approximate argument: the op, or nullopt for a bad one (the host path errs).
std::optional<EwOp> GeluOp(KernelCall& c, int pos, EwOp exact, EwOp tanh) {
  absl::StatusOr<std::string> a = c.StringArg(pos, "approximate", "none");
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
         OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg(2, "alpha", 1.0));
         return WithOther(c, EwOp::kAdd, alpha);
       }},
      {"aten.mul.Tensor", [](KernelCall& c) { return WithOther(c, EwOp::kMul, 0); }},
      {"aten.add.Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg(2, "alpha", 1.0));
         OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg(1, "other"));
         OVERLAP_ASSIGN_OR_RETURN(std::optional<EwPlan> p, Unary(c, EwOp::kAdd, other));
         p->s = alpha;
         return p;
       }},
      {"aten.mul.Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg(1, "other"));
         return Unary(c, EwOp::kMul, other);
       }},
      {"aten.div.Scalar",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg(1, "other"));
         return Unary(c, EwOp::kDiv, other);
       }},
      {"aten.div.Tensor_mode",
       [](KernelCall& c) -> R {
         const Value* m = c.Arg(2, "rounding_mode");
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
         OVERLAP_ASSIGN_OR_RETURN(double e, c.DoubleArg(1, "exponent"));
         if (e == 2) return Unary(c, EwOp::kSquare);
         if (e == 3) return Unary(c, EwOp::kCube);
         return Unary(c, EwOp::kPow, e);
       }},
      {"aten.rsqrt.default", [](KernelCall& c) { return Unary(c, EwOp::kRsqrt); }},
      {"aten.relu.default", [](KernelCall& c) { return Unary(c, EwOp::kRelu); }},
      {"aten.silu.default", [](KernelCall& c) { return Unary(c, EwOp::kSilu); }},
      {"aten.gelu.default",
       [](KernelCall& c) -> R {
         std::optional<EwOp> op = GeluOp(c, 1, EwOp::kGelu, EwOp::kGeluTanh);
         if (!op) return std::nullopt;
         return Unary(c, *op);
       }},
      {"aten.gelu_backward.default",
       [](KernelCall& c) -> R {
         std::optional<EwOp> op = GeluOp(c, 2, EwOp::kGeluBackward, EwOp::kGeluTanhBackward);
         if (!op) return std::nullopt;
         return GradOf(c, *op);
       }},
      {"aten.silu_backward.default", [](KernelCall& c) { return GradOf(c, EwOp::kSiluBackward); }},
      {"aten.threshold_backward.default",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double threshold, c.DoubleArg(2, "threshold"));
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
    absl::StatusOr<Tensor> x = c.TensorArg(0, backward ? "grad_output" : "self");
    absl::StatusOr<Tensor> y = backward ? c.TensorArg(1, "output") : x;
    absl::StatusOr<int64_t> dim = c.IntArg(backward ? 2 : 1, "dim");
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
    absl::StatusOr<Tensor> x = c.TensorArg(0, "self");
    if (!x.ok() || !FloatType(x->dtype()) || x->dim() == 0) return host(c);
    const Value* dv = c.Arg(1, "dim");
    std::vector<int64_t> dims;
    if (dv != nullptr && !dv->is_none()) {
      absl::StatusOr<std::vector<int64_t>> got = c.IntListArg(1, "dim");
      if (!got.ok()) return host(c);
      dims = *got;
    }
    absl::StatusOr<bool> keepdim = c.BoolArg(2, "keepdim", false);
    if (!keepdim.ok()) return host(c);
    const int64_t rank = x->dim();
    std::vector<bool> reduced(rank, dims.empty());
    for (int64_t d : dims) {
      if (d < -rank || d >= rank) return host(c);
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
    absl::StatusOr<Tensor> x = c.TensorArg(0, "input");
    absl::StatusOr<Tensor> w = c.TensorArg(1, "weight");
    absl::StatusOr<std::optional<Tensor>> bias = c.OptionalTensorArg(2, "bias");
    if (!x.ok() || !w.ok() || !bias.ok() || !FloatType(x->dtype()) || w->dtype() != x->dtype() ||
        (*bias && (*bias)->dtype() != x->dtype())) {
      return host(c);
    }
    absl::StatusOr<ConvGeometry> g = ConvArgs(c, *x, *w, 3);
    if (!g.ok() || (*bias && ((*bias)->dim() != 1 || (*bias)->numel() != g->o))) return host(c);
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
    absl::StatusOr<Tensor> gy = c.TensorArg(0, "grad_output");
    absl::StatusOr<Tensor> x = c.TensorArg(1, "input");
    absl::StatusOr<Tensor> w = c.TensorArg(2, "weight");
    absl::StatusOr<std::vector<bool>> mask = c.BoolListArg(10, "output_mask", {true, true, true});
    if (!gy.ok() || !x.ok() || !w.ok() || !mask.ok() || mask->size() != 3 ||
        !FloatType(x->dtype()) || w->dtype() != x->dtype() || gy->dtype() != x->dtype()) {
      return host(c);
    }
    absl::StatusOr<ConvGeometry> g = ConvArgs(c, *x, *w, 4);
    if (!g.ok() || gy->shape() != std::vector<int64_t>{g->n, g->o, g->ho, g->wo}) return host(c);
    bool has_bias = false;
    const Value* bias_sizes = c.Arg(3, "bias_sizes");
    if (bias_sizes != nullptr && bias_sizes->kind() == Value::Kind::kList) {
      absl::StatusOr<std::vector<int64_t>> bs = c.IntListArg(3, "bias_sizes");
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

constexpr absl::string_view kCudnnOps[] = {"aten.convolution.default",
                                           "aten.convolution_backward.default"};

constexpr absl::string_view kReductionOps[] = {"aten.sum.dim_IntList",
                                               "aten.mean.dim",
                                               "aten._softmax.default",
                                               "aten._log_softmax.default",
                                               "aten._softmax_backward_data.default",
                                               "aten._log_softmax_backward_data.default"};

// Ops whose CPU kernel only allocates (zeroed): they run on the device as they are.
constexpr absl::string_view kAllocatingOps[] = {"aten.zeros_like.default",
                                                "aten.new_zeros.default"};

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
  for (absl::string_view t : kReductionOps) {
    if (t == target) return "reduction";
  }
  for (absl::string_view t : kCudnnOps) {
    if (t == target) return "cudnn";
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
  for (auto& [target, planner] : ElementwisePlanners()) {
    r.Register(target, OnDevice(std::move(planner), OnHost(*cpu.Find(target), dev), dev));
  }
  auto host = [&](absl::string_view t) { return OnHost(*cpu.Find(t), dev); };
  r.Register("aten.sum.dim_IntList", SumOnDevice(false, host("aten.sum.dim_IntList"), dev));
  r.Register("aten.mean.dim", SumOnDevice(true, host("aten.mean.dim"), dev));
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
  r.Register("aten.mm.default", [dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg(0, "self"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(1, "mat2"));
    OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a, b));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewUninitializedOutput(a.dtype(), {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, 1, 0, out));
    return std::vector<Tensor>{out};
  });
  r.Register("aten.addmm.default", [dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(Tensor bias, c.TensorArg(0, "self"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg(1, "mat1"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(2, "mat2"));
    OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg(3, "beta", 1.0));
    OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg(4, "alpha", 1.0));
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
