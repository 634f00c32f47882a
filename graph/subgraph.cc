#include "graph/subgraph.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

NodeMeta DescribeValue(const NodeMeta& producer) {
  NodeMeta m = producer;
  m.has_device_time = false;
  m.device_time = 0;
  m.has_aliases_input = false;
  m.aliases_input = false;
  m.has_grad_of = false;
  m.grad_of.clear();
  return m;
}

absl::StatusOr<NodeId> CopyNode(const Graph& src, NodeId id,
                                const absl::flat_hash_map<NodeId, NodeId>& remap, Graph* dst) {
  return CopyNode(
      src, id,
      [&](NodeId in) {
        auto it = remap.find(in);
        return it == remap.end() ? kNoNode : it->second;
      },
      dst);
}

absl::StatusOr<NodeId> CopyNode(const Graph& src, NodeId id,
                                absl::FunctionRef<NodeId(NodeId)> remap, Graph* dst) {
  const Node& n = src.node(id);
  bool missing = false;
  NodeId missing_id = kNoNode;
  auto map = [&](NodeId in) {
    const NodeId to = remap(in);
    if (to == kNoNode) {
      missing = true;
      missing_id = in;
      return in;
    }
    return to;
  };
  std::vector<Value> args = n.args();
  ValueDict kwargs = n.kwargs();
  for (Value& v : args) v.MapRefs(map);
  for (auto& [k, v] : kwargs) v.MapRefs(map);
  if (missing) {
    return absl::InvalidArgumentError(absl::StrCat("copying node \"", n.name(), "\": input \"",
                                                   src.node(missing_id).name(), "\" has no copy"));
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
  std::vector<NodeId> inputs, outputs;
  absl::flat_hash_set<NodeId> seen_input;
  for (NodeId id : ordered) {
    for (NodeId in : g.node(id).inputs()) {
      if (!chosen.contains(in) && seen_input.insert(in).second) inputs.push_back(in);
    }
  }
  for (NodeId id : ordered) {
    for (NodeId u : g.node(id).users()) {
      if (!chosen.contains(u)) {
        outputs.push_back(id);
        break;
      }
    }
  }
  absl::StatusOr<Graph> sub = BuildSubgraph(g, ordered, inputs, outputs);
  if (!sub.ok()) return sub;
  if (inputs_out != nullptr) *inputs_out = std::move(inputs);
  if (outputs_out != nullptr) *outputs_out = std::move(outputs);
  return sub;
}

absl::StatusOr<Graph> BuildSubgraph(const Graph& g, absl::Span<const NodeId> nodes,
                                    absl::Span<const NodeId> inputs,
                                    absl::Span<const NodeId> outputs) {
  Graph sub;
  sub.ReserveNodes(static_cast<int64_t>(nodes.size() + inputs.size()) + 1);
  // Source id -> copy, in an id-indexed vector kept per thread and reset after use: a hash
  // map per piece costs more than the copies when a graph splits into thousands of pieces.
  thread_local std::vector<NodeId> remap;
  if (remap.size() < static_cast<size_t>(g.id_bound())) remap.resize(g.id_bound(), kNoNode);
  struct Reset {
    absl::Span<const NodeId> a, b;
    ~Reset() {
      for (NodeId id : a) remap[id] = kNoNode;
      for (NodeId id : b) remap[id] = kNoNode;
    }
  } reset{inputs, nodes};
  auto lookup = [&](NodeId in) {
    return in >= 0 && static_cast<size_t>(in) < remap.size() ? remap[in] : kNoNode;
  };
  for (NodeId in : inputs) {
    const Node& src = g.node(in);
    absl::StatusOr<NodeId> ph = sub.AddNode(Op::kPlaceholder, src.name(), src.name());
    OVERLAP_RETURN_IF_ERROR(ph.status());
    if (!src.meta().empty()) sub.mutable_node(*ph).mutable_meta() = DescribeValue(src.meta());
    remap[in] = *ph;
  }
  for (NodeId id : nodes) {
    absl::StatusOr<NodeId> copy = CopyNode(g, id, lookup, &sub);
    OVERLAP_RETURN_IF_ERROR(copy.status());
    remap[id] = *copy;
  }
  std::vector<Value> rets;
  for (NodeId id : outputs) {
    const NodeId to = lookup(id);
    if (to == kNoNode) {
      return absl::InvalidArgumentError(absl::StrCat("BuildSubgraph: output \"", g.node(id).name(),
                                                     "\" is not among the copied nodes"));
    }
    rets.push_back(Value::Ref(to));
  }
  Value ret = rets.size() == 1 ? std::move(rets[0]) : Value::List(std::move(rets));
  absl::StatusOr<NodeId> out =
      sub.AddNode(Op::kOutput, sub.UniqueName("output"), "output", {std::move(ret)});
  OVERLAP_RETURN_IF_ERROR(out.status());
  // Parameters owned by what was copied (a placeholder input may stand for one too).
  absl::flat_hash_set<absl::string_view> owners;
  for (NodeId id : sub.order()) {
    const Node& n = sub.node(id);
    if (n.op() == Op::kCallModule || n.op() == Op::kGetAttr) owners.insert(n.target());
    if (n.op() == Op::kPlaceholder) owners.insert(n.name());
  }
  // Through the owner index, in table order: scanning the whole table per subgraph would
  // make splitting a graph into many pieces quadratic.
  std::vector<int> owned;
  for (absl::string_view owner : owners) {
    for (int i : g.ParamsOwnedBy(owner)) owned.push_back(i);
  }
  // And the rows its nodes name (a backward piece's gradients, meta.grad_of): a row whose
  // owner is not in the piece is an absent row of a lifted graph (graph.h, ClassifyParams).
  for (NodeId id : sub.order()) {
    const NodeMeta& m = sub.node(id).meta();
    for (const auto& [has, name] :
         {std::pair{m.has_grad_of, &m.grad_of}, std::pair{m.has_param, &m.param}}) {
      if (!has) continue;
      const int i = g.FindParam(*name);
      if (i >= 0) owned.push_back(i);
    }
  }
  std::sort(owned.begin(), owned.end());
  owned.erase(std::unique(owned.begin(), owned.end()), owned.end());
  for (int i : owned) OVERLAP_RETURN_IF_ERROR(sub.AddParam(g.params()[i]));
  sub.set_has_params_key(true);
  return sub;
}

}  // namespace overlap
