// The reductions' formulas, once, for every backend (as elementwise_ops.h for the
// elementwise ops): a reduction runs over one "column" of a [outer, n, inner] layout, the n
// elements x[i * stride], accumulating in double whatever T is. The CPU kernels
// (kernels/reduction.cc), the CUDA kernel (one thread per column) and the emulated device
// call ReduceColumn. Header-only; host and device code.
#ifndef OVERLAP_RUNTIME_KERNELS_REDUCTION_OPS_H_
#define OVERLAP_RUNTIME_KERNELS_REDUCTION_OPS_H_

#include <cmath>
#include <cstdint>

// Relative: nvcc compiles this header with no workspace include path.
#include "elementwise_ops.h"  // OVERLAP_HOST_DEVICE

namespace overlap {

enum class ReduceOp : int32_t {
  kSum,                 // out[0] = scale * sum x (mean: scale = 1 / n)
  kSoftmax,             // out[i] = exp(x_i - lse)
  kLogSoftmax,          // out[i] = x_i - lse
  kSoftmaxBackward,     // x: grad, y: softmax output; out[i] = y_i (g_i - sum g y)
  kLogSoftmaxBackward,  // x: grad, y: log-softmax output; out[i] = g_i - exp(y_i) sum g
};

// One column. kSum writes out[0]; the others write out[i * stride] (y is read by the
// backwards only).
template <typename T>
OVERLAP_HOST_DEVICE inline void ReduceColumn(ReduceOp op, const T* x, const T* y, T* out, int64_t n,
                                             int64_t stride, double scale) {
  using std::exp;
  using std::log;
  switch (op) {
    case ReduceOp::kSum: {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i * stride]);
      out[0] = static_cast<T>(acc * scale);
      return;
    }
    case ReduceOp::kSoftmax:
    case ReduceOp::kLogSoftmax: {
      // In T's arithmetic (expf for float, as PyTorch computes it), one exp per element;
      // the sum in double.
      T mx = static_cast<T>(-HUGE_VAL);  // a macro, usable in device code (numeric_limits is not)
      for (int64_t i = 0; i < n; ++i) {
        const T v = x[i * stride];
        mx = mx < v ? v : mx;  // std::max's rule: a NaN does not replace the maximum
      }
      double sum = 0;
      if (op == ReduceOp::kLogSoftmax) {
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(exp(x[i * stride] - mx));
        const T lse = static_cast<T>(static_cast<double>(mx) + log(sum));
        for (int64_t i = 0; i < n; ++i) out[i * stride] = x[i * stride] - lse;
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const T e = exp(x[i * stride] - mx);
        out[i * stride] = e;
        sum += static_cast<double>(e);
      }
      const T inv = static_cast<T>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) out[i * stride] *= inv;
      return;
    }
    case ReduceOp::kSoftmaxBackward:
    case ReduceOp::kLogSoftmaxBackward: {
      const bool lg = op == ReduceOp::kLogSoftmaxBackward;
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = i * stride;
        s += lg ? static_cast<double>(x[at]) : static_cast<double>(x[at]) * y[at];
      }
      const T st = static_cast<T>(s);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = i * stride;
        out[at] = lg ? x[at] - exp(y[at]) * st : y[at] * (x[at] - st);
      }
      return;
    }
  }
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_REDUCTION_OPS_H_
