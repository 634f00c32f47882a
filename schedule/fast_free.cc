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
    const std::vector<NodeId> last_use = LastUses(g_);
    std::vector<int> ag_index(g_.id_bound(), -1);
    std::vector<NodeId> ags;
    absl::flat_hash_map<int64_t, std::vector<NodeId>> releases;
    std::vector<NodeId> reduces;
    for (NodeId id : g_.order()) {
      const Node& n = g_.node(id);
      if (n.op() == Op::kPlaceholder) {
        Schedule(id);
        continue;
      }
      if (IsAllgather(n)) {
        ag_index[id] = static_cast<int>(ags.size());
        ags.push_back(id);
      }
      if (IsRelease(n) && HasDsId(n)) releases[DsId(n)].push_back(id);
      if (IsReduce(n)) reduces.push_back(id);
    }
    for (NodeId ag : ags) {
      if (last_use[ag] == kNoNode) {
        return UnsupportedError(absl::StrCat("allgather \"", g_.node(ag).name(),
                                             "\" has no last use (nobody reads it)"));
      }
    }
    const size_t A = ags.size();
    std::vector<NodeId> outputs;  // with duplicates, as the reference iterates them
    absl::flat_hash_map<NodeId, size_t> output_row;
    for (NodeId o : FastFreeOutputItems(g_)) {
      outputs.push_back(o);
      output_row.emplace(o, output_row.size());
    }
    // Paths: one row per allgather (the allgathers its last use needs), per reduce, per
    // distinct output item; bounded before anything is allocated.
    // As bitsets while they are small next to the graph (a fraction of what the graph itself
    // takes); otherwise as counts, so memory stays linear in the graph.
    const size_t W = (A + 63) / 64;
    const double path_bytes = 8.0 * W * (A + reduces.size() + output_row.size());
    const bool counted =
        options_.path_sets == FastFreeOptions::PathSets::kCounts ||
        (options_.path_sets == FastFreeOptions::PathSets::kAuto &&
         path_bytes > std::max<double>(kBitsetFloorBytes, kBitsetBytesPerNode * g_.id_bound()));
    if (!counted && path_bytes > kMaxRowBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "fast_free: ", A, " allgathers need ", static_cast<int64_t>(path_bytes / (1 << 20)),
          " MiB of path-set bitsets, over the limit of ", kMaxRowBytes >> 20, " MiB"));
    }
    BitRows path(counted ? 0 : A, A), reduce_path(counted ? 0 : reduces.size(), A),
        output_path(counted ? 0 : output_row.size(), A);
    std::optional<CountPaths> count_paths;
    if (counted) {
      count_paths.emplace(g_, ags, last_use, reduces, output_row);
    } else {
      OVERLAP_RETURN_IF_ERROR(FillPaths(ags, ag_index, last_use, reduces, output_row, W, &path,
                                        &reduce_path, &output_path));
    }

    std::vector<int> pending(A);  // allgather indices, graph order
    for (size_t i = 0; i < A; ++i) pending[i] = static_cast<int>(i);
    auto popcount = [&](const uint64_t* row) {
      int64_t c = 0;
      for (size_t w = 0; w < W; ++w) c += __builtin_popcountll(row[w]);
      return c;
    };
    auto empty = [&](const uint64_t* row) {
      for (size_t w = 0; w < W; ++w) {
        if (row[w]) return false;
      }
      return true;
    };
    std::vector<Task> tasks;
    while (!pending.empty()) {
      int64_t min_count = INT64_MAX;
      std::vector<int64_t> counts(pending.size());
      for (size_t k = 0; k < pending.size(); ++k) {
        counts[k] = counted ? count_paths->Count(pending[k]) : popcount(path.row(pending[k]));
        min_count = std::min(min_count, counts[k]);
      }
      tasks.clear();
      for (size_t k = 0; k < pending.size(); ++k) {
        if (counts[k] == min_count) tasks.push_back(MakeTask(ags[pending[k]], last_use, releases));
      }
      const Task* best = nullptr;
      bool zero_free = false;
      for (const Task& t : tasks) zero_free |= t.free_mem == 0;
      auto name = [&](const Task& t) -> const std::string& { return g_.node(t.node).name(); };
      for (const Task& t : tasks) {
        if (zero_free) {
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
      const NodeId chosen = best->node;
      for (NodeId n : zero_free ? best->until_free : best->until_g) Schedule(n);
      const int ci = ag_index[chosen];
      pending.erase(std::find(pending.begin(), pending.end(), ci));
      const size_t cw = static_cast<size_t>(ci) / 64;
      const uint64_t cbit = uint64_t{1} << (ci % 64);
      if (counted) count_paths->Choose(chosen);
      if (!counted) {
        for (int i : pending) path.row(i)[cw] &= ~cbit;
      }
      // Whether a reduce's / an output row's path held `chosen` and is now empty (each once).
      auto emptied = [&](BitRows& rows_of, size_t row) {
        uint64_t* bits = rows_of.row(row);
        if (!(bits[cw] & cbit)) return false;
        bits[cw] &= ~cbit;
        return empty(bits);
      };
      std::vector<NodeId> now;
      for (size_t r = 0; r < reduces.size(); ++r) {
        if (counted ? count_paths->ReduceEmptied(r) : emptied(reduce_path, r)) {
          now.push_back(reduces[r]);
        }
      }
      for (NodeId r : now) ScheduleRequirements(r);
      now.clear();
      for (NodeId o : outputs) {
        const size_t row = output_row.at(o);
        if (counted ? count_paths->TakeOutputEmptied(row) : emptied(output_path, row)) {
          now.push_back(o);
        }
      }
      for (NodeId o : now) ScheduleRequirements(o);
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

  // The allgathers among each target's args-ancestors (placeholders, the only scheduled
  // nodes at the start, have no ancestors, so this is what requirements would collect),
  // by one forward pass. A node's ancestor row lives only until its last reader has been
  // processed (rows are recycled), so memory follows the graph's width, not its size.
  absl::Status FillPaths(const std::vector<NodeId>& ags, const std::vector<int>& ag_index,
                         const std::vector<NodeId>& last_use, const std::vector<NodeId>& reduces,
                         const absl::flat_hash_map<NodeId, size_t>& output_row, size_t W,
                         BitRows* path, BitRows* reduce_path, BitRows* output_path) {
    // Where each node's row must be copied once it is complete.
    absl::flat_hash_map<NodeId, std::vector<uint64_t*>> copy_to;
    for (size_t i = 0; i < ags.size(); ++i) copy_to[last_use[ags[i]]].push_back(path->row(i));
    for (size_t i = 0; i < reduces.size(); ++i) copy_to[reduces[i]].push_back(reduce_path->row(i));
    for (const auto& [node, row] : output_row) copy_to[node].push_back(output_path->row(row));
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
                           kMaxRowBytes >> 20, " MiB for ", ags.size(), " allgathers)"));
        }
        pool.resize(pool.size() + W, 0);
      }
      slot[id] = static_cast<int64_t>(s);
      uint64_t* row = pool.data() + s * W;
      for (NodeId in : g_.node(id).arg_inputs()) {
        const uint64_t* from = pool.data() + slot[in] * W;
        for (size_t w = 0; w < W; ++w) row[w] |= from[w];
      }
      if (ag_index[id] >= 0) row[ag_index[id] / 64] |= uint64_t{1} << (ag_index[id] % 64);
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

  void Schedule(NodeId n) {
    order_.push_back(n);
    done_[n] = 1;
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

  Task MakeTask(NodeId ag, const std::vector<NodeId>& last_use,
                const absl::flat_hash_map<int64_t, std::vector<NodeId>>& releases) {
    Task t;
    t.node = ag;
    ++overlay_epoch_;
    Requirements(ag, true, &t.until_g);
    std::vector<NodeId> free_part;
    Requirements(last_use[ag], true, &free_part);
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
      auto it = releases.find(DsId(agn));
      if (it != releases.end()) {
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
};

}  // namespace

absl::StatusOr<std::vector<NodeId>> FastFreeSchedule(const Graph& g) {
  return FastFreeScheduleWith(g, FastFreeOptions());
}

absl::StatusOr<std::vector<NodeId>> FastFreeScheduleWith(const Graph& g,
                                                         const FastFreeOptions& options) {
  using PathSets = FastFreeOptions::PathSets;
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
