#include "schedule/zero3_ops.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

bool IsZero3Op(const Node& n) {
  return n.op() == Op::kCallFunction && absl::StartsWith(n.target(), kZero3Prefix);
}

bool IsParameterShard(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op() != Op::kPlaceholder) return false;
  if (!g.ParamsOwnedBy(n.name()).empty()) return true;
  for (NodeId u : n.users()) {
    const Node& user = g.node(u);
    if (IsAllgather(user) && !user.inputs().empty() && user.inputs()[0] == id) return true;
  }
  return false;
}

std::vector<char> OwnedTupleElements(const Graph& g) {
  std::vector<char> owned(g.id_bound(), 0);
  for (NodeId t : g.order()) {
    const Node& tuple = g.node(t);
    if (tuple.op() != Op::kCallFunction || HandsOnStorage(tuple) || IsAllgather(tuple) ||
        IsReduce(tuple) || IsOffload(tuple) || IsReload(tuple)) {
      continue;
    }
    // Every user a getitem of an int index; each index read once.
    absl::flat_hash_map<int64_t, int> readers_of;
    bool plain = !tuple.users().empty();
    for (NodeId u : tuple.users()) {
      const Node& e = g.node(u);
      if (e.op() != Op::kCallFunction || e.target() != "operator.getitem" ||
          e.inputs().size() != 1 || e.args().size() < 2 ||
          e.args()[1].kind() != Value::Kind::kInt || e.args()[1].as_int() < 0) {
        plain = false;
        break;
      }
      ++readers_of[e.args()[1].as_int()];
    }
    if (!plain) continue;
    std::vector<NodeId> elements;
    int64_t bytes = 0;
    absl::flat_hash_set<NodeId> seen;
    for (NodeId u : tuple.users()) {
      const Node& e = g.node(u);
      if (SizeOf(e) <= 0 || readers_of[e.args()[1].as_int()] != 1 || !seen.insert(u).second) {
        continue;
      }
      elements.push_back(u);
      bytes += SizeOf(e);
    }
    if (bytes > SizeOf(tuple)) continue;  // sizes that do not add up: the tuple keeps them
    for (NodeId e : elements) owned[e] = 1;
  }
  return owned;
}

int64_t TupleRemainderBytes(const Graph& g, NodeId tuple, const std::vector<char>& owned) {
  int64_t bytes = SizeOf(g.node(tuple));
  absl::flat_hash_set<NodeId> counted;
  for (NodeId u : g.node(tuple).users()) {
    if (owned[u] && counted.insert(u).second) bytes -= SizeOf(g.node(u));
  }
  return bytes;
}

bool HasZero3Ops(const Graph& g) {
  for (NodeId id : g.order()) {
    if (IsZero3Op(g.node(id))) return true;
  }
  return false;
}

bool IsPersistentAllgather(const Node& n) {
  if (!IsAllgather(n)) return false;
  for (const auto& [k, v] : n.kwargs()) {
    if (k == kPersistentKwarg && v.kind() == Value::Kind::kBool && v.as_bool()) return true;
  }
  return false;
}

int64_t ReduceBucket(const Node& n) {
  for (const auto& [k, v] : n.kwargs()) {
    if (k == kBucketKwarg && v.kind() == Value::Kind::kInt) return v.as_int();
  }
  return -1;
}

int ReduceBucketer::Add(int64_t bytes) {
  if (open_ < 0) {
    open_ = next_++;
    open_bytes_ = 0;
  }
  const int b = open_;
  open_bytes_ += bytes;
  if (open_bytes_ >= cap_bytes_) open_ = -1;
  return b;
}

absl::Status MakeResident(Graph* g, absl::Span<const int64_t> resident,
                          std::vector<NodeId>* order) {
  if (resident.empty()) return absl::OkStatus();
  const absl::flat_hash_set<int64_t> ds(resident.begin(), resident.end());
  std::vector<NodeId> releases;
  for (NodeId id : g->order()) {
    const Node& n = g->node(id);
    if (!IsZero3Op(n) || !ds.contains(DsId(n))) continue;
    if (IsAllgather(n) && !IsPersistentAllgather(n)) {
      ValueDict kwargs;
      for (const auto& kv : n.kwargs()) {
        if (kv.first != kPersistentKwarg) kwargs.push_back(kv);
      }
      kwargs.emplace_back(std::string(kPersistentKwarg), Value::Bool(true));
      OVERLAP_RETURN_IF_ERROR(g->SetArgs(id, n.args(), std::move(kwargs)));
    } else if (IsRelease(n)) {
      releases.push_back(id);
    }
  }
  for (NodeId r : releases) {
    const Node& n = g->node(r);
    if (n.args().empty() || !n.args()[0].is_ref()) continue;
    g->ReplaceAllUsesWith(r, n.args()[0].as_ref());
    OVERLAP_RETURN_IF_ERROR(g->Erase(r));
  }
  if (order != nullptr) {
    order->erase(
        std::remove_if(order->begin(), order->end(), [&](NodeId id) { return !g->IsLive(id); }),
        order->end());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> AddReduceWaits(Graph* g) {
  std::vector<NodeId> pending;                   // reduces not yet waited for, in order
  std::vector<std::pair<NodeId, NodeId>> waits;  // (reduce, the node it goes before)
  for (NodeId id : g->order()) {
    const Node& n = g->node(id);
    if (IsReduce(n)) {
      pending.push_back(id);
      continue;
    }
    if (pending.empty() || IsZero3Op(n)) continue;
    // A reader of a gathered (not resident) parameter: where a just-in-time order gathers it.
    bool gathered = false;
    for (NodeId in : n.inputs()) {
      const Node& w = g->node(in);
      gathered |= IsWait(w) && !w.inputs().empty() && IsAllgather(g->node(w.inputs()[0])) &&
                  !IsPersistentAllgather(g->node(w.inputs()[0]));
    }
    if (!gathered) continue;
    for (NodeId r : pending) waits.push_back({r, id});
    pending.clear();
  }
  for (const auto& [r, before] : waits) {
    const Node& red = g->node(r);
    std::string name = absl::StrCat("wait_", red.name());
    for (int k = 2; g->FindNode(name) != kNoNode; ++k) {
      name = absl::StrCat("wait_", red.name(), "_", k);
    }
    OVERLAP_RETURN_IF_ERROR(
        g->AddNode(Op::kCallFunction, std::move(name), std::string(kWaitReduceTarget),
                   {Value::Ref(r), Value::Int(IntArg(red, kGraphIdArg)), Value::Int(DsId(red))}, {},
                   InsertPoint::Before(before))
            .status());
  }
  return static_cast<int64_t>(waits.size());
}

absl::Status BucketReduces(Graph* g, absl::Span<const NodeId> order, int64_t cap_bytes) {
  if (cap_bytes <= 0) return absl::OkStatus();
  ReduceBucketer buckets(cap_bytes);
  for (NodeId id : order) {
    const Node& n = g->node(id);
    if (!IsReduce(n)) continue;
    const int bucket = buckets.Add(SizeOf(n));
    ValueDict kwargs;
    for (const auto& kv : n.kwargs()) {
      if (kv.first != kBucketKwarg) kwargs.push_back(kv);
    }
    kwargs.emplace_back(std::string(kBucketKwarg), Value::Int(bucket));
    OVERLAP_RETURN_IF_ERROR(g->SetArgs(id, n.args(), std::move(kwargs)));
  }
  return absl::OkStatus();
}

}  // namespace overlap
