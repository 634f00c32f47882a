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

// Items of a graph file, for GraphFromParts: a parameter table entry owned by placeholder
// "p_<name>"; a placeholder (with meta.param when `param` is given); a call_function with
// the given argument text and optional meta object text; the output node.
inline std::string ParamJson(const std::string& name, int64_t bytes) {
  return absl::StrCat(R"({"name": ")", name, R"(", "owner": "p_)", name, R"(", "bytes": )", bytes,
                      "}");
}
inline std::string PlaceholderJson(const std::string& name, const std::string& param = "") {
  return absl::StrCat(
      R"({"name": ")", name, R"(", "op": "placeholder", "target": ")", name, R"(", "args": [])",
      param.empty() ? "" : absl::StrCat(R"(, "meta": {"param": ")", param, R"("})"), "}");
}
inline std::string CallJson(const std::string& name, const std::string& target,
                            const std::string& args, const std::string& meta = "") {
  return absl::StrCat(R"({"name": ")", name, R"(", "op": "call_function", "target": ")", target,
                      R"(", "args": [)", args, "]", meta.empty() ? "" : ", \"meta\": " + meta, "}");
}
inline std::string OutputJson(const std::string& args) {
  return absl::StrCat(R"({"name": "output", "op": "output", "target": "output", "args": [)", args,
                      "]}");
}

}  // namespace overlap

#endif  // OVERLAP_GRAPH_TEST_GRAPHS_H_
