#include "schedule/testing/zero3_models.h"

#include <utility>

#include "graph/aot.h"
#include "graph/structural_backward.h"
#include "gtest/gtest.h"
#include "schedule/zero3_insertion.h"

namespace overlap {

Graph Zero3AotGraph(const std::string& name, GraphKind kind, Preset preset) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> model = BuildModel(name, o, preset);
  EXPECT_TRUE(model.ok()) << name << ": " << model.status();
  if (!model.ok()) return Graph();
  absl::StatusOr<AotPair> pair = BuildAotPair(*model);
  EXPECT_TRUE(pair.ok()) << name << ": " << pair.status();
  if (!pair.ok()) return Graph();
  Graph g = kind == GraphKind::kBackward ? std::move(pair->backward) : std::move(pair->forward);
  absl::StatusOr<bool> inserted = Zero3Insertion(kind).Run(&g);
  EXPECT_TRUE(inserted.ok()) << name << ": " << inserted.status();
  return g;
}

std::optional<Graph> WithZero3Ops(Graph g, GraphKind kind) {
  if (kind == GraphKind::kBackward) {
    absl::StatusOr<Graph> b = BuildStructuralBackward(g);
    if (!b.ok()) return std::nullopt;
    g = *std::move(b);
  }
  if (!Zero3Insertion(kind).Run(&g).ok()) return std::nullopt;
  return g;
}

}  // namespace overlap
