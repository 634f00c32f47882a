#include "schedule/list_schedule.h"

#include <functional>
#include <queue>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "schedule/fast_free_reference.h"
#include "schedule/zero3_insertion.h"

namespace overlap {

std::vector<NodeId> BaselineDependencies(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<NodeId> deps;
  const bool dc = n.op() == Op::kCallFunction && absl::StartsWith(n.target(), "dc.");
  if (dc) {
    if (!n.args().empty()) {
      n.args()[0].ForEachRef([&](NodeId in) {
        if (std::find(deps.begin(), deps.end(), in) == deps.end()) deps.push_back(in);
      });
    }
    return deps;
  }
  absl::Span<const NodeId> args = n.arg_inputs();
  return std::vector<NodeId>(args.begin(), args.end());
}

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
    const int64_t size = n.meta().has_tensor_size ? n.meta().tensor_size : 0;
    if (n.op() != Op::kCallFunction) return 0;
    if (n.target() == kAllgatherTarget) return size;
    if (n.target() == kReleaseTarget || n.target() == kReduceTarget) return -size;
    return 0;
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
  if (absl::Status s = CheckTopologicalPermutation(g, order); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "list order breaks a dependency (the baselines follow args only): ", s.message()));
  }
  return order;
}

}  // namespace overlap
