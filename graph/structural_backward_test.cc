#include "graph/structural_backward.h"

#include "gmock/gmock.h"
#include "graph/models.h"
#include "graph/summary.h"
#include "graph/test_graphs.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(BackwardTest, LinearLayerGetsInputAndWeightGradients) {
  // y = x @ t(w): the weight gradient flows back through the view to w.
  absl::StatusOr<Graph> f = GraphFromParts(
      R"({"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "w", "tensor_size": 64}},
         {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"tensor_size": 32}},
         {"name": "h", "op": "call_function", "target": "aten.relu.default", "args": ["%x"], "meta": {"tensor_size": 32, "device_time": 1.0}},
         {"name": "t", "op": "call_function", "target": "aten.t.default", "args": ["%p_w"], "meta": {"aliases_input": true, "tensor_size": 64}},
         {"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%h", "%t"], "meta": {"tensor_size": 32, "device_time": 2.0}},
         {"name": "output", "op": "output", "target": "output", "args": ["%mm"]})",
      R"({"name": "w", "owner": "p_w", "bytes": 64})");
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<Graph> b = BuildStructuralBackward(*f);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(Verify(*b).ok()) << Verify(*b);
  // mm's two gradients (2 s each; x needs none: h does not lead to a parameter).
  int grad_nodes = 0;
  double time = 0;
  NodeId w_grad = kNoNode;
  for (NodeId id : b->order()) {
    const Node& n = b->node(id);
    time += n.meta().has_device_time ? n.meta().device_time : 0;
    if (n.meta().has_grad_of) {
      ++grad_nodes;
      w_grad = id;
      EXPECT_EQ(n.meta().grad_of, "w");
    }
  }
  EXPECT_EQ(grad_nodes, 1);
  EXPECT_DOUBLE_EQ(time, 2.0);  // only the weight path needs a gradient here
  ASSERT_NE(w_grad, kNoNode);
  const Node& out = b->node(b->last());
  ASSERT_EQ(out.args()[0].items().size(), 1u);
  EXPECT_EQ(out.args()[0].items()[0].as_ref(), w_grad);
  // The backward reads the parameter again (ZeRO-3 must gather it in backward too) and the
  // saved activation h.
  EXPECT_NE(b->FindNode("p_w"), kNoNode);
  EXPECT_NE(b->FindNode("saved_h"), kNoNode);
  EXPECT_NE(b->FindNode("tangents_1"), kNoNode);
}

TEST(BackwardTest, EveryLiftedModelHasAValidBackwardWithOneGradientPerParameter) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> f = BuildModel(name, o);
    ASSERT_TRUE(f.ok());
    absl::StatusOr<Graph> b = BuildStructuralBackward(*f);
    ASSERT_TRUE(b.ok()) << name << ": " << b.status();
    EXPECT_TRUE(Verify(*b).ok()) << name << ": " << Verify(*b);
    int placeholders_with_param = 0, grads = 0;
    for (NodeId id : f->order()) placeholders_with_param += f->node(id).meta().has_param;
    for (NodeId id : b->order()) grads += b->node(id).meta().has_grad_of;
    EXPECT_EQ(grads, placeholders_with_param) << name;
    // Backward costs about twice the forward (two matmuls per forward matmul).
    const double fwd = Summarize(*f).device_time, bwd = Summarize(*b).device_time;
    EXPECT_GT(bwd, 1.5 * fwd) << name;
    EXPECT_LT(bwd, 3.0 * fwd) << name;
  }
}

TEST(BackwardTest, ModuleOwnedGraphsAreRejected) {
  absl::StatusOr<Graph> f = BuildModel("mlp", {});
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(BuildStructuralBackward(*f).status().message(), ::testing::HasSubstr("--lifted"));
}

}  // namespace
}  // namespace overlap
