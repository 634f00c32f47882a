// AOT forward / backward pairs: the two graphs AOTAutograd hands a compiler for one model,
// derived from a lifted forward graph by the per-op formulas of docs/ops.md.
//
//   absl::StatusOr<AotPair> pair = BuildAotPair(*BuildModel("gpt2", lifted));
//
// The calling convention (AOTAutograd's, with the choices docs/ops.md records):
//   - forward: the input graph, returning its own outputs (the loss first when the model has
//     one) followed by the saved tensors. A tuple element a formula saves (layer norm's mean
//     and rstd, flash attention's logsumexp, pooling indices, ...) gets an operator.getitem
//     in the forward if it had none.
//   - backward: placeholders are the primals its formulas read (named and marked as in the
//     forward: meta.param, so ZeRO-3 gathers them again), then the saved tensors (named as
//     the forward values they are), then one tangent per differentiable forward output
//     (`tangents_1`, ...; the loss's is a scalar). It returns, in forward placeholder order,
//     one value per forward placeholder: its gradient (a node with meta.grad_of), or null.
//   - a primal appears in the backward only if a formula reads it; its parameter table is the
//     forward's whole table (rows of primals it does not read are absent, graph.h), so ds_ids
//     agree between the two graphs.
//   - saved tensors never alias a parameter: a view of a parameter (t(W) before a matmul) is
//     recomputed in the backward from the primal, so ZeRO-3 may release gathered parameters
//     after their last forward use. Tied weights have one placeholder per storage; their
//     gradients are summed into one.
//   - every backward node carries shape, dtype, tensor_size and device_time (the roofline
//     cost model, or a multiple of the forward op's time for fused backward kernels); views
//     carry aliases_input and no time. CheckShapes (shape_rules.h) accepts both graphs.
// Fails (InvalidArgument naming the node) on module-owned parameters, on a target without a
// formula that lies on a gradient path, and on values without stated types. Cost: O(N + E)
// plus name lookups.
#ifndef OVERLAP_GRAPH_AOT_H_
#define OVERLAP_GRAPH_AOT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

struct AotOptions {
  DeviceSpec device;  // for the backward nodes' device_time
};

struct AotPair {
  Graph forward;
  Graph backward;
  int64_t num_outputs = 0;  // the forward's own outputs, before the saved tensors
  int64_t num_saved = 0;    // saved tensors (forward outputs after num_outputs)
  // The activations kept for the backward: the bytes (graph/value_bytes.h's ValueBytes) of
  // the saved tensors' distinct storages (a saved view counts as its base, once).
  int64_t saved_bytes = 0;
  int64_t num_primals = 0;  // parameter placeholders the backward reads
};

absl::StatusOr<AotPair> BuildAotPair(const Graph& forward, const AotOptions& options = {});

// Whether BuildAotPair has a formula for `target` (docs/ops.md). O(1) expected.
bool HasBackwardFormula(absl::string_view target);

// Saved tensors that are reshapes of one forward value become one. AOTAutograd saves a
// transformer block's activation both as [B, T, D] and as [B * T, D] (views of one buffer
// in the forward); handed to the backward they are two placeholders, which the memory model
// counts twice and an executor holds twice. For each such group the forward returns the
// first (in its output order) and the backward makes the others from it with
// aten.reshape.default (a view: no bytes), keeping their names, so the step holds the
// activation once, as PyTorch's autograd does. A group is saved values that reach one node
// through reshape-like views alone (view, _unsafe_view, reshape, _reshape_alias, alias,
// detach, an expand to its input's own shape; all meta.aliases_input): on a contiguous value any
// reshape is a view of the same elements in the same order. Only outputs past the last tangent's
// index are touched, so tangents_k still pairs with forward output k. Returns how many saved
// tensors were removed (0: the pair is unchanged); num_saved and saved_bytes follow. Errors only
// for a pair the rewrite cannot express (a name clash). O(N + E).
absl::StatusOr<int64_t> ShareSavedReshapes(AotPair* pair);

// A clone whose input nothing else reads becomes an alias of it (aten.detach.default,
// meta.aliases_input): graphs are functional, so the copy can never be told apart, and the
// step saves its bytes and its time. A functionalized in-place op leaves such clones
// (mobilenet_v2's ReLU6, hardtanh_, clones each saved activation in the backward). The input
// must be a buffer of its own, which is contiguous here: a call node's result that is not a
// view or a tuple element, or a placeholder that is not a parameter; and the clone asks for no
// layout but the contiguous one. Returns how many clones became aliases. O(N + E).
absl::StatusOr<int64_t> AliasLastUseClones(Graph* g);

// A slice_backward over the whole of every dimension (start 0, end at or past the size,
// step 1, input_sizes equal to its gradient's meta.shape) is a copy of its gradient:
// AOTAutograd leaves chains of them behind a split (the GPT's qkv: two per slice). When the
// gradient is a call node's own buffer (contiguous, as the copy would be), its users read the
// gradient instead and the node leaves the graph: the step saves its bytes and its time.
// Returns how many left. O(N + E).
absl::StatusOr<int64_t> DropIdentitySliceBackwards(Graph* g);

// hardtanh's backward masked by the forward's output instead of its input, when the output
// is saved anyway: (out > min) & (out < max) is (in > min) & (in < max) for out = clamp(in,
// min, max) with min <= max (NaN passes both ways), so the results are the same bit for
// bit. The input then need not be saved: a functionalized in-place ReLU6 (mobilenet_v2)
// saves each block's batch-norm output only for this mask, where PyTorch's in-place op
// keeps one buffer. The backward reads the saved output; a saved input left unread (and
// the clones in front of it) leaves both graphs. Returns how many backwards were
// rewritten. O(N + E).
absl::StatusOr<int64_t> MaskActivationBackwardsByOutputs(AotPair* pair);

// ShareSavedReshapes, MaskActivationBackwardsByOutputs, AliasLastUseClones on both graphs,
// then DropIdentitySliceBackwards on the backward: what the executor applies to an AOT pair read
// from files (exec, train, run). Returns how many nodes changed. O(N + E).
absl::StatusOr<int64_t> TightenPairMemory(AotPair* pair);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_AOT_H_
