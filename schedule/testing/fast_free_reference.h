// DeepSpeed DeepCompile's fast_free_schedule written straight from its definition
// (docs/deepcompile.md, "fast_free_schedule"), for differential tests of the efficient
// FastFreeSchedule (schedule/fast_free.h). Test-only.
//
// An oracle must not share what it checks: this file reads the dc.* ops through
// zero3_ops.h, but computes last uses, requirements and its tasks itself, the plain way
// (visited sets are hash sets; requirement lists are recomputed each round). It costs
// O(A^2 N) for A allgathers and N nodes, like DeepSpeed's own; use it on small graphs.
//
//   absl::StatusOr<std::vector<NodeId>> order = FastFreeScheduleReference(g);
#ifndef OVERLAP_SCHEDULE_TESTING_FAST_FREE_REFERENCE_H_
#define OVERLAP_SCHEDULE_TESTING_FAST_FREE_REFERENCE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

// The fast_free order of `g` (a graph with ZeRO-3 ops). Unsupported-graph errors
// (graph/errors.h) when an allgather has no last use (nobody reads it; DeepSpeed raises
// KeyError) or when the order breaks a dependency through kwargs (which requirements cannot
// see). The output node is not forced last. `deepspeed_019`: DeepSpeed 0.19's two changed
// rules (docs/deepcompile.md, "Checked against DeepSpeed": R1, R2).
absl::StatusOr<std::vector<NodeId>> FastFreeScheduleReference(const Graph& g,
                                                              bool deepspeed_019 = false);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_TESTING_FAST_FREE_REFERENCE_H_
