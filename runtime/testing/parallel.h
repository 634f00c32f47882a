// Data-parallel checks (test-only): tiny models at a chosen batch, seeded parameters, and
// the reference every data-parallel test compares with: one process training the whole
// global batch.
#ifndef OVERLAP_RUNTIME_TESTING_PARALLEL_H_
#define OVERLAP_RUNTIME_TESTING_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/aot.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/tensor.h"
#include "runtime/train/train.h"

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

// What a data-parallel test rank starts from: the model at the global batch (rows x world)
// and at its own (rows), the seeded parameters, and the one-process reference after
// `steps` steps on the global batches (task seed 3).
struct ParallelCase {
  std::unique_ptr<Allocator> alloc = std::make_unique<Allocator>();
  AotPair global, local;
  TensorMap init, want;
};
absl::StatusOr<ParallelCase> MakeParallelCase(absl::string_view model, int64_t rows, int world,
                                              int steps, const OptimizerOptions& optimizer);

// Test rank `rank`'s Gloo communicator through store folder `dir` (60 s timeout), with the
// deterministic mode and the race switches (random delays; the caller poisons freed
// storage) as asked.
absl::StatusOr<std::unique_ptr<Communicator>> TestCommunicator(int rank, int world,
                                                               const std::string& dir,
                                                               bool deterministic, bool race);

// Prints "rank R: what" to stderr and returns `code` (a forked rank's exit code).
int Fail(int rank, const std::string& what, int code);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TESTING_PARALLEL_H_
