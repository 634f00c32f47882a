#include "graph/type_promotion.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "graph/status_macros.h"

namespace overlap {
namespace {

// The width order within a category: int8 / uint8 < int16 < int32 < int64, and float16 /
// bfloat16 < float32 < float64.
int Width(absl::string_view d) {
  if (d == "uint8" || d == "int8" || d == "float16" || d == "bfloat16") return 1;
  if (d == "int16" || d == "float32") return 2;
  if (d == "int32" || d == "float64") return 3;
  return 4;  // int64
}

// ATen's combine_categories: the higher-priority group's dtype (dimensioned over zero-dim
// over numbers) unless the lower one is of a higher category.
absl::StatusOr<std::string> CombineCategories(const std::string& higher, const std::string& lower) {
  if (higher.empty()) return lower;
  if (lower.empty()) return higher;
  if (CategoryOf(higher) == DtypeCategory::kFloating) return higher;
  if (higher == "bool" || CategoryOf(lower) == DtypeCategory::kFloating) {
    return PromoteTypes(higher, lower);
  }
  return higher;
}

}  // namespace

std::string CanonicalDtype(absl::string_view d) {
  absl::ConsumePrefix(&d, "torch.");
  if (d == "float") return "float32";
  if (d == "double") return "float64";
  if (d == "half") return "float16";
  if (d == "long") return "int64";
  if (d == "int") return "int32";
  if (d == "short") return "int16";
  return std::string(d);
}

std::optional<DtypeCategory> CategoryOf(absl::string_view d) {
  if (d == "bool") return DtypeCategory::kBool;
  if (d == "uint8" || d == "int8" || d == "int16" || d == "int32" || d == "int64") {
    return DtypeCategory::kIntegral;
  }
  if (d == "float16" || d == "bfloat16" || d == "float32" || d == "float64") {
    return DtypeCategory::kFloating;
  }
  return std::nullopt;
}

PromotionOperand PromotionOperand::Tensor(absl::string_view dtype, int64_t rank) {
  return PromotionOperand{rank > 0 ? Kind::kTensor : Kind::kZeroDim, CanonicalDtype(dtype)};
}

std::optional<PromotionOperand> PromotionOperand::Number(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kBool:
      return PromotionOperand{Kind::kNumber, "bool"};
    case Value::Kind::kInt:
      return PromotionOperand{Kind::kNumber, "int64"};
    case Value::Kind::kDouble:
      return PromotionOperand{Kind::kNumber, "float64"};
    default:
      return std::nullopt;
  }
}

absl::StatusOr<std::string> PromoteTypes(absl::string_view a, absl::string_view b) {
  if (a == b) return std::string(a);
  if (a.empty() || b.empty()) return std::string();
  const std::optional<DtypeCategory> ca = CategoryOf(a), cb = CategoryOf(b);
  if (!ca || !cb) {
    return absl::InvalidArgumentError(
        absl::StrCat("no type promotion of ", a, " with ", b, " (", !ca ? a : b, " is unknown)"));
  }
  if (*ca == DtypeCategory::kBool) return std::string(b);
  if (*cb == DtypeCategory::kBool) return std::string(a);
  if (*ca != *cb) return std::string(*ca == DtypeCategory::kFloating ? a : b);
  if (Width(a) == Width(b)) {
    // uint8 with int8 (neither holds the other): int16; float16 with bfloat16: float32.
    return std::string(*ca == DtypeCategory::kIntegral ? "int16" : "float32");
  }
  return std::string(Width(a) > Width(b) ? a : b);
}

absl::StatusOr<std::string> ResultType(absl::Span<const PromotionOperand> operands) {
  if (operands.empty()) return absl::InvalidArgumentError("result_type of no operands");
  std::string by_kind[3];  // dimensioned, zero-dim, numbers; "" until one is seen
  bool seen[3] = {false, false, false};
  for (const PromotionOperand& op : operands) {
    if (!CategoryOf(op.dtype)) return std::string();  // unknown: not decided here
    const int k = static_cast<int>(op.kind);
    // A float number takes part as the default dtype (ATen wraps it so).
    const std::string dtype = op.kind == PromotionOperand::Kind::kNumber &&
                                      CategoryOf(op.dtype) == DtypeCategory::kFloating
                                  ? std::string(kDefaultFloatDtype)
                                  : op.dtype;
    if (!seen[k]) {
      by_kind[k] = dtype;
      seen[k] = true;
      continue;
    }
    OVERLAP_ASSIGN_OR_RETURN(by_kind[k], PromoteTypes(by_kind[k], dtype));
  }
  OVERLAP_ASSIGN_OR_RETURN(std::string lower, CombineCategories(by_kind[1], by_kind[2]));
  return CombineCategories(by_kind[0], lower);
}

std::string IntegralToFloat(absl::string_view dtype) {
  const std::optional<DtypeCategory> c = CategoryOf(dtype);
  if (c && *c != DtypeCategory::kFloating) return std::string(kDefaultFloatDtype);
  return std::string(dtype);
}

absl::StatusOr<std::string> ArithmeticResultType(ArithmeticOp op,
                                                 absl::Span<const PromotionOperand> operands) {
  if (op == ArithmeticOp::kSub) {
    for (const PromotionOperand& o : operands) {
      if (o.dtype != "bool") continue;
      return absl::InvalidArgumentError(
          "subtraction with a bool operand is not supported (ATen refuses it: to invert a mask, "
          "use bitwise_not)");
    }
  }
  OVERLAP_ASSIGN_OR_RETURN(std::string d, ResultType(operands));
  return op == ArithmeticOp::kTrueDivide ? IntegralToFloat(d) : d;
}

absl::Status CheckAlpha(absl::string_view result, const Value& alpha) {
  const std::optional<DtypeCategory> c = CategoryOf(result);
  if (!c) return absl::OkStatus();
  if (alpha.kind() == Value::Kind::kDouble && *c != DtypeCategory::kFloating) {
    return absl::InvalidArgumentError(
        absl::StrCat("a float alpha for a ", result,
                     " result (ATen: for integral input tensors, alpha must not be a float)"));
  }
  if (alpha.kind() == Value::Kind::kBool && *c != DtypeCategory::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("a bool alpha for a ", result, " result (ATen: bool results only)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReductionResultType(ReductionOp op, absl::string_view self,
                                                absl::string_view dtype_keyword) {
  if (!dtype_keyword.empty()) return CanonicalDtype(dtype_keyword);
  const std::optional<DtypeCategory> c = CategoryOf(self);
  if (!c || *c == DtypeCategory::kFloating) return std::string(self);
  if (op == ReductionOp::kSum) return std::string("int64");
  return absl::InvalidArgumentError(
      absl::StrCat("mean of ", self,
                   " needs a floating dtype: give the dtype keyword (ATen: "
                   "mean() could not infer the output dtype)"));
}

}  // namespace overlap
