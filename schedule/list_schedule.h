// The `list` scheduler of DeepSpeed DeepCompile's list_schedule.py, as intended
// (docs/deepcompile.md, "The `list` scheduler"; the original
// unpacks its helper's result wrongly and always raises).
//
// Dependencies are the nodes in a node's args (not kwargs); for the four dc.* ops only
// args[0]. Nodes with no dependencies start out scheduled, in graph order. Then, repeatedly,
// the ready node (all dependencies scheduled) with the smallest memory delta is scheduled:
// +its bytes (SizeOf) for an allgather, - them for a release or a reduce_grad, 0 otherwise;
// ties go to graph order. A baseline, not used upstream.
// Cost: O((N + E) log N).
#ifndef OVERLAP_SCHEDULE_LIST_SCHEDULE_H_
#define OVERLAP_SCHEDULE_LIST_SCHEDULE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// The list order of `g`. An unsupported-graph error (graph/errors.h) if the order breaks a
// dependency through kwargs (which the baselines do not see).
absl::StatusOr<std::vector<NodeId>> ListSchedule(const Graph& g);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_LIST_SCHEDULE_H_
