// Network kernels: matrix products (OpenBLAS through blas.h), layer and batch norm,
// convolution (im2col + GEMM, the column buffer in scratch), max pooling, attention
// (exact softmax, the score matrix in scratch) and the losses, with their backwards.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include "graph/status_macros.h"
#include "runtime/core/blas.h"
#include "runtime/core/dnnl_conv.h"
#include "runtime/core/parallel.h"
#include "runtime/kernels/conv_args.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/op_args.h"
#include "runtime/kernels/vol2col.h"

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

// out (contiguous [m, n]) = beta * out + alpha * a @ b; with beta 0, out is not read.
template <typename T>
absl::Status MatMulInto(KernelCall& c, const Tensor& a, const Tensor& b, T alpha, T beta,
                        Tensor& out) {
  // Copies made by AsMat live in scratch until this returns.
  OVERLAP_ASSIGN_OR_RETURN(Mat<T> ma, AsMat<T>(c, a));
  OVERLAP_ASSIGN_OR_RETURN(Mat<T> mb, AsMat<T>(c, b));
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  OVERLAP_RETURN_IF_ERROR(CheckGemmSize(c, {m, n, k, ma.ld, mb.ld}));
  if (m == 0 || n == 0) return absl::OkStatus();
  Gemm(ma.trans, mb.trans, m, n, k, alpha, ma.p, ma.ld, mb.p, mb.ld, beta, out.data<T>(),
       std::max<int64_t>(n, 1));
  return absl::OkStatus();
}

Results Mm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(MmArgs args, ReadMmArgs(c));
  const Tensor &a = args.self, &b = args.mat2;
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    // Gemm writes every element (beta 0; k == 0 is a scaling by 0): no zero-fill.
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewUninitializedOutput(a.dtype(), {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, a, b, T{1}, T{0}, out));
    return std::vector<Tensor>{out};
  });
}

// transformers' grouped_mm_fallback operands: input [S, K] and weight [E, K, N] of one
// floating dtype, and offs [E] read as the experts' row ranges [offs[i-1], offs[i]),
// checked to rise within [0, S].
struct GroupedMmArgs {
  Tensor input, weight;
  std::vector<int64_t> ends;
};

absl::StatusOr<GroupedMmArgs> ReadGroupedMmArgs(KernelCall& c) {
  GroupedMmArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.input, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.TensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor offs, c.TensorArg("offs"));
  if (a.input.dim() != 2 || a.weight.dim() != 3 || a.input.shape()[1] != a.weight.shape()[1] ||
      a.input.dtype() != a.weight.dtype()) {
    return c.Error("input and weight are not [S, K] and [E, K, N] of one dtype");
  }
  const int64_t experts = a.weight.shape()[0], rows = a.input.shape()[0];
  if (offs.dim() != 1 || offs.shape()[0] != experts || IsFloatingPoint(offs.dtype())) {
    return c.Error(absl::StrCat("offs is not [", experts, "] integers (one per expert)"));
  }
  int64_t start = 0;
  for (int64_t i = 0; i < experts; ++i) {
    const auto end = static_cast<int64_t>(GetElement(offs, i));
    if (end < start || end > rows) {
      return c.Error(absl::StrCat("offs[", i, "] = ", end, " is outside [", start, ", ", rows,
                                  "] (offsets rise to at most the ", rows, " rows)"));
    }
    a.ends.push_back(end);
    start = end;
  }
  return a;
}

// rows [offs[i-1], offs[i]) of input times weight[i]; rows past the last offset zero.
Results GroupedMm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(GroupedMmArgs a, ReadGroupedMmArgs(c));
  return DispatchFloat(c, a.input.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(
        Tensor out, c.NewOutput(a.input.dtype(), {a.input.shape()[0], a.weight.shape()[2]}));
    int64_t start = 0;
    for (size_t i = 0; i < a.ends.size(); ++i) {
      const int64_t end = a.ends[i];
      if (end == start) continue;
      OVERLAP_ASSIGN_OR_RETURN(Tensor x, a.input.Slice(0, start, end));
      OVERLAP_ASSIGN_OR_RETURN(Tensor w, a.weight.Select(0, static_cast<int64_t>(i)));
      OVERLAP_ASSIGN_OR_RETURN(Tensor o, out.Slice(0, start, end));
      OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, x, w, T{1}, T{0}, o));
      start = end;
    }
    return std::vector<Tensor>{out};
  });
}

// (grad_input, grad_weight): per expert, grad_output's rows times weight[i] transposed, and
// input's rows transposed times them; zero where no expert's rows reach.
Results GroupedMmBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(GroupedMmArgs a, ReadGroupedMmArgs(c));
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  const int64_t rows = a.input.shape()[0], n = a.weight.shape()[2];
  if (g.dim() != 2 || g.shape()[0] != rows || g.shape()[1] != n || g.dtype() != a.input.dtype()) {
    return c.Error(absl::StrCat("grad_output is not [", rows, ", ", n, "] of input's dtype"));
  }
  return DispatchFloat(c, a.input.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor gi, c.NewOutput(a.input.dtype(), a.input.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor gw, c.NewOutput(a.weight.dtype(), a.weight.shape()));
    int64_t start = 0;
    for (size_t i = 0; i < a.ends.size(); ++i) {
      const int64_t end = a.ends[i];
      if (end == start) continue;
      const auto e = static_cast<int64_t>(i);
      OVERLAP_ASSIGN_OR_RETURN(Tensor x, a.input.Slice(0, start, end));
      OVERLAP_ASSIGN_OR_RETURN(Tensor gr, g.Slice(0, start, end));
      OVERLAP_ASSIGN_OR_RETURN(Tensor w, a.weight.Select(0, e));
      OVERLAP_ASSIGN_OR_RETURN(Tensor wt, w.Transpose(0, 1));
      OVERLAP_ASSIGN_OR_RETURN(Tensor xt, x.Transpose(0, 1));
      OVERLAP_ASSIGN_OR_RETURN(Tensor gi_rows, gi.Slice(0, start, end));
      OVERLAP_ASSIGN_OR_RETURN(Tensor gw_e, gw.Select(0, e));
      OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, gr, wt, T{1}, T{0}, gi_rows));
      OVERLAP_RETURN_IF_ERROR(MatMulInto<T>(c, xt, gr, T{1}, T{0}, gw_e));
      start = end;
    }
    return std::vector<Tensor>{gi, gw};
  });
}

// ATen's addmm: beta * self + alpha * mat1 @ mat2; with beta 0, self is not read (its NaN
// and inf do not propagate).
Results Addmm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(AddmmArgs args, ReadAddmmArgs(c));
  const Tensor &bias = args.self, &a = args.mat1, &b = args.mat2;
  const std::vector<int64_t> shape = {a.shape()[0], b.shape()[1]};
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a.dtype(), shape));
    if (args.beta != 0) {
      T* o = out.data<T>();
      const T* pb = bias.data<T>();
      // The bias broadcast into out a row at a time (a Linear's bias: one row, copied).
      ForEachRow2(shape, BroadcastStrides(bias, shape), BroadcastStrides(bias, shape),
                  [&](int64_t ib, int64_t, int64_t n, int64_t step, int64_t) {
                    if (step == 1) {
                      std::copy(pb + ib, pb + ib + n, o);
                    } else {
                      for (int64_t i = 0; i < n; ++i) o[i] = pb[ib + i * step];
                    }
                    o += n;
                  });
    }
    OVERLAP_RETURN_IF_ERROR(
        MatMulInto<T>(c, a, b, static_cast<T>(args.alpha), static_cast<T>(args.beta), out));
    return std::vector<Tensor>{out};
  });
}

// A 3-D tensor as a batch of GEMM operands: each batch's matrix as AsMat takes it (row-major
// or transposed storage: attention's keys transposed are a view) at `batch_stride` elements
// apart, or a contiguous copy.
template <typename T>
struct BatchMat {
  Mat<T> mat;
  int64_t batch_stride;
};

template <typename T>
absl::StatusOr<BatchMat<T>> AsBatchMat(KernelCall& c, const Tensor& t) {
  if (t.shape()[0] > 0) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor first, t.Select(0, 0));
    OVERLAP_ASSIGN_OR_RETURN(Mat<T> m, AsMat<T>(c, first));
    if (!m.keep.defined()) return BatchMat<T>{m, t.strides()[0]};
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Contiguous(c, t));
  const int64_t r = t.shape()[1], k = t.shape()[2];
  return BatchMat<T>{Mat<T>{copy.data<T>(), std::max<int64_t>(k, 1), false, copy}, r * k};
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
  return DispatchFloat(c, a0.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(BatchMat<T> a, AsBatchMat<T>(c, a0));
    OVERLAP_ASSIGN_OR_RETURN(BatchMat<T> b, AsBatchMat<T>(c, b0));
    OVERLAP_RETURN_IF_ERROR(CheckGemmSize(c, {n, m, p, a.mat.ld, b.mat.ld}));
    // Every element written by a GEMM (beta 0): no zero-fill.
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a0.dtype(), {batch, n, p}));
    for (int64_t i = 0; i < batch && n > 0 && p > 0; ++i) {
      Gemm(a.mat.trans, b.mat.trans, n, p, m, T{1}, a.mat.p + i * a.batch_stride, a.mat.ld,
           b.mat.p + i * b.batch_stride, b.mat.ld, T{0}, out.data<T>() + i * n * p,
           std::max<int64_t>(p, 1));
    }
    return std::vector<Tensor>{out};
  });
}

// baddbmm(self, batch1 [b, n, m], batch2 [b, m, p], beta, alpha) = beta self + alpha
// batch1 @ batch2, self broadcast to [b, n, p].
Results Baddbmm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor s, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a0, c.TensorArg("batch1"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b0, c.TensorArg("batch2"));
  OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg("beta"));
  OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
  if (a0.dim() != 3 || b0.dim() != 3 || a0.shape()[0] != b0.shape()[0] ||
      a0.shape()[2] != b0.shape()[1] || a0.dtype() != b0.dtype() || s.dtype() != a0.dtype()) {
    return c.Error(absl::StrCat("baddbmm of ", s.DebugString(), ", ", a0.DebugString(), " and ",
                                b0.DebugString()));
  }
  const int64_t batch = a0.shape()[0], n = a0.shape()[1], m = a0.shape()[2], p = b0.shape()[2];
  const std::vector<int64_t> shape = {batch, n, p};
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> bs, BroadcastShape(c, s.shape(), shape));
  if (bs != shape) return c.Error(absl::StrCat("self ", s.DebugString(), " does not broadcast"));
  OVERLAP_RETURN_IF_ERROR(CheckGemmSize(c, {n, m, p}));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, Contiguous(c, a0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, Contiguous(c, b0));
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a.dtype(), shape));
    T* o = out.data<T>();
    const T* ps = s.data<T>();
    int64_t k = 0;
    ForEach2(
        shape, BroadcastStrides(s, shape), BroadcastStrides(s, shape),
        [&](int64_t is, int64_t) { o[k++] = beta == 0 ? T{0} : static_cast<T>(beta * ps[is]); });
    for (int64_t i = 0; i < batch && n > 0 && p > 0; ++i) {
      Gemm(false, false, n, p, m, static_cast<T>(alpha), a.data<T>() + i * n * m,
           std::max<int64_t>(m, 1), b.data<T>() + i * m * p, std::max<int64_t>(p, 1), T{1},
           o + i * n * p, std::max<int64_t>(p, 1));
    }
    return std::vector<Tensor>{out};
  });
}

// Whether a kernel's new outputs start zeroed or as they come (the kernel writes every
// element).
enum class Fill { kZeroed, kUninitialized };

// The fused backwards' results: a new tensor of shapes[i] for each gradient the mask asks
// for and that has a shape (a missing weight has no gradient), undefined otherwise.
absl::StatusOr<std::vector<Tensor>> MaskedOutputs(
    KernelCall& c, DType dtype, const std::vector<bool>& mask,
    const std::vector<std::optional<std::vector<int64_t>>>& shapes, Fill fill = Fill::kZeroed) {
  std::vector<Tensor> out(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!mask[i] || !shapes[i]) continue;
    OVERLAP_ASSIGN_OR_RETURN(out[i], fill == Fill::kZeroed
                                         ? c.NewOutput(dtype, *shapes[i])
                                         : c.NewUninitializedOutput(dtype, *shapes[i]));
  }
  return out;
}

// ---- layer norm ----

Results NativeLayerNorm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(LayerNormArgs args, ReadLayerNormArgs(c));
  const double eps = args.eps;
  const int64_t m = args.rows, n = args.cols;
  const int64_t axis = args.input.dim() - static_cast<int64_t>(args.normalized_shape.size());
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.input));
  std::optional<Tensor> w, b;
  for (auto [in, out] : {std::pair{&args.weight, &w}, std::pair{&args.bias, &b}}) {
    if (in->has_value()) {
      OVERLAP_ASSIGN_OR_RETURN(*out, Contiguous(c, **in));
    }
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
    NnRun(a);
    return std::vector<Tensor>{out, mean, rstd};
  });
}

// nn_ops.h's LayerNormParamBackwardUnit for every column at once: the rows walked in order
// and each row's columns by a loop the compiler vectorizes, a block of columns per thread.
// Each column adds the same terms in the same order as the unit (one column per unit walks
// the rows at a stride, which the cache punishes), so the results are the unit's.
template <typename T>
void LayerNormParamBackwardRows(const T* g, const T* x, const T* mean, const T* rstd, int64_t rows,
                                int64_t n, T* dw, T* db) {
  ParallelFor(
      n,
      [&](int64_t begin, int64_t end) {
        std::vector<double> sw(end - begin, 0.0), sb(end - begin, 0.0);
        for (int64_t i = 0; i < rows; ++i) {
          const double mu = mean[i], r = rstd[i];
          const T* xr = x + i * n + begin;
          const T* gr = g + i * n + begin;
          for (int64_t j = 0; j < end - begin; ++j) {
            const double xh = (xr[j] - mu) * r;
            sw[j] += gr[j] * xh;
            sb[j] += gr[j];
          }
        }
        for (int64_t j = 0; j < end - begin; ++j) {
          if (dw != nullptr) dw[begin + j] = static_cast<T>(sw[j]);
          if (db != nullptr) db[begin + j] = static_cast<T>(sb[j]);
        }
      },
      64);
}

Results NativeLayerNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(LayerNormBackwardArgs args, ReadLayerNormBackwardArgs(c));
  const int64_t m = args.rows, n = args.cols;
  const std::vector<bool>& mask = args.output_mask;
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, args.grad_out));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.input));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean, Contiguous(c, args.mean));
  OVERLAP_ASSIGN_OR_RETURN(Tensor rstd, Contiguous(c, args.rstd));
  // Weight and bias gradients have normalized_shape, asked for or not by the mask alone.
  const std::optional<std::vector<int64_t>> param_shape = args.normalized_shape;
  std::optional<Tensor> w;
  if (args.weight) {
    OVERLAP_ASSIGN_OR_RETURN(w, Contiguous(c, *args.weight));
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
      NnRun(a);
    }
    if (out[1].defined() || out[2].defined()) {
      T* dw = out[1].defined() ? out[1].data<T>() : nullptr;
      T* db = out[2].defined() ? out[2].data<T>() : nullptr;
      LayerNormParamBackwardRows<T>(g.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), m, n,
                                    dw, db);
    }
    return out;
  });
}

// ---- batch norm (per channel over N and the spatial dimensions) ----

struct ChannelLayout {
  int64_t n, ch, inner;
};

Results NativeBatchNorm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(BatchNormForwardArgs args, ReadBatchNormArgs(c));
  const bool training = args.training;
  const double eps = args.eps;
  const ChannelLayout l{args.batch, args.channels, args.inner};
  // Training normalizes by the batch's statistics and leaves the running ones as they are:
  // a graph states their update as nodes of its own (docs/interop.md, "Buffers").
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.input));
  std::optional<Tensor> w, b, mean_in, var_in;
  for (auto [in, out] :
       {std::pair{&args.weight, &w}, std::pair{&args.bias, &b},
        std::pair{&args.running_mean, &mean_in}, std::pair{&args.running_var, &var_in}}) {
    if (in->has_value()) {
      OVERLAP_ASSIGN_OR_RETURN(*out, Contiguous(c, **in));
    }
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    // Every element written by its channel's unit: not zeroed.
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
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
    NnRun(a);
    return std::vector<Tensor>{out, save_mean, save_invstd};
  });
}

Results NativeBatchNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(BatchNormBackwardArgs args, ReadBatchNormBackwardArgs(c));
  const bool training = args.training;
  const double eps = args.eps;
  const std::vector<bool>& mask = args.output_mask;
  const ChannelLayout l{args.batch, args.channels, args.inner};
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, args.grad_out));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.input));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean, Contiguous(c, args.mean));
  OVERLAP_ASSIGN_OR_RETURN(Tensor var, Contiguous(c, args.var));
  const std::optional<std::vector<int64_t>> param_shape = std::vector<int64_t>{l.ch};
  std::optional<Tensor> w;
  if (args.weight) {
    OVERLAP_ASSIGN_OR_RETURN(w, Contiguous(c, *args.weight));
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(
        std::vector<Tensor> out,
        MaskedOutputs(c, x.dtype(), mask, {x.shape(), param_shape, param_shape},
                      Fill::kUninitialized));
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
    NnRun(a);
    return out;
  });
}

// ---- convolution: im2col (vol2col in 3-D) + GEMM ----

// The output columns [lo, hi) whose input column ow * sw - pw + j * dw is inside a row of
// width w (the rest read padding).
inline std::pair<int64_t, int64_t> InsideColumns(const ConvGeometry& g, int64_t j) {
  const int64_t off = j * g.dw - g.pw;  // input column = ow * sw + off
  const int64_t lo = off >= 0 ? 0 : std::min(g.wo, (-off + g.sw - 1) / g.sw);
  const int64_t hi = g.w - 1 - off >= 0 ? std::min(g.wo, (g.w - 1 - off) / g.sw + 1) : 0;
  return {lo, std::max(lo, hi)};
}

// col[(ci * kh + i) * kw + j][oh * wo + ow] = x[ci][oh*sh - ph + i*dh][ow*sw - pw + j*dw],
// col's rows `ld` apart (ho * wo for one image alone). Each output row is split once into
// its padding and its inside columns: no test per element.
template <typename T>
void Im2Col(const ConvGeometry& g, const T* x, T* col, int64_t ld) {
  if (g.spatial == 3) return Vol2Col(g, x, col, ld);
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((ci * g.kh + i) * g.kw + j) * ld;
        const auto [lo, hi] = InsideColumns(g, j);
        const int64_t off = j * g.dw - g.pw;
        if (g.sh == 1 && g.sw == 1 && g.wo == g.w && hi > lo) {
          // Source and destination advance alike from row to row: the inside rows
          // [oh_lo, oh_hi) are one copy from their first inside element to their last, and
          // then the columns outside [lo, hi) of each row, which that copy filled from the
          // neighbouring rows, are zeroed.
          const int64_t top = i * g.dh - g.ph;  // input row = oh + top
          const int64_t oh_lo = std::min(g.ho, std::max<int64_t>(0, -top));
          const int64_t oh_hi = std::max(oh_lo, std::min(g.ho, g.h - top));
          std::fill_n(row, oh_lo * g.wo, T{0});
          if (oh_hi > oh_lo) {
            std::copy_n(x + (ci * g.h + oh_lo + top) * g.w + lo + off,
                        (oh_hi - oh_lo - 1) * g.wo + (hi - lo), row + oh_lo * g.wo + lo);
            for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
              std::fill_n(row + oh * g.wo, lo, T{0});
              std::fill_n(row + oh * g.wo + hi, g.wo - hi, T{0});
            }
          }
          std::fill_n(row + oh_hi * g.wo, (g.ho - oh_hi) * g.wo, T{0});
          continue;
        }
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          T* out = row + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill_n(out, g.wo, T{0});
            continue;
          }
          const T* in = x + (ci * g.h + ih) * g.w;
          std::fill_n(out, lo, T{0});
          if (g.sw == 1) {
            std::copy_n(in + lo + off, hi - lo, out + lo);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow * g.sw + off];
          }
          std::fill_n(out + hi, g.wo - hi, T{0});
        }
      }
    }
  }
}

// The adjoint of Im2Col: accumulates col (rows `ld` apart) into x.
template <typename T>
void Col2Im(const ConvGeometry& g, const T* col, T* x, int64_t ld) {
  if (g.spatial == 3) return Col2Vol(g, col, x, ld);
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((ci * g.kh + i) * g.kw + j) * ld;
        const auto [lo, hi] = InsideColumns(g, j);
        const int64_t off = j * g.dw - g.pw;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          T* in = x + (ci * g.h + ih) * g.w;
          const T* from = row + oh * g.wo;
          for (int64_t ow = lo; ow < hi; ++ow) in[ow * g.sw + off] += from[ow];
        }
      }
    }
  }
}

// The three loops of a convolution described by `g` (conv_args.h), per image and group:
// out [n, o, ho, wo] = conv(in [n, c, h, w], w); the data gradient dx [n, c, h, w] (added
// into, zeroed by the caller) of gy [n, o, ho, wo]; the weight gradient dw [o, cg, kh, kw]
// (added into) of input `in` and gy. A transposed convolution runs them with the roles of
// its input and output exchanged.
template <typename T>
void ConvForwardLoop(const ConvGeometry& g, const T* in, const T* w, T* out, T* col) {
  const int64_t k = g.cg * KernelPositions(g), hw = OutputPositions(g), image = InputPositions(g);
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      Im2Col(g, in + (b * g.c + gr * g.cg) * image, col, hw);
      Gemm(false, false, g.og, hw, k, T{1}, w + gr * g.og * k, k, col, hw, T{0},
           out + (b * g.o + gr * g.og) * hw, hw);
    }
  }
}

template <typename T>
void ConvDataLoop(const ConvGeometry& g, const T* gy, const T* w, T* dx, T* col) {
  const int64_t k = g.cg * KernelPositions(g), hw = OutputPositions(g), image = InputPositions(g);
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t gr = 0; gr < g.groups; ++gr) {  // dcol = W_g^T [k, og] @ gy_g [og, hw]
      Gemm(true, false, k, hw, g.og, T{1}, w + gr * g.og * k, k, gy + (b * g.o + gr * g.og) * hw,
           hw, T{0}, col, hw);
      Col2Im(g, col, dx + (b * g.c + gr * g.cg) * image, hw);
    }
  }
}

template <typename T>
void ConvWeightLoop(const ConvGeometry& g, const T* in, const T* gy, T* dw, T* col) {
  const int64_t k = g.cg * KernelPositions(g), hw = OutputPositions(g), image = InputPositions(g);
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t gr = 0; gr < g.groups; ++gr) {  // dW_g += gy_g [og, hw] @ col^T [hw, k]
      Im2Col(g, in + (b * g.c + gr * g.cg) * image, col, hw);
      Gemm(false, true, g.og, k, hw, T{1}, gy + (b * g.o + gr * g.og) * hw, hw, col, hw, T{1},
           dw + gr * g.og * k, k);
    }
  }
}

// Small-image convolutions as three GEMMs over the whole batch. Where the output is a few
// positions per image (ResNet's last stages: 2 x 2 and 4 x 4 at 64 x 64 inputs), oneDNN's
// direct kernels run at a third of GEMM speed and each call reorders the weight (9.4 MB at
// 512 x 512 x 3 x 3) into a blocked layout and, for the weight gradient, back: here the
// weight is read and written in place and only the small activations are rearranged.
// Measured, docs/runtime.md "Convolutions". One group, not transposed, float32; the columns
// of every image side by side: col [c kh kw, n ho wo].
// Up to 4 x 4 output positions per image. Measured on resnet18 (batch 8, 64 x 64; forward
// and backward, 1 / 2 threads) with the bound at 0 / 4 / 16 / 64: 63-65 / 48-49 / 49-50 /
// 54-55 ms at one thread, 38-40 / 29-32 / 30-31 / 35-46 ms at two; mobilenet_v2's 1 x 1
// layers 31-42 / 29 / 29-31 / 30-32 ms.
constexpr int64_t kBatchGemmMaxPositions = 16;

// The most floats either workspace buffer may hold (64 MiB): larger batches of small images
// take oneDNN's path, which needs no columns.
constexpr int64_t kBatchGemmMaxWorkspace = int64_t{1} << 24;

bool UseBatchGemm(const ConvGeometry& g) {
  const int64_t n_hw = g.n * g.ho * g.wo;
  return g.spatial != 3 && g.groups == 1 && !g.transposed &&
         g.ho * g.wo <= kBatchGemmMaxPositions &&
         g.c * g.kh * g.kw * n_hw <= kBatchGemmMaxWorkspace && g.o * n_hw <= kBatchGemmMaxWorkspace;
}

// Per-thread workspace for the batch-GEMM path, kept between calls and grown as needed (as
// the oneDNN path's reorder buffers are): buffer 0 for the columns, 1 for the output or
// output gradient in [o, n ho wo] order. nullptr when it cannot grow (the caller then takes
// oneDNN's path).
float* Workspace(int which, size_t elements) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[which];
  if (b.size() < elements) {
    try {
      b.resize(elements);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  return b.data();
}

// fn(b) for every image b, the images split over the pool when they move `per_image`
// elements each and enough in all (each image's columns and outputs are its own).
template <typename F>
void ForEachImage(const ConvGeometry& g, int64_t per_image, F&& fn) {
  ParallelFor(
      g.n,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) fn(b);
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, per_image)));
}

// y [n, o, ho, wo] = conv(x, w) (+ bias [o] when not null). False (nothing written) when the
// workspace cannot grow.
bool BatchGemmForward(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                      float* y) {
  const int64_t hw = g.ho * g.wo, N = g.n * hw, K = g.c * g.kh * g.kw;
  float* col = Workspace(0, static_cast<size_t>(K * N));
  float* tmp = Workspace(1, static_cast<size_t>(g.o * N));
  if (col == nullptr || tmp == nullptr) return false;
  ForEachImage(g, K * hw, [&](int64_t b) { Im2Col(g, x + b * g.c * g.h * g.w, col + b * hw, N); });
  Gemm(false, false, g.o, N, K, 1.0f, w, K, col, N, 0.0f, tmp, N);
  ForEachImage(g, g.o * hw, [&](int64_t b) {
    for (int64_t oc = 0; oc < g.o; ++oc) {
      const float add = bias != nullptr ? bias[oc] : 0.0f;
      const float* from = tmp + oc * N + b * hw;
      float* to = y + (b * g.o + oc) * hw;
      for (int64_t p = 0; p < hw; ++p) to[p] = from[p] + add;
    }
  });
  return true;
}

// dx [n, c, h, w] and dw [o, c, kh, kw] (either null: not computed) of gy [n, o, ho, wo].
// False (nothing written) when the workspace cannot grow.
bool BatchGemmBackward(const ConvGeometry& g, const float* x, const float* gy, const float* w,
                       float* dx, float* dw) {
  const int64_t hw = g.ho * g.wo, N = g.n * hw, K = g.c * g.kh * g.kw;
  float* col = Workspace(0, static_cast<size_t>(K * N));
  float* gyp = Workspace(1, static_cast<size_t>(g.o * N));
  if (col == nullptr || gyp == nullptr) return false;
  ForEachImage(g, g.o * hw, [&](int64_t b) {
    for (int64_t oc = 0; oc < g.o; ++oc) {
      std::copy_n(gy + (b * g.o + oc) * hw, hw, gyp + oc * N + b * hw);
    }
  });
  if (dw != nullptr) {  // dw [o, K] = gy [o, N] @ col^T [N, K]
    ForEachImage(g, K * hw,
                 [&](int64_t b) { Im2Col(g, x + b * g.c * g.h * g.w, col + b * hw, N); });
    Gemm(false, true, g.o, K, N, 1.0f, gyp, N, col, N, 0.0f, dw, K);
  }
  if (dx != nullptr) {  // dcol [K, N] = w^T [K, o] @ gy [o, N], then back onto the images
    Gemm(true, false, K, N, g.o, 1.0f, w, K, gyp, N, 0.0f, col, N);
    ForEachImage(g, K * hw, [&](int64_t b) {
      float* image = dx + b * g.c * g.h * g.w;
      std::fill_n(image, g.c * g.h * g.w, 0.0f);
      Col2Im(g, col + b * hw, image, N);
    });
  }
  return true;
}

// A depthwise convolution's weight gradient (one input channel per group: out channel oc
// reads input channel oc / og), directly: dw[oc][i][j] = sum over b, oh, ow of
// gy[b][oc][oh][ow] x[b][oc / og][oh sh - ph + i dh][ow sw - pw + j dw]. For the shapes where
// oneDNN has no direct kernel (5 x 5 kernels, 2 x 2 images: its GEMM fallback took 1.3-2.5 ms
// a call on EfficientNet-B0's late layers, 20 of its 29 ms of convolutions at two threads).
// Output channels split over the pool; each row's products summed in float, rows in double.
template <typename T>
void DepthwiseWeightGrad(const ConvGeometry& g, const T* x, const T* gy, T* dw) {
  const int64_t hw = g.ho * g.wo, kk = g.kh * g.kw;
  const int64_t work = std::max<int64_t>(1, g.n * hw * kk);
  ParallelFor(
      g.o,
      [&](int64_t begin, int64_t end) {
        for (int64_t oc = begin; oc < end; ++oc) {
          const int64_t ci = oc / g.og;
          for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t j = 0; j < g.kw; ++j) {
              // The output columns whose input column is inside the image.
              const int64_t off = j * g.dw - g.pw;  // iw = ow * sw + off
              int64_t ow_lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
              int64_t ow_hi = (g.w - 1 - off) >= 0 ? (g.w - 1 - off) / g.sw + 1 : 0;
              ow_hi = std::min(ow_hi, g.wo);
              double sum = 0;
              for (int64_t b = 0; b < g.n; ++b) {
                const T* xp = x + (b * g.c + ci) * g.h * g.w;
                const T* gp = gy + (b * g.o + oc) * hw;
                for (int64_t oh = 0; oh < g.ho; ++oh) {
                  const int64_t ih = oh * g.sh - g.ph + i * g.dh;
                  if (ih < 0 || ih >= g.h) continue;
                  const T* xr = xp + ih * g.w;
                  const T* gr = gp + oh * g.wo;
                  T row = 0;
                  for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row += gr[ow] * xr[ow * g.sw + off];
                  sum += row;
                }
              }
              dw[oc * kk + i * g.kw + j] = static_cast<T>(sum);
            }
          }
        }
      },
      std::max<int64_t>(1, kParallelGrain / work));
}

// The described convolution for oneDNN (runtime/core/dnnl_conv.h), which runs float32
// convolutions over the whole batch; nullopt where it cannot express the shape, and for
// other dtypes (float64 runs the loops above, the finite-difference checks' reference).
template <typename T>
std::optional<DnnlConvShape> DnnlShape(const ConvGeometry& g) {
  if (!std::is_same_v<T, float> || g.spatial == 3) return std::nullopt;
  const DnnlConvShape s{g.n,  g.c,  g.h,  g.w,  g.o,  g.kh, g.kw, g.groups,
                        g.ho, g.wo, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
  if (!DnnlConvSupports(s)) return std::nullopt;
  return s;
}

// Whether oneDNN ran the call: true when it did, false when it has no implementation for
// the shape (the loops run instead), the kernel's error naming the node when it failed.
absl::StatusOr<bool> DnnlRan(KernelCall& c, const absl::Status& s) {
  if (s.ok()) return true;
  if (absl::IsUnimplemented(s)) return false;
  return c.Error(s.message());
}

Results Convolution(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w0, c.TensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> bias, c.OptionalTensorArg("bias"));
  OVERLAP_ASSIGN_OR_RETURN(ConvGeometry g, ConvArgs(c, x0, w0));
  if (x0.dtype() != w0.dtype()) return c.Error("input and weight differ in dtype");
  const std::vector<int64_t> shape = ConvResultShape(g);
  if (bias && bias->numel() != shape[1]) {
    return c.Error("bias does not match the output channels");
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor wt, Contiguous(c, w0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    // A transposed convolution's output is accumulated into: zeroed (NewOutput).
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, g.transposed ? c.NewOutput(x.dtype(), shape)
                                                      : c.NewUninitializedOutput(x.dtype(), shape));
    const std::optional<DnnlConvShape> dnnl = DnnlShape<T>(g);
    bool fused_bias =
        dnnl && !g.transposed && bias && bias->dtype() == x.dtype() && bias->IsContiguous();
    bool done = false;
    if (dnnl && UseBatchGemm(g)) {
      done = BatchGemmForward(g, x.data<float>(), wt.data<float>(),
                              fused_bias ? bias->data<float>() : nullptr, out.data<float>());
    }
    if (dnnl && !done) {
      const absl::Status s =
          g.transposed
              ? DnnlConvBackwardData(*dnnl, x.data<float>(), wt.data<float>(), out.data<float>())
              : DnnlConvForward(*dnnl, x.data<float>(), wt.data<float>(),
                                fused_bias ? bias->data<float>() : nullptr, out.data<float>());
      OVERLAP_ASSIGN_OR_RETURN(done, DnnlRan(c, s));
    }
    if (!done) {
      fused_bias = false;
      OVERLAP_ASSIGN_OR_RETURN(
          Tensor col, c.NewScratch(x.dtype(), {g.cg * KernelPositions(g), OutputPositions(g)}));
      if (g.transposed) {
        ConvDataLoop(g, x.data<T>(), wt.data<T>(), out.data<T>(), col.data<T>());
      } else {
        ConvForwardLoop(g, x.data<T>(), wt.data<T>(), out.data<T>(), col.data<T>());
      }
    }
    if (bias && !fused_bias) {
      const int64_t channels = shape[1], hw = Prod(shape, 2, shape.size());
      for (int64_t b = 0; b < g.n; ++b) {
        for (int64_t oc = 0; oc < channels; ++oc) {
          const T bv = static_cast<T>(GetElement(*bias, oc));
          T* row = out.data<T>() + (b * channels + oc) * hw;
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
  const std::vector<int64_t> out_shape = ConvResultShape(g);
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
    if (has_bias) bias_shape = std::vector<int64_t>{out_shape[1]};
    // Not zeroed: oneDNN writes every element of what it computes, the bias gradient below
    // too; the loops, which add into theirs, get zeroed ones.
    OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                             MaskedOutputs(c, x.dtype(), mask, {x.shape(), wt.shape(), bias_shape},
                                           Fill::kUninitialized));
    const std::optional<DnnlConvShape> dnnl = DnnlShape<T>(g);
    // The described convolution maps [n, c, h, w] to [n, o, ho, wo]; a transposed one is its
    // adjoint, so its input plays that convolution's gradient and its gradient the input.
    const Tensor& small = g.transposed ? x : gy;  // [n, o, ho, wo]
    const Tensor& large = g.transposed ? gy : x;  // [n, c, h, w]
    bool data_done = !out[0].defined(), weight_done = !out[1].defined();
    if (dnnl && UseBatchGemm(g) && !(data_done && weight_done) &&
        BatchGemmBackward(g, x.data<float>(), gy.data<float>(), wt.data<float>(),
                          data_done ? nullptr : out[0].data<float>(),
                          weight_done ? nullptr : out[1].data<float>())) {
      data_done = weight_done = true;
    }
    if (dnnl && !weight_done && !g.transposed && g.groups == g.c && g.groups > 1 &&
        !DnnlConvWeightsDirect(*dnnl)) {
      DepthwiseWeightGrad(g, x.data<float>(), gy.data<float>(), out[1].data<float>());
      weight_done = true;
    }
    if (dnnl && !g.transposed && !(data_done && weight_done)) {  // one call, gy reordered once
      OVERLAP_ASSIGN_OR_RETURN(
          const bool ran,
          DnnlRan(c, DnnlConvBackward(*dnnl, x.data<float>(), gy.data<float>(), wt.data<float>(),
                                      data_done ? nullptr : out[0].data<float>(),
                                      weight_done ? nullptr : out[1].data<float>())));
      data_done = data_done || ran;
      weight_done = weight_done || ran;
    }
    if (dnnl && !data_done) {
      const float* w = wt.data<float>();
      float* dx = out[0].data<float>();
      OVERLAP_ASSIGN_OR_RETURN(
          data_done,
          DnnlRan(c, g.transposed ? DnnlConvForward(*dnnl, large.data<float>(), w, nullptr, dx)
                                  : DnnlConvBackwardData(*dnnl, small.data<float>(), w, dx)));
    }
    if (dnnl && !weight_done) {
      OVERLAP_ASSIGN_OR_RETURN(
          weight_done,
          DnnlRan(c, DnnlConvBackwardWeights(*dnnl, large.data<float>(), small.data<float>(),
                                             out[1].data<float>())));
    }
    if (!data_done || !weight_done) {
      for (Tensor* t : {&out[0], &out[1]}) {
        if (t->defined() && !(t == &out[0] ? data_done : weight_done)) {
          std::fill_n(t->data<T>(), t->numel(), T{0});
        }
      }
      OVERLAP_ASSIGN_OR_RETURN(
          Tensor col, c.NewScratch(x.dtype(), {g.cg * KernelPositions(g), OutputPositions(g)}));
      if (!data_done && g.transposed) {
        ConvForwardLoop(g, large.data<T>(), wt.data<T>(), out[0].data<T>(), col.data<T>());
      } else if (!data_done) {
        ConvDataLoop(g, small.data<T>(), wt.data<T>(), out[0].data<T>(), col.data<T>());
      }
      if (!weight_done) {
        ConvWeightLoop(g, large.data<T>(), small.data<T>(), out[1].data<T>(), col.data<T>());
      }
    }
    if (out[2].defined()) {
      const int64_t channels = out_shape[1], hw = Prod(out_shape, 2, out_shape.size());
      for (int64_t oc = 0; oc < channels; ++oc) {
        double s = 0;
        for (int64_t b = 0; b < g.n; ++b) {
          const T* row = gy.data<T>() + (b * channels + oc) * hw;
          for (int64_t i = 0; i < hw; ++i) s += row[i];
        }
        out[2].data<T>()[oc] = static_cast<T>(s);
      }
    }
    return out;
  });
}

// ---- group norm ----

// native_group_norm's sizes: input [N, C, ...] with HxW positions per channel, `group`
// groups of C / group channels.
struct GroupLayout {
  int64_t n, c, hw, group, cpg;
};

absl::StatusOr<GroupLayout> GroupArgs(KernelCall& c, const Tensor& x) {
  GroupLayout l;
  OVERLAP_ASSIGN_OR_RETURN(l.n, c.IntArg("N"));
  OVERLAP_ASSIGN_OR_RETURN(l.c, c.IntArg("C"));
  OVERLAP_ASSIGN_OR_RETURN(l.hw, c.IntArg("HxW"));
  OVERLAP_ASSIGN_OR_RETURN(l.group, c.IntArg("group"));
  if (x.dim() < 2 || x.shape()[0] != l.n || x.shape()[1] != l.c || l.n * l.c * l.hw != x.numel()) {
    return c.Error(
        absl::StrCat("input ", x.DebugString(), " is not N ", l.n, " x C ", l.c, " x HxW ", l.hw));
  }
  if (l.group <= 0 || l.c % l.group != 0) {
    return c.Error(absl::StrCat("group ", l.group, " does not divide C ", l.c));
  }
  l.cpg = l.c / l.group;
  return l;
}

// An optional per-channel tensor (weight, bias) as a contiguous one of x's dtype, or nullopt.
absl::StatusOr<std::optional<Tensor>> PerChannel(KernelCall& c, absl::string_view name,
                                                 int64_t channels, DType dtype) {
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> t, c.OptionalTensorArg(name));
  if (!t) return t;
  if (t->numel() != channels || t->dtype() != dtype) {
    return c.Error(absl::StrCat(name, " ", t->DebugString(), " does not match ", channels,
                                " channels of ", DTypeName(dtype)));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor d, Contiguous(c, *t));
  return std::optional<Tensor>(d);
}

// out = (x - mean) * rstd * weight[c] + bias[c], statistics per (sample, group) over the
// group's channels and positions (biased variance), in double.
Results NativeGroupNorm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(GroupLayout l, GroupArgs(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(double eps, c.DoubleArg("eps"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w, PerChannel(c, "weight", l.c, x.dtype()));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> b, PerChannel(c, "bias", l.c, x.dtype()));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor mean, c.NewUninitializedOutput(x.dtype(), {l.n, l.group}));
    OVERLAP_ASSIGN_OR_RETURN(Tensor rstd, c.NewUninitializedOutput(x.dtype(), {l.n, l.group}));
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const int64_t size = l.cpg * l.hw;
    for (int64_t ng = 0; ng < l.n * l.group; ++ng) {
      const T* xs = px + ng * size;
      double s = 0;
      for (int64_t i = 0; i < size; ++i) s += xs[i];
      const double mu = size > 0 ? s / size : 0;
      double v = 0;
      for (int64_t i = 0; i < size; ++i) v += (xs[i] - mu) * (xs[i] - mu);
      const double r = 1.0 / std::sqrt((size > 0 ? v / size : 0) + eps);
      mean.data<T>()[ng] = static_cast<T>(mu);
      rstd.data<T>()[ng] = static_cast<T>(r);
      for (int64_t k = 0; k < l.cpg; ++k) {
        const int64_t ch = (ng % l.group) * l.cpg + k;
        const double wv = w ? w->data<T>()[ch] : 1.0, bv = b ? b->data<T>()[ch] : 0.0;
        for (int64_t i = 0; i < l.hw; ++i) {
          const int64_t at = k * l.hw + i;
          po[ng * size + at] = static_cast<T>((xs[at] - mu) * r * wv + bv);
        }
      }
    }
    return std::vector<Tensor>{out, mean, rstd};
  });
}

// d_input = rstd (dy' - mean(dy') - xhat mean(dy' xhat)) per group, dy' = dy weight[c];
// d_weight[c] = sum dy xhat; d_bias[c] = sum dy.
Results NativeGroupNormBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean0, c.TensorArg("mean"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor rstd0, c.TensorArg("rstd"));
  OVERLAP_ASSIGN_OR_RETURN(GroupLayout l, GroupArgs(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask,
                           c.BoolListArg("output_mask", {true, true, true}));
  if (mask.size() != 3) return c.Error("output_mask should have 3 entries");
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, g0, x0, "grad_out and input"));
  for (const Tensor* t : {&mean0, &rstd0}) {
    if (t->numel() != l.n * l.group || t->dtype() != x0.dtype()) {
      return c.Error(absl::StrCat("mean and rstd should be [", l.n, ", ", l.group, "] of ",
                                  DTypeName(x0.dtype()), ", got ", t->DebugString()));
    }
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor mean, Contiguous(c, mean0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor rstd, Contiguous(c, rstd0));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> w, PerChannel(c, "weight", l.c, x.dtype()));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                             MaskedOutputs(c, x.dtype(), mask, {x.shape(), {{l.c}}, {{l.c}}}));
    const int64_t size = l.cpg * l.hw;
    std::vector<double> dw(l.c, 0.0), db(l.c, 0.0);
    for (int64_t ng = 0; ng < l.n * l.group; ++ng) {
      const T* xs = x.data<T>() + ng * size;
      const T* gs = g.data<T>() + ng * size;
      const double mu = mean.data<T>()[ng], r = rstd.data<T>()[ng];
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t k = 0; k < l.cpg; ++k) {
        const int64_t ch = (ng % l.group) * l.cpg + k;
        const double wv = w ? w->data<T>()[ch] : 1.0;
        for (int64_t i = 0; i < l.hw; ++i) {
          const int64_t at = k * l.hw + i;
          const double xhat = (xs[at] - mu) * r;
          sum_dy += gs[at] * wv;
          sum_dy_xhat += gs[at] * wv * xhat;
          dw[ch] += gs[at] * xhat;
          db[ch] += gs[at];
        }
      }
      if (!out[0].defined()) continue;
      T* dx = out[0].data<T>() + ng * size;
      const double m1 = size > 0 ? sum_dy / size : 0, m2 = size > 0 ? sum_dy_xhat / size : 0;
      for (int64_t k = 0; k < l.cpg; ++k) {
        const int64_t ch = (ng % l.group) * l.cpg + k;
        const double wv = w ? w->data<T>()[ch] : 1.0;
        for (int64_t i = 0; i < l.hw; ++i) {
          const int64_t at = k * l.hw + i;
          const double xhat = (xs[at] - mu) * r;
          dx[at] = static_cast<T>(r * (gs[at] * wv - m1 - xhat * m2));
        }
      }
    }
    for (int64_t ch = 0; ch < l.c; ++ch) {
      if (out[1].defined()) out[1].data<T>()[ch] = static_cast<T>(dw[ch]);
      if (out[2].defined()) out[2].data<T>()[ch] = static_cast<T>(db[ch]);
    }
    return out;
  });
}

// ---- linear resampling (adaptive pooling, upsampling) ----

// A linear map between planes, given as (output index, input index, weight) triples by
// `each(visit)`: the forward reads the input and writes the output, its adjoint (the
// backward) the other way round. Runs every plane of `from` into a
// new output of `to_shape` (accumulated in double): each triple (o, i, w) adds w from[i]
// to out[o] (the forward), or, `scatter`, w from[o] to out[i] (its adjoint).
template <typename Each>
Results LinearMap(KernelCall& c, const Tensor& from, const std::vector<int64_t>& to_shape,
                  int64_t from_plane, int64_t to_plane, bool scatter, Each each) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, from));
  const int64_t planes = from_plane > 0 ? x.numel() / from_plane : 0;
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), to_shape));
    std::vector<double> acc(to_plane);
    for (int64_t p = 0; p < planes; ++p) {
      const T* in = x.data<T>() + p * from_plane;
      std::fill(acc.begin(), acc.end(), 0.0);
      if (scatter) {
        each([&](int64_t o, int64_t i, double w) { acc[i] += w * in[o]; });
      } else {
        each([&](int64_t o, int64_t i, double w) { acc[o] += w * in[i]; });
      }
      T* dst = out.data<T>() + p * to_plane;
      for (int64_t k = 0; k < to_plane; ++k) dst[k] = static_cast<T>(acc[k]);
    }
    return std::vector<Tensor>{out};
  });
}

// ---- adaptive average pooling ----

// Each output position of `g` averages its window (per axis [AdaptiveStart, AdaptiveEnd), ATen's
// windows): visit(out_index, in_index, 1 / window volume) within one plane.
template <typename F>
void ForEachAdaptiveWindow(const AdaptiveGeometry& g, F&& visit) {
  const auto& in = g.in;
  const auto& out = g.out;
  for (int64_t z = 0; z < out[0]; ++z) {
    const int64_t d0 = AdaptiveStart(z, out[0], in[0]), d1 = AdaptiveEnd(z, out[0], in[0]);
    for (int64_t i = 0; i < out[1]; ++i) {
      const int64_t y0 = AdaptiveStart(i, out[1], in[1]), y1 = AdaptiveEnd(i, out[1], in[1]);
      for (int64_t j = 0; j < out[2]; ++j) {
        const int64_t x0 = AdaptiveStart(j, out[2], in[2]), x1 = AdaptiveEnd(j, out[2], in[2]);
        const double inv = 1.0 / static_cast<double>((d1 - d0) * (y1 - y0) * (x1 - x0));
        const int64_t o = (z * out[1] + i) * out[2] + j;
        for (int64_t k = d0; k < d1; ++k) {
          for (int64_t y = y0; y < y1; ++y) {
            for (int64_t x = x0; x < x1; ++x) visit(o, (k * in[1] + y) * in[2] + x, inv);
          }
        }
      }
    }
  }
}

// _adaptive_avg_pool2d / _adaptive_avg_pool3d.
Results AdaptiveAvgPool(KernelCall& c, int spatial) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const AdaptiveGeometry g, AdaptiveArgs(c, x, spatial));
  return LinearMap(c, x, g.OutShape(x.shape()), g.InVolume(), g.OutVolume(), /*scatter=*/false,
                   [&](auto visit) { ForEachAdaptiveWindow(g, visit); });
}

// Its backward: each window's gradient spread evenly over it (the forward's adjoint).
Results AdaptiveAvgPoolBackward(KernelCall& c, int spatial) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor grad, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const AdaptiveGeometry g, AdaptiveBackwardArgs(c, grad, x, spatial));
  return LinearMap(c, grad, x.shape(), g.OutVolume(), g.InVolume(), /*scatter=*/true,
                   [&](auto visit) { ForEachAdaptiveWindow(g, visit); });
}

// ---- upsampling (nearest, bilinear) ----

// A 2-D upsampling: planes [n * c] of [ih, iw] to [oh, ow], and the source scale of each axis
// as ATen computes it: 1 / scale_factor when one is given, else in / out (align_corners:
// (in - 1) / (out - 1), 0 for one output).
struct Resize {
  int64_t planes, ih, iw, oh, ow;
  double sh, sw;
  bool align_corners = false;
};

absl::StatusOr<Resize> ResizeArgs(KernelCall& c, const std::vector<int64_t>& in, bool bilinear) {
  if (in.size() != 4) return c.Error("upsampling takes a 4-d input [N, C, H, W]");
  Resize r;
  r.planes = in[0] * in[1], r.ih = in[2], r.iw = in[3];
  OVERLAP_ASSIGN_OR_RETURN(std::optional<std::vector<double>> scales,
                           c.OptionalDoubleListArg("scale_factors"));
  if (scales && scales->size() != 2) return c.Error("scale_factors should have 2 entries");
  const Value* size = c.Arg("output_size");
  if (size != nullptr && !size->is_none()) {
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> o, c.IntListArg("output_size"));
    if (o.size() != 2) return c.Error("output_size should have 2 entries");
    r.oh = o[0], r.ow = o[1];
  } else if (scales) {
    const double oh = std::floor(static_cast<double>(r.ih) * (*scales)[0]);
    const double ow = std::floor(static_cast<double>(r.iw) * (*scales)[1]);
    if (!(oh < 1e15) || !(ow < 1e15)) return c.Error("scale_factors give an unrepresentable size");
    r.oh = static_cast<int64_t>(oh);
    r.ow = static_cast<int64_t>(ow);
  } else {
    return c.Error("neither output_size nor scale_factors");
  }
  if (r.oh <= 0 || r.ow <= 0 || r.ih <= 0 || r.iw <= 0) return c.Error("an empty upsampling");
  if (bilinear) {
    OVERLAP_ASSIGN_OR_RETURN(r.align_corners, c.BoolArg("align_corners"));
  }
  auto scale = [&](int64_t in_size, int64_t out_size, int axis) {
    if (r.align_corners) {
      return out_size > 1 ? static_cast<double>(in_size - 1) / (out_size - 1) : 0.0;
    }
    if (scales && (*scales)[axis] > 0) return 1.0 / (*scales)[axis];
    return static_cast<double>(in_size) / out_size;
  };
  r.sh = scale(r.ih, r.oh, 0);
  r.sw = scale(r.iw, r.ow, 1);
  return r;
}

// ATen's nearest source index, in its arithmetic: the scale as a float, floorf of the
// product (a double product can land on the other side of an integer for a non-integer
// ratio), the exact shortcuts for equal and doubled sizes.
int64_t NearestIndex(int64_t dst, int64_t in, int64_t out, double scale) {
  if (out == in) return dst;
  if (out == 2 * in) return dst >> 1;
  const float s = static_cast<float>(scale);
  return std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(dst) * s)), in - 1);
}

// Nearest: output (y, x) reads input (min(floor(y sh), ih - 1), min(floor(x sw), iw - 1)).
// Bilinear: each output reads up to four inputs with weights; `visit(out_index, in_index,
// weight)` sees every pair, so the forward gathers and the backward scatters with one rule.
template <typename F>
void ForEachSource(const Resize& r, bool bilinear, F&& visit) {
  for (int64_t y = 0; y < r.oh; ++y) {
    int64_t y0, y1;
    double ly;
    if (bilinear) {
      double src = r.align_corners ? r.sh * y : r.sh * (y + 0.5) - 0.5;
      if (src < 0) src = 0;
      y0 = std::min<int64_t>(static_cast<int64_t>(src), r.ih - 1);
      y1 = y0 + (y0 < r.ih - 1 ? 1 : 0);
      ly = src - y0;
    } else {
      y0 = y1 = NearestIndex(y, r.ih, r.oh, r.sh);
      ly = 0;
    }
    for (int64_t x = 0; x < r.ow; ++x) {
      const int64_t o = y * r.ow + x;
      if (!bilinear) {
        const int64_t x0 = NearestIndex(x, r.iw, r.ow, r.sw);
        visit(o, y0 * r.iw + x0, 1.0);
        continue;
      }
      double src = r.align_corners ? r.sw * x : r.sw * (x + 0.5) - 0.5;
      if (src < 0) src = 0;
      const int64_t x0 = std::min<int64_t>(static_cast<int64_t>(src), r.iw - 1);
      const int64_t x1 = x0 + (x0 < r.iw - 1 ? 1 : 0);
      const double lx = src - x0;
      visit(o, y0 * r.iw + x0, (1 - ly) * (1 - lx));
      visit(o, y0 * r.iw + x1, (1 - ly) * lx);
      visit(o, y1 * r.iw + x0, ly * (1 - lx));
      visit(o, y1 * r.iw + x1, ly * lx);
    }
  }
}

Kernel UpsampleKernel(bool bilinear) {
  return [bilinear](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("input"));
    OVERLAP_ASSIGN_OR_RETURN(Resize r, ResizeArgs(c, x.shape(), bilinear));
    return LinearMap(c, x, {x.shape()[0], x.shape()[1], r.oh, r.ow}, r.ih * r.iw, r.oh * r.ow,
                     /*scatter=*/false, [&](auto visit) { ForEachSource(r, bilinear, visit); });
  };
}

Kernel UpsampleBackwardKernel(bool bilinear) {
  return [bilinear](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> in_size, c.IntListArg("input_size"));
    OVERLAP_ASSIGN_OR_RETURN(Resize r, ResizeArgs(c, in_size, bilinear));
    if (g.shape() != std::vector<int64_t>{in_size[0], in_size[1], r.oh, r.ow}) {
      return c.Error(absl::StrCat("grad_output ", g.DebugString(),
                                  " is not the upsampled shape of input_size"));
    }
    return LinearMap(c, g, in_size, r.oh * r.ow, r.ih * r.iw, /*scatter=*/true,
                     [&](auto visit) { ForEachSource(r, bilinear, visit); });
  };
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
  // nn_ops.h's MaxPoolAt rule (ATen's: the first maximum in window order, a NaN replaces
  // even a NaN) a row of outputs at a time, with each window's in-bounds rows and columns
  // found once and the choice made without a branch (the comparisons on random data
  // mispredict half the time: most of the generic unit's time).
  return MaxPoolWithIndices(c, x, shape, [&](const auto* xs, auto* os, int64_t* is) {
    using T = std::remove_pointer_t<decltype(os)>;
    const int64_t rows = g.planes * g.ho;
    // The window taps in bounds along one axis: [first, last) for output position o.
    auto taps = [](int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t k, int64_t n) {
      const int64_t origin = o * stride - pad;
      int64_t first = 0, last = k;
      while (first < k && origin + first * dil < 0) ++first;
      while (last > first && origin + (last - 1) * dil >= n) --last;
      return std::array<int64_t, 3>{origin, first, last};
    };
    ParallelFor(
        rows,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t plane = r / g.ho, oh = r % g.ho;
            const T* in = xs + plane * g.h * g.w;
            const auto [ih0, i_first, i_last] = taps(oh, g.sh, g.ph, g.dh, g.kh, g.h);
            for (int64_t ow = 0; ow < g.wo; ++ow) {
              const auto [iw0, j_first, j_last] = taps(ow, g.sw, g.pw, g.dw, g.kw, g.w);
              T best = static_cast<T>(-HUGE_VAL);
              int64_t at = -1;
              if (i_first < i_last && j_first < j_last) {  // start from the first tap
                at = (ih0 + i_first * g.dh) * g.w + iw0 + j_first * g.dw;
                best = in[at];
              }
              for (int64_t i = i_first; i < i_last; ++i) {
                const T* row = in + (ih0 + i * g.dh) * g.w + iw0;
                const int64_t base = (ih0 + i * g.dh) * g.w + iw0;
                for (int64_t j = j_first; j < j_last; ++j) {
                  const T v = row[j * g.dw];
                  const int take = static_cast<int>(v > best) | static_cast<int>(v != v);
                  best = take ? v : best;
                  at = take ? base + j * g.dw : at;
                }
              }
              os[r * g.wo + ow] = best;
              is[r * g.wo + ow] = at;
            }
          }
        },
        kParallelGrain / std::max<int64_t>(g.wo * g.kh * g.kw, 1) + 1);
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
    NnRun(a);
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
  NnRun(n);
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
        NnRun(n);
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

Results NllLossForward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(NllLossArgs args, ReadNllLossArgs(c, /*backward=*/false));
  const std::optional<Tensor>& w = args.weight;
  const int64_t reduction = args.reduction, ignore = args.ignore_index;
  const int64_t n = args.rows, classes = args.classes;
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.self));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, args.target));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    const bool none = reduction == kReductionNone;
    std::vector<int64_t> loss_shape;
    if (none && x.dim() == 2) loss_shape = {n};
    OVERLAP_ASSIGN_OR_RETURN(Tensor loss, c.NewOutput(x.dtype(), loss_shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor total, c.NewOutput(x.dtype(), {}));
    std::optional<Tensor> pw;
    if (w) {
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
  OVERLAP_ASSIGN_OR_RETURN(NllLossArgs args, ReadNllLossArgs(c, /*backward=*/true));
  const Tensor &g = args.grad_output, &x = args.self, &total = args.total_weight;
  const std::optional<Tensor>& w = args.weight;
  const int64_t reduction = args.reduction, ignore = args.ignore_index;
  const int64_t n = args.rows, classes = args.classes;
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, args.target));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    std::optional<Tensor> pw;
    if (w) {
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
  OVERLAP_ASSIGN_OR_RETURN(MseLossArgs args, ReadMseLossArgs(c, /*backward=*/false));
  const int64_t reduction = args.reduction;
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.self));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, args.target));
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
    NnRun(a);
    return std::vector<Tensor>{out};
  });
}

Results MseLossBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(MseLossArgs args, ReadMseLossArgs(c, /*backward=*/true));
  const int64_t reduction = args.reduction;
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, args.grad_output));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.self));
  OVERLAP_ASSIGN_OR_RETURN(Tensor t, Contiguous(c, args.target));
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
    NnRun(a);
    return std::vector<Tensor>{out};
  });
}

}  // namespace
}  // namespace kernels

void RegisterNnKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.mm.default", Mm);
  r.Register("transformers.grouped_mm_fallback.default", GroupedMm);
  r.Register("transformers.grouped_mm_fallback_backward.default", GroupedMmBackward);
  r.Register("aten.bmm.default", Bmm);
  r.Register("aten.addmm.default", Addmm);
  r.Register("aten.native_layer_norm.default", NativeLayerNorm);
  r.Register("aten.native_layer_norm_backward.default", NativeLayerNormBackward);
  r.Register("aten.native_batch_norm.default", NativeBatchNorm);
  r.Register("aten.native_batch_norm_backward.default", NativeBatchNormBackward);
  r.Register("aten.baddbmm.default", Baddbmm);
  r.Register("aten.convolution.default", Convolution);
  r.Register("aten.convolution_backward.default", ConvolutionBackward);
  r.Register("aten.native_group_norm.default", NativeGroupNorm);
  r.Register("aten.native_group_norm_backward.default", NativeGroupNormBackward);
  r.Register("aten.upsample_nearest2d.vec", UpsampleKernel(false));
  r.Register("aten._adaptive_avg_pool2d.default",
             [](KernelCall& c) { return AdaptiveAvgPool(c, 2); });
  r.Register("aten._adaptive_avg_pool2d_backward.default",
             [](KernelCall& c) { return AdaptiveAvgPoolBackward(c, 2); });
  r.Register("aten._adaptive_avg_pool3d.default",
             [](KernelCall& c) { return AdaptiveAvgPool(c, 3); });
  r.Register("aten._adaptive_avg_pool3d_backward.default",
             [](KernelCall& c) { return AdaptiveAvgPoolBackward(c, 3); });
  r.Register("aten.upsample_bilinear2d.vec", UpsampleKernel(true));
  r.Register("aten.upsample_nearest2d_backward.vec", UpsampleBackwardKernel(false));
  r.Register("aten.upsample_bilinear2d_backward.vec", UpsampleBackwardKernel(true));
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
