// Pooling over volumes and adaptive max pooling (ATen's CPU semantics): max_pool3d_with_indices,
// avg_pool3d and their backwards; adaptive_max_pool2d / 3d and their backwards. Direct loops over
// each window, planes split over the pool. Max pooling's indices are int64 offsets into one plane
// (d h w, or h w), as ATen's.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/core/parallel.h"
#include "runtime/kernels/conv_args.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

// A 3-D pooling's geometry: `planes` planes [d, h, w] (axes 0, 1, 2) pooled to out; window
// kernel k, stride s, padding p, dilation dil along each axis.
struct Pool3 {
  int64_t planes = 0;
  std::array<int64_t, 3> in{}, k{}, s{}, p{}, dil{}, out{};
  int64_t InVolume() const { return in[0] * in[1] * in[2]; }
  int64_t OutVolume() const { return out[0] * out[1] * out[2]; }
};

// ATen's pooling_output_shape: floor((in + 2 p - dil (k - 1) - 1) / s) + 1 (ceil with
// ceil_mode, the last window starting inside the input or the left padding); 0 when the
// window does not fit.
int64_t PooledSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * p - dil * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// max_pool3d's / avg_pool3d's kernel_size, stride (empty: the kernel size), padding, dilation
// (1 where the op has none) and ceil_mode for `x` [C, D, H, W] or [N, C, D, H, W]. Errors
// (naming the node) for other ranks, an empty volume, bad values, an empty output. O(1).
absl::StatusOr<Pool3> Pool3Args(KernelCall& c, const Tensor& x) {
  constexpr int64_t kUnset = -1;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> k, SpatialArg(c, "kernel_size", 3, 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> s, SpatialArg(c, "stride", 3, kUnset));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> p, SpatialArg(c, "padding", 3, 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, SpatialArg(c, "dilation", 3, 1));
  OVERLAP_ASSIGN_OR_RETURN(bool ceil_mode, c.BoolArg("ceil_mode"));
  const Value* stride = c.Arg("stride");
  if (stride == nullptr || stride->is_none() ||
      (stride->kind() == Value::Kind::kList && stride->items().empty())) {
    s = k;  // ATen: an empty stride means the kernel size
  }
  if (x.dim() != 4 && x.dim() != 5) {
    return c.Error(absl::StrCat("3-D pooling input ", x.DebugString(),
                                " should be [C, D, H, W] or [N, C, D, H, W]"));
  }
  Pool3 g;
  g.planes = Prod(x.shape(), 0, x.dim() - 3);
  for (int i = 0; i < 3; ++i) {
    g.in[i] = x.shape()[x.dim() - 3 + i];
    g.k[i] = k[i], g.s[i] = s[i], g.p[i] = p[i], g.dil[i] = dil[i];
    if (g.in[i] <= 0)
      return c.Error(absl::StrCat("3-D pooling input ", x.DebugString(), " is empty"));
    if (k[i] <= 0 || s[i] <= 0 || dil[i] <= 0 || p[i] < 0) {
      return c.Error("kernel_size, stride and dilation must be positive, padding non-negative");
    }
    if (2 * p[i] > k[i]) return c.Error("padding must be at most half the kernel size");
    g.out[i] = PooledSize(g.in[i], k[i], s[i], p[i], dil[i], ceil_mode);
    if (g.out[i] <= 0) return c.Error("the pooling window is larger than the padded input");
  }
  return g;
}

// x's shape with its last three dimensions pooled.
std::vector<int64_t> PooledShape(const Tensor& x, const Pool3& g) {
  std::vector<int64_t> shape = x.shape();
  for (int i = 0; i < 3; ++i) shape[shape.size() - 3 + i] = g.out[i];
  return shape;
}

// The window taps in bounds along axis `a` for output position o: [first, last), the window
// starting at input position origin.
struct Taps {
  int64_t origin, first, last;
};
Taps TapsOf(const Pool3& g, int a, int64_t o) {
  Taps t{o * g.s[a] - g.p[a], 0, g.k[a]};
  while (t.first < t.last && t.origin + t.first * g.dil[a] < 0) ++t.first;
  while (t.last > t.first && t.origin + (t.last - 1) * g.dil[a] >= g.in[a]) --t.last;
  return t;
}

// fn(plane, z, y) for every row of outputs, rows split over the pool; `row_work` the
// elements one row reads.
template <typename F>
void ForEachOutputRow(const Pool3& g, int64_t row_work, F&& fn) {
  const int64_t rows = g.planes * g.out[0] * g.out[1];
  ParallelFor(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          fn(r / (g.out[0] * g.out[1]), (r / g.out[1]) % g.out[0], r % g.out[1]);
        }
      },
      kParallelGrain / std::max<int64_t>(row_work, 1) + 1);
}

Results MaxPool3d(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const Pool3 g, Pool3Args(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const std::vector<int64_t> shape = PooledShape(x, g);
  return MaxPoolWithIndices(c, x, shape, [&](const auto* xs, auto* os, int64_t* is) {
    using T = std::remove_pointer_t<decltype(os)>;
    const int64_t hw = g.in[1] * g.in[2];
    ForEachOutputRow(g, g.out[2] * g.k[0] * g.k[1] * g.k[2],
                     [&](int64_t plane, int64_t z, int64_t y) {
                       const T* in = xs + plane * g.InVolume();
                       const Taps td = TapsOf(g, 0, z), th = TapsOf(g, 1, y);
                       const int64_t row = ((plane * g.out[0] + z) * g.out[1] + y) * g.out[2];
                       for (int64_t ox = 0; ox < g.out[2]; ++ox) {
                         const Taps tw = TapsOf(g, 2, ox);
                         // ATen's rule: the first maximum in window order; a NaN replaces, even a
                         // NaN.
                         T best = static_cast<T>(-HUGE_VAL);
                         int64_t at = -1;
                         for (int64_t a = td.first; a < td.last; ++a) {
                           for (int64_t i = th.first; i < th.last; ++i) {
                             const int64_t base = (td.origin + a * g.dil[0]) * hw +
                                                  (th.origin + i * g.dil[1]) * g.in[2] + tw.origin;
                             for (int64_t j = tw.first; j < tw.last; ++j) {
                               const T v = in[base + j * g.dil[2]];
                               if (at < 0 || v > best || v != v) {
                                 best = v;
                                 at = base + j * g.dil[2];
                               }
                             }
                           }
                         }
                         os[row + ox] = best;
                         is[row + ox] = at;
                       }
                     });
  });
}

// grad [planes, out] scattered into a zeroed result of self's shape at indices [planes, out]
// (offsets into a plane of `plane_size`): max pooling's backward, 3-D and adaptive alike.
// An index outside the plane is an error naming the node.
Results ScatterByIndices(KernelCall& c, const Tensor& g0, const Tensor& x, const Tensor& idx0,
                         int64_t planes, int64_t plane_size) {
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, idx0, "indices"));
  if (g0.dtype() != x.dtype()) return c.Error("grad_output and self differ in dtype");
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, idx0));
  const int64_t per_plane = planes == 0 ? 0 : g.numel() / planes;
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    const T* gs = g.data<T>();
    T* os = out.data<T>();
    std::atomic<bool> failed{false};
    std::atomic<int64_t> bad{0};
    ParallelFor(
        planes,
        [&](int64_t begin, int64_t end) {
          for (int64_t plane = begin; plane < end; ++plane) {
            for (int64_t i = plane * per_plane; i < (plane + 1) * per_plane; ++i) {
              const int64_t at = IndexAt(idx, i);
              if (at < 0 || at >= plane_size) {
                bad.store(at);
                failed.store(true);
                continue;
              }
              os[plane * plane_size + at] += gs[i];
            }
          }
        },
        kParallelGrain / std::max<int64_t>(per_plane, 1) + 1);
    if (failed.load()) {
      return c.Error(
          absl::StrCat("pooling index ", bad.load(), " out of range [0, ", plane_size, ")"));
    }
    return std::vector<Tensor>{out};
  });
}

Results MaxPool3dBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, c.TensorArg("indices"));
  OVERLAP_ASSIGN_OR_RETURN(const Pool3 p, Pool3Args(c, x));
  const std::vector<int64_t> shape = PooledShape(x, p);
  if (g.shape() != shape || idx.shape() != shape) {
    return c.Error(absl::StrCat("grad_output ", g.DebugString(), " and indices ", idx.DebugString(),
                                " should be [", absl::StrJoin(shape, ", "), "]"));
  }
  return ScatterByIndices(c, g, x, idx, p.planes, p.InVolume());
}

// Output (z, y, ox)'s window clipped to the input, [lo, hi) per axis, and its divisor (ATen's
// avg_pool3d: the window clipped to the padded input counts with count_include_pad, else
// only its inside; divisor_override, when positive, replaces either).
struct AvgWindow3 {
  std::array<int64_t, 3> lo, hi;
  double divisor;
};
AvgWindow3 AvgWindowOf(const Pool3& g, const std::array<int64_t, 3>& o, bool include_pad,
                       int64_t divisor_override) {
  AvgWindow3 w;
  int64_t padded = 1, inside = 1;
  for (int a = 0; a < 3; ++a) {
    const int64_t start = o[a] * g.s[a] - g.p[a];
    const int64_t end = std::min(start + g.k[a], g.in[a] + g.p[a]);
    padded *= end - start;
    w.lo[a] = std::max<int64_t>(start, 0);
    w.hi[a] = std::max(w.lo[a], std::min(end, g.in[a]));
    inside *= w.hi[a] - w.lo[a];
  }
  w.divisor = divisor_override > 0 ? static_cast<double>(divisor_override)
              : include_pad        ? static_cast<double>(padded)
                                   : static_cast<double>(inside);
  return w;
}

// avg_pool3d's count_include_pad and divisor_override (0 for None); a non-positive override is
// an error naming the node.
absl::Status AvgOptions(KernelCall& c, bool& include_pad, int64_t& divisor_override) {
  OVERLAP_ASSIGN_OR_RETURN(include_pad, c.BoolArg("count_include_pad"));
  divisor_override = 0;
  if (const Value* d = c.Arg("divisor_override"); d != nullptr && !d->is_none()) {
    OVERLAP_ASSIGN_OR_RETURN(divisor_override, c.IntArg("divisor_override"));
    if (divisor_override <= 0) return c.Error("divisor_override must be positive");
  }
  return absl::OkStatus();
}

// fn(window, output offset, input plane offset) for every output element of `g`.
template <typename F>
void ForEachAvgWindow(const Pool3& g, bool include_pad, int64_t divisor_override, F&& fn) {
  ForEachOutputRow(g, g.out[2] * g.k[0] * g.k[1] * g.k[2],
                   [&](int64_t plane, int64_t z, int64_t y) {
                     const int64_t row = ((plane * g.out[0] + z) * g.out[1] + y) * g.out[2];
                     for (int64_t ox = 0; ox < g.out[2]; ++ox) {
                       fn(AvgWindowOf(g, {z, y, ox}, include_pad, divisor_override), row + ox,
                          plane * g.InVolume());
                     }
                   });
}

Results AvgPool3d(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const Pool3 g, Pool3Args(c, x0));
  bool include_pad;
  int64_t divisor_override;
  OVERLAP_RETURN_IF_ERROR(AvgOptions(c, include_pad, divisor_override));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), PooledShape(x, g)));
    const T* xs = x.data<T>();
    T* os = out.data<T>();
    const int64_t hw = g.in[1] * g.in[2];
    ForEachAvgWindow(g, include_pad, divisor_override,
                     [&](const AvgWindow3& w, int64_t at, int64_t plane) {
                       double sum = 0;
                       for (int64_t a = w.lo[0]; a < w.hi[0]; ++a) {
                         for (int64_t i = w.lo[1]; i < w.hi[1]; ++i) {
                           const T* row = xs + plane + a * hw + i * g.in[2];
                           for (int64_t j = w.lo[2]; j < w.hi[2]; ++j) sum += row[j];
                         }
                       }
                       os[at] = w.divisor > 0 ? static_cast<T>(sum / w.divisor) : T{0};
                     });
    return std::vector<Tensor>{out};
  });
}

Results AvgPool3dBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const Pool3 g, Pool3Args(c, x));
  bool include_pad;
  int64_t divisor_override;
  OVERLAP_RETURN_IF_ERROR(AvgOptions(c, include_pad, divisor_override));
  if (g0.shape() != PooledShape(x, g) || g0.dtype() != x.dtype()) {
    return c.Error(absl::StrCat("grad_output ", g0.DebugString(), " does not match the pooling of ",
                                x.DebugString()));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor gy, Contiguous(c, g0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), x.shape()));
    const T* gs = gy.data<T>();
    T* os = out.data<T>();
    const int64_t hw = g.in[1] * g.in[2];
    // Windows overlap within a plane: each plane is one unit of work.
    ParallelFor(
        g.planes,
        [&](int64_t begin, int64_t end) {
          for (int64_t plane = begin; plane < end; ++plane) {
            for (int64_t z = 0; z < g.out[0]; ++z) {
              for (int64_t y = 0; y < g.out[1]; ++y) {
                for (int64_t ox = 0; ox < g.out[2]; ++ox) {
                  const AvgWindow3 w = AvgWindowOf(g, {z, y, ox}, include_pad, divisor_override);
                  if (w.divisor <= 0) continue;
                  const T share = static_cast<T>(
                      gs[((plane * g.out[0] + z) * g.out[1] + y) * g.out[2] + ox] / w.divisor);
                  for (int64_t a = w.lo[0]; a < w.hi[0]; ++a) {
                    for (int64_t i = w.lo[1]; i < w.hi[1]; ++i) {
                      T* row = os + plane * g.InVolume() + a * hw + i * g.in[2];
                      for (int64_t j = w.lo[2]; j < w.hi[2]; ++j) row[j] += share;
                    }
                  }
                }
              }
            }
          }
        },
        kParallelGrain / std::max<int64_t>(g.OutVolume() * g.k[0] * g.k[1] * g.k[2], 1) + 1);
    return std::vector<Tensor>{out};
  });
}

// ---- adaptive max pooling ----

// adaptive_max_pool2d / adaptive_max_pool3d: the first maximum of each window (a NaN replaces,
// even a NaN: ATen's rule) and its offset within the plane.
Results AdaptiveMaxPool(KernelCall& c, int spatial) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const AdaptiveGeometry g, AdaptiveArgs(c, x0, spatial));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const auto& in = g.in;
  const auto& out = g.out;
  return MaxPoolWithIndices(
      c, x, g.OutShape(x.shape()), [&](const auto* xs, auto* os, int64_t* is) {
        using T = std::remove_pointer_t<decltype(os)>;
        // One task per output row (plane, z, y).
        ParallelFor(
            g.planes * out[0] * out[1],
            [&](int64_t begin, int64_t end) {
              for (int64_t r = begin; r < end; ++r) {
                const int64_t plane = r / (out[0] * out[1]);
                const int64_t z = r / out[1] % out[0], y = r % out[1];
                const int64_t d0 = AdaptiveStart(z, out[0], in[0]),
                              d1 = AdaptiveEnd(z, out[0], in[0]);
                const int64_t h0 = AdaptiveStart(y, out[1], in[1]),
                              h1 = AdaptiveEnd(y, out[1], in[1]);
                const T* plane_in = xs + plane * g.InVolume();
                for (int64_t ox = 0; ox < out[2]; ++ox) {
                  const int64_t w0 = AdaptiveStart(ox, out[2], in[2]);
                  const int64_t w1 = AdaptiveEnd(ox, out[2], in[2]);
                  int64_t at = (d0 * in[1] + h0) * in[2] + w0;
                  T best = static_cast<T>(-HUGE_VAL);
                  for (int64_t k = d0; k < d1; ++k) {
                    for (int64_t i = h0; i < h1; ++i) {
                      const int64_t row = (k * in[1] + i) * in[2];
                      for (int64_t j = w0; j < w1; ++j) {
                        const T v = plane_in[row + j];
                        if (v > best || v != v) {
                          best = v;
                          at = row + j;
                        }
                      }
                    }
                  }
                  os[r * out[2] + ox] = best;
                  is[r * out[2] + ox] = at;
                }
              }
            },
            kParallelGrain /
                    std::max<int64_t>(g.InVolume() / std::max<int64_t>(out[0] * out[1], 1), 1) +
                1);
      });
}

Results AdaptiveMaxPoolBackward(KernelCall& c, int spatial) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, c.TensorArg("indices"));
  OVERLAP_ASSIGN_OR_RETURN(const AdaptiveGeometry geo, AdaptiveBackwardArgs(c, g, x, spatial));
  if (idx.shape() != g.shape()) {
    return c.Error(absl::StrCat("indices ", idx.DebugString(), " should have grad_output's shape ",
                                g.DebugString()));
  }
  return ScatterByIndices(c, g, x, idx, geo.planes, geo.InVolume());
}

}  // namespace
}  // namespace kernels

void RegisterPoolNdKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: this file's kernels
  r.Register("aten.max_pool3d_with_indices.default", MaxPool3d);
  r.Register("aten.max_pool3d_with_indices_backward.default", MaxPool3dBackward);
  r.Register("aten.avg_pool3d.default", AvgPool3d);
  r.Register("aten.avg_pool3d_backward.default", AvgPool3dBackward);
  r.Register("aten.adaptive_max_pool2d.default",
             [](KernelCall& c) { return AdaptiveMaxPool(c, 2); });
  r.Register("aten.adaptive_max_pool2d_backward.default",
             [](KernelCall& c) { return AdaptiveMaxPoolBackward(c, 2); });
  r.Register("aten.adaptive_max_pool3d.default",
             [](KernelCall& c) { return AdaptiveMaxPool(c, 3); });
  r.Register("aten.adaptive_max_pool3d_backward.default",
             [](KernelCall& c) { return AdaptiveMaxPoolBackward(c, 3); });
}

}  // namespace overlap
