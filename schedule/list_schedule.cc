#include "schedule/list_schedule.h"

#include <functional>
#include <queue>
#include <tuple>

#include "graph/status_macros.h"
#include "schedule/analysis.h"
#include "schedule/zero3_ops.h"

namespace overlap {

absl::StatusOr<std::vector<NodeId>> ListSchedule(const Graph& g) {
  std::vector<int64_t> position(g.id_bound(), 0);
  std::vector<int> waiting(g.id_bound(), 0);
  std::vector<std::vector<NodeId>> dependents(g.id_bound());
  int64_t i = 0;
  for (NodeId id : g.order()) {
    position[id] = i++;
    const std::vector<NodeId> deps = BaselineDependencies(g, id);
    waiting[id] = static_cast<int>(deps.size());
    for (NodeId d : deps) dependents[d].push_back(id);
  }
  auto delta = [&](NodeId id) -> int64_t {
    const Node& n = g.node(id);
    if (IsAllgather(n)) return SizeOf(n);
    if (IsRelease(n) || IsReduce(n)) return -SizeOf(n);
    return int64_t{0};
  };
  using Entry = std::tuple<int64_t, int64_t, NodeId>;  // (delta, graph position, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
  std::vector<NodeId> order;
  order.reserve(g.size());
  auto release = [&](NodeId id) {
    for (NodeId u : dependents[id]) {
      if (--waiting[u] == 0) ready.push({delta(u), position[u], u});
    }
  };
  std::vector<NodeId> initial;
  for (NodeId id : g.order()) {
    if (waiting[id] == 0) initial.push_back(id);
  }
  for (NodeId id : initial) order.push_back(id);  // no dependencies: scheduled first
  for (NodeId id : initial) release(id);
  while (!ready.empty()) {
    const NodeId id = std::get<2>(ready.top());
    ready.pop();
    order.push_back(id);
    release(id);
  }
  OVERLAP_RETURN_IF_ERROR(CheckBaselineOrder(g, order, "list"));
  return order;
}

}  // namespace overlap
