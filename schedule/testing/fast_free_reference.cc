#include "schedule/testing/fast_free_reference.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/errors.h"
#include "graph/status_macros.h"
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

// The allgathers in `nodes`.
absl::flat_hash_set<NodeId> GathersIn(const Graph& g, const std::vector<NodeId>& nodes) {
  absl::flat_hash_set<NodeId> s;
  for (NodeId n : nodes) {
    if (IsAllgather(g.node(n))) s.insert(n);
  }
  return s;
}

// The top-level items of the output's args[0] that are nodes and not reduce_grads, with
// duplicates.
std::vector<NodeId> OutputItemsAsDefined(const Graph& g) {
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
  return outputs;
}

using PathSets = absl::flat_hash_map<NodeId, absl::flat_hash_set<NodeId>>;

// The state the rounds share, named as in the reference.
struct Rounds {
  explicit Rounds(const Graph& g) : g(g), last_use(LastUsesAsDefined(g)), done(g.id_bound(), 0) {}

  void Schedule(const std::vector<NodeId>& nodes) {
    for (NodeId n : nodes) {
      scheduled.push_back(n);
      done[n] = 1;
    }
  }

  const Graph& g;
  const std::vector<NodeId> last_use;
  std::vector<NodeId> scheduled;
  std::vector<char> done;
  std::vector<NodeId> pending;  // unscheduled_ags, graph order
  absl::flat_hash_map<int64_t, std::vector<NodeId>> releases;
  std::vector<NodeId> reduces;
  std::vector<NodeId> outputs;
  // The allgathers each target still needs: per pending allgather (for its last use), per
  // reduce_grad, per output item.
  PathSets path, reduce_path, output_path;
};

// Schedules the placeholders and sorts the other nodes into allgathers, releases by ds_id
// and reduce_grads; then the path sets. Unsupported when an allgather has no last use.
absl::Status Start(Rounds& s) {
  const Graph& g = s.g;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() == Op::kPlaceholder) {
      s.Schedule({id});
      continue;
    }
    if (IsAllgather(n)) s.pending.push_back(id);
    if (IsRelease(n) && HasDsId(n)) s.releases[DsId(n)].push_back(id);
    if (IsReduce(n)) s.reduces.push_back(id);
  }
  for (NodeId ag : s.pending) {
    if (s.last_use[ag] == kNoNode) {
      return UnsupportedError(
          absl::StrCat("allgather \"", g.node(ag).name(), "\" has no last use (nobody reads it)"));
    }
    s.path[ag] = GathersIn(g, RequirementsAsDefined(g, s.last_use[ag], s.done));
  }
  for (NodeId r : s.reduces) s.reduce_path[r] = GathersIn(g, RequirementsAsDefined(g, r, s.done));
  s.outputs = OutputItemsAsDefined(g);
  for (NodeId o : s.outputs) s.output_path[o] = GathersIn(g, RequirementsAsDefined(g, o, s.done));
  return absl::OkStatus();
}

// Pending allgather `ag`'s task: its lists and fields against what is scheduled.
Task MakeTask(const Rounds& s, NodeId ag) {
  const Graph& g = s.g;
  Task t;
  t.node = ag;
  t.until_g = RequirementsAsDefined(g, ag, s.done);
  std::vector<char> with = s.done;
  for (NodeId n : t.until_g) with[n] = 1;
  const std::vector<NodeId> free_part = RequirementsAsDefined(g, s.last_use[ag], with);
  for (NodeId n : free_part) {
    t.free_cost += TimeOf(g.node(n));
    if (IsAllgather(g.node(n))) t.free_mem += SizeOf(g.node(n));
  }
  for (NodeId n : t.until_g) {
    if (IsAllgather(g.node(n))) t.gather_mem += SizeOf(g.node(n));
  }
  t.until_free = t.until_g;
  t.until_free.insert(t.until_free.end(), free_part.begin(), free_part.end());
  // Then what each release of its ds_id needs, not already in.
  auto releases = HasDsId(g.node(ag)) ? s.releases.find(DsId(g.node(ag))) : s.releases.end();
  if (releases != s.releases.end()) {
    for (NodeId rel : releases->second) {
      std::vector<char> upto = s.done;
      for (NodeId n : t.until_free) upto[n] = 1;
      for (NodeId d : RequirementsAsDefined(g, rel, upto)) {
        if (std::find(t.until_free.begin(), t.until_free.end(), d) == t.until_free.end()) {
          t.until_free.push_back(d);
        }
      }
    }
  }
  for (NodeId n : t.until_free) t.n_gathers += IsAllgather(g.node(n));
  return t;
}

// The round's candidates: the tasks of the pending allgathers whose path sets are smallest,
// in graph order.
std::vector<Task> RoundTasks(const Rounds& s) {
  std::vector<size_t> counts;
  for (const auto& [ag, set] : s.path) counts.push_back(set.size());
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<Task> tasks;
  for (size_t count : counts) {
    for (NodeId ag : s.pending) {
      if (s.path.at(ag).size() == count) tasks.push_back(MakeTask(s, ag));
    }
    if (!tasks.empty()) break;
  }
  return tasks;
}

// The chosen task: among those freeing no memory when there are any (*zero_free), by
// (n_gathers, gather_mem, free_cost, name); otherwise by free_mem first.
const Task& BestTask(const Graph& g, const std::vector<Task>& tasks, bool* zero_free) {
  const Task* best = nullptr;
  auto name = [&](const Task& t) -> const std::string& { return g.node(t.node).name(); };
  *zero_free = false;
  for (const Task& t : tasks) *zero_free |= t.free_mem == 0;
  for (const Task& t : tasks) {
    if (*zero_free) {
      if (t.free_mem != 0) continue;
      if (best == nullptr ||
          std::forward_as_tuple(t.n_gathers, t.gather_mem, t.free_cost, name(t)) <
              std::forward_as_tuple(best->n_gathers, best->gather_mem, best->free_cost,
                                    name(*best))) {
        best = &t;
      }
    } else if (best == nullptr ||
               std::forward_as_tuple(t.free_mem, t.n_gathers, t.gather_mem, t.free_cost, name(t)) <
                   std::forward_as_tuple(best->free_mem, best->n_gathers, best->gather_mem,
                                         best->free_cost, name(*best))) {
      best = &t;
    }
  }
  return *best;
}

// Takes `chosen` out of each row of `group` (one per node of `list`), then schedules the
// requirements of every row that became empty, in `list`'s order.
void PullEmptied(Rounds& s, PathSets& group, const std::vector<NodeId>& list, NodeId chosen) {
  std::vector<NodeId> now;
  for (NodeId r : list) {
    auto& set = group.at(r);
    if (set.erase(chosen) > 0 && set.empty()) now.push_back(r);
  }
  for (NodeId r : now) s.Schedule(RequirementsAsDefined(s.g, r, s.done));
}

// Schedules the chosen task's list and takes its allgather out of every path set.
void Choose(Rounds& s, const Task& best, bool zero_free) {
  const NodeId chosen = best.node;
  s.Schedule(zero_free ? best.until_free : best.until_g);
  s.pending.erase(std::find(s.pending.begin(), s.pending.end(), chosen));
  s.path.erase(chosen);
  for (auto& [ag, set] : s.path) set.erase(chosen);
  PullEmptied(s, s.reduce_path, s.reduces, chosen);
  PullEmptied(s, s.output_path, s.outputs, chosen);
}

// DeepSpeed 0.19's round end, as its list_schedule.py reads: every allgather the chosen
// list scheduled leaves the pending list and every path set (R2); then every reduce, and
// then every output item, whose path set is empty has its requirements scheduled (R1; one
// already scheduled needs nothing), each group in its order.
void ChooseDeepSpeed019(Rounds& s, const Task& best, bool zero_free) {
  const std::vector<NodeId>& list = zero_free ? best.until_free : best.until_g;
  s.Schedule(list);
  for (NodeId n : list) {
    if (!IsAllgather(s.g.node(n))) continue;
    auto it = std::find(s.pending.begin(), s.pending.end(), n);
    if (it != s.pending.end()) s.pending.erase(it);
    s.path.erase(n);
    for (auto& [ag, set] : s.path) set.erase(n);
    for (auto& [r, set] : s.reduce_path) set.erase(n);
    for (auto& [o, set] : s.output_path) set.erase(n);
  }
  for (const auto* group : {&s.reduces, &s.outputs}) {
    const PathSets& sets = group == &s.reduces ? s.reduce_path : s.output_path;
    std::vector<NodeId> now;
    for (NodeId r : *group) {
      if (sets.at(r).empty()) now.push_back(r);
    }
    for (NodeId r : now) s.Schedule(RequirementsAsDefined(s.g, r, s.done));
  }
}

}  // namespace

absl::StatusOr<std::vector<NodeId>> FastFreeScheduleReference(const Graph& g, bool deepspeed_019) {
  Rounds s(g);
  OVERLAP_RETURN_IF_ERROR(Start(s));
  while (!s.pending.empty()) {
    const std::vector<Task> tasks = RoundTasks(s);
    if (tasks.empty()) return absl::InternalError("fast_free: no runnable allgather");
    bool zero_free = false;
    const Task& best = BestTask(g, tasks, &zero_free);
    if (deepspeed_019) {
      ChooseDeepSpeed019(s, best, zero_free);
    } else {
      Choose(s, best, zero_free);
    }
  }
  for (NodeId id : g.order()) {
    if (!s.done[id]) s.Schedule({id});
  }
  if (!Topological(g, s.scheduled)) {
    return UnsupportedError("fast_free order breaks a dependency through kwargs");
  }
  return std::move(s.scheduled);
}

}  // namespace overlap
