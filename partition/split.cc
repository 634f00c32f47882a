#include "partition/split.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <queue>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "graph/subgraph.h"

namespace overlap {
namespace {

bool StaysOutside(const Node& n) {
  return n.op() == Op::kPlaceholder || n.op() == Op::kGetAttr || n.op() == Op::kOutput;
}

// An insertion-ordered set of node ids.
struct OrderedSet {
  std::vector<NodeId> items;
  absl::flat_hash_set<NodeId> seen;
  void Add(NodeId id) {
    if (seen.insert(id).second) items.push_back(id);
  }
};

// The outer graph of `out` (whose submodules and call order are set): placeholders and
// get_attrs, then the calls with getitems unpacking tuples, then the output. Reads only the
// submodules' node / input / output lists, so it may run while their graphs are built.
absl::Status BuildOuter(const Graph& g, SplitGraph& out) {
  Graph& outer = out.outer;
  int64_t reserve = 1;  // the output
  for (NodeId id : g.order()) {
    const Op op = g.node(id).op();
    reserve += op == Op::kPlaceholder || op == Op::kGetAttr;
  }
  for (const Submodule& sm : out.submodules) {
    reserve += 1 + (sm.outputs.size() > 1 ? static_cast<int64_t>(sm.outputs.size()) : 0);
  }
  outer.ReserveNodes(reserve);
  if (g.has_name()) outer.set_name(g.name());
  std::vector<NodeId> value(g.id_bound(), kNoNode);  // source value -> outer value
  auto outer_value = [&](NodeId id) { return value[id]; };
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kPlaceholder && n.op() != Op::kGetAttr) continue;
    absl::StatusOr<NodeId> c = CopyNode(g, id, outer_value, &outer);
    OVERLAP_RETURN_IF_ERROR(c.status());
    value[id] = *c;
  }
  int64_t getitems = 0;
  for (int s : out.call_order) {
    const Submodule& sm = out.submodules[s];
    std::vector<Value> args;
    for (NodeId in : sm.inputs) args.push_back(Value::Ref(value[in]));
    absl::StatusOr<NodeId> call =
        outer.AddNode(Op::kCallModule, outer.UniqueName(sm.name), sm.name, std::move(args));
    OVERLAP_RETURN_IF_ERROR(call.status());
    double time = 0;
    for (NodeId id : sm.nodes) time += g.node(id).meta().device_time;
    outer.mutable_node(*call).mutable_meta().set_device_time(time);
    if (sm.outputs.size() == 1) {
      value[sm.outputs[0]] = *call;
      continue;
    }
    for (size_t k = 0; k < sm.outputs.size(); ++k) {
      // FX's names (getitem, getitem_1, ...) from a counter; UniqueName only on a clash.
      std::string name = getitems == 0 ? "getitem" : absl::StrCat("getitem_", getitems);
      ++getitems;
      if (outer.FindNode(name) != kNoNode) name = outer.UniqueName(name);
      absl::StatusOr<NodeId> item =
          outer.AddNode(Op::kCallFunction, std::move(name), "operator.getitem",
                        {Value::Ref(*call), Value::Int(static_cast<int64_t>(k))});
      OVERLAP_RETURN_IF_ERROR(item.status());
      outer.mutable_node(*item).mutable_meta() = DescribeValue(g.node(sm.outputs[k]).meta());
      value[sm.outputs[k]] = *item;
    }
  }
  absl::StatusOr<NodeId> o = CopyNode(g, g.last(), outer_value, &outer);
  OVERLAP_RETURN_IF_ERROR(o.status());
  absl::flat_hash_set<absl::string_view> owners;
  for (NodeId id : outer.order()) {
    const Node& n = outer.node(id);
    if (n.op() == Op::kGetAttr) owners.insert(n.target());
    if (n.op() == Op::kPlaceholder) owners.insert(n.name());
  }
  for (const Param& p : g.params()) {
    if (owners.contains(p.owner)) OVERLAP_RETURN_IF_ERROR(outer.AddParam(p));
  }
  outer.set_has_params_key(true);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SplitGraph> Split(const Graph& g, const std::vector<Bucket>& buckets) {
  const int parts = static_cast<int>(buckets.size());
  std::vector<int> part(g.id_bound(), -1);
  std::vector<std::vector<NodeId>> members(parts);
  for (const Bucket& b : buckets) {
    for (NodeId id : b.nodes) {
      if (!g.IsLive(id)) return absl::InvalidArgumentError("a bucket lists a dead node");
      if (g.node(id).op() == Op::kGetAttr) continue;  // stays in the outer graph
      if (part[id] != -1) {
        return absl::InvalidArgumentError(
            absl::StrCat("node \"", g.node(id).name(), "\" is in two buckets"));
      }
      part[id] = b.index;
    }
  }
  std::vector<OrderedSet> inputs(parts), outputs(parts);
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    const bool is_output = n.op() == Op::kOutput;
    if (!StaysOutside(n)) {
      if (part[id] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("node \"", n.name(), "\" is in no bucket"));
      }
      members[part[id]].push_back(id);
    } else if (!is_output) {
      continue;
    }
    const int used_in = is_output ? -2 : part[id];
    for (NodeId d : n.inputs()) {
      const int defined_in = part[d];
      if (defined_in == used_in) continue;
      if (defined_in >= 0) outputs[defined_in].Add(d);
      if (used_in >= 0) inputs[used_in].Add(d);
    }
  }

  SplitGraph out;
  std::vector<int> sub_of_part(parts, -1);
  for (int p = 0; p < parts; ++p) {
    if (members[p].empty()) continue;  // no subgraph; indices keep their gaps
    Submodule s;
    s.name = absl::StrCat("submod_", p);
    s.partition = p;
    s.nodes = std::move(members[p]);
    s.inputs = std::move(inputs[p].items);
    s.outputs = std::move(outputs[p].items);
    sub_of_part[p] = static_cast<int>(out.submodules.size());
    out.submodules.push_back(std::move(s));
  }
  // Call order: Kahn's algorithm, smallest ready partition first (deterministic).
  const int subs = static_cast<int>(out.submodules.size());
  std::vector<std::vector<int>> consumers(subs);
  std::vector<int> pending(subs, 0);
  for (int s = 0; s < subs; ++s) {
    absl::flat_hash_set<int> deps;
    for (NodeId in : out.submodules[s].inputs) {
      if (part[in] >= 0) deps.insert(sub_of_part[part[in]]);
    }
    pending[s] = static_cast<int>(deps.size());
    for (int d : deps) consumers[d].push_back(s);
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int s = 0; s < subs; ++s) {
    if (pending[s] == 0) ready.push(s);
  }
  while (!ready.empty()) {
    const int s = ready.top();
    ready.pop();
    out.call_order.push_back(s);
    for (int c : consumers[s]) {
      if (--pending[c] == 0) ready.push(c);
    }
  }
  if (static_cast<int>(out.call_order.size()) != subs) {
    return absl::InvalidArgumentError("partitions depend on each other in a cycle");
  }

  // The pieces are independent copies out of a graph nobody writes, and so is the outer
  // graph: build the outer graph on this thread while the other cores build pieces, then
  // help with the pieces that are left (the copies are most of a split's time).
  std::vector<absl::Status> built(out.submodules.size());
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    for (size_t i = next++; i < out.submodules.size(); i = next++) {
      Submodule& s = out.submodules[i];
      absl::StatusOr<Graph> sub = BuildSubgraph(g, s.nodes, s.inputs, s.outputs);
      if (!sub.ok()) {
        built[i] = sub.status();
        continue;
      }
      s.graph = std::move(*sub);
      s.graph.set_name(s.name);
    }
  };
  const size_t threads = std::min<size_t>(
      {std::max(1u, std::thread::hardware_concurrency()), 8, out.submodules.size() / 64 + 1});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  absl::Status outer_built = BuildOuter(g, out);
  worker();
  for (std::thread& t : pool) t.join();
  OVERLAP_RETURN_IF_ERROR(outer_built);
  for (const absl::Status& st : built) OVERLAP_RETURN_IF_ERROR(st);
  return out;
}

absl::StatusOr<Graph> InlineSubmodules(const SplitGraph& split) {
  Graph g;
  const Graph& outer = split.outer;
  if (outer.has_name()) g.set_name(outer.name());
  absl::flat_hash_map<absl::string_view, int> sub_by_name;
  for (size_t i = 0; i < split.submodules.size(); ++i) {
    sub_by_name[split.submodules[i].name] = static_cast<int>(i);
  }
  absl::flat_hash_map<NodeId, NodeId> value;               // outer value -> new value
  absl::flat_hash_map<NodeId, std::vector<NodeId>> tuple;  // outer call -> its outputs
  for (NodeId id : outer.order()) {
    const Node& n = outer.node(id);
    auto sub = n.op() == Op::kCallModule ? sub_by_name.find(n.target()) : sub_by_name.end();
    if (sub != sub_by_name.end()) {
      const Graph& sg = split.submodules[sub->second].graph;
      absl::flat_hash_map<NodeId, NodeId> inner;
      size_t arg = 0;
      for (NodeId sid : sg.order()) {
        const Node& sn = sg.node(sid);
        if (sn.op() == Op::kPlaceholder) {
          if (arg >= n.args().size() || !n.args()[arg].is_ref()) {
            return absl::InvalidArgumentError(absl::StrCat("call \"", n.name(), "\" lacks args"));
          }
          inner[sid] = value.at(n.args()[arg++].as_ref());
        } else if (sn.op() == Op::kOutput) {
          const Value& ret = sn.args()[0];
          std::vector<NodeId> outs;
          if (ret.is_ref()) {
            value[id] = inner.at(ret.as_ref());
          } else {
            for (const Value& v : ret.items()) outs.push_back(inner.at(v.as_ref()));
            tuple[id] = std::move(outs);
          }
        } else {
          absl::StatusOr<NodeId> c = CopyNode(sg, sid, inner, &g);
          OVERLAP_RETURN_IF_ERROR(c.status());
          inner[sid] = *c;
        }
      }
      continue;
    }
    if (n.op() == Op::kCallFunction && n.target() == "operator.getitem" && n.args().size() == 2 &&
        n.args()[0].is_ref() && tuple.contains(n.args()[0].as_ref())) {
      const auto& outs = tuple.at(n.args()[0].as_ref());
      value[id] = outs.at(static_cast<size_t>(n.args()[1].as_int()));
      continue;
    }
    absl::StatusOr<NodeId> c = CopyNode(outer, id, value, &g);
    OVERLAP_RETURN_IF_ERROR(c.status());
    value[id] = *c;
  }
  for (const Param& p : outer.params()) {
    OVERLAP_RETURN_IF_ERROR(g.AddParam(p));
  }
  for (const Submodule& s : split.submodules) {
    for (const Param& p : s.graph.params()) {
      bool listed = false;
      for (int i : g.ParamsOwnedBy(p.owner)) listed |= g.params()[i].name == p.name;
      if (!listed) {
        OVERLAP_RETURN_IF_ERROR(g.AddParam(p));
      }
    }
  }
  return g;
}

bool SameNodesAndEdges(const Graph& a, const Graph& b, std::string* why) {
  auto fail = [&](std::string msg) {
    if (why != nullptr) *why = std::move(msg);
    return false;
  };
  if (a.size() != b.size()) {
    return fail(absl::StrCat("node counts differ: ", a.size(), " vs ", b.size()));
  }
  for (NodeId id : a.order()) {
    const Node& m = a.node(id);
    const NodeId other = b.FindNode(m.name());
    if (other == kNoNode) return fail(absl::StrCat("node \"", m.name(), "\" is missing"));
    const Node& n = b.node(other);
    if (m.op() != n.op() || m.target() != n.target()) {
      return fail(absl::StrCat("node \"", m.name(), "\" differs in op or target"));
    }
    if (m.args().size() != n.args().size() || m.kwargs().size() != n.kwargs().size()) {
      return fail(absl::StrCat("node \"", m.name(), "\" differs in arity"));
    }
    for (size_t i = 0; i < m.args().size(); ++i) {
      if (!SameValue(a, m.args()[i], b, n.args()[i])) {
        return fail(absl::StrCat("node \"", m.name(), "\" differs in args[", i, "]"));
      }
    }
    for (size_t i = 0; i < m.kwargs().size(); ++i) {
      if (m.kwargs()[i].first != n.kwargs()[i].first ||
          !SameValue(a, m.kwargs()[i].second, b, n.kwargs()[i].second)) {
        return fail(absl::StrCat("node \"", m.name(), "\" differs in kwargs"));
      }
    }
  }
  return true;
}

}  // namespace overlap
