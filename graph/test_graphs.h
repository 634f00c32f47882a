// Test support: small graphs written in the interchange format inside tests.
//
//   absl::StatusOr<Graph> g = GraphFromParts(
//       R"({"name": "x", "op": "placeholder", "target": "x", "args": []}, ...)",
//       R"({"name": "w", "owner": "p_w", "bytes": 64})");
#ifndef OVERLAP_GRAPH_TEST_GRAPHS_H_
#define OVERLAP_GRAPH_TEST_GRAPHS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/json_reader.h"
#include "gtest/gtest.h"

namespace overlap {

// Reads a graph file made of `nodes` (the items of the "nodes" array) and `params` (the
// items of "params"); verified like any file.
inline absl::StatusOr<Graph> GraphFromParts(const std::string& nodes, const std::string& params) {
  return ReadGraphJson(absl::StrCat(R"({"format": "overlap-graph", "version": 1, "nodes": [)",
                                    nodes, R"(], "params": [)", params, "]}"));
}

// GraphFromParts for tests that expect the text to be valid: records a failure and returns
// an empty graph otherwise.
inline Graph ParseGraphParts(const std::string& nodes, const std::string& params) {
  absl::StatusOr<Graph> g = GraphFromParts(nodes, params);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : Graph();
}

}  // namespace overlap

#endif  // OVERLAP_GRAPH_TEST_GRAPHS_H_
