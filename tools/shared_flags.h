// What several CLI commands share: the collective-model flags, the model-building flags of
// `gen` and `demo`, writing outputs, and the check after every graph mutation.
#ifndef OVERLAP_TOOLS_SHARED_FLAGS_H_
#define OVERLAP_TOOLS_SHARED_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "tools/command.h"

namespace overlap {

// --world-size, --latency-us, --bandwidth (partition, schedule, simulate).
absl::Span<const FlagSpec> CollectiveFlags();
// The collective model those flags describe (defaults: graph/cost_model.h).
CollectiveModel ReadCollectiveFlags(Invocation& in);

// --lifted, --batch, --seq, --layers, the cost-model flags, and random's --nodes, --seed,
// --sparse-meta (gen, demo).
absl::Span<const FlagSpec> ModelFlags();
// Builds built-in model `name` as the flags say; `lifted` overrides --lifted. A flag that
// does not apply to the model, a bad value, or an unknown model is a usage error recorded
// in `in` (check in.has_usage_error() first).
absl::StatusOr<Graph> BuildModelFromFlags(Invocation& in, const std::string& name, bool lifted);

// Writes `text` to `path` ("-": the invocation's stdout) atomically, checking the write and
// the close (graph/output_file.h).
absl::Status WriteTextFile(const Invocation& in, const std::string& path, absl::string_view text);

// Writes `g` to `path` ("-": the invocation's stdout) atomically (graph/json_writer.h).
absl::Status WriteGraphFile(const Invocation& in, const std::string& path, const Graph& g);

// Verify(g) after the CLI changed a graph, naming the step when it fails (an internal error:
// every pass must leave a valid graph).
absl::Status CheckAfter(const Graph& g, absl::string_view step);

}  // namespace overlap

#endif  // OVERLAP_TOOLS_SHARED_FLAGS_H_
