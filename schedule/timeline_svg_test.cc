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
