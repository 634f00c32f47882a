#include "schedule/lookahead_prefetch.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "schedule/simulator.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

// One gathered parameter: its allgather, its wait, and the first node that reads the wait
// (where the just-in-time order needs the parameter).
struct Gather {
  NodeId allgather;
  NodeId wait;
  NodeId first_use;  // kNoNode: the wait has no reader
};

// S_k: the graph order without the gathers' allgathers and waits; each wait re-inserted
// right before its first use, each allgather before the first use of the gather k places
// earlier (in first-use order), allgathers ahead of waits at the same place. A wait nobody
// reads stays right after its allgather. `position` is each node's index in `base`.
// O(N + A log A) with flat arrays (a large graph evaluates several candidates).
std::vector<NodeId> Candidate(const std::vector<NodeId>& base, const std::vector<int64_t>& position,
                              const std::vector<Gather>& gathers, const std::vector<char>& moved,
                              int k) {
  // (base position, 0 allgather / 1 wait, gather index, node): what goes before base[pos].
  struct Insert {
    int64_t pos;
    int kind;
    size_t j;
    NodeId node;
  };
  std::vector<Insert> inserts;
  inserts.reserve(2 * gathers.size());
  std::vector<std::pair<NodeId, NodeId>> after;  // (allgather, its unread wait)
  for (size_t j = 0; j < gathers.size(); ++j) {
    const Gather& gj = gathers[j];
    if (gj.first_use == kNoNode) {
      after.push_back({gj.allgather, gj.wait});
      continue;
    }
    const Gather& early = gathers[j >= static_cast<size_t>(k) ? j - k : 0];
    const NodeId anchor = early.first_use != kNoNode ? early.first_use : gj.first_use;
    inserts.push_back({position[anchor], 0, j, gj.allgather});
    inserts.push_back({position[gj.first_use], 1, j, gj.wait});
  }
  std::sort(inserts.begin(), inserts.end(), [](const Insert& x, const Insert& y) {
    if (x.pos != y.pos) return x.pos < y.pos;
    if (x.kind != y.kind) return x.kind < y.kind;
    return x.j < y.j;
  });
  std::sort(after.begin(), after.end());
  std::vector<NodeId> order;
  order.reserve(base.size());
  auto emit = [&](NodeId id) {
    order.push_back(id);
    auto a = std::lower_bound(after.begin(), after.end(), std::make_pair(id, NodeId{kNoNode}));
    for (; a != after.end() && a->first == id; ++a) order.push_back(a->second);
  };
  size_t next = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    for (; next < inserts.size() && inserts[next].pos == static_cast<int64_t>(i); ++next) {
      if (inserts[next].kind == 0) {
        emit(inserts[next].node);
      } else {
        order.push_back(inserts[next].node);
      }
    }
    if (moved[base[i]]) continue;  // re-inserted above
    emit(base[i]);
  }
  return order;
}

}  // namespace

absl::StatusOr<LookaheadResult> LookaheadPrefetchSchedule(const Graph& g,
                                                          std::optional<int64_t> memory_limit,
                                                          const CollectiveModel& model,
                                                          std::optional<int> max_in_flight) {
  if (max_in_flight && *max_in_flight < 0) {
    return absl::InvalidArgumentError("the in-flight limit must be >= 0");
  }
  // The gathers, in the order their parameters are first needed.
  const std::vector<NodeId> base = g.OrderVector();
  std::vector<int64_t> position(g.id_bound(), 0);
  for (size_t i = 0; i < base.size(); ++i) position[base[i]] = static_cast<int64_t>(i);
  std::vector<Gather> gathers;
  std::vector<char> moved(g.id_bound(), 0);
  for (NodeId id : base) {
    const Node& n = g.node(id);
    if (!IsCallTo(n, kWaitTarget) || n.inputs().empty()) continue;
    const NodeId ag = n.inputs()[0];
    if (!IsCallTo(g.node(ag), kAllgatherTarget) || moved[ag]) continue;
    NodeId first = kNoNode;
    for (NodeId u : n.users()) {
      if (first == kNoNode || position[u] < position[first]) first = u;
    }
    gathers.push_back({ag, id, first});
    moved[ag] = 1;
    moved[id] = 1;
  }
  // Whether every candidate is topological by construction (true for graphs from our
  // insertion): placeholders first, each wait read by someone, each allgather's only inputs
  // placeholders and read by its wait alone. Then candidates skip the simulator's O(N)
  // order check; otherwise (hand-written dc ops) every candidate is checked.
  bool clean = true;
  bool seen_other = false;
  for (NodeId id : base) {
    const bool ph = g.node(id).op() == Op::kPlaceholder;
    if (ph && seen_other) clean = false;
    seen_other = seen_other || !ph;
  }
  for (const Gather& gj : gathers) {
    const Node& ag = g.node(gj.allgather);
    clean = clean && gj.first_use != kNoNode && ag.users().size() == 1 &&
            g.node(gj.wait).inputs().size() == 1;
    for (NodeId in : ag.inputs()) clean = clean && g.node(in).op() == Op::kPlaceholder;
  }
  std::stable_sort(gathers.begin(), gathers.end(), [&](const Gather& a, const Gather& b) {
    const int64_t pa = a.first_use == kNoNode ? INT64_MAX : position[a.first_use];
    const int64_t pb = b.first_use == kNoNode ? INT64_MAX : position[b.first_use];
    return pa < pb;
  });
  std::vector<int> ks = {0};
  const double top = max_in_flight ? std::min<double>(*max_in_flight, gathers.size())
                                   : static_cast<double>(gathers.size());
  // About sqrt(2) apart; on very large graphs 2 apart, which halves the simulations at a
  // small cost in choice (each simulation there takes a fraction of a second).
  const double step = g.size() > 250000 ? 2.0 : std::sqrt(2.0);
  for (double k = 1; k <= top; k *= step) {
    const int ki = static_cast<int>(std::lround(k));
    if (ki != ks.back() && ki <= top) ks.push_back(ki);
  }
  // Selective unsharding: which parameters to keep resident when a candidate leaves memory
  // over. Keeping one saves its whole allgather; ranked by time saved per byte held (the
  // latency term makes small parameters the best buys), ties by ds_id. A candidate with
  // `left` bytes to spare keeps the longest prefix of this ranking that fits in `left`, then
  // shrinks the prefix (binary search) while the simulated peak exceeds the budget.
  struct Keep {
    int64_t ds;
    int64_t bytes;
    double saved;
  };
  std::vector<Keep> ranking;
  for (const Gather& gj : gathers) {
    const Node& ag = g.node(gj.allgather);
    // A ds_id that is not an int names no parameter (a negative one still does, for the
    // simulator's resident set, so keep the kind check rather than IntArg's -1).
    if (IsPersistentAllgather(ag) || ag.args().size() < 3 ||
        ag.args()[2].kind() != Value::Kind::kInt) {
      continue;
    }
    const int64_t bytes = SizeOf(ag);
    ranking.push_back({ag.args()[2].as_int(), bytes, model.Allgather(bytes)});
  }
  std::sort(ranking.begin(), ranking.end(), [](const Keep& a, const Keep& b) {
    // saved / bytes, compared without dividing (bytes may be 0: those come first).
    const double lhs = a.saved * static_cast<double>(b.bytes);
    const double rhs = b.saved * static_cast<double>(a.bytes);
    if (lhs != rhs) return lhs > rhs;
    return a.ds < b.ds;
  });
  std::vector<int64_t> ranked_ds;
  std::vector<int64_t> prefix_bytes = {0};
  for (const Keep& k : ranking) {
    ranked_ds.push_back(k.ds);
    int64_t next = 0;
    if (__builtin_add_overflow(prefix_bytes.back(), k.bytes, &next)) next = INT64_MAX;
    prefix_bytes.push_back(next);
  }

  LookaheadResult best;
  bool have_best = false;
  int64_t smallest_peak = INT64_MAX;
  std::vector<NodeId> smallest_order;
  int smallest_k = 0;
  // Reduce-scatter bucket caps tried (backward graphs: a bucket is one collective, one
  // latency, but holds its gradients until the last one is reduced).
  std::vector<int64_t> caps = {0};
  for (NodeId id : base) {
    if (IsCallTo(g.node(id), kReduceTarget)) {
      caps = {0, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20};
      break;
    }
  }
  const Simulator simulator(g, model);  // the graph's part of every simulation, once
  auto run = [&](absl::Span<const NodeId> order, absl::Span<const int64_t> resident, int64_t cap) {
    return clean ? simulator.RunUnchecked(order, /*record=*/false, resident, cap)
                 : simulator.Run(order, /*record=*/false, resident, cap);
  };

  // One candidate, evaluated on its own (so candidates can be evaluated in parallel): S_k
  // simulated, then for each cap that fits, the resident prefix. `choices` lists what the
  // scan would consider, in order; `reached_compute`: the last choice ties the compute
  // bound, and the scan stops there.
  struct Choice {
    int64_t cap = 0;
    size_t kept = 0;
    SimulationResult sim;
  };
  struct Evaluation {
    absl::Status status;
    std::vector<NodeId> order;
    int64_t peak = 0;  // S_k's own peak (no residents, no buckets)
    bool fits = false;
    std::vector<Choice> choices;
    bool reached_compute = false;
  };
  auto evaluate = [&](int k, Evaluation* e) {
    e->order = Candidate(base, position, gathers, moved, k);
    absl::StatusOr<SimulationResult> sim = run(e->order, {}, 0);
    if (!sim.ok()) {
      e->status = sim.status();
      return;
    }
    e->peak = sim->peak_memory_bytes;
    e->fits = !memory_limit || sim->peak_memory_bytes <= *memory_limit;
    if (!e->fits) return;
    for (int64_t cap : caps) {
      // This candidate with reduce-scatters bucketed at `cap` (0: one per gradient).
      Choice c;
      c.cap = cap;
      c.sim = *sim;
      if (cap > 0) {
        absl::StatusOr<SimulationResult> bucketed = run(e->order, {}, cap);
        if (!bucketed.ok()) {
          e->status = bucketed.status();
          return;
        }
        if (memory_limit && bucketed->peak_memory_bytes > *memory_limit) continue;
        c.sim = *bucketed;
      }
      // Residents: the longest ranking prefix that fits the memory left over and keeps the
      // simulated peak within the budget (a resident parameter adds at most its bytes to
      // any instant, so the first guess usually fits; else binary search).
      const int64_t left = memory_limit ? *memory_limit - c.sim.peak_memory_bytes : INT64_MAX;
      const size_t m = std::upper_bound(prefix_bytes.begin(), prefix_bytes.end(), left) -
                       prefix_bytes.begin() - 1;
      size_t lo = 0, hi = m;  // prefix lo is known to fit
      bool first_try = true;
      while (hi > lo) {
        const size_t n = first_try ? hi : lo + (hi - lo + 1) / 2;
        first_try = false;
        absl::StatusOr<SimulationResult> with =
            run(e->order, absl::MakeConstSpan(ranked_ds.data(), n), cap);
        if (!with.ok()) {
          e->status = with.status();
          return;
        }
        if (!memory_limit || with->peak_memory_bytes <= *memory_limit) {
          lo = n;
          c.kept = n;
          c.sim = *with;
        } else {
          hi = n - 1;
        }
      }
      e->choices.push_back(std::move(c));
      // Nothing beats the total compute time (the same for every candidate, resident set
      // and bucketing): the scan stops at the first choice that reaches it. Still monotone
      // in the budget: a larger budget admits this candidate and cap with at least these
      // residents.
      if (e->choices.back().sim.step_time_s <= e->choices.back().sim.compute_s * (1 + 1e-9)) {
        e->reached_compute = true;
        return;
      }
    }
  };

  // The scan, in k order, on candidates evaluated a batch at a time on every core (a large
  // graph's simulations dominate; a batch wastes at most the candidates after a stop).
  const size_t batch =
      g.size() < 20000 ? 1 : std::max<size_t>(1, std::min(4u, std::thread::hardware_concurrency()));
  bool stop = false;
  // S_0 alone first: with memory to spare it often ends the scan (all resident).
  for (size_t first = 0, n = 1; first < ks.size() && !stop; first += n, n = batch) {
    n = std::min(n, ks.size() - first);
    std::vector<Evaluation> evals(n);
    std::vector<std::thread> pool;
    for (size_t i = 1; i < n; ++i) pool.emplace_back(evaluate, ks[first + i], &evals[i]);
    evaluate(ks[first], &evals[0]);
    for (std::thread& t : pool) t.join();
    for (size_t i = 0; i < n && !stop; ++i) {
      Evaluation& e = evals[i];
      const int k = ks[first + i];
      if (!e.status.ok()) return e.status;
      if (e.peak < smallest_peak) {
        smallest_peak = e.peak;
        smallest_order = e.order;
        smallest_k = k;
      }
      // Stop at the first candidate that does not fit: the candidates examined are then the
      // longest fitting prefix of the k sequence, which only grows with the budget (so the
      // result stays monotone in it), and a tight budget costs a few simulations, not all.
      if (!e.fits) {
        stop = true;
        break;
      }
      for (const Choice& c : e.choices) {
        if (!have_best || c.sim.step_time_s < best.step_time_s) {
          have_best = true;
          best.order = e.order;
          best.lookahead = k;
          best.resident.assign(ranked_ds.begin(), ranked_ds.begin() + c.kept);
          best.reduce_bucket_bytes = c.cap;
          best.peak_memory_bytes = c.sim.peak_memory_bytes;
          best.step_time_s = c.sim.step_time_s;
        }
      }
      if (e.reached_compute) stop = true;
    }
  }
  if (!have_best) {
    LookaheadResult r;
    r.feasible = false;
    r.min_feasible_bytes = smallest_peak;
    r.order = std::move(smallest_order);
    r.lookahead = smallest_k;
    absl::StatusOr<SimulationResult> sim = simulator.Run(r.order, /*record=*/false);
    if (!sim.ok()) return sim.status();
    r.peak_memory_bytes = sim->peak_memory_bytes;
    r.step_time_s = sim->step_time_s;
    return r;
  }
  return best;
}

}  // namespace overlap
