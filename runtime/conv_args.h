// Argument reading shared by the convolution kernels of every backend (the CPU's im2col +
// GEMM, the CUDA backend's cuDNN): one reading, one set of errors.
#ifndef OVERLAP_RUNTIME_CONV_ARGS_H_
#define OVERLAP_RUNTIME_CONV_ARGS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/kernel.h"

namespace overlap {

// A 2-D convolution's geometry: input [n, c, h, w], weight [o, c / groups, kh, kw], output
// [n, o, ho, wo]; cg / og the channels per group.
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, groups, cg, og, ho, wo;
  int64_t sh, sw, ph, pw, dh, dw;
};

// A pair argument (stride, padding, ...): two ints, one int for both, or missing / None /
// empty for `fallback` twice. InvalidArgument naming the node otherwise. O(1).
absl::StatusOr<std::vector<int64_t>> PairArg(KernelCall& c, int pos, absl::string_view name,
                                             int64_t fallback);

// aten.convolution's stride, padding, dilation, transposed, groups, read from positions
// `first`..; errors (naming the node) for transposed or non-2-D convolutions, shapes that do
// not fit, non-positive strides or dilations, negative padding, an empty output. O(1).
absl::StatusOr<ConvGeometry> ConvArgs(KernelCall& c, const Tensor& x, const Tensor& wt, int first);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONV_ARGS_H_
