// Data-parallel checks (test-only): tiny models at a chosen batch, seeded parameters, and
// the reference every data-parallel test compares with: one process training the whole
// global batch.
#ifndef OVERLAP_RUNTIME_TESTING_PARALLEL_H_
#define OVERLAP_RUNTIME_TESTING_PARALLEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/aot.h"
#include "runtime/tensor.h"
#include "runtime/train.h"

namespace overlap {

// `model`'s tiny AOT pair (lifted parameters) at `batch` rows.
absl::StatusOr<AotPair> TinyPair(absl::string_view model, int64_t batch);

// The pair's parameters, seeded, by parameter name (the same for every batch size).
absl::StatusOr<TensorMap> SeededParams(const AotPair& pair, Allocator& alloc, uint64_t seed = 5);

// `steps` optimizer steps of one process on SyntheticTask(global.forward, task_seed)'s
// batches 0 .. steps-1, from a deep copy of `params` (left unchanged).
absl::StatusOr<TensorMap> TrainOneProcess(const AotPair& global, TensorMap params, int steps,
                                          const OptimizerOptions& optimizer, uint64_t task_seed);

// "" when every tensor of `want` has a counterpart in `got` within
// max|a - b| <= tolerance * max|b|; else what differs (the first tensor).
std::string CompareParams(const TensorMap& got, const TensorMap& want, double tolerance);

// Whether two parameter sets are bit-identical ("" when they are).
std::string CompareBits(const TensorMap& got, const TensorMap& want);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TESTING_PARALLEL_H_
