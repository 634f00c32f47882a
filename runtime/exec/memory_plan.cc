#include "runtime/exec/memory_plan.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/size.h"
#include "runtime/core/tensor.h"
#include "schedule/zero3_ops.h"

namespace overlap {

bool IsCallNode(const Node& n) {
  return n.op() == Op::kCallFunction || n.op() == Op::kCallMethod || n.op() == Op::kCallModule;
}

MemoryPlan BuildMemoryPlan(const Graph& g) {
  MemoryPlan p;
  p.order = g.OrderVector();
  const int64_t n = static_cast<int64_t>(p.order.size());
  p.pos.assign(g.id_bound(), -1);
  for (int64_t i = 0; i < n; ++i) p.pos[p.order[i]] = i;
  p.root.assign(g.id_bound(), kNoNode);
  p.owns.assign(g.id_bound(), 0);
  p.members.assign(g.id_bound(), {});
  std::vector<char> held(g.id_bound(), 0);
  std::vector<int64_t> last(g.id_bound(), -1), reduced_at(g.id_bound(), -1);
  p.owned_element = OwnedTupleElements(g);
  for (NodeId id : p.order) {
    const Node& node = g.node(id);
    p.root[id] = id;
    const bool element = p.owned_element[id] != 0;  // its own buffer, made with its tuple's
    if (HandsOnStorage(node) && !element && HandedOnFrom(node) != kNoNode) {
      p.root[id] = p.root[HandedOnFrom(node)];
    }
    p.members[p.root[id]].push_back(id);
    // Host tensors (an offload's copy, a placeholder a reload reads) are not step memory.
    const bool value =
        node.op() == Op::kPlaceholder
            ? !IsParameterShard(g, id) && !IsHostTensor(g, id)
            : element || (IsCallNode(node) && !HandsOnStorage(node) && !IsAllgather(node) &&
                          !IsReduce(node) && !IsOffload(node) && !IsWaitOffload(node) &&
                          !IsWaitReduce(node));
    // A value of 0 bytes (SizeOf: no size and no shape stated) still owns its buffer, so that
    // it is freed after its last reader like any other.
    p.owns[id] = value;
    last[id] = p.pos[id];
    if (IsPersistentAllgather(node)) p.resident.insert(DsId(node));
  }
  // A bucket's reduction runs at its last member (in one process: at once).
  absl::flat_hash_map<int64_t, int64_t> bucket_end;
  for (NodeId id : p.order) {
    const Node& node = g.node(id);
    if (IsReduce(node) && ReduceBucket(node) >= 0) bucket_end[ReduceBucket(node)] = p.pos[id];
  }
  for (NodeId u : p.order) {
    const Node& user = g.node(u);
    for (NodeId in : user.inputs()) {
      const NodeId s = p.root[in];
      if (s == kNoNode || !p.owns[s]) continue;
      if (user.op() == Op::kOutput) {
        held[s] = 1;
      } else if (IsReduce(user)) {
        const int64_t b = ReduceBucket(user);
        reduced_at[s] = std::max(reduced_at[s], b >= 0 ? bucket_end[b] : p.pos[u]);
      } else {
        last[s] = std::max(last[s], p.pos[u]);
      }
    }
  }
  p.frees_at.assign(n, {});
  for (NodeId id : p.order) {
    if (!p.owns[id]) continue;
    if (reduced_at[id] >= 0) {
      p.frees_at[std::max(last[id], reduced_at[id])].push_back(id);
    } else if (!held[id]) {
      p.frees_at[last[id]].push_back(id);
    }
  }
  return p;
}

absl::Status CheckMemoryGuard(int64_t need_bytes, std::optional<int64_t> guard_bytes,
                              absl::string_view what, absl::string_view detail,
                              absl::string_view hint, std::initializer_list<const Graph*> graphs) {
  const int64_t guard = guard_bytes ? *guard_bytes : AvailableMemoryBytes();
  if (need_bytes <= guard) return absl::OkStatus();
  std::string about(detail);
  const Node* largest = nullptr;
  for (const Graph* g : graphs) {
    for (NodeId id : g->order()) {
      const Node& n = g->node(id);
      if (largest == nullptr || SizeOf(n) > SizeOf(*largest)) largest = &n;
    }
  }
  if (largest != nullptr && SizeOf(*largest) > 0) {
    absl::StrAppend(&about, about.empty() ? "" : "; ", "its largest value: node \"",
                    largest->name(), "\", ", FormatBytes(SizeOf(*largest)));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " needs ", FormatBytes(need_bytes), about.empty() ? "" : " (", about,
                   about.empty() ? "" : ")", ", more than the ", FormatBytes(guard),
                   guard_bytes ? " limit" : " available", hint.empty() ? "" : " (", hint,
                   hint.empty() ? "" : ")"));
}

}  // namespace overlap
