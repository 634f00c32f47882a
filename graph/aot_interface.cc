#include "graph/aot_interface.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "graph/status_macros.h"

namespace overlap {

BackwardInputs ReadBackwardInputs(const Graph& backward) {
  BackwardInputs in;
  for (NodeId id : backward.order()) {
    const Node& n = backward.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    in.placeholder[n.name()] = id;
    in.last = id;
    int64_t k = 0;
    if (absl::StartsWith(n.name(), "tangents_") && absl::SimpleAtoi(n.name().substr(9), &k)) {
      in.tangents = std::max(in.tangents, k);
    }
  }
  return in;
}

NodeId ForwardOutputList(const Graph& forward) {
  if (forward.size() == 0) return kNoNode;
  const Node& out = forward.node(forward.last());
  return out.op() == Op::kOutput && !out.args().empty() &&
                 out.args()[0].kind() == Value::Kind::kList
             ? forward.last()
             : kNoNode;
}

std::vector<NodeId> SavedNodes(const Graph& forward, int64_t tangents) {
  std::vector<NodeId> saved;
  const NodeId out_id = ForwardOutputList(forward);
  if (out_id == kNoNode) return saved;
  const std::vector<Value>& items = forward.node(out_id).args()[0].items();
  for (size_t i = static_cast<size_t>(std::max<int64_t>(tangents, 0)); i < items.size(); ++i) {
    if (items[i].is_ref()) saved.push_back(items[i].as_ref());
  }
  return saved;
}

absl::StatusOr<int64_t> DropSavedOutputs(Graph* forward,
                                         const absl::flat_hash_set<std::string>& names,
                                         int64_t tangents) {
  Graph& f = *forward;
  const NodeId out_id = ForwardOutputList(f);
  if (out_id == kNoNode || names.empty()) return 0;
  const Node& out = f.node(out_id);
  const std::vector<Value>& old = out.args()[0].items();
  std::vector<Value> items;
  int64_t dropped = 0;
  for (size_t i = 0; i < old.size(); ++i) {
    if (static_cast<int64_t>(i) >= tangents && old[i].is_ref() &&
        names.contains(f.node(old[i].as_ref()).name())) {
      ++dropped;
      continue;
    }
    items.push_back(old[i]);
  }
  std::vector<Value> args = out.args();
  args[0] = Value::List(std::move(items));
  OVERLAP_RETURN_IF_ERROR(f.SetArgs(out_id, std::move(args), out.kwargs()));
  return dropped;
}

}  // namespace overlap
