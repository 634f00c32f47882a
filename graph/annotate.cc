#include "graph/annotate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "graph/op_schema.h"
#include "graph/shape_rules.h"
#include "graph/text.h"
#include "graph/value_bytes.h"

namespace overlap {
namespace {

// How an op's FLOPs follow from its operands (docs/cost-model.md has the table).
enum class Kind {
  kFree,               // a view, getitem or metadata query: no kernel
  kMatmul,             // 2 x out elements x K, K the contraction length
  kConv,               // 2 x out elements x (weight elements / out channels)
  kConvBackward,       // 2 x grad_out elements x (weight elements / out channels) per gradient
  kElementwise,        // 1 per element
  kTranscendental,     // 4 per element (exp, tanh, erf, ... and their backwards)
  kNorm,               // 8 per element (mean, variance, normalise, affine)
  kSoftmax,            // 5 per element (max, subtract, exp, sum, divide)
  kReduction,          // 1 per element (sums, means, maxima, losses)
  kPool,               // 1 per element
  kMemory,             // 0 FLOPs: gathers, scatters, concatenation, copies
  kEmbedding,          // 0 FLOPs; reads the gathered rows, not the whole table
  kAttention,          // fused attention: 4 x B x H x Sq x Sk x D, half when causal
  kAttentionBackward,  // 2.5 x the forward's (two matmuls recomputed, four for gradients)
  kAttentionModule,    // nn.MultiheadAttention whole: its four projections and the attention
};

// The pointwise ops: elementwise arithmetic, comparisons and transcendental functions, by base
// name (every dialect's spelling: aten.relu.default, torch.relu, F.relu). An ATen op declared
// pointwise (graph/op_schema.h) and named nowhere here is elementwise.
void AddPointwiseKinds(absl::flat_hash_map<std::string, Kind>& m) {
  auto add = [&](Kind k, std::initializer_list<const char*> names) {
    for (const char* name : names) m[name] = k;
  };
  add(Kind::kElementwise, {"add",
                           "sub",
                           "rsub",
                           "mul",
                           "div",
                           "neg",
                           "abs",
                           "relu",
                           "threshold",
                           "hardtanh",
                           "relu6",
                           "clamp",
                           "clamp_min",
                           "clamp_max",
                           "maximum",
                           "minimum",
                           "where",
                           "masked_fill",
                           "eq",
                           "ne",
                           "lt",
                           "le",
                           "gt",
                           "ge",
                           "logical_not",
                           "bitwise_not",
                           "floor_divide",
                           "floor",
                           "sign",
                           "dropout",
                           "native_dropout",
                           "native_dropout_backward",
                           "clone",
                           "copy",
                           "_to_copy",
                           "to",
                           "contiguous",
                           "type_as",
                           "float",
                           "lift_fresh_copy",
                           "fill",
                           "zeros",
                           "zeros_like",
                           "zero",
                           "ones",
                           "ones_like",
                           "full",
                           "full_like",
                           "empty",
                           "empty_like",
                           "new_zeros",
                           "new_ones",
                           "new_empty",
                           "new_full",
                           "scalar_tensor",
                           "arange",
                           "triu",
                           "tril",
                           "iadd",
                           "isub",
                           "imul",
                           "truediv",
                           "floordiv",
                           "pow_by_natural",
                           "addcmul",
                           "addcdiv",
                           "lerp"});
  add(Kind::kTranscendental, {"exp",
                              "log",
                              "log1p",
                              "expm1",
                              "tanh",
                              "tanh_backward",
                              "sigmoid",
                              "sigmoid_backward",
                              "gelu",
                              "gelu_backward",
                              "silu",
                              "silu_backward",
                              "erf",
                              "rsqrt",
                              "sqrt",
                              "pow",
                              "reciprocal",
                              "softplus",
                              "softplus_backward",
                              "hardswish",
                              "hardswish_backward",
                              "hardsigmoid",
                              "hardsigmoid_backward",
                              "sin",
                              "cos",
                              "elu",
                              "elu_backward",
                              "mish"});
  // A comparison and a product per element.
  add(Kind::kElementwise,
      {"leaky_relu", "prelu", "prelu_backward", "_prelu_kernel", "_prelu_kernel_backward"});
}

const absl::flat_hash_map<std::string, Kind>& OpKinds() {
  static const auto* kinds = [] {
    auto* m = new absl::flat_hash_map<std::string, Kind>();
    auto add = [&](Kind k, std::initializer_list<const char*> names) {
      for (const char* name : names) (*m)[name] = k;
    };
    add(Kind::kFree, {"view",       "_unsafe_view", "_reshape_alias",   "reshape", "flatten",
                      "expand",     "expand_as",    "view_as",          "t",       "transpose",
                      "permute",    "squeeze",      "unsqueeze",        "alias",   "detach",
                      "as_strided", "split",        "split_with_sizes", "chunk",   "unbind",
                      "select",     "slice",        "narrow",           "getitem", "getattr",
                      "size",       "dim",          "_assert",          "numel",   "stride",
                      "sym_size"});
    add(Kind::kMatmul, {"mm", "bmm", "matmul", "linear", "addmm", "baddbmm", "grouped_mm_fallback",
                        "grouped_mm_fallback_backward"});
    add(Kind::kConv, {"convolution", "_convolution", "conv1d", "conv2d", "conv3d"});
    add(Kind::kConvBackward, {"convolution_backward"});
    AddPointwiseKinds(*m);
    add(Kind::kNorm, {"native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
                      "native_batch_norm_backward", "_native_batch_norm_legit",
                      "_native_batch_norm_legit_no_training", "batch_norm", "layer_norm",
                      "group_norm", "native_group_norm", "native_group_norm_backward", "rms_norm",
                      "cudnn_batch_norm", "cudnn_batch_norm_backward", "instance_norm"});
    add(Kind::kSoftmax, {"_softmax", "softmax", "_log_softmax", "log_softmax",
                         "_softmax_backward_data", "_log_softmax_backward_data"});
    add(Kind::kReduction, {"sum",
                           "mean",
                           "amax",
                           "amin",
                           "max",
                           "min",
                           "var",
                           "std",
                           "var_mean",
                           "argmax",
                           "argmin",
                           "logsumexp",
                           "norm",
                           "nll_loss",
                           "nll_loss_forward",
                           "nll_loss_backward",
                           "nll_loss2d_forward",
                           "nll_loss2d_backward",
                           "cross_entropy",
                           "mse_loss",
                           "mse_loss_backward",
                           "any",
                           "all"});
    add(Kind::kPool,
        {"max_pool2d", "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
         "avg_pool2d_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
         "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d", "max_pool1d", "avg_pool1d"});
    add(Kind::kPool, {"max_pool3d", "max_pool3d_with_indices", "max_pool3d_with_indices_backward",
                      "avg_pool3d", "avg_pool3d_backward", "adaptive_max_pool2d_backward",
                      "adaptive_max_pool3d", "adaptive_max_pool3d_backward", "_adaptive_avg_pool3d",
                      "_adaptive_avg_pool3d_backward", "adaptive_avg_pool3d"});
    add(Kind::kMemory,
        {"cat", "stack", "index", "index_select", "gather", "scatter", "scatter_add", "index_put",
         "index_add", "slice_backward", "select_backward", "embedding_dense_backward",
         "constant_pad_nd", "pad", "repeat", "roll", "flip"});
    add(Kind::kEmbedding, {"embedding", "_embedding_bag"});
    // Index builders and the embedding bag's backward: bytes moved, no arithmetic to speak of.
    add(Kind::kMemory, {"_embedding_bag_dense_backward", "repeat_interleave", "triu_indices"});
    add(Kind::kNorm, {"_native_batch_norm_legit_functional"});
    add(Kind::kMemory, {"slice_scatter", "select_scatter", "as_strided_scatter", "unsafe_split"});
    add(Kind::kMemory, {"pixel_shuffle", "pixel_unshuffle"});  // a permuting copy
    // Upsampling reads each input a few times and writes the output once: memory-bound.
    add(Kind::kMemory, {"upsample_nearest2d", "upsample_bilinear2d", "upsample_nearest2d_backward",
                        "upsample_bilinear2d_backward"});
    add(Kind::kElementwise, {"bernoulli", "logical_and", "logical_or", "logical_xor"});
    add(Kind::kReduction, {"cumsum", "cumprod", "histc"});
    add(Kind::kAttention,
        {"_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
         "scaled_dot_product_attention", "_scaled_dot_product_cudnn_attention",
         "_scaled_dot_product_flash_attention_for_cpu"});
    add(Kind::kAttentionBackward, {"_scaled_dot_product_flash_attention_for_cpu_backward",
                                   "_scaled_dot_product_flash_attention_backward",
                                   "_scaled_dot_product_efficient_attention_backward",
                                   "_scaled_dot_product_cudnn_attention_backward"});
    add(Kind::kReduction, {"topk", "sort", "argsort"});
    add(Kind::kElementwise, {"rsub"});
    return m;
  }();
  return *kinds;
}

// call_module classes (the last component of meta.module).
const absl::flat_hash_map<std::string, Kind>& ModuleKinds() {
  static const auto* kinds = [] {
    auto* m = new absl::flat_hash_map<std::string, Kind>();
    auto add = [&](Kind k, std::initializer_list<const char*> names) {
      for (const char* name : names) (*m)[name] = k;
    };
    add(Kind::kFree, {"Identity", "Flatten", "Unflatten"});
    add(Kind::kMatmul, {"Linear"});
    add(Kind::kConv, {"Conv1d", "Conv2d", "Conv3d"});
    add(Kind::kElementwise,
        {"ReLU", "ReLU6", "Hardtanh", "Dropout", "Dropout1d", "Dropout2d", "Threshold"});
    add(Kind::kTranscendental,
        {"GELU", "SiLU", "Tanh", "Sigmoid", "Hardswish", "Hardsigmoid", "ELU", "Softplus", "Mish"});
    add(Kind::kElementwise, {"LeakyReLU", "PReLU"});
    add(Kind::kMemory, {"PixelShuffle", "PixelUnshuffle"});
    add(Kind::kNorm, {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
                      "RMSNorm", "InstanceNorm2d", "SyncBatchNorm"});
    add(Kind::kSoftmax, {"Softmax", "LogSoftmax"});
    add(Kind::kReduction, {"CrossEntropyLoss", "MSELoss", "NLLLoss"});
    add(Kind::kPool, {"MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d",
                      "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "MaxPool3d", "AvgPool3d",
                      "AdaptiveMaxPool1d", "AdaptiveAvgPool3d", "AdaptiveMaxPool3d"});
    add(Kind::kEmbedding, {"Embedding"});
    add(Kind::kAttentionModule, {"MultiheadAttention"});
    return m;
  }();
  return *kinds;
}

double PerElementFlops(Kind k) {
  switch (k) {
    case Kind::kElementwise:
    case Kind::kReduction:
    case Kind::kPool:
      return 1;
    case Kind::kTranscendental:
      return 4;
    case Kind::kSoftmax:
      return 5;
    case Kind::kNorm:
      return 8;
    default:
      return 0;
  }
}

// In double: a file's shape may hold dimensions whose product overflows int64.
double Numel(const TensorType& t) {
  for (int64_t d : t.shape) {
    if (d <= 0) return 0;  // before any product could reach infinity (inf x 0 is NaN)
  }
  double n = 1;
  for (int64_t d : t.shape) n *= static_cast<double>(d);
  return n;
}

struct Totals {
  double bytes = 0;
  double max_numel = 0;
  double numel = 0;
};

Totals Sum(const std::vector<TensorType>& types) {
  Totals t;
  for (const TensorType& x : types) {
    if (x.dtype == "none") continue;  // an undefined element of a tuple (a null in `shapes`)
    const double n = Numel(x);
    t.bytes += n * static_cast<double>(DtypeBytes(x.dtype));
    t.numel += n;
    t.max_numel = std::max(t.max_numel, n);
  }
  return t;
}

// Argument `key` of a declared operator, through its schema (graph/op_schema.h): given by
// position or keyword, else its default. The estimate covers any PyTorch graph, so for an
// operator the schema does not declare: position i, else the keyword `key`.
const Value* Arg(const Node& n, size_t i, absl::string_view key) {
  if (const OpSchema* s = FindOpSchema(n.target()); s != nullptr) {
    const int pos = s->Position(key);
    if (pos < 0) return nullptr;
    if (pos < static_cast<int>(n.args().size())) return &n.args()[pos];
    for (const auto& [k, v] : n.kwargs()) {
      if (k == key) return &v;
    }
    const std::optional<Value>& d = s->arg(pos).default_value;
    return d ? &*d : nullptr;
  }
  if (i < n.args().size()) return &n.args()[i];
  for (const auto& [k, v] : n.kwargs()) {
    if (k == key) return &v;
  }
  return nullptr;
}

// The first stated type of the node argument i (or keyword `key`) references, if any.
std::optional<TensorType> ArgType(const Graph& g, const Node& n, size_t i,
                                  absl::string_view key = "") {
  const Value* v = Arg(n, i, key);
  if (v == nullptr || !v->is_ref()) return std::nullopt;
  std::vector<TensorType> t = StatedTypes(g.node(v->as_ref()));
  if (t.empty() || t[0].dtype == "none") return std::nullopt;
  return t[0];
}

// A call_module node's parameter named "<owner>.weight", if listed with a shape.
std::optional<TensorType> ModuleWeight(const Graph& g, const Node& n) {
  for (int i : g.ParamsOwnedBy(n.target())) {
    const Param& p = g.params()[i];
    if (p.has_shape && absl::EndsWith(p.name, ".weight")) return TensorType{p.shape, p.dtype};
  }
  return std::nullopt;
}

// The class in meta.module ("torch.nn.modules.linear.Linear"), empty when absent.
std::string ModuleClass(const Node& n) {
  for (const auto& [key, raw] : n.meta().extra) {
    if (key != "module") continue;
    absl::string_view v = raw;
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"')
      return std::string(v.substr(1, v.size() - 2));
  }
  return "";
}

// A boolean argument given by position or keyword; false when absent.
bool BoolArg(const Node& n, size_t i, absl::string_view key) {
  const Value* v = Arg(n, i, key);
  return v != nullptr && v->kind() == Value::Kind::kBool && v->as_bool();
}

// Where each fused attention op has is_causal, by the PyTorch 2.x schemas (a keyword is
// read too). The efficient op's schema changed in 2.1: 2.0's (q, k, v, compute_log_sumexp,
// is_causal) has a bool at 3, later ones (q, k, v, attn_bias, compute_log_sumexp,
// dropout_p, is_causal) do not; its backward likewise (2.0: is_causal at 6, later 11).
size_t CausalIndex(const std::string& base, const Node& n) {
  const auto bool_at = [&n](size_t i) {
    return i < n.args().size() && n.args()[i].kind() == Value::Kind::kBool;
  };
  if (base == "scaled_dot_product_attention") return 5;
  if (base == "_scaled_dot_product_efficient_attention") return bool_at(3) ? 4 : 6;
  if (base == "_scaled_dot_product_cudnn_attention") return 6;
  if (base == "_scaled_dot_product_flash_attention_backward") return 11;
  if (base == "_scaled_dot_product_flash_attention_for_cpu_backward") return 7;
  if (base == "_scaled_dot_product_efficient_attention_backward") return bool_at(6) ? 6 : 11;
  if (base == "_scaled_dot_product_cudnn_attention_backward") return 14;
  return 4;  // _scaled_dot_product_flash_attention(_for_cpu)
}

// Fused attention's FLOPs from q [..., Sq, D] and k [..., Sk, D] (arguments qi, qi + 1): the
// two matmuls, 2 x 2 x (batch x heads) x Sq x Sk x D, half the scores when causal.
double AttentionFlops(const Graph& g, const Node& n, size_t qi, bool causal) {
  std::optional<TensorType> q = ArgType(g, n, qi, "query");
  std::optional<TensorType> k = ArgType(g, n, qi + 1, "key");
  if (!q || !k || q->shape.size() < 2 || k->shape.size() < 2) return 0;
  const double sk = static_cast<double>(k->shape[k->shape.size() - 2]);
  const double f = 4.0 * Numel(*q) * sk;
  return causal ? f / 2 : f;
}

// Weight elements per output element (the contraction length of a convolution).
double ConvK(const TensorType& w) {
  if (w.shape.empty() || w.shape[0] <= 0) return 0;
  return Numel(w) / static_cast<double>(w.shape[0]);
}

// One call node's roofline inputs, and how they were found.
struct Estimate {
  double flops = 0;
  double bytes = 0;
  std::string dtype;     // the result's: its first defined element's, else the first input's
  bool formula = false;  // false: the memory-only fallback
  std::string op_key;    // what the fallback counts it as
  bool untyped = false;  // a tensor op without a stated result (its bytes are inputs only)
};

// A matmul's reduced dimension k (its flops are 2 * output elements * k): the module's
// weight's columns, or the last dimension of the left operand; 0 when unknown.
double MatmulK(const Graph& g, const Node& n, const std::string& base) {
  std::optional<TensorType> x;
  if (n.op() == Op::kCallModule) {
    std::optional<TensorType> w = ModuleWeight(g, n);
    return w && w->shape.size() == 2 ? static_cast<double>(w->shape[1]) : 0;
  }
  if (base == "addmm" || base == "baddbmm") {
    x = ArgType(g, n, 1, base == "addmm" ? "mat1" : "batch1");
  } else {
    x = ArgType(g, n, 0, "input");
    if (!x) x = ArgType(g, n, 0, "self");
  }
  return x && !x->shape.empty() ? static_cast<double>(x->shape.back()) : 0;
}

// Per gradient, the forward's MACs: grad_output's elements (the input's for a transposed
// convolution, whose weight is [in, out / groups, ...]) x ConvK; 0 when a type is unknown.
double ConvBackwardFlops(const Graph& g, const Node& n) {
  std::optional<TensorType> per =
      BoolArg(n, 7, "transposed") ? ArgType(g, n, 1, "input") : ArgType(g, n, 0, "grad_output");
  std::optional<TensorType> w = ArgType(g, n, 2, "weight");
  int gradients = 2;  // input and weight; output_mask (argument 10) may drop some
  const Value* mask_v = Arg(n, 10, "output_mask");
  if (mask_v != nullptr && mask_v->kind() == Value::Kind::kList) {
    gradients = 0;
    const std::vector<Value>& mask = mask_v->items();
    for (size_t i = 0; i < mask.size() && i < 2; ++i) {
      if (mask[i].kind() == Value::Kind::kBool && mask[i].as_bool()) ++gradients;
    }
  }
  return per && w ? 2.0 * gradients * Numel(*per) * ConvK(*w) : 0;
}

// nn.MultiheadAttention called whole (query, key, value of [B, S, E] or [S, B, E];
// batch_first is the module's, not in the graph, so the longer of the two leading dimensions
// is taken as the sequence): the q and out projections 2 Nq E^2 each, k and v 2 Nk E^2 each,
// the attention 4 Nq Sk E. 0 without 3-d typed query and key.
double AttentionModuleFlops(const Graph& g, const Node& n) {
  std::optional<TensorType> q = ArgType(g, n, 0, "query");
  std::optional<TensorType> k = ArgType(g, n, 1, "key");
  if (!q || !k || q->shape.size() != 3 || k->shape.size() != 3) return 0;
  const double e_dim = q->shape[2];
  const double nq = Numel(*q) / std::max(e_dim, 1.0), nk = Numel(*k) / std::max(e_dim, 1.0);
  const double sk = std::max(k->shape[0], k->shape[1]);
  return 4 * nq * e_dim * e_dim + 4 * nk * e_dim * e_dim + 4 * nq * sk * e_dim;
}

Estimate EstimateCost(const Graph& g, const Node& n, const std::vector<TensorType>& out) {
  Estimate e;
  std::optional<Kind> kind;
  std::string base;
  if (n.op() == Op::kCallModule) {
    const std::string cls = ModuleClass(n);
    e.op_key = cls.empty() ? "call_module" : cls;
    base = BaseOpName(cls);
    auto it = ModuleKinds().find(base);
    if (!cls.empty() && it != ModuleKinds().end()) kind = it->second;
  } else {
    e.op_key = n.target();
    base = BaseOpName(n.target());
    auto it = OpKinds().find(base);
    if (it != OpKinds().end()) {
      kind = it->second;
    } else if (const OpSchema* schema = FindOpSchema(n.target());
               schema != nullptr && schema->pointwise) {
      kind = Kind::kElementwise;  // a declared pointwise op the lists above do not name
    }
  }
  if (IsView(n)) kind = Kind::kFree;

  Totals outs = Sum(out);
  Totals ins;
  // A free op moves nothing: its inputs are not read (a getitem of a k-tuple would read
  // the k shapes each time).
  const bool free = kind.has_value() && *kind == Kind::kFree;
  for (NodeId in : free ? NodeList() : n.inputs()) {
    Totals t = Sum(StatedTypes(g.node(in)));
    ins.bytes += t.bytes;
    ins.numel += t.numel;
    ins.max_numel = std::max(ins.max_numel, t.max_numel);
  }
  if (n.op() == Op::kCallModule) {
    for (int i : g.ParamsOwnedBy(n.target())) ins.bytes += g.params()[i].bytes;
  }
  // Python values (x.shape, its items, arithmetic on them) have no types on either side and
  // need none.
  e.untyped = out.empty() && !free && ins.numel > 0;
  e.bytes = ins.bytes + outs.bytes;
  e.formula = kind.has_value();
  const double elements = std::max(ins.max_numel, outs.max_numel);
  switch (kind.value_or(Kind::kMemory)) {
    case Kind::kFree:
      e.bytes = 0;
      break;
    case Kind::kMatmul:
      if (base == "grouped_mm_fallback_backward") {
        // The forward's MACs twice (input's and weight's gradients): grad_output x K.
        std::optional<TensorType> go = ArgType(g, n, 3, "grad_output");
        e.flops = go ? 4 * Numel(*go) * MatmulK(g, n, base) : 0;
      } else {
        e.flops = 2 * outs.numel * MatmulK(g, n, base);
      }
      break;
    case Kind::kConv: {
      std::optional<TensorType> w =
          n.op() == Op::kCallModule ? ModuleWeight(g, n) : ArgType(g, n, 1, "weight");
      // A transposed convolution's weight is [in, out / groups, ...]: its MACs follow the
      // input's elements.
      const bool transposed = n.op() == Op::kCallFunction && BoolArg(n, 6, "transposed");
      std::optional<TensorType> x = ArgType(g, n, 0, "input");
      const double per = transposed && x ? Numel(*x) : outs.numel;
      if (w) e.flops = 2 * per * ConvK(*w);
      break;
    }
    case Kind::kConvBackward:
      e.flops = ConvBackwardFlops(g, n);
      break;
    case Kind::kEmbedding: {
      // The indices and the rows read (as large as the result), and the result written.
      // aten.embedding / torch.embedding take (weight, indices); F.embedding and the module
      // (input, weight).
      const bool input_first =
          n.op() == Op::kCallModule || absl::StartsWith(n.target(), "torch.nn.functional.");
      std::optional<TensorType> idx =
          input_first ? ArgType(g, n, 0, "input") : ArgType(g, n, 1, "indices");
      e.bytes = 2 * outs.bytes + (idx ? Sum({*idx}).bytes : 0);
      if (base == "_embedding_bag" && idx && !out.empty() && out[0].shape.size() == 2) {
        // A row read per index (not per bag) and added into its bag: the indices, offsets,
        // the rows and the four results.
        const TensorType rows{{static_cast<int64_t>(Numel(*idx)), out[0].shape[1]}, out[0].dtype};
        std::optional<TensorType> offsets = ArgType(g, n, 2, "offsets");
        e.bytes = Sum({rows}).bytes + outs.bytes + Sum({*idx}).bytes +
                  (offsets ? Sum({*offsets}).bytes : 0);
        e.flops = Numel(rows);
      }
      break;
    }
    case Kind::kMemory:  // and the fallback: bytes alone
      break;
    case Kind::kAttention:
      e.flops = AttentionFlops(g, n, 0, BoolArg(n, CausalIndex(base, n), "is_causal"));
      break;
    case Kind::kAttentionModule:
      e.flops = AttentionModuleFlops(g, n);
      break;
    case Kind::kAttentionBackward:  // (grad_out, query, key, ...)
      e.flops = 2.5 * AttentionFlops(g, n, 1, BoolArg(n, CausalIndex(base, n), "is_causal"));
      break;
    default:
      e.flops = PerElementFlops(*kind) * elements;
      break;
  }
  auto first_defined = [&e](const std::vector<TensorType>& types) {
    for (const TensorType& t : types) {
      if (t.dtype != "none" && !t.dtype.empty()) {
        e.dtype = t.dtype;
        return;
      }
    }
  };
  first_defined(out);
  if (e.dtype.empty() && !n.inputs().empty()) first_defined(StatedTypes(g.node(n.inputs()[0])));
  if (e.dtype.empty()) e.dtype = "float32";
  return e;
}

// ATen ops whose result is always a view of their first input (never a copy), so a
// graph that leaves meta.aliases_input out gets it: the simulator then counts what the
// executor allocates (nothing). reshape and flatten copy when the layout allows no view,
// and split / unbind return tuples: they are left as stated.
bool AlwaysAView(absl::string_view base) {
  static const auto* views = new absl::flat_hash_set<std::string>{
      "view",       "_unsafe_view", "_reshape_alias", "expand",    "t",
      "transpose",  "permute",      "squeeze",        "unsqueeze", "alias",
      "as_strided", "select",       "slice",          "narrow",    "detach"};
  return views->contains(base);
}

}  // namespace

std::string BaseOpName(absl::string_view target) {
  absl::string_view t = target;
  absl::ConsumePrefix(&t, "torch.ops.");  // torch.ops.aten.mm.default
  std::vector<absl::string_view> parts = absl::StrSplit(t, '.');
  absl::string_view base;
  if ((parts.size() >= 2 && (parts[0] == "aten" || parts[0] == "prims")) ||
      (parts.size() == 3 && FindOpSchema(t) != nullptr)) {
    base = parts[1];  // aten.<op>.<overload>, or a declared custom op's ns.<op>.<overload>
  } else {
    base = parts.back();  // torch.nn.functional.relu, operator.add, a method name
  }
  // An in-place variant costs what its functional form does.
  if (base.size() > 1 && base.back() == '_' && base.front() != '_') base.remove_suffix(1);
  return std::string(base);
}

absl::StatusOr<AnnotateReport> AnnotateCosts(Graph& g, const AnnotateOptions& options) {
  const DeviceSpec& d = options.device;
  if (!(d.peak_flops_16bit > 0) || !(d.peak_flops_32bit > 0) || !(d.memory_bandwidth > 0)) {
    return absl::InvalidArgumentError("annotate: device peaks and bandwidth must be > 0");
  }
  const CostModel model(d);
  AnnotateReport r;
  // Computed first and applied only when every figure fits the format, so a failure leaves
  // `g` as it was.
  struct Update {
    NodeId id;
    std::optional<int64_t> tensor_size;
    std::optional<double> device_time;
    bool mark_view = false;
  };
  std::vector<Update> updates;
  int64_t tensor_total = 0;
  auto error = [](const Node& n, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("annotate: node \"", n.name(), "\": ", what));
  };
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    const std::vector<TensorType> out = StatedTypes(n);
    const NodeMeta& meta = n.meta();
    for (const TensorType& t : out) {
      if (!t.dtype.empty() && t.dtype != "none" && !KnownDtypeBytes(t.dtype).has_value()) {
        return error(n, absl::StrCat("unknown dtype \"", Printable(t.dtype),
                                     "\" (docs/format.md lists the dtypes)"));
      }
    }
    Update u{id, std::nullopt, std::nullopt};
    if (n.op() == Op::kCallFunction && !meta.has_aliases_input && out.size() <= 1 &&
        absl::StartsWith(n.target(), "aten.") && AlwaysAView(BaseOpName(n.target()))) {
      u.mark_view = true;
      ++r.views_marked;
    }
    if (!out.empty() && n.op() != Op::kOutput && (!meta.has_tensor_size || options.overwrite)) {
      absl::StatusOr<int64_t> size = StatedBytes(n);  // names the node
      if (!size.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("annotate: ", size.status().message()));
      }
      u.tensor_size = *size;
      ++r.tensor_sizes_filled;
    }
    const int64_t size = u.tensor_size.value_or(meta.has_tensor_size ? meta.tensor_size : 0);
    if (__builtin_add_overflow(tensor_total, size, &tensor_total)) {
      return error(n, "the sum of tensor_size over the graph would overflow 64 bits");
    }
    const bool call =
        n.op() == Op::kCallFunction || n.op() == Op::kCallMethod || n.op() == Op::kCallModule;
    if (call && meta.has_device_time && !options.overwrite) {
      ++r.kept;
      r.total_device_time += meta.device_time;
    } else if (call) {
      const Estimate e = EstimateCost(g, n, out);
      const double time = model.KernelTime(e.flops, e.bytes, e.dtype);
      if (!std::isfinite(time)) {
        return error(n, absl::StrCat("its estimated device time is not finite (", e.flops,
                                     " FLOPs, ", e.bytes, " bytes)"));
      }
      u.device_time = time;
      r.total_device_time += time;
      ++r.device_times_filled;
      r.untyped += e.untyped;
      if (e.formula) {
        ++r.by_formula;
      } else {
        ++r.fallback;
        ++r.fallback_ops[e.op_key];
      }
    }
    if (u.tensor_size.has_value() || u.device_time.has_value() || u.mark_view) {
      updates.push_back(u);
    }
  }
  if (!std::isfinite(r.total_device_time)) {
    return absl::InvalidArgumentError(
        "annotate: the sum of device_time over the graph would not be finite");
  }
  for (const Update& u : updates) {
    NodeMeta& meta = g.mutable_node(u.id).mutable_meta();
    if (u.tensor_size.has_value()) meta.set_tensor_size(*u.tensor_size);
    if (u.device_time.has_value()) meta.set_device_time(*u.device_time);
    if (u.mark_view) meta.set_aliases_input(true);
  }
  return r;
}

std::string FormatAnnotateReport(const AnnotateReport& r) {
  std::string out = absl::StrFormat(
      "device_time: %d nodes filled (%d by formula, %d by the memory-only fallback), %d kept\n"
      "tensor_size: %d nodes filled\n"
      "total device time: %.6g s\n",
      r.device_times_filled, r.by_formula, r.fallback, r.kept, r.tensor_sizes_filled,
      r.total_device_time);
  if (r.views_marked > 0) {
    absl::StrAppend(&out, "aliases_input: ", r.views_marked,
                    " view nodes marked (their results share their input's storage)\n");
  }
  if (r.untyped > 0) {
    absl::StrAppend(&out, "  ", r.untyped,
                    " call nodes have no stated shape: their bytes count inputs only\n");
  }
  if (!r.fallback_ops.empty()) {
    absl::StrAppend(&out, "fallback (no formula; docs/cost-model.md), by op:\n");
    for (const auto& [op, count] : r.fallback_ops) {
      absl::StrAppend(&out, "  ", op, ": ", count, "\n");
    }
  }
  return out;
}

}  // namespace overlap
