#include "schedule/lookahead_prefetch.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "graph/errors.h"
#include "graph/status_macros.h"
#include "schedule/fast_free.h"
#include "schedule/host_copies.h"
#include "schedule/list_schedule.h"
#include "schedule/simple_prefetch.h"
#include "schedule/simulator.h"
#include "schedule/zero3_ops.h"

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

// One candidate's evaluation: S_k simulated, then for each cap that fits, the resident
// prefix. `rows` are the choices simulated, in order (the explanation); `choices` index the
// rows that fit (what the scan compares); `reached_compute`: the last choice ties the
// compute bound, and the scan stops there.
struct Evaluation {
  absl::Status status;
  absl::string_view base = kPrefetchBase;  // where the order came from
  std::vector<NodeId> order;
  int64_t peak = 0;  // S_k's own peak (no residents, no buckets)
  bool fits = false;
  std::vector<LookaheadCandidate> rows;
  std::vector<size_t> choices;
  bool reached_compute = false;
  // Before its host copies were placed (host_copies.h); empty when the graph has none.
  std::vector<NodeId> unplaced;
};

// The search over candidates S_k of one graph: what depends on the graph alone is computed
// once in the constructor (named steps below); Run() scans the candidates.
class LookaheadSearch {
 public:
  LookaheadSearch(const Graph& g, const LookaheadOptions& options, const CollectiveModel& model)
      : g_(g), options_(options), model_(model), simulator_(g, model) {}

  absl::StatusOr<LookaheadResult> Run() {
    FindGathers();
    ChooseLookaheads();
    RankResidents();
    ChooseReduceCaps();
    return Scan();
  }

 private:
  // The gathers (allgather, wait, first reader of the wait), in the order their parameters
  // are first needed, and whether every candidate is topological by construction (true
  // for graphs from our insertion: placeholders first, each wait read by someone, each
  // allgather's only inputs placeholders and read by its wait alone). Then candidates skip
  // the simulator's O(N) order check; otherwise (hand-written dc ops) each is checked.
  void FindGathers() {
    base_ = g_.OrderVector();
    host_copies_ = HasHostCopies(g_);
    clean_ = !host_copies_;  // placed host copies: each candidate is checked
    position_.assign(g_.id_bound(), 0);
    for (size_t i = 0; i < base_.size(); ++i) position_[base_[i]] = static_cast<int64_t>(i);
    moved_.assign(g_.id_bound(), 0);
    for (NodeId id : base_) {
      const Node& n = g_.node(id);
      if (!IsWait(n) || n.inputs().empty()) continue;
      const NodeId ag = n.inputs()[0];
      if (!IsAllgather(g_.node(ag)) || moved_[ag]) continue;
      NodeId first = kNoNode;
      for (NodeId u : n.users()) {
        if (first == kNoNode || position_[u] < position_[first]) first = u;
      }
      gathers_.push_back({ag, id, first});
      moved_[ag] = 1;
      moved_[id] = 1;
    }
    bool seen_other = false;
    for (NodeId id : base_) {
      const bool ph = g_.node(id).op() == Op::kPlaceholder;
      if (ph && seen_other) clean_ = false;
      seen_other = seen_other || !ph;
    }
    for (const Gather& gj : gathers_) {
      const Node& ag = g_.node(gj.allgather);
      clean_ = clean_ && gj.first_use != kNoNode && ag.users().size() == 1 &&
               g_.node(gj.wait).inputs().size() == 1;
      for (NodeId in : ag.inputs()) clean_ = clean_ && g_.node(in).op() == Op::kPlaceholder;
    }
    std::stable_sort(gathers_.begin(), gathers_.end(), [&](const Gather& a, const Gather& b) {
      const int64_t pa = a.first_use == kNoNode ? INT64_MAX : position_[a.first_use];
      const int64_t pb = b.first_use == kNoNode ? INT64_MAX : position_[b.first_use];
      return pa < pb;
    });
  }

  // k = 0, 1, then about options.k_ratio apart, up to the in-flight cap or the number of
  // gathers.
  void ChooseLookaheads() {
    ks_ = {0};
    const double top = options_.max_in_flight
                           ? std::min<double>(*options_.max_in_flight, gathers_.size())
                           : static_cast<double>(gathers_.size());
    const double ratio =
        g_.size() > options_.large_graph_nodes ? options_.large_graph_k_ratio : options_.k_ratio;
    for (double k = 1; k <= top; k *= ratio) {
      const int ki = static_cast<int>(std::lround(k));
      if (ki != ks_.back() && ki <= top) ks_.push_back(ki);
    }
  }

  // Selective unsharding: which parameters to keep resident when a candidate leaves memory
  // over. Keeping one saves its whole allgather; ranked by time saved per byte held (the
  // latency term makes small parameters the best buys), ties by ds_id.
  void RankResidents() {
    prefix_bytes_ = {0};
    if (!options_.keep_residents) return;
    std::vector<ResidentChoice> ranking;
    for (const Gather& gj : gathers_) {
      const Node& ag = g_.node(gj.allgather);
      // Only a ds_id that indexes the parameter table names a parameter to keep.
      const int64_t ds = DsId(ag);
      if (IsPersistentAllgather(ag) || !HasDsId(ag) || ds < 0 ||
          ds >= static_cast<int64_t>(g_.params().size())) {
        continue;
      }
      // In the forward step a resident is refreshed every step (simulator.h): its
      // allgather still runs, only at the start, while its bytes are held throughout. That
      // is a prefetch S_k already offers without the memory, so forward graphs keep none.
      if (!InBackwardGraph(ag)) continue;
      ranking.push_back({DsId(ag), SizeOf(ag), model_.Allgather(SizeOf(ag))});
    }
    overlap::RankResidents(std::move(ranking), &ranked_ds_, &prefix_bytes_);
  }

  // Reduce-scatter bucket caps tried: a bucket is one collective, one latency, but holds its
  // gradients until the last one is reduced. Only graphs with reduce_grads have any.
  void ChooseReduceCaps() {
    caps_ = {0};
    for (NodeId id : base_) {
      if (IsReduce(g_.node(id))) {
        caps_ = options_.reduce_bucket_caps;
        if (caps_.empty()) caps_ = {0};
        return;
      }
    }
  }

  absl::StatusOr<SimulationResult> Simulate(absl::Span<const NodeId> order,
                                            absl::Span<const int64_t> resident, int64_t cap) const {
    SimulationOptions o;
    o.record_trace = false;
    o.resident = resident;
    o.reduce_bucket_bytes = cap;
    o.check_order = !clean_;
    absl::StatusOr<SimulationResult> r = simulator_.Run(order, o);
    if (!r.ok() && o.check_order && IsBadInput(r.status())) {
      // The model was validated up front, so this is the order check: a candidate that is
      // not a schedule (hand-written dc ops whose dependencies, say through kwargs, the
      // prefetch moves cannot see).
      return UnsupportedError(absl::StrCat("lookahead: ", r.status().message()));
    }
    return r;
  }

  bool Fits(int64_t peak) const { return !options_.budget_bytes || peak <= *options_.budget_bytes; }

  static LookaheadCandidate Row(absl::string_view base, int k, int64_t cap, size_t kept,
                                const SimulationResult& sim) {
    LookaheadCandidate c;
    c.base = base;
    c.k = k;
    c.reduce_bucket_bytes = cap;
    c.residents = static_cast<int64_t>(kept);
    c.peak_memory_bytes = sim.peak_memory_bytes;
    c.step_time_s = sim.step_time_s;
    c.verdict = CandidateVerdict::kSlower;  // until the scan picks one
    return c;
  }

  // The longest ranking prefix that fits the memory left over after `sim` and keeps the
  // simulated peak within the budget (a resident parameter adds at most its bytes to any
  // instant, so the first guess usually fits; else binary search). Every trial is a row;
  // the best fitting prefix is the choice (the one with none when nothing fits). In a
  // backward graph a resident moves nothing, so a longer prefix is never slower; forward
  // graphs rank no residents (RankResidents).
  absl::Status KeepResidents(int k, int64_t cap, const SimulationResult& sim, Evaluation* e) const {
    e->rows.push_back(Row(e->base, k, cap, 0, sim));
    size_t best_row = e->rows.size() - 1;  // the prefix known to fit, until a longer one does
    const int64_t left =
        options_.budget_bytes ? *options_.budget_bytes - sim.peak_memory_bytes : INT64_MAX;
    const size_t m = std::upper_bound(prefix_bytes_.begin(), prefix_bytes_.end(), left) -
                     prefix_bytes_.begin() - 1;
    size_t lo = 0, hi = m;  // prefix lo is known to fit
    bool first_try = true;
    while (hi > lo) {
      const size_t n = first_try ? hi : lo + (hi - lo + 1) / 2;
      first_try = false;
      OVERLAP_ASSIGN_OR_RETURN(SimulationResult with,
                               Simulate(e->order, absl::MakeConstSpan(ranked_ds_.data(), n), cap));
      e->rows.push_back(Row(e->base, k, cap, n, with));
      if (Fits(with.peak_memory_bytes)) {
        lo = n;
        e->rows[best_row].verdict = CandidateVerdict::kSuperseded;
        best_row = e->rows.size() - 1;
      } else {
        e->rows.back().verdict = CandidateVerdict::kOverBudget;
        hi = n - 1;
      }
    }
    e->choices.push_back(best_row);
    if (AtComputeBound(e->rows[best_row].step_time_s, sim.compute_s)) e->reached_compute = true;
    return absl::OkStatus();
  }

  // Nothing beats the total compute time (the same for every candidate, resident set and
  // bucketing): the scan stops at the first choice that reaches it. Still monotone in the
  // budget: a larger budget admits this choice too.
  bool AtComputeBound(double step_s, double compute_s) const {
    return step_s <= compute_s * (1 + options_.compute_bound_tolerance);
  }

  // Evaluates S_k on its own (so candidates can be evaluated in parallel).
  void Evaluate(int k, Evaluation* e) const {
    e->order = Candidate(base_, position_, gathers_, moved_, k);
    if (host_copies_) {
      e->unplaced = std::move(e->order);
      e->order = PlaceHostCopies(g_, e->unplaced, model_, &simulator_);
    }
    e->status = EvaluateOrder(k, e);
    ReloadJustInTimeIfOver(k, e);
  }

  // An order whose host copies, placed to hide behind compute, do not fit: the same order
  // with each reload just before its wait (memory held only while it is needed, compute
  // stalling for the copies), then also throttled (compute waits for each offload before
  // making the next offloaded value), whichever holds less.
  void ReloadJustInTimeIfOver(int k, Evaluation* e) const {
    for (HostCopyPlacement placement :
         {HostCopyPlacement::kJustInTime, HostCopyPlacement::kThrottled}) {
      if (!e->status.ok() || e->fits || e->unplaced.empty()) return;
      Evaluation other;
      other.base = e->base;
      other.unplaced = e->unplaced;
      other.order = PlaceHostCopies(g_, e->unplaced, model_, nullptr, placement);
      other.status = EvaluateOrder(k, &other);
      if (other.status.ok() && other.peak < e->peak) *e = std::move(other);
    }
  }

  // Evaluates e->order (S_k, or a baseline's order): plain, then each reduce-scatter cap
  // that fits, each with the resident prefixes.
  absl::Status EvaluateOrder(int k, Evaluation* e) const {
    OVERLAP_ASSIGN_OR_RETURN(const SimulationResult plain, Simulate(e->order, {}, 0));
    e->peak = plain.peak_memory_bytes;
    e->fits = Fits(plain.peak_memory_bytes);
    if (!e->fits) {
      e->rows.push_back(Row(e->base, k, 0, 0, plain));
      e->rows.back().verdict = CandidateVerdict::kOverBudget;
      return absl::OkStatus();
    }
    for (int64_t cap : caps_) {
      // This candidate with reduce-scatters bucketed at `cap` (0: one per gradient).
      SimulationResult sim = plain;
      if (cap > 0) {
        OVERLAP_ASSIGN_OR_RETURN(sim, Simulate(e->order, {}, cap));
        if (!Fits(sim.peak_memory_bytes)) {
          e->rows.push_back(Row(e->base, k, cap, 0, sim));
          e->rows.back().verdict = CandidateVerdict::kOverBudget;
          continue;
        }
      }
      OVERLAP_RETURN_IF_ERROR(KeepResidents(k, cap, sim, e));
      if (e->reached_compute) break;
    }
    return absl::OkStatus();
  }

  // The DeepCompile baselines' orders (output node last, as RunScheduler leaves them), each
  // a candidate like S_k: ours then fits every budget some baseline fits, no slower than it.
  // A baseline that cannot order the graph contributes nothing.
  std::vector<Evaluation> BaselineOrders() const {
    std::vector<Evaluation> out;
    if (!options_.baseline_orders) return out;
    struct Named {
      absl::string_view name;
      absl::StatusOr<std::vector<NodeId>> (*schedule)(const Graph&);
    };
    for (const Named& b :
         {Named{"fast_free", &FastFreeSchedule},
          Named{"fast_free_0.19", &FastFreeScheduleDeepSpeed019}, Named{"list", &ListSchedule},
          Named{"simple_prefetch", &SimplePrefetchSchedule}}) {
      // The two without an efficient form (simple_prefetch; fast_free under 0.19's rules,
      // which runs on the bitsets or counts) only on graphs up to baseline_max_nodes.
      if ((b.name == "simple_prefetch" || b.name == "fast_free_0.19") &&
          g_.size() > options_.baseline_max_nodes) {
        continue;
      }
      absl::StatusOr<std::vector<NodeId>> order = b.schedule(g_);
      if (!order.ok()) continue;
      Evaluation e;
      e.base = b.name;
      std::stable_partition(order->begin(), order->end(),
                            [&](NodeId id) { return g_.node(id).op() != Op::kOutput; });
      e.order = *std::move(order);
      if (host_copies_) {
        e.unplaced = std::move(e.order);
        e.order = PlaceHostCopies(g_, e.unplaced, model_, &simulator_);
      }
      out.push_back(std::move(e));
    }
    return out;
  }

  // The scan, in k order, on candidates evaluated a batch at a time (S_0 alone first: with
  // memory to spare it often ends the scan). Stops at the first candidate that does not fit:
  // the candidates examined are then the longest fitting prefix of the k sequence, which
  // only grows with the budget (so the result stays monotone in it), and a tight budget
  // costs a few simulations, not all. Then the baselines' orders.
  absl::StatusOr<LookaheadResult> Scan() {
    const size_t batch =
        g_.size() < options_.parallel_min_nodes
            ? 1
            : std::max<size_t>(
                  1, std::min<size_t>(options_.max_threads, std::thread::hardware_concurrency()));
    bool stop = false;
    for (size_t first = 0, n = 1; first < ks_.size() && !stop; first += n, n = batch) {
      n = std::min(n, ks_.size() - first);
      std::vector<Evaluation> evals(n);
      std::vector<std::thread> pool;
      for (size_t i = 1; i < n; ++i) {
        pool.emplace_back([this, &evals, k = ks_[first + i], i] { Evaluate(k, &evals[i]); });
      }
      Evaluate(ks_[first], &evals[0]);
      for (std::thread& t : pool) t.join();
      for (size_t i = 0; i < n && !stop; ++i) {
        OVERLAP_RETURN_IF_ERROR(evals[i].status);
        stop = Take(ks_[first + i], std::move(evals[i]));
        if (stop && reached_compute_) {
          for (size_t j = first + i + 1; j < ks_.size(); ++j) {
            LookaheadCandidate skipped;
            skipped.k = ks_[j];
            skipped.verdict = CandidateVerdict::kStoppedAtComputeBound;
            rows_.push_back(skipped);
          }
        }
      }
    }
    // The baselines' orders. After the compute bound was reached, only each order as it is
    // (one simulation): a sum of the same times in another order can still be an ulp
    // shorter, and ours must never be slower than a baseline that fits.
    for (Evaluation& e : BaselineOrders()) {
      if (reached_compute_) {
        OVERLAP_ASSIGN_OR_RETURN(const SimulationResult plain, Simulate(e.order, {}, 0));
        e.peak = plain.peak_memory_bytes;
        e.fits = Fits(plain.peak_memory_bytes);
        e.rows.push_back(Row(e.base, 0, 0, 0, plain));
        if (e.fits) {
          e.choices.push_back(0);
        } else {
          e.rows.back().verdict = CandidateVerdict::kOverBudget;
        }
        e.reached_compute = true;
        Take(0, std::move(e));
        continue;
      }
      OVERLAP_RETURN_IF_ERROR(EvaluateOrder(0, &e));
      ReloadJustInTimeIfOver(0, &e);
      OVERLAP_RETURN_IF_ERROR(e.status);
      Take(0, std::move(e));
    }
    return Result();
  }

  // Folds one evaluated order into the scan; whether the S_k scan stops here (it does not
  // fit, or it reached the compute bound).
  bool Take(int k, Evaluation e) {
    if (e.peak < smallest_peak_) {
      smallest_peak_ = e.peak;
      smallest_order_ = e.order;
      smallest_k_ = k;
      smallest_base_ = e.base;
    }
    const size_t offset = rows_.size();
    rows_.insert(rows_.end(), e.rows.begin(), e.rows.end());
    if (!e.fits) return true;
    for (size_t c : e.choices) {
      const LookaheadCandidate& row = rows_[offset + c];
      if (!chosen_row_ || row.step_time_s < rows_[*chosen_row_].step_time_s) {
        chosen_row_ = offset + c;
        chosen_order_ = e.order;
      }
    }
    reached_compute_ = reached_compute_ || e.reached_compute;
    return e.reached_compute;
  }

  absl::StatusOr<LookaheadResult> Result() {
    LookaheadResult r;
    if (!chosen_row_) {
      r.feasible = false;
      r.min_feasible_bytes = smallest_peak_;
      r.order = std::move(smallest_order_);
      r.lookahead = smallest_k_;
      r.base = smallest_base_;
      SimulationOptions o;
      o.record_trace = false;
      OVERLAP_ASSIGN_OR_RETURN(const SimulationResult sim, simulator_.Run(r.order, o));
      r.peak_memory_bytes = sim.peak_memory_bytes;
      r.step_time_s = sim.step_time_s;
      r.candidates = std::move(rows_);
      return r;
    }
    LookaheadCandidate& chosen = rows_[*chosen_row_];
    chosen.verdict = CandidateVerdict::kChosen;
    r.order = std::move(chosen_order_);
    r.lookahead = chosen.k;
    r.base = chosen.base;
    r.resident.assign(ranked_ds_.begin(), ranked_ds_.begin() + chosen.residents);
    r.reduce_bucket_bytes = chosen.reduce_bucket_bytes;
    r.peak_memory_bytes = chosen.peak_memory_bytes;
    r.step_time_s = chosen.step_time_s;
    r.candidates = std::move(rows_);
    return r;
  }

  const Graph& g_;
  const LookaheadOptions& options_;
  const CollectiveModel& model_;
  const Simulator simulator_;  // the graph's part of every simulation, once
  std::vector<NodeId> base_;
  std::vector<int64_t> position_;
  std::vector<Gather> gathers_;
  std::vector<char> moved_;
  bool clean_ = true;
  bool host_copies_ = false;  // the graph has host-memory ops (host_copies.h)
  std::vector<int> ks_;
  std::vector<int64_t> ranked_ds_;
  std::vector<int64_t> prefix_bytes_;
  std::vector<int64_t> caps_;
  // The scan's state.
  std::vector<LookaheadCandidate> rows_;
  std::optional<size_t> chosen_row_;
  std::vector<NodeId> chosen_order_;
  bool reached_compute_ = false;
  int64_t smallest_peak_ = INT64_MAX;
  std::vector<NodeId> smallest_order_;
  int smallest_k_ = 0;
  absl::string_view smallest_base_ = kPrefetchBase;
};

}  // namespace

absl::string_view CandidateVerdictName(CandidateVerdict v) {
  switch (v) {
    case CandidateVerdict::kChosen:
      return "chosen";
    case CandidateVerdict::kSlower:
      return "slower";
    case CandidateVerdict::kSuperseded:
      return "superseded";
    case CandidateVerdict::kOverBudget:
      return "over budget";
    case CandidateVerdict::kStoppedAtComputeBound:
      return "stopped at the compute bound";
  }
  return "?";
}

LookaheadOptions WithBudget(std::optional<int64_t> budget_bytes) {
  LookaheadOptions o;
  o.budget_bytes = budget_bytes;
  return o;
}

absl::Status ValidateLookaheadOptions(const LookaheadOptions& o) {
  if (o.max_in_flight && *o.max_in_flight < 0) {
    return absl::InvalidArgumentError("the in-flight limit must be >= 0");
  }
  if (!(o.k_ratio > 1) || !(o.large_graph_k_ratio > 1) || !std::isfinite(o.k_ratio) ||
      !std::isfinite(o.large_graph_k_ratio)) {
    return absl::InvalidArgumentError("the lookahead ratios must be finite and > 1");
  }
  for (int64_t cap : o.reduce_bucket_caps) {
    if (cap < 0) return absl::InvalidArgumentError("reduce-scatter bucket caps must be >= 0");
  }
  if (!(o.compute_bound_tolerance >= 0)) {
    return absl::InvalidArgumentError("the compute-bound tolerance must be >= 0");
  }
  if (o.max_threads < 1) return absl::InvalidArgumentError("max_threads must be >= 1");
  return absl::OkStatus();
}

void RankResidents(std::vector<ResidentChoice> choices, std::vector<int64_t>* ds,
                   std::vector<int64_t>* prefix_bytes) {
  std::sort(choices.begin(), choices.end(), [](const ResidentChoice& a, const ResidentChoice& b) {
    // saved / bytes, compared without dividing (bytes may be 0: those come first).
    const double lhs = a.saved_s * static_cast<double>(b.bytes);
    const double rhs = b.saved_s * static_cast<double>(a.bytes);
    if (lhs != rhs) return lhs > rhs;
    return a.ds < b.ds;
  });
  ds->clear();
  *prefix_bytes = {0};
  for (const ResidentChoice& c : choices) {
    ds->push_back(c.ds);
    int64_t next = 0;
    if (__builtin_add_overflow(prefix_bytes->back(), c.bytes, &next)) next = INT64_MAX;
    prefix_bytes->push_back(next);
  }
}

absl::StatusOr<LookaheadResult> LookaheadPrefetchSchedule(const Graph& g,
                                                          const LookaheadOptions& options,
                                                          const CollectiveModel& model) {
  OVERLAP_RETURN_IF_ERROR(ValidateLookaheadOptions(options));
  if (!model.Valid()) {
    return absl::InvalidArgumentError(
        "collective model needs world size >= 1, latency >= 0, bandwidth > 0");
  }
  return LookaheadSearch(g, options, model).Run();
}

}  // namespace overlap
