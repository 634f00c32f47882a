#include "schedule/schedule_verifier.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "schedule/analysis.h"
#include "schedule/zero3_ops.h"

namespace overlap {

int64_t PeakGatheredBytes(const Graph& g, absl::Span<const NodeId> order) {
  absl::flat_hash_map<int64_t, std::pair<int64_t, int64_t>> live;  // ds -> (bytes, releases)
  int64_t now = 0, peak = 0;
  // Persistent (resident) parameters are gathered for the whole step.
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (IsPersistentAllgather(n)) now += SizeOf(n);
  }
  peak = now;
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (IsPersistentAllgather(n)) continue;
    if (IsAllgather(n)) {
      const int64_t bytes = SizeOf(n);
      live[DsId(n)] = {bytes, 0};
      now += bytes;
      peak = std::max(peak, now);
    } else if (IsRelease(n)) {
      auto it = live.find(DsId(n));
      if (it != live.end() && ++it->second.second == NUsers(n)) {
        now -= it->second.first;
        live.erase(it);
      }
    }
  }
  return peak;
}

absl::Status VerifySchedule(const Graph& g, absl::Span<const NodeId> order,
                            std::optional<int64_t> gathered_budget) {
  if (absl::Status s = CheckTopologicalPermutation(g, order); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a topological order: ", s.message()));
  }
  std::vector<int64_t> pos(g.id_bound(), -1);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int64_t>(i);
  // The freeing release of each ds_id: the one whose running count reaches n_users.
  absl::flat_hash_map<int64_t, int64_t> seen;
  absl::flat_hash_map<int64_t, NodeId> freeing;
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (IsAllgather(n)) seen[DsId(n)] = 0;
    if (IsRelease(n) && ++seen[DsId(n)] == NUsers(n)) freeing[DsId(n)] = id;
  }
  for (NodeId id : order) {
    const Node& w = g.node(id);
    if (!IsWait(w)) continue;
    const int64_t ds = DsId(w);
    auto f = freeing.find(ds);
    // Every reader of the gathered buffer, through views, before the freeing release.
    std::vector<NodeId> stack = {id};
    while (!stack.empty()) {
      const NodeId v = stack.back();
      stack.pop_back();
      for (NodeId u : g.node(v).users()) {
        const Node& user = g.node(u);
        if (user.op() == Op::kOutput || IsRelease(user)) continue;
        // A view of this value reads no data: it is not a use, but its readers are. (A view
        // of something else that reads this value, say through kwargs, is a use.)
        if (IsViewOf(user, v)) {
          stack.push_back(u);
          continue;
        }
        if (pos[u] < pos[id]) {
          return absl::InvalidArgumentError(
              absl::StrCat("\"", user.name(), "\" uses the gathered parameter before its wait \"",
                           w.name(), "\""));
        }
        if (f != freeing.end() && pos[u] > pos[f->second]) {
          return absl::InvalidArgumentError(
              absl::StrCat("\"", user.name(), "\" uses the gathered parameter of ds_id ", ds,
                           " after the release \"", g.node(f->second).name(), "\" freed it"));
        }
      }
    }
  }
  for (NodeId id : order) {
    const Node& r = g.node(id);
    if (!IsReduce(r) || r.inputs().empty()) continue;
    if (pos[r.inputs()[0]] > pos[id]) {
      return absl::InvalidArgumentError(absl::StrCat("reduce \"", r.name(),
                                                     "\" comes before its gradient \"",
                                                     g.node(r.inputs()[0]).name(), "\""));
    }
  }
  if (gathered_budget) {
    const int64_t peak = PeakGatheredBytes(g, order);
    if (peak > *gathered_budget) {
      return absl::InvalidArgumentError(
          absl::StrCat("peak gathered bytes ", peak, " exceed the budget of ", *gathered_budget));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap
