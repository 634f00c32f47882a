#include "runtime/train/strategy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/train/ddp.h"
#include "runtime/train/zero3.h"

namespace overlap {

absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  if (name == "ddp") return Strategy::kDdp;
  if (name == "zero3") return Strategy::kZero3;
  return absl::InvalidArgumentError(absl::StrCat("unknown strategy '", name, "' (ddp or zero3)"));
}

absl::string_view StrategyName(Strategy s) { return s == Strategy::kDdp ? "ddp" : "zero3"; }

absl::StatusOr<std::unique_ptr<DistributedTrainer>> CreateTrainer(
    Strategy strategy, const AotPair& pair, const TensorMap& params, Communicator* comm,
    const TrainerOptions& options, int64_t bucket_cap_bytes) {
  if (strategy == Strategy::kDdp) {
    DdpOptions d;
    static_cast<TrainerOptions&>(d) = options;
    d.bucket_cap_bytes = bucket_cap_bytes;
    OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<DdpTrainer> t,
                             DdpTrainer::Create(pair, params, comm, d));
    return std::unique_ptr<DistributedTrainer>(std::move(t));
  }
  Zero3Options z;
  static_cast<TrainerOptions&>(z) = options;
  OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<Zero3Trainer> t,
                           Zero3Trainer::Create(pair, params, comm, z));
  return std::unique_ptr<DistributedTrainer>(std::move(t));
}

}  // namespace overlap
