#include "graph/summary.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/cost_model.h"
#include "graph/size.h"
#include "graph/value_bytes.h"

namespace overlap {

int64_t CountParameters(const Graph& g) {
  absl::flat_hash_map<absl::string_view, bool> seen;
  int64_t total = 0;
  for (const Param& p : g.params()) {
    if (!seen.emplace(p.storage_key(), true).second) continue;
    if (p.has_shape) {
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      total += n;
    } else {
      total += p.bytes / DtypeBytes(p.has_dtype ? p.dtype : "float32");
    }
  }
  return total;
}

GraphSummary Summarize(const Graph& g) {
  GraphSummary s;
  s.nodes = g.size();
  // Longest path by device_time: finish[id] = own time + max over inputs.
  std::vector<double> finish(g.id_bound(), 0);
  std::vector<NodeId> via(g.id_bound(), kNoNode);
  NodeId end = kNoNode;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    s.nodes_by_op[static_cast<int>(n.op())]++;
    const NodeMeta& m = n.meta();
    s.tensor_bytes += VerifiedValueBytes(n);
    if (m.has_device_time) {
      s.device_time += m.device_time;
    } else if (n.op() != Op::kPlaceholder && n.op() != Op::kOutput) {
      ++s.nodes_without_time;
    }
    double start = 0;
    for (NodeId in : n.inputs()) {
      if (finish[in] > start) {
        start = finish[in];
        via[id] = in;
      }
    }
    finish[id] = start + (m.has_device_time ? m.device_time : 0);
    if (end == kNoNode || finish[id] > finish[end]) end = id;
  }
  if (end != kNoNode) {
    s.critical_path_time = finish[end];
    for (NodeId id = end; id != kNoNode; id = via[id]) s.critical_path.push_back(id);
    std::reverse(s.critical_path.begin(), s.critical_path.end());
  }
  s.param_elements = CountParameters(g);
  s.absent = ClassifyParams(g).absent;
  absl::flat_hash_map<absl::string_view, int> group_of;
  for (const Param& p : g.params()) {
    ++s.param_entries;
    if (!p.requires_grad) ++s.frozen;
    if (p.ddp_ignored) ++s.ignored;
    auto [it, fresh] = group_of.emplace(p.storage_key(), static_cast<int>(s.tied_groups.size()));
    if (fresh) {
      s.tied_groups.push_back({});
      ++s.unique_storages;
      s.param_bytes += p.bytes;
      s.param_bytes_by_dtype[p.has_dtype ? p.dtype : "unknown"] += p.bytes;
      if (p.requires_grad && !p.ddp_ignored) s.trainable_bytes += p.bytes;
    }
    s.tied_groups[it->second].push_back(p.name);
  }
  s.tied_groups.erase(std::remove_if(s.tied_groups.begin(), s.tied_groups.end(),
                                     [](const auto& grp) { return grp.size() < 2; }),
                      s.tied_groups.end());
  return s;
}

std::string FormatSummary(const Graph& g, const GraphSummary& s) {
  std::string out;
  absl::StrAppend(&out, "graph: ", g.has_name() ? g.name() : "(unnamed)", "\n");
  absl::StrAppend(&out, "nodes: ", FormatCount(s.nodes), "\n");
  for (int op = 0; op < 6; ++op) {
    if (s.nodes_by_op[op] == 0) continue;
    absl::StrAppend(&out, "  ", OpName(static_cast<Op>(op)), ": ", FormatCount(s.nodes_by_op[op]),
                    "\n");
  }
  absl::StrAppend(&out, "parameters: ", FormatCount(s.param_elements), " (",
                  FormatBytes(s.param_bytes), " in ", FormatCount(s.unique_storages), " storages; ",
                  FormatCount(s.param_entries), " table entries)\n");
  for (const auto& [dtype, bytes] : s.param_bytes_by_dtype) {
    absl::StrAppend(&out, "  ", dtype, ": ", FormatBytes(bytes), "\n");
  }
  absl::StrAppend(
      &out, "  trainable (requires_grad, not ddp_ignored): ", FormatBytes(s.trainable_bytes), "\n");
  absl::StrAppend(&out, "  frozen entries: ", s.frozen, ", ddp_ignored entries: ", s.ignored, "\n");
  if (s.absent > 0) {
    absl::StrAppend(&out, "  absent from this graph: ", FormatCount(s.absent),
                    " entries (a lifted graph listing the whole model's table; not read here)\n");
  }
  absl::StrAppend(&out, "  tied groups: ", s.tied_groups.size(), "\n");
  for (size_t i = 0; i < s.tied_groups.size() && i < 5; ++i) {
    absl::StrAppend(&out, "    ", absl::StrJoin(s.tied_groups[i], " = "), "\n");
  }
  if (s.tied_groups.size() > 5) {
    absl::StrAppend(&out, "    ... ", s.tied_groups.size() - 5, " more\n");
  }
  absl::StrAppend(&out, "activations (sum of value sizes): ", FormatBytes(s.tensor_bytes), "\n");
  absl::StrAppend(&out, "device time (sum): ", FormatSeconds(s.device_time), "\n");
  if (s.nodes_without_time > 0) {
    absl::StrAppend(&out, "  (", FormatCount(s.nodes_without_time),
                    " compute nodes have no device_time; counted as 0)\n");
  }
  absl::StrAppend(&out, "critical path: ", FormatSeconds(s.critical_path_time), " over ",
                  FormatCount(static_cast<int64_t>(s.critical_path.size())), " nodes");
  if (!s.critical_path.empty()) {
    absl::StrAppend(&out, " (", g.node(s.critical_path.front()).name(), " -> ",
                    g.node(s.critical_path.back()).name(), ")");
  }
  absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace overlap
