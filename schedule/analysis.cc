#include "schedule/analysis.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "graph/errors.h"
#include "schedule/zero3_ops.h"

namespace overlap {

std::vector<NodeId> LastUses(const Graph& g, LastUseRule rule) {
  std::vector<int64_t> position(g.id_bound(), -1);
  int64_t i = 0;
  for (NodeId id : g.order()) position[id] = i++;
  const bool releases_pass = rule == LastUseRule::kViewsAndReleases;
  std::vector<NodeId> last(g.id_bound(), kNoNode);
  for (NodeId id = g.last(); id != kNoNode; id = g.prev(id)) {
    NodeId best = kNoNode;
    for (NodeId u : g.node(id).users()) {
      const Node& user = g.node(u);
      const bool through = IsView(user) || (releases_pass && IsRelease(user));
      const NodeId eff = through && !user.users().empty() ? last[u] : u;
      if (eff != kNoNode && (best == kNoNode || position[eff] > position[best])) best = eff;
    }
    last[id] = best;
  }
  return last;
}

std::vector<NodeId> Requirements(const Graph& g, NodeId target, const std::vector<char>& done) {
  std::vector<NodeId> out;
  RequirementSearch(g).Collect(
      target, [&](NodeId id) { return done[id] != 0; }, &out);
  return out;
}

absl::Status CheckTopologicalPermutation(const Graph& g, absl::Span<const NodeId> order) {
  if (static_cast<int64_t>(order.size()) != g.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the order has ", order.size(), " nodes, the graph ", g.size()));
  }
  std::vector<char> placed(g.id_bound(), 0);
  for (NodeId id : order) {
    if (!g.IsLive(id) || placed[id]) {
      return absl::InvalidArgumentError("the order is not a permutation of the graph's nodes");
    }
    for (NodeId in : g.node(id).inputs()) {
      if (!placed[in]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node \"", g.node(id).name(), "\" comes before its input \"", g.node(in).name(), "\""));
      }
    }
    placed[id] = 1;
  }
  return absl::OkStatus();
}

absl::Status CheckBaselineOrder(const Graph& g, absl::Span<const NodeId> order,
                                absl::string_view scheduler) {
  absl::Status s = CheckTopologicalPermutation(g, order);
  if (s.ok()) return s;
  return UnsupportedError(absl::StrCat(scheduler,
                                       " order breaks a dependency (the DeepCompile baselines "
                                       "follow args only, so a kwargs dependency can be missed): ",
                                       s.message()));
}

std::vector<NodeId> FastFreeOutputItems(const Graph& g) {
  std::vector<NodeId> out;
  if (g.size() == 0) return out;
  const Node& node = g.node(g.last());
  if (node.op() != Op::kOutput || node.args().empty()) return out;
  const Value& ret = node.args()[0];
  auto take = [&](const Value& v) {
    if (v.is_ref() && !IsReduce(g.node(v.as_ref()))) out.push_back(v.as_ref());
  };
  if (ret.kind() == Value::Kind::kList) {
    for (const Value& v : ret.items()) take(v);
  } else {
    take(ret);
  }
  return out;
}

std::vector<NodeId> BaselineDependencies(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<NodeId> deps;
  if (IsZero3Op(n)) {
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

}  // namespace overlap
