// Argument reading shared by the convolution, pooling and attention kernels of every backend (the
// CPU's im2col + GEMM, the CUDA backend's cuDNN): one reading, one set of errors.
#ifndef OVERLAP_RUNTIME_KERNELS_CONV_ARGS_H_
#define OVERLAP_RUNTIME_KERNELS_CONV_ARGS_H_

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
