#include "schedule/simulator.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/json_writer.h"
#include "schedule/fast_free_reference.h"  // LastUses, CheckTopologicalPermutation
#include "schedule/zero3_insertion.h"

namespace overlap {

namespace {

bool Is(const Node& n, absl::string_view target) {
  return n.op() == Op::kCallFunction && n.target() == target;
}
int64_t SizeOf(const Node& n) { return n.meta().has_tensor_size ? n.meta().tensor_size : 0; }
bool IsView(const Node& n) { return n.meta().has_aliases_input && n.meta().aliases_input; }
int64_t IntArg(const Node& n, size_t i) {
  return n.args().size() > i && n.args()[i].kind() == Value::Kind::kInt ? n.args()[i].as_int() : -1;
}

}  // namespace

absl::StatusOr<SimulationResult> Simulate(const Graph& g, absl::Span<const NodeId> order,
                                          const CollectiveModel& model) {
  if (absl::Status s = CheckTopologicalPermutation(g, order); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a valid schedule: ", s.message()));
  }
  if (!model.Valid()) {
    return absl::InvalidArgumentError(
        "collective model needs world size >= 1, latency >= 0, bandwidth > 0");
  }
  SimulationResult r;
  // When a tensor's storage dies: a release hands the same tensor on, like a view.
  const std::vector<NodeId> last_use = LastUses(g, /*releases_pass_through=*/true);
  std::vector<double> start(g.id_bound(), 0), end(g.id_bound(), 0);
  std::vector<NodeId> reduced_by(g.id_bound(), kNoNode);  // gradient -> its reduce node
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (Is(n, kReduceTarget) && !n.inputs().empty()) reduced_by[n.inputs()[0]] = id;
  }
  double compute_t = 0, comm_free = 0;
  // Gathered parameters: (ds_id) -> (bytes, releases seen).
  absl::flat_hash_map<int64_t, std::pair<int64_t, int64_t>> gathered;
  int64_t gathered_now = 0;
  std::vector<std::pair<double, int64_t>> deltas;  // (time, +/- bytes)
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput || n.op() == Op::kGetAttr) {
      start[id] = end[id] = compute_t;
      continue;
    }
    if (Is(n, kAllgatherTarget) || Is(n, kReduceTarget)) {
      const int64_t bytes = SizeOf(n);
      const double t = Is(n, kAllgatherTarget) ? model.Allgather(bytes) : model.ReduceScatter(bytes);
      start[id] = std::max(compute_t, comm_free);
      end[id] = start[id] + t;
      comm_free = end[id];
      r.comm_s += t;
      r.events.push_back({id, 1, start[id], end[id]});
      if (Is(n, kAllgatherTarget)) {
        deltas.push_back({compute_t, bytes});  // allocated at issue
        auto& [size, seen] = gathered[IntArg(n, 2)];
        size = bytes;
        seen = 0;
        gathered_now += bytes;
        r.peak_gathered_bytes = std::max(r.peak_gathered_bytes, gathered_now);
      }
      continue;
    }
    if (Is(n, kWaitTarget)) {
      const NodeId ag = n.inputs().empty() ? kNoNode : n.inputs()[0];
      if (ag != kNoNode) compute_t = std::max(compute_t, end[ag]);
      start[id] = end[id] = compute_t;
      continue;
    }
    if (Is(n, kReleaseTarget)) {
      start[id] = end[id] = compute_t;
      auto it = gathered.find(IntArg(n, 2));
      if (it != gathered.end() && ++it->second.second == IntArg(n, 3)) {
        deltas.push_back({compute_t, -it->second.first});
        gathered_now -= it->second.first;
        gathered.erase(it);
      }
      continue;
    }
    const double t = n.meta().has_device_time ? n.meta().device_time : 0;
    start[id] = compute_t;
    end[id] = compute_t + t;
    compute_t = end[id];
    r.compute_s += t;
    if (t > 0) r.events.push_back({id, 0, start[id], end[id]});
  }
  // Activations: allocated at start, freed when the last use (or the reduction) finishes.
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput || n.op() == Op::kGetAttr ||
        IsView(n) || Is(n, kAllgatherTarget) || Is(n, kWaitTarget) || Is(n, kReleaseTarget) ||
        Is(n, kReduceTarget)) {
      continue;
    }
    const int64_t bytes = SizeOf(n);
    if (bytes == 0) continue;
    double free_at = last_use[id] == kNoNode ? end[id] : end[last_use[id]];
    if (reduced_by[id] != kNoNode) free_at = std::max(free_at, end[reduced_by[id]]);
    deltas.push_back({start[id], bytes});
    deltas.push_back({free_at, -bytes});
  }
  std::stable_sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return a.second < b.second;  // frees first
  });
  int64_t in_use = 0;
  for (const auto& [t, d] : deltas) {
    in_use += d;
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, in_use);
    r.memory.push_back({t, in_use});
  }
  r.step_time_s = std::max(compute_t, comm_free);
  r.exposed_comm_s = std::max(0.0, r.step_time_s - r.compute_s);
  r.lower_bound_s = std::max(r.compute_s, r.comm_s);
  return r;
}

std::string ChromeTraceJson(const Graph& g, const SimulationResult& r) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out.append(
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": "
      "\"compute\"}},\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 1, "
      "\"args\": {\"name\": \"communication\"}}");
  for (const SimEvent& e : r.events) {
    out.append(",\n{\"name\": ");
    AppendJsonString(&out, g.node(e.node).name());
    out.append(", \"cat\": ");
    AppendJsonString(&out, g.node(e.node).target());
    absl::StrAppend(&out, ", \"ph\": \"X\", \"pid\": 0, \"tid\": ", e.stream, ", \"ts\": ");
    AppendJsonDouble(&out, e.start_s * 1e6);
    out.append(", \"dur\": ");
    AppendJsonDouble(&out, (e.end_s - e.start_s) * 1e6);
    out.push_back('}');
  }
  for (const auto& [t, bytes] : r.memory) {
    out.append(",\n{\"name\": \"memory\", \"ph\": \"C\", \"pid\": 0, \"ts\": ");
    AppendJsonDouble(&out, t * 1e6);
    absl::StrAppend(&out, ", \"args\": {\"bytes\": ", bytes, "}}");
  }
  out.append("\n]}\n");
  return out;
}

std::string SimulationJsonFields(const SimulationResult& r) {
  std::string out;
  absl::StrAppend(&out, "\"peak_memory_bytes\": ", r.peak_memory_bytes,
                  ", \"peak_gathered_bytes\": ", r.peak_gathered_bytes, ", \"step_time_s\": ");
  AppendJsonDouble(&out, r.step_time_s);
  out.append(", \"exposed_comm_s\": ");
  AppendJsonDouble(&out, r.exposed_comm_s);
  out.append(", \"lower_bound_s\": ");
  AppendJsonDouble(&out, r.lower_bound_s);
  return out;
}

}  // namespace overlap
