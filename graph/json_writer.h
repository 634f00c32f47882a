// Writes a Graph in the interchange format (docs/format.md, version 1).
//
// The writer is deterministic: the same graph gives the same bytes. Known keys come first in
// a fixed order, then unknown keys in the order they were read; optional keys are written
// exactly when the graph marks them present, so a file read and written again is an equal
// JSON value. One node and one parameter per line, so diffs of graph files stay readable.
//
// Cost: O(size of the output); WriteGraphJsonFile streams through a 1 MiB buffer, so
// writing a million-node graph needs no second copy of the file in memory.
#ifndef OVERLAP_GRAPH_JSON_WRITER_H_
#define OVERLAP_GRAPH_JSON_WRITER_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

// Returns the graph as JSON text.
std::string WriteGraphJson(const Graph& g);

// Writes the graph to `path` ("-" for stdout) atomically (graph/output_file.h): on any
// failure `path` keeps what it held. Fails with the OS error naming the path. O(size).
absl::Status WriteGraphJsonFile(const Graph& g, const std::string& path);

// Writes the graph to an open stream. Fails if a write fails.
absl::Status WriteGraphJsonStream(const Graph& g, std::FILE* out);

// Appends `s` as a JSON string literal (quoted, escaped; UTF-8 passes through).
void AppendJsonString(std::string* out, absl::string_view s);

// Appends a double so that reading it back gives the same double and a JSON reader sees a
// float (shortest round-trip digits, with ".0" added to integral values). Non-finite values,
// which JSON cannot hold, are written as null.
void AppendJsonDouble(std::string* out, double d);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_JSON_WRITER_H_
