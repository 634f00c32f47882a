#include "graph/aot.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/aot_invariants.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/shape_rules.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;

Graph Lifted(const std::string& name, LossKind loss = LossKind::kDefault,
             Preset preset = Preset::kDefault) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  o.loss = loss;
  absl::StatusOr<Graph> g = BuildModel(name, o, preset);
  EXPECT_TRUE(g.ok()) << name;
  return g.ok() ? std::move(*g) : Graph();
}

std::vector<NodeId> Placeholders(const Graph& g) {
  std::vector<NodeId> out;
  for (NodeId id : g.order()) {
    if (g.node(id).op() == Op::kPlaceholder) out.push_back(id);
  }
  return out;
}

std::vector<std::pair<std::string, Preset>> AllModels() {
  std::vector<std::pair<std::string, Preset>> out;
  for (const std::string& name : ModelNames()) {
    for (Preset p : {Preset::kDefault, Preset::kTiny}) out.emplace_back(name, p);
  }
  return out;
}

// The calling convention of graph/aot.h, on every built-in model at both sizes.
TEST(AotTest, EveryBuiltInModelsPairFollowsTheConvention) {
  for (const auto& [name, preset] : AllModels()) {
    SCOPED_TRACE(name + (preset == Preset::kTiny ? " (tiny)" : ""));
    const Graph f = Lifted(name, LossKind::kDefault, preset);
    absl::StatusOr<AotPair> pair = BuildAotPair(f);
    ASSERT_TRUE(pair.ok()) << pair.status();
    absl::Status s = CheckAotPair(f, *pair);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(pair->num_outputs, 1);  // the loss
    EXPECT_GT(pair->saved_bytes, 0);
    const std::vector<NodeId> bph = Placeholders(pair->backward);
    EXPECT_EQ(pair->backward.node(bph.back()).name(), "tangents_1");
    EXPECT_TRUE(pair->backward.node(bph.back()).meta().shape.empty());  // a scalar tangent
  }
}

// The checker catches what it must: a pair tampered with in each way fails.
TEST(AotTest, TheConventionCheckCatchesTampering) {
  const Graph f = Lifted("gpt2", LossKind::kDefault, Preset::kTiny);
  absl::StatusOr<AotPair> pair = BuildAotPair(f);
  ASSERT_TRUE(pair.ok());
  ASSERT_TRUE(CheckAotPair(f, *pair).ok());
  {
    AotPair bad = *pair;
    bad.saved_bytes += 1;
    EXPECT_FALSE(CheckAotPair(f, bad).ok());
  }
  {
    AotPair bad = *pair;  // a gradient no longer marked
    const Node& out = bad.backward.node(bad.backward.last());
    for (const Value& v : out.args()[0].items()) {
      if (!v.is_ref()) continue;
      bad.backward.mutable_node(v.as_ref()).mutable_meta().has_grad_of = false;
      break;
    }
    EXPECT_FALSE(CheckAotPair(f, bad).ok());
  }
  {
    AotPair bad = *pair;  // a wrong stated shape
    for (NodeId id : bad.backward.order()) {
      if (bad.backward.node(id).target() == "aten.mm.default") {
        bad.backward.mutable_node(id).mutable_meta().shape.push_back(1);
        break;
      }
    }
    EXPECT_FALSE(CheckAotPair(f, bad).ok());
  }
  {
    AotPair bad = *pair;  // a table row missing
    Graph other = Lifted("mlp", LossKind::kDefault, Preset::kTiny);
    EXPECT_FALSE(CheckAotPair(other, bad).ok());
  }
}

// A two-layer MLP with MSE, formula by formula: the input needs no gradient, so the first
// layer's weight is never read by the backward (its row of the table is absent there).
// A pair that saves one activation twice, as [2, 3] and as its reshape [6] (AOTAutograd
// does so around a matmul): the forward returns it once and the backward reshapes it.
TEST(AotTest, SavedReshapesOfOneValueAreHandedOverOnce) {
  AotPair pair;
  absl::StatusOr<Graph> f = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [2, 3], "dtype": "float32", "tensor_size": 24}},
    {"name": "a", "op": "call_function", "target": "aten.relu.default", "args": ["%x"], "meta": {"shape": [2, 3], "dtype": "float32", "tensor_size": 24}},
    {"name": "v", "op": "call_function", "target": "aten.view.default", "args": ["%a", [6]], "meta": {"shape": [6], "dtype": "float32", "tensor_size": 24, "aliases_input": true}},
    {"name": "e", "op": "call_function", "target": "aten.expand.default", "args": ["%a", [2, 3]], "meta": {"shape": [2, 3], "dtype": "float32", "tensor_size": 24, "aliases_input": true}},
    {"name": "loss", "op": "call_function", "target": "aten.sum.default", "args": ["%v"], "meta": {"shape": [], "dtype": "float32", "tensor_size": 4}},
    {"name": "output", "op": "output", "target": "output", "args": [["%loss", "%a", "%v", "%e"]]}]})");
  absl::StatusOr<Graph> b = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "a", "op": "placeholder", "target": "a", "args": [], "meta": {"shape": [2, 3], "dtype": "float32", "tensor_size": 24}},
    {"name": "v", "op": "placeholder", "target": "v", "args": [], "meta": {"shape": [6], "dtype": "float32", "tensor_size": 24}},
    {"name": "e", "op": "placeholder", "target": "e", "args": [], "meta": {"shape": [2, 3], "dtype": "float32", "tensor_size": 24}},
    {"name": "tangents_1", "op": "placeholder", "target": "tangents_1", "args": [], "meta": {"shape": [], "dtype": "float32", "tensor_size": 4}},
    {"name": "m", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%v", "%tangents_1"], "meta": {"shape": [6], "dtype": "float32", "tensor_size": 24}},
    {"name": "n", "op": "call_function", "target": "aten.add.Tensor", "args": ["%a", "%e"], "meta": {"shape": [2, 3], "dtype": "float32", "tensor_size": 24}},
    {"name": "output", "op": "output", "target": "output", "args": [["%m", "%n"]]}]})");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(b.ok()) << b.status();
  pair.forward = *std::move(f);
  pair.backward = *std::move(b);
  absl::StatusOr<int64_t> removed = ShareSavedReshapes(&pair);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 2);  // v and e: a stays
  EXPECT_TRUE(Verify(pair.forward).ok());
  EXPECT_TRUE(Verify(pair.backward).ok()) << Verify(pair.backward);
  const Node& out = pair.forward.node(pair.forward.last());
  ASSERT_EQ(out.args()[0].items().size(), 2u);  // loss, a
  for (const char* name : {"v", "e"}) {
    const NodeId id = pair.backward.FindNode(name);
    ASSERT_NE(id, kNoNode) << name;
    const Node& n = pair.backward.node(id);
    EXPECT_EQ(n.target(), "aten.reshape.default") << name;
    EXPECT_TRUE(IsView(n)) << name;
    EXPECT_EQ(n.inputs()[0], pair.backward.FindNode("a")) << name;
  }
  // Run again: nothing left to share.
  absl::StatusOr<int64_t> again = ShareSavedReshapes(&pair);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
}

// A clone of a value nothing else reads becomes its alias; a clone of a parameter, of a
// value read elsewhere, of a view, or into another layout stays a copy.
TEST(AotTest, ClonesOfDeadValuesBecomeAliases) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16, "param": "w"}},
    {"name": "r", "op": "call_function", "target": "aten.relu.default", "args": ["%x"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "s", "op": "call_function", "target": "aten.relu.default", "args": ["%x"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "c_dead", "op": "call_function", "target": "aten.clone.default", "args": ["%r"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "c_param", "op": "call_function", "target": "aten.clone.default", "args": ["%w"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "c_shared", "op": "call_function", "target": "aten.clone.default", "args": ["%s"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "y", "op": "call_function", "target": "aten.add.Tensor", "args": ["%s", "%c_shared"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "output", "op": "output", "target": "output", "args": [["%c_dead", "%c_param", "%y"]]}],
    "params": [{"name": "w", "owner": "w", "shape": [4], "dtype": "float32", "bytes": 16}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<int64_t> changed = AliasLastUseClones(&*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, 1);
  EXPECT_EQ(g->node(g->FindNode("c_dead")).target(), "aten.detach.default");
  EXPECT_TRUE(IsView(g->node(g->FindNode("c_dead"))));
  EXPECT_EQ(g->node(g->FindNode("c_param")).target(), "aten.clone.default");
  EXPECT_EQ(g->node(g->FindNode("c_shared")).target(), "aten.clone.default");
  EXPECT_TRUE(Verify(*g).ok()) << Verify(*g);
}

// A chain behind a split: the real slice_backward stays, the whole-range ones after it go
// (their users read the first), one over a view's result or over part of a dimension stays.
TEST(AotTest, IdentitySliceBackwardsLeave) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "g", "op": "placeholder", "target": "g", "args": [], "meta": {"shape": [2, 3, 2], "dtype": "float32", "tensor_size": 48}},
    {"name": "s0", "op": "call_function", "target": "aten.slice_backward.default", "args": ["%g", [2, 3, 4], 2, 2, 9223372036854775807, 1], "meta": {"shape": [2, 3, 4], "dtype": "float32", "tensor_size": 96}},
    {"name": "s1", "op": "call_function", "target": "aten.slice_backward.default", "args": ["%s0", [2, 3, 4], 1, 0, 9223372036854775807, 1], "meta": {"shape": [2, 3, 4], "dtype": "float32", "tensor_size": 96}},
    {"name": "s2", "op": "call_function", "target": "aten.slice_backward.default", "args": ["%s1", [2, 3, 4], -3, 0, 2, 1], "meta": {"shape": [2, 3, 4], "dtype": "float32", "tensor_size": 96}},
    {"name": "t", "op": "call_function", "target": "aten.t.default", "args": ["%s2"], "meta": {"shape": [4, 3, 2], "dtype": "float32", "tensor_size": 96, "aliases_input": true}},
    {"name": "s3", "op": "call_function", "target": "aten.slice_backward.default", "args": ["%t", [4, 3, 2], 0, 0, 4, 1], "meta": {"shape": [4, 3, 2], "dtype": "float32", "tensor_size": 96}},
    {"name": "s4", "op": "call_function", "target": "aten.slice_backward.default", "args": ["%s3", [4, 3, 2], 0, 0, 3, 1], "meta": {"shape": [4, 3, 2], "dtype": "float32", "tensor_size": 96}},
    {"name": "output", "op": "output", "target": "output", "args": [["%s2", "%s4"]]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<int64_t> dropped = DropIdentitySliceBackwards(&*g);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2);  // s1 and s2
  EXPECT_EQ(g->FindNode("s1"), kNoNode);
  EXPECT_EQ(g->FindNode("s2"), kNoNode);
  EXPECT_EQ(g->node(g->FindNode("t")).inputs()[0], g->FindNode("s0"));
  EXPECT_NE(g->FindNode("s3"), kNoNode);  // over a view
  EXPECT_NE(g->FindNode("s4"), kNoNode);  // part of dimension 0
  EXPECT_TRUE(Verify(*g).ok()) << Verify(*g);
}

// A functionalized in-place ReLU6: the forward saves the activation's input y only for
// hardtanh's backward mask (through a clone); masked by the saved output h instead, y and
// its clone leave the pair. A backward whose bounds differ from the forward's keeps y.
TEST(AotTest, ActivationBackwardsAreMaskedByTheSavedOutput) {
  auto pair_with = [](double hi) {
    AotPair pair;
    absl::StatusOr<Graph> f = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "y", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%x"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "h", "op": "call_function", "target": "aten.hardtanh.default", "args": ["%y", 0.0, 6.0], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "loss", "op": "call_function", "target": "aten.sum.default", "args": ["%h"], "meta": {"shape": [], "dtype": "float32", "tensor_size": 4}},
      {"name": "output", "op": "output", "target": "output", "args": [["%loss", "%y", "%h"]]}]})");
    absl::StatusOr<Graph> b = ReadGraphJson(
        absl::StrCat(R"({"format": "overlap-graph", "version": 1, "nodes": [
      {"name": "y", "op": "placeholder", "target": "y", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "h", "op": "placeholder", "target": "h", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "tangents_1", "op": "placeholder", "target": "tangents_1", "args": [], "meta": {"shape": [], "dtype": "float32", "tensor_size": 4}},
      {"name": "c", "op": "call_function", "target": "aten.clone.default", "args": ["%y"], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "g", "op": "call_function", "target": "aten.hardtanh_backward.default", "args": ["%h", "%c", 0.0, )",
                     hi, R"(], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
      {"name": "output", "op": "output", "target": "output", "args": [["%g"]]}]})"));
    EXPECT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE(b.ok()) << b.status();
    pair.forward = *std::move(f);
    pair.backward = *std::move(b);
    return pair;
  };
  AotPair pair = pair_with(6.0);
  absl::StatusOr<int64_t> n = MaskActivationBackwardsByOutputs(&pair);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1);
  EXPECT_TRUE(Verify(pair.forward).ok());
  EXPECT_TRUE(Verify(pair.backward).ok()) << Verify(pair.backward);
  const Node& g = pair.backward.node(pair.backward.FindNode("g"));
  EXPECT_EQ(g.args()[1].as_ref(), pair.backward.FindNode("h"));
  EXPECT_EQ(pair.backward.FindNode("c"), kNoNode);  // the clone and y are gone
  EXPECT_EQ(pair.backward.FindNode("y"), kNoNode);
  EXPECT_EQ(pair.forward.node(pair.forward.last()).args()[0].items().size(), 2u);  // loss, h

  AotPair other = pair_with(5.0);
  absl::StatusOr<int64_t> none = MaskActivationBackwardsByOutputs(&other);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_NE(other.backward.FindNode("y"), kNoNode);
}

TEST(AotTest, TwoLayerMlpBackwardReadsOnlyTheSecondWeight) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  MlpConfig c;
  c.widths = {3, 4, 2};
  c.batch = 5;
  absl::StatusOr<Graph> f = BuildMlp(c, o);
  ASSERT_TRUE(f.ok());
  absl::StatusOr<AotPair> pair = BuildAotPair(*f);
  ASSERT_TRUE(pair.ok()) << pair.status();
  const Graph& bw = pair->backward;
  std::vector<std::string> placeholders, targets;
  for (NodeId id : bw.order()) {
    const Node& n = bw.node(id);
    (n.op() == Op::kPlaceholder ? placeholders : targets).push_back(n.name());
  }
  // Primal net.2.weight (for dX of layer 2); saved: layer 1's input x, the relu output (its
  // mask and layer 2's input), layer 2's output and the targets (MSE); the loss tangent.
  EXPECT_THAT(placeholders,
              ElementsAre("p_net_2_weight", "x", "targets", "relu", "addmm_1", "tangents_1"));
  EXPECT_EQ(pair->num_primals, 1);
  EXPECT_EQ(ClassifyParams(bw).absent, 3);  // net.0.weight, net.0.bias, net.2.bias
  std::vector<std::string> ops;
  for (NodeId id : bw.order()) {
    const Node& n = bw.node(id);
    if (n.op() == Op::kCallFunction) ops.push_back(n.target());
  }
  EXPECT_THAT(ops, ElementsAre("aten.mse_loss_backward.default",                         // dL/dy
                               "aten.sum.dim_IntList", "aten.view.default",              // d bias 2
                               "aten.t.default", "aten.t.default", "aten.mm.default",    // dX 2
                               "aten.t.default", "aten.mm.default", "aten.t.default",    // dW 2
                               "aten.threshold_backward.default",                        // relu
                               "aten.sum.dim_IntList", "aten.view.default",              // d bias 1
                               "aten.t.default", "aten.mm.default", "aten.t.default"));  // dW 1
}

TEST(AotTest, ModuleOwnedParametersAreRefused) {
  absl::StatusOr<Graph> f = BuildModel("mlp", {});
  ASSERT_TRUE(f.ok());
  absl::StatusOr<AotPair> pair = BuildAotPair(*f);
  ASSERT_FALSE(pair.ok());
  EXPECT_THAT(std::string(pair.status().message()), ::testing::HasSubstr("--lifted"));
}

TEST(AotTest, WithoutALossTheTangentHasTheOutputsShape) {
  const Graph f = Lifted("resnet18", LossKind::kNone);
  absl::StatusOr<AotPair> pair = BuildAotPair(f);
  ASSERT_TRUE(pair.ok()) << pair.status();
  const std::vector<NodeId> bph = Placeholders(pair->backward);
  EXPECT_EQ(pair->backward.node(bph.back()).meta().shape, (Shape{32, 1000}));
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

// The formulas read arguments by name through the schema: a convolution whose stride,
// padding, ... come as keywords gets the same backward as one that passes them by position.
TEST(AotTest, FormulasReadArgumentsByNameWhereverTheyAreGiven) {
  const Graph positional = Lifted("resnet18", LossKind::kDefault, Preset::kTiny);
  Graph keywords = positional;
  static constexpr const char* kNames[] = {"stride",     "padding",        "dilation",
                                           "transposed", "output_padding", "groups"};
  int moved = 0;
  for (NodeId id : keywords.order()) {
    const Node& n = keywords.node(id);
    if (n.target() != "aten.convolution.default" || n.args().size() != 9) continue;
    std::vector<Value> args(n.args().begin(), n.args().begin() + 3);
    ValueDict kwargs;
    for (int i = 0; i < 6; ++i) kwargs.emplace_back(kNames[i], n.args()[3 + i]);
    ASSERT_TRUE(keywords.SetArgs(id, std::move(args), std::move(kwargs)).ok());
    ++moved;
  }
  ASSERT_GT(moved, 0);
  absl::StatusOr<AotPair> a = BuildAotPair(positional);
  absl::StatusOr<AotPair> b = BuildAotPair(keywords);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  auto backward_args = [](const Graph& g) {  // everything after grad_output, input, weight
    std::vector<std::vector<Value>> out;
    for (NodeId id : g.order()) {
      const Node& n = g.node(id);
      if (n.target() != "aten.convolution_backward.default") continue;
      out.emplace_back(n.args().begin() + 3, n.args().end());
    }
    return out;
  };
  EXPECT_FALSE(backward_args(a->backward).empty());
  EXPECT_EQ(backward_args(a->backward), backward_args(b->backward));
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

// PReLU, pixel_shuffle, leaky_relu and max.dim on a gradient path: each formula emits its
// backward op (max.dim's scatter through unsqueezed indices) and the pair keeps the convention.
TEST(AotTest, PreluPixelShuffleLeakyReluAndMaxDimHaveFormulas) {
  absl::StatusOr<Graph> f = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [8], "dtype": "float32", "tensor_size": 32, "param": "prelu.weight"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [2, 8, 2, 2], "dtype": "float32", "tensor_size": 256, "input": "input/0"}},
    {"name": "p", "op": "call_function", "target": "aten.prelu.default", "args": ["%x", "%w"], "meta": {"shape": [2, 8, 2, 2], "dtype": "float32", "tensor_size": 256}},
    {"name": "s", "op": "call_function", "target": "aten.pixel_shuffle.default", "args": ["%p", 2], "meta": {"shape": [2, 2, 4, 4], "dtype": "float32", "tensor_size": 256}},
    {"name": "l", "op": "call_function", "target": "aten.leaky_relu.default", "args": ["%s", 0.1], "meta": {"shape": [2, 2, 4, 4], "dtype": "float32", "tensor_size": 256}},
    {"name": "m", "op": "call_function", "target": "aten.max.dim", "args": ["%l", 1], "meta": {"shapes": [[2, 4, 4], [2, 4, 4]], "dtypes": ["float32", "int64"], "tensor_size": 384}},
    {"name": "v", "op": "call_function", "target": "operator.getitem", "args": ["%m", 0], "meta": {"shape": [2, 4, 4], "dtype": "float32", "tensor_size": 128}},
    {"name": "loss", "op": "call_function", "target": "aten.sum.default", "args": ["%v"], "meta": {"shape": [], "dtype": "float32", "tensor_size": 4}},
    {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}],
    "params": [{"name": "prelu.weight", "owner": "w", "shape": [8], "dtype": "float32", "bytes": 32}]})");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<AotPair> pair = BuildAotPair(*f);
  ASSERT_TRUE(pair.ok()) << pair.status();
  std::vector<std::string> ops;
  for (NodeId id : pair->backward.order()) {
    const Node& n = pair->backward.node(id);
    if (n.op() == Op::kCallFunction && n.target() != "aten.expand.default") {
      ops.push_back(n.target());
    }
  }
  EXPECT_THAT(ops, ::testing::IsSupersetOf({"aten.unsqueeze.default", "aten.scatter.src",
                                            "aten.leaky_relu_backward.default",
                                            "aten.pixel_unshuffle.default",
                                            "aten.prelu_backward.default", "operator.getitem"}));
  const Node& lb = pair->backward.node(pair->backward.FindNode("leaky_relu_backward"));
  EXPECT_EQ(lb.args()[2].as_double(), 0.1);
  EXPECT_FALSE(lb.args()[3].as_bool());
}

}  // namespace
}  // namespace overlap
