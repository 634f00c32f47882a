// Test graphs: a built-in model's AOT forward or backward graph with the ZeRO-3 ops
// inserted, as the CLI's `gen <model> --lifted | --backward` then `schedule` would make it.
// Test-only.
#ifndef OVERLAP_SCHEDULE_TESTING_ZERO3_MODELS_H_
#define OVERLAP_SCHEDULE_TESTING_ZERO3_MODELS_H_

#include <string>

#include "graph/graph.h"
#include "graph/models.h"
#include "schedule/zero3_ops.h"

namespace overlap {

// Model `name`'s AOT pair at `preset`, the graph of `kind`, with ZeRO-3 ops inserted. A
// failure is a gtest failure and an empty graph. O(model size).
Graph Zero3AotGraph(const std::string& name, GraphKind kind, Preset preset = Preset::kDefault);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_TESTING_ZERO3_MODELS_H_
