// An AOT pair read from its two graph files (the exporter's PREFIX.forward.json and
// PREFIX.backward.json, or `overlap gen M --lifted` / `--backward`): the one reader every
// command that takes a pair from files uses (exec, train, run, plan), so each refuses the
// same mistakes with the same words.
#ifndef OVERLAP_GRAPH_AOT_FILES_H_
#define OVERLAP_GRAPH_AOT_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "graph/aot.h"

namespace overlap {

// Reads both graphs (graph/json_reader.h's errors, naming the file) and refuses a forward
// given as its own backward (it would run and answer something else). The pair is as the
// files state it: an executor tightens it (TightenPairMemory) where it runs it. O(file
// sizes).
absl::StatusOr<AotPair> ReadAotPairFiles(const std::string& forward_path,
                                         const std::string& backward_path);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_AOT_FILES_H_
