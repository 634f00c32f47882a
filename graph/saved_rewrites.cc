#include "graph/saved_rewrites.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/aot_interface.h"
#include "graph/dc_ops.h"
#include "graph/status_macros.h"
#include "graph/subgraph.h"
#include "graph/value_bytes.h"

namespace overlap {
namespace {

bool IsReleaseNode(const Node& n) {
  return n.op() == Op::kCallFunction && n.target() == kReleaseTarget;
}

// Through ZeRO-3 releases (which hand their first input on: an ordering token) to the value.
NodeId ThroughReleases(const Graph& f, NodeId id) {
  while (IsReleaseNode(f.node(id)) && !f.node(id).inputs().empty()) id = f.node(id).inputs()[0];
  return id;
}

// Whether a forward node may run again in the backward: a call_function that is not a ZeRO-3
// dc.* op nor random.
bool Pure(const Node& n) {
  if (n.op() != Op::kCallFunction || absl::StartsWith(n.target(), kZero3Prefix)) return false;
  for (absl::string_view random : {"rand", "dropout", "bernoulli", "normal", "uniform"}) {
    if (absl::StrContains(n.target(), random)) return false;
  }
  return true;
}

// The node owning a value's storage: through releases, views and tuple elements.
NodeId StorageRoot(const Graph& f, NodeId id) {
  while (true) {
    id = ThroughReleases(f, id);
    const Node& n = f.node(id);
    if (n.inputs().empty() || !(SharesInputStorage(n) || n.target() == "operator.getitem")) {
      return id;
    }
    id = n.inputs()[0];
  }
}

constexpr size_t kMaxRecomputeChain = 24;

// Saved values grouped by the storage they live in: recomputing frees the storage only when
// every saved value in it goes. In the forward's output order.
struct SavedGroup {
  NodeId root = kNoNode;
  std::vector<NodeId> members;  // saved forward nodes (as the output list names them)
};
std::vector<SavedGroup> SavedGroups(const Graph& f, const BackwardInputs& in) {
  std::vector<SavedGroup> groups;
  absl::flat_hash_map<NodeId, size_t> index;
  absl::flat_hash_set<NodeId> seen;
  for (NodeId s : SavedNodes(f, in.tangents)) {
    if (!seen.insert(s).second || !in.placeholder.contains(f.node(s).name())) continue;
    const NodeId root = StorageRoot(f, s);
    auto [it, fresh] = index.emplace(root, groups.size());
    if (fresh) groups.push_back({root, {}});
    groups[it->second].members.push_back(s);
  }
  return groups;
}

// The group holding the saved forward value called `name`, nullopt when none does (no such
// node, or not saved). O(saved values).
std::optional<SavedGroup> NamedGroup(const Graph& f, const BackwardInputs& in,
                                     const std::string& name) {
  const NodeId named = f.FindNode(name);
  if (named == kNoNode) return std::nullopt;
  for (SavedGroup& g : SavedGroups(f, in)) {
    if (std::find(g.members.begin(), g.members.end(), named) != g.members.end()) return g;
  }
  return std::nullopt;
}

// One candidate per saved group of the pair for which make(group, in) returns one, in the
// forward's output order.
template <typename Candidate, typename Make>
std::vector<Candidate> CandidatesOf(const Graph& forward, const Graph& backward, Make&& make) {
  const BackwardInputs in = ReadBackwardInputs(backward);
  std::vector<Candidate> out;
  for (const SavedGroup& g : SavedGroups(forward, in)) {
    std::optional<Candidate> c = make(g, in);
    if (c) out.push_back(*std::move(c));
  }
  return out;
}

// Where a copy back goes in the backward: before the first of `readers` in program order,
// else at the end.
InsertPoint BeforeFirstReader(const Graph& b, const absl::flat_hash_set<NodeId>& readers) {
  for (NodeId id : b.order()) {
    if (readers.contains(id)) return InsertPoint::Before(id);
  }
  return InsertPoint::End();
}

// The forward nodes the backward runs to make a group's saved values again, in forward order:
// each member (through releases) and what it reads that the backward does not hold,
// transitively, up to kMaxRecomputeChain nodes (releases pass through, not copied). Empty
// when the group cannot be recomputed: its root holds no bytes, or the chain reaches a node
// that is not pure (a parameter's allgather, a placeholder). A member's placeholder does not
// count as held: the group's placeholders all go.
std::vector<NodeId> GroupChain(const Graph& f, const SavedGroup& g,
                               const absl::flat_hash_map<std::string, NodeId>& placeholder) {
  const Node& root = f.node(g.root);
  if (!Pure(root) || VerifiedValueBytes(root) <= 0) return {};
  absl::flat_hash_set<std::string> members;
  for (NodeId m : g.members) members.insert(f.node(m).name());
  auto held = [&](NodeId x) {
    const std::string& name = f.node(x).name();
    return placeholder.contains(name) && !members.contains(name);
  };
  absl::flat_hash_set<NodeId> chain;
  std::vector<NodeId> stack;
  auto need = [&](NodeId x) {
    x = ThroughReleases(f, x);
    if (chain.contains(x) || held(x)) return true;
    if (!Pure(f.node(x)) || chain.size() >= kMaxRecomputeChain) return false;
    chain.insert(x);
    stack.push_back(x);
    return true;
  };
  for (NodeId m : g.members) {
    if (!need(m)) return {};
  }
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    for (NodeId in : f.node(x).inputs()) {
      if (!need(in)) return {};
    }
  }
  std::vector<NodeId> ordered;
  for (NodeId id : f.order()) {
    if (chain.contains(id)) ordered.push_back(id);
  }
  return ordered;
}

}  // namespace

std::vector<RecomputeCandidate> RecomputeCandidates(const Graph& forward, const Graph& backward) {
  return CandidatesOf<RecomputeCandidate>(
      forward, backward,
      [&](const SavedGroup& g, const BackwardInputs& in) -> std::optional<RecomputeCandidate> {
        const std::vector<NodeId> chain = GroupChain(forward, g, in.placeholder);
        if (chain.empty()) return std::nullopt;
        double seconds = 0;
        for (NodeId x : chain) seconds += forward.node(x).meta().device_time;
        return RecomputeCandidate{forward.node(g.members.front()).name(),
                                  VerifiedValueBytes(forward.node(g.root)), seconds};
      });
}

absl::StatusOr<int64_t> RecomputeSaved(Graph* forward, Graph* backward,
                                       absl::Span<const std::string> names) {
  Graph& f = *forward;
  Graph& b = *backward;
  int64_t done = 0;
  for (const std::string& name : names) {
    const BackwardInputs in = ReadBackwardInputs(b);
    const std::optional<SavedGroup> group = NamedGroup(f, in, name);
    if (!group) continue;
    const std::vector<NodeId> chain = GroupChain(f, *group, in.placeholder);
    if (chain.empty()) continue;
    // Where the copies go: before the first reader of any of the group's placeholders.
    absl::flat_hash_set<NodeId> readers;
    for (NodeId m : group->members) {
      const Node& p = b.node(in.placeholder.at(f.node(m).name()));
      readers.insert(p.users().begin(), p.users().end());
    }
    const InsertPoint at = BeforeFirstReader(b, readers);
    // Each chain node's arguments, its references now to the backward's placeholders or to
    // the copies made before it (releases passed through).
    absl::flat_hash_set<std::string> member_names;
    for (NodeId m : group->members) member_names.insert(f.node(m).name());
    absl::flat_hash_map<NodeId, NodeId> copy_of;
    auto map = [&](NodeId x) {
      x = ThroughReleases(f, x);
      auto c = copy_of.find(x);
      return c != copy_of.end() ? c->second : in.placeholder.at(f.node(x).name());
    };
    for (NodeId x : chain) {
      const Node& n = f.node(x);
      std::vector<Value> args = n.args();
      for (Value& v : args) v.MapRefs(map);
      ValueDict kwargs = n.kwargs();
      for (auto& kv : kwargs) kv.second.MapRefs(map);
      NodeMeta meta = n.meta();
      meta.has_param = false;
      meta.param.clear();
      // A node two groups' chains share is copied for each (each copy before its readers).
      std::string copy_name = absl::StrCat(n.name(), "__recomputed");
      for (int k = 2; b.FindNode(copy_name) != kNoNode; ++k) {
        copy_name = absl::StrCat(n.name(), "__recomputed_", k);
      }
      OVERLAP_ASSIGN_OR_RETURN(const NodeId copy,
                               b.AddNode(Op::kCallFunction, std::move(copy_name), n.target(),
                                         std::move(args), std::move(kwargs), at));
      b.mutable_node(copy).mutable_meta() = std::move(meta);
      copy_of[x] = copy;
    }
    for (NodeId m : group->members) {
      const NodeId old_id = in.placeholder.at(f.node(m).name());
      b.ReplaceAllUsesWith(old_id, map(m));
      OVERLAP_RETURN_IF_ERROR(b.Erase(old_id));
    }
    OVERLAP_RETURN_IF_ERROR(DropSavedOutputs(&f, member_names, in.tangents).status());
    ++done;
  }
  return done;
}

namespace {

// Whether a forward placeholder is an input (data, not a parameter): no meta.param, no
// parameter-table row, not gathered.
bool IsInputPlaceholder(const Graph& f, const Node& n) {
  if (n.op() != Op::kPlaceholder || n.meta().has_param || !f.ParamsOwnedBy(n.name()).empty()) {
    return false;
  }
  for (NodeId u : n.users()) {
    if (absl::StartsWith(f.node(u).target(), "dc.allgather")) return false;
  }
  return true;
}

// Whether a saved group can live in host memory between the graphs (OffloadCandidate).
bool Offloadable(const Graph& f, const SavedGroup& g) {
  const Node& root = f.node(g.root);
  const bool made =
      root.op() == Op::kCallFunction && !absl::StartsWith(root.target(), kZero3Prefix);
  if (!(made || IsInputPlaceholder(f, root)) || VerifiedValueBytes(root) <= 0) {
    return false;
  }
  for (NodeId m : g.members) {
    const Node& n = f.node(m);
    if (VerifiedValueBytes(n) <= 0) return false;
  }
  return true;
}

// A value's metadata for a copy of it made by a host-memory op: the value as another node
// describes it (DescribeValue: shape, dtype, size; no time, aliasing or gradient role of its
// producer's), and no parameter (a copy is not the parameter's storage).
NodeMeta CopyMeta(const NodeMeta& meta) {
  NodeMeta m = DescribeValue(meta);
  m.has_param = false;
  m.param.clear();
  return m;
}

// The largest host-op id in a graph, -1 when it has none.
int64_t LargestHostId(const Graph& g) {
  int64_t largest = -1;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kCallFunction || !IsHostMemoryTarget(n.target())) continue;
    if (n.args().size() > kDsIdArg && n.args()[kDsIdArg].kind() == Value::Kind::kInt) {
      largest = std::max(largest, n.args()[kDsIdArg].as_int());
    }
  }
  return largest;
}

// A fresh node name from `base`.
std::string FreshName(const Graph& a, const Graph& b, const std::string& base) {
  std::string name = base;
  for (int k = 2; a.FindNode(name) != kNoNode || b.FindNode(name) != kNoNode; ++k) {
    name = absl::StrCat(base, "_", k);
  }
  return name;
}

}  // namespace

std::vector<OffloadCandidate> OffloadCandidates(const Graph& forward, const Graph& backward) {
  return CandidatesOf<OffloadCandidate>(
      forward, backward,
      [&](const SavedGroup& g, const BackwardInputs&) -> std::optional<OffloadCandidate> {
        if (!Offloadable(forward, g)) return std::nullopt;
        int64_t copy = 0;
        for (NodeId m : g.members) copy += VerifiedValueBytes(forward.node(m));
        return OffloadCandidate{forward.node(g.members.front()).name(),
                                VerifiedValueBytes(forward.node(g.root)), copy};
      });
}

absl::StatusOr<int64_t> OffloadSaved(Graph* forward, Graph* backward,
                                     absl::Span<const std::string> names) {
  Graph& f = *forward;
  Graph& b = *backward;
  int64_t next_id = std::max(LargestHostId(f), LargestHostId(b)) + 1;
  int64_t done = 0;
  for (const std::string& name : names) {
    const BackwardInputs in = ReadBackwardInputs(b);
    const std::optional<SavedGroup> group = NamedGroup(f, in, name);
    if (!group || !Offloadable(f, *group)) continue;
    const NodeId out_id = ForwardOutputList(f);
    if (out_id == kNoNode) continue;
    for (NodeId m : group->members) {
      const std::string value = f.node(m).name();  // a copy: adding nodes moves them
      const std::string host = FreshName(f, b, absl::StrCat(value, "__host"));
      const int64_t id = next_id++;
      // The forward: the copy right after the value, returned in its place.
      OVERLAP_ASSIGN_OR_RETURN(
          const NodeId h,
          f.AddNode(Op::kCallFunction, host, std::string(kOffloadTarget),
                    {Value::Ref(m), Value::Int(0), Value::Int(id)}, {}, InsertPoint::After(m)));
      f.mutable_node(h).mutable_meta() = CopyMeta(f.node(m).meta());
      // Its wait, which a schedule may move up to hold compute for the copy (host_copies.h).
      OVERLAP_RETURN_IF_ERROR(
          f.AddNode(Op::kCallFunction, FreshName(f, b, absl::StrCat(value, "__offloaded")),
                    std::string(kWaitOffloadTarget), {Value::Ref(h), Value::Int(0), Value::Int(id)},
                    {}, InsertPoint::Before(out_id))
              .status());
      std::vector<Value> items = f.node(out_id).args()[0].items();
      for (size_t i = static_cast<size_t>(std::max<int64_t>(in.tangents, 0)); i < items.size();
           ++i) {
        if (items[i].is_ref() && items[i].as_ref() == m) items[i] = Value::Ref(h);
      }
      std::vector<Value> out_args = f.node(out_id).args();
      out_args[0] = Value::List(std::move(items));
      OVERLAP_RETURN_IF_ERROR(f.SetArgs(out_id, std::move(out_args), f.node(out_id).kwargs()));
      // The backward: the placeholder holds the host copy; the copy back goes before its
      // first reader.
      const NodeId p = in.placeholder.at(value);
      const absl::flat_hash_set<NodeId> readers(b.node(p).users().begin(), b.node(p).users().end());
      const InsertPoint at = BeforeFirstReader(b, readers);
      const std::string reload = FreshName(f, b, absl::StrCat(value, "__reload"));
      const std::string reloaded = FreshName(f, b, absl::StrCat(value, "__reloaded"));
      const bool target_is_name = b.node(p).target() == b.node(p).name();
      OVERLAP_RETURN_IF_ERROR(b.Rename(p, host));
      if (target_is_name) b.set_target(p, host);
      const NodeMeta pmeta = CopyMeta(b.node(p).meta());
      OVERLAP_ASSIGN_OR_RETURN(const NodeId r,
                               b.AddNode(Op::kCallFunction, reload, std::string(kReloadTarget),
                                         {Value::Ref(p), Value::Int(1), Value::Int(id)}, {}, at));
      b.mutable_node(r).mutable_meta() = pmeta;
      OVERLAP_ASSIGN_OR_RETURN(
          const NodeId w, b.AddNode(Op::kCallFunction, reloaded, std::string(kWaitReloadTarget),
                                    {Value::Ref(r), Value::Int(1), Value::Int(id)}, {}, at));
      b.mutable_node(w).mutable_meta() = pmeta;
      // Every reader but the reload now reads the arrived copy.
      b.ReplaceAllUsesWith(p, w, [&](const Node& user) { return user.id() != r; });
    }
    ++done;
  }
  return done;
}

}  // namespace overlap
