#include "runtime/replay.h"

#include <unistd.h>

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "schedule/simulator.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

bool IsCall(const Node& n) {
  return n.op() == Op::kCallFunction || n.op() == Op::kCallMethod || n.op() == Op::kCallModule;
}

// What the machine can give now (physical pages available).
int64_t AvailableBytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : INT64_MAX;
}

// The live bytes: counted, or held as real buffers from the allocator.
class Buffers {
 public:
  Buffers(bool count_only, Allocator* alloc) : count_only_(count_only), alloc_(alloc) {}
  absl::Status Take(NodeId id, int64_t bytes) {
    if (count_only_) {
      live_ += bytes;
      peak_ = std::max(peak_, live_);
      bytes_[id] = bytes;
      return absl::OkStatus();
    }
    OVERLAP_ASSIGN_OR_RETURN(held_[id], alloc_->Allocate(bytes, Pool::kValues));
    return absl::OkStatus();
  }
  void Give(NodeId id) {
    if (count_only_) {
      auto it = bytes_.find(id);
      if (it == bytes_.end()) return;
      live_ -= it->second;
      bytes_.erase(it);
      return;
    }
    held_.erase(id);
  }
  int64_t live() const { return count_only_ ? live_ : alloc_->live(Pool::kValues); }
  int64_t peak() const { return count_only_ ? peak_ : alloc_->peak(Pool::kValues); }

 private:
  bool count_only_;
  Allocator* alloc_;
  int64_t live_ = 0, peak_ = 0;
  absl::flat_hash_map<NodeId, int64_t> bytes_;
  absl::flat_hash_map<NodeId, std::shared_ptr<Storage>> held_;
};

}  // namespace

absl::StatusOr<ReplayResult> Replay(const Graph& g, const ReplayOptions& options) {
  if (!(options.time_scale >= 0)) return absl::InvalidArgumentError("time scale must be >= 0");
  const std::vector<NodeId> order = g.OrderVector();
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<int64_t> pos(g.id_bound(), -1);
  for (int64_t i = 0; i < n; ++i) pos[order[i]] = i;

  // Who owns a buffer, and where each buffer dies.
  std::vector<NodeId> root(g.id_bound(), kNoNode);
  std::vector<char> owns(g.id_bound(), 0), held(g.id_bound(), 0);
  std::vector<int64_t> last(g.id_bound(), -1), reduced_at(g.id_bound(), -1);
  absl::flat_hash_set<int64_t> resident;
  for (NodeId id : order) {
    const Node& node = g.node(id);
    root[id] = id;
    if (HandsOnStorage(node) && HandedOnFrom(node) != kNoNode) root[id] = root[HandedOnFrom(node)];
    const bool value = node.op() == Op::kPlaceholder ? !IsParameterShard(g, id)
                                                     : IsCall(node) && !HandsOnStorage(node) &&
                                                           !IsAllgather(node) && !IsReduce(node);
    owns[id] = value && SizeOf(node) > 0;
    last[id] = pos[id];
    if (IsPersistentAllgather(node)) resident.insert(DsId(node));
  }
  // A bucket's reduction runs at its last member (in one process: at once).
  absl::flat_hash_map<int64_t, int64_t> bucket_end;
  for (NodeId id : order) {
    const Node& node = g.node(id);
    if (IsReduce(node) && ReduceBucket(node) >= 0) bucket_end[ReduceBucket(node)] = pos[id];
  }
  for (NodeId u : order) {
    const Node& user = g.node(u);
    for (NodeId in : user.inputs()) {
      const NodeId s = root[in];
      if (!owns[s]) continue;
      if (user.op() == Op::kOutput) {
        held[s] = 1;
      } else if (IsReduce(user)) {
        const int64_t b = ReduceBucket(user);
        reduced_at[s] = std::max(reduced_at[s], b >= 0 ? bucket_end[b] : pos[u]);
      } else {
        last[s] = std::max(last[s], pos[u]);
      }
    }
  }
  std::vector<std::vector<NodeId>> frees_at(n);
  for (NodeId id : order) {
    if (!owns[id]) continue;
    if (reduced_at[id] >= 0) {
      frees_at[std::max(last[id], reduced_at[id])].push_back(id);
    } else if (!held[id]) {
      frees_at[last[id]].push_back(id);
    }
  }

  // The simulator's peak: reported beside the measured one, and with real buffers the
  // test that refuses up front what cannot fit.
  CollectiveModel one;
  one.world_size = 1;
  SimulationOptions so;
  so.record_trace = false;
  OVERLAP_ASSIGN_OR_RETURN(const SimulationResult sim, Simulator(g, one).Run(order, so));
  if (!options.count_only) {
    const int64_t limit =
        options.memory_limit_bytes > 0 ? options.memory_limit_bytes : AvailableBytes();
    if (sim.peak_memory_bytes > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "replay needs ", FormatBytes(sim.peak_memory_bytes), " of buffers, more than the ",
          FormatBytes(limit), options.memory_limit_bytes > 0 ? " limit" : " available",
          " (--count-only counts them instead)"));
    }
  }

  Allocator alloc;
  Buffers buffers(options.count_only, &alloc);
  struct Gathered {
    std::deque<NodeId> copies;
    int64_t releases = 0;
  };
  absl::flat_hash_map<int64_t, Gathered> gathered;
  const auto start = std::chrono::steady_clock::now();
  // Live from the start: inputs and residents' gathered copies.
  for (NodeId id : order) {
    const Node& node = g.node(id);
    if (node.op() == Op::kPlaceholder && owns[id]) {
      OVERLAP_RETURN_IF_ERROR(buffers.Take(id, SizeOf(node)));
    }
    if (IsAllgather(node) && resident.contains(DsId(node))) {
      OVERLAP_RETURN_IF_ERROR(buffers.Take(id, SizeOf(node)));
    }
  }
  ReplayResult r;
  r.simulated_peak_bytes = sim.peak_memory_bytes;
  for (int64_t i = 0; i < n; ++i) {
    const NodeId id = order[i];
    const Node& node = g.node(id);
    if (owns[id] && node.op() != Op::kPlaceholder) {
      OVERLAP_RETURN_IF_ERROR(buffers.Take(id, SizeOf(node)));
    }
    if (IsAllgather(node) && !resident.contains(DsId(node))) {
      OVERLAP_RETURN_IF_ERROR(buffers.Take(id, SizeOf(node)));
      gathered[DsId(node)].copies.push_back(id);
    }
    if (options.time_scale > 0 && IsCall(node) && !IsZero3Op(node) && TimeOf(node) > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(TimeOf(node) * options.time_scale));
    }
    if (IsRelease(node) && !resident.contains(DsId(node))) {
      auto it = gathered.find(DsId(node));
      if (it != gathered.end() && ++it->second.releases == NUsers(node)) {
        it->second.releases = 0;
        if (!it->second.copies.empty()) {
          buffers.Give(it->second.copies.front());
          it->second.copies.pop_front();
        }
      }
    }
    for (NodeId s : frees_at[i]) buffers.Give(s);
    ++r.nodes_run;
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.peak_bytes = buffers.peak();
  r.final_bytes = buffers.live();
  return r;
}

}  // namespace overlap
