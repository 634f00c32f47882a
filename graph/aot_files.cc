#include "graph/aot_files.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/status_macros.h"

namespace overlap {

absl::StatusOr<AotPair> ReadAotPairFiles(const std::string& forward_path,
                                         const std::string& backward_path) {
  AotPair pair;
  OVERLAP_ASSIGN_OR_RETURN(pair.forward, ReadGraphJsonFile(forward_path));
  OVERLAP_ASSIGN_OR_RETURN(pair.backward, ReadGraphJsonFile(backward_path));
  if (WriteGraphJson(pair.backward) == WriteGraphJson(pair.forward)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backward-graph \"", backward_path,
        "\" is the forward graph itself, not its AOT "
        "backward (overlap gen M --backward, or the exporter's PREFIX.backward.json)"));
  }
  return pair;
}

}  // namespace overlap
