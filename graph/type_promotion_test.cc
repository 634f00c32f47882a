// ATen's promotion rule against the answers torch gives (torch.promote_types,
// torch.result_type; each case's torch expression beside it).
#include "graph/type_promotion.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

PromotionOperand T(const char* dtype) { return PromotionOperand::Tensor(dtype, 2); }
PromotionOperand Z(const char* dtype) { return PromotionOperand::Tensor(dtype, 0); }
PromotionOperand N(const Value& v) { return *PromotionOperand::Number(v); }

std::string Result(std::vector<PromotionOperand> operands) {
  absl::StatusOr<std::string> d = ResultType(operands);
  return d.ok() ? *d : std::string(d.status().message());
}

TEST(TypePromotionTest, PromoteTypesFollowsATensTable) {
  struct Case {
    const char *a, *b, *want;
  } cases[] = {
      {"float32", "float32", "float32"},  {"bool", "float32", "float32"},
      {"bool", "int32", "int32"},         {"uint8", "int8", "int16"},
      {"uint8", "int32", "int32"},        {"int8", "int64", "int64"},
      {"int64", "float16", "float16"},    {"float16", "bfloat16", "float32"},
      {"bfloat16", "float64", "float64"}, {"float32", "float64", "float64"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(*PromoteTypes(c.a, c.b), c.want) << c.a << " " << c.b;
    EXPECT_EQ(*PromoteTypes(c.b, c.a), c.want) << c.b << " " << c.a;
  }
  EXPECT_FALSE(PromoteTypes("complex64", "float32").ok());
  EXPECT_EQ(*PromoteTypes("complex64", "complex64"), "complex64");
}

TEST(TypePromotionTest, ResultTypeWeighsTensorsZeroDimTensorsAndNumbersAsATenDoes) {
  // Dimensioned tensors promote together.
  EXPECT_EQ(Result({T("float32"), T("bool")}), "float32");  // x * mask
  EXPECT_EQ(Result({T("int64"), T("int64")}), "int64");
  EXPECT_EQ(Result({T("int32"), T("float64")}), "float64");
  // A zero-dim tensor counts only from a higher category.
  EXPECT_EQ(Result({T("int32"), Z("int64")}), "int32");
  EXPECT_EQ(Result({T("float16"), Z("float64")}), "float16");
  EXPECT_EQ(Result({T("int32"), Z("float64")}), "float64");
  EXPECT_EQ(Result({T("bool"), Z("int32")}), "int32");
  EXPECT_EQ(Result({Z("float32"), Z("float64")}), "float64");
  // Numbers: a float is the default dtype, an int int64, a bool bool.
  EXPECT_EQ(Result({T("int64"), N(Value::Double(2.5))}), "float32");
  EXPECT_EQ(Result({T("float16"), N(Value::Double(2.5))}), "float16");
  EXPECT_EQ(Result({T("uint8"), N(Value::Int(300))}), "uint8");
  EXPECT_EQ(Result({T("bool"), N(Value::Int(1))}), "int64");
  EXPECT_EQ(Result({T("bool"), N(Value::Bool(true))}), "bool");
  EXPECT_EQ(Result({Z("int32"), N(Value::Double(1.0))}), "float32");
  EXPECT_EQ(Result({Z("float64"), N(Value::Double(1.0))}), "float64");
  // Unknown dtypes leave the result undecided; no operands is an error.
  EXPECT_EQ(Result({T("float32"), T("")}), "");
  EXPECT_EQ(Result({T("complex64"), T("float32")}), "");
  EXPECT_FALSE(ResultType({}).ok());
  EXPECT_FALSE(PromotionOperand::Number(Value::String("x")).has_value());
}

TEST(TypePromotionTest, EachFamilysContractOnTop) {
  auto arith = [](ArithmeticOp op, std::vector<PromotionOperand> operands) {
    absl::StatusOr<std::string> d = ArithmeticResultType(op, operands);
    return d.ok() ? *d : std::string(d.status().message());
  };
  EXPECT_EQ(arith(ArithmeticOp::kMul, {T("float32"), T("bool")}), "float32");
  EXPECT_EQ(arith(ArithmeticOp::kSub, {T("int64"), T("int64")}), "int64");
  EXPECT_THAT(arith(ArithmeticOp::kSub, {T("bool"), T("bool")}), HasSubstr("bool operand"));
  EXPECT_THAT(arith(ArithmeticOp::kSub, {T("float32"), N(Value::Bool(true))}),
              HasSubstr("bool operand"));
  EXPECT_EQ(arith(ArithmeticOp::kTrueDivide, {T("int64"), T("int64")}), "float32");
  EXPECT_EQ(arith(ArithmeticOp::kTrueDivide, {T("int64"), N(Value::Int(2))}), "float32");
  EXPECT_EQ(arith(ArithmeticOp::kTrueDivide, {T("float64"), T("int64")}), "float64");
  EXPECT_EQ(arith(ArithmeticOp::kRoundingDivide, {T("int64"), N(Value::Int(2))}), "int64");
  EXPECT_TRUE(CheckAlpha("int64", Value::Int(2)).ok());
  EXPECT_FALSE(CheckAlpha("int64", Value::Double(0.5)).ok());
  EXPECT_TRUE(CheckAlpha("float32", Value::Double(0.5)).ok());
  EXPECT_FALSE(CheckAlpha("float32", Value::Bool(true)).ok());
  EXPECT_TRUE(CheckAlpha("bool", Value::Bool(true)).ok());
  EXPECT_EQ(IntegralToFloat("bool"), "float32");
  EXPECT_EQ(IntegralToFloat("bfloat16"), "bfloat16");

  EXPECT_EQ(*ReductionResultType(ReductionOp::kSum, "bool", ""), "int64");
  EXPECT_EQ(*ReductionResultType(ReductionOp::kSum, "int32", ""), "int64");
  EXPECT_EQ(*ReductionResultType(ReductionOp::kSum, "float16", ""), "float16");
  EXPECT_EQ(*ReductionResultType(ReductionOp::kSum, "bool", "torch.float32"), "float32");
  EXPECT_EQ(*ReductionResultType(ReductionOp::kMean, "float32", ""), "float32");
  EXPECT_EQ(*ReductionResultType(ReductionOp::kMean, "int64", "torch.float64"), "float64");
  absl::StatusOr<std::string> mean = ReductionResultType(ReductionOp::kMean, "int64", "");
  ASSERT_FALSE(mean.ok());
  EXPECT_THAT(std::string(mean.status().message()), HasSubstr("could not infer"));
  EXPECT_EQ(kComparisonDtype, "bool");
  EXPECT_EQ(CanonicalDtype("torch.long"), "int64");
}

}  // namespace
}  // namespace overlap
