// The bytes a node's result takes, the one figure every memory count uses: the memory
// guard, the executor's memory plan, the simulators, replay, the schedulers' memory figures
// and the AOT pair's saved bytes.
//
// `meta.tensor_size` is optional in the interchange format (docs/format.md), so a value
// without it is sized by what its metadata states instead: a graph of a few kilobytes that
// declares a 64 GiB tensor by shape is counted as 64 GiB, never as 0.
//
//   absl::StatusOr<int64_t> bytes = ValueBytes(g.node(id));  // "node \"x\": ..." when too big
#ifndef OVERLAP_GRAPH_VALUE_BYTES_H_
#define OVERLAP_GRAPH_VALUE_BYTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

// The bytes of node `n`'s result: meta.tensor_size when given; otherwise the sum, over the
// types its metadata states (StatedTypes, graph/shape_rules.h: meta.shape and meta.dtype, or
// a tuple's `shapes` / `dtypes` arrays; an undefined element counts 0), of the element count
// times the dtype's element size (KnownDtypeBytes, graph/cost_model.h; 4, the cost model's
// float32, when no dtype is stated); 0 when the metadata states neither, and for the output
// node. InvalidArgument naming the node when the element count, a type's bytes or their sum
// exceeds int64, or a stated dtype is unknown. Verify (graph/verifier.h) refuses a graph with
// such a node. O(size of the metadata).
absl::StatusOr<int64_t> ValueBytes(const Node& n);

// What ValueBytes gives when meta.tensor_size is absent, whether or not it is: the bytes of
// the types `n`'s metadata states (what `overlap annotate` fills tensor_size with). Errors
// as ValueBytes'. O(size of the metadata).
absl::StatusOr<int64_t> StatedBytes(const Node& n);

// ValueBytes of a node of a graph Verify accepted, where it cannot fail (what passes and
// simulators read once the graph is verified); 0 for a node ValueBytes refuses, which a
// verified graph does not hold. O(size of the metadata).
int64_t VerifiedValueBytes(const Node& n);

// a + b and k x a for byte counts >= 0, the largest int64 when the result overflows: what a
// memory guard adds up and compares, so that sizes too large to add are refused, never
// wrapped below the limit. O(1).
int64_t AddBytes(int64_t a, int64_t b);
int64_t MulBytes(int64_t k, int64_t a);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_VALUE_BYTES_H_
