// docs/ops.md is the per-op contract: every call_function target of every built-in model's
// graphs (module style, and both graphs of the AOT pair, at both sizes) must be listed
// there, and have a shape rule and, on a gradient path, a backward formula.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/container/btree_set.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "graph/shape_rules.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(OpsDocTest, EveryTargetTheModelsUseIsListed) {
  std::ifstream in("docs/ops.md");
  ASSERT_TRUE(in) << "docs/ops.md is missing from the runfiles";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  absl::btree_set<std::string> targets, forward_targets;
  for (const std::string& name : ModelNames()) {
    for (Preset preset : {Preset::kDefault, Preset::kTiny}) {
      ModelOptions o;
      absl::StatusOr<Graph> module = BuildModel(name, o, preset);
      o.style = ParamStyle::kLifted;
      absl::StatusOr<Graph> lifted = BuildModel(name, o, preset);
      ASSERT_TRUE(module.ok() && lifted.ok()) << name;
      absl::StatusOr<AotPair> pair = BuildAotPair(*lifted);
      ASSERT_TRUE(pair.ok()) << name << ": " << pair.status();
      for (const Graph* g : {&*module, &pair->forward, &pair->backward}) {
        for (NodeId id : g->order()) {
          const Node& n = g->node(id);
          if (n.op() != Op::kCallFunction) continue;
          targets.insert(n.target());
          if (g != &pair->backward) forward_targets.insert(n.target());
        }
      }
    }
  }
  EXPECT_GT(targets.size(), 50u);
  for (const std::string& t : targets) {
    EXPECT_NE(doc.find("`" + t), std::string::npos) << t << " is not in docs/ops.md";
    EXPECT_TRUE(HasShapeRule(t)) << t << " has no shape rule";
  }
  for (const std::string& t : forward_targets) {
    EXPECT_TRUE(HasBackwardFormula(t)) << t << " has no backward formula";
  }
}

}  // namespace
}  // namespace overlap
