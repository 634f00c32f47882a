#include "schedule/step_plan.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "graph/status_macros.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// Bytes gathered per ds_id: the largest allgather of it; `persistent_only`: only persistent
// allgathers count.
absl::flat_hash_map<int64_t, int64_t> GatheredBytes(const Graph& g, bool persistent_only) {
  absl::flat_hash_map<int64_t, int64_t> bytes;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (!IsAllgather(n) || (persistent_only && !IsPersistentAllgather(n))) continue;
    int64_t& b = bytes[DsId(n)];
    b = std::max(b, SizeOf(n));
  }
  return bytes;
}

// The step's residents: persistent in either graph, held for the whole step. Each graph's own
// simulation counts the ones it holds persistent; `only_forward` (only the forward gathers
// them) are added to the backward's peak, `only_backward` to the forward's.
struct StepResidents {
  int64_t count = 0, bytes = 0, only_forward = 0, only_backward = 0;
};
StepResidents Residents(const Graph& forward, const Graph& backward) {
  const absl::flat_hash_map<int64_t, int64_t> f = GatheredBytes(forward, true);
  const absl::flat_hash_map<int64_t, int64_t> b = GatheredBytes(backward, true);
  std::map<int64_t, int64_t> all(f.begin(), f.end());
  for (const auto& [ds, bytes] : b) all[ds] = std::max(all[ds], bytes);
  StepResidents r;
  for (const auto& [ds, bytes] : all) {
    r.bytes += bytes;
    ++r.count;
    if (!f.contains(ds)) r.only_backward += bytes;
    if (!b.contains(ds)) r.only_forward += bytes;
  }
  return r;
}

bool Fits(const std::optional<int64_t>& budget, int64_t peak) { return !budget || peak <= *budget; }

// Both graphs of one evaluation, final, with what ours decided in each.
struct Evaluated {
  Graph forward, backward;
  ScheduleReport forward_report, backward_report;
  StepCandidate row;
};

}  // namespace

absl::StatusOr<StepSimulation> SimulateStep(const Graph& forward, const Graph& backward,
                                            const CollectiveModel& model, bool record_trace) {
  SimulationOptions o;
  o.record_trace = record_trace;
  StepSimulation s;
  OVERLAP_ASSIGN_OR_RETURN(s.forward, Simulator(forward, model).Run(forward.OrderVector(), o));
  OVERLAP_ASSIGN_OR_RETURN(s.backward, Simulator(backward, model).Run(backward.OrderVector(), o));
  const StepResidents r = Residents(forward, backward);
  StepFigures& x = s.figures;
  x.resident_bytes = r.bytes;
  x.residents = r.count;
  x.forward_peak_bytes = s.forward.peak_memory_bytes + r.only_backward;
  x.backward_peak_bytes = s.backward.peak_memory_bytes + r.only_forward;
  x.peak_memory_bytes = std::max(x.forward_peak_bytes, x.backward_peak_bytes);
  x.forward_time_s = s.forward.step_time_s;
  x.backward_time_s = s.backward.step_time_s;
  x.step_time_s = x.forward_time_s + x.backward_time_s;
  x.compute_s = s.forward.compute_s + s.backward.compute_s;
  x.comm_s = s.forward.comm_s + s.backward.comm_s;
  x.host_s = s.forward.host_s + s.backward.host_s;
  x.exposed_comm_s = std::max(0.0, x.step_time_s - x.compute_s);
  return s;
}

std::string StepChromeTraceJson(const Graph& forward, const Graph& backward,
                                const StepSimulation& s) {
  const StepFigures& x = s.figures;
  TracePart f;
  f.graph = &forward;
  f.result = &s.forward;
  f.extra_bytes = x.forward_peak_bytes - s.forward.peak_memory_bytes;
  f.label = "forward";
  TracePart b;
  b.graph = &backward;
  b.result = &s.backward;
  b.offset_s = x.forward_time_s;
  b.extra_bytes = x.backward_peak_bytes - s.backward.peak_memory_bytes;
  b.label = "backward";
  return ChromeTraceJson({f, b});
}

namespace {

class StepSearch {
 public:
  StepSearch(const Graph& forward, const Graph& backward, const StepPlanOptions& options)
      : forward_(forward), backward_(backward), options_(options) {}

  absl::StatusOr<StepPlan> Run() {
    Rank();
    StepPlan plan;
    plan.algorithm = "lookahead";
    OVERLAP_ASSIGN_OR_RETURN(const Evaluated* none, Evaluate(0));
    if (!none->row.fits) {
      // Nothing fits even without residents: the graphs in ours' smallest-peak orders, and
      // the smallest budget at which each graph alone would fit.
      int64_t smallest = 0;
      for (const Graph* g : {&forward_, &backward_}) {
        Graph copy = *g;
        SchedulerOptions so = PerGraph(int64_t{0});
        OVERLAP_ASSIGN_OR_RETURN(ScheduleReport r, RunScheduler("lookahead", &copy, so));
        smallest = std::max(smallest, r.lookahead ? r.lookahead->min_feasible_bytes
                                                  : r.simulation.peak_memory_bytes);
      }
      plan.fits = false;
      plan.min_feasible_bytes = smallest;
      return Finish(0, std::move(plan));
    }
    // The longest prefix whose bytes alone fit, then the longest that fits (binary search,
    // the longest first), then prefixes spread below it.
    size_t hi = ranked_.size();
    if (options_.budget_bytes) {
      hi = std::upper_bound(prefix_bytes_.begin(), prefix_bytes_.end(), *options_.budget_bytes) -
           prefix_bytes_.begin() - 1;
    }
    size_t lo = 0;
    bool first_try = true;
    while (hi > lo) {
      const size_t n = first_try ? hi : lo + (hi - lo + 1) / 2;
      first_try = false;
      OVERLAP_ASSIGN_OR_RETURN(const Evaluated* e, Evaluate(n));
      if (e->row.fits) {
        lo = n;
      } else {
        hi = n - 1;
      }
    }
    for (int i = 1; i <= options_.resident_steps && lo > 0; ++i) {
      OVERLAP_RETURN_IF_ERROR(Evaluate(lo * i / (options_.resident_steps + 1)).status());
    }
    // The fastest step that fits; ties: fewer residents (the map is in ascending n).
    size_t best = 0;
    for (const auto& [n, e] : evaluated_) {
      if (e->row.fits &&
          e->row.figures.step_time_s < evaluated_.at(best)->row.figures.step_time_s) {
        best = n;
      }
    }
    return Finish(best, std::move(plan));
  }

  Graph& forward_result() { return result_forward_; }
  Graph& backward_result() { return result_backward_; }

 private:
  // Parameters the backward gathers, by allgather time saved per byte held (the backward's
  // gathers a resident removes), ties by ds_id.
  void Rank() {
    const absl::flat_hash_map<int64_t, int64_t> fb = GatheredBytes(forward_, false);
    absl::flat_hash_map<int64_t, double> saved;
    absl::flat_hash_map<int64_t, int64_t> bytes;
    for (NodeId id : backward_.order()) {
      const Node& n = backward_.node(id);
      if (!IsAllgather(n) || IsPersistentAllgather(n) || !HasDsId(n)) continue;
      const int64_t ds = DsId(n);
      if (ds < 0 || ds >= static_cast<int64_t>(backward_.params().size())) continue;
      saved[ds] += options_.collectives.Allgather(SizeOf(n));
      int64_t& b = bytes[ds];
      b = std::max(b, SizeOf(n));
    }
    std::vector<ResidentChoice> ranking;
    for (const auto& [ds, b] : bytes) {
      auto it = fb.find(ds);
      ranking.push_back({ds, std::max(b, it == fb.end() ? 0 : it->second), saved[ds]});
    }
    RankResidents(std::move(ranking), &ranked_, &prefix_bytes_);
  }

  SchedulerOptions PerGraph(std::optional<int64_t> budget) const {
    SchedulerOptions so;
    so.collectives = options_.collectives;
    so.record_trace = false;
    so.lookahead = options_.lookahead;
    so.lookahead.keep_residents = false;
    so.lookahead.budget_bytes = budget;
    return so;
  }

  // Both graphs with the first n ranked parameters resident, each scheduled by ours under
  // the step budget less the residents only the other graph gathers. Memoized.
  absl::StatusOr<const Evaluated*> Evaluate(size_t n) {
    auto it = evaluated_.find(n);
    if (it != evaluated_.end()) return it->second.get();
    auto e = std::make_unique<Evaluated>();
    e->forward = forward_;
    e->backward = backward_;
    const absl::Span<const int64_t> resident(ranked_.data(), n);
    OVERLAP_RETURN_IF_ERROR(MakeResident(&e->forward, resident));
    OVERLAP_RETURN_IF_ERROR(MakeResident(&e->backward, resident));
    const StepResidents r = Residents(e->forward, e->backward);
    auto less = [&](int64_t extra) -> std::optional<int64_t> {
      if (!options_.budget_bytes) return std::nullopt;
      return std::max<int64_t>(0, *options_.budget_bytes - extra);
    };
    OVERLAP_ASSIGN_OR_RETURN(
        e->forward_report, RunScheduler("lookahead", &e->forward, PerGraph(less(r.only_backward))));
    OVERLAP_ASSIGN_OR_RETURN(e->backward_report, RunScheduler("lookahead", &e->backward,
                                                              PerGraph(less(r.only_forward))));
    OVERLAP_ASSIGN_OR_RETURN(const StepSimulation s,
                             SimulateStep(e->forward, e->backward, options_.collectives));
    e->row.residents = static_cast<int64_t>(n);
    e->row.resident_bytes = s.figures.resident_bytes;
    e->row.figures = s.figures;
    e->row.fits = Fits(options_.budget_bytes, s.figures.peak_memory_bytes);
    const Evaluated* out = e.get();
    evaluated_.emplace(n, std::move(e));
    order_.push_back(n);
    return out;
  }

  absl::StatusOr<StepPlan> Finish(size_t n, StepPlan plan) {
    Evaluated& e = *evaluated_.at(n);
    plan.resident.assign(ranked_.begin(), ranked_.begin() + n);
    if (e.backward_report.lookahead) {
      plan.reduce_bucket_bytes = e.backward_report.lookahead->reduce_bucket_bytes;
      plan.backward_lookahead = e.backward_report.lookahead->lookahead;
    }
    if (e.forward_report.lookahead) plan.forward_lookahead = e.forward_report.lookahead->lookahead;
    for (size_t k : order_) plan.candidates.push_back(evaluated_.at(k)->row);
    result_forward_ = std::move(e.forward);
    result_backward_ = std::move(e.backward);
    return plan;
  }

  const Graph& forward_;
  const Graph& backward_;
  const StepPlanOptions& options_;
  std::vector<int64_t> ranked_;
  std::vector<int64_t> prefix_bytes_;
  std::map<size_t, std::unique_ptr<Evaluated>> evaluated_;
  std::vector<size_t> order_;  // evaluation order, for the explanation
  Graph result_forward_, result_backward_;
};

}  // namespace

namespace {

// A memory lever for one saved group: recompute it in the backward, or keep it in host
// memory between the graphs. `seconds` is what it costs: the recomputing nodes' device time,
// or the copies' host-link time both ways.
struct Lever {
  enum Kind { kRecompute, kOffload, kWaitReductions } kind = kRecompute;
  std::string name;
  int64_t bytes = 0;
  double seconds = 0;
  RecomputeCandidate recompute;
  OffloadCandidate offload;
};

// Each saved group's cheaper lever (recomputation on a tie), cheapest first: bytes freed per
// second (those of no time first).
std::vector<Lever> RankLevers(const Graph& forward, const Graph& backward,
                              const StepPlanOptions& options) {
  std::vector<Lever> levers;
  absl::flat_hash_map<std::string, size_t> by_name;
  if (options.recompute) {
    for (const RecomputeCandidate& c : RecomputeCandidates(forward, backward)) {
      Lever l;
      l.kind = Lever::kRecompute;
      l.name = c.name;
      l.bytes = c.bytes;
      l.seconds = c.seconds;
      l.recompute = c;
      by_name[c.name] = levers.size();
      levers.push_back(std::move(l));
    }
  }
  if (options.offload) {
    for (const OffloadCandidate& c : OffloadCandidates(forward, backward)) {
      Lever l;
      l.kind = Lever::kOffload;
      l.name = c.name;
      l.bytes = c.bytes;
      l.seconds = 2 * options.collectives.HostCopy(c.copy_bytes);
      l.offload = c;
      auto it = by_name.find(c.name);
      if (it == by_name.end()) {
        by_name[c.name] = levers.size();
        levers.push_back(std::move(l));
      } else if (l.seconds < levers[it->second].seconds) {
        levers[it->second] = std::move(l);
      }
    }
  }
  std::stable_sort(levers.begin(), levers.end(), [](const Lever& x, const Lever& y) {
    // bytes / seconds, compared without dividing (0 seconds first).
    return static_cast<double>(x.bytes) * y.seconds > static_cast<double>(y.bytes) * x.seconds;
  });
  // Last, the one that costs the most time: compute waits for each reduce-scatter before the
  // next gather, so gradients and gathered parameters do not meet (what bounds a step whose
  // parameters dominate, such as mlp's).
  if (options.wait_for_reductions) {
    Lever l;
    l.kind = Lever::kWaitReductions;
    l.name = "(every reduce-scatter)";
    levers.push_back(std::move(l));
  }
  return levers;
}

// A plan of the pair with its first m levers applied.
struct Levered {
  StepPlan plan;
  Graph forward, backward;
};

absl::StatusOr<Levered> PlanWithLevers(const Graph& forward, const Graph& backward,
                                       const std::vector<Lever>& ranked, size_t m,
                                       const StepPlanOptions& options) {
  Levered r;
  r.forward = forward;
  r.backward = backward;
  std::vector<std::string> recompute, offload;
  bool wait = false;
  for (size_t i = 0; i < m; ++i) {
    if (ranked[i].kind == Lever::kWaitReductions) {
      wait = true;
    } else {
      (ranked[i].kind == Lever::kRecompute ? recompute : offload).push_back(ranked[i].name);
    }
  }
  OVERLAP_RETURN_IF_ERROR(RecomputeSaved(&r.forward, &r.backward, recompute).status());
  OVERLAP_RETURN_IF_ERROR(OffloadSaved(&r.forward, &r.backward, offload).status());
  int64_t waits = 0;
  if (wait) {
    OVERLAP_ASSIGN_OR_RETURN(waits, AddReduceWaits(&r.backward));
  }
  StepSearch search(r.forward, r.backward, options);
  OVERLAP_ASSIGN_OR_RETURN(r.plan, search.Run());
  r.plan.reduce_waits = waits;
  for (size_t i = 0; i < m; ++i) {
    if (ranked[i].kind == Lever::kRecompute) {
      r.plan.recomputed.push_back(ranked[i].recompute);
    } else if (ranked[i].kind == Lever::kOffload) {
      r.plan.offloaded.push_back(ranked[i].offload);
    }
  }
  r.forward = std::move(search.forward_result());
  r.backward = std::move(search.backward_result());
  return r;
}

// Below the prefetch floor: the fewest levers (cheapest first, RankLevers) that make the
// step fit, found by doubling then bisection (more levers never hold more). When even all do
// not fit, the plan with all of them if its smallest feasible budget is lower.
absl::Status PullLevers(const Graph& forward, const Graph& backward, const StepPlanOptions& options,
                        StepPlan* plan, Graph* f, Graph* b) {
  const std::vector<Lever> ranked = RankLevers(forward, backward, options);
  if (ranked.empty()) return absl::OkStatus();
  const size_t c = ranked.size();
  std::optional<Levered> fit;
  size_t lo = 0, hi = 1;  // lo: known not to fit
  while (true) {
    hi = std::min(hi, c);
    OVERLAP_ASSIGN_OR_RETURN(Levered r, PlanWithLevers(forward, backward, ranked, hi, options));
    if (r.plan.fits) {
      fit = std::move(r);
      break;
    }
    if (hi == c) {
      if (r.plan.min_feasible_bytes < plan->min_feasible_bytes) {
        *plan = std::move(r.plan);
        *f = std::move(r.forward);
        *b = std::move(r.backward);
      }
      return absl::OkStatus();
    }
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    OVERLAP_ASSIGN_OR_RETURN(Levered r, PlanWithLevers(forward, backward, ranked, mid, options));
    if (r.plan.fits) {
      hi = mid;
      fit = std::move(r);
    } else {
      lo = mid;
    }
  }
  *plan = std::move(fit->plan);
  *f = std::move(fit->forward);
  *b = std::move(fit->backward);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepPlan> PlanStep(absl::string_view algorithm, Graph* forward, Graph* backward,
                                  const StepPlanOptions& options) {
  OVERLAP_ASSIGN_OR_RETURN(const SchedulerEntry* entry, FindScheduler(algorithm));
  StepPlan plan;
  if (entry->honours_budget) {
    StepSearch search(*forward, *backward, options);
    OVERLAP_ASSIGN_OR_RETURN(plan, search.Run());
    Graph f = std::move(search.forward_result());
    Graph b = std::move(search.backward_result());
    if (!plan.fits && (options.recompute || options.offload || options.wait_for_reductions)) {
      OVERLAP_RETURN_IF_ERROR(PullLevers(*forward, *backward, options, &plan, &f, &b));
    }
    *forward = std::move(f);
    *backward = std::move(b);
  } else {
    Graph f = *forward, b = *backward;
    SchedulerOptions so;
    so.collectives = options.collectives;
    so.record_trace = false;
    OVERLAP_RETURN_IF_ERROR(RunScheduler(entry->name, &f, so).status());
    OVERLAP_RETURN_IF_ERROR(RunScheduler(entry->name, &b, so).status());
    *forward = std::move(f);
    *backward = std::move(b);
  }
  plan.algorithm = std::string(entry->name);
  OVERLAP_ASSIGN_OR_RETURN(plan.simulation, SimulateStep(*forward, *backward, options.collectives,
                                                         options.record_trace));
  if (!entry->honours_budget || plan.fits) {
    plan.fits = Fits(options.budget_bytes, plan.simulation.figures.peak_memory_bytes);
  }
  return plan;
}

}  // namespace overlap
