#include "schedule/optimizer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "graph/text.h"

namespace overlap {

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  if (name == "sgd" || name == "momentum") return OptimizerKind::kSgd;
  if (name == "adamw" || name == "adam") return OptimizerKind::kAdamW;
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer \"", Printable(name),
                                                 "\" (sgd or adamw; adam and momentum are read as "
                                                 "adamw and sgd)"));
}

absl::string_view OptimizerKindName(OptimizerKind kind) {
  return kind == OptimizerKind::kSgd ? "sgd" : "adamw";
}

int OptimizerStateTensors(const OptimizerOptions& o) {
  if (o.kind == OptimizerKind::kAdamW) return 2;
  return o.momentum != 0 ? 1 : 0;
}

std::string OptimizerLabel(const OptimizerOptions& o) {
  if (o.kind == OptimizerKind::kAdamW) return "adamw";
  return o.momentum != 0 ? absl::StrCat("sgd (momentum ", o.momentum, ")") : "sgd (no momentum)";
}

}  // namespace overlap
