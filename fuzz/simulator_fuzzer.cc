// Fuzz target: the simulator and the schedule verifier on arbitrary valid orders (not only
// the schedulers' orders). Input: byte 0 = forward / backward insertion (bit 0), even ds_ids
// resident (bit 1), reduce-scatter bucket cap 2^(bits 3..6) bytes (bit 2), the memory levers'
// ops (bit 7: every third sized call node's value offloaded to the host and reloaded before
// its readers, and in a backward graph dc.wait_reduce before each next gathered parameter);
// byte 1 = k, then k bytes steering a random topological order (which ready node runs next),
// then a graph decoded by the shared generator; ZeRO-3 insertion runs first.
// Invariants: the simulator accepts every topological order and is deterministic;
// lower_bound = max(compute, comm, host) <= step time <= compute + comm + host (at every
// instant one stream is busy until all drain); exposed comm = step - compute; stream intervals
// never overlap on a stream; peak_gathered_bytes equals the verifier's walk; the schedule verifier
// answers OK or names a violation, never crashes; the second, simple simulator of
// schedule/testing/reference_simulator.h gives the same figures, with residents and buckets.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "graph/random_graph.h"
#include "graph/verifier.h"
#include "schedule/schedule_verifier.h"
#include "schedule/simulator.h"
#include "schedule/testing/reference_simulator.h"
#include "schedule/zero3_insertion.h"
#include "schedule/zero3_ops.h"

namespace {
[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "simulator_fuzzer: %s\n", what.c_str());
  std::abort();
}

// Kahn's algorithm; `steer` picks among the ready nodes (the first when exhausted).
std::vector<overlap::NodeId> SteeredOrder(const overlap::Graph& g,
                                          absl::Span<const uint8_t> steer) {
  using overlap::NodeId;
  std::vector<int> pending(g.id_bound(), 0);
  std::vector<NodeId> ready, order;
  for (NodeId id : g.order()) {
    pending[id] = static_cast<int>(g.node(id).inputs().size());
    if (pending[id] == 0) ready.push_back(id);
  }
  size_t k = 0;
  while (!ready.empty()) {
    const size_t pick = k < steer.size() ? steer[k++] % ready.size() : 0;
    const NodeId id = ready[pick];
    ready.erase(ready.begin() + pick);
    order.push_back(id);
    for (NodeId u : g.node(id).users()) {
      if (--pending[u] == 0) ready.push_back(u);
    }
  }
  return order;
}
// The host-memory ops on one graph: every third call node with a size and readers gets
// H = offload(x), R = reload(H), W = wait_reload(R) right after it, its readers reading W.
void AddHostRoundTrips(overlap::Graph* g) {
  using namespace overlap;
  std::vector<NodeId> values;
  for (NodeId id : g->order()) {
    const Node& n = g->node(id);
    if (n.op() == Op::kCallFunction && !IsZero3Op(n) && SizeOf(n) > 0 && !n.users().empty()) {
      values.push_back(id);
    }
  }
  int64_t next = 0;
  for (size_t i = 0; i < values.size(); i += 3) {
    const NodeId x = values[i];
    const std::string base = g->node(x).name();
    std::vector<Value> args = {Value::Ref(x), Value::Int(0), Value::Int(next)};
    absl::StatusOr<NodeId> h = g->AddNode(Op::kCallFunction, base + "__fz_host",
                                          "dc.offload_tensor", args, {}, InsertPoint::After(x));
    if (!h.ok()) return;
    absl::StatusOr<NodeId> r =
        g->AddNode(Op::kCallFunction, base + "__fz_reload", "dc.reload_tensor",
                   {Value::Ref(*h), Value::Int(0), Value::Int(next)}, {}, InsertPoint::After(*h));
    if (!r.ok()) return;
    absl::StatusOr<NodeId> w =
        g->AddNode(Op::kCallFunction, base + "__fz_reloaded", "dc.wait_reload",
                   {Value::Ref(*r), Value::Int(0), Value::Int(next)}, {}, InsertPoint::After(*r));
    if (!w.ok()) return;
    for (NodeId id : {*h, *r, *w}) {
      g->mutable_node(id).mutable_meta().has_tensor_size = true;
      g->mutable_node(id).mutable_meta().tensor_size = SizeOf(g->node(x));
    }
    const NodeId keep_h = *h;
    g->ReplaceAllUsesWith(x, *w, [&](const Node& user) { return user.id() != keep_h; });
    ++next;
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  if (size < 2) return 0;
  const int graph_id = data[0] & 1;
  const size_t k = data[1];
  if (size < 2 + k) return 0;
  Graph g = GraphFromBytes(absl::MakeConstSpan(data + 2 + k, size - 2 - k), 160);
  if (!Zero3Insertion(static_cast<GraphKind>(graph_id)).Run(&g).ok())
    return 0;  // module-owned: schedule_fuzzer's case
  if (data[0] & 128) {
    AddHostRoundTrips(&g);
    if (graph_id == 1 && !AddReduceWaits(&g).ok()) Fail("AddReduceWaits failed");
    // The levers' ops make a graph the IR accepts (no compute reads a host tensor).
    if (absl::Status s = Verify(g); !s.ok())
      Fail("the levers' ops broke the graph: " + s.ToString());
  }
  std::vector<NodeId> order = SteeredOrder(g, absl::MakeConstSpan(data + 2, k));
  // The output must come last: move it there (it is a sink, so this stays topological).
  auto out = std::find_if(order.begin(), order.end(),
                          [&](NodeId id) { return g.node(id).op() == Op::kOutput; });
  if (out != order.end()) std::rotate(out, out + 1, order.end());
  if (order.size() != static_cast<size_t>(g.size())) Fail("steered order is not a permutation");

  absl::Status verdict = VerifySchedule(g, order);
  if (!verdict.ok() && verdict.message().empty()) Fail("schedule verifier: empty message");

  absl::StatusOr<SimulationResult> a = Simulate(g, order);
  if (!a.ok()) Fail("simulator rejected a topological order: " + std::string(a.status().message()));
  absl::StatusOr<SimulationResult> b = Simulate(g, order);
  if (!b.ok() || a->step_time_s != b->step_time_s || a->peak_memory_bytes != b->peak_memory_bytes) {
    Fail("simulator is not deterministic");
  }
  // The untraced run computes the peak without sorting every event: it must agree.
  SimulationOptions untraced;
  untraced.record_trace = false;
  absl::StatusOr<SimulationResult> quick = Simulator(g).Run(order, untraced);
  if (!quick.ok() || quick->peak_memory_bytes != a->peak_memory_bytes ||
      quick->step_time_s != a->step_time_s) {
    Fail("untraced simulation differs from the traced one");
  }
  const SimulationResult& r = *a;
  const double eps = 1e-9 * (1 + r.compute_s + r.comm_s + r.host_s);
  if (!(std::isfinite(r.step_time_s) && r.step_time_s >= 0)) Fail("step time not finite");
  if (std::abs(r.lower_bound_s - std::max({r.compute_s, r.comm_s, r.host_s})) > eps) {
    Fail("lower bound wrong");
  }
  if (r.step_time_s + eps < r.lower_bound_s) Fail("step time below the lower bound");
  if (r.step_time_s > r.compute_s + r.comm_s + r.host_s + eps) {
    Fail("step time above compute + comm + host");
  }
  if (std::abs(r.exposed_comm_s - (r.step_time_s - r.compute_s)) > eps) Fail("exposed comm wrong");
  if (r.peak_memory_bytes < 0) Fail("negative peak memory");
  if (r.peak_gathered_bytes != PeakGatheredBytes(g, order)) Fail("peak gathered differs from walk");
  double stream_end[3] = {0, 0, 0};
  for (const SimEvent& e : r.events) {
    if (e.stream < 0 || e.stream > 2) Fail("event on an unknown stream");
    if (e.end_s + eps < e.start_s) Fail("event ends before it starts");
    if (e.start_s + eps < stream_end[e.stream]) Fail("events overlap on one stream");
    stream_end[e.stream] = std::max(stream_end[e.stream], e.end_s);
  }
  if (std::max({stream_end[0], stream_end[1], stream_end[2]}) > r.step_time_s + eps) {
    Fail("event after the step");
  }

  // The second simulator, written from the contract alone, with residents and buckets.
  std::vector<int64_t> resident;
  if (data[0] & 2) {
    for (NodeId id : order) {
      const Node& n = g.node(id);
      if (IsAllgather(n) && DsId(n) >= 0 && DsId(n) % 2 == 0) resident.push_back(DsId(n));
    }
  }
  SimulationOptions options;
  options.resident = resident;
  options.reduce_bucket_bytes = (data[0] & 4) ? int64_t{1} << ((data[0] >> 3) & 15) : 0;
  absl::StatusOr<SimulationResult> fast = Simulator(g).Run(order, options);
  if (!fast.ok()) Fail("simulator rejected residents or buckets");
  const ReferenceSimulation ref =
      ReferenceSimulate(g, order, CollectiveModel{}, resident, options.reduce_bucket_bytes);
  auto near = [&](double x, double y) { return std::abs(x - y) <= 1e-9 * (1 + std::abs(y)); };
  if (fast->peak_memory_bytes != ref.peak_memory_bytes) Fail("peak memory differs from reference");
  if (fast->peak_gathered_bytes != ref.peak_gathered_bytes) Fail("peak gathered differs");
  if (!near(fast->step_time_s, ref.step_time_s)) Fail("step time differs from reference");
  if (!near(fast->compute_s, ref.compute_s) || !near(fast->comm_s, ref.comm_s) ||
      !near(fast->host_s, ref.host_s)) {
    Fail("compute, communication or host-link time differs from reference");
  }
  return 0;
}
