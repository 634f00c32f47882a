#include "schedule/analysis.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/errors.h"
#include "graph/json_reader.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;

Graph Zero3(const std::string& nodes, const std::string& params) {
  Graph g = ParseGraphParts(nodes, params);
  EXPECT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
  return g;
}

TEST(AnalysisTest, LastUseLooksThroughAliases) {
  Graph g = Zero3(
      absl::StrCat(PlaceholderJson("p_a", "a"), ",", PlaceholderJson("x"), ",",
                   CallJson("t", "aten.t.default", R"("%p_a")", R"({"aliases_input": true})"), ",",
                   CallJson("mm", "aten.mm.default", R"("%x", "%t")"), ",", OutputJson(R"("%mm")")),
      ParamJson("a", 16));
  std::vector<NodeId> last = LastUses(g);
  EXPECT_EQ(g.node(last[g.FindNode("allgather_ds_param_p_a_0")]).name(), "mm");
  EXPECT_EQ(g.node(last[g.FindNode("t")]).name(), "mm");
  EXPECT_EQ(last[g.FindNode("output")], kNoNode);
}

TEST(AnalysisTest, RequirementsArePostOrderOverArgsOnly) {
  absl::StatusOr<Graph> g = ReadGraphJson(absl::StrCat(
      R"({"format": "overlap-graph", "version": 1, "nodes": [)", PlaceholderJson("x"), ",",
      CallJson("a", "f", R"("%x")"), ",", CallJson("b", "f", R"("%x")"), ",",
      R"({"name": "c", "op": "call_function", "target": "f", "args": ["%b", "%a"], "kwargs": {"k": "%x"}},)",
      OutputJson(R"("%c")"), "]}"));
  ASSERT_TRUE(g.ok());
  std::vector<char> done(g->id_bound(), 0);
  std::vector<std::string> names;
  for (NodeId id : Requirements(*g, g->FindNode("c"), done)) names.push_back(g->node(id).name());
  EXPECT_THAT(names, ElementsAre("x", "b", "a", "c"));
  done[g->FindNode("x")] = 1;
  done[g->FindNode("c")] = 1;
  EXPECT_TRUE(Requirements(*g, g->FindNode("c"), done).empty());
}

TEST(AnalysisTest, LastUsesThroughReleasesOnlyUnderTheStorageRule) {
  Graph g = Zero3(absl::StrCat(PlaceholderJson("p_a", "a"), ",", PlaceholderJson("x"), ",",
                               CallJson("mm", "aten.mm.default", R"("%x", "%p_a")"), ",",
                               CallJson("relu", "aten.relu.default", R"("%mm")"), ",",
                               OutputJson(R"("%relu")")),
                  ParamJson("a", 16));
  // The release after mm hands mm's tensor on to relu.
  const NodeId mm = g.FindNode("mm");
  EXPECT_EQ(g.node(LastUses(g)[mm]).name(), "release_ds_param_p_a_mm_0");
  EXPECT_EQ(g.node(LastUses(g, LastUseRule::kViewsAndReleases)[mm]).name(), "relu");
}

TEST(AnalysisTest, TopologicalPermutationNamesTheOffendingNode) {
  Graph g = ParseGraphParts(absl::StrCat(PlaceholderJson("x"), ",", CallJson("a", "f", R"("%x")"),
                                         ",", OutputJson(R"("%a")")),
                            "");
  const NodeId x = g.FindNode("x"), a = g.FindNode("a"), out = g.FindNode("output");
  EXPECT_TRUE(CheckTopologicalPermutation(g, {x, a, out}).ok());
  absl::Status s = CheckTopologicalPermutation(g, {a, x, out});
  EXPECT_TRUE(IsBadInput(s));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("\"a\" comes before its input \"x\""));
  EXPECT_TRUE(IsBadInput(CheckTopologicalPermutation(g, {x, a})));
  EXPECT_TRUE(IsBadInput(CheckTopologicalPermutation(g, {x, x, out})));
  // A baseline's broken order is an unsupported graph, not bad input.
  EXPECT_TRUE(IsUnsupported(CheckBaselineOrder(g, {a, x, out}, "list")));
  EXPECT_TRUE(CheckBaselineOrder(g, {x, a, out}, "list").ok());
}

TEST(AnalysisTest, BaselineDependenciesOfZero3OpsAreTheirFirstArgument) {
  Graph g = Zero3(absl::StrCat(PlaceholderJson("p_a", "a"), ",", PlaceholderJson("x"), ",",
                               CallJson("mm", "aten.mm.default", R"("%x", "%p_a")"), ",",
                               OutputJson(R"("%mm")")),
                  ParamJson("a", 16));
  std::vector<std::string> names;
  for (NodeId d : BaselineDependencies(g, g.FindNode("release_ds_param_p_a_mm_0"))) {
    names.push_back(g.node(d).name());
  }
  EXPECT_THAT(names, ElementsAre("mm"));
  names.clear();
  for (NodeId d : BaselineDependencies(g, g.FindNode("mm"))) names.push_back(g.node(d).name());
  EXPECT_THAT(names, ElementsAre("x", "wait_allgather_ds_param__p_a_0"));
}

}  // namespace
}  // namespace overlap
