#include "schedule/simple_prefetch.h"

#include <set>

#include "absl/container/flat_hash_map.h"
#include "graph/status_macros.h"
#include "schedule/analysis.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

class Prefetch {
 public:
  explicit Prefetch(const Graph& g)
      : g_(g),
        waiting_(g.id_bound(), 0),
        scheduled_(g.id_bound(), 0),
        position_(g.id_bound(), 0),
        dependents_(g.id_bound()) {
    int64_t i = 0;
    for (NodeId id : g.order()) {
      position_[id] = i++;
      const std::vector<NodeId> deps = BaselineDependencies(g, id);
      waiting_[id] = static_cast<int>(deps.size());
      for (NodeId d : deps) dependents_[d].push_back(id);
      ++remaining_;
    }
  }

  absl::StatusOr<std::vector<NodeId>> Run() {
    // Nodes without dependencies start out scheduled, in graph order.
    std::vector<NodeId> initial;
    for (NodeId id : g_.order()) {
      if (waiting_[id] == 0) initial.push_back(id);
    }
    for (NodeId id : initial) {
      committed_.push_back(id);
      Mark(id, /*real=*/true, nullptr);
    }
    // (1) from everything ready that is not an allgather, in graph order.
    std::vector<NodeId> stack;
    for (int64_t pos : runnable_) {
      const NodeId id = by_position_.at(pos);
      if (!IsAllgather(id)) stack.push_back(id);
    }
    std::vector<NodeId> tentative;
    Drain(&stack, /*real=*/true, &tentative);
    while (remaining_ > 0) {
      if (runnable_.empty()) return absl::InternalError("simple_prefetch: nothing runnable");
      NodeId best = kNoNode;
      double best_time = -1;
      const std::vector<int64_t> candidates(runnable_.begin(), runnable_.end());
      for (int64_t pos : candidates) {
        const NodeId ag = by_position_.at(pos);
        std::vector<NodeId> trial;
        const double t = Try(ag, /*real=*/false, &trial);
        if (t > best_time) {
          best_time = t;
          best = ag;
        }
      }
      committed_.push_back(best);
      committed_.insert(committed_.end(), tentative.begin(), tentative.end());
      tentative.clear();
      Try(best, /*real=*/true, &tentative);
    }
    std::vector<NodeId> order = committed_;
    order.insert(order.end(), tentative.begin(), tentative.end());
    OVERLAP_RETURN_IF_ERROR(CheckBaselineOrder(g_, order, "simple_prefetch"));
    return order;
  }

 private:
  bool IsAllgather(NodeId id) const { return overlap::IsAllgather(g_.node(id)); }

  // Schedules `id`: its dependents' counters drop; the newly ready ones are appended to
  // *ready (when given). Real changes also maintain the runnable set; trial changes are
  // journaled for Undo.
  void Mark(NodeId id, bool real, std::vector<NodeId>* ready) {
    scheduled_[id] = 1;
    if (real) {
      --remaining_;
      runnable_.erase(position_[id]);
    } else {
      journal_.push_back(id);
    }
    for (NodeId d : dependents_[id]) {
      if (--waiting_[d] == 0) {
        if (ready != nullptr) ready->push_back(d);
        if (real) {
          runnable_.insert(position_[d]);
          by_position_[position_[d]] = d;
        }
      }
    }
  }

  void Undo() {
    for (auto it = journal_.rbegin(); it != journal_.rend(); ++it) {
      scheduled_[*it] = 0;
      for (NodeId d : dependents_[*it]) ++waiting_[d];
    }
    journal_.clear();
  }

  // Step (1): pop from the end, push newly ready non-allgathers in dependent order.
  void Drain(std::vector<NodeId>* stack, bool real, std::vector<NodeId>* out) {
    std::vector<NodeId> ready;
    while (!stack->empty()) {
      const NodeId id = stack->back();
      stack->pop_back();
      ready.clear();
      Mark(id, real, &ready);
      for (NodeId r : ready) {
        if (!IsAllgather(r)) stack->push_back(r);
      }
      out->push_back(id);
    }
  }

  // Schedules `ag` and then step (1) from its newly ready dependents; returns the device
  // time of what followed it (the unblock time). A trial is undone before returning.
  double Try(NodeId ag, bool real, std::vector<NodeId>* out) {
    std::vector<NodeId> ready;
    Mark(ag, real, &ready);
    std::vector<NodeId> stack;
    for (NodeId r : ready) {
      if (!IsAllgather(r)) stack.push_back(r);
    }
    Drain(&stack, real, out);
    double t = 0;
    for (NodeId n : *out) {
      const NodeMeta& m = g_.node(n).meta();
      t += m.has_device_time ? m.device_time : 0;
    }
    if (!real) Undo();
    return t;
  }

  const Graph& g_;
  std::vector<int> waiting_;
  std::vector<char> scheduled_;
  std::vector<int64_t> position_;
  std::vector<std::vector<NodeId>> dependents_;
  int64_t remaining_ = 0;
  std::set<int64_t> runnable_;  // positions of ready, unscheduled nodes
  absl::flat_hash_map<int64_t, NodeId> by_position_;
  std::vector<NodeId> journal_;
  std::vector<NodeId> committed_;
};

}  // namespace

absl::StatusOr<std::vector<NodeId>> SimplePrefetchSchedule(const Graph& g) {
  return Prefetch(g).Run();
}

}  // namespace overlap
