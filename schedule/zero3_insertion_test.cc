// One test per insertion rule of docs/deepcompile.md ("Insertion rules"), plus properties.
#include "schedule/zero3_insertion.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/adversarial_graphs.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "graph/test_graphs.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "rapidcheck/gtest.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Graph Parse(const std::string& nodes, const std::string& params) {
  return ParseGraphParts(nodes, params);
}

std::vector<std::string> Order(const Graph& g) {
  std::vector<std::string> out;
  for (NodeId id : g.order()) out.push_back(g.node(id).name());
  return out;
}

std::string ArgsOf(const Graph& g, const std::string& name) {
  std::string json = WriteGraphJson(g);
  const size_t at = json.find(absl::StrCat("{\"name\": \"", name, "\""));
  if (at == std::string::npos) return "";
  const size_t args = json.find("\"args\": ", at);
  return json.substr(args + 8, json.find(']', args) - args - 7);
}

Graph Insert(Graph g, int graph_id) {
  absl::StatusOr<bool> changed = Zero3Insertion(static_cast<GraphKind>(graph_id)).Run(&g);
  EXPECT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
  return g;
}

constexpr char kW[] =
    R"({"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "w"}})";
constexpr char kX[] = R"({"name": "x", "op": "placeholder", "target": "x", "args": []})";
constexpr char kWParam[] =
    R"({"name": "w", "owner": "p_w", "bytes": 64, "dtype": "float32", "shape": [4, 4]})";

TEST(Zero3InsertionTest, AllgatherWaitAndReleaseAroundOneUseThroughAnAlias) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",", kX, ",",
              R"({"name": "t", "op": "call_function", "target": "aten.t.default", "args": ["%p_w"], "meta": {"aliases_input": true}},)"
              R"({"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%t"]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": ["%mm"]})"),
          kWParam),
      0);
  EXPECT_THAT(Order(g),
              ElementsAre("p_w", "x", "allgather_ds_param_p_w_0", "wait_allgather_ds_param__p_w_0",
                          "t", "mm", "release_ds_param_p_w_mm_0", "output"));
  EXPECT_EQ(ArgsOf(g, "allgather_ds_param_p_w_0"), "[\"%p_w\", 0, 0]");
  EXPECT_EQ(ArgsOf(g, "wait_allgather_ds_param__p_w_0"), "[\"%allgather_ds_param_p_w_0\", 0, 0]");
  EXPECT_EQ(ArgsOf(g, "t"), "[\"%wait_allgather_ds_param__p_w_0\"]");
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_mm_0"), "[\"%mm\", 0, 0, 1]");
  EXPECT_EQ(ArgsOf(g, "output"), "[\"%release_ds_param_p_w_mm_0\"]");
  const Node& ag = g.node(g.FindNode("allgather_ds_param_p_w_0"));
  EXPECT_EQ(ag.target(), "dc.allgather_param");
  EXPECT_EQ(ag.meta().tensor_size, 64);
  EXPECT_TRUE(g.node(g.FindNode("wait_allgather_ds_param__p_w_0")).meta().aliases_input);
}

// Rule 4: a down-cast that is the parameter's only (non-output) user is fused into the
// allgather, which gathers the smaller tensor.
TEST(Zero3InsertionTest, AnOnlyUserDownCastIsFusedIntoTheAllgather) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",", kX, ",",
              R"({"name": "cast", "op": "call_function", "target": "prims.convert_element_type.default", "args": ["%p_w", "torch.bfloat16"], "meta": {"dtype": "bfloat16", "tensor_size": 32}},)"
              R"({"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%cast"]},)"
              R"({"name": "add", "op": "call_function", "target": "aten.add.Tensor", "args": ["%mm", "%cast"]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": ["%add", "%p_w"]})"),
          kWParam),
      0);
  EXPECT_EQ(g.FindNode("cast"), kNoNode);
  EXPECT_THAT(
      Order(g),
      ElementsAre("p_w", "x", "allgather_ds_param_p_w_0", "wait_allgather_ds_param__p_w_0", "mm",
                  "release_ds_param_p_w_mm_0", "add", "release_ds_param_p_w_add_0", "output"));
  const Node& ag = g.node(g.FindNode("allgather_ds_param_p_w_0"));
  ASSERT_EQ(ag.kwargs().size(), 1u);
  EXPECT_EQ(ag.kwargs()[0].first, "dtype");
  EXPECT_EQ(ag.kwargs()[0].second.as_string(), "bfloat16");
  EXPECT_EQ(ag.meta().tensor_size, 32);
  EXPECT_EQ(ag.meta().dtype, "bfloat16");
  EXPECT_EQ(ArgsOf(g, "mm"), "[\"%x\", \"%wait_allgather_ds_param__p_w_0\"]");
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_add_0"), "[\"%add\", 0, 0, 2]");
  EXPECT_EQ(ArgsOf(g, "output"), "[\"%release_ds_param_p_w_add_0\", \"%p_w\"]");
}

// Rule 4 applies only to a down-cast that is the only user: an up-cast, or a down-cast
// next to another user, stays in the graph.
TEST(Zero3InsertionTest, UpCastsAndSharedCastsAreNotFused) {
  for (
      const char* second_user :
      {"",
       R"({"name": "relu", "op": "call_function", "target": "aten.relu.default", "args": ["%p_w"]},)"}) {
    const bool shared = std::string(second_user).size() > 0;
    const std::string to = shared ? "bfloat16" : "float64";
    Graph g = Insert(
        Parse(
            absl::StrCat(
                kW, ",", kX, ",",
                R"({"name": "cast", "op": "call_function", "target": "aten._to_copy.default", "args": ["%p_w"], "kwargs": {"dtype": "torch.)",
                to, R"("}},)", second_user,
                R"({"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%cast"]},)"
                R"({"name": "output", "op": "output", "target": "output", "args": ["%mm"]})"),
            kWParam),
        0);
    EXPECT_NE(g.FindNode("cast"), kNoNode) << to;
    const Node& ag = g.node(g.FindNode("allgather_ds_param_p_w_0"));
    EXPECT_TRUE(ag.kwargs().empty()) << to;
    EXPECT_EQ(ag.meta().tensor_size, 64) << to;
  }
}

TEST(Zero3InsertionTest, EveryRealUseGetsAReleaseWithNUsers) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",", kX, ",",
              R"({"name": "a", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%p_w"]},)"
              R"({"name": "b", "op": "call_function", "target": "aten.add.Tensor", "args": ["%a", "%p_w"]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": ["%b"]})"),
          kWParam),
      0);
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_a_0"), "[\"%a\", 0, 0, 2]");
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_b_0"), "[\"%b\", 0, 0, 2]");
  EXPECT_EQ(ArgsOf(g, "b"), "[\"%release_ds_param_p_w_a_0\", \"%wait_allgather_ds_param__p_w_0\"]");
}

TEST(Zero3InsertionTest, ANodeReadingTheParameterTwiceCountsTwiceAndNamesClashTheFxWay) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",",
              R"({"name": "sq", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%p_w", "%p_w"]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": ["%sq"]})"),
          kWParam),
      0);
  // The second release's name ends in _0 like the first: FX increments the number, so it
  // is _1 although ds_id is 0. Read ds_id from args[2].
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_sq_0"), "[\"%release_ds_param_p_w_sq_1\", 0, 0, 2]");
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_sq_1"), "[\"%sq\", 0, 0, 2]");
}

TEST(Zero3InsertionTest, TupleResultsAreReleasedAfterTheirFirstGetitem) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",", kX, ",",
              R"({"name": "ln", "op": "call_function", "target": "aten.native_layer_norm.default", "args": ["%x", [4], "%p_w", null, 1e-05]},)"
              R"({"name": "getitem", "op": "call_function", "target": "operator.getitem", "args": ["%ln", 0]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": ["%getitem"]})"),
          kWParam),
      0);
  EXPECT_EQ(ArgsOf(g, "release_ds_param_p_w_getitem_0"), "[\"%getitem\", 0, 0, 1]");
  EXPECT_EQ(ArgsOf(g, "output"), "[\"%release_ds_param_p_w_getitem_0\"]");
}

TEST(Zero3InsertionTest, TheOutputKeepsTheRawParameterAndUnusedParametersAreSkipped) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",",
              R"({"name": "p_v", "op": "placeholder", "target": "p_v", "args": [], "meta": {"param": "v"}},)"
              R"({"name": "neg", "op": "call_function", "target": "aten.neg.default", "args": ["%p_w"]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": [["%neg", "%p_w", "%p_v"]]})"),
          absl::StrCat(kWParam, R"(, {"name": "v", "owner": "p_v", "bytes": 8})")),
      0);
  EXPECT_EQ(ArgsOf(g, "output"), "[[\"%release_ds_param_p_w_neg_0\", \"%p_w\", \"%p_v\"]");
  EXPECT_EQ(g.FindNode("allgather_ds_param_p_v_1"), kNoNode);  // only the output reads p_v
}

TEST(Zero3InsertionTest, BackwardGraphsReduceEveryGradient) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kW, ",", kX, ",",
              R"({"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%p_w"]},)"
              R"({"name": "grad_w", "op": "call_function", "target": "aten.mm.default", "args": ["%mm", "%x"], "meta": {"grad_of": "w"}},)"
              R"({"name": "output", "op": "output", "target": "output", "args": [["%grad_w"]]})"),
          kWParam),
      1);
  EXPECT_EQ(ArgsOf(g, "reduce_ds_param_p_w"), "[\"%grad_w\", 1, 0]");
  EXPECT_EQ(ArgsOf(g, "allgather_ds_param_p_w_0"), "[\"%p_w\", 1, 0]");
  std::vector<std::string> order = Order(g);
  const auto grad = std::find(order.begin(), order.end(), "grad_w");
  ASSERT_NE(grad, order.end());
  EXPECT_EQ(*(grad + 1), "reduce_ds_param_p_w");
}

TEST(Zero3InsertionTest, ModuleOwnedParametersAreRejectedNamingTheFirst) {
  absl::StatusOr<Graph> g = BuildModel("mlp", {});
  ASSERT_TRUE(g.ok());
  Graph before = *g;
  absl::StatusOr<bool> r = Zero3Insertion(GraphKind::kForward).Run(&*g);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("parameter \"net.0.weight\" is owned by call_module node \"net_0\""));
  EXPECT_TRUE(*g == before);  // unchanged
}

TEST(Zero3InsertionTest, PlaceholdersMoveToTheHead) {
  Graph g = Insert(
      Parse(
          absl::StrCat(
              kX, ",",
              R"({"name": "relu", "op": "call_function", "target": "aten.relu.default", "args": ["%x"]},)",
              kW, ",",
              R"({"name": "mul", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%relu", "%p_w"]},)"
              R"({"name": "output", "op": "output", "target": "output", "args": ["%mul"]})"),
          kWParam),
      0);
  EXPECT_THAT(Order(g), ElementsAre("x", "p_w", "relu", "allgather_ds_param_p_w_0",
                                    "wait_allgather_ds_param__p_w_0", "mul",
                                    "release_ds_param_p_w_mul_0", "output"));
}

TEST(Zero3InsertionTest, EveryLiftedBuiltInModelStaysValid) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    const int64_t before = g->size();
    absl::StatusOr<bool> changed = Zero3Insertion(GraphKind::kForward).Run(&*g);
    ASSERT_TRUE(changed.ok()) << name << ": " << changed.status();
    EXPECT_TRUE(*changed);
    EXPECT_TRUE(Verify(*g).ok()) << name << ": " << Verify(*g);
    EXPECT_GT(g->size(), before);
    EXPECT_TRUE(HasZero3Ops(*g));
  }
}

// Every use of a gathered parameter lies between its wait and one of its releases; every
// release of a ds_id carries the same n_users, equal to their count.
RC_GTEST_PROP(Zero3InsertionPropertyTest, prop_UsesLieBetweenWaitAndRelease, ()) {
  Graph g = *ArbitraryGraph();
  // Lift module-owned graphs is not this pass's job: skip them.
  absl::StatusOr<bool> changed = Zero3Insertion(GraphKind::kForward).Run(&g);
  if (!changed.ok()) {
    RC_ASSERT(changed.status().message().find("is owned by") != absl::string_view::npos);
    return;
  }
  RC_ASSERT(Verify(g).ok());
  absl::flat_hash_map<int64_t, int64_t> releases, n_users;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.target() != kReleaseTarget) continue;
    const int64_t ds = n.args()[2].as_int();
    ++releases[ds];
    n_users[ds] = n.args()[3].as_int();
  }
  for (const auto& [ds, count] : releases) RC_ASSERT(n_users[ds] == count);
  // Once a parameter is gathered, nothing but its allgather and the raw output reads the
  // placeholder. (A parameter with no real use, say one only returned through a view, is
  // left alone.)
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kPlaceholder || !n.meta().has_param) continue;
    bool gathered = false;
    for (NodeId u : n.users()) gathered |= g.node(u).target() == kAllgatherTarget;
    if (!gathered) continue;
    for (NodeId u : n.users()) {
      const Node& user = g.node(u);
      RC_ASSERT(user.op() == Op::kOutput || user.target() == kAllgatherTarget);
    }
  }
}

// Many uses feeding the output node once took quadratic time (each release re-linked the
// output): 30,000 uses of one parameter, and 30,000 parameters each used once and returned.
// A quadratic pass takes minutes here, past the test's timeout.
TEST(Zero3InsertionTest, ManyReturnedUsesInsertInLinearTime) {
  for (const auto& [params, uses] : {std::pair<int64_t, int64_t>{1, 30000}, {30000, 1}}) {
    Graph g = WideOutputGraph(params, uses);
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
    ASSERT_TRUE(Verify(g).ok()) << Verify(g);
    int64_t releases = 0;
    for (NodeId id : g.order()) releases += g.node(id).target() == kReleaseTarget;
    EXPECT_EQ(releases, params * uses);
    // The output returns every use through its release, as the immediate rewrite would.
    const Node& out = g.node(g.last());
    ASSERT_EQ(out.inputs().size(), static_cast<size_t>(params * uses));
    for (NodeId in : out.inputs()) EXPECT_EQ(g.node(in).target(), kReleaseTarget);
  }
}

// A placeholder named with the largest int64 suffix next to a node whose name FX would
// number after it: the unique name does not overflow into a malformed one.
TEST(Zero3InsertionTest, HugeNumericSuffixesMakeValidNames) {
  Graph g = Parse(
      R"({"name": "p_9223372036854775807", "op": "placeholder",
          "target": "p_9223372036854775807", "args": [], "meta": {"param": "w"}},
         {"name": "x", "op": "placeholder", "target": "x", "args": []},
         {"name": "reduce_ds_param_p_9223372036854775807", "op": "call_function",
          "target": "aten.mm.default", "args": ["%x", "%p_9223372036854775807"],
          "meta": {"grad_of": "w"}},
         {"name": "output", "op": "output", "target": "output",
          "args": ["%reduce_ds_param_p_9223372036854775807"]})",
      R"({"name": "w", "owner": "p_9223372036854775807", "bytes": 64})");
  absl::StatusOr<bool> r = Zero3Insertion(GraphKind::kBackward).Run(&g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
  EXPECT_NE(g.FindNode("reduce_ds_param_p_9223372036854775807_1"), kNoNode);
}

}  // namespace
}  // namespace overlap
