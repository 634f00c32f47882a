#include "schedule/testing/fast_free_reference.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/errors.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// One candidate of a round (AllgatherTask in the reference).
struct Task {
  NodeId node;
  double free_cost = 0;
  int64_t gather_mem = 0;
  int64_t free_mem = 0;
  int64_t n_gathers = 0;
  std::vector<NodeId> until_g;
  std::vector<NodeId> until_free;
};

// last_use[n], as defined: the latest (in graph order) effective reader of n, where a
// view with readers hands n on to its own effective readers. Found per node by a walk
// through views (quadratic at worst: an oracle, not the analysis it checks).
std::vector<NodeId> LastUsesAsDefined(const Graph& g) {
  std::vector<int64_t> position(g.id_bound(), -1);
  int64_t i = 0;
  for (NodeId id : g.order()) position[id] = i++;
  std::vector<NodeId> last(g.id_bound(), kNoNode);
  for (NodeId id : g.order()) {
    std::vector<NodeId> stack = {id};
    absl::flat_hash_set<NodeId> seen;
    while (!stack.empty()) {
      const NodeId v = stack.back();
      stack.pop_back();
      for (NodeId u : g.node(v).users()) {
        if (IsView(g.node(u)) && !g.node(u).users().empty()) {
          if (seen.insert(u).second) stack.push_back(u);
          continue;
        }
        if (last[id] == kNoNode || position[u] > position[last[id]]) last[id] = u;
      }
    }
  }
  return last;
}

// requirements(target, done): what `target` needs that is not done, itself included,
// depth-first post-order over args only.
std::vector<NodeId> RequirementsAsDefined(const Graph& g, NodeId target,
                                          const std::vector<char>& done) {
  std::vector<NodeId> out;
  if (done[target]) return out;
  absl::flat_hash_set<NodeId> visited;
  struct Frame {
    NodeId node;
    size_t next;
  };
  std::vector<Frame> stack;
  visited.insert(target);
  stack.push_back({target, 0});
  while (!stack.empty()) {
    Frame& f = stack.back();
    absl::Span<const NodeId> args = g.node(f.node).arg_inputs();
    if (f.next == args.size()) {
      out.push_back(f.node);
      stack.pop_back();
      continue;
    }
    const NodeId in = args[f.next++];
    if (done[in] || !visited.insert(in).second) continue;
    stack.push_back({in, 0});
  }
  return out;
}

// Whether every node of `order` comes after all its inputs (args and kwargs).
bool Topological(const Graph& g, const std::vector<NodeId>& order) {
  absl::flat_hash_set<NodeId> placed;
  for (NodeId id : order) {
    for (NodeId in : g.node(id).inputs()) {
      if (!placed.contains(in)) return false;
    }
    placed.insert(id);
  }
  return static_cast<int64_t>(placed.size()) == g.size();
}

}  // namespace

absl::StatusOr<std::vector<NodeId>> FastFreeScheduleReference(const Graph& g) {
  const std::vector<NodeId> last_use = LastUsesAsDefined(g);
  std::vector<NodeId> scheduled;
  std::vector<char> done(g.id_bound(), 0);
  auto schedule = [&](const std::vector<NodeId>& nodes) {
    for (NodeId n : nodes) {
      scheduled.push_back(n);
      done[n] = 1;
    }
  };
  std::vector<NodeId> pending;  // unscheduled_ags, graph order
  absl::flat_hash_map<int64_t, std::vector<NodeId>> releases;
  std::vector<NodeId> reduces;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() == Op::kPlaceholder) {
      scheduled.push_back(id);
      done[id] = 1;
      continue;
    }
    if (IsAllgather(n)) pending.push_back(id);
    if (IsRelease(n) && HasDsId(n)) releases[DsId(n)].push_back(id);
    if (IsReduce(n)) reduces.push_back(id);
  }
  auto gathers_in = [&](const std::vector<NodeId>& nodes) {
    absl::flat_hash_set<NodeId> s;
    for (NodeId n : nodes) {
      if (IsAllgather(g.node(n))) s.insert(n);
    }
    return s;
  };
  absl::flat_hash_map<NodeId, absl::flat_hash_set<NodeId>> path;
  for (NodeId ag : pending) {
    if (last_use[ag] == kNoNode) {
      return UnsupportedError(
          absl::StrCat("allgather \"", g.node(ag).name(), "\" has no last use (nobody reads it)"));
    }
    path[ag] = gathers_in(RequirementsAsDefined(g, last_use[ag], done));
  }
  absl::flat_hash_map<NodeId, absl::flat_hash_set<NodeId>> reduce_path;
  for (NodeId r : reduces) reduce_path[r] = gathers_in(RequirementsAsDefined(g, r, done));
  // Top-level items of the output's args[0] that are nodes and not reduce_grad.
  std::vector<NodeId> outputs;
  const Node& out = g.node(g.last());
  if (out.op() == Op::kOutput && !out.args().empty()) {
    const Value& ret = out.args()[0];
    std::vector<const Value*> items;
    if (ret.kind() == Value::Kind::kList) {
      for (const Value& v : ret.items()) items.push_back(&v);
    } else {
      items.push_back(&ret);
    }
    for (const Value* v : items) {
      if (v->is_ref() && g.node(v->as_ref()).target() != kReduceTarget)
        outputs.push_back(v->as_ref());
    }
  }
  absl::flat_hash_map<NodeId, absl::flat_hash_set<NodeId>> output_path;
  for (NodeId o : outputs) output_path[o] = gathers_in(RequirementsAsDefined(g, o, done));

  while (!pending.empty()) {
    std::vector<size_t> counts;
    for (const auto& [ag, s] : path) counts.push_back(s.size());
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    std::vector<Task> tasks;
    for (size_t count : counts) {
      for (NodeId ag : pending) {
        if (path.at(ag).size() != count) continue;
        Task t;
        t.node = ag;
        t.until_g = RequirementsAsDefined(g, ag, done);
        std::vector<char> with = done;
        for (NodeId n : t.until_g) with[n] = 1;
        const std::vector<NodeId> free_part = RequirementsAsDefined(g, last_use[ag], with);
        for (NodeId n : free_part) {
          t.free_cost += TimeOf(g.node(n));
          if (IsAllgather(g.node(n))) t.free_mem += SizeOf(g.node(n));
        }
        for (NodeId n : t.until_g) {
          if (IsAllgather(g.node(n))) t.gather_mem += SizeOf(g.node(n));
        }
        t.until_free = t.until_g;
        t.until_free.insert(t.until_free.end(), free_part.begin(), free_part.end());
        if (HasDsId(g.node(ag))) {
          for (NodeId rel : releases[DsId(g.node(ag))]) {
            std::vector<char> upto = done;
            for (NodeId n : t.until_free) upto[n] = 1;
            for (NodeId d : RequirementsAsDefined(g, rel, upto)) {
              if (std::find(t.until_free.begin(), t.until_free.end(), d) == t.until_free.end()) {
                t.until_free.push_back(d);
              }
            }
          }
        }
        for (NodeId n : t.until_free) t.n_gathers += IsAllgather(g.node(n));
        tasks.push_back(std::move(t));
      }
      if (!tasks.empty()) break;
    }
    if (tasks.empty()) return absl::InternalError("fast_free: no runnable allgather");
    const Task* best = nullptr;
    auto name = [&](const Task& t) -> const std::string& { return g.node(t.node).name(); };
    bool zero_free = false;
    for (const Task& t : tasks) zero_free |= t.free_mem == 0;
    for (const Task& t : tasks) {
      if (zero_free) {
        if (t.free_mem != 0) continue;
        if (best == nullptr ||
            std::forward_as_tuple(t.n_gathers, t.gather_mem, t.free_cost, name(t)) <
                std::forward_as_tuple(best->n_gathers, best->gather_mem, best->free_cost,
                                      name(*best))) {
          best = &t;
        }
      } else if (best == nullptr ||
                 std::forward_as_tuple(t.free_mem, t.n_gathers, t.gather_mem, t.free_cost,
                                       name(t)) <
                     std::forward_as_tuple(best->free_mem, best->n_gathers, best->gather_mem,
                                           best->free_cost, name(*best))) {
        best = &t;
      }
    }
    const NodeId chosen = best->node;
    schedule(zero_free ? best->until_free : best->until_g);
    pending.erase(std::find(pending.begin(), pending.end(), chosen));
    path.erase(chosen);
    for (auto& [ag, s] : path) s.erase(chosen);
    for (const auto& [group, list] :
         {std::pair<decltype(&reduce_path), const std::vector<NodeId>*>{&reduce_path, &reduces},
          {&output_path, &outputs}}) {
      std::vector<NodeId> now;
      for (NodeId r : *list) {
        auto& s = group->at(r);
        if (s.erase(chosen) > 0 && s.empty()) now.push_back(r);
      }
      for (NodeId r : now) schedule(RequirementsAsDefined(g, r, done));
    }
  }
  for (NodeId id : g.order()) {
    if (!done[id]) {
      scheduled.push_back(id);
      done[id] = 1;
    }
  }
  if (!Topological(g, scheduled)) {
    return UnsupportedError("fast_free order breaks a dependency through kwargs");
  }
  return scheduled;
}

}  // namespace overlap
