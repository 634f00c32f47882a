// Analyses of ZeRO-3 graphs shared by the schedulers, the schedule verifier and the
// simulator: last uses, requirements (docs/deepcompile.md defines both), and the checks that
// an order is a schedule of a graph.
#ifndef OVERLAP_SCHEDULE_ANALYSIS_H_
#define OVERLAP_SCHEDULE_ANALYSIS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// What hands a tensor on to its readers when computing last uses.
enum class LastUseRule {
  // Views pass through (DeepSpeed's definition, which fast_free uses).
  kViews,
  // Views and dc.release_param pass through: when a tensor's storage dies (the simulator).
  kViewsAndReleases,
};

// last_use[n] for every node id (kNoNode when nobody reads n): the latest, in graph order,
// of eff(u) over the readers u of n (through args and kwargs), where eff(u) = u for an
// ordinary reader and, for a reader that passes the tensor through (per `rule`),
// last_use[u] if u has readers and u otherwise. One reverse walk. O(N + E).
std::vector<NodeId> LastUses(const Graph& g, LastUseRule rule = LastUseRule::kViews);

// requirements(target, done): the nodes not in `done` (indexed by node id) that `target`
// transitively needs, `target` included, in depth-first post-order over args only (not
// kwargs), each node once. Empty when `target` is done. Iterative. O(nodes visited) plus an
// O(id_bound) visited array per call (see RequirementSearch for repeated searches).
std::vector<NodeId> Requirements(const Graph& g, NodeId target, const std::vector<char>& done);

// Requirements for many searches over one graph: the visited set is an epoch-stamped array
// allocated once, so each search costs only the nodes it visits. `done(id)` says which
// nodes count as done for this search.
class RequirementSearch {
 public:
  explicit RequirementSearch(const Graph& g) : g_(g), visit_(g.id_bound(), 0) {}

  // Appends requirements(target, done) to *out; calls `on_add(id)` for each node appended
  // (before later nodes of the same search are considered).
  template <typename Done, typename OnAdd>
  void Collect(NodeId target, const Done& done, const OnAdd& on_add, std::vector<NodeId>* out);
  // The same without a callback.
  template <typename Done>
  void Collect(NodeId target, const Done& done, std::vector<NodeId>* out) {
    Collect(
        target, done, [](NodeId) {}, out);
  }

 private:
  struct Frame {
    NodeId node;
    size_t next;
  };
  const Graph& g_;
  std::vector<uint32_t> visit_;
  uint32_t epoch_ = 0;
  std::vector<Frame> stack_;
};

// OK when `order` is a permutation of g's nodes in which every node follows all its data
// inputs (args and kwargs); InvalidArgument naming the first offending node otherwise.
// O(N + E).
absl::Status CheckTopologicalPermutation(const Graph& g, absl::Span<const NodeId> order);

// The check every DeepCompile baseline ends with: the baselines follow args only, so their
// order can break a dependency through kwargs. OK when `order` is a topological permutation;
// otherwise an unsupported-graph error (errors.h) naming `scheduler` and the nodes. O(N + E).
absl::Status CheckBaselineOrder(const Graph& g, absl::Span<const NodeId> order,
                                absl::string_view scheduler);

// fast_free's output rows: the top-level references of the output node's value (its
// args[0], a list or a single value) that are not reduce_grads, in order, duplicates kept;
// empty when the last node is not the output. O(outputs).
std::vector<NodeId> FastFreeOutputItems(const Graph& g);

// The scheduling dependencies of a node as the DeepCompile baselines see them: its args
// references (each once), or only args[0] for dc.* ops. O(args).
std::vector<NodeId> BaselineDependencies(const Graph& g, NodeId id);

template <typename Done, typename OnAdd>
void RequirementSearch::Collect(NodeId target, const Done& done, const OnAdd& on_add,
                                std::vector<NodeId>* out) {
  if (done(target)) return;
  ++epoch_;
  stack_.clear();
  visit_[target] = epoch_;
  stack_.push_back({target, 0});
  while (!stack_.empty()) {
    Frame& f = stack_.back();
    absl::Span<const NodeId> args = g_.node(f.node).arg_inputs();
    if (f.next == args.size()) {
      out->push_back(f.node);
      on_add(f.node);
      stack_.pop_back();
      continue;
    }
    const NodeId in = args[f.next++];
    if (done(in) || visit_[in] == epoch_) continue;
    visit_[in] = epoch_;
    stack_.push_back({in, 0});
  }
}

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_ANALYSIS_H_
