// The data-parallel strategies by name, and the one place a trainer is made from one: a
// job (runtime/job/job.h) reads the strategy from its flags and trains through the
// DistributedTrainer this returns, whichever it is.
//
//   absl::StatusOr<Strategy> s = ParseStrategy("zero3");
//   absl::StatusOr<std::unique_ptr<DistributedTrainer>> t =
//       CreateTrainer(*s, pair, params, comm, options);
#ifndef OVERLAP_RUNTIME_TRAIN_STRATEGY_H_
#define OVERLAP_RUNTIME_TRAIN_STRATEGY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/aot.h"
#include "partition/buckets.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/tensor.h"
#include "runtime/train/distributed_trainer.h"

namespace overlap {

// DDP: whole replicas, gradients allreduced in buckets (ddp.h). ZeRO-3: parameters sharded,
// gathered and released as the scheduled graphs say, gradients reduce-scattered (zero3.h).
enum class Strategy { kDdp, kZero3 };

// "ddp" or "zero3"; InvalidArgument listing them otherwise.
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name);
absl::string_view StrategyName(Strategy s);

// The strategy's trainer for `pair` (ZeRO-3: with its ops inserted and scheduled), starting
// from `params` (whole, by parameter name, identical on every rank), over `comm` (not owned;
// it outlives the trainer). `bucket_cap_bytes` is DDP's bucket cap (ZeRO-3's buckets are the
// graphs'). Errors: the strategy's Create's (DdpTrainer::Create, Zero3Trainer::Create).
absl::StatusOr<std::unique_ptr<DistributedTrainer>> CreateTrainer(
    Strategy strategy, const AotPair& pair, const TensorMap& params, Communicator* comm,
    const TrainerOptions& options, int64_t bucket_cap_bytes = kDefaultBucketCapBytes);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_STRATEGY_H_
