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
  // The order without the host ops.
  std::vector<NodeId> rest;
  rest.reserve(order.size());
  std::vector<NodeId> reloads, waits, offloads, offload_waits;
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (IsWaitOffload(n)) {
      offload_waits.push_back(id);
    } else if (IsOffload(n)) {
      offloads.push_back(id);
    } else if (IsReload(n)) {
      reloads.push_back(id);
    } else if (IsWaitReload(n)) {
      waits.push_back(id);
    } else {
      rest.push_back(id);
    }
  }
  const size_t m = rest.size();
  std::vector<int64_t> index(g.id_bound(), -1);
  for (size_t i = 0; i < m; ++i) index[rest[i]] = static_cast<int64_t>(i);
  // "At the end" is before the output node when the order ends with it.
  const size_t end = m > 0 && g.node(rest[m - 1]).op() == Op::kOutput ? m - 1 : m;
  // After the placeholders (host tensors are placeholders).
  size_t first_body = 0;
  while (first_body < m && g.node(rest[first_body]).op() == Op::kPlaceholder) ++first_body;
  // Waits: before their first reader (the end when none reads them).
  std::vector<std::vector<NodeId>> before(m + 1), after(m + 1), reload_before(m + 1);
  absl::flat_hash_map<NodeId, size_t> wait_at;
  for (NodeId w : waits) {
    size_t at = end;
    for (NodeId u : g.node(w).users()) {
      if (index[u] >= 0) at = std::min(at, static_cast<size_t>(index[u]));
    }
    wait_at[w] = at;
    before[at].push_back(w);
  }
  // Offloads: right after their value (a host op's value: at the end).
  for (NodeId o : offloads) {
    const Node& n = g.node(o);
    const NodeId src = n.inputs().empty() ? kNoNode : n.inputs()[0];
    if (src != kNoNode && index[src] >= 0) {
      after[index[src]].push_back(o);
    } else {
      before[end].push_back(o);
    }
  }
  // Waits for offloads: at the end (the step waits for the link anyway), or, throttled, each
  // before the node that makes the next offloaded value (at most one copy outstanding while
  // compute makes more).
  {
    absl::flat_hash_map<NodeId, size_t> wait_of;       // offload -> its wait's place
    std::vector<std::pair<size_t, NodeId>> by_source;  // (source index, offload)
    for (NodeId o : offloads) {
      const Node& n = g.node(o);
      const NodeId src = n.inputs().empty() ? kNoNode : n.inputs()[0];
      by_source.push_back(
          {src != kNoNode && index[src] >= 0 ? static_cast<size_t>(index[src]) : end, o});
    }
    std::stable_sort(by_source.begin(), by_source.end());
    for (size_t j = 0; j < by_source.size(); ++j) {
      size_t at = end;
      if (placement == HostCopyPlacement::kThrottled && j + 1 < by_source.size()) {
        // After this offload's value, before the next one's.
        at = std::max(by_source[j].first + 1, std::min(by_source[j + 1].first, end));
      }
      wait_of[by_source[j].second] = std::min(at, end);
    }
    for (NodeId w : offload_waits) {
      const Node& n = g.node(w);
      auto it = n.inputs().empty() ? wait_of.end() : wait_of.find(n.inputs()[0]);
      before[it == wait_of.end() ? end : it->second].push_back(w);
    }
  }
  // Reloads: each no later than its wait, and after what it reads (the placeholders, or an
  // offload of this graph: after its value).
  struct Pending {
    NodeId reload;
    size_t wait_at, earliest;
  };
  std::vector<Pending> pending;
  for (NodeId r : reloads) {
    size_t at = end;
    for (NodeId u : g.node(r).users()) {
      auto it = wait_at.find(u);
      if (it != wait_at.end()) at = std::min(at, it->second);
      if (index[u] >= 0) at = std::min(at, static_cast<size_t>(index[u]));
    }
    size_t earliest = first_body;
    const Node& rn = g.node(r);
    if (!rn.inputs().empty() && IsOffload(g.node(rn.inputs()[0]))) {
      const Node& o = g.node(rn.inputs()[0]);
      const NodeId src = o.inputs().empty() ? kNoNode : o.inputs()[0];
      earliest = src != kNoNode && index[src] >= 0 ? static_cast<size_t>(index[src]) + 1 : end;
    }
    pending.push_back({r, at, std::min(earliest, at)});
  }
  auto emit = [&] {
    std::vector<NodeId> out;
    out.reserve(order.size());
    for (size_t i = 0; i <= m; ++i) {
      // Reloads issued here in issue order: the earliest copy first.
      for (auto it = reload_before[i].rbegin(); it != reload_before[i].rend(); ++it) {
        out.push_back(*it);
      }
      for (NodeId id : before[i]) out.push_back(id);
      if (i == m) break;
      out.push_back(rest[i]);
      for (NodeId id : after[i]) out.push_back(id);
    }
    return out;
  };
  if (placement != HostCopyPlacement::kHidden) {
    for (const Pending& p : pending) reload_before[p.wait_at].push_back(p.reload);
    return emit();
  }
  // When compute reaches each remaining node: with a simulator, from the simulation of the
  // order with every reload just before its wait (collective stalls included; a node's time
  // is the start of the next compute interval, so the estimate errs early); without one,
  // the running sum of device times.
  std::vector<double> start(m + 1, 0);
  bool timed = false;
  if (simulator != nullptr) {
    for (const Pending& p : pending) reload_before[p.wait_at].push_back(p.reload);
    SimulationOptions so;
    so.check_order = true;
    absl::StatusOr<SimulationResult> sim = simulator->Run(emit(), so);
    for (auto& v : reload_before) v.clear();
    if (sim.ok()) {
      absl::flat_hash_map<NodeId, double> compute_start;
      for (const SimEvent& e : sim->events) {
        if (e.stream == 0) compute_start.emplace(e.node, e.start_s);
      }
      double next = sim->step_time_s;
      start[m] = next;
      for (size_t i = m; i-- > 0;) {
        auto it = compute_start.find(rest[i]);
        if (it != compute_start.end()) next = it->second;
        start[i] = next;
      }
      timed = true;
    }
  }
  if (!timed) {
    for (size_t i = 0; i < m; ++i) {
      const Node& n = g.node(rest[i]);
      const bool compute = n.op() == Op::kCallFunction && !IsZero3Op(n);
      start[i + 1] = start[i] + (compute ? TimeOf(n) : 0.0);
    }
  }
  // As late as lets each arrive in time, latest wait first: a copy ends by its wait and
  // before the next (later) copy begins.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.wait_at > b.wait_at; });
  double link_free_by = start[m];
  for (const Pending& p : pending) {
    const double need_by = std::min(start[p.wait_at], link_free_by);
    const double begin = need_by - model.HostCopy(SizeOf(g.node(p.reload)));
    link_free_by = begin;
    // The last position at or before the wait whose compute time is <= begin.
    size_t at = static_cast<size_t>(
        std::upper_bound(start.begin(), start.begin() + p.wait_at + 1, begin) - start.begin());
    at = at == 0 ? 0 : at - 1;
    reload_before[std::max(at, p.earliest)].push_back(p.reload);
  }
  return emit();
}

}  // namespace overlap
