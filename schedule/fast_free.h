// DeepSpeed DeepCompile's fast_free_schedule, efficiently: the same order as
// FastFreeScheduleReference (schedule/testing/fast_free_reference.h, written straight from
// the definition), which tests check differentially on random graphs and on every built-in
// model.
//
// Where the time goes in the reference, and what this version does instead:
//   - the allgathers on each path (for every allgather, reduce_grad and graph output) come
//     from one forward pass of bitsets (the allgathers among a node's args-ancestors),
//     not one depth-first search each; choosing an allgather clears its bit everywhere;
//   - "done" sets during a round are an epoch-stamped overlay on the scheduled flags, not
//     copies of them; visited sets in requirement searches are stamped arrays too.
// Cost: O(N x A / 64) for the bitsets, then per round O(A x A / 64) for the counts plus the
// requirement searches of the round's candidates (local to the unscheduled frontier).
#ifndef OVERLAP_SCHEDULE_FAST_FREE_H_
#define OVERLAP_SCHEDULE_FAST_FREE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

// How fast_free holds its path sets (the allgathers each target still needs).
struct FastFreeOptions {
  enum class PathSets {
    // Bitsets while they are small next to the graph (at most 64 bytes per node, or
    // 16 MiB), counts otherwise: memory stays linear in the graph.
    kAuto,
    // Bitsets always (A^2 bits; bounded at 4 GiB: beyond, ResourceExhausted).
    kBitsets,
    // Counts kept by walking each chosen allgather's args-descendants: O(N + E) memory,
    // O(A x N) time at worst.
    kCounts,
  };
  PathSets path_sets = PathSets::kAuto;
};

// The fast_free order of `g`; same contract and errors as FastFreeScheduleReference.
absl::StatusOr<std::vector<NodeId>> FastFreeSchedule(const Graph& g);
// The same with explicit options (the order does not depend on them).
absl::StatusOr<std::vector<NodeId>> FastFreeScheduleWith(const Graph& g,
                                                         const FastFreeOptions& options);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_FAST_FREE_H_
