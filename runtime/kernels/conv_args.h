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

// A 2-D convolution's geometry: input [n, c, h, w], weight [o, c / groups, kh, kw], output
// [n, o, ho, wo]; cg / og the channels per group. A transposed convolution (transposed
// true) is the adjoint of the convolution this describes: its input is [n, o, ho, wo], its
// weight [o, c / groups, kh, kw] (PyTorch's [in, out / groups, kh, kw]) and its output
// [n, c, h, w].
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, groups, cg, og, ho, wo;
  int64_t sh, sw, ph, pw, dh, dw;
  bool transposed = false;
};

// A pair argument (stride, padding, ...): two ints, one int for both, or missing / None /
// empty for `fallback` twice. InvalidArgument naming the node otherwise. O(1).
absl::StatusOr<std::vector<int64_t>> PairArg(KernelCall& c, absl::string_view name,
                                             int64_t fallback);

// aten.convolution's stride, padding, dilation, transposed, output_padding, groups, read by
// name; errors (naming the node) for non-2-D convolutions, shapes that do not fit,
// non-positive strides or dilations, negative padding, an output_padding not below the stride
// or the dilation, an empty output. O(1).
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
