// Splitting a graph into per-bucket subgraphs with torch.fx `split_module` semantics.
//
// Every node except placeholders, get_attr nodes and the output belongs to a partition (its
// bucket's index). Each non-empty partition i becomes `submod_<i>`: a verified Graph whose
// placeholders are the values it reads from outside (placeholders, get_attr results, other
// partitions' values), in order of first use in a graph-order walk through args then
// kwargs, and whose output returns the values other partitions or the graph output read, in
// order of their first such use: bare when one, a tuple (list) when several, `()` when none.
// The outer graph keeps the placeholders and get_attr nodes, calls the submodules
// (call_module `submod_<i>`) in a deterministic topological order (ascending partition
// index among those ready: Kahn's algorithm with a min-heap), unpacks tuple results with
// `operator.getitem`, and returns what the original returned.
//
// InlineSubmodules is the inverse: it substitutes each call by its subgraph; the result has
// the original's nodes and edges (tests check it on every split).
#ifndef OVERLAP_PARTITION_SPLIT_H_
#define OVERLAP_PARTITION_SPLIT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "partition/buckets.h"

namespace overlap {

struct Submodule {
  std::string name;             // "submod_<partition>"
  int partition = 0;            // = bucket index
  std::vector<NodeId> nodes;    // source nodes, graph order
  std::vector<NodeId> inputs;   // source values read from outside, first-use order
  std::vector<NodeId> outputs;  // source values read outside, first-use order
  Graph graph;                  // the subgraph (its nodes keep the source names)
};

struct SplitGraph {
  Graph outer;
  std::vector<Submodule> submodules;  // ascending partition index
  std::vector<int> call_order;        // indices into submodules, in the outer graph's order
};

// Splits `g` by `buckets` (from AssignBuckets on the same graph). Fails if the buckets do
// not cover the nodes. O(N + E) plus the copies.
absl::StatusOr<SplitGraph> Split(const Graph& g, const std::vector<Bucket>& buckets);

// Substitutes each submodule call of `split.outer` by the submodule's nodes. O(N + E).
absl::StatusOr<Graph> InlineSubmodules(const SplitGraph& split);

// Whether two graphs have the same nodes (name, op, target, arguments with references by
// name, kwargs) and so the same edges, whatever their order. For checking InlineSubmodules.
bool SameNodesAndEdges(const Graph& a, const Graph& b, std::string* why = nullptr);

}  // namespace overlap

#endif  // OVERLAP_PARTITION_SPLIT_H_
