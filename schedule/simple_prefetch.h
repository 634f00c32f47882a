// The `simple_prefetch` scheduler of DeepSpeed DeepCompile's list_schedule.py
// (docs/deepcompile.md, "The `simple_prefetch` scheduler").
//
// Dependencies as in the list scheduler (args only; dc.* ops: args[0]); nodes without any
// start out scheduled. (1) Schedule every ready non-allgather node, repeatedly, most
// recently readied first (a stack seeded with the ready nodes in graph order; each node
// scheduled pushes its newly ready non-allgather dependents, in dependent order). These
// are tentative. (2) While nodes remain: for each ready node (the allgathers), in graph
// order, try scheduling it followed by step (1) from its newly ready dependents; its
// unblock time is the device_time of what that trial schedules after it. The largest wins
// (ties: graph order). Commit it, then the tentative nodes (so the allgather is issued
// ahead of them: the prefetch), and make its trial's nodes the new tentative ones. The
// order is the committed nodes followed by the tentative ones. It has no memory budget.
// Cost: per round, one trial per ready allgather (each undone through a journal).
#ifndef OVERLAP_SCHEDULE_SIMPLE_PREFETCH_H_
#define OVERLAP_SCHEDULE_SIMPLE_PREFETCH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

// The simple_prefetch order of `g`. An unsupported-graph error (graph/errors.h) if the order
// breaks a dependency through kwargs (which the baselines do not see).
absl::StatusOr<std::vector<NodeId>> SimplePrefetchSchedule(const Graph& g);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_SIMPLE_PREFETCH_H_
