// Network kernels: matrix products (OpenBLAS through blas.h), layer and batch norm,
// convolution (im2col + GEMM, the column buffer in scratch), max pooling, attention
// (exact softmax, the score matrix in scratch) and the losses, with their backwards.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "graph/status_macros.h"
#include "runtime/blas.h"
#include "runtime/conv_args.h"
#include "runtime/kernel.h"
#include "runtime/kernel_util.h"

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
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg(0, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(1, "mat2"));
  OVERLAP_RETURN_IF_ERROR(CheckMatmul(c, a, b));
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(a.dtype(), {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, a, b, T{0}, out));
    return std::vector<Tensor>{out};
  });
}

Results Addmm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor bias, c.TensorArg(0, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg(1, "mat1"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(2, "mat2"));
  OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg(3, "beta", 1.0));
  OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg(4, "alpha", 1.0));
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
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(0, "input"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> ns, c.IntListArg(1, "normalized_shape"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg(2, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> b0, c.OptionalTensorArg(3, "bias"));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg(4, "eps"));
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
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < m; ++i) {
      double s = 0, s2 = 0;
      for (int64_t j = 0; j < n; ++j) s += in[i * n + j];
      const double mu = n > 0 ? s / n : 0;
      for (int64_t j = 0; j < n; ++j) {
        const double d = in[i * n + j] - mu;
        s2 += d * d;
      }
      const double r = 1.0 / std::sqrt((n > 0 ? s2 / n : 0) + eps);
      mean.data<T>()[i] = static_cast<T>(mu);
      rstd.data<T>()[i] = static_cast<T>(r);
      for (int64_t j = 0; j < n; ++j) {
        double v = (in[i * n + j] - mu) * r;
        if (w) v *= w->data<T>()[j];
        if (b) v += b->data<T>()[j];
        o[i * n + j] = static_cast<T>(v);
      }
    }
    return std::vector<Tensor>{out, mean, rstd};
  });
}

Results NativeLayerNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg(0, "grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(1, "input"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> ns, c.IntListArg(2, "normalized_shape"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean0, c.TensorArg(3, "mean"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor rstd0, c.TensorArg(4, "rstd"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg(5, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg(7, "output_mask", {true, true, true}));
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
    std::vector<double> dw(n, 0.0), db(n, 0.0);
    const T *pg = g.data<T>(), *px = x.data<T>();
    for (int64_t i = 0; i < m; ++i) {
      const double mu = mean.data<T>()[i], r = rstd.data<T>()[i];
      double a = 0, bsum = 0;  // sums of dxhat and dxhat * xhat
      for (int64_t j = 0; j < n; ++j) {
        const double xh = (px[i * n + j] - mu) * r;
        const double dxh = pg[i * n + j] * (w ? static_cast<double>(w->data<T>()[j]) : 1.0);
        a += dxh;
        bsum += dxh * xh;
        dw[j] += pg[i * n + j] * xh;
        db[j] += pg[i * n + j];
      }
      if (!out[0].defined()) continue;
      for (int64_t j = 0; j < n; ++j) {
        const double xh = (px[i * n + j] - mu) * r;
        const double dxh = pg[i * n + j] * (w ? static_cast<double>(w->data<T>()[j]) : 1.0);
        out[0].data<T>()[i * n + j] = static_cast<T>(r * (dxh - a / n - xh * bsum / n));
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      if (out[1].defined()) out[1].data<T>()[j] = static_cast<T>(dw[j]);
      if (out[2].defined()) out[2].data<T>()[j] = static_cast<T>(db[j]);
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
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(0, "input"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg(1, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> b0, c.OptionalTensorArg(2, "bias"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rm, c.OptionalTensorArg(3, "running_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rv, c.OptionalTensorArg(4, "running_var"));
  OVERLAP_ASSIGN_OR_RETURN(bool training, c.BoolArg(5, "training"));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg(7, "eps"));
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
    const T* in = x.data<T>();
    const int64_t count = l.n * l.inner;
    for (int64_t ch = 0; ch < l.ch; ++ch) {
      double mu, inv;
      if (training) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < l.n; ++i) {
          for (int64_t j = 0; j < l.inner; ++j) s += in[(i * l.ch + ch) * l.inner + j];
        }
        mu = count > 0 ? s / count : 0;
        for (int64_t i = 0; i < l.n; ++i) {
          for (int64_t j = 0; j < l.inner; ++j) {
            const double d = in[(i * l.ch + ch) * l.inner + j] - mu;
            s2 += d * d;
          }
        }
        inv = 1.0 / std::sqrt((count > 0 ? s2 / count : 0) + eps);
        save_mean.data<T>()[ch] = static_cast<T>(mu);
        save_invstd.data<T>()[ch] = static_cast<T>(inv);
      } else {
        mu = mean_in->data<T>()[ch];
        inv = 1.0 / std::sqrt(var_in->data<T>()[ch] + eps);
      }
      const double scale = w ? static_cast<double>(w->data<T>()[ch]) : 1.0;
      const double shift = b ? static_cast<double>(b->data<T>()[ch]) : 0.0;
      for (int64_t i = 0; i < l.n; ++i) {
        for (int64_t j = 0; j < l.inner; ++j) {
          const int64_t at = (i * l.ch + ch) * l.inner + j;
          out.data<T>()[at] = static_cast<T>((in[at] - mu) * inv * scale + shift);
        }
      }
    }
    return std::vector<Tensor>{out, save_mean, save_invstd};
  });
}

Results NativeBatchNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg(0, "grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(1, "input"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w0, c.OptionalTensorArg(2, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rm, c.OptionalTensorArg(3, "running_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rv, c.OptionalTensorArg(4, "running_var"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> sm, c.OptionalTensorArg(5, "save_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> si, c.OptionalTensorArg(6, "save_invstd"));
  OVERLAP_ASSIGN_OR_RETURN(bool training, c.BoolArg(7, "train"));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg(8, "eps"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg(9, "output_mask", {true, true, true}));
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
    const T *pg = g.data<T>(), *px = x.data<T>();
    const int64_t count = l.n * l.inner;
    for (int64_t ch = 0; ch < l.ch; ++ch) {
      const double mu = mean.data<T>()[ch];
      const double inv = training ? static_cast<double>(var.data<T>()[ch])
                                  : 1.0 / std::sqrt(var.data<T>()[ch] + eps);
      const double scale = w ? static_cast<double>(w->data<T>()[ch]) : 1.0;
      double sg = 0, sgx = 0;  // sum g, sum g * xhat
      for (int64_t i = 0; i < l.n; ++i) {
        for (int64_t j = 0; j < l.inner; ++j) {
          const int64_t at = (i * l.ch + ch) * l.inner + j;
          sg += pg[at];
          sgx += pg[at] * (px[at] - mu) * inv;
        }
      }
      if (out[1].defined()) out[1].data<T>()[ch] = static_cast<T>(sgx);
      if (out[2].defined()) out[2].data<T>()[ch] = static_cast<T>(sg);
      if (!out[0].defined()) continue;
      for (int64_t i = 0; i < l.n; ++i) {
        for (int64_t j = 0; j < l.inner; ++j) {
          const int64_t at = (i * l.ch + ch) * l.inner + j;
          const double xh = (px[at] - mu) * inv;
          const double d = training ? inv * scale * (pg[at] - sg / count - xh * sgx / count)
                                    : pg[at] * scale * inv;
          out[0].data<T>()[at] = static_cast<T>(d);
        }
      }
    }
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
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(0, "input"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w0, c.TensorArg(1, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> bias, c.OptionalTensorArg(2, "bias"));
  OVERLAP_ASSIGN_OR_RETURN(ConvGeometry g, ConvArgs(c, x0, w0, 3));
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
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg(0, "grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(1, "input"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w0, c.TensorArg(2, "weight"));
  const Value* bias_sizes = c.Arg(3, "bias_sizes");
  OVERLAP_ASSIGN_OR_RETURN(ConvGeometry g, ConvArgs(c, x0, w0, 4));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg(10, "output_mask", {true, true, true}));
  if (mask.size() != 3) return c.Error("output_mask should have 3 entries");
  bool has_bias = false;
  if (bias_sizes != nullptr && bias_sizes->kind() == Value::Kind::kList) {
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> bs, c.IntListArg(3, "bias_sizes"));
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

// ---- max pooling ----

struct PoolGeometry {
  int64_t planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo;
};

int64_t PoolOutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;  // the caller reports it
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

absl::StatusOr<PoolGeometry> PoolArgs(KernelCall& c, const Tensor& x, int first) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> k, PairArg(c, first, "kernel_size", 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> s, PairArg(c, first + 1, "stride", 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> p, PairArg(c, first + 2, "padding", 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> d, PairArg(c, first + 3, "dilation", 1));
  OVERLAP_ASSIGN_OR_RETURN(bool ceil_mode, c.BoolArg(first + 4, "ceil_mode", false));
  if (s[0] == 0) s = k;  // PyTorch: an empty stride means the kernel size
  if (x.dim() < 3) return c.Error(absl::StrCat("pooling input ", x.DebugString(), " is not 2-D"));
  if (k[0] <= 0 || k[1] <= 0 || s[0] <= 0 || s[1] <= 0 || d[0] <= 0 || d[1] <= 0 || p[0] < 0 ||
      p[1] < 0 || 2 * p[0] > k[0] || 2 * p[1] > k[1]) {
    return c.Error("bad kernel size, stride, padding or dilation");
  }
  PoolGeometry g;
  g.h = x.shape()[x.dim() - 2], g.w = x.shape()[x.dim() - 1];
  g.planes = Prod(x.shape(), 0, x.dim() - 2);
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1];
  g.dh = d[0], g.dw = d[1];
  g.ho = PoolOutSize(g.h, g.kh, g.sh, g.ph, g.dh, ceil_mode);
  g.wo = PoolOutSize(g.w, g.kw, g.sw, g.pw, g.dw, ceil_mode);
  if (g.ho <= 0 || g.wo <= 0) return c.Error("the pooling window is larger than the input");
  return g;
}

Results MaxPool2d(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(0, "self"));
  OVERLAP_ASSIGN_OR_RETURN(PoolGeometry g, PoolArgs(c, x0, 1));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  std::vector<int64_t> shape = x.shape();
  shape[shape.size() - 2] = g.ho;
  shape[shape.size() - 1] = g.wo;
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor idx, c.NewOutput(DType::kInt64, shape));
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* in = x.data<T>() + p * g.h * g.w;
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t at = -1;
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t ih = oh * g.sh - g.ph + i * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t iw = ow * g.sw - g.pw + j * g.dw;
              if (iw < 0 || iw >= g.w) continue;
              const T v = in[ih * g.w + iw];
              if (at < 0 || v > best || std::isnan(v)) {
                best = v;
                at = ih * g.w + iw;
                if (std::isnan(v)) break;
              }
            }
          }
          out.data<T>()[(p * g.ho + oh) * g.wo + ow] = best;
          idx.data<int64_t>()[(p * g.ho + oh) * g.wo + ow] = at;
        }
      }
    }
    return std::vector<Tensor>{out, idx};
  });
}

Results MaxPool2dBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg(0, "grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg(1, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx0, c.TensorArg(7, "indices"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, idx0, "indices"));
  if (idx0.shape() != g0.shape() || g0.dim() < 2 || x.dim() < 2 || g0.dtype() != x.dtype()) {
    return c.Error("grad_output and indices should have one shape");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, idx0));
  const int64_t hw = x.shape()[x.dim() - 2] * x.shape()[x.dim() - 1];
  const int64_t ohw = g.shape()[g.dim() - 2] * g.shape()[g.dim() - 1];
  const int64_t planes = Prod(g.shape(), 0, g.dim() - 2);
  if (planes != Prod(x.shape(), 0, x.dim() - 2)) return c.Error("grad_output does not match self");
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t i = 0; i < ohw; ++i) {
        const int64_t at = IndexAt(idx, p * ohw + i);
        if (at < 0 || at >= hw) return c.Error(absl::StrCat("pooling index ", at, " out of range"));
        out.data<T>()[p * hw + at] += g.data<T>()[p * ohw + i];
      }
    }
    return std::vector<Tensor>{out};
  });
}

// ---- attention (exact; one score matrix per head in scratch) ----

struct AttnShape {
  int64_t b, h, hk, s, sk, d, dv;
  double scale;
  bool causal;
};

absl::StatusOr<AttnShape> AttnArgs(KernelCall& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                   int causal_pos, int dropout_pos) {
  OVERLAP_ASSIGN_OR_RETURN(double dropout, c.DoubleArg(dropout_pos, "dropout_p", 0.0));
  OVERLAP_ASSIGN_OR_RETURN(bool causal, c.BoolArg(causal_pos, "is_causal", false));
  if (dropout != 0) return c.Error("attention dropout is not supported (no RNG state)");
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.dtype() != k.dtype() ||
      q.dtype() != v.dtype()) {
    return c.Error("query, key and value should be [batch, heads, seq, dim] of one dtype");
  }
  AttnShape a{q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2],
              k.shape()[2], q.shape()[3], v.shape()[3], 0,
              causal};
  if (k.shape()[0] != a.b || v.shape()[0] != a.b || k.shape()[3] != a.d || v.shape()[1] != a.hk ||
      v.shape()[2] != a.sk || a.hk == 0 || a.h % a.hk != 0) {
    return c.Error(absl::StrCat("query ", q.DebugString(), ", key ", k.DebugString(), " and value ",
                                v.DebugString(), " do not fit"));
  }
  OVERLAP_ASSIGN_OR_RETURN(a.scale,
                           c.DoubleArg(-1, "scale", 1.0 / std::sqrt(std::max<int64_t>(a.d, 1))));
  return a;
}

// P = softmax(scale * Q K^T, causal mask) for one head into `p` [s, sk]; lse per row.
template <typename T>
void Scores(const AttnShape& a, const T* q, const T* k, T* p, double* lse) {
  Gemm(false, true, a.s, a.sk, a.d, static_cast<T>(a.scale), q, a.d, k, a.d, T{0}, p, a.sk);
  for (int64_t i = 0; i < a.s; ++i) {
    T* row = p + i * a.sk;
    const int64_t valid = a.causal ? std::min(i + 1, a.sk) : a.sk;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < valid; ++j) sum += std::exp(row[j] - mx);
    lse[i] = valid > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < a.sk; ++j) {
      row[j] = j < valid ? static_cast<T>(std::exp(row[j] - lse[i])) : T{0};
    }
  }
}

Results FlashAttention(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor q0, c.TensorArg(0, "query"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k0, c.TensorArg(1, "key"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v0, c.TensorArg(2, "value"));
  OVERLAP_ASSIGN_OR_RETURN(AttnShape a, AttnArgs(c, q0, k0, v0, 4, 3));
  OVERLAP_ASSIGN_OR_RETURN(Tensor q, Contiguous(c, q0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k, Contiguous(c, k0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v, Contiguous(c, v0));
  return DispatchFloat(c, q.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(q.dtype(), {a.b, a.h, a.s, a.dv}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor lse, c.NewOutput(q.dtype(), {a.b, a.h, a.s}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor p, c.NewScratch(q.dtype(), {a.s, a.sk}));
    std::vector<double> l(a.s);
    for (int64_t b = 0; b < a.b; ++b) {
      for (int64_t h = 0; h < a.h; ++h) {
        const int64_t kh = b * a.hk + h / (a.h / a.hk);
        Scores(a, q.data<T>() + (b * a.h + h) * a.s * a.d, k.data<T>() + kh * a.sk * a.d,
               p.data<T>(), l.data());
        Gemm(false, false, a.s, a.dv, a.sk, T{1}, p.data<T>(), a.sk, v.data<T>() + kh * a.sk * a.dv,
             a.dv, T{0}, out.data<T>() + (b * a.h + h) * a.s * a.dv, a.dv);
        for (int64_t i = 0; i < a.s; ++i)
          lse.data<T>()[(b * a.h + h) * a.s + i] = static_cast<T>(l[i]);
      }
    }
    return std::vector<Tensor>{out, lse};
  });
}

// dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO O)); dQ = scale dS K; dK = scale dS^T Q.
// P is recomputed from Q and K (exact, not from the saved logsumexp, which only checks).
Results FlashAttentionBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg(0, "grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor q0, c.TensorArg(1, "query"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor k0, c.TensorArg(2, "key"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v0, c.TensorArg(3, "value"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor o0, c.TensorArg(4, "out"));
  OVERLAP_ASSIGN_OR_RETURN(AttnShape a, AttnArgs(c, q0, k0, v0, 11, 10));
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
    std::vector<double> l(a.s);
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
        for (int64_t i = 0; i < a.s; ++i) {
          double di = 0;
          for (int64_t j = 0; j < a.dv; ++j)
            di += static_cast<double>(gh[i * a.dv + j]) * oh[i * a.dv + j];
          T* dprow = dp.data<T>() + i * a.sk;
          const T* prow = p.data<T>() + i * a.sk;
          for (int64_t j = 0; j < a.sk; ++j) dprow[j] = static_cast<T>(prow[j] * (dprow[j] - di));
        }
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

constexpr int64_t kReductionNone = 0, kReductionMean = 1, kReductionSum = 2;

Results NllLossForward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(0, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg(1, "target"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w, c.OptionalTensorArg(2, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, c.IntArg(3, "reduction", kReductionMean));
  OVERLAP_ASSIGN_OR_RETURN(int64_t ignore, c.IntArg(4, "ignore_index", -100));
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
    double sum = 0, weight_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t cls = IndexAt(t, i);
      double li = 0;
      if (cls != ignore) {
        if (cls < 0 || cls >= classes) {
          return c.Error(absl::StrCat("target ", cls, " out of range [0, ", classes, ")"));
        }
        const double wi = w ? GetElement(*w, cls) : 1.0;
        li = -wi * x.data<T>()[i * classes + cls];
        weight_sum += wi;
      }
      sum += li;
      if (none) loss.data<T>()[i] = static_cast<T>(li);
    }
    if (!none) {
      loss.data<T>()[0] = static_cast<T>(reduction == kReductionMean ? sum / weight_sum : sum);
    }
    total.data<T>()[0] = static_cast<T>(weight_sum);
    return std::vector<Tensor>{loss, total};
  });
}

Results NllLossBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg(0, "grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg(1, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg(2, "target"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w, c.OptionalTensorArg(3, "weight"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, c.IntArg(4, "reduction", kReductionMean));
  OVERLAP_ASSIGN_OR_RETURN(int64_t ignore, c.IntArg(5, "ignore_index", -100));
  OVERLAP_ASSIGN_OR_RETURN(Tensor total, c.TensorArg(6, "total_weight"));
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
    const double tw = GetElement(total, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t cls = IndexAt(t, i);
      if (cls == ignore) continue;
      if (cls < 0 || cls >= classes) {
        return c.Error(absl::StrCat("target ", cls, " out of range [0, ", classes, ")"));
      }
      const double wi = w ? GetElement(*w, cls) : 1.0;
      double gi = GetElement(g, none ? i : 0);
      if (reduction == kReductionMean) gi /= tw;
      out.data<T>()[i * classes + cls] = static_cast<T>(-wi * gi);
    }
    return std::vector<Tensor>{out};
  });
}

Results MseLoss(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(0, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg(1, "target"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, c.IntArg(2, "reduction", kReductionMean));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, x0, t0, "self and target"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, t0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    const bool none = reduction == kReductionNone;
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewOutput(x.dtype(), none ? x.shape() : std::vector<int64_t>{}));
    double sum = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double d = static_cast<double>(x.data<T>()[i]) - t.data<T>()[i];
      if (none) out.data<T>()[i] = static_cast<T>(d * d);
      sum += d * d;
    }
    if (!none) {
      out.data<T>()[0] = static_cast<T>(reduction == kReductionMean ? sum / x.numel() : sum);
    }
    return std::vector<Tensor>{out};
  });
}

Results MseLossBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg(0, "grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg(1, "self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t0, c.TensorArg(2, "target"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, c.IntArg(3, "reduction", kReductionMean));
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
    const double scale = reduction == kReductionMean ? 2.0 / x.numel() : 2.0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double gi = g.data<T>()[none ? i : 0];
      out.data<T>()[i] =
          static_cast<T>(gi * scale * (static_cast<double>(x.data<T>()[i]) - t.data<T>()[i]));
    }
    return std::vector<Tensor>{out};
  });
}

}  // namespace
}  // namespace kernels

void RegisterNnKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.mm.default", Mm);
  r.Register("aten.addmm.default", Addmm);
  r.Register("aten.native_layer_norm.default", NativeLayerNorm);
  r.Register("aten.native_layer_norm_backward.default", NativeLayerNormBackward);
  r.Register("aten.native_batch_norm.default", NativeBatchNorm);
  r.Register("aten.native_batch_norm_backward.default", NativeBatchNormBackward);
  r.Register("aten.convolution.default", Convolution);
  r.Register("aten.convolution_backward.default", ConvolutionBackward);
  r.Register("aten.max_pool2d_with_indices.default", MaxPool2d);
  r.Register("aten.max_pool2d_with_indices_backward.default", MaxPool2dBackward);
  r.Register("aten._scaled_dot_product_flash_attention.default", FlashAttention);
  r.Register("aten._scaled_dot_product_flash_attention_backward.default", FlashAttentionBackward);
  r.Register("aten.nll_loss_forward.default", NllLossForward);
  r.Register("aten.nll_loss_backward.default", NllLossBackward);
  r.Register("aten.mse_loss.default", MseLoss);
  r.Register("aten.mse_loss_backward.default", MseLossBackward);
}

}  // namespace overlap
