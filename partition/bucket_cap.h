// Choosing the DDP bucket cap from a cost model (`overlap partition --bucket-cap auto`).
//
// DDP overlaps each bucket's allreduce with the backward of the buckets before it; the cap
// trades that overlap (small buckets start communicating early) against per-collective
// latency (many small allreduces). PyTorch cannot tune the cap separately (it is tied to
// graph breaks); here we predict, for each candidate cap, the backward and the
// communication left exposed after it ends, and take the cap whose sum is least.
//
// The model, per candidate:
//   - buckets from AssignBuckets (first cap min(1 MiB, cap), as DDP);
//   - backward time of a bucket = backward_factor x the forward device_time of its nodes
//     (backward computes two matmuls per forward matmul: gradients of inputs and weights;
//     2x is the standard estimate);
//   - backward runs the buckets last to first; a bucket's allreduce starts when its backward
//     is done and the previous allreduce finished (one communication stream);
//   - ring allreduce of B bytes on p ranks: latency + 2 (p - 1) / p x B / bandwidth;
//   - contention as the model gives it (graph/cost_model.h, 0 by default): backward runs
//     compute_slowdown slower while an allreduce is in flight, and an allreduce that starts
//     on an idle stream with backward time still to run takes busy_start_s longer;
//   - exposed = max(0, end of the last allreduce - end of backward);
//   - the choice: the least backward + exposed (the end of the backward's communication).
//     Without contention the backward is the same for every cap and this is the least
//     exposed; with it, a cap that overlaps more also slows the backward more.
// Candidates: 25 MiB (DDP's default) and every power of two from 1 MiB up to the first one
// that holds all trainable bytes in a single bucket. Ties go to the larger cap (fewer
// collectives). Cost: O(candidates x (N + E)).
#ifndef OVERLAP_PARTITION_BUCKET_CAP_H_
#define OVERLAP_PARTITION_BUCKET_CAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "partition/buckets.h"

namespace overlap {

struct CapCandidate {
  int64_t cap_bytes = 0;
  int buckets = 0;
  double backward_s = 0;  // predicted backward compute (slowed beside allreduces)
  double comm_s = 0;      // sum of allreduce times
  double exposed_s = 0;   // communication not hidden by backward
};

struct CapChoice {
  int64_t cap_bytes = 0;
  std::vector<CapCandidate> candidates;  // ascending cap
};

// Predicted exposed communication of one bucketing.
CapCandidate PredictExposed(const Graph& g, const std::vector<Bucket>& buckets,
                            const CollectiveModel& comm, double backward_factor = 2.0);

// Evaluates the candidates in `mode` and returns the one whose backward and exposed
// communication end first. Fails on an invalid model.
// Each candidate's first-bucket cap is min(first_bucket_cap, candidate).
absl::StatusOr<CapChoice> ChooseBucketCap(const Graph& g, PartitionMode mode,
                                          const CollectiveModel& comm,
                                          int64_t first_bucket_cap = kDefaultFirstBucketCapBytes,
                                          double backward_factor = 2.0);

}  // namespace overlap

#endif  // OVERLAP_PARTITION_BUCKET_CAP_H_
