// fast_free, rule by rule, on small graphs whose schedule is worked out by hand from the
// definition in docs/deepcompile.md; plus properties on random graphs.
#include "schedule/testing/fast_free_reference.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "graph/test_graphs.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "rapidcheck/gtest.h"
#include "schedule/analysis.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;

// Parses a lifted graph and inserts the ZeRO-3 ops.
Graph Zero3(const std::string& nodes, const std::string& params, int graph_id = 0) {
  absl::StatusOr<Graph> g = GraphFromParts(nodes, params);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return Graph();
  absl::StatusOr<bool> r = Zero3Insertion(static_cast<GraphKind>(graph_id)).Run(&*g);
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(*g);
}

std::vector<std::string> Schedule(const Graph& g) {
  absl::StatusOr<std::vector<NodeId>> order = FastFreeScheduleReference(g);
  EXPECT_TRUE(order.ok()) << order.status();
  std::vector<std::string> names;
  if (order.ok()) {
    for (NodeId id : *order) names.push_back(g.node(id).name());
  }
  return names;
}

TEST(FastFreeTest, ZeroFreeFilterSchedulesUntilFreeIncludingTheRelease) {
  Graph g = Zero3(absl::StrCat(PlaceholderJson("p_a", "a"), ",", PlaceholderJson("p_b", "b"), ",",
                               PlaceholderJson("x"), ",",
                               CallJson("a_mm", "aten.mm.default", R"("%x", "%p_a")"), ",",
                               CallJson("b_mm", "aten.mm.default", R"("%a_mm", "%p_b")"), ",",
                               OutputJson(R"("%b_mm")")),
                  absl::StrCat(ParamJson("a", 100), ",", ParamJson("b", 100)));
  EXPECT_THAT(Schedule(g),
              ElementsAre("p_a", "p_b", "x", "allgather_ds_param_p_a_0",
                          "wait_allgather_ds_param__p_a_0", "a_mm", "release_ds_param_p_a_a_mm_0",
                          "allgather_ds_param_p_b_1", "wait_allgather_ds_param__p_b_1", "b_mm",
                          "release_ds_param_p_b_b_mm_1", "output"));
}

TEST(FastFreeTest, FallbackTieBreakGathersOnlyUntilTheAllgather) {
  // Both parameters are needed by one node: no candidate frees without another gather, so
  // the fallback key picks the one whose path gathers less (a: 50 more bytes vs b: 100) and
  // schedules only its allgather; then b frees everything.
  Graph g = Zero3(absl::StrCat(PlaceholderJson("p_a", "a"), ",", PlaceholderJson("p_b", "b"), ",",
                               CallJson("c", "aten.add.Tensor", R"("%p_a", "%p_b")"), ",",
                               OutputJson(R"("%c")")),
                  absl::StrCat(ParamJson("a", 100), ",", ParamJson("b", 50)));
  EXPECT_THAT(Schedule(g),
              ElementsAre("p_a", "p_b", "allgather_ds_param_p_a_0", "allgather_ds_param_p_b_1",
                          "wait_allgather_ds_param__p_a_0", "wait_allgather_ds_param__p_b_1", "c",
                          "release_ds_param_p_b_c_1", "release_ds_param_p_a_c_0", "output"));
}

// dx uses w; gw (the gradient of w) reads dx; z is unrelated and comes first in graph order.
Graph GradientBesideAnUnrelatedOutput() {
  return Zero3(
      absl::StrCat(PlaceholderJson("p_w", "w"), ",", PlaceholderJson("x"), ",",
                   PlaceholderJson("dy"), ",",
                   CallJson("dx", "aten.mm.default", R"("%dy", "%p_w")"), ",",
                   CallJson("z", "aten.relu.default", R"("%dy")"), ",",
                   CallJson("gw", "aten.mm.default", R"("%dx", "%x")", R"({"grad_of": "w"})"), ",",
                   OutputJson(R"(["%gw", "%z"])")),
      ParamJson("w", 64), 1);
}

TEST(FastFreeTest, ReduceAndOutputPullingScheduleGradientsEarly) {
  // Once w's allgather is scheduled, gw's reduce needs no other allgather and is pulled in
  // ahead of z; z is appended at the tail.
  Graph g = GradientBesideAnUnrelatedOutput();
  EXPECT_THAT(
      Schedule(g),
      ElementsAre("p_w", "x", "dy", "allgather_ds_param_p_w_0", "wait_allgather_ds_param__p_w_0",
                  "dx", "release_ds_param_p_w_dx_0", "gw", "reduce_ds_param_p_w", "z", "output"));
}

TEST(FastFreeTest, DeepSpeed019SchedulesWhatNeedsNoAllgatherAfterTheFirstRound) {
  // `z` is an output item that needs no allgather. DeepSpeed 0.19 schedules it at the end of
  // the first round (rule R1), right after gw's reduce; the restated rules leave it for the
  // tail. Here both come after gw, so the two orders agree...
  Graph g = GradientBesideAnUnrelatedOutput();
  absl::StatusOr<std::vector<NodeId>> v019 = FastFreeScheduleReference(g, true);
  ASSERT_TRUE(v019.ok());
  std::vector<std::string> names;
  for (NodeId id : *v019) names.push_back(g.node(id).name());
  EXPECT_THAT(
      names,
      ElementsAre("p_w", "x", "dy", "allgather_ds_param_p_w_0", "wait_allgather_ds_param__p_w_0",
                  "dx", "release_ds_param_p_w_dx_0", "gw", "reduce_ds_param_p_w", "z", "output"));
  // ... but with two parameters, z moves ahead of the second allgather under 0.19 only.
  Graph two =
      Zero3(absl::StrCat(
                PlaceholderJson("p_a", "a"), ",", PlaceholderJson("p_b", "b"), ",",
                PlaceholderJson("x"), ",", CallJson("u", "aten.mm.default", R"("%x", "%p_a")"), ",",
                CallJson("v", "aten.mm.default", R"("%u", "%p_b")"), ",",
                CallJson("z", "aten.relu.default", R"("%x")"), ",", OutputJson(R"(["%v", "%z"])")),
            absl::StrCat(ParamJson("a", 64), ",", ParamJson("b", 64)));
  auto names_of = [&](const absl::StatusOr<std::vector<NodeId>>& order) {
    std::vector<std::string> out;
    for (NodeId id : *order) out.push_back(two.node(id).name());
    return out;
  };
  absl::StatusOr<std::vector<NodeId>> old_rules = FastFreeScheduleReference(two);
  absl::StatusOr<std::vector<NodeId>> new_rules = FastFreeScheduleReference(two, true);
  ASSERT_TRUE(old_rules.ok() && new_rules.ok());
  const std::vector<std::string> a = names_of(old_rules), b = names_of(new_rules);
  const auto at = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) - v.begin();
  };
  EXPECT_GT(at(a, "z"), at(a, "allgather_ds_param_p_b_1")) << absl::StrJoin(a, " ");
  EXPECT_LT(at(b, "z"), at(b, "allgather_ds_param_p_b_1")) << absl::StrJoin(b, " ");
}

TEST(FastFreeTest, AnAllgatherNobodyReadsIsAnError) {
  absl::StatusOr<Graph> g = ReadGraphJson(absl::StrCat(
      R"({"format": "overlap-graph", "version": 1, "nodes": [)", PlaceholderJson("p_a", "a"), ",",
      CallJson("ag", "dc.allgather_param", R"("%p_a", 0, 0)"), ",", OutputJson(R"("%p_a")"),
      R"(], "params": [)", ParamJson("a", 8), "]}"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(FastFreeScheduleReference(*g).status().message(),
              ::testing::HasSubstr("allgather \"ag\" has no last use"));
}

TEST(FastFreeTest, EveryLiftedBuiltInModelSchedulesToATopologicalPermutation) {
  for (const char* name : {"mlp", "gpt2", "resnet18"}) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
    absl::StatusOr<std::vector<NodeId>> order = FastFreeScheduleReference(*g);
    ASSERT_TRUE(order.ok()) << name << ": " << order.status();
    EXPECT_TRUE(CheckTopologicalPermutation(*g, *order).ok()) << name;
  }
}

RC_GTEST_PROP(FastFreePropertyTest, prop_ScheduleIsATopologicalPermutation, ()) {
  Graph g = *ArbitraryGraph(60);
  if (!Zero3Insertion(GraphKind::kForward).Run(&g).ok())
    return;  // module-owned parameters: not ZeRO-3
  absl::StatusOr<std::vector<NodeId>> order = FastFreeScheduleReference(g);
  if (!order.ok()) {
    // The reference's own failure modes, reported as errors.
    const absl::string_view m = order.status().message();
    RC_ASSERT(m.find("kwargs") != absl::string_view::npos ||
              m.find("no last use") != absl::string_view::npos);
    return;
  }
  RC_ASSERT(CheckTopologicalPermutation(g, *order).ok());
}

}  // namespace
}  // namespace overlap
