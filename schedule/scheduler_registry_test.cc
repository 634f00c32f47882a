#include "schedule/scheduler_registry.h"

#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/aot.h"
#include "graph/errors.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "graph/test_graphs.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "schedule/report.h"
#include "schedule/schedule_verifier.h"
#include "schedule/simulator.h"
#include "schedule/testing/zero3_models.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

TEST(SchedulerRegistryTest, NamesAreUniqueAndTheDefaultIsFirst) {
  std::vector<std::string> names;
  for (const SchedulerEntry& e : Schedulers()) {
    names.push_back(std::string(e.name));
    EXPECT_FALSE(e.description.empty()) << e.name;
    EXPECT_EQ(*FindScheduler(e.name), &e);
  }
  EXPECT_THAT(names, ::testing::ElementsAre("lookahead", "fast_free", "fast_free_0.19", "list",
                                            "simple_prefetch"));
  EXPECT_EQ(DefaultSchedulerName(), "lookahead");
  absl::StatusOr<const SchedulerEntry*> missing = FindScheduler("greedy");
  EXPECT_TRUE(IsUnknownName(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), ::testing::HasSubstr("simple_prefetch"));
}

// Every scheduler leaves the graph final, and the report's figures are the final graph's.
TEST(SchedulerRegistryTest, EverySchedulerLeavesTheGraphFinalAndReportsItsFigures) {
  for (const char* model : {"gpt2", "moe", "resnet18"}) {
    for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
      const Graph original = Zero3AotGraph(model, kind);
      for (const SchedulerEntry& e : Schedulers()) {
        Graph g = original;
        absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &g);
        ASSERT_TRUE(r.ok()) << model << " " << e.name << ": " << r.status();
        EXPECT_EQ(r->order, g.OrderVector()) << e.name;
        EXPECT_EQ(g.node(g.last()).op(), Op::kOutput) << e.name;
        EXPECT_TRUE(Verify(g).ok()) << e.name;
        EXPECT_TRUE(VerifySchedule(g, r->order).ok()) << e.name;
        absl::StatusOr<SimulationResult> again = Simulate(g, g.OrderVector());
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->peak_memory_bytes, r->simulation.peak_memory_bytes) << e.name;
        EXPECT_DOUBLE_EQ(again->step_time_s, r->simulation.step_time_s) << e.name;
        EXPECT_EQ(r->lookahead.has_value(), e.explains);
      }
    }
  }
}

// Every model's AOT pair at the tiny preset (the executor's graphs): every scheduler, both
// graphs, verified and simulated; the backward reduces every gradient it returns.
TEST(SchedulerRegistryTest, EveryTinyAotPairSchedulesWithEveryAlgorithm) {
  for (const std::string& model : ModelNames()) {
    for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
      const Graph original = Zero3AotGraph(model, kind, Preset::kTiny);
      int reduces = 0;
      for (NodeId id : original.order()) reduces += IsReduce(original.node(id));
      if (kind == GraphKind::kBackward) {
        EXPECT_GT(reduces, 0) << model;
      }
      for (const SchedulerEntry& e : Schedulers()) {
        Graph g = original;
        absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &g);
        ASSERT_TRUE(r.ok()) << model << " " << e.name << ": " << r.status();
        EXPECT_TRUE(Verify(g).ok()) << model << " " << e.name;
        EXPECT_TRUE(VerifySchedule(g, r->order).ok()) << model << " " << e.name;
        EXPECT_GT(r->simulation.step_time_s, 0) << model << " " << e.name;
      }
    }
  }
}

// The explanation: exactly one chosen row, whose figures are the report's; every row over
// budget exceeds the limit; every other simulated row fits and is not faster.
TEST(SchedulerRegistryTest, OursExplainsItsChoice) {
  for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
    const Graph original = Zero3AotGraph("llama-7b", kind);
    Graph probe_graph = original;
    absl::StatusOr<ScheduleReport> fast = RunScheduler("fast_free", &probe_graph);
    ASSERT_TRUE(fast.ok());
    for (int64_t budget :
         {fast->simulation.peak_memory_bytes * 5 / 4, fast->simulation.peak_memory_bytes * 2}) {
      Graph g = original;
      SchedulerOptions o;
      o.lookahead.budget_bytes = budget;
      absl::StatusOr<ScheduleReport> r = RunScheduler("lookahead", &g, o);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(r->lookahead.has_value());
      if (!r->lookahead->feasible) continue;  // backward at 1.25x: covered below
      int chosen = 0;
      for (const LookaheadCandidate& c : r->lookahead->candidates) {
        switch (c.verdict) {
          case CandidateVerdict::kChosen:
            ++chosen;
            EXPECT_EQ(c.peak_memory_bytes, r->simulation.peak_memory_bytes);
            EXPECT_DOUBLE_EQ(c.step_time_s, r->simulation.step_time_s);
            EXPECT_EQ(c.k, r->lookahead->lookahead);
            EXPECT_EQ(c.base, r->lookahead->base);
            EXPECT_EQ(c.residents, static_cast<int64_t>(r->lookahead->resident.size()));
            break;
          case CandidateVerdict::kOverBudget:
            EXPECT_GT(c.peak_memory_bytes, budget);
            break;
          case CandidateVerdict::kSlower:
            EXPECT_LE(c.peak_memory_bytes, budget);
            EXPECT_GE(c.step_time_s, r->simulation.step_time_s);
            break;
          case CandidateVerdict::kSuperseded:
            EXPECT_LE(c.peak_memory_bytes, budget);
            break;
          case CandidateVerdict::kStoppedAtComputeBound:
            EXPECT_DOUBLE_EQ(r->simulation.step_time_s, r->simulation.compute_s);
            break;
        }
      }
      EXPECT_EQ(chosen, 1);
      const std::string table = FormatExplainTable(*r, 3);
      EXPECT_THAT(table, ::testing::HasSubstr("chosen"));
      EXPECT_THAT(table, ::testing::HasSubstr("choices simulated"));
    }
  }
}

TEST(SchedulerRegistryTest, InfeasibleOursHasNoChosenRowAndSaysTheSmallestBudget) {
  Graph g = Zero3AotGraph("gpt2", GraphKind::kForward);
  SchedulerOptions o;
  o.lookahead.budget_bytes = 1;
  absl::StatusOr<ScheduleReport> r = RunScheduler("lookahead", &g, o);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->lookahead->feasible);
  for (const LookaheadCandidate& c : r->lookahead->candidates) {
    EXPECT_NE(c.verdict, CandidateVerdict::kChosen);
  }
  EXPECT_THAT(FormatExplainTable(*r), ::testing::HasSubstr("smallest feasible budget"));
  EXPECT_THAT(ScheduleResultJson(g, *r, o), ::testing::HasSubstr("\"feasible\": false"));
}

TEST(SchedulerRegistryTest, AFailureLeavesTheGraphUnchanged) {
  Graph g = Zero3AotGraph("mlp", GraphKind::kForward);
  const Graph before = g;
  SchedulerOptions o;
  o.lookahead.max_in_flight = -1;
  EXPECT_TRUE(IsBadInput(RunScheduler("lookahead", &g, o).status()));
  EXPECT_TRUE(IsUnknownName(RunScheduler("nope", &g).status()));
  EXPECT_TRUE(g == before);
}

// A lifted backward graph whose table is the whole model's: rows 0 and 2 are owned by
// primals it does not take (absent). Insertion gathers only what it reads, under the table's
// indices, and every scheduler orders it.
TEST(SchedulerRegistryTest, ABackwardGraphWithAbsentParametersSchedules) {
  const std::string nodes = absl::StrCat(
      PlaceholderJson("primals_2", "h.weight"), ",", PlaceholderJson("saved_x"), ",",
      PlaceholderJson("tangents_1"), ",",
      CallJson(
          "t", "aten.t.default", R"("%primals_2")",
          R"({"shape": [8, 8], "dtype": "float32", "tensor_size": 256, "aliases_input": true})"),
      ",",
      CallJson("dx", "aten.mm.default", R"("%tangents_1", "%t")",
               R"({"shape": [8, 8], "dtype": "float32", "tensor_size": 256, "device_time": 1e-6})"),
      ",",
      CallJson("dw", "aten.mm.default", R"("%tangents_1", "%saved_x")",
               R"({"shape": [8, 8], "dtype": "float32", "tensor_size": 256, "device_time": 1e-6,
                  "grad_of": "h.weight"})"),
      ",", OutputJson(R"([null, "%dw", null, "%dx"])"));
  absl::StatusOr<Graph> g = GraphFromParts(nodes, R"(
      {"name": "emb.weight", "owner": "primals_1", "bytes": 1024},
      {"name": "h.weight", "owner": "primals_2", "shape": [8, 8], "dtype": "float32", "bytes": 256},
      {"name": "head.weight", "owner": "primals_3", "bytes": 4096})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(ClassifyParams(*g).absent, 2);
  ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&*g).ok());
  std::vector<int64_t> gathered, reduced;
  for (NodeId id : g->order()) {
    if (IsAllgather(g->node(id))) gathered.push_back(DsId(g->node(id)));
    if (IsReduce(g->node(id))) reduced.push_back(DsId(g->node(id)));
  }
  EXPECT_THAT(gathered, ::testing::ElementsAre(1));  // h.weight's table index, not 0
  EXPECT_THAT(reduced, ::testing::ElementsAre(1));
  for (const SchedulerEntry& e : Schedulers()) {
    Graph copy = *g;
    absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &copy);
    ASSERT_TRUE(r.ok()) << e.name << ": " << r.status();
    EXPECT_TRUE(VerifySchedule(copy, r->order).ok()) << e.name;
    EXPECT_EQ(r->simulation.peak_gathered_bytes, 256) << e.name;  // the absent rows never are
  }
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

// Ours dominates the baselines: at every budget where some baseline's order fits (each
// baseline's peak, and 1.1x, 1.25x, 2x of it), ours fits and is no slower than the fastest
// baseline that fits; ours' smallest feasible budget is at most the smallest baseline peak.
RC_GTEST_PROP(SchedulerRegistryPropertyTest, prop_OursDominatesEveryBaselineAtEveryBudget, ()) {
  const bool backward = *rc::gen::arbitrary<bool>();
  std::optional<Graph> made =
      WithZero3Ops(*ArbitraryGraph(100), backward ? GraphKind::kBackward : GraphKind::kForward);
  if (!made) return;
  Graph g = *std::move(made);
  struct Fit {
    int64_t peak;
    double step;
  };
  std::vector<Fit> baselines;
  for (const SchedulerEntry& e : Schedulers()) {
    if (e.honours_budget) continue;
    Graph copy = g;
    absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &copy);
    if (!r.ok()) continue;  // an order the graph's kwargs forbid
    baselines.push_back({r->simulation.peak_memory_bytes, r->simulation.step_time_s});
  }
  RC_PRE(!baselines.empty());
  RC_TAG(backward ? "backward" : "forward");
  int64_t smallest = INT64_MAX;
  for (const Fit& b : baselines) smallest = std::min(smallest, b.peak);
  for (const Fit& b : baselines) {
    for (double factor : {1.0, 1.1, 1.25, 2.0}) {
      const int64_t budget = static_cast<int64_t>(static_cast<double>(b.peak) * factor);
      double best = std::numeric_limits<double>::infinity();
      for (const Fit& other : baselines) {
        if (other.peak <= budget) best = std::min(best, other.step);
      }
      Graph copy = g;
      SchedulerOptions o;
      o.lookahead.budget_bytes = budget;
      absl::StatusOr<ScheduleReport> ours = RunScheduler(DefaultSchedulerName(), &copy, o);
      RC_ASSERT(ours.ok());
      RC_ASSERT(ours->lookahead->feasible);
      RC_ASSERT(ours->simulation.peak_memory_bytes <= budget);
      RC_ASSERT(ours->simulation.step_time_s <= best);
    }
  }
  Graph copy = g;
  SchedulerOptions o;
  o.lookahead.budget_bytes = 0;
  absl::StatusOr<ScheduleReport> none = RunScheduler(DefaultSchedulerName(), &copy, o);
  RC_ASSERT(none.ok());
  if (!none->lookahead->feasible) RC_ASSERT(none->lookahead->min_feasible_bytes <= smallest);
}

}  // namespace
}  // namespace overlap
