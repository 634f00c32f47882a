// Reads a Graph from the interchange format (docs/format.md, version 1).
//
// The reader is a streaming pull parser: it reads the file in 1 MiB chunks and builds the IR
// directly, with no JSON DOM in between (a DOM of a million-node file costs 1.6 GB and 3.8 s
// here; this reader needs the graph and one chunk). References ("%name") are resolved while
// reading, so every node must follow the nodes it reads, as the format requires.
//
// Every error is an InvalidArgument status whose message says where (line and column, or
// the node / parameter and field) and what is wrong, e.g.
//   line 7, column 40: node "relu": args[0]: "%fc9" is not a node defined earlier (...)
//
// Unknown keys at any level are kept verbatim (see Extras in graph.h).
#ifndef OVERLAP_GRAPH_JSON_READER_H_
#define OVERLAP_GRAPH_JSON_READER_H_

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

struct ReadOptions {
  // Run Verify() (verifier.h) on the result, so that the graph is known to be well formed.
  bool verify = true;
};

// Parses a whole JSON text. O(size of the text).
absl::StatusOr<Graph> ReadGraphJson(absl::string_view text, const ReadOptions& options = {});

// Reads a file ("-" for stdin) in a streaming fashion. Errors name the path.
absl::StatusOr<Graph> ReadGraphJsonFile(const std::string& path, const ReadOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_GRAPH_JSON_READER_H_
