// Internal to the fast_free library: fast_free's rounds on interval lists (fast_free.h,
// PathSets::kIntervals). Not a public header.
#ifndef OVERLAP_SCHEDULE_FAST_FREE_INTERVALS_H_
#define OVERLAP_SCHEDULE_FAST_FREE_INTERVALS_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {
namespace internal {

// The fast_free order of `g` computed on interval lists, or nullopt when the lists would
// exceed their budget (about 8 entries per node and edge: graphs whose ancestor sets no
// ranking keeps contiguous), in which case the caller uses the bitsets or the counts.
// Errors: those of FastFreeSchedule.
absl::StatusOr<std::optional<std::vector<NodeId>>> FastFreeByIntervals(const Graph& g);

}  // namespace internal
}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_FAST_FREE_INTERVALS_H_
