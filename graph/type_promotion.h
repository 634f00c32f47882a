// Type promotion: the dtype of an op's result from its operands' dtypes, by ATen's one rule
// (c10's promoteTypes and ATen's result_type, TypeProperties.cpp), for the shape rules
// (graph/shape_rules.cc) and the kernels (runtime/kernels/) alike: both call these
// functions, so a result's dtype is decided in one place.
//
// The rule, as ATen states it:
//   - dtypes fall in categories, bool < integral < floating; promoteTypes(a, b) is the
//     smallest dtype both convert to (uint8 with int8 is int16, float16 with bfloat16 is
//     float32, an integral dtype with a floating one is the floating one);
//   - result_type promotes the dimensioned tensors together, the zero-dim tensors
//     together and the Python numbers together (a float number as the default dtype,
//     float32; an int as int64; a bool as bool); a zero-dim tensor's dtype counts only when
//     its category is higher than the dimensioned tensors', a number's only when higher than
//     both (int32 [n] + 0-d int64 is int32; int32 [n] * 0-d float64 is float64; int64 [n] *
//     2.5 is float32; bool [n] + 1 is int64).
// On top of it, each op family's own contract: true division and the floating unary ops
// (exp, sigmoid, ...) give integral results as the default float dtype; sum gives bool and
// integral inputs as int64; comparisons give bool; subtraction refuses bool operands.
//
//   absl::StatusOr<std::string> d = ArithmeticResultType(
//       ArithmeticOp::kMul, {PromotionOperand::Tensor("float32", 2),
//       PromotionOperand::Tensor("bool", 2)});
//   // "float32"
//
// Dtypes are the graph format's names ("float32", "int64", "bool", ...; docs/format.md). An
// operand whose dtype is empty or has no category here (a graph's complex or float8 tensor)
// makes the result unknown: the empty string, which a caller reads as "not decided here".
// Every function is O(operands).
#ifndef OVERLAP_GRAPH_TYPE_PROMOTION_H_
#define OVERLAP_GRAPH_TYPE_PROMOTION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/value.h"

namespace overlap {

// torch.get_default_dtype(): what a Python float and an integral true division become.
inline constexpr absl::string_view kDefaultFloatDtype = "float32";

enum class DtypeCategory { kBool, kIntegral, kFloating };

// "float32" for the aliases torch writes ("torch.float32", "float", "double", "half", "long",
// "int", "short"); other names unchanged.
std::string CanonicalDtype(absl::string_view dtype);

// The category of `dtype`; nullopt when it has none here (empty, complex, unknown).
std::optional<DtypeCategory> CategoryOf(absl::string_view dtype);

// One operand as result_type sees it: a tensor with dimensions, a zero-dim tensor, or a
// Python number (a wrapped number in ATen's words).
struct PromotionOperand {
  enum class Kind { kTensor, kZeroDim, kNumber };
  Kind kind = Kind::kTensor;
  std::string dtype;  // a number's: "bool", "int64" or "float64" (Python's bool / int / float)

  // A tensor of `rank` dimensions (0: a zero-dim tensor).
  static PromotionOperand Tensor(absl::string_view dtype, int64_t rank);
  // A Python number given as an argument: bool, int or float; nullopt for anything else.
  static std::optional<PromotionOperand> Number(const Value& v);
};

// ATen's promoteTypes of two dtypes: InvalidArgument when either has no category, unless
// they are equal. "" when either is "".
absl::StatusOr<std::string> PromoteTypes(absl::string_view a, absl::string_view b);

// ATen's result_type of the operands (above); "" when an operand's dtype is unknown.
// InvalidArgument for no operands.
absl::StatusOr<std::string> ResultType(absl::Span<const PromotionOperand> operands);

// `dtype` if floating, else the default float dtype (true division, exp, sigmoid, tanh,
// rsqrt of integral or bool inputs); "" stays "".
std::string IntegralToFloat(absl::string_view dtype);

// The elementwise arithmetic ops and their contracts on top of result_type.
enum class ArithmeticOp {
  kAdd,             // result_type
  kSub,             // result_type; a bool operand is refused (ATen: use ~ or logical_not)
  kMul,             // result_type
  kTrueDivide,      // div without rounding_mode: result_type, integral to the default float
  kRoundingDivide,  // div with rounding_mode 'trunc' / 'floor': result_type
};

// The result dtype of `op` on `operands` (self first); InvalidArgument with ATen's reason
// when the op refuses them (bool subtraction), "" when unknown.
absl::StatusOr<std::string> ArithmeticResultType(ArithmeticOp op,
                                                 absl::Span<const PromotionOperand> operands);

// add's / sub's `alpha` against the result dtype, as ATen checks it: a float alpha is refused
// for integral and bool results, a bool alpha for all but bool results. InvalidArgument then.
absl::Status CheckAlpha(absl::string_view result, const Value& alpha);

enum class ReductionOp { kSum, kMean };

// sum's and mean's result dtype of a `self` tensor: the `dtype` keyword when given (non-empty),
// else sum: bool and integral as int64, others as themselves; mean: self's, which must be
// floating (ATen: "mean(): could not infer output dtype"), else InvalidArgument.
absl::StatusOr<std::string> ReductionResultType(ReductionOp op, absl::string_view self,
                                                absl::string_view dtype_keyword);

// Comparisons (eq, ne, lt, le, gt, ge) give bool whatever their operands.
inline constexpr absl::string_view kComparisonDtype = "bool";

}  // namespace overlap

#endif  // OVERLAP_GRAPH_TYPE_PROMOTION_H_
