// Activation offloading end to end on graphs: OffloadSaved's rewrite (graph/saved_rewrites.h)
// verified, PlaceHostCopies' orders (topological, each op where host_copies.h says), and both
// simulators agreeing on the host link.
#include "schedule/host_copies.h"

#include <string>
#include <vector>

#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/saved_rewrites.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "schedule/analysis.h"
#include "schedule/simulator.h"
#include "schedule/testing/reference_simulator.h"
#include "schedule/testing/zero3_models.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// Positions in `order` by node id.
std::vector<int64_t> Positions(const Graph& g, const std::vector<NodeId>& order) {
  std::vector<int64_t> pos(g.id_bound(), -1);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int64_t>(i);
  return pos;
}

// Both simulators on `order`; "" when they agree.
std::string Disagreement(const Graph& g, const std::vector<NodeId>& order,
                         const CollectiveModel& model) {
  absl::StatusOr<SimulationResult> fast = Simulator(g, model).Run(order, {});
  if (!fast.ok()) return std::string(fast.status().message());
  const ReferenceSimulation ref = ReferenceSimulate(g, order, model);
  auto near = [](double x, double y) { return std::abs(x - y) <= 1e-9 * (1 + std::abs(y)); };
  std::string out;
  if (fast->peak_memory_bytes != ref.peak_memory_bytes) {
    out += "peak " + std::to_string(fast->peak_memory_bytes) + " vs " +
           std::to_string(ref.peak_memory_bytes) + "; ";
  }
  if (!near(fast->step_time_s, ref.step_time_s)) out += "step; ";
  if (!near(fast->host_s, ref.host_s)) out += "host; ";
  if (!near(fast->lower_bound_s, ref.lower_bound_s)) out += "lower bound; ";
  return out;
}

TEST(HostCopiesTest, AGraphWithoutHostOpsKeepsItsOrder) {
  const Graph g = Zero3AotGraph("gpt2", GraphKind::kBackward, Preset::kTiny);
  const std::vector<NodeId> order = g.OrderVector();
  EXPECT_FALSE(HasHostCopies(g));
  EXPECT_EQ(PlaceHostCopies(g, order, {}), order);
}

TEST(HostCopiesTest, AReloadIsIssuedAsLateAsLetsItArriveInTime) {
  // t, then u (2 s) and e (1 s) reading the reloaded value: with a 1 s copy the reload goes
  // right before u (its copy hides behind u); wherever it stood before.
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "h", "op": "placeholder", "target": "h", "args": [], "meta": {"tensor_size": 1000}},
    {"name": "t", "op": "placeholder", "target": "t", "args": [], "meta": {"tensor_size": 10}},
    {"name": "v", "op": "call_function", "target": "aten.neg.default", "args": ["%t"], "meta": {"tensor_size": 10, "device_time": 5.0}},
    {"name": "u", "op": "call_function", "target": "aten.neg.default", "args": ["%v"], "meta": {"tensor_size": 10, "device_time": 2.0}},
    {"name": "r", "op": "call_function", "target": "dc.reload_tensor", "args": ["%h", 1, 0], "meta": {"tensor_size": 1000}},
    {"name": "w", "op": "call_function", "target": "dc.wait_reload", "args": ["%r", 1, 0], "meta": {"tensor_size": 1000}},
    {"name": "e", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%w", "%u"], "meta": {"tensor_size": 10, "device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": [["%e"]]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(Verify(*g).ok());
  CollectiveModel m;
  m.host_bandwidth_bytes_per_s = 1000;
  auto names = [&](const std::vector<NodeId>& order) {
    std::vector<std::string> out;
    for (NodeId id : order) out.push_back(g->node(id).name());
    return out;
  };
  const std::vector<std::string> want = {"h", "t", "v", "r", "u", "w", "e", "output"};
  EXPECT_EQ(names(PlaceHostCopies(*g, g->OrderVector(), m)), want);
  // A 10 s copy cannot hide: issued as early as it can be, after the placeholders.
  m.host_bandwidth_bytes_per_s = 100;
  EXPECT_EQ(names(PlaceHostCopies(*g, g->OrderVector(), m)),
            (std::vector<std::string>{"h", "t", "r", "v", "u", "w", "e", "output"}));
}

// Every built-in model's tiny pair with ZeRO-3 ops, every saved group offloaded.
TEST(HostCopiesTest, OffloadedPairsVerifyPlaceAndSimulateAlike) {
  int64_t offloaded = 0, lower = 0;
  for (const std::string& name : ModelNames()) {
    SCOPED_TRACE(name);
    Graph f = Zero3AotGraph(name, GraphKind::kForward, Preset::kTiny);
    Graph b = Zero3AotGraph(name, GraphKind::kBackward, Preset::kTiny);
    ASSERT_GT(f.size(), 0);
    absl::StatusOr<SimulationResult> before = SimulateAlone(f, f.OrderVector());
    ASSERT_TRUE(before.ok());
    const std::vector<OffloadCandidate> candidates = OffloadCandidates(f, b);
    std::vector<std::string> names;
    for (const OffloadCandidate& c : candidates) names.push_back(c.name);
    absl::StatusOr<int64_t> done = OffloadSaved(&f, &b, names);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(*done, static_cast<int64_t>(names.size()));
    offloaded += *done;
    ASSERT_TRUE(Verify(f).ok()) << Verify(f);
    ASSERT_TRUE(Verify(b).ok()) << Verify(b);
    EXPECT_TRUE(OffloadCandidates(f, b).empty());  // nothing saved on the device is left
    // And the last lever's waits for reductions, which both simulators read too.
    ASSERT_TRUE(AddReduceWaits(&b).ok());
    ASSERT_TRUE(Verify(b).ok()) << Verify(b);
    CollectiveModel model;
    model.host_bandwidth_bytes_per_s = 25e9;
    for (const Graph* g : {&f, &b}) {
      EXPECT_EQ(Disagreement(*g, g->OrderVector(), model), "");
      const std::vector<NodeId> placed = PlaceHostCopies(*g, g->OrderVector(), model);
      ASSERT_TRUE(CheckTopologicalPermutation(*g, placed).ok());
      EXPECT_EQ(Disagreement(*g, placed, model), "");
      const std::vector<int64_t> pos = Positions(*g, placed);
      for (NodeId id : g->order()) {
        const Node& n = g->node(id);
        if (IsOffload(n)) {  // right after what it copies (or after other offloads of it)
          int64_t p = pos[id] - 1;
          while (p >= 0 && IsOffload(g->node(placed[p]))) --p;
          EXPECT_EQ(placed[p], n.inputs()[0]) << n.name();
        }
        if (IsWaitReload(n)) {
          EXPECT_LT(pos[n.inputs()[0]], pos[id]) << n.name();
          int64_t first = static_cast<int64_t>(placed.size());
          for (NodeId u : n.users()) first = std::min(first, pos[u]);
          for (int64_t p = pos[id] + 1; p < first; ++p) {  // only other waits between
            EXPECT_TRUE(IsWaitReload(g->node(placed[p]))) << n.name();
          }
        }
      }
    }
    // The forward no longer holds its saved activations to its end: alone (free copies,
    // the executor's rule) its peak never grows, and shrinks somewhere.
    absl::StatusOr<SimulationResult> after = SimulateAlone(f, f.OrderVector());
    ASSERT_TRUE(after.ok());
    EXPECT_LE(after->peak_memory_bytes, before->peak_memory_bytes);
    lower += after->peak_memory_bytes < before->peak_memory_bytes;
  }
  EXPECT_GT(offloaded, 0);
  EXPECT_GT(lower, 0);
}

}  // namespace
}  // namespace overlap
