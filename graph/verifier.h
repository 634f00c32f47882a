// Structural verifier for the graph IR.
//
// Verify() checks every invariant the rest of overlap relies on, so a pass may assume them
// on input and a test can assert them on output (as MLIR and XLA verify around each pass):
//   - the order list is intact and lists every live node once;
//   - names are well formed ([A-Za-z_][A-Za-z0-9_.]*) and unique;
//   - every argument reference names a live node placed earlier (topological order; this
//     also rules out cycles);
//   - exactly one output node, and it is last;
//   - inputs and users agree with the references in args / kwargs;
//   - metadata sizes are >= 0 and times finite and >= 0;
//   - the parameter table is consistent: each (owner, name) once, bytes >= 0, in a
//     module-style graph every owner is a call_module target, a get_attr target or a
//     placeholder (in a lifted graph an owner naming no node is an absent row of a
//     whole-model table: ClassifyParams, graph.h), parameters sharing a storage
//     have one size, one requires_grad and one ddp_ignored, meta.param / meta.grad_of name listed
//     parameters, and the sums of parameter bytes and of the values' sizes (ValueBytes,
//     graph/value_bytes.h: meta.tensor_size, else shape x dtype, each computable) fit in 64
//     bits (so passes may add them freely);
//   - the ZeRO-3 and host-memory ops (graph/dc_ops.h) have their arguments, and a host tensor
//     (IsHostTensor) is read only by a dc.reload_tensor, a dc.wait_offload or the output,
//     never by compute.
// The first violation is returned as InvalidArgument naming the node or parameter and field.
// Cost: O(N + E + P) time, O(N + P) memory.
#ifndef OVERLAP_GRAPH_VERIFIER_H_
#define OVERLAP_GRAPH_VERIFIER_H_

#include "absl/status/status.h"
#include "graph/graph.h"

namespace overlap {

absl::Status Verify(const Graph& g);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_VERIFIER_H_
