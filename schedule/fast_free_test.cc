// The efficient fast_free against the reference implementation: the same order, always.
#include "schedule/fast_free.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "graph/adversarial_graphs.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "graph/random_graph_rc.h"
#include "gtest/gtest.h"
#include "rapidcheck/gtest.h"
#include "schedule/testing/fast_free_reference.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

FastFreeOptions With(FastFreeOptions::PathSets p) {
  FastFreeOptions o;
  o.path_sets = p;
  return o;
}

// Both ways of holding the path sets give the reference's order.
void ExpectSameAsReference(const Graph& g, const std::string& what) {
  for (FastFreeOptions::PathSets p :
       {FastFreeOptions::PathSets::kBitsets, FastFreeOptions::PathSets::kCounts,
        FastFreeOptions::PathSets::kIntervals}) {
    const std::string how = what + (p == FastFreeOptions::PathSets::kCounts    ? " (counts)"
                                    : p == FastFreeOptions::PathSets::kBitsets ? " (bitsets)"
                                                                               : " (intervals)");
    absl::StatusOr<std::vector<NodeId>> fast = FastFreeScheduleWith(g, With(p));
    absl::StatusOr<std::vector<NodeId>> ref = FastFreeScheduleReference(g);
    ASSERT_EQ(fast.ok(), ref.ok()) << how << ": " << fast.status() << " vs " << ref.status();
    if (!fast.ok()) continue;
    ASSERT_EQ(fast->size(), ref->size()) << how;
    for (size_t i = 0; i < fast->size(); ++i) {
      ASSERT_EQ((*fast)[i], (*ref)[i])
          << how << ": first difference at position " << i << ": " << g.node((*fast)[i]).name()
          << " vs " << g.node((*ref)[i]).name();
    }
  }
}

TEST(FastFreeTest, SameOrderAsTheReferenceOnEveryBuiltInModel) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
    ExpectSameAsReference(*g, name);
  }
}

TEST(FastFreeTest, SameOrderAsTheReferenceOnLargerRandomGraphs) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    RandomGraphOptions o;
    o.nodes = 400;
    o.seed = seed;
    o.lifted = true;
    Graph g = RandomGraph(o);
    if (!Zero3Insertion(static_cast<GraphKind>(seed % 2)).Run(&g).ok()) continue;
    ExpectSameAsReference(g, "seed " + std::to_string(seed));
  }
}

// DeepSpeed 0.19's rules: the bitsets and the counts give the reference's order under them.
void ExpectSameAsReference019(const Graph& g, const std::string& what) {
  absl::StatusOr<std::vector<NodeId>> ref = FastFreeScheduleReference(g, /*deepspeed_019=*/true);
  for (FastFreeOptions::PathSets p :
       {FastFreeOptions::PathSets::kBitsets, FastFreeOptions::PathSets::kCounts,
        FastFreeOptions::PathSets::kAuto}) {
    FastFreeOptions o = With(p);
    o.rules = FastFreeOptions::Rules::kDeepSpeed019;
    absl::StatusOr<std::vector<NodeId>> fast = FastFreeScheduleWith(g, o);
    ASSERT_EQ(fast.ok(), ref.ok()) << what << ": " << fast.status() << " vs " << ref.status();
    if (!fast.ok()) continue;
    ASSERT_EQ(*fast, *ref) << what << " (0.19 rules)";
  }
}

// A built-in model's AOT forward and backward (lifted parameters), ZeRO-3 ops inserted.
std::pair<Graph, Graph> InsertedPair(const std::string& name) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> f = BuildModel(name, o);
  EXPECT_TRUE(f.ok()) << name << ": " << f.status();
  absl::StatusOr<AotPair> pair = f.ok() ? BuildAotPair(*f) : f.status();
  EXPECT_TRUE(pair.ok()) << name << ": " << pair.status();
  if (!pair.ok()) return {};
  Graph fw = pair->forward, bw = pair->backward;
  EXPECT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&fw).ok()) << name;
  EXPECT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&bw).ok()) << name;
  return {std::move(fw), std::move(bw)};
}

TEST(FastFreeTest, DeepSpeed019RulesSameOrderAsTheReference) {
  for (const std::string& name : ModelNames()) {
    auto [fw, bw] = InsertedPair(name);
    ExpectSameAsReference019(fw, name + " forward");
    ExpectSameAsReference019(bw, name + " backward");
  }
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    RandomGraphOptions o;
    o.nodes = 300;
    o.seed = seed;
    o.lifted = true;
    Graph g = RandomGraph(o);
    if (!Zero3Insertion(static_cast<GraphKind>(seed % 2)).Run(&g).ok()) continue;
    ExpectSameAsReference019(g, "seed " + std::to_string(seed));
  }
}

// The largest gathered residency any order can reach: every ds_id at its largest gather.
int64_t MostGathered(const Graph& g) {
  absl::flat_hash_map<int64_t, int64_t> most;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (IsAllgather(n) && HasDsId(n)) most[DsId(n)] = std::max(most[DsId(n)], SizeOf(n));
  }
  int64_t sum = 0;
  for (const auto& [ds, bytes] : most) sum += bytes;
  return sum;
}

// A budget no list can exceed gives DeepSpeed's order without one; any budget, 0 included
// (each round then takes the least overage), gives an order (the scheduler checks it
// against the graph's dependencies). DeepSpeed's own function is the oracle of the budgeted
// orders themselves (//tools:deepcompile_test).
TEST(FastFreeTest, DeepSpeed019BudgetAboveEveryResidencyChangesNothing) {
  FastFreeOptions o;
  o.rules = FastFreeOptions::Rules::kDeepSpeed019;
  for (const std::string& name : ModelNames()) {
    auto [fw, bw] = InsertedPair(name);
    for (const Graph* graph : {&fw, &bw}) {
      const Graph& g = *graph;
      absl::StatusOr<std::vector<NodeId>> free = FastFreeScheduleDeepSpeed019(g);
      ASSERT_TRUE(free.ok()) << name << ": " << free.status();
      const int64_t most = MostGathered(g);
      // Below the bound a round may look at every tier (DeepSpeed's O(A^2 N)): the llamas'
      // hundreds of allgathers only at the bound.
      const bool small = name.rfind("llama", 0) != 0;
      for (int64_t budget : {most, most * 2, most / 2, most / 8, int64_t{0}}) {
        if (budget < most && !small) continue;
        o.gathered_budget_bytes = budget;
        absl::StatusOr<std::vector<NodeId>> within = FastFreeScheduleWith(g, o);
        ASSERT_TRUE(within.ok()) << name << " at " << budget << ": " << within.status();
        EXPECT_EQ(within->size(), free->size()) << name;
        if (budget >= most) EXPECT_EQ(*within, *free) << name << " at " << budget;
      }
    }
  }
}

TEST(FastFreeTest, BudgetIsDeepSpeed019s) {
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  Graph g = *BuildModel("mlp", mo);
  ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
  FastFreeOptions o;
  o.gathered_budget_bytes = 1 << 20;
  absl::StatusOr<std::vector<NodeId>> r = FastFreeScheduleWith(g, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fast_free_0.19"), std::string::npos) << r.status();
}

RC_GTEST_PROP(FastFreePropertyTest, prop_DeepSpeed019SameOrderAsTheReference, ()) {
  Graph g = *ArbitraryGraph(120);
  if (!Zero3Insertion(static_cast<GraphKind>(*rc::gen::inRange(0, 2))).Run(&g).ok()) return;
  absl::StatusOr<std::vector<NodeId>> ref = FastFreeScheduleReference(g, true);
  for (FastFreeOptions::PathSets p :
       {FastFreeOptions::PathSets::kBitsets, FastFreeOptions::PathSets::kCounts}) {
    FastFreeOptions o = With(p);
    o.rules = FastFreeOptions::Rules::kDeepSpeed019;
    absl::StatusOr<std::vector<NodeId>> fast = FastFreeScheduleWith(g, o);
    RC_ASSERT(fast.ok() == ref.ok());
    if (fast.ok()) RC_ASSERT(*fast == *ref);
  }
}

RC_GTEST_PROP(FastFreePropertyTest, prop_SameOrderAsTheReference, ()) {
  Graph g = *ArbitraryGraph(120);
  if (!Zero3Insertion(static_cast<GraphKind>(*rc::gen::inRange(0, 2))).Run(&g).ok()) return;
  absl::StatusOr<std::vector<NodeId>> ref = FastFreeScheduleReference(g);
  for (FastFreeOptions::PathSets p :
       {FastFreeOptions::PathSets::kBitsets, FastFreeOptions::PathSets::kCounts,
        FastFreeOptions::PathSets::kIntervals}) {
    absl::StatusOr<std::vector<NodeId>> fast = FastFreeScheduleWith(g, With(p));
    RC_ASSERT(fast.ok() == ref.ok());
    if (fast.ok()) RC_ASSERT(*fast == *ref);
  }
}

// A chain of K parameters once needed a nodes x allgathers table (7.5 GB at K = 100,000, an
// abort at 300,000). The default picks counts there (memory linear in the graph), with the
// bitsets' order.
TEST(FastFreeTest, LongChainsUseCountsWithTheSameOrder) {
  Graph g = MatmulChainGraph(3000);
  ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
  absl::StatusOr<std::vector<NodeId>> bits =
      FastFreeScheduleWith(g, With(FastFreeOptions::PathSets::kBitsets));
  absl::StatusOr<std::vector<NodeId>> counts = FastFreeSchedule(g);
  ASSERT_TRUE(bits.ok() && counts.ok());
  EXPECT_EQ(*bits, *counts);
}

// Ties on every earlier field force the free_cost comparison: random graphs whose device
// times and sizes take a few values only (zero times included), forward and backward.
TEST(FastFreeTest, SameOrderAsTheReferenceWhenFieldsTie) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RandomGraphOptions o;
    o.nodes = 200;
    o.seed = seed;
    o.lifted = true;
    Graph g = RandomGraph(o);
    const double times[] = {0.0, 1e-3, 2e-3};
    int k = 0;
    for (NodeId id : g.OrderVector()) {
      NodeMeta& m = g.mutable_node(id).mutable_meta();
      if (m.has_device_time) m.set_device_time(times[(k++ + seed) % (1 + seed % 3)]);
      if (m.has_tensor_size) m.tensor_size = 64 * (1 + (m.tensor_size % 2));
    }
    if (!Zero3Insertion(static_cast<GraphKind>(seed % 2)).Run(&g).ok()) continue;
    ExpectSameAsReference(g, "quantised seed " + std::to_string(seed));
  }
}

// Families the interval lists must handle: independent parameters (every allgather ties
// every round), a long chain, deep transformer stacks forward and backward.
TEST(FastFreeTest, SameOrderAsTheReferenceOnStructuredFamilies) {
  {
    Graph g = WideOutputGraph(60, 2);
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
    ExpectSameAsReference(g, "wide output");
  }
  {
    Graph g = MatmulChainGraph(300);
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
    ExpectSameAsReference(g, "chain");
  }
  for (const char* name : {"gpt2", "llama-7b", "moe"}) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> f = BuildModel(name, o, Preset::kTiny);
    ASSERT_TRUE(f.ok());
    Graph g = *f;
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&g).ok());
    ExpectSameAsReference(g, std::string(name) + " tiny forward");
    absl::StatusOr<AotPair> pair = BuildAotPair(*f);
    ASSERT_TRUE(pair.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&pair->backward).ok());
    ExpectSameAsReference(pair->backward, std::string(name) + " tiny backward");
  }
}

}  // namespace
}  // namespace overlap
