#include "schedule/testing/zero3_models.h"

#include <utility>

#include "graph/aot.h"
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

}  // namespace overlap
