// Argument reading shared by the convolution, pooling and attention kernels of every backend (the
// CPU's im2col + GEMM, the CUDA backend's cuDNN): one reading, one set of errors.
#ifndef OVERLAP_RUNTIME_KERNELS_CONV_ARGS_H_
#define OVERLAP_RUNTIME_KERNELS_CONV_ARGS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/nn_ops.h"

namespace overlap {

// A convolution's geometry, 1-, 2- or 3-D (spatial): input [n, c, d, h, w], weight [o, c /
// groups, kd, kh, kw], output [n, o, od, ho, wo]; cg / og the channels per group. A 2-D
// convolution has a unit depth (d = kd = od = 1, sd = dd = 1, pd = 0), a 1-D one a unit depth
// and height as well: its tensors [n, c, w] are, in memory, [n, c, 1, 1, w], so the 2-D
// kernels run it unchanged. A transposed convolution (transposed true) is the adjoint of the
// convolution this describes: its input is [n, o, od, ho, wo], its weight [o, c / groups, kd,
// kh, kw] (PyTorch's [in, out / groups, kernel...]) and its output [n, c, d, h, w].
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, groups, cg, og, ho, wo;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t d = 1, kd = 1, od = 1, sd = 1, pd = 0, dd = 1;
  int spatial = 2;  // 1, 2 or 3: the rank of the tensors less 2
  bool transposed = false;
};

// Positions of one image's plane of input (d h w), of output (od ho wo), of the kernel
// (kd kh kw).
inline int64_t InputPositions(const ConvGeometry& g) { return g.d * g.h * g.w; }
inline int64_t OutputPositions(const ConvGeometry& g) { return g.od * g.ho * g.wo; }
inline int64_t KernelPositions(const ConvGeometry& g) { return g.kd * g.kh * g.kw; }

// The described convolution's input [n, c, spatial...] and output [n, o, spatial...] shapes,
// of rank spatial + 2; ConvResultShape the call's result: the output, or a transposed
// convolution's input. O(1).
std::vector<int64_t> ConvInShape(const ConvGeometry& g);
std::vector<int64_t> ConvOutShape(const ConvGeometry& g);
inline std::vector<int64_t> ConvResultShape(const ConvGeometry& g) {
  return g.transposed ? ConvInShape(g) : ConvOutShape(g);
}

// A per-dimension argument (stride, padding, ...) of `n` spatial dimensions: n ints, one int or
// a one-element list for all of them (ATen's rule), or missing / None / empty for `fallback`
// n times. InvalidArgument naming the node otherwise. O(n).
absl::StatusOr<std::vector<int64_t>> SpatialArg(KernelCall& c, absl::string_view name, size_t n,
                                                int64_t fallback);

// A pair argument: SpatialArg of two dimensions. O(1).
absl::StatusOr<std::vector<int64_t>> PairArg(KernelCall& c, absl::string_view name,
                                             int64_t fallback);

// aten.convolution's stride, padding, dilation, transposed, output_padding, groups, read by
// name, for input and weight of rank 3, 4 or 5 (1-, 2-, 3-D); errors (naming the node) for
// other ranks, shapes that do not fit, non-positive strides or dilations, negative padding, an
// output_padding not below the stride or the dilation, an empty output. O(1).
absl::StatusOr<ConvGeometry> ConvArgs(KernelCall& c, const Tensor& x, const Tensor& wt);

// max_pool2d_with_indices' kernel_size, stride, padding, dilation, ceil_mode, read by name; planes
// are every dimension of `x` but the last two. Errors (naming the node) for bad values, an input of
// fewer than 3 dimensions, an empty output. O(1).
absl::StatusOr<NnPool> PoolArgs(KernelCall& c, const Tensor& x);

// An adaptive pooling's geometry, 2- or 3-D: `planes` planes [d, h, w] (a 2-D pooling's d and
// out[0] are 1) pooled to `out`. Output position i along an axis pools input positions
// [AdaptiveStart(i), AdaptiveEnd(i)) of it (ATen's windows: they overlap or repeat when the
// output is the larger).
struct AdaptiveGeometry {
  int spatial = 2;  // 2 or 3
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1};
  int64_t InVolume() const { return in[0] * in[1] * in[2]; }
  int64_t OutVolume() const { return out[0] * out[1] * out[2]; }
  // The pooled tensor's shape: x's with its last `spatial` sizes replaced by out's.
  std::vector<int64_t> OutShape(const std::vector<int64_t>& x_shape) const;
};
inline int64_t AdaptiveStart(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
inline int64_t AdaptiveEnd(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

// The geometry of an adaptive pooling of `spatial` (2 or 3) dimensions: `x` of rank spatial +
// 1 or spatial + 2 with no empty non-batch dimension, output_size `spatial` positive sizes (or
// one for all). Errors name the node. O(1).
absl::StatusOr<AdaptiveGeometry> AdaptiveArgs(KernelCall& c, const Tensor& x, int spatial);

// The geometry of an adaptive pooling's backward: `self` as AdaptiveArgs takes it, the pooled
// size read from `grad_output` (same rank, same planes). Errors name the node. O(1).
absl::StatusOr<AdaptiveGeometry> AdaptiveBackwardArgs(KernelCall& c, const Tensor& grad,
                                                      const Tensor& self, int spatial);

// Attention's shape: query [b, h, s, d], key [b, hk, sk, d], value [b, hk, sk, dv]; query
// head i reads key / value head i / (h / hk) (grouped-query attention when hk < h).
struct AttnShape {
  int64_t b, h, hk, s, sk, d, dv;
  double scale;
  bool causal;
};

// _scaled_dot_product_flash_attention's (and its backward's) shapes, with is_causal,
// dropout_p and the `scale` keyword (default
// 1 / sqrt(d)); errors (naming the node) for dropout, shapes that do not fit, mixed dtypes.
// O(1).
absl::StatusOr<AttnShape> AttnArgs(KernelCall& c, const Tensor& q, const Tensor& k,
                                   const Tensor& v);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_CONV_ARGS_H_
