// The calling convention of graph/aot.h as a check, for tests and fuzzers (testonly): what
// every AOT pair must satisfy, whatever model it came from.
//
//   OVERLAP_RETURN_IF_ERROR(CheckAotPair(forward, pair));
//
// Checks, naming the first violation (InternalError): both graphs pass Verify() and the
// strict shape check (every call_function target has a rule; every node states what its
// rule gives); the forward returns num_outputs values then num_saved saved tensors, none of
// which is a parameter or a view of one, and saved_bytes is their distinct storages' size;
// the backward's placeholders are num_primals primals (with meta.param, each read by a node),
// then the saved tensors under the forward values' names, in the same order, then the
// tangents; it returns one value per forward placeholder: for each trainable parameter a
// gradient shaped like it and marked grad_of its name, null otherwise; both graphs list the
// input forward graph's parameter table. Cost: O(N + E) plus the shape check's.
#ifndef OVERLAP_GRAPH_AOT_INVARIANTS_H_
#define OVERLAP_GRAPH_AOT_INVARIANTS_H_

#include "absl/status/status.h"
#include "graph/aot.h"
#include "graph/graph.h"

namespace overlap {

absl::Status CheckAotPair(const Graph& input_forward, const AotPair& pair);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_AOT_INVARIANTS_H_
