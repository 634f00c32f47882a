// Replay's measured memory against the simulator's: equal at world size 1 on every tiny
// model's AOT forward and backward under every scheduler, and on random graphs.
#include "runtime/exec/replay.h"

#include <string>

#include "gmock/gmock.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "gtest/gtest.h"
#include "schedule/scheduler_registry.h"
#include "schedule/simulator.h"
#include "schedule/testing/zero3_models.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

int64_t SimulatedPeak(const Graph& g) {
  CollectiveModel one;
  one.world_size = 1;
  absl::StatusOr<SimulationResult> r = Simulator(g, one).Run(g.OrderVector());
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->peak_memory_bytes : -1;
}

ReplayOptions CountOnly() {
  ReplayOptions o;
  o.count_only = true;
  return o;
}

TEST(ReplayTest, MeasuredPeakEqualsTheSimulatorsOnEveryTinyModelUnderEveryScheduler) {
  for (const std::string& model : ModelNames()) {
    if (model == "random") continue;
    for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
      const Graph original = Zero3AotGraph(model, kind, Preset::kTiny);
      for (const SchedulerEntry& e : Schedulers()) {
        Graph g = original;
        absl::StatusOr<ScheduleReport> s = RunScheduler(e.name, &g);
        ASSERT_TRUE(s.ok()) << model << " " << e.name << ": " << s.status();
        absl::StatusOr<ReplayResult> r = Replay(g, CountOnly());
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(r->peak_bytes, SimulatedPeak(g))
            << model << (kind == GraphKind::kBackward ? " backward " : " forward ") << e.name;
        EXPECT_EQ(r->nodes_run, g.size());
      }
    }
  }
}

TEST(ReplayTest, RealBuffersMeasureWhatCountingMeasures) {
  Graph g = Zero3AotGraph("gpt2", GraphKind::kBackward, Preset::kTiny);
  absl::StatusOr<ReplayResult> counted = Replay(g, CountOnly());
  absl::StatusOr<ReplayResult> real = Replay(g);
  ASSERT_TRUE(counted.ok() && real.ok()) << real.status();
  EXPECT_EQ(real->peak_bytes, counted->peak_bytes);
  EXPECT_EQ(real->final_bytes, counted->final_bytes);
  // A graph larger than the limit is refused up front, naming both figures.
  ReplayOptions tight;
  tight.guard_bytes = 1000;
  absl::StatusOr<ReplayResult> refused = Replay(g, tight);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("more than the"));
  ReplayOptions bad;
  bad.time_scale = -1;
  EXPECT_FALSE(Replay(g, bad).ok());
}

TEST(ReplayTest, RandomGraphsOfTenThousandNodesReplayToTheSimulatedPeak) {
  for (uint64_t seed : {1, 2}) {
    RandomGraphOptions o;
    o.nodes = 10000;
    o.seed = seed;
    o.lifted = true;
    Graph g = RandomGraph(o);
    ASSERT_TRUE(
        Zero3Insertion(seed == 1 ? GraphKind::kForward : GraphKind::kBackward).Run(&g).ok());
    absl::StatusOr<ReplayResult> r = Replay(g, CountOnly());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->peak_bytes, SimulatedPeak(g)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace overlap
