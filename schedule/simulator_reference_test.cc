// The fast simulator against the second, simple one (schedule/testing/reference_simulator.h),
// both written from the contract of simulator.h: every built-in model's AOT pair, forward
// and backward, in every scheduler's order and in the graph's, with residents and buckets;
// random forward and backward graphs in random topological orders.
#include <string>
#include <vector>

#include "graph/aot.h"
#include "graph/models.h"
#include "graph/random_graph_rc.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"
#include "schedule/scheduler_registry.h"
#include "schedule/simulator.h"
#include "schedule/testing/reference_simulator.h"
#include "schedule/testing/zero3_models.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// Whether the two simulators agree on `order` with these residents and bucket cap; the
// difference when they do not.
std::string Disagreement(const Graph& g, const std::vector<NodeId>& order,
                         const std::vector<int64_t>& resident, int64_t cap,
                         const CollectiveModel& model = {}) {
  SimulationOptions o;
  o.resident = resident;
  o.reduce_bucket_bytes = cap;
  absl::StatusOr<SimulationResult> fast = Simulator(g, model).Run(order, o);
  if (!fast.ok()) return std::string(fast.status().message());
  const ReferenceSimulation ref = ReferenceSimulate(g, order, model, resident, cap);
  auto near = [](double x, double y) { return std::abs(x - y) <= 1e-9 * (1 + std::abs(y)); };
  std::string out;
  if (fast->peak_memory_bytes != ref.peak_memory_bytes) {
    out += "peak " + std::to_string(fast->peak_memory_bytes) + " vs " +
           std::to_string(ref.peak_memory_bytes) + "; ";
  }
  if (fast->peak_gathered_bytes != ref.peak_gathered_bytes) out += "peak gathered; ";
  if (!near(fast->step_time_s, ref.step_time_s)) out += "step; ";
  if (!near(fast->compute_s, ref.compute_s)) out += "compute; ";
  if (!near(fast->comm_s, ref.comm_s)) out += "comm; ";
  if (!near(fast->lower_bound_s, ref.lower_bound_s)) out += "lower bound; ";
  return out;
}

// Every other parameter's ds_id, from the allgathers.
std::vector<int64_t> HalfTheParameters(const Graph& g) {
  std::vector<int64_t> out;
  for (NodeId id : g.order()) {
    if (IsAllgather(g.node(id)) && DsId(g.node(id)) % 2 == 0) out.push_back(DsId(g.node(id)));
  }
  return out;
}

// The tuple rule, where both simulators implement it apart: every built-in model's AOT
// backward (tuples of input and weight gradients throughout) under its own order.
TEST(SimulatorReferenceTest, AgreesOnTupleElementsOfEveryBackward) {
  int64_t owned = 0;
  for (const std::string& name : ModelNames()) {
    SCOPED_TRACE(name);
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    absl::StatusOr<AotPair> pair = BuildAotPair(*g);
    ASSERT_TRUE(pair.ok()) << pair.status();
    for (char c : OwnedTupleElements(pair->backward)) owned += c;
    for (const Graph* x : {&pair->forward, &pair->backward}) {
      EXPECT_EQ(Disagreement(*x, x->OrderVector(), {}, 0), "");
    }
  }
  EXPECT_GT(owned, 0);  // the rule is exercised
}

TEST(SimulatorReferenceTest, AgreesOnEveryModelAndSchedulerWithResidentsAndBuckets) {
  for (const std::string& name : ModelNames()) {
    for (Preset preset : {Preset::kTiny, Preset::kDefault}) {
      // The default presets of the large models take the quadratic oracle too long.
      if (preset == Preset::kDefault && name != "mlp" && name != "resnet18") continue;
      for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
        const Graph original = Zero3AotGraph(name, kind, preset);
        const std::string what = name + (kind == GraphKind::kBackward ? " backward" : " forward");
        EXPECT_EQ(Disagreement(original, original.OrderVector(), {}, 0), "") << what;
        EXPECT_EQ(Disagreement(original, original.OrderVector(), HalfTheParameters(original),
                               int64_t{1} << 12),
                  "")
            << what;
        for (const SchedulerEntry& e : Schedulers()) {
          Graph g = original;
          absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &g);
          ASSERT_TRUE(r.ok()) << what << " " << e.name << ": " << r.status();
          EXPECT_EQ(Disagreement(g, r->order, {}, 0), "") << what << " " << e.name;
          EXPECT_EQ(Disagreement(g, r->order, HalfTheParameters(g), int64_t{1} << 16), "")
              << what << " " << e.name;
        }
      }
    }
  }
}

// A random topological order of g (Kahn's algorithm, a random ready node each step), the
// output node last.
std::vector<NodeId> RandomOrder(const Graph& g) {
  std::vector<int> pending(g.id_bound(), 0);
  std::vector<NodeId> ready, order;
  for (NodeId id : g.order()) {
    pending[id] = static_cast<int>(g.node(id).inputs().size());
    if (pending[id] == 0) ready.push_back(id);
  }
  while (!ready.empty()) {
    const size_t pick = *rc::gen::inRange<size_t>(0, ready.size());
    const NodeId id = ready[pick];
    ready.erase(ready.begin() + pick);
    order.push_back(id);
    for (NodeId u : g.node(id).users()) {
      if (--pending[u] == 0) ready.push_back(u);
    }
  }
  std::stable_partition(order.begin(), order.end(),
                        [&](NodeId id) { return g.node(id).op() != Op::kOutput; });
  return order;
}

RC_GTEST_PROP(SimulatorReferenceTest, prop_AgreesOnRandomGraphsAndOrders, ()) {
  const bool backward = *rc::gen::arbitrary<bool>();
  std::optional<Graph> made =
      WithZero3Ops(*ArbitraryGraph(120), backward ? GraphKind::kBackward : GraphKind::kForward);
  if (!made) return;
  Graph g = *std::move(made);
  const std::vector<NodeId> order = RandomOrder(g);
  RC_TAG(backward ? "backward" : "forward");
  const std::vector<int64_t> resident =
      *rc::gen::arbitrary<bool>() ? HalfTheParameters(g) : std::vector<int64_t>{};
  const int64_t cap = *rc::gen::element<int64_t>(0, 1, 1 << 10, 1 << 20);
  CollectiveModel model;
  model.latency_s = *rc::gen::element(0.0, 20e-6);
  model.compute_slowdown = *rc::gen::element(0.0, 0.3);
  model.busy_start_s = *rc::gen::element(0.0, 5e-6, 1.0);
  RC_ASSERT(Disagreement(g, order, resident, cap, model) == "");
}

// SimulationOptions::resident is the graph MakeResident leaves: the same figures as the
// rewritten graph (its releases erased, their users reading what the releases read),
// including where a release was the last reader of the value it orders after.
RC_GTEST_PROP(SimulatorReferenceTest, prop_ResidentOptionIsTheRewrittenGraph, ()) {
  const bool backward = *rc::gen::arbitrary<bool>();
  std::optional<Graph> made =
      WithZero3Ops(*ArbitraryGraph(120), backward ? GraphKind::kBackward : GraphKind::kForward);
  if (!made) return;
  Graph g = *std::move(made);
  std::vector<int64_t> resident;
  for (NodeId id : g.order()) {
    if (IsAllgather(g.node(id)) && *rc::gen::arbitrary<bool>()) {
      resident.push_back(DsId(g.node(id)));
    }
  }
  std::vector<NodeId> order = RandomOrder(g);
  SimulationOptions o;
  o.resident = resident;
  absl::StatusOr<SimulationResult> modeled = Simulator(g).Run(order, o);
  RC_ASSERT(modeled.ok());
  Graph rewritten = g;
  RC_ASSERT(MakeResident(&rewritten, resident, &order).ok());
  absl::StatusOr<SimulationResult> real = Simulate(rewritten, order);
  RC_ASSERT(real.ok());
  RC_ASSERT(modeled->peak_memory_bytes == real->peak_memory_bytes);
  RC_ASSERT(modeled->peak_gathered_bytes == real->peak_gathered_bytes);
  RC_ASSERT(modeled->step_time_s == real->step_time_s);
}

}  // namespace
}  // namespace overlap
