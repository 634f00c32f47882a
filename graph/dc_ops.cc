#include "graph/dc_ops.h"

namespace overlap {

bool IsHostTensor(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op() == Op::kCallFunction &&
      (n.target() == kOffloadTarget || n.target() == kWaitOffloadTarget)) {
    return true;
  }
  if (n.op() != Op::kPlaceholder) return false;
  for (NodeId u : n.users()) {
    const Node& user = g.node(u);
    if (user.op() == Op::kCallFunction && user.target() == kReloadTarget &&
        !user.inputs().empty() && user.inputs()[0] == id) {
      return true;
    }
  }
  return false;
}

}  // namespace overlap
