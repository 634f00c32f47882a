// Test graphs: a built-in model's AOT forward or backward graph with the ZeRO-3 ops
// inserted, as the CLI's `gen <model> --lifted | --backward` then `schedule` would make it.
// Test-only.
#ifndef OVERLAP_SCHEDULE_TESTING_ZERO3_MODELS_H_
#define OVERLAP_SCHEDULE_TESTING_ZERO3_MODELS_H_

#include <optional>
#include <string>

#include "graph/graph.h"
#include "graph/models.h"
#include "schedule/zero3_ops.h"

namespace overlap {

// Model `name`'s AOT pair at `preset`, the graph of `kind`, with ZeRO-3 ops inserted. A
// failure is a gtest failure and an empty graph. O(model size).
Graph Zero3AotGraph(const std::string& name, GraphKind kind, Preset preset = Preset::kDefault);

// A random graph made a ZeRO-3 graph of `kind`: for kBackward its structural backward
// (graph/structural_backward.h) first, then the ZeRO-3 ops inserted; nullopt when either
// step refuses the graph. O(graph size).
std::optional<Graph> WithZero3Ops(Graph g, GraphKind kind);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_TESTING_ZERO3_MODELS_H_
