// Reduction kernels: sum and mean over dimensions, softmax and log-softmax and their
// backwards. Sums accumulate in double whatever the dtype; the softmax family's formulas
// are reduction_ops.h's, shared with the CUDA backend.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/core/vmath.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/op_args.h"
#include "runtime/kernels/reduction_ops.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

// A sum of bool or integers over the dimensions whose `acc_strides` are 0, exactly in int64
// (wrapping as ATen's), written as `d` in `shape`.
Results SumIntegers(KernelCall& c, const Tensor& x0, const std::vector<int64_t>& acc_strides,
                    const std::vector<int64_t>& shape, DType d) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, x0, DType::kInt64));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, shape));
  OVERLAP_ASSIGN_OR_RETURN(Tensor acc_t, c.NewScratch(DType::kInt64, {out.numel()}));
  // Unsigned: two's-complement wrap without undefined behaviour.
  uint64_t* acc = reinterpret_cast<uint64_t*>(acc_t.data<int64_t>());
  const int64_t* in = x.data<int64_t>();
  ForEach2(x.shape(), x.strides(), acc_strides,
           [&](int64_t a, int64_t o) { acc[o] += static_cast<uint64_t>(in[a]); });
  for (int64_t i = 0; i < out.numel(); ++i) SetInteger(out, i, static_cast<int64_t>(acc[i]));
  return std::vector<Tensor>{out};
}

// sum / mean over `dim` (None or empty: every dimension), times `scale_by_count` ? 1/N : 1.
// The result's dtype is ReductionResultType's (graph/type_promotion.h): the dtype keyword,
// else sum's int64 for bool and integers; the input is read in it.
Results ReduceDims(KernelCall& c, bool mean) {
  OVERLAP_ASSIGN_OR_RETURN(SumArgs args, ReadSumArgs(c, mean));
  const Tensor& x0 = args.self;
  const DType dtype = args.dtype;
  const bool keepdim = args.keepdim;
  const std::vector<bool>& reduced = args.reduced;
  const std::vector<int64_t>&keep_shape = args.keep_shape, &out_shape = args.out_shape;
  const int64_t count = args.count;
  std::vector<int64_t> acc_strides = ContiguousStrides(keep_shape);
  for (int64_t i = 0; i < x0.dim(); ++i) {
    if (reduced[i]) acc_strides[i] = 0;
  }
  if (!IsFloatingPoint(dtype)) {
    return SumIntegers(c, x0, acc_strides, keepdim ? keep_shape : out_shape, dtype);
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, x0, dtype));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), keepdim ? keep_shape : out_shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor acc_t, c.NewScratch(DType::kFloat64, {out.numel()}));
    double* acc = acc_t.data<double>();
    const T* in = x.data<T>();
    // Reduced dimensions in one block [first, last] of a contiguous input: [outer, n, inner]
    // loops that the compiler vectorizes; any other layout walks every index.
    int64_t first = -1, last = -1;
    bool block = x.IsContiguous();
    for (int64_t i = 0; i < x.dim(); ++i) {
      if (!reduced[i]) continue;
      if (first < 0) first = i;
      if (last >= 0 && last != i - 1) block = false;
      last = i;
    }
    if (block && first >= 0) {
      const int64_t outer = Prod(x.shape(), 0, first), n = Prod(x.shape(), first, last + 1);
      const int64_t inner = Prod(x.shape(), last + 1, x.dim());
      for (int64_t p = 0; p < outer; ++p) {
        double* a = acc + p * inner;
        if (inner == 1) {  // one contiguous run: eight independent partial sums
          const T* run = in + p * n;
          double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          int64_t j = 0;
          for (; j + 8 <= n; j += 8) {
            for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(run[j + l]);
          }
          for (; j < n; ++j) lane[0] += static_cast<double>(run[j]);
          for (int l = 0; l < 8; ++l) a[0] += lane[l];
          continue;
        }
        for (int64_t j = 0; j < n; ++j) {
          const T* row = in + (p * n + j) * inner;
          for (int64_t q = 0; q < inner; ++q) a[q] += static_cast<double>(row[q]);
        }
      }
    } else {
      ForEach2(x.shape(), x.strides(), acc_strides,
               [&](int64_t a, int64_t o) { acc[o] += static_cast<double>(in[a]); });
    }
    const double scale =
        mean ? (count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / count) : 1.0;
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(acc[i] * scale);
    return std::vector<Tensor>{out};
  });
}

// ReduceColumn's softmax family on one contiguous float row (a softmax over the last
// dimension: attention scores, a vocabulary's logits), with exp by VecApply and eight
// independent partial sums (the sum in double, as ReduceColumn's; another order of double
// additions, so the float result may differ in its last bit).
double SumRow(const float* x, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[j + l]);
  }
  for (; j < n; ++j) lane[0] += static_cast<double>(x[j]);
  double sum = 0;
  for (int l = 0; l < 8; ++l) sum += lane[l];
  return sum;
}

double DotRow(const float* x, const float* y, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[j + l]) * y[j + l];
  }
  for (; j < n; ++j) lane[0] += static_cast<double>(x[j]) * y[j];
  double sum = 0;
  for (int l = 0; l < 8; ++l) sum += lane[l];
  return sum;
}

void SoftmaxRow(bool log, const float* x, float* out, int64_t n) {
  float lane[8];
  for (float& m : lane) m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {  // std::max's rule: a NaN does not replace the maximum
    for (int l = 0; l < 8; ++l) lane[l] = lane[l] < x[j + l] ? x[j + l] : lane[l];
  }
  for (; j < n; ++j) lane[0] = lane[0] < x[j] ? x[j] : lane[0];
  float mx = lane[0];
  for (int l = 1; l < 8; ++l) mx = mx < lane[l] ? lane[l] : mx;
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - mx;
  VecApply(VecFn::kExp, out, n);
  const double sum = SumRow(out, n);
  if (log) {
    const float lse = static_cast<float>(static_cast<double>(mx) + std::log(sum));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - lse;
    return;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) out[i] *= inv;
}

void SoftmaxBackwardRow(bool log, const float* g, const float* y, float* out, int64_t n) {
  if (log) {
    const float st = static_cast<float>(SumRow(g, n));
    std::copy(y, y + n, out);
    VecApply(VecFn::kExp, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] = g[i] - out[i] * st;
    return;
  }
  const float st = static_cast<float>(DotRow(g, y, n));
  for (int64_t i = 0; i < n; ++i) out[i] = y[i] * (g[i] - st);
}

Results SoftmaxKernel(KernelCall& c, bool log) {
  OVERLAP_ASSIGN_OR_RETURN(SoftmaxArgs args, ReadSoftmaxArgs(c, /*backward=*/false));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.x));
  const Around a = Split3(x.shape(), args.dim);
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
    const T* in = x.data<T>();
    T* o = out.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (a.inner == 1) {  // rows
        ParallelFor(
            a.outer,
            [&](int64_t begin, int64_t end) {
              for (int64_t k = begin; k < end; ++k) SoftmaxRow(log, in + k * a.n, o + k * a.n, a.n);
            },
            kParallelGrain / std::max<int64_t>(a.n, 1) + 1);
        return std::vector<Tensor>{out};
      }
    }
    // Each (outer, inner) column is independent: split over the pool by columns.
    ParallelFor(
        a.outer * a.inner,
        [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            const int64_t base = (k / a.inner) * a.n * a.inner + k % a.inner;
            ReduceColumn<T>(log ? ReduceOp::kLogSoftmax : ReduceOp::kSoftmax, in + base, nullptr,
                            o + base, a.n, a.inner, 1);
          }
        },
        kParallelGrain / std::max<int64_t>(a.n, 1) + 1);
    return std::vector<Tensor>{out};
  });
}

// softmax: dx = y (g - sum(g y)); log-softmax: dx = g - exp(y) sum(g).
Results SoftmaxBackwardKernel(KernelCall& c, bool log) {
  OVERLAP_ASSIGN_OR_RETURN(SoftmaxArgs args, ReadSoftmaxArgs(c, /*backward=*/true));
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, args.x));
  OVERLAP_ASSIGN_OR_RETURN(Tensor y, Contiguous(c, args.output));
  const Around a = Split3(y.shape(), args.dim);
  return DispatchFloat(c, y.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(y.dtype(), y.shape()));
    const T* pg = g.data<T>();
    const T* py = y.data<T>();
    T* o = out.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (a.inner == 1) {  // rows
        ParallelFor(
            a.outer,
            [&](int64_t begin, int64_t end) {
              for (int64_t k = begin; k < end; ++k) {
                SoftmaxBackwardRow(log, pg + k * a.n, py + k * a.n, o + k * a.n, a.n);
              }
            },
            kParallelGrain / std::max<int64_t>(a.n, 1) + 1);
        return std::vector<Tensor>{out};
      }
    }
    ParallelFor(
        a.outer * a.inner,
        [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            const int64_t base = (k / a.inner) * a.n * a.inner + k % a.inner;
            ReduceColumn<T>(log ? ReduceOp::kLogSoftmaxBackward : ReduceOp::kSoftmaxBackward,
                            pg + base, py + base, o + base, a.n, a.inner, 1);
          }
        },
        kParallelGrain / std::max<int64_t>(a.n, 1) + 1);
    return std::vector<Tensor>{out};
  });
}

// norm.ScalarOpt_dim: (sum |x|^p)^(1/p) over dim (p None: 2; inf: the largest |x|; 0: the
// count of non-zeros), accumulated in double. NaN propagates.
Results Norm(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double p, c.DoubleArg("p", 2.0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.IntListArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool keepdim, c.BoolArg("keepdim"));
  if (p < 0) return c.Error(absl::StrCat("p must be non-negative, got ", p));
  std::vector<bool> reduced(x.dim(), dims.empty());
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
    if (x.dim() > 0) reduced[d] = true;
  }
  std::vector<int64_t> keep_shape, out_shape;
  for (int64_t i = 0; i < x.dim(); ++i) {
    keep_shape.push_back(reduced[i] ? 1 : x.shape()[i]);
    if (!reduced[i]) out_shape.push_back(x.shape()[i]);
  }
  std::vector<int64_t> acc_strides = ContiguousStrides(keep_shape);
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (reduced[i]) acc_strides[i] = 0;
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), keepdim ? keep_shape : out_shape));
    std::vector<double> acc(out.numel(), 0.0);
    const T* in = x.data<T>();
    const bool inf = std::isinf(p);
    ForEach2(x.shape(), x.strides(), acc_strides, [&](int64_t ix, int64_t ia) {
      const double v = std::fabs(static_cast<double>(in[ix]));
      double& a = acc[ia];
      if (p == 0) {  // a count: NaN is non-zero, as in ATen
        a += v != 0 ? 1 : 0;
      } else if (std::isnan(v) || std::isnan(a)) {
        a = std::numeric_limits<double>::quiet_NaN();
      } else if (inf) {
        a = std::max(a, v);
      } else if (p == 2) {
        a += v * v;
      } else {
        a += std::pow(v, p);
      }
    });
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double a = acc[i];
      o[i] = static_cast<T>(inf || p == 0 ? a : p == 2 ? std::sqrt(a) : std::pow(a, 1.0 / p));
    }
    return std::vector<Tensor>{out};
  });
}

}  // namespace
}  // namespace kernels

void RegisterReductionKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.sum.dim_IntList", [](KernelCall& c) { return ReduceDims(c, false); });
  r.Register("aten.norm.ScalarOpt_dim", Norm);
  r.Register("aten.mean.dim", [](KernelCall& c) { return ReduceDims(c, true); });
  // The overloads without a dim reduce every dimension (the exporter's default loss is
  // aten.sum.default): ReduceDims reads no dim and no keepdim from them.
  r.Register("aten.sum.default", [](KernelCall& c) { return ReduceDims(c, false); });
  r.Register("aten.mean.default", [](KernelCall& c) { return ReduceDims(c, true); });
  r.Register("aten._softmax.default", [](KernelCall& c) { return SoftmaxKernel(c, false); });
  r.Register("aten._log_softmax.default", [](KernelCall& c) { return SoftmaxKernel(c, true); });
  r.Register("aten._softmax_backward_data.default",
             [](KernelCall& c) { return SoftmaxBackwardKernel(c, false); });
  r.Register("aten._log_softmax_backward_data.default",
             [](KernelCall& c) { return SoftmaxBackwardKernel(c, true); });
}

}  // namespace overlap
