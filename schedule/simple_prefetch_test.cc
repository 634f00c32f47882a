#include "schedule/simple_prefetch.h"

#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "gtest/gtest.h"
#include "rapidcheck/gtest.h"
#include "schedule/analysis.h"
#include "schedule/simulator.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

TEST(SimplePrefetchTest, IssuesTheNextAllgatherAheadOfTheTentativeCompute) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_a", "op": "placeholder", "target": "p_a", "args": [], "meta": {"param": "a"}},
    {"name": "p_b", "op": "placeholder", "target": "p_b", "args": [], "meta": {"param": "b"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "mm1", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%p_a"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "mm2", "op": "call_function", "target": "aten.mm.default", "args": ["%mm1", "%p_b"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": ["%mm2"]}],
   "params": [{"name": "a", "owner": "p_a", "bytes": 1000}, {"name": "b", "owner": "p_b", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
  absl::StatusOr<std::vector<NodeId>> order = SimplePrefetchSchedule(*g);
  ASSERT_TRUE(order.ok()) << order.status();
  std::vector<std::string> names;
  for (NodeId id : *order) names.push_back(g->node(id).name());
  // Round 1: a unblocks mm1 (1 s), b nothing: gather a. Round 2: gather b, committed ahead
  // of a's tentative wait / mm1 / release: b's gather overlaps mm1.
  EXPECT_THAT(names,
              ::testing::ElementsAre(
                  "p_a", "p_b", "x", "allgather_ds_param_p_a_0", "allgather_ds_param_p_b_1",
                  "wait_allgather_ds_param__p_a_0", "mm1", "release_ds_param_p_a_mm1_0",
                  "wait_allgather_ds_param__p_b_1", "mm2", "release_ds_param_p_b_mm2_1", "output"));
  CollectiveModel slow;
  slow.world_size = 2;
  slow.latency_s = 0;
  slow.bandwidth_bytes_per_s = 1000;
  absl::StatusOr<SimulationResult> r = Simulate(*g, *order, slow);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->step_time_s, 2.5);
}

TEST(SimplePrefetchTest, BuiltInModelsGiveTopologicalPermutations) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
    absl::StatusOr<std::vector<NodeId>> order = SimplePrefetchSchedule(*g);
    ASSERT_TRUE(order.ok()) << name << ": " << order.status();
    EXPECT_TRUE(CheckTopologicalPermutation(*g, *order).ok()) << name;
  }
}

RC_GTEST_PROP(SimplePrefetchPropertyTest, prop_ScheduleIsATopologicalPermutation, ()) {
  Graph g = *ArbitraryGraph();
  (void)Zero3Insertion(GraphKind::kForward).Run(&g);
  absl::StatusOr<std::vector<NodeId>> order = SimplePrefetchSchedule(g);
  if (!order.ok()) {
    RC_ASSERT(order.status().message().find("args only") != absl::string_view::npos);
    return;
  }
  RC_ASSERT(CheckTopologicalPermutation(g, *order).ok());
}

}  // namespace
}  // namespace overlap
