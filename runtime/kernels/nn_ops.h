// The formulas of the nn kernels that are neither elementwise nor plain reductions (layer
// and batch norm, max pooling, the losses, embedding's backward, attention's softmax rows),
// once, for every backend: the CPU kernels (kernels/nn.cc, kernels/index.cc), the CUDA
// backend's nn kernel (runtime/cuda/device_kernels.cu, one thread per unit) and the
// emulated device all run NnUnit(args, u) for every unit u < NnUnits(args), so they agree
// to the last bit but for their math libraries (exp, sqrt).
//
// A unit is the work one device thread does alone: a row, a column, a channel, a plane or
// one output element, chosen so that no two units write the same element and every sum is
// taken in one fixed order (deterministic, no atomics). Sums accumulate in double whatever
// T is (float or double).
//
// Indices read from tensors (pooling indices, targets, embedding rows) are checked: a bad
// one is recorded in `error` ([0] tag, [1] the index, [2] the bound; the first writer wins)
// and its unit skips it, since a device kernel cannot return an error; the caller turns a
// recorded one into a Status (the CPU kernels at once, the CUDA device at the step's end).
// Header-only; host and device code.
#ifndef OVERLAP_RUNTIME_KERNELS_NN_OPS_H_
#define OVERLAP_RUNTIME_KERNELS_NN_OPS_H_

#include <cmath>
#include <cstdint>

// Relative: nvcc compiles this header with no workspace include path.
#include "elementwise_ops.h"  // OVERLAP_HOST_DEVICE

namespace overlap {

enum class NnOp : int32_t {
  // Units: rows (rows of cols). x, w?, b? -> out, out2 = mean [rows], out3 = rstd [rows].
  kLayerNorm,
  // Units: rows. g, x, w?, mean, var = rstd -> out = grad of x.
  kLayerNormBackward,
  // Units: cols. g, x, mean, var = rstd (rows of cols) -> out2 = grad of w?, out3 = of b?.
  kLayerNormParamBackward,
  // Units: channels of [batch, channels, inner]. x, w?, b?; flag 1 (training): batch
  // statistics -> out, out2 = mean, out3 = invstd; flag 0: running mean and var (mean,
  // var) -> out.
  kBatchNorm,
  // Units: channels. g, x, w?, mean, var (flag 1: the saved invstd; flag 0: the running
  // variance) -> out = grad of x?, out2 = grad of w?, out3 = grad of b?.
  kBatchNormBackward,
  // Units: planes * pool.ho * pool.wo outputs. x [planes, h, w] -> out, out2 = int64
  // indices into each plane (ATen's rule: the last NaN, else the first maximum).
  kMaxPool,
  // Units: planes. g [planes, ho, wo], index -> out [planes, h, w] (zeroed, then each
  // output's gradient added at its index, in output order).
  kMaxPoolBackward,
  // Units: planes * pool.ho * pool.wo outputs. x [planes, h, w] -> out: each window's mean
  // (ATen's avg_pool2d): the divisor is `ignore` when > 0 (divisor_override), else the
  // window clipped to the padded input (flag 1, count_include_pad) or to the input (flag 0).
  kAvgPool,
  // Units: planes. g [planes, ho, wo] -> out [planes, h, w]: zeroed, then each output's
  // gradient over its divisor added to its window, in output order. Same flag and ignore.
  kAvgPoolBackward,
  // One unit. x [rows, cols] log-probabilities, index = targets [rows], w? [cols]; flag =
  // reduction (0 none, 1 mean, 2 sum), ignore -> out (loss: [rows] for none, else one),
  // out2 = total weight (one).
  kNllLoss,
  // Units: rows. g (one, or [rows] for none), index, w?, mean = total weight; flag, ignore
  // -> out [rows, cols] (each row zeroed, then its target's gradient).
  kNllLossBackward,
  // One unit (flag 1 mean, 2 sum), or units: rows elements (flag 0, none). x, b = target
  // (rows elements) -> out.
  kMseLoss,
  // Units: rows elements. g (one, or per element for none), x, b = target; flag -> out.
  kMseLossBackward,
  // Units: rows indices. w [cols2, cols] (table), index -> out [rows, cols].
  kEmbedding,
  // Units: cols. g [rows, cols], index [rows]; ignore = padding_idx -> out [cols2, cols]
  // (each column zeroed, then every index's row added, in index order).
  kEmbeddingBackward,
  // Units: rows of cols, unit u being query position u % inner. out holds the scaled scores
  // and becomes softmax probabilities (flag 1: causal, positions after the query's are 0);
  // out2 = logsumexp per row.
  kAttentionSoftmax,
  // Units: rows of cols. x = P, out = dP on entry and dS on exit, g = dO and b = O
  // (rows of inner): dS_j = P_j (dP_j - sum dO O).
  kAttentionSoftmaxBackward,
  // Units: batch * rows output rows. x [batch, cols2, cols] (around the dimension),
  // index [rows] -> out [batch, rows, cols]: row (p, j) is x's row (p, index[j]).
  kIndexSelect,
  // Units: batch * cols columns. b = source [batch, rows, cols], index [rows]; out [batch,
  // cols2, cols] holds self on entry: out[p, index[j], q] += scale * source[p, j, q], over j
  // in order.
  kIndexAdd,
};

// Max pooling's geometry (2-D windows over planes [h, w]).
struct NnPool {
  int64_t planes = 0, h = 0, w = 0, kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1,
          ho = 0, wo = 0;
};

// ATen's loss reduction enum (at::Reduction), as the losses' `reduction` argument and
// NnArgs::flag carry it. Any other value is refused before a kernel runs, as ATen refuses it.
inline constexpr int64_t kReductionNone = 0, kReductionMean = 1, kReductionSum = 2;
inline constexpr bool IsAtenReduction(int64_t r) {
  return r == kReductionNone || r == kReductionMean || r == kReductionSum;
}

// One call's arguments: plain data (a device kernel takes it by value). Pointers are to T
// elements (float or double by is_double), contiguous, except `index` (int64, or int32
// when index32) and max pooling's int64 out2. Which fields an op reads: NnOp's comments.
struct NnArgs {
  NnOp op = NnOp::kLayerNorm;
  bool is_double = false;
  bool index32 = false;
  int64_t rows = 0, cols = 0, cols2 = 0, inner = 0;
  int64_t batch = 0;  // batch norm's leading dimension
  const void* x = nullptr;
  const void* g = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;
  const void* mean = nullptr;
  const void* var = nullptr;
  const void* index = nullptr;
  void* out = nullptr;
  void* out2 = nullptr;
  void* out3 = nullptr;
  double eps = 0;
  double scale = 1;
  int64_t flag = 0;
  int64_t ignore = -100;
  NnPool pool;
  int64_t* error = nullptr;  // 3 int64: tag, index, bound (see the top of this file)
  int64_t tag = 1;
};

// How many units `a` has.
OVERLAP_HOST_DEVICE inline int64_t NnUnits(const NnArgs& a) {
  switch (a.op) {
    case NnOp::kLayerNorm:
    case NnOp::kLayerNormBackward:
    case NnOp::kNllLossBackward:
    case NnOp::kMseLossBackward:
    case NnOp::kEmbedding:
    case NnOp::kAttentionSoftmax:
    case NnOp::kAttentionSoftmaxBackward:
      return a.rows;
    case NnOp::kLayerNormParamBackward:
    case NnOp::kEmbeddingBackward:
      return a.cols;
    case NnOp::kBatchNorm:
    case NnOp::kBatchNormBackward:
      return a.cols;  // channels
    case NnOp::kMaxPool:
    case NnOp::kAvgPool:
      return a.pool.planes * a.pool.ho * a.pool.wo;
    case NnOp::kMaxPoolBackward:
    case NnOp::kAvgPoolBackward:
      return a.pool.planes;
    case NnOp::kIndexSelect:
      return a.batch * a.rows;
    case NnOp::kIndexAdd:
      return a.batch * a.cols;
    case NnOp::kNllLoss:
      return 1;
    case NnOp::kMseLoss:
      return a.flag == 0 ? a.rows : 1;
  }
  return 0;
}

namespace nn_internal {

OVERLAP_HOST_DEVICE inline int64_t IndexAt(const NnArgs& a, int64_t i) {
  return a.index32 ? static_cast<const int32_t*>(a.index)[i]
                   : static_cast<const int64_t*>(a.index)[i];
}

// Whether 0 <= i < bound; records the first bad index otherwise.
OVERLAP_HOST_DEVICE inline bool InRange(const NnArgs& a, int64_t i, int64_t bound) {
  if (i >= 0 && i < bound) return true;
  if (a.error != nullptr) {
#if defined(__CUDA_ARCH__)
    if (atomicCAS(reinterpret_cast<unsigned long long*>(a.error), 0ULL,
                  static_cast<unsigned long long>(a.tag)) == 0ULL) {
      a.error[1] = i;
      a.error[2] = bound;
    }
#else
    if (a.error[0] == 0) {
      a.error[0] = a.tag;
      a.error[1] = i;
      a.error[2] = bound;
    }
#endif
  }
  return false;
}

template <typename T>
OVERLAP_HOST_DEVICE inline double At(const void* p, int64_t i) {
  return static_cast<double>(static_cast<const T*>(p)[i]);
}

// The row-wise units the CPU runs most (normalizations): compiled on their own on the host
// (noinline), where GCC vectorizes their loops; inlined into NnRun's loop it did not.
#if defined(__CUDACC__)
#define OVERLAP_UNIT inline
#else
#define OVERLAP_UNIT inline __attribute__((noinline))
#endif

// The sum of eight partial sums, in a fixed order.
OVERLAP_HOST_DEVICE inline double Lanes(double (&lane)[8]) {
  const double s =
      ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (int l = 0; l < 8; ++l) lane[l] = 0;
  return s;
}

// fn(i, j, lane) for i < rows, j < n, j in blocks of eight with lane = j % 8 (the tails in
// turn): loops over partial sums that the compiler vectorizes.
template <typename F>
OVERLAP_HOST_DEVICE inline void ForEachLane(int64_t rows, int64_t n, F&& fn) {
  const int64_t n8 = n - n % 8;
  int tail = 0;  // the rows' tails rotate through the lanes: short rows (a 2 x 2 image's
                 // channel) would otherwise chain every element onto lane 0
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n8; j += 8) {
      for (int l = 0; l < 8; ++l) fn(i, j + l, l);
    }
    for (int64_t j = n8; j < n; ++j) {
      fn(i, j, tail);
      tail = (tail + 1) & 7;
    }
  }
}

// One unit of each operation, each its own function (NnUnit dispatches on the op).

template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_UNIT void LayerNormUnit(const NnArgs& a, int64_t u) {
  using std::sqrt;
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  T* out2 = static_cast<T*>(a.out2);
  T* out3 = static_cast<T*>(a.out3);
  const int64_t n = a.cols;
  const T* in = x + u * n;
  // Sums in eight independent lanes (the loops vectorize; one lane is latency-bound).
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t n8 = n - n % 8;
  for (int64_t j = 0; j < n8; j += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += in[j + l];
  }
  for (int64_t j = n8; j < n; ++j) lane[0] += in[j];
  const double s = Lanes(lane);
  const double mu = n > 0 ? s / n : 0;
  for (int64_t j = 0; j < n8; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const double d = in[j + l] - mu;
      lane[l] += d * d;
    }
  }
  for (int64_t j = n8; j < n; ++j) {
    const double d = in[j] - mu;
    lane[0] += d * d;
  }
  const double s2 = Lanes(lane);
  const double r = 1.0 / sqrt((n > 0 ? s2 / n : 0) + a.eps);
  out2[u] = static_cast<T>(mu);
  out3[u] = static_cast<T>(r);
  // The statistics in double, the normalization in T (as PyTorch's CPU kernel: float32
  // loops are twice as wide as double ones); one loop per affine case, no branch inside.
  const T m = static_cast<T>(mu), rt = static_cast<T>(r);
  const T* w = static_cast<const T*>(a.w);
  const T* b = static_cast<const T*>(a.b);
  T* o = out + u * n;
  if (w != nullptr && b != nullptr) {
    for (int64_t j = 0; j < n; ++j) o[j] = (in[j] - m) * rt * w[j] + b[j];
  } else if (w != nullptr) {
    for (int64_t j = 0; j < n; ++j) o[j] = (in[j] - m) * rt * w[j];
  } else if (b != nullptr) {
    for (int64_t j = 0; j < n; ++j) o[j] = (in[j] - m) * rt + b[j];
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = (in[j] - m) * rt;
  }
}

template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_UNIT void LayerNormBackwardUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  const int64_t n = a.cols;
  const double mu = At<T>(a.mean, u), r = At<T>(a.var, u);
  // Sums of dxhat and dxhat * xhat, in eight independent lanes each.
  double la[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto add = [&](int64_t j, int l) {
    const double xh = (x[u * n + j] - mu) * r;
    const double dxh = g[u * n + j] * (a.w != nullptr ? At<T>(a.w, j) : 1.0);
    la[l] += dxh;
    lb[l] += dxh * xh;
  };
  const int64_t n8 = n - n % 8;
  for (int64_t j = 0; j < n8; j += 8) {
    for (int l = 0; l < 8; ++l) add(j + l, l);
  }
  for (int64_t j = n8; j < n; ++j) add(j, 0);
  const double sa = Lanes(la), sb = Lanes(lb);
  // The gradient in T, the sums above in double (see LayerNormUnit).
  const T m = static_cast<T>(mu), rt = static_cast<T>(r);
  const T ma = static_cast<T>(sa / n), mb = static_cast<T>(sb / n);
  const T* w = static_cast<const T*>(a.w);
  const T* xr = x + u * n;
  const T* gr = g + u * n;
  T* o = out + u * n;
  if (w != nullptr) {
    for (int64_t j = 0; j < n; ++j) o[j] = rt * (gr[j] * w[j] - ma - (xr[j] - m) * rt * mb);
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = rt * (gr[j] - ma - (xr[j] - m) * rt * mb);
  }
}

template <typename T>
OVERLAP_HOST_DEVICE inline void LayerNormParamBackwardUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.g);
  T* out2 = static_cast<T*>(a.out2);
  T* out3 = static_cast<T*>(a.out3);
  const int64_t n = a.cols;
  double dw = 0, db = 0;
  for (int64_t i = 0; i < a.rows; ++i) {
    const double xh = (x[i * n + u] - At<T>(a.mean, i)) * At<T>(a.var, i);
    dw += g[i * n + u] * xh;
    db += g[i * n + u];
  }
  if (out2 != nullptr) out2[u] = static_cast<T>(dw);
  if (out3 != nullptr) out3[u] = static_cast<T>(db);
}

template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_UNIT void BatchNormUnit(const NnArgs& a, int64_t u) {
  using std::sqrt;
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  T* out2 = static_cast<T*>(a.out2);
  T* out3 = static_cast<T*>(a.out3);
  const int64_t ch = a.cols, inner = a.inner, count = a.batch * inner;
  double mu, inv;
  if (a.flag != 0) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight independent partial sums
    ForEachLane(a.batch, inner,
                [&](int64_t i, int64_t j, int l) { lane[l] += x[(i * ch + u) * inner + j]; });
    const double s = Lanes(lane);
    mu = count > 0 ? s / count : 0;
    ForEachLane(a.batch, inner, [&](int64_t i, int64_t j, int l) {
      const double d = x[(i * ch + u) * inner + j] - mu;
      lane[l] += d * d;
    });
    const double s2 = Lanes(lane);
    inv = 1.0 / sqrt((count > 0 ? s2 / count : 0) + a.eps);
    out2[u] = static_cast<T>(mu);
    out3[u] = static_cast<T>(inv);
  } else {
    mu = At<T>(a.mean, u);
    inv = 1.0 / sqrt(At<T>(a.var, u) + a.eps);
  }
  const double scale = a.w != nullptr ? At<T>(a.w, u) : 1.0;
  const double shift = a.b != nullptr ? At<T>(a.b, u) : 0.0;
  // out = x * alpha + beta with the channel's alpha and beta in the tensor's dtype, as
  // ATen's CPU kernel computes it: a loop the compiler vectorizes in T, not a double
  // expression per element. Like ATen's, it cancels in float32 when |mean| is far above the
  // standard deviation (beta = shift - mean * alpha): matching PyTorch's figures is the aim.
  const T alpha = static_cast<T>(inv * scale), beta = static_cast<T>(shift - mu * inv * scale);
  for (int64_t i = 0; i < a.batch; ++i) {
    const T* xr = x + (i * ch + u) * inner;
    T* o = out + (i * ch + u) * inner;
    for (int64_t j = 0; j < inner; ++j) o[j] = xr[j] * alpha + beta;
  }
}

template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_UNIT void BatchNormBackwardUnit(const NnArgs& a, int64_t u) {
  using std::sqrt;
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  T* out2 = static_cast<T*>(a.out2);
  T* out3 = static_cast<T*>(a.out3);
  const int64_t ch = a.cols, inner = a.inner, count = a.batch * inner;
  const bool training = a.flag != 0;
  const double mu = At<T>(a.mean, u);
  const double inv = training ? At<T>(a.var, u) : 1.0 / sqrt(At<T>(a.var, u) + a.eps);
  const double scale = a.w != nullptr ? At<T>(a.w, u) : 1.0;
  // sum g, sum g * xhat, in eight independent lanes each
  double lg[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lgx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  ForEachLane(a.batch, inner, [&](int64_t i, int64_t j, int l) {
    const int64_t at = (i * ch + u) * inner + j;
    lg[l] += g[at];
    lgx[l] += g[at] * (x[at] - mu) * inv;
  });
  const double sg = Lanes(lg), sgx = Lanes(lgx);
  if (out2 != nullptr) out2[u] = static_cast<T>(sgx);
  if (out3 != nullptr) out3[u] = static_cast<T>(sg);
  if (out == nullptr) return;
  // Per element in T with the channel's constants, as ATen's CPU kernel: training
  // (g - mean(g) - (x - mu) * k) * c with k = inv * sum(g xhat) / count, evaluation g * c.
  const T c = static_cast<T>(inv * scale);
  for (int64_t i = 0; i < a.batch; ++i) {
    const T* xr = x + (i * ch + u) * inner;
    const T* gr = g + (i * ch + u) * inner;
    T* o = out + (i * ch + u) * inner;
    if (training) {
      const T gm = static_cast<T>(count > 0 ? sg / count : 0), m = static_cast<T>(mu),
              k = static_cast<T>(count > 0 ? inv * sgx / count : 0);
      for (int64_t j = 0; j < inner; ++j) o[j] = (gr[j] - gm - (xr[j] - m) * k) * c;
    } else {
      for (int64_t j = 0; j < inner; ++j) o[j] = gr[j] * c;
    }
  }
}

// Max pooling's output element u, at (plane, oh, ow): MaxPoolUnit decodes u; the CPU
// kernel walks rows and passes all four (no divisions per element).
template <typename T>
OVERLAP_HOST_DEVICE inline void MaxPoolAt(const NnArgs& a, int64_t plane, int64_t oh, int64_t ow,
                                          int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const NnPool& p = a.pool;
  const T* in = x + plane * p.h * p.w;
  T best = static_cast<T>(-HUGE_VAL);
  int64_t at = -1;
  for (int64_t i = 0; i < p.kh; ++i) {
    const int64_t ih = oh * p.sh - p.ph + i * p.dh;
    if (ih < 0 || ih >= p.h) continue;
    for (int64_t j = 0; j < p.kw; ++j) {
      const int64_t iw = ow * p.sw - p.pw + j * p.dw;
      if (iw < 0 || iw >= p.w) continue;
      const T v = in[ih * p.w + iw];
      if (at < 0 || v > best || v != v) {  // ATen's rule: a NaN replaces, even a NaN
        best = v;
        at = ih * p.w + iw;
      }
    }
  }
  out[u] = best;
  static_cast<int64_t*>(a.out2)[u] = at;
}

template <typename T>
OVERLAP_HOST_DEVICE inline void MaxPoolUnit(const NnArgs& a, int64_t u) {
  const NnPool& p = a.pool;
  MaxPoolAt<T>(a, u / (p.ho * p.wo), (u / p.wo) % p.ho, u % p.wo, u);
}

template <typename T>
OVERLAP_HOST_DEVICE inline void MaxPoolBackwardUnit(const NnArgs& a, int64_t u) {
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  const NnPool& p = a.pool;
  const int64_t hw = p.h * p.w, ohw = p.ho * p.wo;
  for (int64_t i = 0; i < hw; ++i) out[u * hw + i] = T(0);
  for (int64_t i = 0; i < ohw; ++i) {
    const int64_t at = IndexAt(a, u * ohw + i);
    if (!InRange(a, at, hw)) continue;
    out[u * hw + at] += g[u * ohw + i];
  }
}

// Output (oh, ow)'s window in the input, clipped, and its divisor (ATen's avg_pool2d).
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};
OVERLAP_HOST_DEVICE inline AvgWindow AvgWindowOf(const NnArgs& a, int64_t oh, int64_t ow) {
  const NnPool& p = a.pool;
  int64_t h0 = oh * p.sh - p.ph, w0 = ow * p.sw - p.pw;
  int64_t h1 = h0 + p.kh < p.h + p.ph ? h0 + p.kh : p.h + p.ph;
  int64_t w1 = w0 + p.kw < p.w + p.pw ? w0 + p.kw : p.w + p.pw;
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < p.h ? h1 : p.h;
  w1 = w1 < p.w ? w1 : p.w;
  const double divisor = a.ignore > 0  ? static_cast<double>(a.ignore)
                         : a.flag != 0 ? static_cast<double>(padded)
                                       : static_cast<double>((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, divisor};
}

template <typename T>
OVERLAP_HOST_DEVICE inline void AvgPoolUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const NnPool& p = a.pool;
  const int64_t plane = u / (p.ho * p.wo), oh = (u / p.wo) % p.ho, ow = u % p.wo;
  const AvgWindow win = AvgWindowOf(a, oh, ow);
  const T* in = x + plane * p.h * p.w;
  double sum = 0;
  for (int64_t i = win.h0; i < win.h1; ++i) {
    for (int64_t j = win.w0; j < win.w1; ++j) sum += in[i * p.w + j];
  }
  out[u] = static_cast<T>(sum / win.divisor);
}

template <typename T>
OVERLAP_HOST_DEVICE inline void AvgPoolBackwardUnit(const NnArgs& a, int64_t u) {
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  const NnPool& p = a.pool;
  const int64_t hw = p.h * p.w;
  for (int64_t i = 0; i < hw; ++i) out[u * hw + i] = T(0);
  for (int64_t oh = 0; oh < p.ho; ++oh) {
    for (int64_t ow = 0; ow < p.wo; ++ow) {
      const AvgWindow win = AvgWindowOf(a, oh, ow);
      const T share = static_cast<T>(g[(u * p.ho + oh) * p.wo + ow] / win.divisor);
      for (int64_t i = win.h0; i < win.h1; ++i) {
        for (int64_t j = win.w0; j < win.w1; ++j) out[u * hw + i * p.w + j] += share;
      }
    }
  }
}

template <typename T>
OVERLAP_HOST_DEVICE inline void NllLossUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  T* out2 = static_cast<T*>(a.out2);
  double sum = 0, weight_sum = 0;
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t cls = IndexAt(a, i);
    double li = 0;
    if (cls != a.ignore) {
      if (!InRange(a, cls, a.cols)) return;
      const double wi = a.w != nullptr ? At<T>(a.w, cls) : 1.0;
      li = -wi * x[i * a.cols + cls];
      weight_sum += wi;
    }
    sum += li;
    if (a.flag == 0) out[i] = static_cast<T>(li);
  }
  if (a.flag != 0) out[0] = static_cast<T>(a.flag == 1 ? sum / weight_sum : sum);
  out2[0] = static_cast<T>(weight_sum);
}

template <typename T>
OVERLAP_HOST_DEVICE inline void NllLossBackwardUnit(const NnArgs& a, int64_t u) {
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  for (int64_t j = 0; j < a.cols; ++j) out[u * a.cols + j] = T(0);
  const int64_t cls = IndexAt(a, u);
  if (cls == a.ignore || !InRange(a, cls, a.cols)) return;
  const double wi = a.w != nullptr ? At<T>(a.w, cls) : 1.0;
  double gi = g[a.flag == 0 ? u : 0];
  if (a.flag == 1) gi /= At<T>(a.mean, 0);
  out[u * a.cols + cls] = static_cast<T>(-wi * gi);
}

template <typename T>
OVERLAP_HOST_DEVICE inline void MseLossUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const T* t = static_cast<const T*>(a.b);
  if (a.flag == 0) {
    const double d = static_cast<double>(x[u]) - t[u];
    out[u] = static_cast<T>(d * d);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < a.rows; ++i) {
    const double d = static_cast<double>(x[i]) - t[i];
    sum += d * d;
  }
  out[0] = static_cast<T>(a.flag == 1 ? sum / a.rows : sum);
}

template <typename T>
OVERLAP_HOST_DEVICE inline void MseLossBackwardUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  const T* t = static_cast<const T*>(a.b);
  const double scale = a.flag == 1 ? 2.0 / a.rows : 2.0;
  const double gi = g[a.flag == 0 ? u : 0];
  out[u] = static_cast<T>(gi * scale * (static_cast<double>(x[u]) - t[u]));
}

template <typename T>
OVERLAP_HOST_DEVICE inline void EmbeddingUnit(const NnArgs& a, int64_t u) {
  T* out = static_cast<T*>(a.out);
  const int64_t r = IndexAt(a, u);
  if (!InRange(a, r, a.cols2)) return;
  const T* w = static_cast<const T*>(a.w);
  for (int64_t j = 0; j < a.cols; ++j) out[u * a.cols + j] = w[r * a.cols + j];
}

template <typename T>
OVERLAP_HOST_DEVICE inline void EmbeddingBackwardUnit(const NnArgs& a, int64_t u) {
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  const int64_t d = a.cols;
  for (int64_t r = 0; r < a.cols2; ++r) out[r * d + u] = T(0);
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t r = IndexAt(a, i);
    if (!InRange(a, r, a.cols2) || r == a.ignore) continue;
    out[r * d + u] += g[i * d + u];
  }
}

template <typename T>
OVERLAP_HOST_DEVICE inline void AttentionSoftmaxUnit(const NnArgs& a, int64_t u) {
  using std::exp;
  using std::log;
  T* out = static_cast<T*>(a.out);
  T* out2 = static_cast<T*>(a.out2);
  T* row = out + u * a.cols;
  const int64_t i = a.inner > 0 ? u % a.inner : 0;
  const int64_t valid = a.flag != 0 ? (i + 1 < a.cols ? i + 1 : a.cols) : a.cols;
  double mx = -HUGE_VAL;
  for (int64_t j = 0; j < valid; ++j) {
    const double v = row[j];
    mx = mx < v ? v : mx;
  }
  double sum = 0;
  for (int64_t j = 0; j < valid; ++j) sum += exp(row[j] - mx);
  const double lse = valid > 0 ? mx + log(sum) : -HUGE_VAL;
  for (int64_t j = 0; j < a.cols; ++j) {
    row[j] = j < valid ? static_cast<T>(exp(row[j] - lse)) : T(0);
  }
  out2[u] = static_cast<T>(lse);
}

template <typename T>
OVERLAP_HOST_DEVICE inline void AttentionSoftmaxBackwardUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  const T* o = static_cast<const T*>(a.b);
  double di = 0;
  for (int64_t j = 0; j < a.inner; ++j) {
    di += static_cast<double>(g[u * a.inner + j]) * o[u * a.inner + j];
  }
  const T* prow = x + u * a.cols;
  T* dprow = out + u * a.cols;
  for (int64_t j = 0; j < a.cols; ++j) dprow[j] = static_cast<T>(prow[j] * (dprow[j] - di));
}

template <typename T>
OVERLAP_HOST_DEVICE inline void IndexSelectUnit(const NnArgs& a, int64_t u) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const int64_t p = u / a.rows, j = u % a.rows, r = IndexAt(a, j);
  if (!InRange(a, r, a.cols2)) return;
  for (int64_t q = 0; q < a.cols; ++q) out[u * a.cols + q] = x[(p * a.cols2 + r) * a.cols + q];
}

template <typename T>
OVERLAP_HOST_DEVICE inline void IndexAddUnit(const NnArgs& a, int64_t u) {
  T* out = static_cast<T*>(a.out);
  const T* src = static_cast<const T*>(a.b);
  const T scale = static_cast<T>(a.scale);
  const int64_t p = u / a.cols, q = u % a.cols;
  for (int64_t j = 0; j < a.rows; ++j) {
    const int64_t r = IndexAt(a, j);
    if (!InRange(a, r, a.cols2)) continue;
    out[(p * a.cols2 + r) * a.cols + q] += scale * src[(p * a.rows + j) * a.cols + q];
  }
}

}  // namespace nn_internal

// Unit `u` of `a` (u < NnUnits(a)), in element type T.
template <typename T>
OVERLAP_HOST_DEVICE inline void NnUnit(const NnArgs& a, int64_t u) {
  switch (a.op) {
    case NnOp::kLayerNorm:
      return nn_internal::LayerNormUnit<T>(a, u);
    case NnOp::kLayerNormBackward:
      return nn_internal::LayerNormBackwardUnit<T>(a, u);
    case NnOp::kLayerNormParamBackward:
      return nn_internal::LayerNormParamBackwardUnit<T>(a, u);
    case NnOp::kBatchNorm:
      return nn_internal::BatchNormUnit<T>(a, u);
    case NnOp::kBatchNormBackward:
      return nn_internal::BatchNormBackwardUnit<T>(a, u);
    case NnOp::kMaxPool:
      return nn_internal::MaxPoolUnit<T>(a, u);
    case NnOp::kMaxPoolBackward:
      return nn_internal::MaxPoolBackwardUnit<T>(a, u);
    case NnOp::kAvgPool:
      return nn_internal::AvgPoolUnit<T>(a, u);
    case NnOp::kAvgPoolBackward:
      return nn_internal::AvgPoolBackwardUnit<T>(a, u);
    case NnOp::kNllLoss:
      return nn_internal::NllLossUnit<T>(a, u);
    case NnOp::kNllLossBackward:
      return nn_internal::NllLossBackwardUnit<T>(a, u);
    case NnOp::kMseLoss:
      return nn_internal::MseLossUnit<T>(a, u);
    case NnOp::kMseLossBackward:
      return nn_internal::MseLossBackwardUnit<T>(a, u);
    case NnOp::kEmbedding:
      return nn_internal::EmbeddingUnit<T>(a, u);
    case NnOp::kEmbeddingBackward:
      return nn_internal::EmbeddingBackwardUnit<T>(a, u);
    case NnOp::kAttentionSoftmax:
      return nn_internal::AttentionSoftmaxUnit<T>(a, u);
    case NnOp::kAttentionSoftmaxBackward:
      return nn_internal::AttentionSoftmaxBackwardUnit<T>(a, u);
    case NnOp::kIndexSelect:
      return nn_internal::IndexSelectUnit<T>(a, u);
    case NnOp::kIndexAdd:
      return nn_internal::IndexAddUnit<T>(a, u);
  }
}

// Every unit of `a` in order, on the host (the CPU kernels and the emulated device).
inline void NnRunOnHost(const NnArgs& a) {
  const int64_t n = NnUnits(a);
  for (int64_t u = 0; u < n; ++u) {
    if (a.is_double) {
      NnUnit<double>(a, u);
    } else {
      NnUnit<float>(a, u);
    }
  }
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_NN_OPS_H_
