#include "schedule/budget.h"

#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

// A bf16 weight of 10 x 10 (tied by a second row), an fp32 bias of 3 without a gradient.
Graph Table() {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_w", "op": "placeholder", "target": "p_w", "args": []},
    {"name": "p_b", "op": "placeholder", "target": "p_b", "args": []},
    {"name": "output", "op": "output", "target": "output", "args": ["%p_w"]}],
   "params": [
    {"name": "w", "owner": "p_w", "shape": [10, 10], "dtype": "bfloat16", "bytes": 200},
    {"name": "w_tied", "owner": "p_w", "shape": [10, 10], "dtype": "bfloat16", "bytes": 200, "storage": "w"},
    {"name": "b", "owner": "p_b", "shape": [3], "dtype": "float32", "bytes": 12, "requires_grad": false}]})");
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

TEST(BudgetTest, PerRankStateCountsShardsGradientsOptimizerAndMasterWeights) {
  StateOptions o;
  o.world_size = 8;  // w: 100 elements -> 13 per rank (padded); b: 3 -> 1
  absl::StatusOr<RankState> adam = PerRankState(Table(), o);
  ASSERT_TRUE(adam.ok());
  EXPECT_EQ(adam->params, 13 * 2 + 1 * 4);
  EXPECT_EQ(adam->grads, 13 * 2);  // b has no gradient
  EXPECT_EQ(adam->optimizer, 13 * 8);
  EXPECT_EQ(adam->master, 13 * 4);         // w is 16-bit
  o.optimizer.kind = OptimizerKind::kSgd;  // momentum 0.9: one buffer
  EXPECT_EQ(PerRankState(Table(), o)->optimizer, 13 * 4);
  o.optimizer.momentum = 0;  // plain SGD keeps nothing
  EXPECT_EQ(PerRankState(Table(), o)->optimizer, 0);
  o.world_size = 0;
  EXPECT_FALSE(PerRankState(Table(), o).ok());
}

TEST(BudgetTest, DeviceMemoryLeavesWhatStateAndReserveDoNotTake) {
  StateOptions o;
  o.world_size = 1;
  const int64_t state = PerRankState(Table(), o)->total();
  absl::StatusOr<MemoryBudget> b = DeviceMemoryBudget(Table(), 10000, o, 100);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->state_bytes, state);
  EXPECT_EQ(*b->budget_bytes, 10000 - state - 100);
  absl::StatusOr<MemoryBudget> none = DeviceMemoryBudget(Table(), state + 100, o, 100);
  EXPECT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), ::testing::HasSubstr("leaves nothing"));
  EXPECT_FALSE(DeviceMemoryBudget(Table(), -1, o).ok());
  // The default reserve: 512 MiB + 5%.
  EXPECT_EQ(DefaultReserveBytes(int64_t{80} << 30), (int64_t{512} << 20) + (int64_t{4} << 30));
  absl::StatusOr<MemoryBudget> h100 = DeviceMemoryBudget(Table(), int64_t{80} << 30, o);
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->reserve_bytes, DefaultReserveBytes(int64_t{80} << 30));
}

TEST(BudgetTest, OneRuleResolvesEveryRequest) {
  BudgetRequest r;
  r.state.world_size = 1;
  absl::StatusOr<MemoryBudget> none = ResolveBudget(r, Table());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->budget_bytes.has_value());
  EXPECT_GT(none->state_bytes, 0);  // computed for the report all the same
  r.budget_bytes = 5000;
  EXPECT_EQ(*ResolveBudget(r, Table())->budget_bytes, 5000);
  r.device_memory_bytes = 10000;  // both: refused
  EXPECT_FALSE(ResolveBudget(r, Table()).ok());
  r.budget_bytes.reset();
  r.reserve_bytes = 100;
  EXPECT_EQ(*ResolveBudget(r, Table())->budget_bytes,
            10000 - PerRankState(Table(), r.state)->total() - 100);
  r.device_memory_bytes.reset();  // a reserve alone: refused
  EXPECT_FALSE(ResolveBudget(r, Table()).ok());
}

TEST(BudgetTest, JsonFieldsSayWhetherThePeakFits) {
  MemoryBudget b;
  b.state_bytes = 7;
  EXPECT_EQ(MemoryBudgetJsonFields(b, 5), ", \"state_bytes\": 7");
  b.budget_bytes = 10;
  EXPECT_THAT(MemoryBudgetJsonFields(b, 11), ::testing::HasSubstr("\"feasible\": false"));
  EXPECT_THAT(MemoryBudgetJsonFields(b, 10), ::testing::HasSubstr("\"feasible\": true"));
  b.device_bytes = 100;
  b.reserve_bytes = 3;
  EXPECT_THAT(MemoryBudgetJsonFields(b, 10), ::testing::HasSubstr("\"reserve_bytes\": 3"));
}

// llama-7b in bf16 at 32 ranks with adam: about 16 bytes per parameter / 32.
TEST(BudgetTest, Llama7bStateIsAboutSixteenBytesPerParameterOverTheWorld) {
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildModel("llama-7b", mo);
  ASSERT_TRUE(g.ok());
  int64_t elements = 0;
  for (const Param& p : g->params()) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    elements += n;
  }
  absl::StatusOr<RankState> s = PerRankState(*g, StateOptions{});
  ASSERT_TRUE(s.ok());
  const double per_element = static_cast<double>(s->total()) * 32 / elements;
  EXPECT_NEAR(per_element, 16.0, 0.1);
}

}  // namespace
}  // namespace overlap
