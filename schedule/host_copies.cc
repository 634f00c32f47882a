#include "schedule/host_copies.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

bool IsHostOp(const Node& n) {
  return IsOffload(n) || IsReload(n) || IsWaitReload(n) || IsWaitOffload(n);
}

// The order without its host ops, and the host ops' places around it: before[i] and
// reload_before[i] are issued before rest[i] (i == rest.size(): at the very end), after[i]
// right after it.
struct Slots {
  std::vector<NodeId> rest;
  std::vector<NodeId> reloads, waits, offloads, offload_waits;
  std::vector<int64_t> index;  // by node id: its place in rest, -1 for host ops
  size_t end = 0;              // "at the end": before the output node when the order ends with it
  size_t first_body = 0;       // after the placeholders (host tensors are placeholders)
  std::vector<std::vector<NodeId>> before, after, reload_before;
  absl::flat_hash_map<NodeId, size_t> wait_at;  // reload wait -> its place
};

// A reload to place: no later than its wait, no earlier than what it reads.
struct Pending {
  NodeId reload;
  size_t wait_at, earliest;
};

Slots SplitHostOps(const Graph& g, const std::vector<NodeId>& order) {
  Slots s;
  s.rest.reserve(order.size());
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (IsWaitOffload(n)) {
      s.offload_waits.push_back(id);
    } else if (IsOffload(n)) {
      s.offloads.push_back(id);
    } else if (IsReload(n)) {
      s.reloads.push_back(id);
    } else if (IsWaitReload(n)) {
      s.waits.push_back(id);
    } else {
      s.rest.push_back(id);
    }
  }
  const size_t m = s.rest.size();
  s.index.assign(g.id_bound(), -1);
  for (size_t i = 0; i < m; ++i) s.index[s.rest[i]] = static_cast<int64_t>(i);
  s.end = m > 0 && g.node(s.rest[m - 1]).op() == Op::kOutput ? m - 1 : m;
  while (s.first_body < m && g.node(s.rest[s.first_body]).op() == Op::kPlaceholder) {
    ++s.first_body;
  }
  s.before.resize(m + 1);
  s.after.resize(m + 1);
  s.reload_before.resize(m + 1);
  return s;
}

// The place of an offload's source value in rest (a host op's value: the end).
size_t SourcePlace(const Graph& g, const Slots& s, NodeId offload) {
  const Node& n = g.node(offload);
  const NodeId src = n.inputs().empty() ? kNoNode : n.inputs()[0];
  return src != kNoNode && s.index[src] >= 0 ? static_cast<size_t>(s.index[src]) : s.end;
}

// Waits for reloads: before their first reader (the end when none reads them). Offloads:
// right after their value (a host op's value: at the end).
void PlaceWaitsAndOffloads(const Graph& g, Slots& s) {
  for (NodeId w : s.waits) {
    size_t at = s.end;
    for (NodeId u : g.node(w).users()) {
      if (s.index[u] >= 0) at = std::min(at, static_cast<size_t>(s.index[u]));
    }
    s.wait_at[w] = at;
    s.before[at].push_back(w);
  }
  for (NodeId o : s.offloads) {
    const Node& n = g.node(o);
    const NodeId src = n.inputs().empty() ? kNoNode : n.inputs()[0];
    if (src != kNoNode && s.index[src] >= 0) {
      s.after[s.index[src]].push_back(o);
    } else {
      s.before[s.end].push_back(o);
    }
  }
}

// Waits for offloads: at the end (the step waits for the link anyway), or, throttled, each
// before the node that makes the next offloaded value (at most one copy outstanding while
// compute makes more).
void PlaceOffloadWaits(const Graph& g, HostCopyPlacement placement, Slots& s) {
  absl::flat_hash_map<NodeId, size_t> wait_of;       // offload -> its wait's place
  std::vector<std::pair<size_t, NodeId>> by_source;  // (source index, offload)
  for (NodeId o : s.offloads) by_source.push_back({SourcePlace(g, s, o), o});
  std::stable_sort(by_source.begin(), by_source.end());
  for (size_t j = 0; j < by_source.size(); ++j) {
    size_t at = s.end;
    if (placement == HostCopyPlacement::kThrottled && j + 1 < by_source.size()) {
      // After this offload's value, before the next one's.
      at = std::max(by_source[j].first + 1, std::min(by_source[j + 1].first, s.end));
    }
    wait_of[by_source[j].second] = std::min(at, s.end);
  }
  for (NodeId w : s.offload_waits) {
    const Node& n = g.node(w);
    auto it = n.inputs().empty() ? wait_of.end() : wait_of.find(n.inputs()[0]);
    s.before[it == wait_of.end() ? s.end : it->second].push_back(w);
  }
}

// Reloads: each no later than its wait, and after what it reads (the placeholders, or an
// offload of this graph: after its value).
std::vector<Pending> PendingReloads(const Graph& g, const Slots& s) {
  std::vector<Pending> pending;
  for (NodeId r : s.reloads) {
    size_t at = s.end;
    for (NodeId u : g.node(r).users()) {
      auto it = s.wait_at.find(u);
      if (it != s.wait_at.end()) at = std::min(at, it->second);
      if (s.index[u] >= 0) at = std::min(at, static_cast<size_t>(s.index[u]));
    }
    size_t earliest = s.first_body;
    const Node& rn = g.node(r);
    if (!rn.inputs().empty() && IsOffload(g.node(rn.inputs()[0]))) {
      const Node& o = g.node(rn.inputs()[0]);
      const NodeId src = o.inputs().empty() ? kNoNode : o.inputs()[0];
      earliest =
          src != kNoNode && s.index[src] >= 0 ? static_cast<size_t>(s.index[src]) + 1 : s.end;
    }
    pending.push_back({r, at, std::min(earliest, at)});
  }
  return pending;
}

// The order with every host op in its place.
std::vector<NodeId> Emit(const Slots& s) {
  const size_t m = s.rest.size();
  std::vector<NodeId> out;
  out.reserve(m + s.reloads.size() + s.waits.size() + s.offloads.size() + s.offload_waits.size());
  for (size_t i = 0; i <= m; ++i) {
    // Reloads issued here in issue order: the earliest copy first.
    for (auto it = s.reload_before[i].rbegin(); it != s.reload_before[i].rend(); ++it) {
      out.push_back(*it);
    }
    for (NodeId id : s.before[i]) out.push_back(id);
    if (i == m) break;
    out.push_back(s.rest[i]);
    for (NodeId id : s.after[i]) out.push_back(id);
  }
  return out;
}

// When compute reaches each node of rest (and the end, at m): with a simulator, from the
// simulation of the order with every reload just before its wait (collective stalls
// included; a node's time is the start of the next compute interval, so the estimate errs
// early); without one, or when it fails, the running sum of device times.
std::vector<double> ComputeStarts(const Graph& g, const std::vector<Pending>& pending,
                                  const Simulator* simulator, Slots& s) {
  const size_t m = s.rest.size();
  std::vector<double> start(m + 1, 0);
  if (simulator != nullptr) {
    for (const Pending& p : pending) s.reload_before[p.wait_at].push_back(p.reload);
    SimulationOptions so;
    so.check_order = true;
    absl::StatusOr<SimulationResult> sim = simulator->Run(Emit(s), so);
    for (auto& v : s.reload_before) v.clear();
    if (sim.ok()) {
      absl::flat_hash_map<NodeId, double> compute_start;
      for (const SimEvent& e : sim->events) {
        if (e.stream == 0) compute_start.emplace(e.node, e.start_s);
      }
      double next = sim->step_time_s;
      start[m] = next;
      for (size_t i = m; i-- > 0;) {
        auto it = compute_start.find(s.rest[i]);
        if (it != compute_start.end()) next = it->second;
        start[i] = next;
      }
      return start;
    }
  }
  for (size_t i = 0; i < m; ++i) {
    const Node& n = g.node(s.rest[i]);
    const bool compute = n.op() == Op::kCallFunction && !IsZero3Op(n);
    start[i + 1] = start[i] + (compute ? TimeOf(n) : 0.0);
  }
  return start;
}

}  // namespace

bool HasHostCopies(const Graph& g) {
  for (NodeId id : g.order()) {
    if (IsHostOp(g.node(id))) return true;
  }
  return false;
}

std::vector<NodeId> PlaceHostCopies(const Graph& g, std::vector<NodeId> order,
                                    const CollectiveModel& model, const Simulator* simulator,
                                    HostCopyPlacement placement) {
  if (!HasHostCopies(g)) return order;
  Slots s = SplitHostOps(g, order);
  PlaceWaitsAndOffloads(g, s);
  PlaceOffloadWaits(g, placement, s);
  std::vector<Pending> pending = PendingReloads(g, s);
  if (placement != HostCopyPlacement::kHidden) {
    for (const Pending& p : pending) s.reload_before[p.wait_at].push_back(p.reload);
    return Emit(s);
  }
  const std::vector<double> start = ComputeStarts(g, pending, simulator, s);
  // As late as lets each arrive in time, latest wait first: a copy ends by its wait and
  // before the next (later) copy begins.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.wait_at > b.wait_at; });
  double link_free_by = start[s.rest.size()];
  for (const Pending& p : pending) {
    const double need_by = std::min(start[p.wait_at], link_free_by);
    const double begin = need_by - model.HostCopy(SizeOf(g.node(p.reload)));
    link_free_by = begin;
    // The last position at or before the wait whose compute time is <= begin.
    size_t at = static_cast<size_t>(
        std::upper_bound(start.begin(), start.begin() + p.wait_at + 1, begin) - start.begin());
    at = at == 0 ? 0 : at - 1;
    s.reload_before[std::max(at, p.earliest)].push_back(p.reload);
  }
  return Emit(s);
}

}  // namespace overlap
