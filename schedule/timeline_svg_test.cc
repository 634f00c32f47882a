#include "schedule/timeline_svg.h"

#include <string>

#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/size.h"
#include "gtest/gtest.h"
#include "schedule/step_plan.h"
#include "schedule/testing/zero3_models.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(TimelineSvgTest, DrawsBothLanesTheCurveThePeakAndTheBudget) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_a", "op": "placeholder", "target": "p_a", "args": [], "meta": {"param": "a"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%p_a"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": ["%mm"]}],
   "params": [{"name": "a", "owner": "p_a", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector());
  ASSERT_TRUE(r.ok());
  TimelineSvgOptions o;
  o.title = "one \"layer\" <&>";
  o.budget_bytes = 4000;
  const std::string svg = TimelineSvg(*g, *r, o);
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("one &quot;layer&quot; &lt;&amp;&gt;"));  // escaped
  EXPECT_THAT(svg, HasSubstr("<title>mm</title>"));
  EXPECT_THAT(svg, HasSubstr("communication"));
  EXPECT_EQ(Count(svg, "<polyline"), 1);
  EXPECT_THAT(svg, HasSubstr("peak 1010 B"));
  EXPECT_THAT(svg, HasSubstr("budget 3.91 KiB"));
  EXPECT_THAT(svg, HasSubstr("</svg>\n"));
  EXPECT_EQ(Count(svg, "<rect"), Count(svg, "</rect>") + Count(svg, "/>") - Count(svg, "<line") -
                                     Count(svg, "<circle") - Count(svg, "<polyline"));
}

// A step: the backward's bars after the forward's, the boundary and the residents marked,
// the step's peak on the curve.
TEST(TimelineSvgTest, AStepShowsTheBoundaryAndTheResidents) {
  Graph f = Zero3AotGraph("gpt2", GraphKind::kForward, Preset::kTiny);
  Graph b = Zero3AotGraph("gpt2", GraphKind::kBackward, Preset::kTiny);
  StepPlanOptions o;
  o.record_trace = true;
  absl::StatusOr<StepPlan> plan = PlanStep("lookahead", &f, &b, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->simulation.figures.resident_bytes, 0);
  const std::string svg = StepTimelineSvg(f, b, plan->simulation);
  EXPECT_THAT(svg, HasSubstr("forward | backward"));
  EXPECT_THAT(svg, HasSubstr("resident parameters " +
                             FormatBytes(plan->simulation.figures.resident_bytes)));
  EXPECT_THAT(svg, HasSubstr("peak " + FormatBytes(plan->simulation.figures.peak_memory_bytes)));
  EXPECT_THAT(svg, HasSubstr("step " + FormatSeconds(plan->simulation.figures.step_time_s)));
  EXPECT_EQ(Count(svg, "<polyline"), 1);
}

// A step below every baseline: the host link is a third lane, and recomputed nodes, offloads
// and reloads are drawn in colours of their own, named in the legend; a plain step has none.
TEST(TimelineSvgTest, AStepWithLeversShowsTheHostLinkAndWhatWasRecomputed) {
  Graph f = Zero3AotGraph("gpt2", GraphKind::kForward, Preset::kTiny);
  Graph b = Zero3AotGraph("gpt2", GraphKind::kBackward, Preset::kTiny);
  StepPlanOptions lowest;
  lowest.budget_bytes = 1;
  Graph f0 = f, b0 = b;
  absl::StatusOr<StepPlan> floor = PlanStep("lookahead", &f0, &b0, lowest);
  ASSERT_TRUE(floor.ok()) << floor.status();
  ASSERT_FALSE(floor->fits);
  StepPlanOptions o;
  o.record_trace = true;
  o.budget_bytes = floor->min_feasible_bytes;
  absl::StatusOr<StepPlan> plan = PlanStep("lookahead", &f, &b, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->fits);
  ASSERT_FALSE(plan->recomputed.empty());
  ASSERT_FALSE(plan->offloaded.empty());
  const std::string svg = StepTimelineSvg(f, b, plan->simulation);
  EXPECT_THAT(svg, HasSubstr(">host link</text>"));
  for (const char* kind : {">recompute</text>", ">offload</text>", ">reload</text>"}) {
    EXPECT_THAT(svg, HasSubstr(kind));
  }
  EXPECT_THAT(svg, HasSubstr("__host</title>"));  // an offload's bar, named
  Graph pf = Zero3AotGraph("gpt2", GraphKind::kForward, Preset::kTiny);
  Graph pb = Zero3AotGraph("gpt2", GraphKind::kBackward, Preset::kTiny);
  StepPlanOptions plain;
  plain.record_trace = true;
  absl::StatusOr<StepPlan> free = PlanStep("lookahead", &pf, &pb, plain);
  ASSERT_TRUE(free.ok());
  EXPECT_EQ(StepTimelineSvg(pf, pb, free->simulation).find("host link"), std::string::npos);
}

// Thousands of events stay a bounded picture: bars merge below half a pixel.
TEST(TimelineSvgTest, ALargeStepStaysSmall) {
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildModel("llama-70b", mo);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector());
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r->events.size(), 2000u);
  TimelineSvgOptions o;
  o.width_px = 200;
  const std::string svg = TimelineSvg(*g, *r, o);
  EXPECT_LT(Count(svg, "<rect"), 3 * 200 + 10);
  EXPECT_LT(svg.size(), 600u * 1024);
}

}  // namespace
}  // namespace overlap
