#include "graph/subgraph.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace overlap {

absl::StatusOr<NodeId> CopyNode(const Graph& src, NodeId id,
                                const absl::flat_hash_map<NodeId, NodeId>& remap, Graph* dst) {
  const Node& n = src.node(id);
  bool missing = false;
  NodeId missing_id = kNoNode;
  auto map = [&](NodeId in) {
    auto it = remap.find(in);
    if (it == remap.end()) {
      missing = true;
      missing_id = in;
      return in;
    }
    return it->second;
  };
  std::vector<Value> args = n.args();
  ValueDict kwargs = n.kwargs();
  for (Value& v : args) v.MapRefs(map);
  for (auto& [k, v] : kwargs) v.MapRefs(map);
  if (missing) {
    return absl::InvalidArgumentError(absl::StrCat("copying node \"", n.name(), "\": input \"",
                                                   src.node(missing_id).name(),
                                                   "\" has no copy"));
  }
  absl::StatusOr<NodeId> copy =
      dst->AddNode(n.op(), n.name(), n.target(), std::move(args), std::move(kwargs));
  if (!copy.ok()) return copy;
  Node& c = dst->mutable_node(*copy);
  c.mutable_meta() = n.meta();
  c.mutable_extra() = n.extra();
  c.set_has_kwargs_key(n.has_kwargs_key());
  c.set_has_meta_key(n.has_meta_key());
  return copy;
}

absl::StatusOr<Graph> ExtractSubgraph(const Graph& g, absl::Span<const NodeId> nodes,
                                      std::vector<NodeId>* inputs_out,
                                      std::vector<NodeId>* outputs_out) {
  absl::flat_hash_set<NodeId> chosen;
  for (NodeId id : nodes) {
    if (!g.IsLive(id)) return absl::InvalidArgumentError("ExtractSubgraph: a node is not live");
    if (g.node(id).op() == Op::kOutput) {
      return absl::InvalidArgumentError("ExtractSubgraph: the output node cannot be extracted");
    }
    if (!chosen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("ExtractSubgraph: node \"", g.node(id).name(), "\" listed twice"));
    }
  }
  // Graph order, whatever order the caller gave.
  std::vector<NodeId> ordered;
  ordered.reserve(nodes.size());
  for (NodeId id : g.order()) {
    if (chosen.contains(id)) ordered.push_back(id);
  }
  Graph sub;
  absl::flat_hash_map<NodeId, NodeId> remap;
  std::vector<NodeId> inputs, outputs;
  for (NodeId id : ordered) {
    for (NodeId in : g.node(id).inputs()) {
      if (chosen.contains(in) || remap.contains(in)) continue;
      const Node& src = g.node(in);
      absl::StatusOr<NodeId> ph = sub.AddNode(Op::kPlaceholder, src.name(), src.name());
      if (!ph.ok()) return ph.status();
      if (src.meta().has_shape || src.meta().has_tensor_size || src.meta().has_param) {
        NodeMeta& m = sub.mutable_node(*ph).mutable_meta();
        m = src.meta();
        m.has_device_time = false;  // a placeholder costs nothing
        m.device_time = 0;
        m.has_aliases_input = false;
        m.aliases_input = false;
      }
      remap[in] = *ph;
      inputs.push_back(in);
    }
    absl::StatusOr<NodeId> copy = CopyNode(g, id, remap, &sub);
    if (!copy.ok()) return copy.status();
    remap[id] = *copy;
  }
  for (NodeId id : ordered) {
    for (NodeId u : g.node(id).users()) {
      if (!chosen.contains(u)) {
        outputs.push_back(id);
        break;
      }
    }
  }
  std::vector<Value> rets;
  for (NodeId id : outputs) rets.push_back(Value::Ref(remap[id]));
  Value ret = rets.size() == 1 ? std::move(rets[0]) : Value::List(std::move(rets));
  absl::StatusOr<NodeId> out =
      sub.AddNode(Op::kOutput, sub.UniqueName("output"), "output", {std::move(ret)});
  if (!out.ok()) return out.status();
  // Parameters owned by what was copied (a placeholder input may stand for one too).
  absl::flat_hash_set<std::string> owners;
  for (NodeId id : sub.order()) {
    const Node& n = sub.node(id);
    if (n.op() == Op::kCallModule || n.op() == Op::kGetAttr) owners.insert(n.target());
    if (n.op() == Op::kPlaceholder) owners.insert(n.name());
  }
  for (const Param& p : g.params()) {
    if (owners.contains(p.owner)) {
      absl::Status s = sub.AddParam(p);
      if (!s.ok()) return s;
    }
  }
  if (inputs_out != nullptr) *inputs_out = std::move(inputs);
  if (outputs_out != nullptr) *outputs_out = std::move(outputs);
  return sub;
}

}  // namespace overlap
