#include "schedule/schedule_verifier.h"

#include "gmock/gmock.h"
#include "graph/errors.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "gtest/gtest.h"
#include "rapidcheck/gtest.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

Graph OneParam() {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_a", "op": "placeholder", "target": "p_a", "args": [], "meta": {"param": "a"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "t", "op": "call_function", "target": "aten.t.default", "args": ["%p_a"], "meta": {"aliases_input": true}},
    {"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%t"]},
    {"name": "side", "op": "call_function", "target": "aten.neg.default", "args": ["%t"]},
    {"name": "output", "op": "output", "target": "output", "args": [["%mm", "%side"]]}],
   "params": [{"name": "a", "owner": "p_a", "bytes": 100}]})");
  EXPECT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
  return std::move(*g);
}

TEST(ScheduleVerifierTest, AcceptsTheInsertionOrderAndMeasuresPeakGathered) {
  Graph g = OneParam();
  EXPECT_TRUE(VerifySchedule(g, g.OrderVector()).ok()) << VerifySchedule(g, g.OrderVector());
  EXPECT_EQ(PeakGatheredBytes(g, g.OrderVector()), 100);
  EXPECT_TRUE(VerifySchedule(g, g.OrderVector(), 100).ok());
  EXPECT_THAT(VerifySchedule(g, g.OrderVector(), 99).message(),
              HasSubstr("peak gathered bytes 100 exceed the budget of 99"));
}

TEST(ScheduleVerifierTest, RejectsAUseAfterTheFreeingRelease) {
  Graph g = OneParam();
  // A use through the view, but not on the release path: put it after both releases.
  std::vector<NodeId> order = g.OrderVector();
  const NodeId side = g.FindNode("side");
  order.erase(std::find(order.begin(), order.end(), side));
  order.insert(order.end() - 1, side);
  // The release of `side` now precedes it: not topological.
  EXPECT_THAT(VerifySchedule(g, order).message(), HasSubstr("not a topological order"));
}

TEST(ScheduleVerifierTest, RejectsNonPermutations) {
  Graph g = OneParam();
  std::vector<NodeId> order = g.OrderVector();
  order.pop_back();
  EXPECT_FALSE(VerifySchedule(g, order).ok());
}

TEST(ScheduleVerifierTest, EverySchedulerPassesOnBuiltInModels) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
    // Every registered scheduler's own order, before RunScheduler's finishing pass.
    for (const SchedulerEntry& e : Schedulers()) {
      absl::StatusOr<ScheduleChoice> c = e.schedule(*g, SchedulerOptions());
      ASSERT_TRUE(c.ok()) << name << " " << e.name;
      EXPECT_TRUE(VerifySchedule(*g, c->order).ok())
          << name << " " << e.name << ": " << VerifySchedule(*g, c->order);
    }
  }
}

RC_GTEST_PROP(ScheduleVerifierPropertyTest, prop_EverySchedulerProducesAValidSchedule, ()) {
  Graph g = *ArbitraryGraph(120);
  if (!Zero3Insertion(static_cast<GraphKind>(*rc::gen::inRange(0, 2))).Run(&g).ok()) return;
  for (const SchedulerEntry& e : Schedulers()) {
    absl::StatusOr<ScheduleChoice> c = e.schedule(g, SchedulerOptions());
    if (!c.ok()) {
      // A kwargs dependency the baselines cannot see: reported as unsupported, nothing else.
      if (!IsUnsupported(c.status())) RC_FAIL(std::string(c.status().message()));
      continue;
    }
    const std::vector<NodeId>* order = &c->order;
    const absl::Status s = VerifySchedule(g, *order);
    if (!s.ok()) RC_FAIL(std::string(s.message()));
  }
}

}  // namespace
}  // namespace overlap
