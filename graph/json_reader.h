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
// Text quoted from the input in a message has its control characters and malformed UTF-8
// escaped as \xNN, so a message is always one printable line.
//
// The reader is linear in the input: duplicate keys, rejected in every object at any depth,
// are found with a hash set. Every string must be well-formed UTF-8.
//
// Unknown keys at any level are kept verbatim (see Extras in graph.h).
#ifndef OVERLAP_GRAPH_JSON_READER_H_
#define OVERLAP_GRAPH_JSON_READER_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

struct ReadOptions {
  // Run Verify() (verifier.h) on the result, so that the graph is known to be well formed.
  bool verify = true;
  // Limits (docs/format.md, "Limits"): an input beyond one is bad input, refused before the
  // memory it would take is allocated. The defaults fit a machine of 24 GiB.
  // The longest string literal (after unescaping), and the longest value of an unknown key
  // (as kept, minified).
  int64_t max_string_bytes = int64_t{256} << 20;  // 256 MiB
  // The longest input.
  int64_t max_input_bytes = int64_t{4} << 30;  // 4 GiB
};

// Parses a whole JSON text. O(size of the text).
absl::StatusOr<Graph> ReadGraphJson(absl::string_view text, const ReadOptions& options = {});

// Reads a file ("-" for stdin) in a streaming fashion. Errors name the path. The file must be
// a regular file, a pipe or a character device: a directory is refused ("\"d\" is a
// directory"), as is anything else ("is not a regular file"), and so is a regular file
// larger than options.max_input_bytes, before a byte is read.
absl::StatusOr<Graph> ReadGraphJsonFile(const std::string& path, const ReadOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_GRAPH_JSON_READER_H_
