// DeepSpeed DeepCompile's fast_free_schedule, written straight from the specification
// (shared/reference/deepcompile.md, "fast_free_schedule (reproduce exactly)"), and the two
// helpers it is defined by: last uses and requirements.
//
// This is the obviously-correct version: it recomputes requirement lists the way the
// reference does, so it costs O(A^2 N) for A allgathers and N nodes, like DeepSpeed's own
// (but in C++). It is the oracle the efficient scheduler will be tested against
// (differentially, on random graphs); use it directly only on small graphs.
//
//   absl::StatusOr<std::vector<NodeId>> order = FastFreeScheduleReference(g);
#ifndef OVERLAP_SCHEDULE_FAST_FREE_REFERENCE_H_
#define OVERLAP_SCHEDULE_FAST_FREE_REFERENCE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// last_use[n] for every node id (kNoNode when nobody reads n): the latest, in graph order,
// of eff(u) over the readers u of n (through args and kwargs), where eff(u) = u for an
// ordinary reader and, for a reader with meta.aliases_input, last_use[u] if u has readers
// and u otherwise. One reverse walk. O(N + E).
// `releases_pass_through`: also treat dc.release_param readers like views (they hand the
// same tensor on), which is when a tensor's storage dies (the simulator's view); the
// DeepSpeed definition, used by fast_free, does not.
std::vector<NodeId> LastUses(const Graph& g, bool releases_pass_through = false);

// requirements(target, done): the nodes not in `done` that `target` transitively needs,
// `target` included, in depth-first post-order over args only (not kwargs), each node once.
// Empty when `target` is done. Iterative. O(nodes visited).
std::vector<NodeId> Requirements(const Graph& g, NodeId target, const std::vector<char>& done);

// The fast_free order of `g` (a graph with ZeRO-3 ops, see zero3_insertion.h). Fails when
// an allgather has no last use (nobody reads it; the reference raises KeyError) or when the
// order breaks a dependency through kwargs (which requirements cannot see; the reference
// raises KeyError). The output node is not forced last.
absl::StatusOr<std::vector<NodeId>> FastFreeScheduleReference(const Graph& g);

// Whether `order` is a permutation of g's nodes in which every node follows all its data
// inputs (args and kwargs). O(N + E).
absl::Status CheckTopologicalPermutation(const Graph& g, absl::Span<const NodeId> order);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_FAST_FREE_REFERENCE_H_
