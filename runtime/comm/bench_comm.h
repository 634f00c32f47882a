// Collective benchmarks as nccl-tests reports them, and the alpha-beta fit the simulator
// and schedulers take (`overlap bench-comm`, graph/cost_model.h's CollectiveModel::Fit).
//
// For a collective on P ranks moving a full tensor of B bytes taking t seconds:
//   algorithm bandwidth algbw = B / t;
//   bus bandwidth busbw = algbw x (P - 1) / P (allgather, reduce-scatter), x 2 (P - 1) / P
//   (allreduce): the bytes each rank's link carries per second, comparable across P.
// The fit is least squares of t = latency + factor x (P - 1) / P x B / busbw over the sizes,
// i.e. a line in B; the model then predicts each collective from its own latency and bus
// bandwidth.
#ifndef OVERLAP_RUNTIME_COMM_BENCH_COMM_H_
#define OVERLAP_RUNTIME_COMM_BENCH_COMM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph/cost_model.h"
#include "runtime/comm/communicator.h"

namespace overlap {

enum class CollectiveKind { kAllreduce, kAllgather, kReduceScatter };
absl::string_view CollectiveName(CollectiveKind k);

struct BenchRow {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  int64_t bytes = 0;  // the full tensor (allgather's output, reduce-scatter's input)
  int64_t iterations = 0;
  double seconds = 0;  // mean per operation, slowest rank's view (max over ranks)
  double algbw = 0;    // bytes / second
  double busbw = 0;
};

struct BenchOptions {
  std::vector<int64_t> sizes;  // bytes, each a multiple of 4 x world
  // Iterations per size: enough to move about `bytes_per_size` (at least 2, at most 50),
  // after one warm-up.
  int64_t bytes_per_size = int64_t{256} << 20;
  // And no more than fit in `seconds_per_size` at the warm-up's pace (the slowest rank's,
  // shared by one more small allgather per size, so every rank runs the same count): on a
  // slow link the bytes alone would take minutes a size. Infinite: the bytes decide.
  absl::Duration seconds_per_size = absl::InfiniteDuration();
  absl::Duration timeout = absl::Seconds(120);
};

// Runs every collective at every size on `comm` (a collective call: every rank must call
// it with the same options). Float32 tensors. Rows in (kind, size) order.
absl::StatusOr<std::vector<BenchRow>> BenchCollectives(Communicator& comm,
                                                       const BenchOptions& options);

// The fitted model for `world` ranks (its shared latency and bandwidth are the allreduce's):
// per collective, time = latency + bytes x factor / bus bandwidth, the bandwidth by least
// squares over the large sizes (at least 1/64 of the largest, at least two) and the latency
// the median over all sizes of the time the bandwidth leaves, so large sizes set the
// bandwidth and noisy small ones cannot pull it. InvalidArgument without at least two sizes
// per collective. O(rows log rows).
absl::StatusOr<CollectiveModel> FitCollectiveModel(const std::vector<BenchRow>& rows, int world);

// Sizes from `lo` to `hi` doubling ("4KiB..256MiB"), each rounded up to a multiple of
// `multiple`. InvalidArgument for a malformed range.
absl::StatusOr<std::vector<int64_t>> ParseSizeRange(absl::string_view range, int64_t multiple);

// memcpy's bandwidth on this machine for a `bytes` copy (bytes / second), for comparison.
double MemcpyBandwidth(int64_t bytes);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_COMM_BENCH_COMM_H_
