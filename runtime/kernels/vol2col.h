// The column rearrangement of a 3-D convolution (nn.cc's Im2Col / Col2Im for volumes): one
// row of `col` per (input channel, kernel tap), one column per output position, so that the
// convolution is a GEMM with the weight [og, cg kd kh kw]. Plain loops: correctness first;
// each output row's inside columns are found once, no test per element.
#ifndef OVERLAP_RUNTIME_KERNELS_VOL2COL_H_
#define OVERLAP_RUNTIME_KERNELS_VOL2COL_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/kernels/conv_args.h"

namespace overlap {
namespace internal {

// The output positions [lo, hi) along one axis (out of `out`) whose input position
// o * stride + off lies inside [0, in).
inline std::pair<int64_t, int64_t> InsideRange(int64_t off, int64_t stride, int64_t in,
                                               int64_t out) {
  const int64_t lo = off >= 0 ? 0 : std::min(out, (-off + stride - 1) / stride);
  const int64_t hi = in - 1 - off >= 0 ? std::min(out, (in - 1 - off) / stride + 1) : 0;
  return {lo, std::max(lo, hi)};
}

// fn(row of col, input row, lo, hi, off) for every (channel, tap, od, oh) of the volume x
// [cg, d, h, w] whose input row (id, ih) is inside; fn_pad(row of col) for the rest. Output
// column ow reads input column ow * sw + off, inside for ow in [lo, hi).
template <typename F, typename Pad>
void ForEachVolumeRow(const ConvGeometry& g, int64_t ld, F&& fn, Pad&& fn_pad) {
  for (int64_t ci = 0; ci < g.cg; ++ci) {
    for (int64_t a = 0; a < g.kd; ++a) {
      for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t tap = ((ci * g.kd + a) * g.kh + i) * g.kw + j;
          const int64_t off = j * g.dw - g.pw;
          const auto [lo, hi] = InsideRange(off, g.sw, g.w, g.wo);
          for (int64_t z = 0; z < g.od; ++z) {
            const int64_t id = z * g.sd - g.pd + a * g.dd;
            for (int64_t y = 0; y < g.ho; ++y) {
              const int64_t ih = y * g.sh - g.ph + i * g.dh;
              const int64_t at = tap * ld + (z * g.ho + y) * g.wo;
              if (id < 0 || id >= g.d || ih < 0 || ih >= g.h) {
                fn_pad(at);
                continue;
              }
              fn(at, ((ci * g.d + id) * g.h + ih) * g.w, lo, hi, off);
            }
          }
        }
      }
    }
  }
}

}  // namespace internal

// col[(((ci kd + a) kh + i) kw + j)][(z ho + y) wo + ow] = x[ci][z sd - pd + a dd][y sh - ph +
// i dh][ow sw - pw + j dw] (0 in the padding), col's rows `ld` apart, for one image's group of
// channels x [cg, d, h, w]. O(cg kd kh kw od ho wo).
template <typename T>
void Vol2Col(const ConvGeometry& g, const T* x, T* col, int64_t ld) {
  internal::ForEachVolumeRow(
      g, ld,
      [&](int64_t at, int64_t src, int64_t lo, int64_t hi, int64_t off) {
        T* out = col + at;
        const T* in = x + src;
        std::fill_n(out, lo, T{0});
        for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow * g.sw + off];
        std::fill_n(out + hi, g.wo - hi, T{0});
      },
      [&](int64_t at) { std::fill_n(col + at, g.wo, T{0}); });
}

// The adjoint of Vol2Col: accumulates col (rows `ld` apart) into x [cg, d, h, w].
template <typename T>
void Col2Vol(const ConvGeometry& g, const T* col, T* x, int64_t ld) {
  internal::ForEachVolumeRow(
      g, ld,
      [&](int64_t at, int64_t src, int64_t lo, int64_t hi, int64_t off) {
        const T* from = col + at;
        T* in = x + src;
        for (int64_t ow = lo; ow < hi; ++ow) in[ow * g.sw + off] += from[ow];
      },
      [](int64_t) {});
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_VOL2COL_H_
