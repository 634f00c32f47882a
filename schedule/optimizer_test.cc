#include "schedule/optimizer.h"

#include <string>

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(OptimizerTest, NamesRoundTripAndOldSpellingsAreRead) {
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdamW}) {
    EXPECT_EQ(*ParseOptimizerKind(OptimizerKindName(k)), k);
  }
  EXPECT_EQ(*ParseOptimizerKind("adam"), OptimizerKind::kAdamW);
  EXPECT_EQ(*ParseOptimizerKind("momentum"), OptimizerKind::kSgd);
  absl::StatusOr<OptimizerKind> bad = ParseOptimizerKind("lamb");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("sgd or adamw"), std::string::npos);
}

TEST(OptimizerTest, StateFollowsTheUpdateRule) {
  OptimizerOptions o;
  EXPECT_EQ(OptimizerStateTensors(o), 2);  // AdamW: two moments
  EXPECT_EQ(OptimizerLabel(o), "adamw");
  o.kind = OptimizerKind::kSgd;
  EXPECT_EQ(OptimizerStateTensors(o), 1);  // the momentum buffer
  EXPECT_EQ(OptimizerLabel(o), "sgd (momentum 0.9)");
  o.momentum = 0;
  EXPECT_EQ(OptimizerStateTensors(o), 0);  // plain SGD keeps nothing
  EXPECT_EQ(OptimizerLabel(o), "sgd (no momentum)");
}

}  // namespace
}  // namespace overlap
