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
#include "runtime/kernels/elementwise_table.h"
#include "runtime/kernels/op_args.h"

namespace overlap {
namespace {

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
    on_host.set_random(c.random());  // a host draw is the device's: one key, one mask
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

// mm on cuBLAS; other dtypes through the host (its errors).
Kernel MmOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(MmArgs m, ReadMmArgs(c));
    const Tensor &a = m.self, &b = m.mat2;
    const DType dt = a.dtype();
    if (dt != DType::kFloat32 && dt != DType::kFloat64) return host(c);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewUninitializedOutput(dt, {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, 1, 0, out));
    return std::vector<Tensor>{out};
  };
}

// addmm on cuBLAS: self broadcast into the result (strides 0 on broadcast dimensions), then
// the product accumulated onto it with beta and alpha; with beta 0 self is not copied and
// cuBLAS does not read the result (ATen's: self's NaN and inf do not propagate).
Kernel AddmmOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(AddmmArgs m, ReadAddmmArgs(c));
    const Tensor &bias = m.self, &a = m.mat1, &b = m.mat2;
    const DType dt = a.dtype();
    if (dt != DType::kFloat32 && dt != DType::kFloat64) return host(c);
    const std::vector<int64_t> shape = {a.shape()[0], b.shape()[1]};
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(dt, shape));
    if (m.beta != 0) {
      std::vector<int64_t> strides(2, 0);  // ReadAddmmArgs: self broadcasts to shape
      const size_t lead = 2 - bias.shape().size();
      for (size_t i = 0; i < bias.shape().size(); ++i) {
        strides[lead + i] = bias.shape()[i] == 1 ? 0 : bias.strides()[i];
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor spread, bias.AsStrided(shape, strides, bias.offset()));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(spread, out));
    }
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, m.alpha, m.beta, out));
    return std::vector<Tensor>{out};
  };
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

// The planner of a row of the elementwise table (runtime/kernels/elementwise_table.h): the
// CPU kernel's formula and operands, read the same way.
Planner FromRow(const EwRow& row) {
  return [row](KernelCall& c) -> absl::StatusOr<std::optional<EwPlan>> {
    double s = 0;
    if (row.scalar != nullptr) {
      OVERLAP_ASSIGN_OR_RETURN(s, c.DoubleArg(row.scalar));
    }
    if (row.form == EwForm::kGradInput) return GradOf(c, row.op, s);
    if (row.form == EwForm::kGradResult) return GradOf(c, row.op, s, "output");
    OVERLAP_ASSIGN_OR_RETURN(std::optional<EwPlan> p, Unary(c, row.op));
    p->s = s;
    return p;
  };
}

// The elementwise ops the device kernel takes, by target: the table's rows, then the ops
// with more to read.
std::vector<std::pair<std::string, Planner>> ElementwisePlanners() {
  using R = absl::StatusOr<std::optional<EwPlan>>;
  std::vector<std::pair<std::string, Planner>> planners;
  for (const EwRow& row : ElementwiseRows()) planners.emplace_back(row.target, FromRow(row));
  std::vector<std::pair<std::string, Planner>> others = {
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
      {"aten.neg.default", [](KernelCall& c) { return Unary(c, EwOp::kMul, -1); }},
      {"aten.sub.Tensor",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
         return WithOther(c, EwOp::kAdd, -alpha);
       }},
      {"aten.leaky_relu_backward.default",
       [](KernelCall& c) -> R {
         OVERLAP_ASSIGN_OR_RETURN(double slope, c.DoubleArg("negative_slope"));
         OVERLAP_ASSIGN_OR_RETURN(bool self_is_result, c.BoolArg("self_is_result"));
         if (self_is_result && slope < 0) return std::nullopt;  // the host path's error
         return GradOf(c, EwOp::kLeakyReluBackward, slope);
       }},
  };
  for (auto& p : others) planners.push_back(std::move(p));
  return planners;
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
    OVERLAP_ASSIGN_OR_RETURN(SoftmaxArgs s, ReadSoftmaxArgs(c, backward));
    const Tensor& x = s.x;
    if (!FloatType(x.dtype()) || x.dim() == 0) return host(c);
    const int64_t d = s.dim;
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor py, Packed(c, *dev, backward ? s.output : x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
    ReduceArgs r;
    r.op = backward ? (log ? ReduceOp::kLogSoftmaxBackward : ReduceOp::kSoftmaxBackward)
                    : (log ? ReduceOp::kLogSoftmax : ReduceOp::kSoftmax);
    r.dtype = x.dtype();
    r.outer = Prod(x.shape(), 0, d);
    r.n = x.shape()[d];
    r.inner = Prod(x.shape(), d + 1, x.shape().size());
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
    OVERLAP_ASSIGN_OR_RETURN(SumArgs s, ReadSumArgs(c, mean));
    const Tensor* x = &s.self;
    // A result of another dtype (a dtype keyword, integers): the host path converts the input.
    if (!FloatType(x->dtype()) || x->dim() == 0 || s.dtype != x->dtype()) return host(c);
    const int64_t rank = x->dim(), count = s.count;
    const std::vector<int64_t>&keep_shape = s.keep_shape, &out_shape = s.out_shape;
    std::vector<int64_t> kept, gone;
    for (int64_t i = 0; i < rank; ++i) (s.reduced[i] ? gone : kept).push_back(i);
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
        Tensor out, c.NewUninitializedOutput(x->dtype(), s.keepdim ? keep_shape : out_shape));
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
    // Transposed and 3-D convolutions: the CPU kernel. A 1-D one runs as 2-D of unit height
    // (its packed tensors [n, c, w] are [n, c, 1, w] in memory).
    absl::StatusOr<ConvGeometry> g = ConvArgs(c, *x, *w);
    if (!g.ok() || g->transposed || g->spatial == 3 ||
        (*bias && ((*bias)->dim() != 1 || (*bias)->numel() != g->o))) {
      return host(c);
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pw, Packed(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(Tensor y, c.NewUninitializedOutput(x->dtype(), ConvOutShape(*g)));
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
      e.b.strides.assign(y.dim(), 0);
      e.b.strides[1] = (*bias)->strides()[0];
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
    if (!g.ok() || g->transposed || g->spatial == 3 || gy->shape() != ConvOutShape(*g)) {
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
    OVERLAP_ASSIGN_OR_RETURN(LayerNormArgs l, ReadLayerNormArgs(c));
    const Tensor* x = &l.input;
    if (!FloatType(x->dtype())) return host(c);
    const int64_t axis = x->dim() - static_cast<int64_t>(l.normalized_shape.size());
    const int64_t m = l.rows, n = l.cols;
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, l.weight));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pb, PackedOpt(c, *dev, l.bias));
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
    a.eps = l.eps;
    a.out = MutPtr(out);
    a.out2 = MutPtr(mean);
    a.out3 = MutPtr(rstd);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a));
    return std::vector<Tensor>{out, mean, rstd};
  };
}

Kernel LayerNormBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(LayerNormBackwardArgs l, ReadLayerNormBackwardArgs(c));
    const Tensor* x = &l.input;
    if (!FloatType(x->dtype())) return host(c);
    const DType dt = x->dtype();
    const int64_t m = l.rows, n = l.cols;
    const std::vector<int64_t>* ns = &l.normalized_shape;
    const std::vector<bool>* mask = &l.output_mask;
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, l.grad_out));
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pm, Packed(c, *dev, l.mean));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pr, Packed(c, *dev, l.rstd));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, l.weight));
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
    OVERLAP_ASSIGN_OR_RETURN(BatchNormForwardArgs bn, ReadBatchNormArgs(c));
    const Tensor* x = &bn.input;
    if (!FloatType(x->dtype())) return host(c);
    const bool training = bn.training;
    if (training) {  // the running statistics are not read (nor updated: the graph does that)
      bn.running_mean = std::nullopt;
      bn.running_var = std::nullopt;
    }
    const std::optional<Tensor>*w = &bn.weight, *b = &bn.bias;
    const std::optional<Tensor>*rm = &bn.running_mean, *rv = &bn.running_var;
    const DType dt = x->dtype();
    const int64_t batch = bn.batch, ch = bn.channels, inner = bn.inner;
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pb, PackedOpt(c, *dev, *b));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pm, PackedOpt(c, *dev, *rm));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pv, PackedOpt(c, *dev, *rv));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(dt, x->shape()));
    const int64_t saved = training ? ch : 0;
    OVERLAP_ASSIGN_OR_RETURN(Tensor save_mean, c.NewUninitializedOutput(dt, {saved}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor save_invstd, c.NewUninitializedOutput(dt, {saved}));
    if (CudnnBatchNorm(pw, pb, batch, ch, inner)) {
      BatchNormArgs a;
      a.pass = training ? BatchNormPass::kTraining : BatchNormPass::kInference;
      a.dtype = dt;
      a.batch = batch;
      a.channels = ch;
      a.inner = inner;
      a.eps = bn.eps;
      a.x = Ptr(px);
      a.weight = Ptr(*pw);
      a.bias = Ptr(*pb);
      a.mean = OptPtr(pm);
      a.var = OptPtr(pv);
      a.y = MutPtr(out);
      a.save_mean = training ? MutPtr(save_mean) : nullptr;
      a.save_invstd = training ? MutPtr(save_invstd) : nullptr;
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
      a.flag = training ? 1 : 0;
      a.eps = bn.eps;
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
    OVERLAP_ASSIGN_OR_RETURN(BatchNormBackwardArgs bn, ReadBatchNormBackwardArgs(c));
    const Tensor *g = &bn.grad_out, *x = &bn.input, *mean = &bn.mean, *var = &bn.var;
    if (!FloatType(x->dtype())) return host(c);
    const std::optional<Tensor>* w = &bn.weight;
    const std::vector<bool>* mask = &bn.output_mask;
    const bool training = bn.training;
    const DType dt = x->dtype();
    const int64_t batch = bn.batch, ch = bn.channels, inner = bn.inner;
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
    if (training && CudnnBatchNorm(pw, pw, batch, ch, inner)) {
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
      a.eps = bn.eps;
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
    a.flag = training ? 1 : 0;
    a.eps = bn.eps;
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
    OVERLAP_ASSIGN_OR_RETURN(NllLossArgs l, ReadNllLossArgs(c, /*backward=*/false));
    const Tensor *x = &l.self, *t = &l.target;
    const std::optional<Tensor>* w = &l.weight;
    if (!FloatType(x->dtype())) return host(c);
    const int64_t n = l.rows, classes = l.classes;
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pt, Packed(c, *dev, *t));
    OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> pw, PackedOpt(c, *dev, *w));
    const bool none = l.reduction == kReductionNone;
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
    a.flag = l.reduction;  // ReadNllLossArgs: none, mean or sum
    a.ignore = l.ignore_index;
    a.out = MutPtr(loss);
    a.out2 = MutPtr(total);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "target"));
    return std::vector<Tensor>{loss, total};
  };
}

Kernel NllLossBackwardOnDevice(Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(NllLossArgs l, ReadNllLossArgs(c, /*backward=*/true));
    const Tensor *g = &l.grad_output, *x = &l.self, *t = &l.target, *total = &l.total_weight;
    const std::optional<Tensor>* w = &l.weight;
    if (!FloatType(x->dtype())) return host(c);
    const int64_t n = l.rows, classes = l.classes;
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
    a.flag = l.reduction;  // ReadNllLossArgs: none, mean or sum
    a.ignore = l.ignore_index;
    a.out = MutPtr(out);
    OVERLAP_RETURN_IF_ERROR(RunNn(c, *dev, a, "target"));
    return std::vector<Tensor>{out};
  };
}

Kernel MseLossOnDevice(bool backward, Kernel host, CudaDevice* dev) {
  return [=](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(MseLossArgs l, ReadMseLossArgs(c, backward));
    const Tensor *g = &l.grad_output, *x = &l.self, *t = &l.target;
    if (!FloatType(x->dtype())) return host(c);
    const bool none = l.reduction == kReductionNone;
    OVERLAP_ASSIGN_OR_RETURN(Tensor px, Packed(c, *dev, *x));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pt, Packed(c, *dev, *t));
    NnArgs a = NnFor(backward ? NnOp::kMseLossBackward : NnOp::kMseLoss, x->dtype());
    a.rows = x->numel();
    a.x = Ptr(px);
    a.b = Ptr(pt);
    a.flag = l.reduction;  // ReadMseLossArgs: none, mean or sum
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
    OVERLAP_ASSIGN_OR_RETURN(EmbeddingArgs e, ReadEmbeddingArgs(c));
    const Tensor *w = &e.weight, *idx = &e.indices;
    if (!FloatType(w->dtype())) return host(c);
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
    OVERLAP_ASSIGN_OR_RETURN(EmbeddingBackwardArgs e, ReadEmbeddingBackwardArgs(c));
    const Tensor *g = &e.grad_output, *idx = &e.indices;
    if (!FloatType(g->dtype())) return host(c);
    const int64_t d = e.dim;
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Packed(c, *dev, *g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pi, Packed(c, *dev, *idx));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(g->dtype(), {e.num_weights, d}));
    NnArgs a = NnFor(NnOp::kEmbeddingBackward, g->dtype());
    a.rows = idx->numel();
    a.cols = d;
    a.cols2 = e.num_weights;
    a.g = Ptr(pg);
    a.index = Ptr(pi);
    a.index32 = pi.dtype() == DType::kInt32;
    a.ignore = e.padding_idx;
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
    OVERLAP_ASSIGN_OR_RETURN(IndexAlongArgs s, ReadIndexSelectArgs(c));
    const Tensor *x = &s.self, *idx = &s.index;
    if (!FloatType(x->dtype()) || x->dim() == 0) return host(c);
    const int64_t d = s.dim;
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
    OVERLAP_ASSIGN_OR_RETURN(IndexAlongArgs s, ReadIndexAddArgs(c));
    const Tensor *self = &s.self, *idx = &s.index, *src = &s.source;
    if (!FloatType(self->dtype()) || self->dim() == 0 || (in_place && !self->IsContiguous())) {
      return host(c);
    }
    const int64_t d = s.dim;
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
    n.scale = s.alpha;
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

// The backend's registrations, each with its kind: the one statement of which kernel an op
// gets. `dev` is only captured (nullptr: the registry CudaKernelKind reads, never run).
KernelRegistry Registrations(CudaDevice* dev) {
  KernelRegistry r;
  const KernelRegistry& cpu = CpuKernels();
  KernelRegistry views;
  RegisterViewKernels(views);
  for (const std::string& target : cpu.Targets()) {
    if (views.Find(target) != nullptr) {
      r.Register(target, "view", *cpu.Find(target));
    } else {
      r.Register(target, "host", OnHost(*cpu.Find(target), dev));
    }
  }
  for (absl::string_view t : kAllocatingOps) r.Register(std::string(t), "allocation", *cpu.Find(t));
  for (absl::string_view t : kCopyingOps) r.Register(std::string(t), "copy", *cpu.Find(t));
  for (auto& [target, planner] : ElementwisePlanners()) {
    r.Register(target, "elementwise",
               OnDevice(std::move(planner), OnHost(*cpu.Find(target), dev), dev));
  }
  auto host = [&](absl::string_view t) { return OnHost(*cpu.Find(t), dev); };
  r.Register("aten.sum.dim_IntList", "reduction",
             SumOnDevice(false, host("aten.sum.dim_IntList"), dev));
  r.Register("aten.mean.dim", "reduction", SumOnDevice(true, host("aten.mean.dim"), dev));
  r.Register("aten.sum.default", "reduction", SumOnDevice(false, host("aten.sum.default"), dev));
  r.Register("aten.mean.default", "reduction", SumOnDevice(true, host("aten.mean.default"), dev));
  r.Register("aten._softmax.default", "reduction",
             SoftmaxOnDevice(false, false, host("aten._softmax.default"), dev));
  r.Register("aten._log_softmax.default", "reduction",
             SoftmaxOnDevice(false, true, host("aten._log_softmax.default"), dev));
  r.Register("aten._softmax_backward_data.default", "reduction",
             SoftmaxOnDevice(true, false, host("aten._softmax_backward_data.default"), dev));
  r.Register("aten._log_softmax_backward_data.default", "reduction",
             SoftmaxOnDevice(true, true, host("aten._log_softmax_backward_data.default"), dev));
  r.Register("aten.convolution.default", "cudnn",
             ConvolutionOnDevice(host("aten.convolution.default"), dev));
  r.Register("aten.convolution_backward.default", "cudnn",
             ConvolutionBackwardOnDevice(host("aten.convolution_backward.default"), dev));
  struct DeviceKernel {
    const char* target;
    const char* kind;
    Kernel (*make)(Kernel, CudaDevice*);
  };
  const DeviceKernel device_kernels[] = {
      {"aten.mm.default", "cublas", MmOnDevice},
      {"aten.addmm.default", "cublas", AddmmOnDevice},
      {"aten.native_layer_norm.default", "nn", LayerNormOnDevice},
      {"aten.native_layer_norm_backward.default", "nn", LayerNormBackwardOnDevice},
      {"aten.native_batch_norm.default", "cudnn", BatchNormOnDevice},
      {"aten.native_batch_norm_backward.default", "cudnn", BatchNormBackwardOnDevice},
      {"aten.max_pool2d_with_indices.default", "nn", MaxPoolOnDevice},
      {"aten.max_pool2d_with_indices_backward.default", "nn", MaxPoolBackwardOnDevice},
      {"aten.nll_loss_forward.default", "nn", NllLossOnDevice},
      {"aten.nll_loss_backward.default", "nn", NllLossBackwardOnDevice},
      {"aten.embedding.default", "nn", EmbeddingOnDevice},
      {"aten.embedding_dense_backward.default", "nn", EmbeddingBackwardOnDevice},
      {"aten.index_select.default", "nn", IndexSelectOnDevice},
      {"aten._scaled_dot_product_flash_attention.default", "cublas", AttentionOnDevice},
      {"aten._scaled_dot_product_flash_attention_backward.default", "cublas",
       AttentionBackwardOnDevice},
  };
  for (const DeviceKernel& k : device_kernels) {
    r.Register(k.target, k.kind, k.make(host(k.target), dev));
  }
  r.Register("aten.index_add.default", "nn",
             IndexAddOnDevice(false, host("aten.index_add.default"), dev));
  r.Register("aten.index_add_.default", "nn",
             IndexAddOnDevice(true, host("aten.index_add_.default"), dev));
  r.Register("aten.mse_loss.default", "nn",
             MseLossOnDevice(false, host("aten.mse_loss.default"), dev));
  r.Register("aten.mse_loss_backward.default", "nn",
             MseLossOnDevice(true, host("aten.mse_loss_backward.default"), dev));
  return r;
}

}  // namespace

std::string CudaKernelKind(absl::string_view target) {
  static const KernelRegistry* const kRegistered = new KernelRegistry(Registrations(nullptr));
  return kRegistered->KindOf(target);
}

KernelRegistry CudaKernels(CudaDevice& device) { return Registrations(&device); }

}  // namespace overlap
