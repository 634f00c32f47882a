// The elementwise ops that are one formula of elementwise_ops.h, by target: which EwOp, which
// operands, which argument gives the formula's scalar. The one list both backends register
// from (the CPU kernels, kernels/elementwise.cc; the CUDA device kernel's planners,
// runtime/cuda/cuda_kernels.cc), so an op of this kind is its schema line, its formula and
// its row here. Ops with more to read (add's alpha and a tensor or number operand, gelu's
// approximation, pow's exponent, leaky_relu_backward's refusal) register their own kernels
// and planners beside it.
#ifndef OVERLAP_RUNTIME_KERNELS_ELEMENTWISE_TABLE_H_
#define OVERLAP_RUNTIME_KERNELS_ELEMENTWISE_TABLE_H_

#include "absl/types/span.h"
#include "runtime/kernels/elementwise_ops.h"

namespace overlap {

// Where a row's operands come from.
enum class EwForm {
  kUnary,       // op(self), floating self only (activations)
  kUnaryFloat,  // op(self); bool and integer self computed in the default float dtype (exp)
  kGradInput,   // op(grad_output, self): a backward written in the forward's input
  kGradResult,  // op(grad_output, output): a backward written in the forward's result
};

struct EwRow {
  const char* target;
  EwForm form;
  EwOp op;
  // The argument whose number is the formula's s (threshold_backward's threshold,
  // leaky_relu's negative_slope); nullptr: s is 0.
  const char* scalar = nullptr;
};

// Every row, in a fixed order. O(1).
absl::Span<const EwRow> ElementwiseRows();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_ELEMENTWISE_TABLE_H_
