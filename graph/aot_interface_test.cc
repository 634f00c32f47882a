#include "graph/aot_interface.h"

#include <string>
#include <vector>

#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

// A forward returning [y, x, y, z]: y pairs with tangents_1, the rest are saved.
Graph Forward() {
  return ParseGraphParts(PlaceholderJson("x") + "," +
                             CallJson("y", "aten.relu.default", R"("%x")") + "," +
                             CallJson("z", "aten.neg.default", R"("%y")") + "," +
                             OutputJson(R"(["%y", "%x", "%y", "%z"])"),
                         "");
}

std::vector<std::string> Names(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<std::string> out;
  for (NodeId id : ids) out.push_back(g.node(id).name());
  return out;
}

TEST(AotInterfaceTest, BackwardInputsAreItsPlaceholdersAndLargestTangent) {
  const Graph b = ParseGraphParts(PlaceholderJson("x") + "," + PlaceholderJson("tangents_3") + "," +
                                      PlaceholderJson("tangents_1") + "," +
                                      CallJson("g", "aten.neg.default", R"("%x")") + "," +
                                      OutputJson(R"(["%g"])"),
                                  "");
  const BackwardInputs in = ReadBackwardInputs(b);
  EXPECT_EQ(in.placeholder.size(), 3u);
  EXPECT_EQ(in.placeholder.at("x"), b.FindNode("x"));
  EXPECT_EQ(in.last, b.FindNode("tangents_1"));
  EXPECT_EQ(in.tangents, 3);
  EXPECT_EQ(ReadBackwardInputs(Graph()).last, kNoNode);
}

TEST(AotInterfaceTest, SavedNodesAreTheListItemsPastTheTangents) {
  const Graph f = Forward();
  ASSERT_EQ(ForwardOutputList(f), f.last());
  EXPECT_EQ(Names(f, SavedNodes(f, 1)), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(Names(f, SavedNodes(f, 0)), (std::vector<std::string>{"y", "x", "y", "z"}));
  // Not a list output: no saved tensors.
  const Graph plain = ParseGraphParts(PlaceholderJson("x") + "," + OutputJson(R"("%x")"), "");
  EXPECT_EQ(ForwardOutputList(plain), kNoNode);
  EXPECT_TRUE(SavedNodes(plain, 0).empty());
  EXPECT_EQ(ForwardOutputList(Graph()), kNoNode);
}

TEST(AotInterfaceTest, DroppingSavedOutputsKeepsTheTangentsItems) {
  Graph f = Forward();
  absl::StatusOr<int64_t> dropped = DropSavedOutputs(&f, {"y", "z"}, 1);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2);  // the second y and z; the first y pairs with tangents_1
  EXPECT_EQ(Names(f, SavedNodes(f, 0)), (std::vector<std::string>{"y", "x"}));
  dropped = DropSavedOutputs(&f, {}, 1);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 0);
}

}  // namespace
}  // namespace overlap
