// fast_free on interval lists: the same rounds as the reference (fast_free_reference.h),
// with every quantity a round needs kept incrementally instead of recomputed.
//
// Notation: Anc*(x) is x with its args-only ancestors, AG(S) the allgathers in S, D the
// scheduled nodes, C the chosen allgathers, L(a) allgather a's last use. Two facts carry it:
//  - D stays closed downwards over args (everything scheduled is a placeholder or a
//    requirements list), so requirements(t, D') for a closed D' is requirements(t, D) with
//    D' removed, order kept. Hence a task's fields are fixed sets less D:
//      until_g = Anc*(a) \ D, free = Anc*(L(a)) \ (D u Anc*(a)),
//      until_free = (Anc*(a) u Anc*(L(a)) u Anc*(releases of a)) \ D.
//  - A pending allgather's count |AG(Anc*(L(a))) \ C| changes only when an allgather is
//    chosen (not when one is scheduled), so count + |C| never decreases: a min-heap of
//    last uses keyed by it, re-evaluated lazily, finds each round's candidates exactly.
// AG(Anc*(v)) is held as a list of intervals of allgather ranks (ranks in the depth-first
// post-order from the output, which keeps ancestor sets of chains, residual stacks and
// trees contiguous); Fenwick trees over ranks count what is chosen and what is scheduled.
// Rows (reduce_grads, output items) become ready when their last unchosen ancestor
// allgather is chosen: a node turns "clean" once, so that costs O(N + E) in all.
// free_cost (a double summed in the reference's list order) is summed only when two
// candidates tie on every earlier field, and not at all when both share their last use and
// need no timed node to be gathered (then both sums are the same sum).
//
// Cost on chains and transformer stacks: O((N + E) + A log A) (no stale heap entries, a
// few candidates a round, one or two intervals a list). docs/deepcompile.md, "fast_free".
#include "schedule/fast_free_intervals.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/errors.h"
#include "graph/status_macros.h"
#include "schedule/analysis.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace internal {
namespace {

using Interval = std::pair<int32_t, int32_t>;  // [lo, hi) of allgather ranks

// Sorts and merges touching intervals.
void Normalize(std::vector<Interval>* l) {
  if (l->size() <= 1) return;
  std::sort(l->begin(), l->end());
  size_t w = 0;
  for (size_t i = 1; i < l->size(); ++i) {
    if ((*l)[i].first <= (*l)[w].second) {
      (*l)[w].second = std::max((*l)[w].second, (*l)[i].second);
    } else {
      (*l)[++w] = (*l)[i];
    }
  }
  l->resize(w + 1);
}

template <typename T>
class Fenwick {
 public:
  explicit Fenwick(size_t n = 0) : t_(n + 1, 0) {}
  void Add(size_t i, T v) {
    for (++i; i < t_.size(); i += i & (~i + 1)) t_[i] += v;
  }
  T Range(size_t lo, size_t hi) const { return Prefix(hi) - Prefix(lo); }

 private:
  T Prefix(size_t i) const {
    T s = 0;
    for (; i > 0; i -= i & (~i + 1)) s += t_[i];
    return s;
  }
  std::vector<T> t_;
};

// A list in the interval pool.
struct Span {
  int64_t off = 0;
  int32_t len = 0;
};

class IntervalScheduler {
 public:
  explicit IntervalScheduler(const Graph& g) : g_(g) {}

  absl::StatusOr<std::optional<std::vector<NodeId>>> Run() {
    Compact();
    OVERLAP_RETURN_IF_ERROR(FindLastUses());
    RankAllgathers();
    if (!BuildIntervals()) return std::optional<std::vector<NodeId>>();
    Rounds();
    for (int p = 0; p < N_; ++p) {
      if (!done_[p]) Schedule(p);
    }
    std::vector<NodeId> order(order_.size());
    for (size_t k = 0; k < order_.size(); ++k) order[k] = node_of_[order_[k]];
    if (!Topological()) {
      OVERLAP_RETURN_IF_ERROR(CheckBaselineOrder(g_, order, "fast_free"));
    }
    return std::optional<std::vector<NodeId>>(std::move(order));
  }

 private:
  struct Frame {
    int node;
    int64_t next;
  };
  // A candidate's fields (the reference's task, without its lists).
  struct Fields {
    int64_t free_mem = 0, gather_mem = 0, n_gathers = 0;
    bool has_cost = false;
    double free_cost = 0;
  };

  // One pass over the Node objects: positions, args and inputs as compressed rows, and
  // what the rounds read per node; every later pass is over these flat arrays.
  void Compact() {
    N_ = static_cast<int>(g_.size());
    node_of_.resize(N_);
    pos_.assign(g_.id_bound(), -1);
    int p = 0;
    for (NodeId id : g_.order()) {
      pos_[id] = p;
      node_of_[p++] = id;
    }
    ag_idx_.assign(N_, -1);
    is_ph_.assign(N_, 0);
    is_view_.assign(N_, 0);
    time_.assign(N_, 0);
    reduce_row_.assign(N_, -1);
    output_row_.assign(N_, -1);
    // The nodes are read in id order, the order they lie in memory (graph order jumps
    // around it: nodes a pass inserted sit at the end), into arrays by position; args and
    // inputs go to id-ordered rows first, then are laid out by position.
    enum : char { kOther, kAllgather, kRelease, kReduce };
    std::vector<char> kind(N_, kOther);
    std::vector<int64_t> size(N_, 0), ds(N_, -1);
    std::vector<char> has_ds(N_, 0);
    std::vector<int64_t> id_arg_off(g_.id_bound() + 1, 0), id_in_off(g_.id_bound() + 1, 0);
    std::vector<int32_t> id_args, id_ins;
    for (NodeId id = 0; id < g_.id_bound(); ++id) {
      id_arg_off[id + 1] = id_arg_off[id];
      id_in_off[id + 1] = id_in_off[id];
      if (!g_.IsLive(id)) continue;
      const Node& n = g_.node(id);
      const int p = pos_[id];
      for (NodeId in : n.arg_inputs()) id_args.push_back(pos_[in]);
      for (NodeId in : n.inputs()) id_ins.push_back(pos_[in]);
      id_arg_off[id + 1] = static_cast<int64_t>(id_args.size());
      id_in_off[id + 1] = static_cast<int64_t>(id_ins.size());
      time_[p] = TimeOf(n);
      is_ph_[p] = n.op() == Op::kPlaceholder;
      is_view_[p] = IsView(n);
      kind[p] = IsAllgather(n) ? kAllgather
                : IsRelease(n) ? kRelease
                : IsReduce(n)  ? kReduce
                               : kOther;
      size[p] = SizeOf(n);
      has_ds[p] = HasDsId(n);
      ds[p] = DsId(n);
    }
    auto by_position = [&](const std::vector<int64_t>& id_off, const std::vector<int32_t>& id_adj,
                           std::vector<int64_t>* off, std::vector<int32_t>* adj) {
      off->assign(N_ + 1, 0);
      for (int q = 0; q < N_; ++q) {
        const NodeId id = node_of_[q];
        (*off)[q + 1] = (*off)[q] + (id_off[id + 1] - id_off[id]);
      }
      adj->resize(id_adj.size());
      for (int q = 0; q < N_; ++q) {
        const NodeId id = node_of_[q];
        std::copy(id_adj.begin() + id_off[id], id_adj.begin() + id_off[id + 1],
                  adj->begin() + (*off)[q]);
      }
    };
    by_position(id_arg_off, id_args, &arg_off_, &args_);
    by_position(id_in_off, id_ins, &in_off_, &ins_);
    for (p = 0; p < N_; ++p) {  // graph order: allgather indices, reduce rows, releases
      if (kind[p] == kAllgather) {
        ag_idx_[p] = static_cast<int>(ag_pos_.size());
        ag_pos_.push_back(p);
        ag_size_.push_back(size[p]);
        ag_has_ds_.push_back(has_ds[p]);
        ag_ds_.push_back(ds[p]);
      } else if (kind[p] == kRelease && has_ds[p]) {
        releases_[ds[p]].push_back(p);
      } else if (kind[p] == kReduce) {
        reduce_row_[p] = static_cast<int>(reduces_.size());
        reduces_.push_back(p);
      }
    }
    A_ = static_cast<int>(ag_pos_.size());
    // Output rows: the top-level refs of the output's value that are not reduce_grads, each
    // distinct node once (a duplicate is pulled at its first occurrence, as the reference).
    for (NodeId o : FastFreeOutputItems(g_)) {
      const int q = pos_[o];
      if (output_row_[q] < 0) {
        output_row_[q] = static_cast<int>(outputs_.size());
        outputs_.push_back(q);
      }
    }
    // Args-only users, for the clean propagation.
    user_off_.assign(N_ + 1, 0);
    for (int32_t q : args_) ++user_off_[q + 1];
    for (p = 0; p < N_; ++p) user_off_[p + 1] += user_off_[p];
    users_.resize(args_.size());
    std::vector<int64_t> next(user_off_.begin(), user_off_.end() - 1);
    for (p = 0; p < N_; ++p) {
      for (int64_t k = arg_off_[p]; k < arg_off_[p + 1]; ++k) users_[next[args_[k]]++] = p;
    }
  }

  // LastUses (analysis.h, DeepSpeed's definition: views pass through) on the compact copy,
  // as positions: a second pass over the Node objects costs as much as the rounds on a
  // graph larger than the cache. The differential tests hold it to the same order.
  absl::Status FindLastUses() {
    std::vector<int64_t> off(N_ + 1, 0);  // all users (args and kwargs), compressed
    for (int32_t q : ins_) ++off[q + 1];
    for (int p = 0; p < N_; ++p) off[p + 1] += off[p];
    std::vector<int32_t> users(ins_.size());
    std::vector<int64_t> next(off.begin(), off.end() - 1);
    for (int p = 0; p < N_; ++p) {
      for (int64_t k = in_off_[p]; k < in_off_[p + 1]; ++k) users[next[ins_[k]]++] = p;
    }
    std::vector<int32_t> last(N_, -1);
    for (int p = N_ - 1; p >= 0; --p) {
      int32_t best = -1;
      for (int64_t k = off[p]; k < off[p + 1]; ++k) {
        const int32_t u = users[k];
        const bool through = is_view_[u] && off[u + 1] > off[u];
        best = std::max(best, through ? last[u] : u);
      }
      last[p] = best;
    }
    ag_last_.resize(A_);
    for (int i = 0; i < A_; ++i) {
      ag_last_[i] = last[ag_pos_[i]];
      if (ag_last_[i] < 0) {
        return UnsupportedError(absl::StrCat("allgather \"", g_.node(node_of_[ag_pos_[i]]).name(),
                                             "\" has no last use (nobody reads it)"));
      }
    }
    return absl::OkStatus();
  }

  // Ranks the allgathers in the depth-first post-order over args from the output node, then
  // from the remaining nodes in graph order. Only speed depends on the ranking.
  void RankAllgathers() {
    rank_.assign(A_, -1);
    int next = 0;
    std::vector<char> seen(N_, 0);
    std::vector<Frame> st;
    auto from = [&](int root) {
      if (seen[root]) return;
      seen[root] = 1;
      st.push_back({root, arg_off_[root]});
      while (!st.empty()) {
        Frame& f = st.back();
        if (f.next == arg_off_[f.node + 1]) {
          if (ag_idx_[f.node] >= 0) rank_[ag_idx_[f.node]] = next++;
          st.pop_back();
          continue;
        }
        const int in = args_[f.next++];
        if (seen[in]) continue;
        seen[in] = 1;
        st.push_back({in, arg_off_[in]});
      }
    };
    if (N_ > 0) from(N_ - 1);
    for (int p = 0; p < N_; ++p) from(p);
  }

  // IL(v) = AG(Anc*(v)) as intervals, one forward pass: a node with one non-empty input
  // list (and not an allgather) shares it. Then per allgather the free part's and
  // until_free's lists. False when the pool exceeds its budget.
  bool BuildIntervals() {
    const int64_t budget =
        8 * (static_cast<int64_t>(N_) + static_cast<int64_t>(args_.size())) + (int64_t{1} << 20);
    il_.assign(N_, Span());
    std::vector<Interval> tmp;
    for (int p = 0; p < N_; ++p) {
      const int a = ag_idx_[p];
      int nonempty = 0, only = -1;
      for (int64_t k = arg_off_[p]; k < arg_off_[p + 1]; ++k) {
        const int q = args_[k];
        if (il_[q].len > 0 && (only < 0 || il_[q].off != il_[only].off)) {
          ++nonempty;
          only = q;
        }
      }
      if (a < 0 && nonempty <= 1) {
        if (only >= 0) il_[p] = il_[only];
        continue;
      }
      tmp.clear();
      for (int64_t k = arg_off_[p]; k < arg_off_[p + 1]; ++k) {
        const Span s = il_[args_[k]];
        tmp.insert(tmp.end(), pool_.begin() + s.off, pool_.begin() + s.off + s.len);
      }
      if (a >= 0) tmp.push_back({rank_[a], rank_[a] + 1});
      Normalize(&tmp);
      il_[p] = {static_cast<int64_t>(pool_.size()), static_cast<int32_t>(tmp.size())};
      pool_.insert(pool_.end(), tmp.begin(), tmp.end());
      if (static_cast<int64_t>(pool_.size()) > budget) return false;
    }
    int64_t entries = static_cast<int64_t>(pool_.size());
    il_free_.resize(A_);
    il_all_.resize(A_);
    for (int i = 0; i < A_; ++i) {
      const Span self = il_[ag_pos_[i]];
      const Span lu = il_[ag_last_[i]];
      // IL(L(a)) \ IL(a).
      std::vector<Interval>& f = il_free_[i];
      size_t j = 0;
      for (int32_t x = 0; x < lu.len; ++x) {
        int32_t lo = pool_[lu.off + x].first;
        const int32_t hi = pool_[lu.off + x].second;
        while (j < static_cast<size_t>(self.len) && pool_[self.off + j].second <= lo) ++j;
        for (size_t k = j;
             lo < hi && k < static_cast<size_t>(self.len) && pool_[self.off + k].first < hi; ++k) {
          if (pool_[self.off + k].first > lo) f.push_back({lo, pool_[self.off + k].first});
          lo = std::max(lo, pool_[self.off + k].second);
        }
        if (lo < hi) f.push_back({lo, hi});
      }
      // IL(a) u IL(L(a)) u IL(each release of a's ds_id).
      std::vector<Interval>& all = il_all_[i];
      all.assign(pool_.begin() + self.off, pool_.begin() + self.off + self.len);
      all.insert(all.end(), pool_.begin() + lu.off, pool_.begin() + lu.off + lu.len);
      if (ag_has_ds_[i]) {
        auto it = releases_.find(ag_ds_[i]);
        if (it != releases_.end()) {
          for (int r : it->second) {
            all.insert(all.end(), pool_.begin() + il_[r].off,
                       pool_.begin() + il_[r].off + il_[r].len);
          }
        }
      }
      Normalize(&all);
      entries += static_cast<int64_t>(f.size() + all.size());
      if (entries > budget) return false;
    }
    // Allgathers whose args-ancestors, placeholders aside, all take no time.
    std::vector<char> zero_time(N_, 1);
    for (int p = 0; p < N_; ++p) {
      if (is_ph_[p]) continue;
      bool z = time_[p] == 0.0;
      for (int64_t k = arg_off_[p]; k < arg_off_[p + 1] && z; ++k) z = zero_time[args_[k]];
      zero_time[p] = z;
    }
    ag_zero_time_.resize(A_);
    for (int i = 0; i < A_; ++i) ag_zero_time_[i] = zero_time[ag_pos_[i]];
    size_prefix_.assign(A_ + 1, 0);
    for (int i = 0; i < A_; ++i) size_prefix_[rank_[i] + 1] = ag_size_[i];
    for (int r = 0; r < A_; ++r) size_prefix_[r + 1] += size_prefix_[r];
    return true;
  }

  // Allgathers not yet scheduled in the lists, and their bytes.
  int64_t UndoneCount(const std::vector<Interval>& l) const {
    int64_t c = 0;
    for (Interval iv : l) c += (iv.second - iv.first) - done_cnt_.Range(iv.first, iv.second);
    return c;
  }
  int64_t UndoneSize(const Interval* b, const Interval* e) const {
    int64_t s = 0;
    for (; b != e; ++b) {
      s += size_prefix_[b->second] - size_prefix_[b->first] - done_size_.Range(b->first, b->second);
    }
    return s;
  }

  void Rounds() {
    done_.assign(N_, 0);
    visit_.assign(N_, 0);
    overlay_.assign(N_, 0);
    done_cnt_ = Fenwick<int32_t>(A_);
    done_size_ = Fenwick<int64_t>(A_);
    for (int p = 0; p < N_; ++p) {
      if (is_ph_[p]) Schedule(p);
    }
    if (A_ == 0) return;
    GroupTargets();
    MarkClean();
    for (int round = 0; round < A_; ++round) {
      const int64_t best_key = PopCandidateTargets();
      bool zero_free = false;
      const int ci = BestCandidate(&zero_free);
      ScheduleTask(ci, zero_free);
      RecordChoice(ci, best_key);
    }
  }

  // Targets: the distinct last uses, each with its pending allgathers in graph order, all on
  // the heap with their counts (nothing chosen yet).
  void GroupTargets() {
    chosen_ = Fenwick<int32_t>(A_);
    n_chosen_ = 0;
    target_of_.resize(A_);
    std::vector<int32_t> target_index(N_, -1);
    for (int i = 0; i < A_; ++i) {
      const int t = ag_last_[i];
      if (target_index[t] < 0) {
        target_index[t] = static_cast<int>(targets_.size());
        targets_.push_back(t);
        pending_of_.emplace_back();
      }
      target_of_[i] = target_index[t];
      pending_of_[target_of_[i]].push_back(i);
    }
    for (int t = 0; t < static_cast<int>(targets_.size()); ++t) heap_.push({CountOf(t), t});
  }

  // Clean: no unchosen allgather among a node's args-ancestors (itself included). Counts
  // each node's dirty args for Choose.
  void MarkClean() {
    dirty_in_.assign(N_, 0);
    std::vector<char> clean(N_, 0);
    for (int p = 0; p < N_; ++p) {
      int d = 0;
      for (int64_t k = arg_off_[p]; k < arg_off_[p + 1]; ++k) d += !clean[args_[k]];
      dirty_in_[p] = d;
      clean[p] = d == 0 && ag_idx_[p] < 0;
    }
    is_chosen_.assign(A_, 0);
  }

  // |AG(Anc*(t)) \ C| for target t.
  int64_t CountOf(int t) const {
    const Span s = il_[targets_[t]];
    int64_t c = 0;
    for (int32_t x = 0; x < s.len; ++x) {
      const Interval iv = pool_[s.off + x];
      c += (iv.second - iv.first) - chosen_.Range(iv.first, iv.second);
    }
    return c;
  }

  // The smallest true key, then every target with that key, popped into cand_targets_;
  // returns that key.
  int64_t PopCandidateTargets() {
    while (true) {
      const auto [k, t] = heap_.top();
      const int64_t key = CountOf(t) + n_chosen_;
      if (key == k) break;
      heap_.pop();
      heap_.push({key, t});
    }
    const int64_t best_key = heap_.top().first;
    cand_targets_.clear();
    while (!heap_.empty() && heap_.top().first == best_key) {
      const int t = heap_.top().second;
      heap_.pop();
      const int64_t key = CountOf(t) + n_chosen_;
      if (key == best_key) {
        cand_targets_.push_back(t);
      } else {
        heap_.push({key, t});
      }
    }
    return best_key;
  }

  // The reference's choice among the candidate targets' pending allgathers: their fields
  // into fields_, then the best; *zero_free when some candidate frees no memory.
  int BestCandidate(bool* zero_free) {
    cands_.clear();
    for (int t : cand_targets_) {
      cands_.insert(cands_.end(), pending_of_[t].begin(), pending_of_[t].end());
    }
    std::sort(cands_.begin(), cands_.end());  // graph order, as the reference iterates
    fields_.assign(cands_.size(), Fields());
    *zero_free = false;
    for (size_t k = 0; k < cands_.size(); ++k) {
      const int i = cands_[k];
      const Span s = il_[ag_pos_[i]];
      Fields& f = fields_[k];
      f.free_mem = UndoneSize(il_free_[i].data(), il_free_[i].data() + il_free_[i].size());
      f.gather_mem = UndoneSize(pool_.data() + s.off, pool_.data() + s.off + s.len);
      f.n_gathers = UndoneCount(il_all_[i]);
      *zero_free |= f.free_mem == 0;
    }
    int best = -1;
    for (size_t k = 0; k < cands_.size(); ++k) {
      if (*zero_free && fields_[k].free_mem != 0) continue;
      if (best < 0 || Before(static_cast<int>(k), best, *zero_free)) best = static_cast<int>(k);
    }
    return cands_[best];
  }

  // Whether candidate x (an index into cands_) comes before candidate y: the reference's
  // comparison, free_cost summed only when it decides.
  bool Before(int x, int y, bool zero_free) {
    const Fields& a = fields_[x];
    const Fields& b = fields_[y];
    if (!zero_free && a.free_mem != b.free_mem) return a.free_mem < b.free_mem;
    if (a.n_gathers != b.n_gathers) return a.n_gathers < b.n_gathers;
    if (a.gather_mem != b.gather_mem) return a.gather_mem < b.gather_mem;
    if (!SameFreeCost(cands_[x], cands_[y])) {
      const double cx = FreeCost(&fields_[x], cands_[x]);
      const double cy = FreeCost(&fields_[y], cands_[y]);
      if (cx < cy) return true;
      if (cy < cx) return false;
    }
    return AllgatherName(cands_[x]) < AllgatherName(cands_[y]);
  }

  const std::string& AllgatherName(int i) const { return g_.node(node_of_[ag_pos_[i]]).name(); }

  // After allgather ci (of a target with key best_key) is chosen and its task scheduled:
  // counts it chosen, puts the candidate targets still pending back on the heap, and
  // schedules the requirements of the reduces, then the output items, it emptied.
  void RecordChoice(int ci, int64_t best_key) {
    ++n_chosen_;
    chosen_.Add(rank_[ci], 1);
    std::vector<int>& left = pending_of_[target_of_[ci]];
    left.erase(std::find(left.begin(), left.end(), ci));
    for (int t : cand_targets_) {
      if (!pending_of_[t].empty()) heap_.push({best_key, t});  // still a lower bound
    }
    emptied_reduces_.clear();
    emptied_outputs_.clear();
    Choose(ci, &emptied_reduces_, &emptied_outputs_);
    std::sort(emptied_reduces_.begin(), emptied_reduces_.end());
    for (int r : emptied_reduces_) ScheduleRequirements(reduces_[r]);
    std::sort(emptied_outputs_.begin(), emptied_outputs_.end());
    for (int o : emptied_outputs_) ScheduleRequirements(outputs_[o]);
  }

  // Marks allgather ci chosen and collects the rows that become clean now: exactly the
  // rows whose path held ci and is now empty.
  void Choose(int ci, std::vector<int>* reduces, std::vector<int>* outputs) {
    is_chosen_[ci] = 1;
    const int c = ag_pos_[ci];
    if (dirty_in_[c] != 0) return;
    stack_.clear();
    stack_.push_back(c);
    while (!stack_.empty()) {
      const int v = stack_.back();
      stack_.pop_back();
      if (reduce_row_[v] >= 0) reduces->push_back(reduce_row_[v]);
      if (output_row_[v] >= 0) outputs->push_back(output_row_[v]);
      for (int64_t k = user_off_[v]; k < user_off_[v + 1]; ++k) {
        const int u = users_[k];
        if (--dirty_in_[u] == 0 && (ag_idx_[u] < 0 || is_chosen_[ag_idx_[u]])) stack_.push_back(u);
      }
    }
  }

  // Whether the free costs of candidates a and b are the same double without summing: both
  // gather only zero-time nodes (adding +-0.0 to a sum that started at +0.0 changes
  // nothing) and share their last use, so both sum the timed nodes of one list.
  bool SameFreeCost(int a, int b) const {
    return ag_zero_time_[a] && ag_zero_time_[b] && ag_last_[a] == ag_last_[b];
  }

  // The reference's free_cost of candidate a: its free part in requirements order, summed.
  double FreeCost(Fields* f, int a) {
    if (f->has_cost) return f->free_cost;
    ++epoch_;
    scratch_.clear();
    Collect(ag_pos_[a], true, &scratch_);
    scratch_.clear();
    Collect(ag_last_[a], true, &scratch_);
    double c = 0;
    for (int p : scratch_) c += time_[p];
    f->has_cost = true;
    f->free_cost = c;
    return c;
  }

  void ScheduleTask(int ci, bool zero_free) {
    ++epoch_;
    scratch_.clear();
    const int p = ag_pos_[ci];
    Collect(p, true, &scratch_);
    if (zero_free) {
      Collect(ag_last_[ci], true, &scratch_);
      if (ag_has_ds_[ci]) {
        auto it = releases_.find(ag_ds_[ci]);
        if (it != releases_.end()) {
          for (int r : it->second) Collect(r, true, &scratch_);
        }
      }
    }
    for (int q : scratch_) Schedule(q);
  }

  void ScheduleRequirements(int target) {
    ++epoch_;
    scratch_.clear();
    Collect(target, false, &scratch_);
    for (int q : scratch_) Schedule(q);
  }

  void Schedule(int p) {
    order_.push_back(p);
    done_[p] = 1;
    const int a = ag_idx_[p];
    if (a >= 0) {
      done_cnt_.Add(rank_[a], 1);
      done_size_.Add(rank_[a], ag_size_[a]);
    }
  }

  bool Done(int p) const { return done_[p] || overlay_[p] == epoch_; }

  // requirements(target, done + overlay) in depth-first post-order over args; marks what
  // it adds in the overlay when `mark`.
  void Collect(int target, bool mark, std::vector<int32_t>* out) {
    if (Done(target)) return;
    ++visit_epoch_;
    frames_.clear();
    visit_[target] = visit_epoch_;
    frames_.push_back({target, arg_off_[target]});
    while (!frames_.empty()) {
      Frame& f = frames_.back();
      if (f.next == arg_off_[f.node + 1]) {
        out->push_back(f.node);
        if (mark) overlay_[f.node] = epoch_;
        frames_.pop_back();
        continue;
      }
      const int in = args_[f.next++];
      if (Done(in) || visit_[in] == visit_epoch_) continue;
      visit_[in] = visit_epoch_;
      frames_.push_back({in, arg_off_[in]});
    }
  }

  bool Topological() const {
    std::vector<char> placed(N_, 0);
    for (int p : order_) {
      for (int64_t k = in_off_[p]; k < in_off_[p + 1]; ++k) {
        if (!placed[ins_[k]]) return false;
      }
      placed[p] = 1;
    }
    return true;
  }

  const Graph& g_;
  int N_ = 0, A_ = 0;
  std::vector<NodeId> node_of_;
  std::vector<int32_t> pos_;
  std::vector<int64_t> arg_off_, in_off_, user_off_;
  std::vector<int32_t> args_, ins_, users_;
  std::vector<int32_t> ag_idx_, ag_pos_, ag_last_, rank_, reduce_row_, output_row_;
  std::vector<int64_t> ag_size_, ag_ds_;
  std::vector<char> ag_has_ds_, is_ph_, is_view_, ag_zero_time_, is_chosen_, done_;
  std::vector<double> time_;
  std::vector<int> reduces_, outputs_;
  absl::flat_hash_map<int64_t, std::vector<int>> releases_;
  std::vector<Interval> pool_;
  std::vector<Span> il_;
  std::vector<std::vector<Interval>> il_free_, il_all_;
  std::vector<int64_t> size_prefix_;
  Fenwick<int32_t> done_cnt_;
  Fenwick<int64_t> done_size_;
  std::vector<int32_t> dirty_in_;
  // The rounds: targets (distinct last uses) and their pending allgathers, the heap of
  // (count + |C| when pushed: a lower bound, target), what is chosen, and each round's
  // candidates.
  using Entry = std::pair<int64_t, int>;
  std::vector<int> target_of_, targets_;
  std::vector<std::vector<int>> pending_of_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  Fenwick<int32_t> chosen_;
  int64_t n_chosen_ = 0;
  std::vector<int> cand_targets_, cands_, emptied_reduces_, emptied_outputs_;
  std::vector<Fields> fields_;
  std::vector<uint32_t> visit_, overlay_;
  uint32_t visit_epoch_ = 0, epoch_ = 1;
  std::vector<Frame> frames_;
  std::vector<int32_t> order_, scratch_, stack_;
};

}  // namespace

absl::StatusOr<std::optional<std::vector<NodeId>>> FastFreeByIntervals(const Graph& g) {
  return IntervalScheduler(g).Run();
}

}  // namespace internal
}  // namespace overlap
