// A training step's data: the synthetic tasks tiny models learn (SyntheticTask), the
// batches of a data file (SplitBatches), and a rank's rows of a global batch (ShardRows).
#ifndef OVERLAP_RUNTIME_TRAIN_DATA_H_
#define OVERLAP_RUNTIME_TRAIN_DATA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/tensor.h"

namespace overlap {

// The batches of a data file's tensors (docs/runtime.md, "Data files"): keys
// "batch/<k>/<input>" make batch k (k = 0 .. K-1 in plain decimal, every index present;
// other keys are then ignored: a file may carry weights and torch's reference too); a map
// without "batch/" keys is one batch of all its tensors. InvalidArgument naming a malformed
// key (an index with a sign, a space or a leading zero among them) or a missing index.
// O(tensors).
absl::StatusOr<std::vector<TensorMap>> SplitBatches(const TensorMap& tensors);

// The synthetic tasks a tiny model learns in a few dozen steps, by the forward's inputs:
//   - language models (input_ids and labels placeholders): fresh random token sequences
//     each step, the labels the inputs themselves (the copy task);
//   - MSE models (x and targets): fresh standard-normal inputs, targets a fixed random
//     linear teacher of them;
//   - others (resnet18): one fixed seeded batch, memorised.
// Batches are a function of (seed, step) only, so ranks that each build the global batch
// and take their rows (ShardRows) see one consistent global batch.
class SyntheticTask {
 public:
  // `forward` (not owned) must outlive the task; its placeholders give the batch's shapes.
  SyntheticTask(const Graph& forward, uint64_t seed)
      : forward_(&forward), seed_(seed), alloc_(std::make_unique<Allocator>()) {}
  // Step `step`'s batch (data placeholders by name). O(batch).
  absl::StatusOr<TensorMap> Batch(int64_t step);

 private:
  const Graph* forward_;
  uint64_t seed_;
  std::unique_ptr<Allocator> alloc_;
  Tensor teacher_;
  TensorMap fixed_;
};

// Rank `rank`'s block of rows of every tensor of a global batch (dimension 0 split into
// `world` equal blocks; views, no copies). InvalidArgument naming a tensor that does not
// split evenly.
absl::StatusOr<TensorMap> ShardRows(const TensorMap& batch, int rank, int world);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_DATA_H_
