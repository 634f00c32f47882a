// Network kernels: matrix products (OpenBLAS through blas.h), layer and batch norm,
// convolution (im2col + GEMM, the column buffer in scratch), max pooling, attention
// (exact softmax, the score matrix in scratch) and the losses, with their backwards.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "graph/status_macros.h"
#include "runtime/core/blas.h"
#include "runtime/kernels/conv_args.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

// A 2-D tensor as a GEMM operand: row-major or transposed storage, or a contiguous copy.
template <typename T>
struct Mat {
  const T* p;
  int64_t ld;
  bool trans;
  Tensor keep;  // the scratch copy p points into, when one was made
};

template <typename T>
absl::StatusOr<Mat<T>> AsMat(KernelCall& c, const Tensor& t) {
  const int64_t r = t.shape()[0], k = t.shape()[1];
  const int64_t s0 = t.strides()[0], s1 = t.strides()[1];
  if ((s1 == 1 || k <= 1) && (s0 >= std::max<int64_t>(k, 1) || r <= 1)) {
    return Mat<T>{t.data<T>(), r <= 1 ? std::max<int64_t>(k, 1) : s0, false, Tensor()};
  }
  if ((s0 == 1 || r <= 1) && (s1 >= std::max<int64_t>(r, 1) || k <= 1)) {
    return Mat<T>{t.data<T>(), k <= 1 ? std::max<int64_t>(r, 1) : s1, true, Tensor()};
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Contiguous(c, t));
  return Mat<T>{copy.data<T>(), std::max<int64_t>(k, 1), false, copy};
}

// out (contiguous [m, n]) = beta * out + a @ b.
template <typename T>
absl::Status MatMulInto(KernelCall& c, const Tensor& a, const Tensor& b, T beta, Tensor& out) {
  // Copies made by AsMat live in scratch until this returns.
  OVERLAP_ASSIGN_OR_RETURN(Mat<T> ma, AsMat<T>(c, a));
  OVERLAP_ASSIGN_OR_RETURN(Mat<T> mb, AsMat<T>(c, b));
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  OVERLAP_RETURN_IF_ERROR(CheckGemmSize(c, {m, n, k, ma.ld, mb.ld}));
  if (m == 0 || n == 0) return absl::OkStatus();
  Gemm(ma.trans, mb.trans, m, n, k, T{1}, ma.p, ma.ld, mb.p, mb.ld, beta, out.data<T>(),
       std::max<int64_t>(n, 1));
  return absl::OkStatus();
}

absl::Status CheckMatmul(const KernelCall& c, const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0] || a.dtype() != b.dtype()) {
    return c.Error(absl::StrCat("cannot multiply ", a.DebugString(), " by ", b.DebugString()));
  }
  return absl::OkStatus();
}

Results Mm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg("mat2"));
  OVERLAP_RETURN_IF_ERROR(CheckMatmul(c, a, b));
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(a.dtype(), {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, a, b, T{0}, out));
    return std::vector<Tensor>{out};
  });
}

Results Addmm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor bias, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg("mat1"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg("mat2"));
  OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg("beta"));
  OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
  if (beta != 1 || alpha != 1) return c.Error("addmm with beta or alpha other than 1");
  OVERLAP_RETURN_IF_ERROR(CheckMatmul(c, a, b));
  const std::vector<int64_t> shape = {a.shape()[0], b.shape()[1]};
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> bs, BroadcastShape(c, bias.shape(), shape));
  if (bs != shape || bias.dtype() != a.dtype()) {
    return c.Error(absl::StrCat("bias ", bias.DebugString(), " does not broadcast to [",
                                absl::StrJoin(shape, ", "), "]"));
  }
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(a.dtype(), shape));
    T* o = out.data<T>();
    const T* pb = bias.data<T>();
    int64_t k = 0;
    ForEach2(shape, BroadcastStrides(bias, shape), BroadcastStrides(bias, shape),
             [&](int64_t ib, int64_t) { o[k++] = pb[ib]; });
    OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, a, b, T{1}, out));
    return std::vector<Tensor>{out};
  });
}

// bmm(self [b, n, m], mat2 [b, m, p]) -> [b, n, p]: one GEMM per batch.
Results Bmm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor a0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b0, c.TensorArg("mat2"));
  if (a0.dim() != 3 || b0.dim() != 3 || a0.shape()[0] != b0.shape()[0] ||
      a0.shape()[2] != b0.shape()[1] || a0.dtype() != b0.dtype()) {
    return c.Error(absl::StrCat("bmm of ", a0.DebugString(), " and ", b0.DebugString()));
  }
  const int64_t batch = a0.shape()[0], n = a0.shape()[1], m = a0.shape()[2], p = b0.shape()[2];
  OVERLAP_RETURN_IF_ERROR(CheckGemmSize(c, {n, m, p}));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, Contiguous(c, a0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, Contiguous(c, b0));
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(a.dtype(), {batch, n, p}));
    for (int64_t i = 0; i < batch && n > 0 && p > 0; ++i) {
      Gemm(false, false, n, p, m, T{1}, a.data<T>() + i * n * m, std::max<int64_t>(m, 1),
           b.data<T>() + i * m * p, std::max<int64_t>(p, 1), T{0}, out.data<T>() + i * n * p,
           std::max<int64_t>(p, 1));
    }
    return std::vector<Tensor>{out};
  });
}

// The fused backwards' results: a new tensor of shapes[i] for each gradient the mask asks
// for and that has a shape (a missing weight has no gradient), undefined otherwise.
absl::StatusOr<std::vector<Tensor>> MaskedOutputs(
    KernelCall& c, DType dtype, const std::vector<bool>& mask,
    const std::vector<std::optional<std::vector<int64_t>>>& shapes) {
  std::vector<Tensor> out(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!mask[i] || !shapes[i]) continue;
    OVERLAP_ASSIGN_OR_RETURN(out[i], c.NewOutput(dtype, *shapes[i]));
  }
  return out;
}

// ---- layer norm ----

Results NativeLayerNorm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> ns, c.IntListArg("normalized_shape"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> b0, c.OptionalTensorArg("bias"));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg("eps"));
  const int64_t axis = x0.dim() - static_cast<int64_t>(ns.size());
  if (axis < 0 || !std::equal(ns.begin(), ns.end(), x0.shape().begin() + axis)) {
    return c.Error(absl::StrCat("normalized_shape [", absl::StrJoin(ns, ", "),
                                "] is not the end of ", x0.DebugString()));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const int64_t m = Prod(x.shape(), 0, axis), n = Prod(x.shape(), axis, x.dim());
  std::optional<Tensor> w, b;
  for (auto [in, out] : {std::pair{&w0, &w}, std::pair{&b0, &b}}) {
    if (!in->has_value()) continue;
    if ((*in)->numel() != n || (*in)->dtype() != x.dtype()) {
      return c.Error(absl::StrCat("weight / bias ", (*in)->DebugString(), " does not match [",
                                  absl::StrJoin(ns, ", "), "]"));
    }
    OVERLAP_ASSIGN_OR_RETURN(*out, Contiguous(c, **in));
  }
  std::vector<int64_t> stat_shape(x.shape().begin(), x.shape().begin() + axis);
  stat_shape.resize(x.dim(), 1);
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor mean, c.NewOutput(x.dtype(), stat_shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor rstd, c.NewOutput(x.dtype(), stat_shape));
    NnArgs a;
    a.op = NnOp::kLayerNorm;
    a.is_double = std::is_same_v<T, double>;
    a.rows = m;
    a.cols = n;
    a.x = x.data<T>();
    a.w = w ? w->data<T>() : nullptr;
    a.b = b ? b->data<T>() : nullptr;
    a.eps = eps;
    a.out = out.data<T>();
    a.out2 = mean.data<T>();
    a.out3 = rstd.data<T>();
    NnRunOnHost(a);
    return std::vector<Tensor>{out, mean, rstd};
  });
}

Results NativeLayerNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> ns, c.IntListArg("normalized_shape"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean0, c.TensorArg("mean"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor rstd0, c.TensorArg("rstd"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg("output_mask", {true, true, true}));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, g0, x0, "grad_out and input"));
  const int64_t axis = x0.dim() - static_cast<int64_t>(ns.size());
  if (axis < 0 || mask.size() != 3) return c.Error("bad normalized_shape or output_mask");
  const int64_t m = Prod(x0.shape(), 0, axis), n = Prod(x0.shape(), axis, x0.dim());
  if (mean0.numel() != m || rstd0.numel() != m) return c.Error("mean / rstd do not match input");
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, mean0, x0.dtype(), "mean"));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, rstd0, x0.dtype(), "rstd"));
  if (w0) OVERLAP_RETURN_IF_ERROR(CheckDType(c, *w0, x0.dtype(), "weight"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean, Contiguous(c, mean0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor rstd, Contiguous(c, rstd0));
  // Weight and bias gradients have normalized_shape, asked for or not by the mask alone.
  const std::optional<std::vector<int64_t>> param_shape = ns;
  std::optional<Tensor> w;
  if (w0) {
    if (w0->numel() != n) return c.Error("weight does not match normalized_shape");
    OVERLAP_ASSIGN_OR_RETURN(w, Contiguous(c, *w0));
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(
        std::vector<Tensor> out,
        MaskedOutputs(c, x.dtype(), mask, {x.shape(), param_shape, param_shape}));
    NnArgs a;
    a.op = NnOp::kLayerNormBackward;
    a.is_double = std::is_same_v<T, double>;
    a.rows = m;
    a.cols = n;
    a.g = g.data<T>();
    a.x = x.data<T>();
    a.w = w ? w->data<T>() : nullptr;
    a.mean = mean.data<T>();
    a.var = rstd.data<T>();
    if (out[0].defined()) {
      a.out = out[0].data<T>();
      NnRunOnHost(a);
    }
    if (out[1].defined() || out[2].defined()) {
      a.op = NnOp::kLayerNormParamBackward;
      a.out2 = out[1].defined() ? out[1].data<T>() : nullptr;
      a.out3 = out[2].defined() ? out[2].data<T>() : nullptr;
      NnRunOnHost(a);
    }
    return out;
  });
}

// ---- batch norm (per channel over N and the spatial dimensions) ----

struct ChannelLayout {
  int64_t n, ch, inner;
};

absl::StatusOr<ChannelLayout> Channels(const KernelCall& c, const Tensor& x) {
  if (x.dim() < 2)
    return c.Error(absl::StrCat("batch norm input ", x.DebugString(), " has no channels"));
  return ChannelLayout{x.shape()[0], x.shape()[1], Prod(x.shape(), 2, x.dim())};
}

Results NativeBatchNorm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> b0, c.OptionalTensorArg("bias"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rm, c.OptionalTensorArg("running_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rv, c.OptionalTensorArg("running_var"));
  OVERLAP_ASSIGN_OR_RETURN(bool training, c.BoolArg("training"));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg("eps"));
  OVERLAP_ASSIGN_OR_RETURN(ChannelLayout l, Channels(c, x0));
  if (!training && (!rm || !rv)) return c.Error("evaluation mode needs running statistics");
  if (training && (rm || rv)) {
    return c.Error("training with running statistics is not supported (they would be updated)");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  std::optional<Tensor> w, b, mean_in, var_in;
  for (auto [in, out] : {std::pair{&w0, &w}, std::pair{&b0, &b}, std::pair{&rm, &mean_in},
                         std::pair{&rv, &var_in}}) {
    if (!in->has_value()) continue;
    if ((*in)->numel() != l.ch || (*in)->dtype() != x.dtype()) {
      return c.Error(absl::StrCat((*in)->DebugString(), " does not match ", l.ch, " channels"));
    }
    OVERLAP_ASSIGN_OR_RETURN(*out, Contiguous(c, **in));
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor save_mean, c.NewOutput(x.dtype(), {training ? l.ch : 0}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor save_invstd, c.NewOutput(x.dtype(), {training ? l.ch : 0}));
    NnArgs a;
    a.op = NnOp::kBatchNorm;
    a.is_double = std::is_same_v<T, double>;
    a.batch = l.n;
    a.cols = l.ch;
    a.inner = l.inner;
    a.x = x.data<T>();
    a.w = w ? w->data<T>() : nullptr;
    a.b = b ? b->data<T>() : nullptr;
    a.mean = mean_in ? mean_in->data<T>() : nullptr;
    a.var = var_in ? var_in->data<T>() : nullptr;
    a.flag = training ? 1 : 0;
    a.eps = eps;
    a.out = out.data<T>();
    a.out2 = save_mean.data<T>();
    a.out3 = save_invstd.data<T>();
    NnRunOnHost(a);
    return std::vector<Tensor>{out, save_mean, save_invstd};
  });
}

Results NativeBatchNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rm, c.OptionalTensorArg("running_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rv, c.OptionalTensorArg("running_var"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> sm, c.OptionalTensorArg("save_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> si, c.OptionalTensorArg("save_invstd"));
  OVERLAP_ASSIGN_OR_RETURN(bool training, c.BoolArg("train"));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg("eps"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg("output_mask", {true, true, true}));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, g0, x0, "grad_out and input"));
  OVERLAP_ASSIGN_OR_RETURN(ChannelLayout l, Channels(c, x0));
  if (mask.size() != 3) return c.Error("output_mask should have 3 entries");
  const std::optional<Tensor>& mean_src = training ? sm : rm;
  const std::optional<Tensor>& var_src = training ? si : rv;
  if (!mean_src || !var_src || mean_src->numel() != l.ch || var_src->numel() != l.ch) {
    return c.Error(training ? "training needs save_mean and save_invstd per channel"
                            : "evaluation needs running_mean and running_var per channel");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, *mean_src, x0.dtype(), "saved mean"));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, *var_src, x0.dtype(), "saved invstd / variance"));
  if (w0) OVERLAP_RETURN_IF_ERROR(CheckDType(c, *w0, x0.dtype(), "weight"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean, Contiguous(c, *mean_src));
  OVERLAP_ASSIGN_OR_RETURN(Tensor var, Contiguous(c, *var_src));
  const std::optional<std::vector<int64_t>> param_shape = std::vector<int64_t>{l.ch};
  std::optional<Tensor> w;
  if (w0) {
    if (w0->numel() != l.ch) return c.Error("weight does not match the channels");
    OVERLAP_ASSIGN_OR_RETURN(w, Contiguous(c, *w0));
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(
        std::vector<Tensor> out,
        MaskedOutputs(c, x.dtype(), mask, {x.shape(), param_shape, param_shape}));
    NnArgs a;
    a.op = NnOp::kBatchNormBackward;
    a.is_double = std::is_same_v<T, double>;
    a.batch = l.n;
    a.cols = l.ch;
    a.inner = l.inner;
    a.g = g.data<T>();
    a.x = x.data<T>();
    a.w = w ? w->data<T>() : nullptr;
    a.mean = mean.data<T>();
    a.var = var.data<T>();
    a.flag = training ? 1 : 0;
    a.eps = eps;
    for (int i = 0; i < 3; ++i) {
      void* p = out[i].defined() ? out[i].data<T>() : nullptr;
      (i == 0 ? a.out : i == 1 ? a.out2 : a.out3) = p;
    }
    NnRunOnHost(a);
    return out;
  });
}

// ---- 2-D convolution: im2col + GEMM ----

// col[(ci * kh + i) * kw + j][oh * wo + ow] = x[ci][oh*sh - ph + i*dh][ow*sw - pw + j*dw].
template <typename T>
void Im2Col(const ConvGeometry& g, const T* x, T* col) {
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((ci * g.kh + i) * g.kw + j) * g.ho * g.wo;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + j * g.dw;
            row[oh * g.wo + ow] =
                (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? x[(ci * g.h + ih) * g.w + iw] : T{0};
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: accumulates col into x.
template <typename T>
void Col2Im(const ConvGeometry& g, const T* col, T* x) {
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((ci * g.kh + i) * g.kw + j) * g.ho * g.wo;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw >= 0 && iw < g.w) x[(ci * g.h + ih) * g.w + iw] += row[oh * g.wo + ow];
          }
        }
      }
    }
  }
}

Results Convolution(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w0, c.TensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> bias, c.OptionalTensorArg("bias"));
  OVERLAP_ASSIGN_OR_RETURN(ConvGeometry g, ConvArgs(c, x0, w0));
  if (x0.dtype() != w0.dtype()) return c.Error("input and weight differ in dtype");
  if (bias && bias->numel() != g.o) return c.Error("bias does not match the output channels");
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor wt, Contiguous(c, w0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), {g.n, g.o, g.ho, g.wo}));
    const int64_t k = g.cg * g.kh * g.kw, hw = g.ho * g.wo;
    OVERLAP_ASSIGN_OR_RETURN(Tensor col, c.NewScratch(x.dtype(), {k, hw}));
    for (int64_t b = 0; b < g.n; ++b) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        Im2Col(g, x.data<T>() + (b * g.c + gr * g.cg) * g.h * g.w, col.data<T>());
        Gemm(false, false, g.og, hw, k, T{1}, wt.data<T>() + gr * g.og * k, k, col.data<T>(), hw,
             T{0}, out.data<T>() + (b * g.o + gr * g.og) * hw, hw);
      }
      if (bias) {
        for (int64_t oc = 0; oc < g.o; ++oc) {
          const T bv = static_cast<T>(GetElement(*bias, oc));
          T* row = out.data<T>() + (b * g.o + oc) * hw;
          for (int64_t i = 0; i < hw; ++i) row[i] += bv;
        }
      }
    }
    return std::vector<Tensor>{out};
  });
}

Results ConvolutionBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w0, c.TensorArg("weight"));
  const Value* bias_sizes = c.Arg("bias_sizes");
  OVERLAP_ASSIGN_OR_RETURN(ConvGeometry g, ConvArgs(c, x0, w0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg("output_mask", {true, true, true}));
  if (mask.size() != 3) return c.Error("output_mask should have 3 entries");
  bool has_bias = false;
  if (bias_sizes != nullptr && bias_sizes->kind() == Value::Kind::kList) {
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> bs, c.IntListArg("bias_sizes"));
    has_bias = !bs.empty() && bs[0] != 0;
  }
  const std::vector<int64_t> out_shape = {g.n, g.o, g.ho, g.wo};
  if (g0.shape() != out_shape || g0.dtype() != x0.dtype() || w0.dtype() != x0.dtype()) {
    return c.Error(absl::StrCat("grad_output ", g0.DebugString(), " should be [",
                                absl::StrJoin(out_shape, ", "), "]"));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor gy, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor wt, Contiguous(c, w0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    std::optional<std::vector<int64_t>> bias_shape;
    if (has_bias) bias_shape = std::vector<int64_t>{g.o};
    OVERLAP_ASSIGN_OR_RETURN(
        std::vector<Tensor> out,
        MaskedOutputs(c, x.dtype(), mask, {x.shape(), wt.shape(), bias_shape}));
    const int64_t k = g.cg * g.kh * g.kw, hw = g.ho * g.wo;
    OVERLAP_ASSIGN_OR_RETURN(Tensor col, c.NewScratch(x.dtype(), {k, hw}));
    for (int64_t b = 0; b < g.n; ++b) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const T* gyp = gy.data<T>() + (b * g.o + gr * g.og) * hw;
        if (out[1].defined()) {  // dW_g += gy_g [og, hw] @ col^T [hw, k]
          Im2Col(g, x.data<T>() + (b * g.c + gr * g.cg) * g.h * g.w, col.data<T>());
          Gemm(false, true, g.og, k, hw, T{1}, gyp, hw, col.data<T>(), hw, T{1},
               out[1].data<T>() + gr * g.og * k, k);
        }
        if (out[0].defined()) {  // dcol = W_g^T [k, og] @ gy_g [og, hw]
          Gemm(true, false, k, hw, g.og, T{1}, wt.data<T>() + gr * g.og * k, k, gyp, hw, T{0},
               col.data<T>(), hw);
          Col2Im(g, col.data<T>(), out[0].data<T>() + (b * g.c + gr * g.cg) * g.h * g.w);
        }
      }
      if (out[2].defined()) {
        for (int64_t oc = 0; oc < g.o; ++oc) {
          const T* row = gy.data<T>() + (b * g.o + oc) * hw;
          double s = 0;
          for (int64_t i = 0; i < hw; ++i) s += row[i];
          out[2].data<T>()[oc] += static_cast<T>(s);
        }
      }
    }
    return out;
  });
}

// ---- pooling ----

// A pooling's input (contiguous), geometry and output shape, read from `self` and the
// pooling arguments: what max and average pooling share.
struct Pooling {
  Tensor x;
  NnPool geometry;
  std::vector<int64_t> out_shape;
};
absl::StatusOr<Pooling> ReadPooling(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  Pooling p;
  OVERLAP_ASSIGN_OR_RETURN(p.geometry, PoolArgs(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(p.x, Contiguous(c, x0));
  p.out_shape = p.x.shape();
  p.out_shape[p.out_shape.size() - 2] = p.geometry.ho;
  p.out_shape[p.out_shape.size() - 1] = p.geometry.wo;
  return p;
}

Results MaxPool2d(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(const Pooling pooling, ReadPooling(c));
  const Tensor& x = pooling.x;
  const NnPool& g = pooling.geometry;
  const std::vector<int64_t>& shape = pooling.out_shape;
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor idx, c.NewOutput(DType::kInt64, shape));
    NnArgs a;
    a.op = NnOp::kMaxPool;
    a.is_double = std::is_same_v<T, double>;
    a.pool = g;
    a.x = x.data<T>();
    a.out = out.data<T>();
    a.out2 = idx.data<int64_t>();
    NnRunOnHost(a);
    return std::vector<Tensor>{out, idx};
  });
}

Results MaxPool2dBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx0, c.TensorArg("indices"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, idx0, "indices"));
  if (idx0.shape() != g0.shape() || g0.dim() < 2 || x.dim() < 2 || g0.dtype() != x.dtype()) {
    return c.Error("grad_output and indices should have one shape");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, idx0));
  const int64_t planes = Prod(g.shape(), 0, g.dim() - 2);
  if (planes != Prod(x.shape(), 0, x.dim() - 2)) return c.Error("grad_output does not match self");
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    NnArgs a;
    a.op = NnOp::kMaxPoolBackward;
    a.is_double = std::is_same_v<T, double>;
    a.pool.planes = planes;
    a.pool.h = x.shape()[x.dim() - 2];
    a.pool.w = x.shape()[x.dim() - 1];
    a.pool.ho = g.shape()[g.dim() - 2];
    a.pool.wo = g.shape()[g.dim() - 1];
    a.g = g.data<T>();
    a.index = Bytes(idx);
    a.index32 = idx.dtype() == DType::kInt32;
    a.out = out.data<T>();
    OVERLAP_RETURN_IF_ERROR(RunNn(c, a, "pooling index"));
    return std::vector<Tensor>{out};
  });
}

// ---- average pooling ----

// count_include_pad and divisor_override as kAvgPool reads them (flag, ignore).
absl::Status AvgPoolOptions(KernelCall& c, NnArgs& a) {
  OVERLAP_ASSIGN_OR_RETURN(bool include_pad, c.BoolArg("count_include_pad"));
  a.flag = include_pad ? 1 : 0;
  a.ignore = 0;
  if (const Value* d = c.Arg("divisor_override"); d != nullptr && !d->is_none()) {
    OVERLAP_ASSIGN_OR_RETURN(a.ignore, c.IntArg("divisor_override"));
    if (a.ignore <= 0) return c.Error("divisor_override must be positive");
  }
  return absl::OkStatus();
}

// kAvgPool reads `in` as x, kAvgPoolBackward as g; either writes a new `out_shape` tensor.
Results RunAvgPool(KernelCall& c, NnOp op, const NnPool& pool, const Tensor& in,
                   const std::vector<int64_t>& out_shape) {
  return DispatchFloat(c, in.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(in.dtype(), out_shape));
    NnArgs a;
    a.op = op;
    a.is_double = std::is_same_v<T, double>;
    a.pool = pool;
    OVERLAP_RETURN_IF_ERROR(AvgPoolOptions(c, a));
    (op == NnOp::kAvgPool ? a.x : a.g) = in.data<T>();
    a.out = out.data<T>();
    NnRunOnHost(a);
    return std::vector<Tensor>{out};
  });
}

Results AvgPool2d(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(const Pooling pooling, ReadPooling(c));
  return RunAvgPool(c, NnOp::kAvgPool, pooling.geometry, pooling.x, pooling.out_shape);
}

Results AvgPool2dBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(NnPool p, PoolArgs(c, x));
  if (g0.dtype() != x.dtype() || g0.dim() != x.dim() || g0.shape()[g0.dim() - 2] != p.ho ||
      g0.shape()[g0.dim() - 1] != p.wo) {
    return c.Error(absl::StrCat("grad_output ", g0.DebugString(), " does not match the pooling of ",
                                x.DebugString()));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  return RunAvgPool(c, NnOp::kAvgPoolBackward, p, g, x.shape());
}

// ---- attention (exact; one score matrix per head in scratch) ----

// P = softmax(scale * Q K^T, causal mask) for one head into `p` [s, sk]; lse per row.
template <typename T>
void Scores(const AttnShape& a, const T* q, const T* k, T* p, T* lse) {
  Gemm(false, true, a.s, a.sk, a.d, static_cast<T>(a.scale), q, a.d, k, a.d, T{0}, p, a.sk);
  NnArgs n;
  n.op = NnOp::kAttentionSoftmax;
  n.is_double = std::is_same_v<T, double>;
  n.rows = a.s;
  n.cols = a.sk;
  n.inner = a.s;
  n.flag = a.causal ? 1 : 0;
  n.out = p;
  n.out2 = lse;
  NnRunOnHost(n);
}

Results FlashAttention(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor q0, c.TensorArg("query"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k0, c.TensorArg("key"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v0, c.TensorArg("value"));
  OVERLAP_ASSIGN_OR_RETURN(AttnShape a, AttnArgs(c, q0, k0, v0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor q, Contiguous(c, q0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k, Contiguous(c, k0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v, Contiguous(c, v0));
  return DispatchFloat(c, q.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(q.dtype(), {a.b, a.h, a.s, a.dv}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor lse, c.NewOutput(q.dtype(), {a.b, a.h, a.s}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor p, c.NewScratch(q.dtype(), {a.s, a.sk}));
    for (int64_t b = 0; b < a.b; ++b) {
      for (int64_t h = 0; h < a.h; ++h) {
        const int64_t kh = b * a.hk + h / (a.h / a.hk);
        Scores(a, q.data<T>() + (b * a.h + h) * a.s * a.d, k.data<T>() + kh * a.sk * a.d,
               p.data<T>(), lse.data<T>() + (b * a.h + h) * a.s);
        Gemm(false, false, a.s, a.dv, a.sk, T{1}, p.data<T>(), a.sk, v.data<T>() + kh * a.sk * a.dv,
             a.dv, T{0}, out.data<T>() + (b * a.h + h) * a.s * a.dv, a.dv);
      }
    }
    return std::vector<Tensor>{out, lse};
  });
}

// dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO O)); dQ = scale dS K; dK = scale dS^T Q.
// P is recomputed from Q and K (exact, not from the saved logsumexp, which only checks).
Results FlashAttentionBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor q0, c.TensorArg("query"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k0, c.TensorArg("key"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v0, c.TensorArg("value"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor o0, c.TensorArg("out"));
  OVERLAP_ASSIGN_OR_RETURN(AttnShape a, AttnArgs(c, q0, k0, v0));
  const std::vector<int64_t> out_shape = {a.b, a.h, a.s, a.dv};
  if (g0.shape() != out_shape || o0.shape() != out_shape || g0.dtype() != q0.dtype() ||
      o0.dtype() != q0.dtype()) {
    return c.Error("grad_out and out should have the attention output's shape");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor gy, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor q, Contiguous(c, q0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k, Contiguous(c, k0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v, Contiguous(c, v0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor o, Contiguous(c, o0));
  return DispatchFloat(c, q.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor dq, c.NewOutput(q.dtype(), q.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor dk, c.NewOutput(q.dtype(), k.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor dv, c.NewOutput(q.dtype(), v.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor p, c.NewScratch(q.dtype(), {a.s, a.sk}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor dp, c.NewScratch(q.dtype(), {a.s, a.sk}));
    std::vector<T> l(a.s);
    const T scale = static_cast<T>(a.scale);
    for (int64_t b = 0; b < a.b; ++b) {
      for (int64_t h = 0; h < a.h; ++h) {
        const int64_t kh = b * a.hk + h / (a.h / a.hk);
        const T* qh = q.data<T>() + (b * a.h + h) * a.s * a.d;
        const T* kp = k.data<T>() + kh * a.sk * a.d;
        const T* vp = v.data<T>() + kh * a.sk * a.dv;
        const T* gh = gy.data<T>() + (b * a.h + h) * a.s * a.dv;
        const T* oh = o.data<T>() + (b * a.h + h) * a.s * a.dv;
        Scores(a, qh, kp, p.data<T>(), l.data());
        // Grouped heads share K and V: their gradients accumulate (beta 1).
        Gemm(true, false, a.sk, a.dv, a.s, T{1}, p.data<T>(), a.sk, gh, a.dv, T{1},
             dv.data<T>() + kh * a.sk * a.dv, a.dv);
        Gemm(false, true, a.s, a.sk, a.dv, T{1}, gh, a.dv, vp, a.dv, T{0}, dp.data<T>(), a.sk);
        NnArgs n;
        n.op = NnOp::kAttentionSoftmaxBackward;
        n.is_double = std::is_same_v<T, double>;
        n.rows = a.s;
        n.cols = a.sk;
        n.inner = a.dv;
        n.x = p.data<T>();
        n.out = dp.data<T>();
        n.g = gh;
        n.b = oh;
        NnRunOnHost(n);
        Gemm(false, false, a.s, a.d, a.sk, scale, dp.data<T>(), a.sk, kp, a.d, T{0},
             dq.data<T>() + (b * a.h + h) * a.s * a.d, a.d);
        Gemm(true, false, a.sk, a.d, a.s, scale, dp.data<T>(), a.sk, qh, a.d, T{1},
             dk.data<T>() + kh * a.sk * a.d, a.d);
      }
    }
    return std::vector<Tensor>{dq, dk, dv};
  });
}

// ---- losses ----

// ATen's reduction enum (none, mean, sum); any other value is refused as ATen refuses it,
// instead of being read as "sum".
absl::StatusOr<int64_t> ReductionArg(const KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, c.IntArg("reduction"));
  if (!IsAtenReduction(reduction)) {
    return c.Error(absl::StrCat("argument 'reduction' is ", reduction,
                                "; ATen's reductions are 0 (none), 1 (mean) and 2 (sum)"));
  }
  return reduction;
}

Results NllLossForward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg("target"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, ReductionArg(c));
  OVERLAP_ASSIGN_OR_RETURN(int64_t ignore, c.IntArg("ignore_index"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, t0, "target"));
  if (x0.dim() < 1 || x0.dim() > 2) return c.Error("self should be [N, C] or [C]");
  const int64_t n = x0.dim() == 2 ? x0.shape()[0] : 1, classes = x0.shape().back();
  if (t0.numel() != n) return c.Error("target should have one class per row");
  if (w && w->numel() != classes) return c.Error("weight should have one entry per class");
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, t0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    const bool none = reduction == kReductionNone;
    std::vector<int64_t> loss_shape;
    if (none && x.dim() == 2) loss_shape = {n};
    OVERLAP_ASSIGN_OR_RETURN(Tensor loss, c.NewOutput(x.dtype(), loss_shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor total, c.NewOutput(x.dtype(), {}));
    std::optional<Tensor> pw;
    if (w) {
      OVERLAP_RETURN_IF_ERROR(CheckDType(c, *w, x.dtype(), "weight"));
      OVERLAP_ASSIGN_OR_RETURN(pw, Contiguous(c, *w));
    }
    NnArgs a;
    a.op = NnOp::kNllLoss;
    a.is_double = std::is_same_v<T, double>;
    a.rows = n;
    a.cols = classes;
    a.x = x.data<T>();
    a.index = Bytes(t);
    a.index32 = t.dtype() == DType::kInt32;
    a.w = pw ? pw->data<T>() : nullptr;
    a.flag = reduction;  // ReductionArg: none, mean or sum
    a.ignore = ignore;
    a.out = loss.data<T>();
    a.out2 = total.data<T>();
    OVERLAP_RETURN_IF_ERROR(RunNn(c, a, "target"));
    return std::vector<Tensor>{loss, total};
  });
}

Results NllLossBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg("target"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, ReductionArg(c));
  OVERLAP_ASSIGN_OR_RETURN(int64_t ignore, c.IntArg("ignore_index"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor total, c.TensorArg("total_weight"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, t0, "target"));
  if (x.dim() < 1 || x.dim() > 2) return c.Error("self should be [N, C] or [C]");
  const int64_t n = x.dim() == 2 ? x.shape()[0] : 1, classes = x.shape().back();
  const bool none = reduction == kReductionNone;
  if (t0.numel() != n || (none ? g.numel() != n : g.numel() != 1)) {
    return c.Error("target or grad_output does not match self");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, t0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    if (total.numel() != 1) return c.Error("total_weight should have one element");
    OVERLAP_RETURN_IF_ERROR(CheckDType(c, total, x.dtype(), "total_weight"));
    OVERLAP_RETURN_IF_ERROR(CheckDType(c, g, x.dtype(), "grad_output"));
    std::optional<Tensor> pw;
    if (w) {
      OVERLAP_RETURN_IF_ERROR(CheckDType(c, *w, x.dtype(), "weight"));
      OVERLAP_ASSIGN_OR_RETURN(pw, Contiguous(c, *w));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor pg, Contiguous(c, g));
    OVERLAP_ASSIGN_OR_RETURN(Tensor pt, Contiguous(c, total));
    NnArgs a;
    a.op = NnOp::kNllLossBackward;
    a.is_double = std::is_same_v<T, double>;
    a.rows = n;
    a.cols = classes;
    a.g = pg.data<T>();
    a.index = Bytes(t);
    a.index32 = t.dtype() == DType::kInt32;
    a.w = pw ? pw->data<T>() : nullptr;
    a.mean = pt.data<T>();
    a.flag = reduction;  // ReductionArg: none, mean or sum
    a.ignore = ignore;
    a.out = out.data<T>();
    OVERLAP_RETURN_IF_ERROR(RunNn(c, a, "target"));
    return std::vector<Tensor>{out};
  });
}

Results MseLoss(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg("target"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, ReductionArg(c));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, x0, t0, "self and target"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, t0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    const bool none = reduction == kReductionNone;
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewOutput(x.dtype(), none ? x.shape() : std::vector<int64_t>{}));
    NnArgs a;
    a.op = NnOp::kMseLoss;
    a.is_double = std::is_same_v<T, double>;
    a.rows = x.numel();
    a.x = x.data<T>();
    a.b = t.data<T>();
    a.flag = reduction;  // ReductionArg: none, mean or sum
    a.out = out.data<T>();
    NnRunOnHost(a);
    return std::vector<Tensor>{out};
  });
}

Results MseLossBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg("target"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, ReductionArg(c));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, x0, t0, "self and target"));
  const bool none = reduction == kReductionNone;
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, g0, x0.dtype(), "grad_output"));
  if (none ? g0.shape() != x0.shape() : g0.numel() != 1) {
    return c.Error("grad_output does not match the reduction");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, t0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    NnArgs a;
    a.op = NnOp::kMseLossBackward;
    a.is_double = std::is_same_v<T, double>;
    a.rows = x.numel();
    a.g = g.data<T>();
    a.x = x.data<T>();
    a.b = t.data<T>();
    a.flag = reduction;  // ReductionArg: none, mean or sum
    a.out = out.data<T>();
    NnRunOnHost(a);
    return std::vector<Tensor>{out};
  });
}

}  // namespace
}  // namespace kernels

void RegisterNnKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.mm.default", Mm);
  r.Register("aten.bmm.default", Bmm);
  r.Register("aten.addmm.default", Addmm);
  r.Register("aten.native_layer_norm.default", NativeLayerNorm);
  r.Register("aten.native_layer_norm_backward.default", NativeLayerNormBackward);
  r.Register("aten.native_batch_norm.default", NativeBatchNorm);
  r.Register("aten.native_batch_norm_backward.default", NativeBatchNormBackward);
  r.Register("aten.convolution.default", Convolution);
  r.Register("aten.convolution_backward.default", ConvolutionBackward);
  r.Register("aten.max_pool2d_with_indices.default", MaxPool2d);
  r.Register("aten.max_pool2d_with_indices_backward.default", MaxPool2dBackward);
  r.Register("aten.avg_pool2d.default", AvgPool2d);
  r.Register("aten.avg_pool2d_backward.default", AvgPool2dBackward);
  r.Register("aten._scaled_dot_product_flash_attention.default", FlashAttention);
  r.Register("aten._scaled_dot_product_flash_attention_backward.default", FlashAttentionBackward);
  r.Register("aten.nll_loss_forward.default", NllLossForward);
  r.Register("aten.nll_loss_backward.default", NllLossBackward);
  r.Register("aten.mse_loss.default", MseLoss);
  r.Register("aten.mse_loss_backward.default", MseLossBackward);
}

}  // namespace overlap
