// The optimizer, described once: which update rule a training step applies
// (runtime/train/train.h runs it) and, from the same description, how much state it keeps per
// parameter (schedule/budget.h counts it). PyTorch's torch.optim.SGD (momentum, dampening 0)
// and AdamW.
//
//   OptimizerOptions o;                      // AdamW, lr 0.01
//   o.kind = OptimizerKind::kSgd;
//   o.momentum = 0;                          // plain SGD: no state at all
//   OptimizerStateTensors(o);                // 0
#ifndef OVERLAP_SCHEDULE_OPTIMIZER_H_
#define OVERLAP_SCHEDULE_OPTIMIZER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

enum class OptimizerKind { kSgd, kAdamW };

// "sgd" or "adamw"; also "adam" (AdamW) and "momentum" (SGD, whose momentum is a separate
// setting), the spellings the budget flags once had. InvalidArgument listing them otherwise.
// O(1).
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);
// "sgd" or "adamw". O(1).
absl::string_view OptimizerKindName(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-2;
  double momentum = 0.9;                          // SGD; 0: plain SGD, which keeps no state
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  double weight_decay = 0.0;  // decoupled (AdamW), or L2 added to the gradient (SGD)
};

// The fp32 state tensors the update keeps per parameter, each of the parameter's shape:
// AdamW 2 (first and second moments), SGD 1 (the momentum buffer) or 0 at momentum 0. O(1).
int OptimizerStateTensors(const OptimizerOptions& o);

// "adamw", "sgd (momentum 0.9)" or "sgd (no momentum)": how reports name it. O(1).
std::string OptimizerLabel(const OptimizerOptions& o);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_OPTIMIZER_H_
