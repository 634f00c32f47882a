// Checks a ZeRO-3 schedule (an order of a graph's nodes) against the invariants of
// docs/deepcompile.md ("What a schedule must satisfy"):
//   - it is a permutation of the graph's nodes and a topological order (args and kwargs);
//   - every use of a gathered parameter (a reader of its wait, looking through views, which
//     read no data themselves and are not uses) comes
//     after the wait and before the release that frees the buffer (the one whose running
//     count reaches n_users);
//   - every reduce_grad comes after the gradient it reduces;
//   - when a budget is given, the peak of gathered bytes stays within it.
// The first violation is returned as InvalidArgument (a bad-input error, graph/errors.h)
// naming the nodes. O(N + E).
#ifndef OVERLAP_SCHEDULE_SCHEDULE_VERIFIER_H_
#define OVERLAP_SCHEDULE_SCHEDULE_VERIFIER_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// peak_gathered_bytes as the result format defines it: walking `order`, + an allgather's
// bytes (SizeOf) at the allgather, - it at the release of that ds_id (args[2]) whose running
// count reaches n_users (args[3]); the maximum reached. Persistent allgathers (resident
// parameters) count from the start and are never released. O(N).
int64_t PeakGatheredBytes(const Graph& g, absl::Span<const NodeId> order);

absl::Status VerifySchedule(const Graph& g, absl::Span<const NodeId> order,
                            std::optional<int64_t> gathered_budget = std::nullopt);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_SCHEDULE_VERIFIER_H_
