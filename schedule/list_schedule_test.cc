#include "schedule/list_schedule.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "gtest/gtest.h"
#include "rapidcheck/gtest.h"
#include "schedule/analysis.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

std::vector<std::string> Names(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<std::string> out;
  for (NodeId id : ids) out.push_back(g.node(id).name());
  return out;
}

TEST(ListScheduleTest, SmallestMemoryDeltaFirstTiesInGraphOrder) {
  // Two independent parameters: releases (-) run as soon as ready, allgathers (+) last,
  // plain compute (0) in between, in graph order.
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_a", "op": "placeholder", "target": "p_a", "args": [], "meta": {"param": "a"}},
    {"name": "p_b", "op": "placeholder", "target": "p_b", "args": [], "meta": {"param": "b"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "ma", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%p_a"]},
    {"name": "mb", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%p_b"]},
    {"name": "output", "op": "output", "target": "output", "args": [["%ma", "%mb"]]}],
   "params": [{"name": "a", "owner": "p_a", "bytes": 100}, {"name": "b", "owner": "p_b", "bytes": 50}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
  absl::StatusOr<std::vector<NodeId>> order = ListSchedule(*g);
  ASSERT_TRUE(order.ok()) << order.status();
  // Ready at the start: both allgathers (+100, +50). b's is cheaper: gather b, wait, mb,
  // release b (-50), then a's chain.
  EXPECT_THAT(Names(*g, *order),
              ::testing::ElementsAre(
                  "p_a", "p_b", "x", "allgather_ds_param_p_b_1", "wait_allgather_ds_param__p_b_1",
                  "mb", "release_ds_param_p_b_mb_1", "allgather_ds_param_p_a_0",
                  "wait_allgather_ds_param__p_a_0", "ma", "release_ds_param_p_a_ma_0", "output"));
}

TEST(ListScheduleTest, BuiltInModelsGiveTopologicalPermutations) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
    absl::StatusOr<std::vector<NodeId>> order = ListSchedule(*g);
    ASSERT_TRUE(order.ok()) << name << ": " << order.status();
    EXPECT_TRUE(CheckTopologicalPermutation(*g, *order).ok()) << name;
  }
}

RC_GTEST_PROP(ListSchedulePropertyTest, prop_ScheduleIsATopologicalPermutation, ()) {
  Graph g = *ArbitraryGraph();
  (void)Zero3Insertion(GraphKind::kForward)
      .Run(&g);  // module-owned graphs are scheduled as they are
  absl::StatusOr<std::vector<NodeId>> order = ListSchedule(g);
  if (!order.ok()) {
    RC_ASSERT(order.status().message().find("args only") != absl::string_view::npos);
    return;
  }
  RC_ASSERT(CheckTopologicalPermutation(g, *order).ok());
}

}  // namespace
}  // namespace overlap
