#include "runtime/kernels/elementwise_table.h"

namespace overlap {

absl::Span<const EwRow> ElementwiseRows() {
  static constexpr EwRow kRows[] = {
      {"aten.relu.default", EwForm::kUnary, EwOp::kRelu},  // NaN stays NaN
      {"aten.silu.default", EwForm::kUnary, EwOp::kSilu},
      {"aten.hardswish.default", EwForm::kUnary, EwOp::kHardswish},
      {"aten.hardsigmoid.default", EwForm::kUnary, EwOp::kHardsigmoid},
      {"aten.leaky_relu.default", EwForm::kUnary, EwOp::kLeakyRelu, "negative_slope"},
      {"aten.rsqrt.default", EwForm::kUnaryFloat, EwOp::kRsqrt},
      {"aten.sqrt.default", EwForm::kUnaryFloat, EwOp::kSqrt},
      {"aten.floor.default", EwForm::kUnary, EwOp::kFloor},
      {"aten.reciprocal.default", EwForm::kUnaryFloat, EwOp::kReciprocal},
      {"aten.sigmoid.default", EwForm::kUnaryFloat, EwOp::kSigmoid},
      {"aten.tanh.default", EwForm::kUnaryFloat, EwOp::kTanh},
      {"aten.exp.default", EwForm::kUnaryFloat, EwOp::kExp},
      {"aten.sin.default", EwForm::kUnaryFloat, EwOp::kSin},
      {"aten.cos.default", EwForm::kUnaryFloat, EwOp::kCos},
      {"aten.log.default", EwForm::kUnaryFloat, EwOp::kLog},
      {"aten.silu_backward.default", EwForm::kGradInput, EwOp::kSiluBackward},
      {"aten.hardswish_backward.default", EwForm::kGradInput, EwOp::kHardswishBackward},
      {"aten.hardsigmoid_backward.default", EwForm::kGradInput, EwOp::kHardsigmoidBackward},
      // ATen's rule: zero where self <= threshold (a NaN self passes the gradient through).
      {"aten.threshold_backward.default", EwForm::kGradInput, EwOp::kThresholdBackward,
       "threshold"},
      {"aten.sigmoid_backward.default", EwForm::kGradResult, EwOp::kSigmoidBackward},
      {"aten.tanh_backward.default", EwForm::kGradResult, EwOp::kTanhBackward},
  };
  return kRows;
}

}  // namespace overlap
