#include "graph/op_schema.h"

#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "graph/status_macros.h"
#include "graph/text.h"

namespace overlap {
namespace {

// One declaration: the target, PyTorch's schema string, and what only overlap states.
struct OpDecl {
  const char* target;
  const char* signature;
  DtypeRule dtype;
  const char* used_for;
  const char* saved;
  const char* backward;
  const char* notes;
  const char* backward_of;
  bool pointwise = false;
};

// Every operator overload the graphs, shape rules and kernels know. To add one: its line
// here (PyTorch's schema from native_functions.yaml), then its shape rule, cost formula,
// kernels and, for a forward op, its backward formula; docs/ops.md's table is regenerated
// (`bazel run //graph:ops_doc`). A pointwise op (ATen's `pointwise` tag) gets its shape rule
// and, unless graph/annotate.cc names a costlier kind, its cost kind from its line: it is its
// line, its kernel row (runtime/kernels/elementwise_table.cc) and its backward formula.
constexpr OpDecl kOps[] = {
    {"aten.mm.default", "mm(Tensor self, Tensor mat2) -> Tensor", DtypeRule::kSameDtype,
     /*used_for=*/"linear layers without bias",
     /*saved=*/"`self` if `mat2` needs a gradient; `mat2` if `self` does",
     /*backward=*/
     "`d_self = aten.mm.default(g, aten.t.default(mat2))`; `d_mat2 = "
     "aten.mm.default(aten.t.default(self), g)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.addmm.default",
     "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
     DtypeRule::kSameDtype,
     /*used_for=*/"linear layers (bias, input, weight^T)",
     /*saved=*/"as `mm` for `mat1`, `mat2`",
     /*backward=*/
     "`d_self = aten.view.default(aten.sum.dim_IntList(g, [0], True), self.shape)`; `mat1`, `mat2` "
     "as `mm`",
     /*notes=*/"`beta` / `alpha` are 1",
     /*backward_of=*/""},
    {"aten.t.default", "t(Tensor(a) self) -> Tensor(a)", DtypeRule::kFirstTensor,
     /*used_for=*/"weight transpose before `mm`",
     /*saved=*/"",
     /*backward=*/"`aten.t.default(g)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.view.default", "view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"reshapes, flatten (lifted ResNet), logits / labels before the loss",
     /*saved=*/"",
     /*backward=*/
     "`aten.view.default(g, self.shape)`, after `aten.clone.default(g, "
     "memory_format=torch.contiguous_format)` when `g` may be non-contiguous (a transpose, expand "
     "or slice, or a view of one: PyTorch's view backward is a reshape, which copies then)",
     /*notes=*/
     "`_unsafe_view` and `reshape` have the same rule. A view where the executor's layout allows "
     "one, else a contiguous copy (counted in `RunResult::view_copies`): torch traced the graph "
     "in its own layouts (channels-last results of elementwise ops), where the executor's "
     "values are contiguous, so a view valid in torch may need a copy here",
     /*backward_of=*/""},
    {"aten._unsafe_view.default", "_unsafe_view(Tensor self, SymInt[] size) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: a reshape whose result PyTorch does not track as an alias",
     /*saved=*/"",
     /*backward=*/"as `view`",
     /*notes=*/"copies when `self` is not viewable; ours is a view where the layout allows",
     /*backward_of=*/""},
    {"aten.reshape.default", "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs (torch.export): a reshape",
     /*saved=*/"",
     /*backward=*/"as `view`",
     /*notes=*/"a view where the layout allows, else a copy (`aliases_input: false`)",
     /*backward_of=*/""},
    {"aten._reshape_alias.default",
     "_reshape_alias(Tensor(a) self, SymInt[] size, SymInt[] stride) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"torch 1.13's AOT graphs (exported): a reshape as a view with explicit strides",
     /*saved=*/"",
     /*backward=*/"`aten.view.default(g, self.shape)`",
     /*notes=*/
     "gone in 2.x (`aten.view`); the strides are torch's layout's (a channels-last or permuted "
     "result): the executor lays values out contiguously and reads `size` as `view` does",
     /*backward_of=*/""},
    {"aten.detach.default", "detach(Tensor(a) self) -> Tensor(a)", DtypeRule::kFirstTensor,
     /*used_for=*/"exported backward graphs: saved values detached",
     /*saved=*/"",
     /*backward=*/"none",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.bmm.default", "bmm(Tensor self, Tensor mat2) -> Tensor", DtypeRule::kSameDtype,
     /*used_for=*/"batched products ([b, n, m] @ [b, m, p]: 1.13's attention)",
     /*saved=*/"both",
     /*backward=*/"`d_self = aten.bmm.default(g, mat2^T)`; `d_mat2 = aten.bmm.default(self^T, g)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.baddbmm.default",
     "baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> "
     "Tensor",
     DtypeRule::kSameDtype,
     /*used_for=*/"nn.MultiheadAttention with a float mask: the mask plus the scores",
     /*saved=*/"`batch1`, `batch2`",
     /*backward=*/
     "`d_self = beta g` summed to self's shape; `d_batch1 = alpha aten.bmm.default(g, "
     "batch2^T)`; `d_batch2 = alpha aten.bmm.default(batch1^T, g)` (exported graphs carry "
     "torch's)",
     /*notes=*/"self broadcasts to [b, n, p] and is converted to the batches' dtype",
     /*backward_of=*/""},
    {"aten.permute.default", "permute(Tensor(a) self, int[] dims) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"ViT's patches to tokens (exported)",
     /*saved=*/"",
     /*backward=*/"`aten.permute.default(g, inverse dims)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.select.int", "select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"ViT's class token (exported)",
     /*saved=*/"",
     /*backward=*/"`aten.select_backward.default(g, self.shape, dim, index)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.select_backward.default",
     "select_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt index) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"backward of `select`",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"zeros with `grad_output` at the slice",
     /*backward_of=*/""},
    {"aten.full_like.default",
     "full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"constants of a tensor's shape (T5's relative-position buckets)",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"`self`'s shape; its dtype unless `dtype` says otherwise; values not read",
     /*backward_of=*/""},
    {"aten.ones_like.default",
     "ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"masks built from a tensor's shape",
     /*saved=*/"",
     /*backward=*/"none",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.zeros_like.default",
     "zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"MoE combine accumulator",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.masked_fill.Scalar",
     "masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"causal attention scores",
     /*saved=*/"`mask`",
     /*backward=*/"`aten.masked_fill.Scalar(g, mask, 0)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.triu.default", "triu(Tensor self, int diagonal=0) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"causal masks",
     /*saved=*/"",
     /*backward=*/"`aten.triu.default(g, diagonal)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.tril.default", "tril(Tensor self, int diagonal=0) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"causal masks (transformers' GPT-2 under torch 2.x)",
     /*saved=*/"",
     /*backward=*/"`aten.tril.default(g, diagonal)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.transpose.int", "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"heads to / from `[B, heads, S, head_dim]`",
     /*saved=*/"",
     /*backward=*/"`aten.transpose.int(g, dim0, dim1)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.unsqueeze.default", "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"`repeat_kv` (grouped-query attention)",
     /*saved=*/"",
     /*backward=*/"`aten.squeeze.dim(g, dim)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.squeeze.dim", "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`unsqueeze`"},
    {"aten.squeeze.dims", "squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs (PyTorch 2.x): removes the listed size-1 dimensions",
     /*saved=*/"",
     /*backward=*/"`aten.view.default(g, self.shape)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.expand.default",
     "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"`repeat_kv`",
     /*saved=*/"",
     /*backward=*/
     "`aten.sum.dim_IntList(g, <expanded dims>, True)`, then `aten.view.default` if dimensions "
     "were added in front",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.clone.default", "clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"contiguous copies of transposed / expanded tensors",
     /*saved=*/"",
     /*backward=*/"`g` itself (no node)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten._scaled_dot_product_flash_attention.default",
     "_scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value, float "
     "dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> "
     "(Tensor output, Tensor logsumexp)",
     DtypeRule::kFromArgs,
     /*used_for=*/"causal attention; a tuple `(output, logsumexp)`",
     /*saved=*/"`query`, `key`, `value`, `output`, `logsumexp`",
     /*backward=*/
     "`aten._scaled_dot_product_flash_attention_backward.default(g, query, key, value, output, "
     "logsumexp, None, None, max_q, max_k, dropout_p, is_causal, None, None, scale=)` -> "
     "`(d_query, d_key, d_value)`; `max_q` / `max_k` are the sequence lengths",
     /*notes=*/
     "PyTorch returns 9 values: `(output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, "
     "rng_state, unused, debug_attn_mask)` (`philox_seed, philox_offset` in earlier 2.x). For "
     "dense batches without dropout the last 7 are undefined, ints or unused, so our graphs carry "
     "`(output, logsumexp)`, and the backward gets None for `philox_seed` / `philox_offset` where "
     "PyTorch's AOT graphs pass the forward's elements 6 and 7 (non-optional tensors in the "
     "schema): a deliberate deviation; graphs exported from PyTorch 2.x would carry all 9 (not yet "
     "read here: torch 1.13, the exporter's, has no flash attention op). `logsumexp` is float32 "
     "whatever the input dtype. 1.13 had no flash attention op (the models would use `bmm` + "
     "`_softmax`)",
     /*backward_of=*/""},
    {"aten._scaled_dot_product_flash_attention_backward.default",
     "_scaled_dot_product_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, "
     "Tensor value, Tensor out, Tensor logsumexp, Tensor? cum_seq_q, Tensor? cum_seq_k, SymInt "
     "max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor? philox_seed, Tensor? "
     "philox_offset, *, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor "
     "grad_value)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`_scaled_dot_product_flash_attention`"},
    {"aten.split.Tensor",
     "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
     DtypeRule::kFirstTensor,
     /*used_for=*/"GPT-2's fused QKV projection into q, k, v",
     /*saved=*/"",
     /*backward=*/
     "`aten.cat.default([g_0, g_1, ...], dim)`; a piece without a gradient is "
     "`aten.new_zeros.default(g_i, piece.shape)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.split_with_sizes.default",
     "split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
     DtypeRule::kFirstTensor,
     /*used_for=*/"TransformerDecoderLayer's cross-attention: the key / value projection's halves",
     /*saved=*/"",
     /*backward=*/"as `split.Tensor`: `aten.cat.default([g_0, g_1, ...], dim)`",
     /*notes=*/"the sizes must add up to the dimension",
     /*backward_of=*/""},
    {"aten.cat.default", "cat(Tensor[] tensors, int dim=0) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`split.Tensor`"},
    {"aten.unsafe_split.Tensor",
     "unsafe_split.Tensor(Tensor self, SymInt split_size, int dim=0) -> Tensor[]",
     DtypeRule::kFirstTensor,
     /*used_for=*/"LSTM / GRU cells: the gates' pre-activations in pieces",
     /*saved=*/"",
     /*backward=*/"as `split.Tensor`",
     /*notes=*/"no alias: each piece is new storage",
     /*backward_of=*/""},
    {"aten.unbind.int", "unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
     DtypeRule::kFirstTensor,
     /*used_for=*/"RNNs: a sequence into its steps",
     /*saved=*/"",
     /*backward=*/
     "`aten.stack.default([g_0, g_1, ...], dim)`; a step without a gradient is "
     "`aten.new_zeros.default`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.stack.default", "stack(Tensor[] tensors, int dim=0) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"RNNs: the steps' outputs into a sequence",
     /*saved=*/"",
     /*backward=*/"`aten.select.int(g, dim, i)` to the i-th tensor",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.empty_like.default",
     "empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"EfficientNet's stochastic depth (filled right after)",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"ours is zeroed: a kernel's output never holds stale memory",
     /*backward_of=*/""},
    {"aten.fill.Scalar", "fill.Scalar(Tensor self, Scalar value) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"EfficientNet's stochastic depth (functional `fill_`)",
     /*saved=*/"",
     /*backward=*/"none (the result does not depend on `self`)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.zeros.default",
     "zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"RNNs' initial hidden and cell states",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"float32 unless `dtype` says otherwise",
     /*backward_of=*/""},
    {"aten.full.default",
     "full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"masks (a causal attention mask of -inf)",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"`dtype`, else the value's: float32, int64 or bool",
     /*backward_of=*/""},
    {"aten.bitwise_not.default", "bitwise_not(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"inverted masks (`~mask`)",
     /*saved=*/"",
     /*backward=*/"none (booleans, integers)",
     /*notes=*/"bool: logical not; integers: every bit flipped",
     /*backward_of=*/""},
    {"aten.bitwise_and.Tensor", "bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"masks combined (transformers: the causal and padding masks)",
     /*saved=*/"",
     /*backward=*/"none (booleans, integers)",
     /*notes=*/"broadcast; bool and integer operands only (ATen refuses floating ones)",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.bitwise_or.Tensor", "bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"masks combined",
     /*saved=*/"",
     /*backward=*/"none (booleans, integers)",
     /*notes=*/"broadcast; bool and integer operands only (ATen refuses floating ones)",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.bitwise_xor.Tensor", "bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"masks combined",
     /*saved=*/"",
     /*backward=*/"none (booleans, integers)",
     /*notes=*/"broadcast; bool and integer operands only (ATen refuses floating ones)",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.logical_and.default", "logical_and(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kBool,
     /*used_for=*/"masks combined",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; each operand read as nonzero (NaN is); the result is bool",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.logical_or.default", "logical_or(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks combined",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; each operand read as nonzero (NaN is); the result is bool",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.logical_xor.default", "logical_xor(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kBool,
     /*used_for=*/"masks combined",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; each operand read as nonzero (NaN is); the result is bool",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.le.Scalar", "le.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks in exported backwards (clamp's)",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"the result is bool; NaN compares false",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.ge.Scalar", "ge.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks in exported backwards (clamp_min's)",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"the result is bool; NaN compares false",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.lt.Scalar", "lt.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"the result is bool; NaN compares false",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.gt.Scalar", "gt.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"the result is bool; NaN compares false",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.where.self", "where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"exported backwards: a gradient kept where a mask holds",
     /*saved=*/"`condition`",
     /*backward=*/
     "`d_self = aten.where.self(condition, g, 0)`, `d_other = aten.where.self(condition, 0, g)`, "
     "each summed to its shape",
     /*notes=*/"the three broadcast together; condition is bool",
     /*backward_of=*/""},
    {"aten.scalar_tensor.default",
     "scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? "
     "device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported backwards: the 0 of a `where`",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"a 0-d tensor; float32 unless `dtype` says otherwise",
     /*backward_of=*/""},
    {"aten.clamp.default", "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"Swin V2's logit scale",
     /*saved=*/"`self`",
     /*backward=*/"`g` where min <= self <= max, else 0 (`aten.where.self` of `ge` / `le` masks)",
     /*notes=*/"NaN stays NaN",
     /*backward_of=*/""},
    {"aten.clamp_min.default", "clamp_min(Tensor self, Scalar min) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"F.normalize's floor on the norm",
     /*saved=*/"`self`",
     /*backward=*/"`aten.where.self(aten.ge.Scalar(self, min), g, 0)`",
     /*notes=*/"NaN stays NaN",
     /*backward_of=*/""},
    {"aten.eq.Scalar", "eq.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks (Swin's shifted-window attention)",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"the result is bool",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.minimum.default", "minimum(Tensor self, Tensor other) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"bounds on integer positions (T5 relative-position buckets)",
     /*saved=*/"`self`, `other`",
     /*backward=*/
     "exported graphs carry torch's (g to the smaller operand, halved on ties); "
     "the AOT builder has no formula",
     /*notes=*/"broadcast, in the promoted dtype; NaN propagates",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.pow.Tensor_Tensor", "pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"BLOOM's ALiBi slopes (a base to a tensor of powers)",
     /*saved=*/"`self`, `exponent`, the result",
     /*backward=*/"exported graphs carry torch's; the AOT builder has no formula",
     /*notes=*/
     "broadcast, in the promoted dtype; integers to integer powers exactly (a negative power "
     "is an error, as ATen's)",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.pow.Scalar", "pow.Scalar(Scalar self, Tensor exponent) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"positional tables (a number base to a tensor of powers: XCiT's)",
     /*saved=*/"the result",
     /*backward=*/"exported graphs carry torch's; the AOT builder has no formula",
     /*notes=*/"broadcast, in result_type(self, exponent); integers exactly",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.floor_divide.default", "floor_divide(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"mixture-of-experts routing: a sorted slot's token (`perm // top_k`)",
     /*saved=*/"",
     /*backward=*/"none (an index computation)",
     /*notes=*/
     "`div.Tensor_mode` with `rounding_mode='floor'`: rounds toward negative infinity; "
     "integer division by zero is an error",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.maximum.default", "maximum(Tensor self, Tensor other) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"floors taken elementwise",
     /*saved=*/"`self`, `other`",
     /*backward=*/
     "exported graphs carry torch's (g to the larger operand, halved on ties); "
     "the AOT builder has no formula",
     /*notes=*/"broadcast, in the promoted dtype; NaN propagates",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.eq.Tensor", "eq.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/
     "masks from two tensors (amax and max.dim backwards: where the input equals the maximum)",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; both operands compared in their promoted dtype, as ATen",
     /*backward_of=*/"`amax`, `max.dim`",
     /*pointwise=*/true},
    {"aten.ne.Tensor", "ne.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks from two tensors",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; both operands compared in their promoted dtype, as ATen",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.lt.Tensor", "lt.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks from two tensors",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; both operands compared in their promoted dtype, as ATen",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.le.Tensor", "le.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks from two tensors",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; both operands compared in their promoted dtype, as ATen",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.gt.Tensor", "gt.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks from two tensors",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; both operands compared in their promoted dtype, as ATen",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.ge.Tensor", "ge.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks from two tensors",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"broadcast; both operands compared in their promoted dtype, as ATen",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.ne.Scalar", "ne.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kBool,
     /*used_for=*/"masks (Swin's shifted-window attention)",
     /*saved=*/"",
     /*backward=*/"none (booleans)",
     /*notes=*/"the result is bool",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.lift_fresh_copy.default", "lift_fresh_copy(Tensor self) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: a tensor constant made fresh (`torch.tensor(...)` in forward)",
     /*saved=*/"",
     /*backward=*/"`g` itself",
     /*notes=*/"a copy",
     /*backward_of=*/""},
    {"aten.zero.default", "zero(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: functional `zero_`",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.new_empty.default",
     "new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported graphs: a buffer written right after",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"ours is zeroed: a kernel's output never holds stale memory",
     /*backward_of=*/""},
    {"aten.constant_pad_nd.default",
     "constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"Swin's window padding, `F.pad`",
     /*saved=*/"",
     /*backward=*/"`aten.constant_pad_nd.default(g, -pad)` (negative padding crops)",
     /*notes=*/"`pad` pairs start at the last dimension; negative entries crop",
     /*backward_of=*/""},
    {"aten.fill.Tensor", "fill.Tensor(Tensor self, Tensor value) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"Swin's attention masks (functional `fill_` with a 0-d tensor)",
     /*saved=*/"",
     /*backward=*/"none (the result does not depend on `self`)",
     /*notes=*/"`value` is 0-d",
     /*backward_of=*/""},
    {"aten.roll.default", "roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"Swin's shifted windows",
     /*saved=*/"",
     /*backward=*/"`aten.roll.default(g, -shifts, dims)`",
     /*notes=*/"without `dims`, the flattened tensor rolls",
     /*backward_of=*/""},
    {"aten.slice_scatter.default",
     "slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, "
     "SymInt step=1) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"Swin's masks, exported in-place slice writes made functional",
     /*saved=*/"",
     /*backward=*/
     "`d_self = aten.slice_scatter.default(g, aten.zeros_like.default(src), dim, start, end, "
     "step)`; `d_src = aten.slice.Tensor(g, dim, start, end, step)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.as_strided.default",
     "as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> "
     "Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"ConvNeXt / Swin heads: torch 1.13's functionalized views of a pooled tensor",
     /*saved=*/"",
     /*backward=*/
     "`aten.as_strided_scatter.default(aten.zeros_like.default(self), g, size, stride, "
     "storage_offset)`",
     /*notes=*/
     "addresses self's storage, as ATen does (`storage_offset` None: self's own offset); a "
     "window outside the storage is refused",
     /*backward_of=*/""},
    {"aten.as_strided_scatter.default",
     "as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? "
     "storage_offset=None) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"the backward of `as_strided` in torch 1.13's AOT graphs",
     /*saved=*/"",
     /*backward=*/
     "`d_self = aten.as_strided_scatter.default(g, aten.zeros_like.default(src), size, stride, "
     "storage_offset)`; `d_src = aten.as_strided.default(aten.clone.default(g), size, stride, "
     "storage_offset)`",
     /*notes=*/
     "a contiguous copy of self (storage offset 0) with src written through the strided window",
     /*backward_of=*/""},
    {"aten.index.Tensor", "index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"Swin's relative position bias (a table read by an index buffer)",
     /*saved=*/"`indices`",
     /*backward=*/
     "`aten.index_put.default(aten.zeros_like.default(self), indices, g, True)`",
     /*notes=*/
     "NumPy advanced indexing: int64 / int32 index tensors broadcast together, None keeps a "
     "dimension; indexed dimensions that are not adjacent go first; boolean masks "
     "(a data-dependent shape) are refused",
     /*backward_of=*/""},
    {"aten.index_put.default",
     "index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"the backward of `index.Tensor` (accumulate True)",
     /*saved=*/"`indices`",
     /*backward=*/
     "`d_self = aten.index_put.default(g, indices, zeros, False)` (g itself when accumulating); "
     "`d_values = aten.index.Tensor(g, indices)`, summed to values' shape",
     /*notes=*/
     "a copy of self with values (broadcast to the indexed shape) written, or added with "
     "accumulate, at the indexed places; accumulate needs a float dtype",
     /*backward_of=*/""},
    {"aten.embedding.default",
     "embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool "
     "scale_grad_by_freq=False, bool sparse=False) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"token / position embeddings",
     /*saved=*/"`indices` (not the weight)",
     /*backward=*/"`aten.embedding_dense_backward.default(g, indices, num_weights, -1, False)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.embedding_dense_backward.default",
     "embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt "
     "padding_idx, bool scale_grad_by_freq) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`embedding`"},
    {"aten.ones.default",
     "ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"masks and biases built inside a model",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"float32 unless `dtype` says otherwise",
     /*backward_of=*/""},
    {"aten.empty.memory_format",
     "empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/
     "buffers a model fills (`torch.empty(...).fill_(v)`), repeat_interleave's "
     "repeats",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/
     "zeroed here (as `empty_like`), so no result holds stale memory; float32 unless "
     "`dtype` says otherwise",
     /*backward_of=*/""},
    {"aten.arange.start",
     "arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"positions from an offset (BART's learned positions)",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"as `arange.start_step` with step 1",
     /*backward_of=*/""},
    {"aten.arange.start_step",
     "arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, "
     "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"relative positions, frequency tables of rotary embeddings",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/
     "int64 when every bound is an integer, else float32, unless `dtype` says; values "
     "start + i step computed in double",
     /*backward_of=*/""},
    {"aten._to_copy.default",
     "_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"`x.to(dtype)`, `x.float()`: masks to floats, mixed precision casts",
     /*saved=*/"",
     /*backward=*/"`aten._to_copy.default(g, dtype=self's dtype)` (none for an integral self)",
     /*notes=*/"`dtype` given, else self's; layout, device and memory format read and ignored",
     /*backward_of=*/""},
    {"aten.bernoulli_.float",
     "bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None) -> Tensor(a!)",
     DtypeRule::kFirstTensor,
     /*used_for=*/
     "dropout in training (torch 1.13's decomposition: `empty_like`, then "
     "`bernoulli_` with the keep probability, then a scaled multiply)",
     /*saved=*/"",
     /*backward=*/"none (a draw)",
     /*notes=*/
     "self overwritten with 1 where a uniform draw is below p; draws are Philox4x32-10 "
     "from the run's seed and the node's name (docs/runtime.md, \"Random ops\"), or torch's own "
     "mask when the inputs hold `random/<node>`",
     /*backward_of=*/""},
    {"aten.bernoulli.p",
     "bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"dropout masks drawn functionally",
     /*saved=*/"",
     /*backward=*/"none (a draw)",
     /*notes=*/"as `bernoulli_`, into a new tensor",
     /*backward_of=*/""},
    {"aten.arange.default",
     "arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"GPT-2 position ids",
     /*saved=*/"",
     /*backward=*/"none (integers)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.native_group_norm.default",
     "native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt "
     "HxW, int group, float eps) -> (Tensor, Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"GroupNorm; a tuple `(out, mean, rstd)`, the statistics [N, group]",
     /*saved=*/"`input`, `mean`, `rstd`; reads `weight`",
     /*backward=*/
     "`aten.native_group_norm_backward.default(g, input, mean, rstd, weight, N, C, HxW, group, "
     "[m])` -> `(d_input, d_weight, d_bias)`",
     /*notes=*/"statistics over each group's channels and every position, in double",
     /*backward_of=*/""},
    {"aten.native_group_norm_backward.default",
     "native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? "
     "weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, "
     "Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`native_group_norm`"},
    {"aten._adaptive_avg_pool2d.default",
     "_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"AlexNet / VGG heads: nn.AdaptiveAvgPool2d to a size other than 1x1",
     /*saved=*/"`self`",
     /*backward=*/"`aten._adaptive_avg_pool2d_backward.default(g, self)`",
     /*notes=*/
     "output (i, j) averages rows [floor(i H / h), ceil((i + 1) H / h)) and the columns "
     "likewise: windows overlap or repeat when the output is larger",
     /*backward_of=*/""},
    {"aten._adaptive_avg_pool2d_backward.default",
     "_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"each window's gradient spread evenly over it",
     /*backward_of=*/"`_adaptive_avg_pool2d`"},
    {"aten._adaptive_avg_pool3d.default",
     "_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"video models: nn.AdaptiveAvgPool3d",
     /*saved=*/"`self`",
     /*backward=*/"`aten._adaptive_avg_pool3d_backward.default(g, self)`",
     /*notes=*/"`_adaptive_avg_pool2d`'s windows along depth, height and width",
     /*backward_of=*/""},
    {"aten._adaptive_avg_pool3d_backward.default",
     "_adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"each window's gradient spread evenly over it",
     /*backward_of=*/"`_adaptive_avg_pool3d`"},
    {"aten.upsample_nearest2d.vec",
     "upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> "
     "Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"nn.Upsample / F.interpolate, mode nearest",
     /*saved=*/"",
     /*backward=*/
     "`aten.upsample_nearest2d_backward.vec(g, output_size, input.shape, scale_factors)`",
     /*notes=*/
     "ATen's rule: source index floor(dst * s), s = 1 / scale_factor when given, else in / "
     "out; output size floor(in * scale_factor)",
     /*backward_of=*/""},
    {"aten.upsample_nearest2d_backward.vec",
     "upsample_nearest2d_backward.vec(Tensor grad_output, SymInt[]? output_size, SymInt[] "
     "input_size, float[]? scale_factors) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"each output position's gradient added to the source position it read",
     /*backward_of=*/"`upsample_nearest2d.vec`"},
    {"aten.upsample_bilinear2d.vec",
     "upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? "
     "scale_factors) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"nn.Upsample / F.interpolate, mode bilinear",
     /*saved=*/"",
     /*backward=*/
     "`aten.upsample_bilinear2d_backward.vec(g, output_size, input.shape, align_corners, "
     "scale_factors)`",
     /*notes=*/
     "ATen's source coordinate: align_corners (in - 1) / (out - 1) dst; else s (dst + 0.5) - "
     "0.5 clamped at 0, s = 1 / scale_factor when given, else in / out",
     /*backward_of=*/""},
    {"aten.upsample_bilinear2d_backward.vec",
     "upsample_bilinear2d_backward.vec(Tensor grad_output, SymInt[]? output_size, SymInt[] "
     "input_size, bool align_corners, float[]? scale_factors) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"each output position's gradient spread over its four sources by their weights",
     /*backward_of=*/"`upsample_bilinear2d.vec`"},
    {"aten.native_layer_norm.default",
     "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, "
     "float eps) -> (Tensor, Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"LayerNorm; a tuple `(out, mean, rstd)`",
     /*saved=*/"`input`, `mean`, `rstd`; reads `weight` and `bias` (primals)",
     /*backward=*/
     "`aten.native_layer_norm_backward.default(g, input, normalized_shape, mean, rstd, weight, "
     "bias, [m])` -> `(d_input, d_weight, d_bias)`",
     /*notes=*/
     "`mean` / `rstd` are float32 for bfloat16 / float16 inputs. PyTorch's backward takes `bias` "
     "too (only for its shape)",
     /*backward_of=*/""},
    {"aten.native_layer_norm_backward.default",
     "native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor "
     "mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, "
     "Tensor)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`native_layer_norm`"},
    {"aten.pow.Tensor_Scalar", "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"RMSNorm's square",
     /*saved=*/"`self`",
     /*backward=*/
     "`aten.mul.Tensor(g, aten.mul.Scalar(self, 2.0))` for exponent 2; otherwise "
     "`aten.mul.Tensor(g, aten.mul.Scalar(aten.pow.Tensor_Scalar(self, e - 1), e))`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.rsqrt.default", "rsqrt(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"RMSNorm",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten.mul.Tensor(g, aten.mul.Scalar(aten.pow.Tensor_Scalar(y, 3), -0.5))`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.sqrt.default", "sqrt(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"DeBERTa's attention scale; norms written by hand",
     /*saved=*/"its result `y`",
     /*backward=*/"exported graphs carry torch's (g / (2 y)); the AOT builder has no formula",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.floor.default", "floor(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"sizes computed in tensors (CrossViT's scaled image size)",
     /*saved=*/"",
     /*backward=*/"zero (exported graphs carry none)",
     /*notes=*/"floating self only here (ATen copies an integer tensor)",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.reciprocal.default", "reciprocal(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"Funnel's attention scale; norms written by hand",
     /*saved=*/"its result `y`",
     /*backward=*/"exported graphs carry torch's (-g y^2)",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.softplus.default", "softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"Mamba's time step, Mish-like activations",
     /*saved=*/"`self`",
     /*backward=*/"`aten.softplus_backward.default(g, self, beta, threshold)`",
     /*notes=*/"`log1p(exp(beta x)) / beta`, `x` where `beta x > threshold` (ATen's formula)",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.softplus_backward.default",
     "softplus_backward(Tensor grad_output, Tensor self, Scalar beta, Scalar threshold) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"`g z / (z + 1)` with `z = exp(beta x)`; `g` where `beta x > threshold`",
     /*backward_of=*/"`softplus`",
     /*pointwise=*/true},
    {"aten.rsub.Scalar", "rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"`1 - x` (BLOOM's and others' masks and gates)",
     /*saved=*/"",
     /*backward=*/"exported graphs carry torch's (-alpha g)",
     /*notes=*/"other - alpha self, as two elementwise passes",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.relu.default", "relu(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"ReLU",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten.threshold_backward.default(g, y, 0)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.hardtanh.default",
     "hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"mobilenet_v2's ReLU6, `hardtanh(x, 0, 6)` (exported)",
     /*saved=*/"`self`",
     /*backward=*/
     "`aten.hardtanh_backward.default(g, self, min_val, max_val)`: `g` strictly inside `(min_val, "
     "max_val)`, 0 on the bounds and outside",
     /*notes=*/
     "exported graphs only: graph/aot.h has no backward rule for it (no built-in model uses it). "
     "NaN stays NaN",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.hardtanh_backward.default",
     "hardtanh_backward(Tensor grad_output, Tensor self, Scalar min_val, Scalar max_val) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`hardtanh` (exported graphs)",
     /*pointwise=*/true},
    {"aten.leaky_relu.default", "leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: LeakyReLU",
     /*saved=*/"`self`",
     /*backward=*/"`aten.leaky_relu_backward.default(g, self, negative_slope, False)`",
     /*notes=*/"`x > 0 ? x : negative_slope x`; floating dtypes only, as ATen. NaN stays NaN",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.leaky_relu_backward.default",
     "leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool "
     "self_is_result) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/
     "`self > 0 ? g : negative_slope g`; `self_is_result` with a negative slope is refused, as "
     "ATen refuses it",
     /*backward_of=*/"`leaky_relu`",
     /*pointwise=*/true},
    {"aten.silu.default", "silu(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"SwiGLU (LLaMA, MoE experts)",
     /*saved=*/"`self`",
     /*backward=*/"`aten.silu_backward.default(g, self)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.sigmoid.default", "sigmoid(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"gates: LSTM and GRU cells, EfficientNet's squeeze-and-excitation",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten.sigmoid_backward.default(g, y)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.hardswish.default", "hardswish(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"MobileNetV3's activations",
     /*saved=*/"`self`",
     /*backward=*/"`aten.hardswish_backward.default(g, self)`",
     /*notes=*/"x relu6(x + 3) / 6",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.hardsigmoid.default", "hardsigmoid(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"MobileNetV3's squeeze-and-excitation gates",
     /*saved=*/"`self`",
     /*backward=*/"`aten.hardsigmoid_backward.default(g, self)`",
     /*notes=*/"relu6(x + 3) / 6",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.exp.default", "exp(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"Swin V2's logit scale",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten.mul.Tensor(g, y)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.sin.default", "sin(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"rotary embeddings' tables, sinusoidal position and time embeddings",
     /*saved=*/"`self`",
     /*backward=*/"`aten.mul.Tensor(g, aten.cos.default(self))`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.cos.default", "cos(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"rotary embeddings' tables, sinusoidal position and time embeddings",
     /*saved=*/"`self`",
     /*backward=*/"`aten.mul.Tensor(g, aten.neg.default(aten.sin.default(self)))`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.log.default", "log(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"log-magnitudes, log-probabilities written by hand",
     /*saved=*/"`self`",
     /*backward=*/"`aten.div.Tensor(g, self)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.abs.default", "abs(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"L1 penalties, magnitudes",
     /*saved=*/"`self`",
     /*backward=*/"`aten.mul.Tensor(g, aten.sgn.default(self))`",
     /*notes=*/"integers exactly; a bool tensor is refused, as ATen refuses it",
     /*backward_of=*/""},
    {"aten.sgn.default", "sgn(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"zero (a step function)",
     /*notes=*/"-1, 0 or 1 by the sign; 0 for NaN, as torch 1.13's CPU kernel",
     /*backward_of=*/"`abs`",
     /*pointwise=*/true},
    {"aten.norm.ScalarOpt_dim",
     "norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"F.normalize (Swin V2's cosine attention)",
     /*saved=*/"`self` and its result",
     /*backward=*/"for p = 2: `g self / norm`, 0 where the norm is 0",
     /*notes=*/"(sum |x|^p)^(1/p) over dim, in double; p None is 2; p inf the largest |x|",
     /*backward_of=*/""},
    {"aten.tanh.default", "tanh(Tensor self) -> Tensor", DtypeRule::kPromotedFloat,
     /*used_for=*/"RNN, GRU and LSTM cells",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten.tanh_backward.default(g, y)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.gelu.default", "gelu(Tensor self, *, str approximate='none') -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"GPT-2 MLP (`approximate='tanh'`)",
     /*saved=*/"`self`",
     /*backward=*/"`aten.gelu_backward.default(g, self, approximate=)`",
     /*notes=*/"",
     /*backward_of=*/"",
     /*pointwise=*/true},
    {"aten.neg.default", "neg(Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: negation",
     /*saved=*/"",
     /*backward=*/"`aten.neg.default(g)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.add.Scalar", "add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"RMSNorm's `+ eps`",
     /*saved=*/"",
     /*backward=*/"`g` itself",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.sub.Scalar", "sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"offsets' arithmetic",
     /*saved=*/"",
     /*backward=*/"`g` itself",
     /*notes=*/"",
     /*backward_of=*/"`_embedding_bag` (its offsets)"},
    {"aten.mul.Scalar", "mul.Scalar(Tensor self, Scalar other) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`pow.Tensor_Scalar`, `rsqrt`"},
    {"aten.div.Scalar", "div.Scalar(Tensor self, Scalar other) -> Tensor",
     DtypeRule::kPromotedFloat,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`mean.dim`"},
    {"aten.add.Tensor", "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"residual connections, embeddings + positions",
     /*saved=*/"",
     /*backward=*/"`g` to both, summed over broadcast dimensions as for `mul`",
     /*notes=*/
     "gradients reaching one value from several uses are summed with `aten.add.Tensor`; an `alpha` "
     "other than 1 (here and in `index_add`) has no formula: refused",
     /*backward_of=*/""},
    {"aten.sub.Tensor", "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/"exported graphs: subtraction",
     /*saved=*/"",
     /*backward=*/
     "`d_self = g`, `d_other = aten.neg.default(g)`, each summed over broadcast dimensions as for "
     "`mul`",
     /*notes=*/"a bool operand is refused, as ATen refuses it",
     /*backward_of=*/""},
    {"aten.mul.Tensor", "mul.Tensor(Tensor self, Tensor other) -> Tensor", DtypeRule::kPromoted,
     /*used_for=*/"RMSNorm (by rsqrt, by the weight), SwiGLU, MoE routing weights",
     /*saved=*/"`other` for `self`, `self` for `other`",
     /*backward=*/
     "`d_self = aten.mul.Tensor(g, other)`, `d_other = aten.mul.Tensor(g, self)`, each summed over "
     "broadcast dimensions (`aten.sum.dim_IntList(.., dims, True)`, then `aten.view.default` to "
     "the input's shape)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.div.Tensor", "div.Tensor(Tensor self, Tensor other) -> Tensor",
     DtypeRule::kPromotedFloat,
     /*used_for=*/"scores / sqrt(d) in 1.13's attention (a 0-d divisor)",
     /*saved=*/"`other` (and `self` if `other` needs a gradient)",
     /*backward=*/"`aten.div.Tensor(g, other)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.div.Tensor_mode",
     "div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/
     "MoE token dispatch: a sorted slot's token is `slot // top_k` (`rounding_mode='floor'` on "
     "int64)",
     /*saved=*/"",
     /*backward=*/"none (integers)",
     /*notes=*/"`rounding_mode` None divides as `div.Tensor` (integral to float32)",
     /*backward_of=*/""},
    {"aten.mean.dim",
     "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"RMSNorm's mean; ResNet's average pool",
     /*saved=*/"",
     /*backward=*/
     "`aten.div.Scalar(aten.expand.default(g, self.shape), N)` with `N` the reduced elements; "
     "`aten.unsqueeze.default` first when `keepdim` is false",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.sum.dim_IntList",
     "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
     "Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"sums over dimensions written in a model",
     /*saved=*/"",
     /*backward=*/
     "`g` unsqueezed at the summed dimensions (without keepdim), "
     "`aten.expand.default` to self's shape",
     /*notes=*/"",
     /*backward_of=*/"`addmm` (bias), `expand`, broadcasting `mul` / `add`"},
    {"aten.sum.default", "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"the exporter's default loss (`--loss sum`): every element summed to a scalar",
     /*saved=*/"",
     /*backward=*/"`aten.expand.default(g, self.shape)`",
     /*notes=*/
     "exported graphs only (the built-in models' losses are `nll_loss` / `mse_loss`); "
     "`aten.mean.default` is the same with `1/N`. No `dim` / `keepdim`: every dimension, none "
     "kept. bool and integers sum to int64 unless `dtype` is given (as every `sum`)",
     /*backward_of=*/""},
    {"aten.mean.default", "mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"the exporter's default loss (the mean of the output)",
     /*saved=*/"",
     /*backward=*/
     "`aten.div.Scalar(aten.expand.default(g, self.shape), N)` with `N` = `self.numel()`",
     /*notes=*/"a floating `self`, or the `dtype` keyword (as every `mean`)",
     /*backward_of=*/""},
    {"aten.gelu_backward.default",
     "gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`gelu`, `silu`",
     /*pointwise=*/true},
    {"aten.silu_backward.default", "silu_backward(Tensor grad_output, Tensor self) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`gelu`, `silu`",
     /*pointwise=*/true},
    {"aten.sigmoid_backward.default",
     "sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`sigmoid`",
     /*pointwise=*/true},
    {"aten.hardswish_backward.default",
     "hardswish_backward(Tensor grad_output, Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"ATen's: 0 below -3, g (x / 3 + 1/2) up to 3 (-g / 2 at -3 itself), g above",
     /*backward_of=*/"`hardswish`",
     /*pointwise=*/true},
    {"aten.hardsigmoid_backward.default",
     "hardsigmoid_backward(Tensor grad_output, Tensor self) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"g / 6 strictly inside (-3, 3), 0 elsewhere",
     /*backward_of=*/"`hardsigmoid`",
     /*pointwise=*/true},
    {"aten.tanh_backward.default", "tanh_backward(Tensor grad_output, Tensor output) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`tanh`",
     /*pointwise=*/true},
    {"aten.threshold_backward.default",
     "threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`relu`",
     /*pointwise=*/true},
    {"aten._softmax.default", "_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"MoE router",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten._softmax_backward_data.default(g, y, dim, self.dtype)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten._log_softmax.default",
     "_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", DtypeRule::kFromArgs,
     /*used_for=*/"cross-entropy",
     /*saved=*/"its result `y`",
     /*backward=*/"`aten._log_softmax_backward_data.default(g, y, dim, self.dtype)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten._softmax_backward_data.default",
     "_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) "
     "-> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`_softmax`, `_log_softmax`"},
    {"aten._log_softmax_backward_data.default",
     "_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType "
     "input_dtype) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`_softmax`, `_log_softmax`"},
    {"aten.topk.default",
     "topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor "
     "values, Tensor indices)",
     DtypeRule::kFromArgs,
     /*used_for=*/"MoE router; a tuple `(values, indices)`",
     /*saved=*/"`indices`",
     /*backward=*/"`aten.scatter.src(aten.new_zeros.default(g, self.shape), dim, indices, g)`",
     /*notes=*/"`indices` are int64",
     /*backward_of=*/""},
    {"aten.argmax.default", "argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"the end-of-text token of each sequence (CLIP text pooling)",
     /*saved=*/"",
     /*backward=*/"none (int64 indices)",
     /*notes=*/
     "int64: the first maximal element's index (the first NaN's: NaN propagates); "
     "`dim` None: the index into the flattened `self`",
     /*backward_of=*/""},
    {"aten.argmin.default", "argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"the index of a smallest element",
     /*saved=*/"",
     /*backward=*/"none (int64 indices)",
     /*notes=*/
     "int64: the first minimal element's index (the first NaN's: NaN propagates); "
     "`dim` None: the index into the flattened `self`",
     /*backward_of=*/""},
    {"aten.max.dim",
     "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported graphs: `x.max(dim)`; a tuple `(values, indices)`",
     /*saved=*/"`indices`",
     /*backward=*/
     "`aten.scatter.src(aten.new_zeros.default(g, self.shape), dim, indices, g)`, "
     "`aten.unsqueeze.default` of `g` and `indices` first when `keepdim` is false",
     /*notes=*/
     "`indices` are int64: the first maximal element's, or the first NaN's (NaN propagates); "
     "a reduced dimension of size 0 is refused, as ATen refuses it",
     /*backward_of=*/""},
    {"aten.all.dim", "all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
     DtypeRule::kBool,
     /*used_for=*/"exported graphs (torch 2.x): `_safe_softmax`'s fully masked rows",
     /*saved=*/"",
     /*backward=*/"none (bool)",
     /*notes=*/"whether every element along `dim` is non-zero; a 0-d self is its own answer",
     /*backward_of=*/""},
    {"aten.any.dim", "any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
     DtypeRule::kBool,
     /*used_for=*/"exported graphs: `x.any(dim)`",
     /*saved=*/"",
     /*backward=*/"none (bool)",
     /*notes=*/"whether some element along `dim` is non-zero",
     /*backward_of=*/""},
    {"aten.amax.default", "amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: `x.amax(dims)`",
     /*saved=*/"`self` and its result",
     /*backward=*/
     "`g / count` where `self` equals the maximum, as AOTAutograd writes it (`aten.eq.Tensor`, "
     "`aten._to_copy.default`, `aten.sum.dim_IntList`, `aten.div.Tensor`, `aten.mul.Tensor`)",
     /*notes=*/
     "`dim` empty: every dimension. NaN propagates. An empty `self` needs named dimensions of "
     "non-zero size, as in ATen",
     /*backward_of=*/""},
    {"aten.sort.default",
     "sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
     DtypeRule::kFromArgs,
     /*used_for=*/"mixture-of-experts dispatch (transformers 5: the slots sorted by expert)",
     /*saved=*/"`indices`",
     /*backward=*/"exported graphs carry torch's (g scattered back by indices)",
     /*notes=*/
     "stable: equal elements keep their order (NaN above every number); torch's CPU sort is "
     "not stable, so the indices of ties may differ from torch's (the values do not; "
     "transformers' MoE restores the order by the inverse permutation, so its results do "
     "not depend on it); `indices` int64",
     /*backward_of=*/""},
    {"aten.argsort.default", "argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"MoE token dispatch",
     /*saved=*/"",
     /*backward=*/"none (integers)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.slice.Tensor",
     "slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) "
     "-> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"MoE token dispatch (on indices)",
     /*saved=*/"",
     /*backward=*/
     "`aten.slice_backward.default(g, self.shape, dim, start, end, step)` (never reached in the "
     "models: they slice integers)",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.slice_backward.default",
     "slice_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt start, SymInt end, "
     "SymInt step) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`slice.Tensor`"},
    {"aten.index_select.default", "index_select(Tensor self, int dim, Tensor index) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"MoE token dispatch",
     /*saved=*/"`index`",
     /*backward=*/"`aten.index_add.default(aten.new_zeros.default(g, self.shape), dim, index, g)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.index_add.default",
     "index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"MoE combine (lifted / AOT graphs are functional)",
     /*saved=*/"`index`",
     /*backward=*/"`d_self = g`; `d_source = aten.index_select.default(g, dim, index)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.index_add_.default",
     "index_add_(Tensor(a!) self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> "
     "Tensor(a!)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"MoE combine, module style (as torch.fx traces it)",
     /*saved=*/"`index`",
     /*backward=*/"as `index_add`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.new_ones.default",
     "new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"masks built beside a tensor (transformers' attention masks)",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"`self`'s dtype unless `dtype` says otherwise; `self`'s values are not read",
     /*backward_of=*/""},
    {"aten.new_full.default",
     "new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, "
     "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"constants built beside a tensor",
     /*saved=*/"",
     /*backward=*/"none (a constant)",
     /*notes=*/"`self`'s dtype unless `dtype` says otherwise; `self`'s values are not read",
     /*backward_of=*/""},
    {"aten.new_zeros.default",
     "new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`topk`, `index_select`, `split` (a piece without a gradient)"},
    {"aten.scatter.src", "scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`topk`"},
    {"aten.gather.default",
     "gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: `torch.gather` (values picked along a dimension)",
     /*saved=*/"`index`",
     /*backward=*/
     "`aten.scatter_add.default(aten.new_zeros.default(g, self.shape), dim, index, g)`",
     /*notes=*/
     "the result has index's shape; index is int64, no larger than self apart from `dim`; a "
     "value outside [0, self.shape[dim]) is refused (not wrapped), as in ATen",
     /*backward_of=*/""},
    {"aten.scatter.value",
     "scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported backwards: `gather`'s and `scatter`'s gradients zeroed at the places",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"a copy of self with `value` (in self's dtype) at the indexed places",
     /*backward_of=*/"`scatter.src`"},
    {"aten.scatter_add.default",
     "scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: `torch.scatter_add`; the backward of `gather`",
     /*saved=*/"`index`",
     /*backward=*/"`d_self = g`; `d_src = aten.gather.default(g, dim, index)`",
     /*notes=*/
     "a copy of self with src's elements added at the indexed places (repeated places add "
     "up); index no larger than src, nor than self apart from `dim`; src has self's dtype",
     /*backward_of=*/"`gather`"},
    {"aten.select_scatter.default",
     "select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: an in-place write of `x[:, i]` made functional",
     /*saved=*/"",
     /*backward=*/
     "`d_self = aten.select_scatter.default(g, zeros, dim, index)`; `d_src = "
     "aten.select.int(g, dim, index)`",
     /*notes=*/"src has self.select(dim, index)'s shape; a negative index counts from the end",
     /*backward_of=*/""},
    {"aten.histc.default", "histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/
     "mixture-of-experts routing (transformers 5): tokens per expert, before the grouped "
     "products' offsets",
     /*saved=*/"",
     /*backward=*/"none (counts)",
     /*notes=*/
     "floating self (ATen's CPU kernel has no integer one); `bins` equal bins over [min, "
     "max], the data's own range when min == max (widened by 1 each way when that is one "
     "value too); elements outside and NaN are not counted; an element x lands in bin "
     "floor((x - min) * bins / (max - min)), max itself in the last, as ATen computes it",
     /*backward_of=*/""},
    {"transformers.grouped_mm_fallback.default",
     "transformers::grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/
     "transformers 5's mixture-of-experts experts (Mixtral, Qwen2-MoE and the rest) where "
     "torch's grouped GEMM does not apply (float32, the CPU): one custom op over every expert",
     /*saved=*/"`input`, `weight`, `offs`",
     /*backward=*/"`transformers.grouped_mm_fallback_backward.default(input, weight, offs, g)`",
     /*notes=*/
     "input [S, K] (rows sorted by expert), weight [E, K, N], offs [E] integer, cumulative "
     "rows per expert: rows [offs[i-1], offs[i]) times weight[i]; rows past offs[E-1] are "
     "zero; offsets that fall or leave [0, S] are an error naming the expert",
     /*backward_of=*/""},
    {"transformers.grouped_mm_fallback_backward.default",
     "transformers::grouped_mm_fallback_backward(Tensor input, Tensor weight, Tensor offs, "
     "Tensor grad_output) -> (Tensor, Tensor)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"the backward of `transformers::grouped_mm_fallback`",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/
     "(grad_input [S, K], grad_weight [E, K, N]): each expert's rows of grad_output times "
     "weight[i] transposed, and its rows of input transposed times them; zero elsewhere",
     /*backward_of=*/"`transformers::grouped_mm_fallback`"},
    {"aten.cumsum.default", "cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported graphs: running sums; embedding_bag's backward (offsets to bags)",
     /*saved=*/"",
     /*backward=*/
     "`aten.flip.default(aten.cumsum.default(aten.flip.default(g, [dim]), dim), [dim])`",
     /*notes=*/
     "bool and integers sum to int64 unless `dtype` is given (as `sum`); float32 accumulates "
     "in double, as ATen's CPU kernel",
     /*backward_of=*/""},
    {"aten.flip.default", "flip(Tensor self, int[] dims) -> Tensor", DtypeRule::kFirstTensor,
     /*used_for=*/"exported backwards: `cumsum`'s gradient",
     /*saved=*/"",
     /*backward=*/"`aten.flip.default(g, dims)`",
     /*notes=*/"a copy; a dimension named twice is refused",
     /*backward_of=*/""},
    {"aten._embedding_bag.default",
     "_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool "
     "scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, "
     "bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/
     "nn.EmbeddingBag; a tuple `(output, offset2bag, bag_size, max_indices)`, modes 0 sum, 1 "
     "mean, 2 max",
     /*saved=*/"`indices`, `offsets`, `offset2bag`, `bag_size`, `max_indices`",
     /*backward=*/
     "`aten._embedding_bag_dense_backward.default(g, indices, offset2bag, bag_size, "
     "max_indices, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx)`, "
     "offset2bag rebuilt from the offsets (`index_add`, `cumsum`) when empty",
     /*notes=*/
     "ATen's CPU results: offset2bag is [0] in sum mode for a float32 / 16-bit weight without "
     "padding_idx, else each index's bag; bag_size [bags] (indices equal to padding_idx not "
     "counted; zeros in sum mode); max_indices zeros (sum), bag_size (mean), the maxima's rows "
     "[bags, dim] (max). Offsets must start at 0 and not decrease; with include_last_offset the "
     "last must be the indices' count",
     /*backward_of=*/""},
    {"aten._embedding_bag_dense_backward.default",
     "_embedding_bag_dense_backward(Tensor grad, Tensor indices, Tensor offset2bag, Tensor "
     "bag_size, Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, int mode, "
     "Tensor? per_sample_weights, int padding_idx=-1) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/
     "[num_weights, dim]: sum and mean add each index's bag gradient (scaled by its "
     "per-sample weight, 1 / bag_size for mean) to its row, in ATen's order (indices sorted); "
     "max adds each non-empty bag's gradient to its maxima's rows",
     /*backward_of=*/"`_embedding_bag`"},
    {"aten.repeat.default", "repeat(Tensor self, SymInt[] repeats) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"tiling (Whisper's and wav2vec2's position tables, grouped-query expansion)",
     /*saved=*/"",
     /*backward=*/
     "exported graphs carry torch's (the tiles summed); the AOT builder has no "
     "formula",
     /*notes=*/
     "self's shape padded with leading ones to len(repeats), each dimension times "
     "its count; fewer counts than dimensions is refused",
     /*backward_of=*/""},
    {"aten.repeat_interleave.Tensor",
     "repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: `repeat_interleave(x, n, dim)`'s index (then `index_select`)",
     /*saved=*/"",
     /*backward=*/"none (integers)",
     /*notes=*/
     "i repeated repeats[i] times, in repeats' dtype; the length depends on the data: "
     "`output_size`, else the node's stated shape. A negative repeat is refused",
     /*backward_of=*/""},
    {"aten.triu_indices.default",
     "triu_indices(int row, int col, int offset=0, *, ScalarType? dtype=long, Layout? "
     "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported graphs: the upper triangle's coordinates",
     /*saved=*/"",
     /*backward=*/"none (integers)",
     /*notes=*/"[2, count]: rows then columns, row-major; int64 unless `dtype` says otherwise",
     /*backward_of=*/""},
    {"aten.convolution.default",
     "convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
     "SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
     DtypeRule::kSameDtype,
     /*used_for=*/"ResNet convolutions",
     /*saved=*/"`input`; reads `weight`",
     /*backward=*/
     "`aten.convolution_backward.default(g, input, weight, bias_sizes, stride, padding, dilation, "
     "transposed, output_padding, groups, [m])`, `bias_sizes` `[out_channels]`, or `[0]` without a "
     "bias (as PyTorch's AOT graphs write it) -> `(d_input, d_weight, d_bias)`",
     /*notes=*/
     "1-, 2- or 3-d (input [N, C, spatial...]; stride, padding, dilation one value or one per "
     "spatial dimension; a one-element list is that value for every dimension, as ATen reads it). "
     "A bias of another dtype is converted to "
     "the input's. Transposed convolutions have no backward rule",
     /*backward_of=*/""},
    {"aten.convolution_backward.default",
     "convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, "
     "SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] "
     "output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`convolution`"},
    {"aten.native_batch_norm.default",
     "native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? "
     "running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"ResNet batch norm (training); a tuple `(out, save_mean, save_invstd)`",
     /*saved=*/"`input`, `save_mean`, `save_invstd`; reads `weight`",
     /*backward=*/
     "`aten.native_batch_norm_backward.default(g, input, weight, running_mean, running_var, "
     "save_mean, save_invstd, training, eps, [m])` (the running statistics are read when the "
     "forward has them: evaluation mode normalizes with them) -> `(d_input, d_weight, d_bias)`",
     /*notes=*/
     "PyTorch 2.x AOT graphs show the forward as `aten._native_batch_norm_legit_functional` (which "
     "also returns the updated running statistics); we keep 1.13's `native_batch_norm` name and no "
     "running statistics (None)",
     /*backward_of=*/""},
    {"aten.native_batch_norm_backward.default",
     "native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? "
     "running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float "
     "eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`native_batch_norm`"},
    {"aten.max_pool2d_with_indices.default",
     "max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
     "int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"ResNet stem pooling; a tuple `(out, indices)`",
     /*saved=*/"`self`, `indices`",
     /*backward=*/
     "`aten.max_pool2d_with_indices_backward.default(g, self, kernel_size, stride, padding, "
     "dilation, ceil_mode, indices)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.max_pool2d_with_indices_backward.default",
     "max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] "
     "stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`max_pool2d_with_indices`"},
    {"aten.prelu.default", "prelu(Tensor self, Tensor weight) -> Tensor", DtypeRule::kSameDtype,
     /*used_for=*/"exported graphs: PReLU",
     /*saved=*/"`self`; reads `weight`",
     /*backward=*/
     "`aten.prelu_backward.default(g, self, weight)`: `(d_self, d_weight)`",
     /*notes=*/
     "`x > 0 ? x : w x`, `weight` one element or one per channel (dimension 1 of `self`); "
     "PyTorch 2.x decomposes it into `_prelu_kernel` on `weight` reshaped to broadcast",
     /*backward_of=*/""},
    {"aten.prelu_backward.default",
     "prelu_backward(Tensor grad_output, Tensor self, Tensor weight) -> (Tensor, Tensor)",
     DtypeRule::kSameDtype,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/
     "1.13: `d_self = self > 0 ? g : w g`, `d_weight = sum(self > 0 ? 0 : self g)` to `weight`'s "
     "shape",
     /*backward_of=*/"`prelu`"},
    {"aten._prelu_kernel.default", "_prelu_kernel(Tensor self, Tensor weight) -> Tensor",
     DtypeRule::kSameDtype,
     /*used_for=*/"exported graphs (2.x): PReLU, `weight` broadcast to `self`",
     /*saved=*/"`self`; reads `weight`",
     /*backward=*/
     "`aten._prelu_kernel_backward.default(g, self, weight)`; `d_weight` summed to `weight`'s "
     "shape",
     /*notes=*/"`prelu`'s formula, `weight` broadcast (NumPy rules)",
     /*backward_of=*/""},
    {"aten._prelu_kernel_backward.default",
     "_prelu_kernel_backward(Tensor grad_output, Tensor self, Tensor weight) -> (Tensor, Tensor)",
     DtypeRule::kSameDtype,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/
     "2.x: `prelu_backward`'s formula without the sum: `d_weight` has `self`'s shape (autograd "
     "sums it to `weight`'s); `weight` must broadcast to `self`",
     /*backward_of=*/"`_prelu_kernel`"},
    {"aten.pixel_shuffle.default", "pixel_shuffle(Tensor self, int upscale_factor) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: sub-pixel upsampling",
     /*saved=*/"",
     /*backward=*/"`aten.pixel_unshuffle.default(g, upscale_factor)`",
     /*notes=*/
     "`[..., C r^2, H, W]` to `[..., C, H r, W r]`, any leading batch dimensions; a new tensor",
     /*backward_of=*/""},
    {"aten.pixel_unshuffle.default", "pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: space-to-depth",
     /*saved=*/"",
     /*backward=*/"`aten.pixel_shuffle.default(g, downscale_factor)`",
     /*notes=*/"`[..., C, H r, W r]` to `[..., C r^2, H, W]`; a new tensor",
     /*backward_of=*/""},
    {"aten.avg_pool2d.default",
     "avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool "
     "ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"DenseNet's transitions, Inception blocks",
     /*saved=*/"`self`",
     /*backward=*/
     "`aten.avg_pool2d_backward.default(g, self, kernel_size, stride, padding, ceil_mode, "
     "count_include_pad, divisor_override)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.flatten.using_ints",
     "flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)",
     DtypeRule::kFirstTensor,
     /*used_for=*/"ResNet flatten (module style)",
     /*saved=*/"",
     /*backward=*/"`aten.view.default(g, self.shape)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.nll_loss_forward.default",
     "nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt "
     "ignore_index) -> (Tensor output, Tensor total_weight)",
     DtypeRule::kFirstTensor,
     /*used_for=*/
     "cross-entropy (mean reduction, ignore_index -100); a tuple `(loss, total_weight)`",
     /*saved=*/"`self`, `target`, `total_weight`",
     /*backward=*/
     "`aten.nll_loss_backward.default(g, self, target, weight, reduction, ignore_index, "
     "total_weight)`",
     /*notes=*/"AOTAutograd decomposes `F.cross_entropy` into these two ops",
     /*backward_of=*/""},
    {"aten.avg_pool2d_backward.default",
     "avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, "
     "int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`avg_pool2d`"},
    {"aten.max_pool3d_with_indices.default",
     "max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, "
     "int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/
     "exported graphs: nn.MaxPool3d (video, volumetric models); a tuple `(out, "
     "indices)`",
     /*saved=*/"`self`, `indices`",
     /*backward=*/
     "`aten.max_pool3d_with_indices_backward.default(g, self, kernel_size, stride, padding, "
     "dilation, ceil_mode, indices)`",
     /*notes=*/
     "`self` [C, D, H, W] or [N, C, D, H, W]; `indices` int64 offsets into one D H W plane",
     /*backward_of=*/""},
    {"aten.max_pool3d_with_indices_backward.default",
     "max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] "
     "stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`max_pool3d_with_indices`"},
    {"aten.avg_pool3d.default",
     "avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool "
     "ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"exported graphs: nn.AvgPool3d",
     /*saved=*/"`self`",
     /*backward=*/
     "`aten.avg_pool3d_backward.default(g, self, kernel_size, stride, padding, ceil_mode, "
     "count_include_pad, divisor_override)`",
     /*notes=*/"`self` [C, D, H, W] or [N, C, D, H, W]",
     /*backward_of=*/""},
    {"aten.avg_pool3d_backward.default",
     "avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, "
     "int[3] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`avg_pool3d`"},
    {"aten.adaptive_max_pool2d.default",
     "adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported graphs: nn.AdaptiveMaxPool2d; a tuple `(out, indices)`",
     /*saved=*/"`self`, `indices`",
     /*backward=*/"`aten.adaptive_max_pool2d_backward.default(g, self, indices)`",
     /*notes=*/
     "`self` [C, H, W] or [N, C, H, W]; output row i pools input rows [floor(i H / out), "
     "ceil((i + 1) H / out)) (columns alike); `indices` int64 offsets into one H W plane",
     /*backward_of=*/""},
    {"aten.adaptive_max_pool2d_backward.default",
     "adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`adaptive_max_pool2d`"},
    {"aten.adaptive_max_pool3d.default",
     "adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)",
     DtypeRule::kFromArgs,
     /*used_for=*/"exported graphs: nn.AdaptiveMaxPool3d; a tuple `(out, indices)`",
     /*saved=*/"`self`, `indices`",
     /*backward=*/"`aten.adaptive_max_pool3d_backward.default(g, self, indices)`",
     /*notes=*/
     "`self` [C, D, H, W] or [N, C, D, H, W]; `adaptive_max_pool2d`'s windows along depth, "
     "height and width; `indices` int64 offsets into one D H W volume",
     /*backward_of=*/""},
    {"aten.adaptive_max_pool3d_backward.default",
     "adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`adaptive_max_pool3d`"},
    {"aten.nll_loss_backward.default",
     "nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int "
     "reduction, SymInt ignore_index, Tensor total_weight) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`nll_loss_forward`"},
    {"aten.mse_loss.default", "mse_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor",
     DtypeRule::kPromoted,
     /*used_for=*/
     "MSE loss (mean); `reduction` is 0 (none), 1 (mean) or 2 (sum), anything else refused as ATen "
     "refuses it",
     /*saved=*/"`self`, `target`",
     /*backward=*/"`aten.mse_loss_backward.default(g, self, target, reduction)`",
     /*notes=*/"",
     /*backward_of=*/""},
    {"aten.mse_loss_backward.default",
     "mse_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction) -> Tensor",
     DtypeRule::kFirstTensor,
     /*used_for=*/"",
     /*saved=*/"",
     /*backward=*/"",
     /*notes=*/"",
     /*backward_of=*/"`mse_loss`"},
};

absl::Status ParseError(absl::string_view target, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("schema of ", target, ": ", what));
}

// Splits on commas outside brackets and parentheses.
std::vector<std::string> SplitTopLevel(absl::string_view s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char ch : s) {
    if (ch == '(' || ch == '[') ++depth;
    if (ch == ')' || ch == ']') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(std::string(absl::StripAsciiWhitespace(cur)));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!absl::StripAsciiWhitespace(cur).empty()) {
    out.push_back(std::string(absl::StripAsciiWhitespace(cur)));
  }
  return out;
}

// "Tensor(a!)?" -> type, alias, optional, list size; false when the type is unknown.
bool ParseType(absl::string_view t, ArgType& type, std::string& alias, bool& optional,
               int& list_size) {
  optional = absl::ConsumeSuffix(&t, "?");
  alias.clear();
  list_size = 0;
  bool list = false;
  if (absl::EndsWith(t, "]")) {
    const size_t open = t.rfind('[');
    if (open == absl::string_view::npos) return false;
    absl::string_view n = t.substr(open + 1, t.size() - open - 2);
    if (!n.empty() && !absl::SimpleAtoi(n, &list_size)) return false;
    list = true;
    t = t.substr(0, open);
    // Tensor?[]: a list whose items may be None (index's indices); the list itself is not.
    if (absl::ConsumeSuffix(&t, "?") && t != "Tensor") return false;
  }
  if (const size_t paren = t.find('('); paren != absl::string_view::npos) {
    if (!absl::EndsWith(t, ")")) return false;
    alias = std::string(t.substr(paren + 1, t.size() - paren - 2));
    t = t.substr(0, paren);
  }
  if (t == "Tensor") {
    type = list ? ArgType::kTensorList : ArgType::kTensor;
  } else if (t == "int" || t == "SymInt") {
    type = list ? ArgType::kIntList : ArgType::kInt;
  } else if (t == "bool") {
    type = list ? ArgType::kBoolList : ArgType::kBool;
  } else if (t == "float" && list) {
    type = ArgType::kFloatList;
  } else if (list) {
    return false;
  } else if (t == "float") {
    type = ArgType::kFloat;
  } else if (t == "Scalar") {
    type = ArgType::kScalar;
  } else if (t == "str") {
    type = ArgType::kString;
  } else if (t == "ScalarType") {
    type = ArgType::kDtype;
  } else if (t == "Layout" || t == "Device" || t == "MemoryFormat" || t == "Generator") {
    type = ArgType::kOther;
  } else {
    return false;
  }
  return true;
}

// A declared default as a Value: None, True / False, ints, floats, 'strings', [int lists],
// and ATen's reduction names.
std::optional<Value> ParseDefault(absl::string_view d) {
  int64_t i = 0;
  double x = 0;
  if (d == "None") return Value();
  if (d == "True") return Value::Bool(true);
  if (d == "False") return Value::Bool(false);
  if (d == "Mean") return Value::Int(1);  // at::Reduction::Mean
  if (d == "Sum") return Value::Int(2);
  if (d == "long") return Value::String("torch.int64");  // ScalarType's default (triu_indices)
  if (absl::SimpleAtoi(d, &i)) return Value::Int(i);
  if (absl::SimpleAtod(d, &x)) return Value::Double(x);
  if (d.size() >= 2 && d.front() == '\'' && d.back() == '\'') {
    return Value::String(std::string(d.substr(1, d.size() - 2)));
  }
  if (absl::ConsumePrefix(&d, "[") && absl::ConsumeSuffix(&d, "]")) {
    std::vector<Value> items;
    for (absl::string_view item : absl::StrSplit(d, ',', absl::SkipWhitespace())) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &i)) return std::nullopt;
      items.push_back(Value::Int(i));
    }
    return Value::List(std::move(items));
  }
  return std::nullopt;
}

const std::vector<OpSchema>& Table() {
  static const std::vector<OpSchema>* table = [] {
    auto* t = new std::vector<OpSchema>();
    for (const OpDecl& d : kOps) {
      absl::StatusOr<OpSchema> s = ParseOpSchema(d.target, d.signature);
      // The table is part of the build: op_schema_test parses every line, so a line that
      // does not parse never ships. Here it is skipped rather than aborting a program.
      if (!s.ok()) continue;
      s->dtype = d.dtype;
      s->used_for = d.used_for;
      s->saved = d.saved;
      s->backward = d.backward;
      s->notes = d.notes;
      s->backward_of = d.backward_of;
      s->pointwise = d.pointwise;
      t->push_back(*std::move(s));
    }
    return t;
  }();
  return *table;
}

const absl::flat_hash_map<std::string, const OpSchema*>& Index() {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string, const OpSchema*>();
    for (const OpSchema& s : Table()) m->emplace(s.target, &s);
    return m;
  }();
  return *index;
}

std::string Cell(absl::string_view s) { return s.empty() ? "" : std::string(s); }

}  // namespace

absl::string_view ArgTypeName(ArgType t) {
  switch (t) {
    case ArgType::kTensor:
      return "Tensor";
    case ArgType::kTensorList:
      return "Tensor[]";
    case ArgType::kInt:
      return "int";
    case ArgType::kIntList:
      return "int[]";
    case ArgType::kFloat:
      return "float";
    case ArgType::kFloatList:
      return "float[]";
    case ArgType::kBool:
      return "bool";
    case ArgType::kBoolList:
      return "bool[]";
    case ArgType::kScalar:
      return "Scalar";
    case ArgType::kString:
      return "str";
    case ArgType::kDtype:
      return "ScalarType";
    case ArgType::kOther:
      return "other";
  }
  return "?";
}

int OpSchema::Position(absl::string_view name) const {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int OpSchema::ViewOf() const {
  if (results.empty() || results[0].alias.empty()) return -1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (absl::StartsWith(args[i].alias, results[0].alias)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool OpSchema::MutatesFirst() const { return !args.empty() && absl::EndsWith(args[0].alias, "!"); }

bool OpSchema::Random() const {
  for (const ArgSchema& a : args) {
    if (a.name == "generator" && a.type == ArgType::kOther) return true;
  }
  return false;
}

absl::StatusOr<OpSchema> ParseOpSchema(absl::string_view target, absl::string_view signature) {
  OpSchema s;
  s.target = std::string(target);
  s.signature = std::string(signature);
  const size_t open = signature.find('(');
  const size_t arrow = signature.rfind(") -> ");
  if (open == absl::string_view::npos || arrow == absl::string_view::npos || arrow < open) {
    return ParseError(target, "not of the form name(args) -> results");
  }
  absl::string_view name = signature.substr(0, open);
  // A custom op's schema names its namespace ("transformers::grouped_mm_fallback(...)");
  // ATen's do not.
  absl::string_view ns = "aten";
  if (const size_t colons = name.find("::"); colons != absl::string_view::npos) {
    ns = name.substr(0, colons);
    name = name.substr(colons + 2);
  }
  const size_t dot = name.find('.');
  const std::string expect =
      dot == absl::string_view::npos
          ? absl::StrCat(ns, ".", name, ".default")
          : absl::StrCat(ns, ".", name.substr(0, dot), ".", name.substr(dot + 1));
  if (expect != target) {
    return ParseError(target, absl::StrCat("the schema names ", expect));
  }
  bool keyword_only = false;
  for (const std::string& a : SplitTopLevel(signature.substr(open + 1, arrow - open - 1))) {
    if (a == "*") {
      keyword_only = true;
      continue;
    }
    ArgSchema arg;
    arg.keyword_only = keyword_only;
    absl::string_view text = a;
    if (const size_t eq = text.find('='); eq != absl::string_view::npos) {
      arg.default_value = ParseDefault(text.substr(eq + 1));
      if (!arg.default_value) return ParseError(target, absl::StrCat("default of '", a, "'"));
      text = text.substr(0, eq);
    }
    // The type may hold a space ("Tensor(a -> *)"): the name is the last word.
    const size_t space = text.rfind(' ');
    if (space == absl::string_view::npos) return ParseError(target, absl::StrCat("'", a, "'"));
    arg.name = std::string(text.substr(space + 1));
    if (!ParseType(text.substr(0, space), arg.type, arg.alias, arg.optional, arg.list_size)) {
      return ParseError(target, absl::StrCat("the type of '", a, "'"));
    }
    if (s.Position(arg.name) >= 0) return ParseError(target, absl::StrCat(arg.name, " twice"));
    s.args.push_back(std::move(arg));
  }
  absl::string_view results = signature.substr(arrow + 5);
  if (absl::ConsumePrefix(&results, "(")) {
    if (!absl::ConsumeSuffix(&results, ")")) return ParseError(target, "the results' tuple");
  }
  for (const std::string& r : SplitTopLevel(results)) {
    ResultSchema res;
    absl::string_view text = r;
    const size_t space = text.rfind(' ');
    if (space != absl::string_view::npos &&
        text.substr(space + 1).find('(') == absl::string_view::npos &&
        text.substr(space + 1).find('[') == absl::string_view::npos) {
      res.name = std::string(text.substr(space + 1));
      text = text.substr(0, space);
    }
    int list_size = 0;
    if (!ParseType(text, res.type, res.alias, res.optional, list_size)) {
      return ParseError(target, absl::StrCat("the result '", r, "'"));
    }
    s.results.push_back(std::move(res));
  }
  if (s.results.empty()) return ParseError(target, "no results");
  return s;
}

absl::Span<const OpSchema> OpSchemas() { return Table(); }

absl::Status VerifyOpSchemaTable() {
  for (const OpDecl& d : kOps)
    OVERLAP_RETURN_IF_ERROR(ParseOpSchema(d.target, d.signature).status());
  return absl::OkStatus();
}

const OpSchema* FindOpSchema(absl::string_view target) {
  auto it = Index().find(target);
  return it == Index().end() ? nullptr : it->second;
}

absl::StatusOr<OpArgs> OpArgs::Bind(const Node& node) {
  const OpSchema* s = FindOpSchema(node.target());
  if (s == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("node \"", Printable(node.name()), "\" (",
                                                   Printable(node.target()),
                                                   "): no operator schema declares this target"));
  }
  return Bind(node, *s);
}

absl::StatusOr<OpArgs> OpArgs::Bind(const Node& node, const OpSchema& schema) {
  OpArgs a;
  a.node_ = &node;
  a.schema_ = &schema;
  a.values_.assign(schema.args.size(), nullptr);
  if (node.args().size() > schema.args.size()) {
    return a.Error(schema.args.empty() ? "" : schema.args.back().name,
                   absl::StrCat(node.args().size(), " arguments given, the schema declares ",
                                schema.args.size()));
  }
  for (size_t i = 0; i < node.args().size(); ++i) {
    if (schema.args[i].keyword_only) {
      return a.Error(schema.args[i].name, "is keyword-only, given by position");
    }
    a.values_[i] = &node.args()[i];
  }
  for (const auto& [key, value] : node.kwargs()) {
    const int pos = schema.Position(key);
    if (pos < 0) return a.Error(key, "is not an argument of the schema");
    if (a.values_[pos] != nullptr) return a.Error(key, "given both by position and by keyword");
    a.values_[pos] = &value;
  }
  return a;
}

const Value* OpArgs::Get(absl::string_view name) const {
  const int pos = schema_->Position(name);
  if (pos < 0) return nullptr;
  if (values_[pos] != nullptr) return values_[pos];
  const std::optional<Value>& d = schema_->args[pos].default_value;
  return d ? &*d : nullptr;
}

bool OpArgs::IsNone(absl::string_view name) const {
  const Value* v = Get(name);
  return v == nullptr || v->is_none();
}

absl::Status OpArgs::Error(absl::string_view name, absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat("node \"", Printable(node_->name()), "\" (",
                                                 Printable(node_->target()), "): argument `", name,
                                                 "` ", what));
}

absl::StatusOr<std::string> WithOpsTable(absl::string_view page) {
  const size_t begin = page.find(kOpsTableBegin);
  const size_t end = page.find(kOpsTableEnd);
  if (begin == absl::string_view::npos || end == absl::string_view::npos || end < begin) {
    return absl::InvalidArgumentError("the page has no generated-table markers, in order");
  }
  const size_t after_begin = begin + std::string(kOpsTableBegin).size();
  return absl::StrCat(page.substr(0, after_begin), "\n", OpsMarkdownTable(), page.substr(end));
}

std::string OpsMarkdownTable() {
  std::string out =
      "| target | schema | alias | dtype | used for | saved | backward | notes |\n"
      "|---|---|---|---|---|---|---|---|\n";
  auto dtype_rule = [](const OpSchema& s) -> absl::string_view {
    switch (s.dtype) {
      case DtypeRule::kFirstTensor:
        return "first tensor's";
      case DtypeRule::kPromoted:
        return "promoted";
      case DtypeRule::kPromotedFloat:
        return "promoted; integral to float32";
      case DtypeRule::kSameDtype:
        return "one dtype, no promotion";
      case DtypeRule::kBool:
        return "bool";
      case DtypeRule::kFromArgs:
        return "by argument (shape rule)";
    }
    return "";
  };
  auto dtype = [&](const OpSchema& s) -> std::string {
    return absl::StrCat(s.pointwise ? "pointwise; " : "", dtype_rule(s));
  };
  for (const OpSchema& s : Table()) {
    if (!s.backward_of.empty()) continue;
    const int view = s.ViewOf();
    absl::StrAppend(&out, "| `", s.target, "` | `", s.signature, "` | ",
                    view >= 0 ? absl::StrCat("of `", s.args[view].name, "`") : "", " | ", dtype(s),
                    " | ", Cell(s.used_for), " | ", Cell(s.saved), " | ", Cell(s.backward), " | ",
                    Cell(s.notes), " |\n");
  }
  absl::StrAppend(&out,
                  "\nOnly in backward graphs:\n\n"
                  "| target | schema | alias | dtype | from the backward of |\n"
                  "|---|---|---|---|---|\n");
  for (const OpSchema& s : Table()) {
    if (s.backward_of.empty()) continue;
    const int view = s.ViewOf();
    absl::StrAppend(&out, "| `", s.target, "` | `", s.signature, "` | ",
                    view >= 0 ? absl::StrCat("of `", s.args[view].name, "`") : "", " | ", dtype(s),
                    " | ", s.backward_of, " |\n");
  }
  return out;
}

}  // namespace overlap
