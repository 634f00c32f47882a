#include "graph/graph.h"

#include "gmock/gmock.h"
#include "graph/subgraph.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// x -> relu -> add(relu, x) -> output
struct Diamond {
  Graph g;
  NodeId x, relu, add, out;
  Diamond() {
    x = *g.AddNode(Op::kPlaceholder, "x", "x");
    relu = *g.AddNode(Op::kCallFunction, "relu", "aten.relu.default", {Value::Ref(x)});
    add =
        *g.AddNode(Op::kCallFunction, "add", "aten.add.Tensor", {Value::Ref(relu), Value::Ref(x)});
    out = *g.AddNode(Op::kOutput, "output", "output", {Value::Ref(add)});
  }
};

TEST(GraphTest, InputsAndUsersFollowArguments) {
  Diamond d;
  EXPECT_THAT(d.g.node(d.add).inputs(), ElementsAre(d.relu, d.x));
  EXPECT_THAT(d.g.node(d.x).users(), ElementsAre(d.relu, d.add));
  EXPECT_TRUE(Verify(d.g).ok());
  EXPECT_EQ(d.g.FindNode("add"), d.add);
  EXPECT_EQ(d.g.FindNode("nope"), kNoNode);
  EXPECT_THAT(d.g.OrderVector(), ElementsAre(d.x, d.relu, d.add, d.out));
}

TEST(GraphTest, DataInputsAreArgsThenKwargsEachOnce) {
  Graph g;
  NodeId a = *g.AddNode(Op::kPlaceholder, "a", "a");
  NodeId b = *g.AddNode(Op::kPlaceholder, "b", "b");
  NodeId c = *g.AddNode(Op::kPlaceholder, "c", "c");
  NodeId n = *g.AddNode(Op::kCallFunction, "n", "f",
                        {Value::List({Value::Ref(b), Value::Ref(a)}), Value::Ref(b),
                         Value::Slice(Value(), Value::Ref(a), Value::Int(2))},
                        {{"k", Value::Dict({{"x", Value::Ref(c)}, {"y", Value::Ref(a)}})}});
  EXPECT_THAT(g.node(n).inputs(), ElementsAre(b, a, c));
  EXPECT_THAT(g.node(n).arg_inputs(), ElementsAre(b, a));
  EXPECT_THAT(g.node(a).users(), ElementsAre(n));
}

TEST(GraphTest, WideArgumentListsDedupInLinearTime) {
  Graph g;
  std::vector<Value> refs;
  for (int i = 0; i < 100; ++i) {
    NodeId p = *g.AddNode(Op::kPlaceholder, "p" + std::to_string(i), "p");
    refs.push_back(Value::Ref(p));
    refs.push_back(Value::Ref(p));
  }
  NodeId o = *g.AddNode(Op::kOutput, "output", "output", {Value::List(refs)});
  EXPECT_EQ(g.node(o).inputs().size(), 100u);
  EXPECT_TRUE(Verify(g).ok());
}

TEST(GraphTest, RejectsDuplicateMalformedAndDanglingNames) {
  Diamond d;
  EXPECT_THAT(d.g.AddNode(Op::kPlaceholder, "x", "x").status().message(),
              HasSubstr("duplicate node name \"x\""));
  EXPECT_THAT(d.g.AddNode(Op::kPlaceholder, "1x", "x").status().message(), HasSubstr("malformed"));
  EXPECT_FALSE(d.g.AddNode(Op::kPlaceholder, "", "x").ok());
  EXPECT_THAT(d.g.AddNode(Op::kCallFunction, "y", "f", {Value::Ref(99)}).status().message(),
              HasSubstr("missing node"));
  // A failed insertion leaves the graph as it was.
  EXPECT_EQ(d.g.size(), 4);
  EXPECT_TRUE(Verify(d.g).ok());
}

TEST(GraphTest, InsertAfterAndReplaceAllUsesWith) {
  Diamond d;
  // Insert a cast after x and make every user of x read it instead (FX's pattern).
  NodeId cast = *d.g.AddNode(Op::kCallFunction, "cast", "aten._to_copy.default", {Value::Ref(d.x)},
                             {}, InsertPoint::After(d.x));
  EXPECT_EQ(d.g.ReplaceAllUsesWith(d.x, cast), 2);
  EXPECT_THAT(d.g.node(d.x).users(), ElementsAre(cast));
  EXPECT_THAT(d.g.node(d.add).inputs(), ElementsAre(d.relu, cast));
  EXPECT_THAT(d.g.OrderVector(), ElementsAre(d.x, cast, d.relu, d.add, d.out));
  EXPECT_TRUE(Verify(d.g).ok());
}

TEST(GraphTest, ReplaceAllUsesWithFilter) {
  Diamond d;
  NodeId y = *d.g.AddNode(Op::kPlaceholder, "y", "y", {}, {}, InsertPoint::Before(d.relu));
  EXPECT_EQ(d.g.ReplaceAllUsesWith(d.x, y, [](const Node& u) { return u.name() == "add"; }), 1);
  EXPECT_THAT(d.g.node(d.x).users(), ElementsAre(d.relu));
  EXPECT_TRUE(Verify(d.g).ok());
}

TEST(GraphTest, EraseNeedsNoUsers) {
  Diamond d;
  EXPECT_EQ(d.g.Erase(d.relu).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(d.g.SetArgs(d.add, {Value::Ref(d.x), Value::Ref(d.x)}, {}).ok());
  ASSERT_TRUE(d.g.Erase(d.relu).ok());
  EXPECT_FALSE(d.g.IsLive(d.relu));
  EXPECT_EQ(d.g.FindNode("relu"), kNoNode);
  EXPECT_EQ(d.g.size(), 3);
  EXPECT_THAT(d.g.node(d.x).users(), ElementsAre(d.add));
  EXPECT_TRUE(Verify(d.g).ok());
  // The name is free again.
  EXPECT_TRUE(d.g.AddNode(Op::kPlaceholder, "relu", "r", {}, {}, InsertPoint::Before(d.x)).ok());
}

TEST(GraphTest, ReorderIsCheckedByTheVerifier) {
  Diamond d;
  ASSERT_TRUE(d.g.SetOrder({d.x, d.add, d.relu, d.out}).ok());
  EXPECT_THAT(Verify(d.g).message(), HasSubstr("\"add\": reads \"relu\", which is not placed"));
  d.g.MoveAfter(d.add, d.relu);
  EXPECT_TRUE(Verify(d.g).ok());
  EXPECT_FALSE(d.g.SetOrder({d.x, d.x, d.add, d.out}).ok());
  EXPECT_FALSE(d.g.SetOrder({d.x}).ok());
}

TEST(GraphTest, UniqueNameFollowsFx) {
  Diamond d;
  EXPECT_EQ(d.g.UniqueName("fresh"), "fresh");
  EXPECT_EQ(d.g.UniqueName("add"), "add_1");
  *d.g.AddNode(Op::kPlaceholder, "w_7", "w");
  EXPECT_EQ(d.g.UniqueName("w_7"), "w_8");
  EXPECT_EQ(d.g.UniqueName("a-b c"), "a_b_c");
  EXPECT_EQ(d.g.UniqueName("0x"), "_0x");
}

// A name ending in a huge number once overflowed the counter ("..._-9223372036854775808",
// a malformed name): such a name counts from "_1" instead.
TEST(GraphTest, UniqueNameNeverOverflows) {
  Diamond d;
  *d.g.AddNode(Op::kPlaceholder, "p_9223372036854775807", "p");
  EXPECT_EQ(d.g.UniqueName("p_9223372036854775807"), "p_9223372036854775807_1");
  *d.g.AddNode(Op::kPlaceholder, "q_99999999999999999999", "q");  // beyond int64
  EXPECT_EQ(d.g.UniqueName("q_99999999999999999999"), "q_99999999999999999999_1");
  EXPECT_TRUE(IsValidNodeName(d.g.UniqueName("p_9223372036854775807")));
}

TEST(GraphTest, CopyIsDeepAndEqual) {
  Diamond d;
  Graph copy = d.g;
  EXPECT_TRUE(copy == d.g);
  EXPECT_EQ(copy.FindNode("add"), d.add);
  copy.mutable_node(d.add).mutable_meta().set_tensor_size(4);
  EXPECT_FALSE(copy == d.g);
  EXPECT_TRUE(Verify(copy).ok());
}

TEST(GraphTest, ParamTableRejectsDuplicatesAndNegativeBytes) {
  Graph g;
  Param p;
  p.name = "fc.weight";
  p.owner = "fc";
  p.bytes = 16;
  ASSERT_TRUE(g.AddParam(p).ok());
  EXPECT_FALSE(g.AddParam(p).ok());
  p.owner = "other";
  EXPECT_TRUE(g.AddParam(p).ok());  // the same parameter through a second owner
  p.bytes = -1;
  p.owner = "third";
  EXPECT_THAT(g.AddParam(p).message(), HasSubstr("negative"));
  EXPECT_THAT(g.ParamsOwnedBy("fc"), ElementsAre(0));
  EXPECT_EQ(g.FindParam("fc.weight"), 0);
}

TEST(SubgraphTest, ExtractMakesPlaceholdersAndOutputs) {
  Diamond d;
  std::vector<NodeId> ins, outs;
  absl::StatusOr<Graph> sub = ExtractSubgraph(d.g, {d.relu}, &ins, &outs);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(Verify(*sub).ok());
  EXPECT_THAT(ins, ElementsAre(d.x));
  EXPECT_THAT(outs, ElementsAre(d.relu));
  EXPECT_EQ(sub->size(), 3);  // x, relu, output
  const Node& out = sub->node(sub->last());
  ASSERT_EQ(out.args().size(), 1u);
  EXPECT_TRUE(out.args()[0].is_ref());  // one output: bare

  absl::StatusOr<Graph> both = ExtractSubgraph(d.g, {d.add, d.relu});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(Verify(*both).ok());
  EXPECT_FALSE(ExtractSubgraph(d.g, {d.out}).ok());
  EXPECT_FALSE(ExtractSubgraph(d.g, {d.relu, d.relu}).ok());
}

TEST(SubgraphTest, NoOutsideUsersGivesEmptyTuple) {
  Graph g;
  NodeId x = *g.AddNode(Op::kPlaceholder, "x", "x");
  NodeId dead = *g.AddNode(Op::kCallFunction, "dead", "f", {Value::Ref(x)});
  *g.AddNode(Op::kOutput, "output", "output", {Value::Ref(x)});
  absl::StatusOr<Graph> sub = ExtractSubgraph(g, {dead});
  ASSERT_TRUE(sub.ok());
  const Node& out = sub->node(sub->last());
  EXPECT_EQ(out.args()[0].kind(), Value::Kind::kList);
  EXPECT_TRUE(out.args()[0].items().empty());
}

}  // namespace
}  // namespace overlap
