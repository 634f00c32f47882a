// The two-stream simulator on timelines worked out by hand.
#include "schedule/simulator.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "schedule/analysis.h"
#include "schedule/fast_free.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

SimulationOptions BucketedAt(int64_t cap) {
  SimulationOptions o;
  o.reduce_bucket_bytes = cap;
  return o;
}
SimulationOptions Untraced() {
  SimulationOptions o;
  o.record_trace = false;
  return o;
}

// Two parameters of 1000 bytes, each used by one 1-second matmul, ZeRO-3 ops inserted.
// With 2 ranks, no latency and 1000 B/s, each allgather takes 0.5 s.
Graph TwoLayers() {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_a", "op": "placeholder", "target": "p_a", "args": [], "meta": {"param": "a"}},
    {"name": "p_b", "op": "placeholder", "target": "p_b", "args": [], "meta": {"param": "b"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "mm1", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%p_a"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "mm2", "op": "call_function", "target": "aten.mm.default", "args": ["%mm1", "%p_b"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": ["%mm2"]}],
   "params": [{"name": "a", "owner": "p_a", "bytes": 1000}, {"name": "b", "owner": "p_b", "bytes": 1000}]})");
  EXPECT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
  return std::move(*g);
}

CollectiveModel Slow() {
  CollectiveModel m;
  m.world_size = 2;
  m.latency_s = 0;
  m.bandwidth_bytes_per_s = 1000;
  return m;
}

std::vector<NodeId> Ids(const Graph& g, const std::vector<std::string>& names) {
  std::vector<NodeId> out;
  for (const std::string& n : names) out.push_back(g.FindNode(n));
  return out;
}

const std::vector<std::string> kHead = {"p_a", "p_b", "x"};
std::vector<std::string> With(std::vector<std::string> tail) {
  std::vector<std::string> all = kHead;
  all.insert(all.end(), tail.begin(), tail.end());
  return all;
}

TEST(SimulatorTest, GatherThenComputeOneLayerAtATime) {
  Graph g = TwoLayers();
  absl::StatusOr<SimulationResult> r = Simulate(
      g,
      Ids(g,
          With({"allgather_ds_param_p_a_0", "wait_allgather_ds_param__p_a_0", "mm1",
                "release_ds_param_p_a_mm1_0", "allgather_ds_param_p_b_1",
                "wait_allgather_ds_param__p_b_1", "mm2", "release_ds_param_p_b_mm2_1", "output"})),
      Slow());
  ASSERT_TRUE(r.ok()) << r.status();
  // a: comm 0-0.5, mm1 0.5-1.5; b: comm 1.5-2.0, mm2 2.0-3.0.
  EXPECT_DOUBLE_EQ(r->step_time_s, 3.0);
  EXPECT_DOUBLE_EQ(r->compute_s, 2.0);
  EXPECT_DOUBLE_EQ(r->comm_s, 1.0);
  EXPECT_DOUBLE_EQ(r->exposed_comm_s, 1.0);
  EXPECT_DOUBLE_EQ(r->lower_bound_s, 2.0);
  EXPECT_EQ(r->peak_gathered_bytes, 1000);
  // At 1.5 a's buffer is freed before b is gathered (frees first); mm1's result lives on
  // through the release until mm2 has read it: b + mm1 + mm2 at 2.0.
  EXPECT_EQ(r->peak_memory_bytes, 1020);
}

TEST(SimulatorTest, PrefetchingHidesTheSecondGatherBehindTheFirstMatmul) {
  Graph g = TwoLayers();
  absl::StatusOr<SimulationResult> r = Simulate(
      g,
      Ids(g,
          With({"allgather_ds_param_p_a_0", "allgather_ds_param_p_b_1",
                "wait_allgather_ds_param__p_a_0", "mm1", "release_ds_param_p_a_mm1_0",
                "wait_allgather_ds_param__p_b_1", "mm2", "release_ds_param_p_b_mm2_1", "output"})),
      Slow());
  ASSERT_TRUE(r.ok()) << r.status();
  // a: comm 0-0.5, b: comm 0.5-1.0; mm1 0.5-1.5; mm2 1.5-2.5 (b is already there).
  EXPECT_DOUBLE_EQ(r->step_time_s, 2.5);
  EXPECT_DOUBLE_EQ(r->exposed_comm_s, 0.5);
  EXPECT_EQ(r->peak_gathered_bytes, 2000);
  EXPECT_EQ(r->peak_memory_bytes, 2010);
}

// A collective issued on an idle stream while compute goes on pays the model's
// busy_start_s; one the compute waits for at once, or one queued behind another, does not.
TEST(SimulatorTest, ACollectiveStartedBesideComputePaysTheWakeUp) {
  Graph g = TwoLayers();
  CollectiveModel m = Slow();
  m.busy_start_s = 0.25;
  const std::vector<NodeId> beside_mm1 = Ids(
      g, With({"allgather_ds_param_p_a_0", "wait_allgather_ds_param__p_a_0",
               "allgather_ds_param_p_b_1", "mm1", "release_ds_param_p_a_mm1_0",
               "wait_allgather_ds_param__p_b_1", "mm2", "release_ds_param_p_b_mm2_1", "output"}));
  const std::vector<NodeId> together = Ids(
      g, With({"allgather_ds_param_p_a_0", "allgather_ds_param_p_b_1",
               "wait_allgather_ds_param__p_a_0", "mm1", "release_ds_param_p_a_mm1_0",
               "wait_allgather_ds_param__p_b_1", "mm2", "release_ds_param_p_b_mm2_1", "output"}));
  absl::StatusOr<SimulationResult> r = Simulate(g, beside_mm1, m);
  ASSERT_TRUE(r.ok()) << r.status();
  // a: 0-0.5, waited for at once; b: issued at 0.5 beside mm1, 0.5-1.25; mm1 0.5-1.5,
  // mm2 1.5-2.5.
  EXPECT_DOUBLE_EQ(r->comm_s, 1.25);
  EXPECT_DOUBLE_EQ(r->step_time_s, 2.5);
  // Issued together: b queues behind a, and a is waited for before any compute.
  r = Simulate(g, together, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->comm_s, 1.0);
  EXPECT_DOUBLE_EQ(r->step_time_s, 2.5);
  // With a 1.5 s wake-up b ends at 2.5 and mm2 waits for it: 3.5.
  m.busy_start_s = 1.5;
  r = Simulate(g, beside_mm1, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->step_time_s, 3.5);
}

TEST(SimulatorTest, WaitingForEverythingFirstCostsMemoryAndTime) {
  Graph g = TwoLayers();
  absl::StatusOr<SimulationResult> r = Simulate(g, g.OrderVector(), Slow());  // insertion order
  ASSERT_TRUE(r.ok()) << r.status();
  // Both gathers (0-0.5, 0.5-1.0), both waits before mm1: mm1 1.0-2.0, mm2 2.0-3.0.
  EXPECT_DOUBLE_EQ(r->step_time_s, 3.0);
  EXPECT_EQ(r->peak_gathered_bytes, 2000);
}

TEST(SimulatorTest, ReduceScatterFreesTheGradientWhenItCompletes) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "w"}},
    {"name": "dy", "op": "placeholder", "target": "dy", "args": []},
    {"name": "gw", "op": "call_function", "target": "aten.mm.default", "args": ["%dy", "%dy"], "meta": {"tensor_size": 1000, "device_time": 1.0, "grad_of": "w"}},
    {"name": "output", "op": "output", "target": "output", "args": [["%gw"]]}],
   "params": [{"name": "w", "owner": "p_w", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&*g).ok());
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector(), Slow());
  ASSERT_TRUE(r.ok()) << r.status();
  // gw 0-1; its reduce-scatter 1.0-1.5; the step ends when communication drains.
  EXPECT_DOUBLE_EQ(r->step_time_s, 1.5);
  EXPECT_DOUBLE_EQ(r->exposed_comm_s, 0.5);
  EXPECT_EQ(r->peak_memory_bytes, 1000);
  ASSERT_FALSE(r->memory.empty());
  EXPECT_DOUBLE_EQ(r->memory.back().first, 1.5);  // freed at the reduction's end
  EXPECT_EQ(r->memory.back().second, 0);
}

// Two gradients bucketed into one reduce-scatter: one latency instead of two, and the first
// gradient lives until the bucket completes.
TEST(SimulatorTest, ABucketOfReduceScattersIsOneCollectiveIssuedAtItsLastMember) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_v", "op": "placeholder", "target": "p_v", "args": [], "meta": {"param": "v"}},
    {"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "w"}},
    {"name": "dy", "op": "placeholder", "target": "dy", "args": []},
    {"name": "gv", "op": "call_function", "target": "aten.mm.default", "args": ["%dy", "%dy"], "meta": {"tensor_size": 1000, "device_time": 1.0, "grad_of": "v"}},
    {"name": "gw", "op": "call_function", "target": "aten.mm.default", "args": ["%dy", "%dy"], "meta": {"tensor_size": 1000, "device_time": 1.0, "grad_of": "w"}},
    {"name": "output", "op": "output", "target": "output", "args": [["%gv", "%gw"]]}],
   "params": [{"name": "v", "owner": "p_v", "bytes": 1000}, {"name": "w", "owner": "p_w", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&*g).ok());
  CollectiveModel m = Slow();
  m.latency_s = 0.25;
  // Alone: gv 0-1, its reduce 1-1.75; gw 1-2, its reduce 2-2.75.
  absl::StatusOr<SimulationResult> alone = Simulate(*g, g->OrderVector(), m);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_DOUBLE_EQ(alone->step_time_s, 2.75);
  EXPECT_EQ(alone->peak_memory_bytes, 2000);
  // Bucketed (cap 2000 bytes): one reduce-scatter of 2000 bytes, 2-3.25, one latency; the
  // result is the same through Run's cap and through BucketReduces' kwargs.
  const Simulator sim(*g, m);
  absl::StatusOr<SimulationResult> by_cap = sim.Run(g->OrderVector(), BucketedAt(2000));
  ASSERT_TRUE(by_cap.ok()) << by_cap.status();
  EXPECT_DOUBLE_EQ(by_cap->comm_s, 0.25 + 1.0);
  EXPECT_DOUBLE_EQ(by_cap->step_time_s, 3.25);
  EXPECT_EQ(by_cap->peak_memory_bytes, 2000);
  EXPECT_DOUBLE_EQ(by_cap->memory.back().first, 3.25);  // both freed when the bucket is done
  Graph marked = *g;
  ASSERT_TRUE(BucketReduces(&marked, marked.OrderVector(), 2000).ok());
  absl::StatusOr<SimulationResult> by_kwargs = Simulate(marked, marked.OrderVector(), m);
  ASSERT_TRUE(by_kwargs.ok()) << by_kwargs.status();
  EXPECT_DOUBLE_EQ(by_kwargs->step_time_s, by_cap->step_time_s);
  EXPECT_DOUBLE_EQ(by_kwargs->comm_s, by_cap->comm_s);
}

// A resident parameter of a forward graph is refreshed once per step: its allgather runs
// first on the communication stream, its wait blocks until then, and its bytes are held for
// the whole step.
TEST(SimulatorTest, ResidentParametersAreRefreshedAtTheStartOfTheForwardStep) {
  Graph g = TwoLayers();
  const Simulator sim(g, Slow());
  const std::vector<NodeId> order = Ids(
      g, With({"allgather_ds_param_p_a_0", "wait_allgather_ds_param__p_a_0", "mm1",
               "release_ds_param_p_a_mm1_0", "allgather_ds_param_p_b_1",
               "wait_allgather_ds_param__p_b_1", "mm2", "release_ds_param_p_b_mm2_1", "output"}));
  absl::StatusOr<SimulationResult> sharded = sim.Run(order);
  const int64_t first[] = {0};
  SimulationOptions o;
  o.resident = first;
  absl::StatusOr<SimulationResult> resident = sim.Run(order, o);
  ASSERT_TRUE(sharded.ok() && resident.ok());
  // The refresh of a (0-0.5) is still communication; mm1 0.5-1.5, b 1.5-2.0, mm2 2.0-3.0.
  EXPECT_DOUBLE_EQ(resident->comm_s, sharded->comm_s);
  EXPECT_DOUBLE_EQ(resident->step_time_s, 3.0);
  EXPECT_EQ(resident->memory.front().first, 0.0);
  EXPECT_EQ(resident->memory.front().second, 1000);
  // a is never released: a + b + mm1 + mm2 at 2.0.
  EXPECT_EQ(resident->peak_memory_bytes, 2020);
  EXPECT_EQ(resident->peak_gathered_bytes, 2000);
  // The same through the graph: MakeResident marks the allgather and drops the releases.
  Graph marked = g;
  std::vector<NodeId> marked_order = order;
  ASSERT_TRUE(MakeResident(&marked, {0}, &marked_order).ok());
  EXPECT_LT(marked_order.size(), order.size());
  absl::StatusOr<SimulationResult> applied = Simulate(marked, marked_order, Slow());
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_DOUBLE_EQ(applied->step_time_s, resident->step_time_s);
  EXPECT_EQ(applied->peak_memory_bytes, resident->peak_memory_bytes);
}

// In a backward graph the resident parameter is already gathered (the forward step
// refreshed it): no communication, no wait.
TEST(SimulatorTest, ResidentParametersCostNothingInTheBackwardStep) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_a", "op": "placeholder", "target": "p_a", "args": [], "meta": {"param": "a"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "mm1", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%p_a"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": ["%mm1"]}],
   "params": [{"name": "a", "owner": "p_a", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&*g).ok());
  const Simulator sim(*g, Slow());
  absl::StatusOr<SimulationResult> sharded = sim.Run(g->OrderVector());
  const int64_t first[] = {0};
  SimulationOptions o;
  o.resident = first;
  absl::StatusOr<SimulationResult> resident = sim.Run(g->OrderVector(), o);
  ASSERT_TRUE(sharded.ok() && resident.ok());
  EXPECT_DOUBLE_EQ(sharded->step_time_s, 1.5);
  EXPECT_DOUBLE_EQ(resident->comm_s, 0.0);
  EXPECT_DOUBLE_EQ(resident->step_time_s, 1.0);
  EXPECT_EQ(resident->peak_memory_bytes, 1010);
}

// A gradient that reaches its reduce_grad through a view dies with the reduction, although
// the output node returns it; a saved activation (a placeholder of the backward graph) is
// held from the start until its last reader.
TEST(SimulatorTest, ReducedGradientsDieWithTheirReductionThroughViews) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "w"}},
    {"name": "saved", "op": "placeholder", "target": "saved", "args": [], "meta": {"tensor_size": 500}},
    {"name": "gw", "op": "call_function", "target": "aten.mm.default", "args": ["%saved", "%saved"], "meta": {"tensor_size": 1000, "device_time": 1.0}},
    {"name": "gw_t", "op": "call_function", "target": "aten.t.default", "args": ["%gw"], "meta": {"aliases_input": true, "grad_of": "w"}},
    {"name": "late", "op": "call_function", "target": "aten.relu.default", "args": ["%saved"], "meta": {"tensor_size": 100, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": [["%gw_t", "%late"]]}],
   "params": [{"name": "w", "owner": "p_w", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&*g).ok());
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector(), Slow());
  ASSERT_TRUE(r.ok()) << r.status();
  // saved 500 from 0; gw 0-1 (1500); its reduce-scatter 1.0-1.5 frees it at 1.5; late
  // 1-2 (saved + gw + late = 1600), then saved is freed at 2, late held to the end.
  EXPECT_EQ(r->peak_memory_bytes, 1600);
  ASSERT_FALSE(r->memory.empty());
  EXPECT_EQ(r->memory.back().second, 0);
  std::vector<std::pair<double, int64_t>> expect = {{0.0, 500}, {0.0, 1500}, {1.0, 1600},
                                                    {1.5, 600}, {2.0, 100},  {2.0, 0}};
  EXPECT_EQ(r->memory, expect);
}

// Last uses follow the simulated order, not the graph's: moving a reader later keeps its
// input alive longer.
TEST(SimulatorTest, LastUsesFollowTheSimulatedOrder) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "a", "op": "call_function", "target": "aten.ones.default", "args": [], "meta": {"tensor_size": 100, "device_time": 1.0}},
    {"name": "r1", "op": "call_function", "target": "aten.relu.default", "args": ["%a"], "meta": {"tensor_size": 1, "device_time": 1.0}},
    {"name": "b", "op": "call_function", "target": "aten.ones.default", "args": [], "meta": {"tensor_size": 1000, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": [["%r1", "%b"]]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<SimulationResult> early = Simulate(*g, Ids(*g, {"a", "r1", "b", "output"}));
  absl::StatusOr<SimulationResult> late = Simulate(*g, Ids(*g, {"a", "b", "r1", "output"}));
  ASSERT_TRUE(early.ok() && late.ok());
  EXPECT_EQ(early->peak_memory_bytes, 1001);  // a freed when r1 ends, before b
  EXPECT_EQ(late->peak_memory_bytes, 1101);   // a read after b: a + b + r1
}

// Without device times every node is instantaneous; positions in the order still separate
// allocations from frees, so memory is not lost in ties.
TEST(SimulatorTest, ZeroTimeNodesStillHoldMemory) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "a", "op": "call_function", "target": "aten.ones.default", "args": [], "meta": {"tensor_size": 100}},
    {"name": "r1", "op": "call_function", "target": "aten.relu.default", "args": ["%a"], "meta": {"tensor_size": 10}},
    {"name": "r2", "op": "call_function", "target": "aten.relu.default", "args": ["%r1"], "meta": {"tensor_size": 1}},
    {"name": "output", "op": "output", "target": "output", "args": ["%r2"]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->peak_memory_bytes, 110);  // r1 allocated before its input a is freed
  EXPECT_DOUBLE_EQ(r->step_time_s, 0.0);
}

// The tuple rule (OwnedTupleElements): a backward's (grad_input, grad_weight) tuple whose
// weight gradient is returned. grad_input (1000 bytes) dies after its last reader although
// its sibling (10 bytes) lives to the end; the second node (2000 bytes) then fits beside
// the weight gradient alone. Before the rule the whole tuple lived to the end: 3010.
TEST(SimulatorTest, ATupleElementDiesAtItsOwnLastReader) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "t", "op": "call_function", "target": "aten.convolution_backward.default", "args": [], "meta": {"tensor_size": 1010}},
    {"name": "gi", "op": "call_function", "target": "operator.getitem", "args": ["%t", 0], "meta": {"tensor_size": 1000}},
    {"name": "gw", "op": "call_function", "target": "operator.getitem", "args": ["%t", 1], "meta": {"tensor_size": 10}},
    {"name": "r", "op": "call_function", "target": "aten.relu.default", "args": ["%gi"], "meta": {"tensor_size": 1}},
    {"name": "big", "op": "call_function", "target": "aten.ones.default", "args": [], "meta": {"tensor_size": 2000}},
    {"name": "output", "op": "output", "target": "output", "args": [["%gw", "%r", "%big"]]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<char> owned = OwnedTupleElements(*g);
  EXPECT_TRUE(owned[g->FindNode("gi")]);
  EXPECT_TRUE(owned[g->FindNode("gw")]);
  EXPECT_EQ(TupleRemainderBytes(*g, g->FindNode("t"), owned), 0);
  absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->peak_memory_bytes, 2011);  // gw + r + big; gi freed after r

  // Two getitems of one index: neither owns it (they would share one buffer), and the
  // tuple keeps it to the last of their readers.
  absl::StatusOr<Graph> twice =
      ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "t", "op": "call_function", "target": "aten.convolution_backward.default", "args": [], "meta": {"tensor_size": 1010}},
    {"name": "a", "op": "call_function", "target": "operator.getitem", "args": ["%t", 0], "meta": {"tensor_size": 1000}},
    {"name": "b", "op": "call_function", "target": "operator.getitem", "args": ["%t", 0], "meta": {"tensor_size": 1000}},
    {"name": "gw", "op": "call_function", "target": "operator.getitem", "args": ["%t", 1], "meta": {"tensor_size": 10}},
    {"name": "output", "op": "output", "target": "output", "args": [["%a", "%b", "%gw"]]}]})");
  ASSERT_TRUE(twice.ok()) << twice.status();
  const std::vector<char> owned_twice = OwnedTupleElements(*twice);
  EXPECT_FALSE(owned_twice[twice->FindNode("a")]);
  EXPECT_FALSE(owned_twice[twice->FindNode("b")]);
  EXPECT_TRUE(owned_twice[twice->FindNode("gw")]);
  EXPECT_EQ(TupleRemainderBytes(*twice, twice->FindNode("t"), owned_twice), 1000);
}

// A forward that offloads its 1000-byte saved value `a` (copied at 1000 B/s: 1 s) while
// compute goes on: `a` dies when its copy ends, so the later 1000-byte `d` does not meet it.
Graph OffloadingForward() {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"tensor_size": 100}},
    {"name": "a", "op": "call_function", "target": "aten.relu.default", "args": ["%x"], "meta": {"tensor_size": 1000, "device_time": 1.0}},
    {"name": "a__host", "op": "call_function", "target": "dc.offload_tensor", "args": ["%a", 0, 0], "meta": {"tensor_size": 1000}},
    {"name": "b", "op": "call_function", "target": "aten.sum.default", "args": ["%a"], "meta": {"tensor_size": 10, "device_time": 0.5}},
    {"name": "c", "op": "call_function", "target": "aten.neg.default", "args": ["%b"], "meta": {"tensor_size": 10, "device_time": 3.0}},
    {"name": "d", "op": "call_function", "target": "aten.neg.default", "args": ["%c"], "meta": {"tensor_size": 1000, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": [["%d", "%a__host"]]}]})");
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

CollectiveModel HostLinkAt(double bytes_per_s) {
  CollectiveModel m;
  m.host_bandwidth_bytes_per_s = bytes_per_s;
  return m;
}

TEST(SimulatorTest, AnOffloadedValueDiesWhenItsCopyToTheHostEnds) {
  const Graph g = OffloadingForward();
  // a: 0-1, its copy 1-2 on the host link, b 1-1.5, c 1.5-4.5, d 4.5-5.5. Held: x + a at
  // a (the peak), a + b + c at c (the copy not done), c + d at d (a gone at 2, b at c's end).
  absl::StatusOr<SimulationResult> r = Simulate(g, g.OrderVector(), HostLinkAt(1000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_memory_bytes, 1100);
  EXPECT_EQ(r->memory.back().second, 0);
  EXPECT_DOUBLE_EQ(r->step_time_s, 5.5);
  EXPECT_DOUBLE_EQ(r->host_s, 1.0);
  EXPECT_DOUBLE_EQ(r->compute_s, 5.5);
  bool host_lane = false;
  for (const SimEvent& e : r->events) {
    if (e.stream != 2) continue;
    host_lane = true;
    EXPECT_EQ(e.node, g.FindNode("a__host"));
    EXPECT_DOUBLE_EQ(e.start_s, 1.0);
    EXPECT_DOUBLE_EQ(e.end_s, 2.0);
  }
  EXPECT_TRUE(host_lane);
  EXPECT_NE(ChromeTraceJson(g, *r).find("host link"), std::string::npos);
  // A link of 100 B/s: the copy ends at 11, so `a` meets `d` (a + c + d), and the step waits
  // for it.
  r = Simulate(g, g.OrderVector(), HostLinkAt(100));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_memory_bytes, 2010);
  EXPECT_DOUBLE_EQ(r->step_time_s, 11.0);
  EXPECT_DOUBLE_EQ(r->lower_bound_s, 10.0);
  // Alone (free copies, the executor's rule) the copy is done where the offload stands, so
  // `a` dies at its last device reader, b: x + a at a, a + b at b, b + c at c, c + d at d.
  r = SimulateAlone(g, g.OrderVector());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_memory_bytes, 1100);
  EXPECT_DOUBLE_EQ(r->host_s, 0.0);
}

// A backward that reloads a saved 1000-byte value from the host (1000 B/s: 1 s).
Graph ReloadingBackward() {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "a__host", "op": "placeholder", "target": "a__host", "args": [], "meta": {"tensor_size": 1000}},
    {"name": "t", "op": "placeholder", "target": "t", "args": [], "meta": {"tensor_size": 10}},
    {"name": "a__reload", "op": "call_function", "target": "dc.reload_tensor", "args": ["%a__host", 1, 0], "meta": {"tensor_size": 1000}},
    {"name": "u", "op": "call_function", "target": "aten.neg.default", "args": ["%t"], "meta": {"tensor_size": 10, "device_time": 2.0}},
    {"name": "a__reloaded", "op": "call_function", "target": "dc.wait_reload", "args": ["%a__reload", 1, 0], "meta": {"tensor_size": 1000}},
    {"name": "e", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%a__reloaded", "%u"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": [["%e"]]}]})");
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

TEST(SimulatorTest, AReloadIsAllocatedAtItsIssueAndItsWaitBlocksUntilItArrives) {
  const Graph g = ReloadingBackward();
  // Issued first: copied 0-1 behind u (0-2), no stall; e 2-3. The host placeholder is not
  // device memory: t 10 + the reload 1000 + u 10 at u, the reload + u + e at e.
  absl::StatusOr<SimulationResult> r = Simulate(g, g.OrderVector(), HostLinkAt(1000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_memory_bytes, 1020);
  EXPECT_DOUBLE_EQ(r->step_time_s, 3.0);
  EXPECT_DOUBLE_EQ(r->exposed_comm_s, 0.0);
  // Issued after u: copied 2-3, e waits for it (3-4); t has died at u, before the reload:
  // u + the reload + e at e.
  const std::vector<NodeId> late =
      Ids(g, {"a__host", "t", "u", "a__reload", "a__reloaded", "e", "output"});
  r = Simulate(g, late, HostLinkAt(1000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_memory_bytes, 1020);
  EXPECT_DOUBLE_EQ(r->step_time_s, 4.0);
  EXPECT_DOUBLE_EQ(r->exposed_comm_s, 1.0);
}

// The untraced run computes the peak by merging instead of sorting every event; it must give
// the traced run's figures on every model, forward and backward, for every scheduler's order.
TEST(SimulatorTest, UntracedRunsAgreeWithTracedRuns) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    if (!Zero3Insertion(GraphKind::kForward).Run(&*g).ok()) continue;
    const Simulator sim(*g);
    for (const std::vector<NodeId>& order : {g->OrderVector(), *FastFreeSchedule(*g)}) {
      absl::StatusOr<SimulationResult> traced = sim.Run(order);
      absl::StatusOr<SimulationResult> quick = sim.Run(order, Untraced());
      ASSERT_TRUE(traced.ok() && quick.ok()) << name;
      EXPECT_EQ(quick->peak_memory_bytes, traced->peak_memory_bytes) << name;
      EXPECT_EQ(quick->step_time_s, traced->step_time_s) << name;
      EXPECT_TRUE(quick->memory.empty() && quick->events.empty());
    }
  }
}

TEST(SimulatorTest, RejectsOrdersThatAreNotTopological) {
  Graph g = TwoLayers();
  std::vector<NodeId> order = g.OrderVector();
  std::reverse(order.begin(), order.end());
  EXPECT_FALSE(Simulate(g, order, Slow()).ok());
  order.pop_back();
  EXPECT_FALSE(Simulate(g, order, Slow()).ok());
}

TEST(SimulatorTest, TraceHasBothStreamsAndAMemoryCounter) {
  Graph g = TwoLayers();
  absl::StatusOr<SimulationResult> r = Simulate(g, g.OrderVector(), Slow());
  ASSERT_TRUE(r.ok());
  const std::string trace = ChromeTraceJson(g, *r);
  EXPECT_THAT(trace, ::testing::HasSubstr("\"name\": \"communication\""));
  EXPECT_THAT(
      trace, ::testing::HasSubstr("{\"name\": \"mm1\", \"cat\": \"aten.mm.default\", \"ph\": "
                                  "\"X\", \"pid\": 0, \"tid\": 0, \"ts\": 1e+06, \"dur\": 1e+06}"));
  EXPECT_THAT(trace, ::testing::HasSubstr("\"ph\": \"C\""));
  EXPECT_THAT(SimulationJsonFields(*r), ::testing::HasSubstr("\"step_time_s\": 3.0"));
}

TEST(SimulatorTest, FastFreeNeverGathersMoreThanGraphOrderOnBuiltInModels) {
  for (const char* name : {"mlp", "gpt2"}) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&*g).ok());
    absl::StatusOr<std::vector<NodeId>> ff = FastFreeSchedule(*g);
    ASSERT_TRUE(ff.ok());
    absl::StatusOr<SimulationResult> a = Simulate(*g, g->OrderVector());
    absl::StatusOr<SimulationResult> b = Simulate(*g, *ff);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_LE(b->peak_gathered_bytes, a->peak_gathered_bytes) << name;
    EXPECT_GE(b->step_time_s, b->lower_bound_s) << name;
    EXPECT_GE(a->step_time_s, a->lower_bound_s) << name;
  }
}

}  // namespace
}  // namespace overlap
