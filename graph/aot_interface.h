// The interface between the two graphs of an AOT pair (graph/aot.h's calling convention), as
// the pair rewrites read and change it: the backward's placeholders, the tangents' count, and
// the forward's returned list, whose items past the tangents' indices are the saved tensors.
//
//   const BackwardInputs in = ReadBackwardInputs(pair.backward);
//   for (NodeId s : SavedNodes(pair.forward, in.tangents)) ...
#ifndef OVERLAP_GRAPH_AOT_INTERFACE_H_
#define OVERLAP_GRAPH_AOT_INTERFACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

// A backward's inputs: its placeholders by name, the last of them, and the largest tangent
// index (`tangents_k`; forward outputs before it pair with tangents and are never dropped).
struct BackwardInputs {
  absl::flat_hash_map<std::string, NodeId> placeholder;
  NodeId last = kNoNode;  // kNoNode when the backward has no placeholder
  int64_t tangents = 0;
};

// Reads a backward's inputs. O(N).
BackwardInputs ReadBackwardInputs(const Graph& backward);

// The forward's output node when it returns a list (the AOT convention), else kNoNode. O(1).
NodeId ForwardOutputList(const Graph& forward);

// The forward's saved nodes (references among the returned list's items past the first
// `tangents`), in output order; empty when ForwardOutputList is kNoNode. O(outputs).
std::vector<NodeId> SavedNodes(const Graph& forward, int64_t tangents);

// Drops the forward's returned items past the first `tangents` that name one of `names`
// (saved tensors the backward no longer reads). Returns how many items left the list (0
// without a list output or names). O(outputs).
absl::StatusOr<int64_t> DropSavedOutputs(Graph* forward,
                                         const absl::flat_hash_set<std::string>& names,
                                         int64_t tangents);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_AOT_INTERFACE_H_
