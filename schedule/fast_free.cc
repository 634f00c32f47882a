#include "schedule/fast_free.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/errors.h"
#include "graph/status_macros.h"
#include "schedule/analysis.h"
#include "schedule/fast_free_intervals.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// Fixed-width bitsets over the allgathers, stored contiguously.
class BitRows {
 public:
  BitRows(size_t rows, size_t bits) : words_((bits + 63) / 64), data_(rows * words_, 0) {}
  uint64_t* row(size_t r) { return data_.data() + r * words_; }
  size_t words() const { return words_; }

 private:
  size_t words_;
  std::vector<uint64_t> data_;
};

struct Task {
  NodeId node;
  double free_cost = 0;
  int64_t gather_mem = 0;
  int64_t free_mem = 0;
  int64_t n_gathers = 0;
  std::vector<NodeId> until_g;
  std::vector<NodeId> until_free;
  // Under a gathered-memory budget: each list's simulated peak and final residency.
  int64_t until_g_peak = 0, until_g_live = 0, until_free_peak = 0, until_free_live = 0;
};

// DeepSpeed 0.19's simulation of gathered-parameter residency (`_GatheredParamTracker`):
// an allgather makes its ds_id live at its bytes (a repeated one while live grows it to the
// larger), and the release that completes the ds_id's expected count frees it; the
// expected count is the largest n_users among its releases (1 when absent) or their number,
// whichever is larger. A reduce is no release.
class GatheredResidency {
 public:
  explicit GatheredResidency(const Graph& g) {
    absl::flat_hash_map<int64_t, int64_t> count;
    for (NodeId id : g.order()) {
      const Node& n = g.node(id);
      if (!IsRelease(n) || !HasDsId(n)) continue;
      const int64_t users = NUsers(n) < 0 ? 1 : NUsers(n);
      expected_[DsId(n)] = std::max(expected_[DsId(n)], users);
      ++count[DsId(n)];
    }
    for (const auto& [ds, c] : count) expected_[ds] = std::max(expected_[ds], c);
  }

  // The residency after the committed prefix, advanced by one node.
  struct State {
    absl::flat_hash_map<int64_t, int64_t> live_by_ds;
    absl::flat_hash_map<int64_t, int64_t> seen_by_ds;
    int64_t live = 0;
  };
  void Step(const Node& n, State* s) const {
    if (!HasDsId(n)) return;
    const int64_t ds = DsId(n);
    if (IsAllgather(n)) {
      const int64_t size = SizeOf(n);
      auto [it, added] = s->live_by_ds.try_emplace(ds, size);
      if (added) {
        s->live += size;
      } else if (size > it->second) {
        s->live += size - it->second;
        it->second = size;
      }
      s->seen_by_ds[ds] = 0;
    } else if (IsRelease(n)) {
      auto it = s->live_by_ds.find(ds);
      if (it == s->live_by_ds.end()) return;
      const int64_t seen = s->seen_by_ds[ds] + 1;
      auto e = expected_.find(ds);
      const int64_t users = NUsers(n) < 0 ? 1 : NUsers(n);
      if (seen >= std::max<int64_t>(1, e == expected_.end() ? users : e->second)) {
        s->live -= it->second;
        s->live_by_ds.erase(it);
        s->seen_by_ds.erase(ds);
      } else {
        s->seen_by_ds[ds] = seen;
      }
    }
  }
  // (peak, final residency) of `path` run after `from`, the peak starting at from.live.
  std::pair<int64_t, int64_t> Simulate(const Graph& g, const State& from,
                                       const std::vector<NodeId>& path) const {
    State s = from;
    int64_t peak = s.live;
    for (NodeId id : path) {
      Step(g.node(id), &s);
      peak = std::max(peak, s.live);
    }
    return {peak, s.live};
  }

 private:
  absl::flat_hash_map<int64_t, int64_t> expected_;
};

// The path sets as counts, for graphs whose bitsets would not be small next to the graph:
// how many allgathers each target (an allgather's last use, a reduce, an output item) still
// needs, kept by walking the args-only descendants of each chosen allgather. O(N + E)
// memory; O(descendants) time per allgather, at the start and when it is chosen.
class CountPaths {
 public:
  CountPaths(const Graph& g, const std::vector<NodeId>& ags, const std::vector<NodeId>& last_use,
             const std::vector<NodeId>& reduces,
             const absl::flat_hash_map<NodeId, size_t>& output_row)
      : first_user_(g.id_bound() + 1, 0),
        ag_at_(g.id_bound()),
        reduce_at_(g.id_bound(), -1),
        output_at_(g.id_bound(), -1),
        ag_count_(ags.size(), 0),
        reduce_count_(reduces.size(), 0),
        output_count_(output_row.size(), 0),
        reduce_emptied_(reduces.size(), 0),
        output_emptied_(output_row.size(), 0),
        visit_(g.id_bound(), 0) {
    // Args-only users, as compressed rows (the direction the bitsets propagate in).
    for (NodeId id : g.order()) {
      for (NodeId in : g.node(id).arg_inputs()) ++first_user_[in + 1];
    }
    for (size_t i = 1; i < first_user_.size(); ++i) first_user_[i] += first_user_[i - 1];
    users_.resize(first_user_.back());
    std::vector<int64_t> next(first_user_.begin(), first_user_.end() - 1);
    for (NodeId id : g.order()) {
      for (NodeId in : g.node(id).arg_inputs()) users_[next[in]++] = id;
    }
    for (size_t i = 0; i < ags.size(); ++i) ag_at_[last_use[ags[i]]].push_back(static_cast<int>(i));
    for (size_t r = 0; r < reduces.size(); ++r) reduce_at_[reduces[r]] = static_cast<int>(r);
    for (const auto& [node, row] : output_row) output_at_[node] = static_cast<int>(row);
    for (NodeId ag : ags) Walk(ag, +1);
  }

  int64_t Count(int ag) const { return ag_count_[ag]; }
  // Whether reduce r / output row `row` needs no unchosen allgather.
  bool ReduceEmpty(size_t r) const { return reduce_count_[r] == 0; }
  bool OutputEmpty(size_t row) const { return output_count_[row] == 0; }

  // Takes `chosen` out of every path set; then which reduces / output rows became empty.
  void Choose(NodeId chosen) {
    std::fill(reduce_emptied_.begin(), reduce_emptied_.end(), 0);
    std::fill(output_emptied_.begin(), output_emptied_.end(), 0);
    Walk(chosen, -1);
  }
  bool ReduceEmptied(size_t r) const { return reduce_emptied_[r] != 0; }
  // Whether output row `row` became empty; true once per round (duplicates of an output item
  // are pulled once, as the bitsets do).
  bool TakeOutputEmptied(size_t row) {
    const bool e = output_emptied_[row] != 0;
    output_emptied_[row] = 0;
    return e;
  }

 private:
  // Adds `delta` to the count of every target among `from`'s args-descendants, `from`
  // included (a node is its own ancestor, as in the bitsets).
  void Walk(NodeId from, int delta) {
    ++epoch_;
    stack_.clear();
    stack_.push_back(from);
    visit_[from] = epoch_;
    while (!stack_.empty()) {
      const NodeId v = stack_.back();
      stack_.pop_back();
      for (int i : ag_at_[v]) ag_count_[i] += delta;
      if (reduce_at_[v] >= 0 && (reduce_count_[reduce_at_[v]] += delta) == 0 && delta < 0) {
        reduce_emptied_[reduce_at_[v]] = 1;
      }
      if (output_at_[v] >= 0 && (output_count_[output_at_[v]] += delta) == 0 && delta < 0) {
        output_emptied_[output_at_[v]] = 1;
      }
      for (int64_t k = first_user_[v]; k < first_user_[v + 1]; ++k) {
        const NodeId u = users_[k];
        if (visit_[u] == epoch_) continue;
        visit_[u] = epoch_;
        stack_.push_back(u);
      }
    }
  }

  std::vector<int64_t> first_user_;
  std::vector<NodeId> users_;
  std::vector<std::vector<int>> ag_at_;
  std::vector<int> reduce_at_, output_at_;
  std::vector<int64_t> ag_count_, reduce_count_, output_count_;
  std::vector<char> reduce_emptied_, output_emptied_;
  std::vector<uint32_t> visit_;
  uint32_t epoch_ = 0;
  std::vector<NodeId> stack_;
};

class Scheduler {
 public:
  Scheduler(const Graph& g, const FastFreeOptions& options)
      : g_(g), options_(options), done_(g.id_bound(), 0), overlay_(g.id_bound(), 0), search_(g) {}

  absl::StatusOr<std::vector<NodeId>> Run() {
    OVERLAP_RETURN_IF_ERROR(Classify());
    OVERLAP_RETURN_IF_ERROR(BuildPaths());
    pending_.resize(ags_.size());  // allgather indices, graph order
    for (size_t i = 0; i < ags_.size(); ++i) pending_[i] = static_cast<int>(i);
    while (!pending_.empty()) {
      const Task* best = nullptr;
      bool zero_free = false;
      if (residency_) {
        best = &BudgetedTask(&zero_free);
      } else {
        FindTasks();
        best = &BestTask(&zero_free);
      }
      const std::vector<NodeId>& list = zero_free ? best->until_free : best->until_g;
      for (NodeId n : list) Schedule(n);
      if (options_.rules == FastFreeOptions::Rules::kDeepSpeed019) {
        TakeOutDeepSpeed019(list);
      } else {
        TakeOut(best->node);
      }
    }
    for (NodeId id : g_.order()) {
      if (!done_[id]) Schedule(id);
    }
    OVERLAP_RETURN_IF_ERROR(CheckBaselineOrder(g_, order_, "fast_free"));
    return std::move(order_);
  }

 private:
  // Bounds the memory of the bitsets (path sets and the frontier of ancestor sets).
  static constexpr int64_t kMaxRowBytes = int64_t{4} << 30;
  // Bitsets are used while they take at most this much: linear in the graph (a node of the
  // IR itself takes several hundred bytes), with a floor for small graphs.
  static constexpr double kBitsetBytesPerNode = 64;
  static constexpr double kBitsetFloorBytes = 16 << 20;

  // Schedules the placeholders; finds the last uses, the allgathers (indexed in graph
  // order), the releases by ds_id, the reduces and the output items. Unsupported when an
  // allgather has no last use.
  absl::Status Classify() {
    if (options_.gathered_budget_bytes >= 0) residency_.emplace(g_);
    last_use_ = LastUses(g_);
    ag_index_.assign(g_.id_bound(), -1);
    for (NodeId id : g_.order()) {
      const Node& n = g_.node(id);
      if (n.op() == Op::kPlaceholder) {
        Schedule(id);
        continue;
      }
      if (IsAllgather(n)) {
        ag_index_[id] = static_cast<int>(ags_.size());
        ags_.push_back(id);
      }
      if (IsRelease(n) && HasDsId(n)) releases_[DsId(n)].push_back(id);
      if (IsReduce(n)) reduces_.push_back(id);
    }
    for (NodeId ag : ags_) {
      if (last_use_[ag] == kNoNode) {
        return UnsupportedError(absl::StrCat("allgather \"", g_.node(ag).name(),
                                             "\" has no last use (nobody reads it)"));
      }
    }
    for (NodeId o : FastFreeOutputItems(g_)) {
      outputs_.push_back(o);
      output_row_.emplace(o, output_row_.size());
    }
    return absl::OkStatus();
  }

  // Paths: one row per allgather (the allgathers its last use needs), per reduce, per
  // distinct output item; bounded before anything is allocated.
  // As bitsets while they are small next to the graph (a fraction of what the graph itself
  // takes); otherwise as counts, so memory stays linear in the graph.
  absl::Status BuildPaths() {
    const size_t A = ags_.size();
    W_ = (A + 63) / 64;
    const double path_bytes = 8.0 * W_ * (A + reduces_.size() + output_row_.size());
    counted_ =
        options_.path_sets == FastFreeOptions::PathSets::kCounts ||
        (options_.path_sets == FastFreeOptions::PathSets::kAuto &&
         path_bytes > std::max<double>(kBitsetFloorBytes, kBitsetBytesPerNode * g_.id_bound()));
    if (!counted_ && path_bytes > kMaxRowBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "fast_free: ", A, " allgathers need ", static_cast<int64_t>(path_bytes / (1 << 20)),
          " MiB of path-set bitsets, over the limit of ", kMaxRowBytes >> 20, " MiB"));
    }
    if (counted_) {
      count_paths_.emplace(g_, ags_, last_use_, reduces_, output_row_);
      return absl::OkStatus();
    }
    path_ = BitRows(A, A);
    reduce_path_ = BitRows(reduces_.size(), A);
    output_path_ = BitRows(output_row_.size(), A);
    return FillPaths();
  }

  // The allgathers among each target's args-ancestors (placeholders, the only scheduled
  // nodes at the start, have no ancestors, so this is what requirements would collect),
  // by one forward pass. A node's ancestor row lives only until its last reader has been
  // processed (rows are recycled), so memory follows the graph's width, not its size.
  absl::Status FillPaths() {
    const size_t W = W_;
    // Where each node's row must be copied once it is complete.
    absl::flat_hash_map<NodeId, std::vector<uint64_t*>> copy_to;
    for (size_t i = 0; i < ags_.size(); ++i) copy_to[last_use_[ags_[i]]].push_back(path_.row(i));
    for (size_t i = 0; i < reduces_.size(); ++i) {
      copy_to[reduces_[i]].push_back(reduce_path_.row(i));
    }
    for (const auto& [node, row] : output_row_) copy_to[node].push_back(output_path_.row(row));
    std::vector<int32_t> readers_left(g_.id_bound(), 0);
    for (NodeId id : g_.order()) {
      for (NodeId in : g_.node(id).arg_inputs()) ++readers_left[in];
    }
    std::vector<uint64_t> pool;
    std::vector<size_t> free_slots;
    std::vector<int64_t> slot(g_.id_bound(), -1);
    for (NodeId id : g_.order()) {
      size_t s;
      if (!free_slots.empty()) {
        s = free_slots.back();
        free_slots.pop_back();
        std::fill_n(pool.begin() + s * W, W, 0);
      } else {
        s = W == 0 ? 0 : pool.size() / W;
        if (8.0 * (pool.size() + W) > kMaxRowBytes) {
          return absl::ResourceExhaustedError(
              absl::StrCat("fast_free: the graph is too wide for its ancestor sets (over ",
                           kMaxRowBytes >> 20, " MiB for ", ags_.size(), " allgathers)"));
        }
        pool.resize(pool.size() + W, 0);
      }
      slot[id] = static_cast<int64_t>(s);
      uint64_t* row = pool.data() + s * W;
      for (NodeId in : g_.node(id).arg_inputs()) {
        const uint64_t* from = pool.data() + slot[in] * W;
        for (size_t w = 0; w < W; ++w) row[w] |= from[w];
      }
      if (ag_index_[id] >= 0) row[ag_index_[id] / 64] |= uint64_t{1} << (ag_index_[id] % 64);
      if (auto it = copy_to.find(id); it != copy_to.end()) {
        for (uint64_t* dst : it->second) std::copy_n(row, W, dst);
      }
      for (NodeId in : g_.node(id).arg_inputs()) {
        if (--readers_left[in] == 0) free_slots.push_back(static_cast<size_t>(slot[in]));
      }
      if (readers_left[id] == 0) free_slots.push_back(s);
    }
    return absl::OkStatus();
  }

  // How many unchosen allgathers pending allgather `i`'s last use needs.
  int64_t PathCount(int i) {
    if (counted_) return count_paths_->Count(i);
    const uint64_t* row = path_.row(i);
    int64_t c = 0;
    for (size_t w = 0; w < W_; ++w) c += __builtin_popcountll(row[w]);
    return c;
  }

  // The round's candidates into tasks_: the pending allgathers with the smallest path
  // count, in graph order.
  void FindTasks() {
    int64_t min_count = INT64_MAX;
    counts_.resize(pending_.size());
    for (size_t k = 0; k < pending_.size(); ++k) {
      counts_[k] = PathCount(pending_[k]);
      min_count = std::min(min_count, counts_[k]);
    }
    tasks_.clear();
    for (size_t k = 0; k < pending_.size(); ++k) {
      if (counts_[k] == min_count) tasks_.push_back(MakeTask(ags_[pending_[k]]));
    }
  }

  // The chosen task of tasks_: among those freeing no memory when there are any
  // (*zero_free), by (n_gathers, gather_mem, free_cost, name); otherwise by free_mem first.
  const Task& BestTask(bool* zero_free) const {
    const Task* best = nullptr;
    *zero_free = false;
    for (const Task& t : tasks_) *zero_free |= t.free_mem == 0;
    auto name = [&](const Task& t) -> const std::string& { return g_.node(t.node).name(); };
    for (const Task& t : tasks_) {
      if (*zero_free) {
        if (t.free_mem != 0) continue;
        if (best == nullptr ||
            std::forward_as_tuple(t.n_gathers, t.gather_mem, t.free_cost, name(t)) <
                std::forward_as_tuple(best->n_gathers, best->gather_mem, best->free_cost,
                                      name(*best))) {
          best = &t;
        }
      } else if (best == nullptr ||
                 std::forward_as_tuple(t.free_mem, t.n_gathers, t.gather_mem, t.free_cost,
                                       name(t)) <
                     std::forward_as_tuple(best->free_mem, best->n_gathers, best->gather_mem,
                                           best->free_cost, name(*best))) {
        best = &t;
      }
    }
    return *best;
  }

  // DeepSpeed 0.19's round under a budget (`fast_free_schedule` with `scheduler_budget`):
  // the pending allgathers by path count, tier after ascending tier. In a tier, among the
  // tasks freeing no memory whose until_free list fits, by (n_gathers, gather_mem,
  // free_cost, name), that list (*zero_free); else among those whose until_g list fits, by
  // (free_mem, n_gathers, gather_mem, free_cost, name), that list. When no tier has one,
  // the list of least overage over every tier's tasks: by (overage, peak, final residency,
  // free_mem, n_gathers, gather_mem, free_cost, name, list), where a task freeing no memory
  // offers only its until_free list.
  const Task& BudgetedTask(bool* zero_free) {
    const int64_t budget = options_.gathered_budget_bytes;
    counts_.resize(pending_.size());
    std::vector<int64_t> tiers;
    for (size_t k = 0; k < pending_.size(); ++k) {
      counts_[k] = PathCount(pending_[k]);
      tiers.push_back(counts_[k]);
    }
    std::sort(tiers.begin(), tiers.end());
    tiers.erase(std::unique(tiers.begin(), tiers.end()), tiers.end());
    tasks_.clear();
    auto name = [&](const Task& t) -> const std::string& { return g_.node(t.node).name(); };
    for (int64_t tier : tiers) {
      const size_t first = tasks_.size();
      for (size_t k = 0; k < pending_.size(); ++k) {
        if (counts_[k] != tier) continue;
        Task t = MakeTask(ags_[pending_[k]]);
        std::tie(t.until_g_peak, t.until_g_live) = residency_->Simulate(g_, committed_, t.until_g);
        std::tie(t.until_free_peak, t.until_free_live) =
            residency_->Simulate(g_, committed_, t.until_free);
        tasks_.push_back(std::move(t));
      }
      const Task* best = nullptr;
      for (size_t i = first; i < tasks_.size(); ++i) {
        const Task& t = tasks_[i];
        if (t.free_mem != 0 || t.until_free_peak > budget) continue;
        if (best == nullptr ||
            std::forward_as_tuple(t.n_gathers, t.gather_mem, t.free_cost, name(t)) <
                std::forward_as_tuple(best->n_gathers, best->gather_mem, best->free_cost,
                                      name(*best))) {
          best = &t;
        }
      }
      if (best != nullptr) {
        *zero_free = true;
        return *best;
      }
      for (size_t i = first; i < tasks_.size(); ++i) {
        const Task& t = tasks_[i];
        if (t.until_g_peak > budget) continue;
        if (best == nullptr ||
            std::forward_as_tuple(t.free_mem, t.n_gathers, t.gather_mem, t.free_cost, name(t)) <
                std::forward_as_tuple(best->free_mem, best->n_gathers, best->gather_mem,
                                      best->free_cost, name(*best))) {
          best = &t;
        }
      }
      if (best != nullptr) {
        *zero_free = false;
        return *best;
      }
    }
    // Nothing fits: the least overage. The list's name orders "until_ag" before
    // "until_free", as DeepSpeed's strings do.
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, double,
                           const std::string&, int>;
    const Task* best = nullptr;
    std::optional<Key> best_key;
    for (const Task& t : tasks_) {
      for (int free_list = t.free_mem == 0 ? 1 : 0; free_list <= 1; ++free_list) {
        const int64_t peak = free_list ? t.until_free_peak : t.until_g_peak;
        const int64_t live = free_list ? t.until_free_live : t.until_g_live;
        Key key(std::max<int64_t>(0, peak - budget), peak, live, t.free_mem, t.n_gathers,
                t.gather_mem, t.free_cost, name(t), free_list);
        if (!best_key || key < *best_key) {
          best_key.emplace(key);
          best = &t;
          *zero_free = free_list != 0;
        }
      }
    }
    return *best;
  }

  // Whether row `row` of `rows` held the allgather at (word cw, bit cbit) and, that bit
  // cleared, is now empty (true once per row).
  bool RowEmptied(BitRows& rows, size_t row, size_t cw, uint64_t cbit) const {
    uint64_t* bits = rows.row(row);
    if (!(bits[cw] & cbit)) return false;
    bits[cw] &= ~cbit;
    for (size_t w = 0; w < W_; ++w) {
      if (bits[w]) return false;
    }
    return true;
  }

  // Takes allgather `chosen` out of pending_ and every path set, then schedules the
  // requirements of each reduce and output item whose path set it emptied (reduces first,
  // each group in its order).
  void TakeOut(NodeId chosen) {
    const int ci = ag_index_[chosen];
    pending_.erase(std::find(pending_.begin(), pending_.end(), ci));
    const size_t cw = static_cast<size_t>(ci) / 64;
    const uint64_t cbit = uint64_t{1} << (ci % 64);
    if (counted_) {
      count_paths_->Choose(chosen);
    } else {
      for (int i : pending_) path_.row(i)[cw] &= ~cbit;
    }
    now_.clear();
    for (size_t r = 0; r < reduces_.size(); ++r) {
      if (counted_ ? count_paths_->ReduceEmptied(r) : RowEmptied(reduce_path_, r, cw, cbit)) {
        now_.push_back(reduces_[r]);
      }
    }
    for (NodeId r : now_) ScheduleRequirements(r);
    now_.clear();
    for (NodeId o : outputs_) {
      const size_t row = output_row_.at(o);
      if (counted_ ? count_paths_->TakeOutputEmptied(row)
                   : RowEmptied(output_path_, row, cw, cbit)) {
        now_.push_back(o);
      }
    }
    for (NodeId o : now_) ScheduleRequirements(o);
  }

  // DeepSpeed 0.19's round end: every allgather of the scheduled `list` leaves pending_ and
  // every path set (R2); then every reduce, then every output item, whose set is empty and
  // that is not yet scheduled has its requirements scheduled (R1), each group in its order.
  void TakeOutDeepSpeed019(const std::vector<NodeId>& list) {
    for (NodeId n : list) {
      const int ci = ag_index_[n];
      if (ci < 0) continue;
      auto it = std::find(pending_.begin(), pending_.end(), ci);
      if (it == pending_.end()) continue;
      pending_.erase(it);
      if (counted_) {
        count_paths_->Choose(n);
        continue;
      }
      const size_t cw = static_cast<size_t>(ci) / 64;
      const uint64_t keep = ~(uint64_t{1} << (ci % 64));
      for (int i : pending_) path_.row(i)[cw] &= keep;
      for (size_t r = 0; r < reduces_.size(); ++r) reduce_path_.row(r)[cw] &= keep;
      for (size_t o = 0; o < output_row_.size(); ++o) output_path_.row(o)[cw] &= keep;
    }
    const auto empty = [&](BitRows& rows, size_t row) {
      const uint64_t* bits = rows.row(row);
      for (size_t w = 0; w < W_; ++w) {
        if (bits[w]) return false;
      }
      return true;
    };
    now_.clear();
    for (size_t r = 0; r < reduces_.size(); ++r) {
      if (!done_[reduces_[r]] &&
          (counted_ ? count_paths_->ReduceEmpty(r) : empty(reduce_path_, r))) {
        now_.push_back(reduces_[r]);
      }
    }
    for (NodeId r : now_) ScheduleRequirements(r);
    now_.clear();
    for (NodeId o : outputs_) {
      const size_t row = output_row_.at(o);
      if (!done_[o] && (counted_ ? count_paths_->OutputEmpty(row) : empty(output_path_, row))) {
        now_.push_back(o);
      }
    }
    for (NodeId o : now_) ScheduleRequirements(o);
  }

  void Schedule(NodeId n) {
    order_.push_back(n);
    done_[n] = 1;
    if (residency_) residency_->Step(g_.node(n), &committed_);
  }

  // Whether n counts as done in the current requirement search: scheduled, or marked in
  // the current overlay epoch.
  bool Done(NodeId n) const { return done_[n] || overlay_[n] == overlay_epoch_; }

  // requirements(target, scheduled + overlay), appended to *out; marks what it adds in the
  // overlay when `mark` (so later searches of the round treat them as done).
  void Requirements(NodeId target, bool mark, std::vector<NodeId>* out) {
    search_.Collect(
        target, [&](NodeId n) { return Done(n); },
        [&](NodeId n) {
          if (mark) overlay_[n] = overlay_epoch_;
        },
        out);
  }

  void ScheduleRequirements(NodeId target) {
    ++overlay_epoch_;  // nothing marked: plain requirements(target, scheduled)
    std::vector<NodeId> need;
    Requirements(target, false, &need);
    for (NodeId n : need) Schedule(n);
  }

  Task MakeTask(NodeId ag) {
    Task t;
    t.node = ag;
    ++overlay_epoch_;
    Requirements(ag, true, &t.until_g);
    std::vector<NodeId> free_part;
    Requirements(last_use_[ag], true, &free_part);
    for (NodeId n : free_part) {
      t.free_cost += TimeOf(g_.node(n));
      if (IsAllgather(g_.node(n))) t.free_mem += SizeOf(g_.node(n));
    }
    for (NodeId n : t.until_g) {
      if (IsAllgather(g_.node(n))) t.gather_mem += SizeOf(g_.node(n));
    }
    t.until_free = t.until_g;
    t.until_free.insert(t.until_free.end(), free_part.begin(), free_part.end());
    const Node& agn = g_.node(ag);
    if (HasDsId(agn)) {
      auto it = releases_.find(DsId(agn));
      if (it != releases_.end()) {
        // Everything in until_free is marked, so each search adds only new nodes, and
        // marks them for the next release's search: the reference's "not already in".
        for (NodeId rel : it->second) Requirements(rel, true, &t.until_free);
      }
    }
    for (NodeId n : t.until_free) t.n_gathers += IsAllgather(g_.node(n));
    return t;
  }

  const Graph& g_;
  const FastFreeOptions& options_;
  std::vector<char> done_;
  std::vector<uint32_t> overlay_;
  uint32_t overlay_epoch_ = 1;  // overlay_ starts at 0: nothing marked
  RequirementSearch search_;
  std::vector<NodeId> order_;

  // What Classify finds.
  std::vector<NodeId> last_use_;
  std::vector<int> ag_index_;  // by node: its index among the allgathers, or -1
  std::vector<NodeId> ags_;    // graph order
  absl::flat_hash_map<int64_t, std::vector<NodeId>> releases_;
  std::vector<NodeId> reduces_;
  std::vector<NodeId> outputs_;  // with duplicates, as the reference iterates them
  absl::flat_hash_map<NodeId, size_t> output_row_;

  // The path sets: bitsets of W_ words a row, or counts.
  size_t W_ = 0;
  bool counted_ = false;
  BitRows path_{0, 0}, reduce_path_{0, 0}, output_path_{0, 0};
  std::optional<CountPaths> count_paths_;

  // Under a budget: the residency model and the committed prefix's residency.
  std::optional<GatheredResidency> residency_;
  GatheredResidency::State committed_;

  // The rounds' state and buffers.
  std::vector<int> pending_;  // allgather indices, graph order
  std::vector<int64_t> counts_;
  std::vector<Task> tasks_;
  std::vector<NodeId> now_;
};

}  // namespace

absl::StatusOr<std::vector<NodeId>> FastFreeSchedule(const Graph& g) {
  return FastFreeScheduleWith(g, FastFreeOptions());
}

absl::StatusOr<std::vector<NodeId>> FastFreeScheduleDeepSpeed019(const Graph& g) {
  FastFreeOptions options;
  options.rules = FastFreeOptions::Rules::kDeepSpeed019;
  return FastFreeScheduleWith(g, options);
}

absl::StatusOr<std::vector<NodeId>> FastFreeScheduleWith(const Graph& g,
                                                         const FastFreeOptions& options) {
  using PathSets = FastFreeOptions::PathSets;
  if (options.gathered_budget_bytes >= 0 &&
      options.rules != FastFreeOptions::Rules::kDeepSpeed019) {
    return absl::InvalidArgumentError(
        "fast_free: a gathered-memory budget is DeepSpeed 0.19's (Rules::kDeepSpeed019, "
        "fast_free_0.19)");
  }
  if (options.rules == FastFreeOptions::Rules::kDeepSpeed019) {
    FastFreeOptions on_sets = options;
    if (on_sets.path_sets == PathSets::kIntervals) on_sets.path_sets = PathSets::kAuto;
    return Scheduler(g, on_sets).Run();
  }
  if (options.path_sets == PathSets::kAuto || options.path_sets == PathSets::kIntervals) {
    OVERLAP_ASSIGN_OR_RETURN(std::optional<std::vector<NodeId>> order,
                             internal::FastFreeByIntervals(g));
    if (order) return *std::move(order);
    FastFreeOptions fallback = options;
    fallback.path_sets = PathSets::kAuto;  // the bitsets or the counts, by size
    return Scheduler(g, fallback).Run();
  }
  return Scheduler(g, options).Run();
}

}  // namespace overlap
