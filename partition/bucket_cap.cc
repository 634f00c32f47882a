#include "partition/bucket_cap.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

CapCandidate PredictExposed(const Graph& g, const std::vector<Bucket>& buckets,
                            const CollectiveModel& comm, double backward_factor) {
  CapCandidate c;
  c.buckets = static_cast<int>(buckets.size());
  // Each bucket's backward, and whether backward time is left after bucket k's (backward
  // runs the buckets last to first: buckets 0..k-1 run after it).
  std::vector<double> backward(buckets.size(), 0);
  std::vector<char> more_after(buckets.size(), 0);
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (NodeId id : buckets[k].nodes) {
      backward[k] += backward_factor * g.node(id).meta().device_time;
    }
    if (k + 1 < buckets.size()) more_after[k + 1] = more_after[k] || backward[k] > 0;
  }
  double t = 0, comm_free = 0;
  for (size_t k = buckets.size(); k-- > 0;) {
    const Bucket* b = &buckets[k];
    t = comm.ComputeEnd(t, backward[k], comm_free);
    double ar = comm.Allreduce(b->size_bytes);
    // Started on an idle stream with backward still to run: its threads woken beside it.
    if (ar > 0 && comm_free <= t && more_after[k]) ar += comm.busy_start_s;
    if (ar > 0) {
      comm_free = std::max(comm_free, t) + ar;
      c.comm_s += ar;
    }
  }
  c.backward_s = t;
  c.exposed_s = std::max(0.0, comm_free - t);
  return c;
}

absl::StatusOr<CapChoice> ChooseBucketCap(const Graph& g, PartitionMode mode,
                                          const CollectiveModel& comm, int64_t first_bucket_cap,
                                          double backward_factor) {
  if (!comm.Valid() || !(backward_factor > 0)) {
    return absl::InvalidArgumentError(
        "allreduce model needs world size >= 1, latency >= 0, bandwidth > 0");
  }
  // All trainable bytes, counted as the mode counts them, bound the useful caps.
  BucketOptions all;
  all.mode = mode;
  all.bucket_cap_bytes = INT64_MAX;
  all.first_bucket_cap_bytes = INT64_MAX;
  absl::StatusOr<std::vector<Bucket>> one = AssignBuckets(g, all);
  OVERLAP_RETURN_IF_ERROR(one.status());
  int64_t total = 0;
  for (const Bucket& b : *one) total += b.size_bytes;
  std::vector<int64_t> caps = {kDefaultBucketCapBytes};
  for (int64_t cap = int64_t{1} << 20;; cap *= 2) {
    caps.push_back(cap);
    if (cap >= total || cap >= (int64_t{1} << 40)) break;
  }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  CapChoice choice;
  for (int64_t cap : caps) {
    BucketOptions o;
    o.mode = mode;
    o.bucket_cap_bytes = cap;
    o.first_bucket_cap_bytes = std::min(first_bucket_cap, cap);
    absl::StatusOr<std::vector<Bucket>> buckets = AssignBuckets(g, o);
    OVERLAP_RETURN_IF_ERROR(buckets.status());
    CapCandidate c = PredictExposed(g, *buckets, comm, backward_factor);
    c.cap_bytes = cap;
    choice.candidates.push_back(c);
  }
  // The least backward plus exposed communication: with contention a cap that starts its
  // allreduces earlier slows the backward beside them, so exposure alone would favour it.
  // Ties (within rounding: the sums group the nodes' times by bucket) go to the larger cap.
  const CapCandidate* best = &choice.candidates[0];
  for (const CapCandidate& c : choice.candidates) {
    const double end = c.backward_s + c.exposed_s, best_end = best->backward_s + best->exposed_s;
    if (end <= best_end + 1e-9 * std::max(1.0, std::abs(best_end))) best = &c;
  }
  choice.cap_bytes = best->cap_bytes;
  return choice;
}

}  // namespace overlap
