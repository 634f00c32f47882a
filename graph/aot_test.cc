#include "graph/aot.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
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

std::vector<Value> OutputValues(const Graph& g) {
  const Node& out = g.node(g.last());
  return out.args().empty() || out.args()[0].kind() != Value::Kind::kList ? std::vector<Value>{}
                                                                          : out.args()[0].items();
}

// Whether `id` is a parameter placeholder or a view chain of one.
bool AliasesAParameter(const Graph& g, NodeId id) {
  while (true) {
    const Node& n = g.node(id);
    if (n.op() == Op::kPlaceholder) return n.meta().has_param;
    if (!IsView(n) || n.inputs().empty()) return false;
    id = n.inputs()[0];
  }
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
    const Graph& fw = pair->forward;
    const Graph& bw = pair->backward;
    ASSERT_TRUE(Verify(fw).ok()) << Verify(fw);
    ASSERT_TRUE(Verify(bw).ok()) << Verify(bw);
    ShapeCheckOptions strict;
    strict.require_rules = true;
    ASSERT_TRUE(CheckShapes(fw, strict).ok()) << CheckShapes(fw, strict).status();
    ASSERT_TRUE(CheckShapes(bw, strict).ok()) << CheckShapes(bw, strict).status();

    // Forward: its own output (the loss, a scalar), then the saved tensors, none of which
    // is a parameter or a view of one.
    const std::vector<Value> rets = OutputValues(fw);
    ASSERT_EQ(static_cast<int64_t>(rets.size()), pair->num_outputs + pair->num_saved);
    EXPECT_EQ(pair->num_outputs, 1);
    EXPECT_TRUE(fw.node(rets[0].as_ref()).meta().shape.empty());  // the scalar loss
    int64_t saved_bytes = 0;
    std::set<NodeId> bases;
    for (size_t i = 1; i < rets.size(); ++i) {
      ASSERT_TRUE(rets[i].is_ref());
      EXPECT_FALSE(AliasesAParameter(fw, rets[i].as_ref())) << fw.node(rets[i].as_ref()).name();
      NodeId base = rets[i].as_ref();
      while (IsView(fw.node(base))) base = fw.node(base).inputs()[0];
      if (bases.insert(base).second) saved_bytes += fw.node(base).meta().tensor_size;
    }
    EXPECT_EQ(saved_bytes, pair->saved_bytes);
    EXPECT_GT(pair->saved_bytes, 0);

    // Backward placeholders: primals, then the saved tensors under their forward names, in
    // the forward's output order, then one scalar tangent.
    const std::vector<NodeId> bph = Placeholders(bw);
    ASSERT_EQ(static_cast<int64_t>(bph.size()), pair->num_primals + pair->num_saved + 1);
    for (int64_t i = 0; i < pair->num_primals; ++i) {
      EXPECT_TRUE(bw.node(bph[i]).meta().has_param) << bw.node(bph[i]).name();
      EXPECT_FALSE(bw.node(bph[i]).users().empty()) << "an unread primal";
    }
    for (int64_t i = 0; i < pair->num_saved; ++i) {
      EXPECT_EQ(bw.node(bph[pair->num_primals + i]).name(), fw.node(rets[1 + i].as_ref()).name());
    }
    EXPECT_EQ(bw.node(bph.back()).name(), "tangents_1");
    EXPECT_TRUE(bw.node(bph.back()).meta().shape.empty());

    // Backward output: one value per forward placeholder; every trainable parameter's is its
    // gradient, shaped like it and marked grad_of; the others are null.
    const std::vector<NodeId> fph = Placeholders(fw);
    const std::vector<Value> grads = OutputValues(bw);
    ASSERT_EQ(grads.size(), fph.size());
    for (size_t i = 0; i < fph.size(); ++i) {
      const Node& p = fw.node(fph[i]);
      if (!p.meta().has_param) {
        EXPECT_TRUE(grads[i].is_none()) << p.name();
        continue;
      }
      ASSERT_TRUE(grads[i].is_ref()) << p.name() << " has no gradient";
      const Node& g = bw.node(grads[i].as_ref());
      EXPECT_EQ(g.meta().grad_of, p.meta().param);
      EXPECT_EQ(g.meta().shape, p.meta().shape) << p.name();
    }
    // The whole table, so ds_ids agree.
    ASSERT_EQ(bw.params().size(), f.params().size());
    for (size_t i = 0; i < f.params().size(); ++i) EXPECT_EQ(bw.params()[i], f.params()[i]);
  }
}

// A two-layer MLP with MSE, formula by formula: the input needs no gradient, so the first
// layer's weight is never read by the backward (its row of the table is absent there).
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
