#include "runtime/exec/replay.h"

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
#include "graph/text.h"
#include "runtime/exec/memory_plan.h"
#include "schedule/simulator.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// The host: live bytes counted, or held as real buffers from the allocator; compute sleeps.
class HostDevice final : public ReplayDevice {
 public:
  HostDevice(bool count_only, Allocator* alloc) : count_only_(count_only), alloc_(alloc) {}
  absl::Status Take(NodeId id, int64_t bytes) override {
    if (count_only_) {
      live_ += bytes;
      peak_ = std::max(peak_, live_);
      bytes_[id] = bytes;
      return absl::OkStatus();
    }
    OVERLAP_ASSIGN_OR_RETURN(held_[id], alloc_->Allocate(bytes, Pool::kValues));
    return absl::OkStatus();
  }
  absl::Status Give(NodeId id) override {
    if (count_only_) {
      auto it = bytes_.find(id);
      if (it == bytes_.end()) return absl::OkStatus();
      live_ -= it->second;
      bytes_.erase(it);
      return absl::OkStatus();
    }
    held_.erase(id);
    return absl::OkStatus();
  }
  absl::Status Compute(const Node&, double seconds, absl::Span<const NodeId>, NodeId) override {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return absl::OkStatus();
  }
  int64_t live() const override { return count_only_ ? live_ : alloc_->live(Pool::kValues); }
  int64_t peak() const override { return count_only_ ? peak_ : alloc_->peak(Pool::kValues); }

 private:
  bool count_only_;
  Allocator* alloc_;
  int64_t live_ = 0, peak_ = 0;
  absl::flat_hash_map<NodeId, int64_t> bytes_;
  absl::flat_hash_map<NodeId, std::shared_ptr<Storage>> held_;
};

}  // namespace

double ReplayWaitSeconds(const Node& node, double time_scale) {
  return TimeOf(node) > 0 ? TimeOf(node) * time_scale : 0;
}

absl::StatusOr<ReplayResult> Replay(const Graph& g, const ReplayOptions& options) {
  Allocator alloc;
  HostDevice device(options.count_only, &alloc);
  return ReplayOn(g, options, device);
}

absl::StatusOr<ReplayResult> ReplayOn(const Graph& g, const ReplayOptions& options,
                                      ReplayDevice& device) {
  if (!(options.time_scale >= 0)) return absl::InvalidArgumentError("time scale must be >= 0");
  // Every wait is checked before the first: a wait past the bound would overflow the
  // clock (1e300 s once waited nothing) and no replay is meant to take that long.
  if (options.time_scale > 0) {
    for (NodeId id : g.order()) {
      const Node& node = g.node(id);
      const double seconds = TimeOf(node) * options.time_scale;
      if (IsCallNode(node) && !IsZero3Op(node) && !(seconds <= kMaxReplayWaitSeconds)) {
        return absl::InvalidArgumentError(
            absl::StrCat("node \"", Printable(node.name()), "\": replay would wait ", seconds,
                         " s (device_time x time scale), more than the bound of ",
                         kMaxReplayWaitSeconds, " s a node"));
      }
    }
  }
  const MemoryPlan plan = BuildMemoryPlan(g);
  const std::vector<NodeId>& order = plan.order;
  const int64_t n = static_cast<int64_t>(order.size());
  const std::vector<char>& owns = plan.owns;
  const absl::flat_hash_set<int64_t>& resident = plan.resident;
  // The simulator's peak: reported beside the measured one, and with real buffers the
  // test that refuses up front what cannot fit.
  OVERLAP_ASSIGN_OR_RETURN(const SimulationResult sim, SimulateAlone(g, order));
  if (!options.count_only) {
    OVERLAP_RETURN_IF_ERROR(CheckMemoryGuard(sim.peak_memory_bytes, options.guard_bytes, "replay",
                                             "its peak of buffers",
                                             "--count-only counts them instead", {&g}));
  }
  // A bucket's reduction is issued at its last member.
  absl::flat_hash_map<int64_t, int64_t> bucket_end;
  for (int64_t i = 0; i < n; ++i) {
    const Node& node = g.node(order[i]);
    if (IsReduce(node) && ReduceBucket(node) >= 0) bucket_end[ReduceBucket(node)] = i;
  }

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
      OVERLAP_RETURN_IF_ERROR(device.Take(id, SizeOf(node)));
    }
    if (IsAllgather(node) && resident.contains(DsId(node))) {
      OVERLAP_RETURN_IF_ERROR(device.Take(id, SizeOf(node)));
    }
  }
  ReplayResult r;
  r.simulated_peak_bytes = sim.peak_memory_bytes;
  // Owned tuple elements (the memory plan's owned_element) are taken with their tuple, which
  // keeps the rest of its bytes.
  absl::flat_hash_map<NodeId, std::vector<NodeId>> elements;
  for (NodeId id : order) {
    if (plan.owned_element[id]) elements[HandedOnFrom(g.node(id))].push_back(id);
  }
  std::vector<NodeId> reads;
  for (int64_t i = 0; i < n; ++i) {
    const NodeId id = order[i];
    const Node& node = g.node(id);
    const bool element = plan.owned_element[id] != 0;
    if (owns[id] && node.op() != Op::kPlaceholder && !element) {
      auto it = elements.find(id);
      if (it == elements.end()) {
        OVERLAP_RETURN_IF_ERROR(device.Take(id, SizeOf(node)));
      } else {
        OVERLAP_RETURN_IF_ERROR(device.Take(id, TupleRemainderBytes(g, id, plan.owned_element)));
        for (NodeId e : it->second) OVERLAP_RETURN_IF_ERROR(device.Take(e, SizeOf(g.node(e))));
      }
    }
    if (IsAllgather(node)) {
      if (!resident.contains(DsId(node))) {
        OVERLAP_RETURN_IF_ERROR(device.Take(id, SizeOf(node)));
        gathered[DsId(node)].copies.push_back(id);
      }
      OVERLAP_RETURN_IF_ERROR(device.Allgather(node, id));
    } else if (IsWait(node) && !node.inputs().empty()) {
      OVERLAP_RETURN_IF_ERROR(device.WaitAllgather(node, plan.root[node.inputs()[0]]));
    } else if (IsReduce(node) && !node.inputs().empty()) {
      const int64_t b = ReduceBucket(node);
      OVERLAP_RETURN_IF_ERROR(
          device.Reduce(node, plan.root[node.inputs()[0]], b < 0 || bucket_end[b] == i));
    } else if (IsCallNode(node) && !IsZero3Op(node)) {
      reads.clear();
      for (NodeId in : node.inputs()) {
        if (plan.pos[in] >= 0) reads.push_back(plan.root[in]);
      }
      OVERLAP_RETURN_IF_ERROR(device.Compute(node, ReplayWaitSeconds(node, options.time_scale),
                                             reads, owns[id] && !element ? id : -1));
    }
    if (IsRelease(node) && !resident.contains(DsId(node))) {
      auto it = gathered.find(DsId(node));
      if (it != gathered.end() && ++it->second.releases == NUsers(node)) {
        it->second.releases = 0;
        if (!it->second.copies.empty()) {
          OVERLAP_RETURN_IF_ERROR(device.Give(it->second.copies.front()));
          it->second.copies.pop_front();
        }
      }
    }
    for (NodeId s : plan.frees_at[i]) OVERLAP_RETURN_IF_ERROR(device.Give(s));
    ++r.nodes_run;
  }
  OVERLAP_RETURN_IF_ERROR(device.Finish());
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.peak_bytes = device.peak();
  r.final_bytes = device.live();
  return r;
}

}  // namespace overlap
