#include "graph/models.h"

#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "graph/status_macros.h"
#include "graph/text.h"

namespace overlap {
namespace {

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The dtype PyTorch keeps normalization statistics in (mean / rstd of layer and batch norm).
std::string AccDtype(const std::string& dtype) {
  return dtype == "bfloat16" || dtype == "float16" ? "float32" : dtype;
}

// A value in the graph under construction, with what the cost model needs.
struct T {
  NodeId id = kNoNode;
  Shape shape;
  std::string dtype;
  int64_t bytes() const { return Numel(shape) * DtypeBytes(dtype); }
};

// Emits nodes with metadata; owns the two parameter styles. Builder inputs are validated
// by the public functions, so a failure here is a programmer error and aborts.
class Builder {
 public:
  Builder(std::string name, const ModelOptions& o) : o_(o), cost_(o.device) {
    g_.set_name(std::move(name));
    g_.set_has_params_key(true);
  }

  bool lifted() const { return o_.style == ParamStyle::kLifted; }

  T Input(const std::string& name, Shape shape, std::string dtype) {
    NodeId id = Must(g_.AddNode(Op::kPlaceholder, g_.UniqueName(name), name));
    T t{id, std::move(shape), std::move(dtype)};
    SetMeta(t, 0);
    placeholders_.push_back(id);
    return t;
  }

  // A call_function node. `flops` and `moved` feed the roofline; `alias` marks views.
  T Call(const std::string& target, std::vector<Value> args, Shape shape, std::string dtype,
         double flops, double moved, bool alias = false, ValueDict kwargs = {},
         const std::string& name_hint = "") {
    NodeId id = Must(g_.AddNode(
        Op::kCallFunction, g_.UniqueName(name_hint.empty() ? NameFromTarget(target) : name_hint),
        target, std::move(args), std::move(kwargs)));
    T t{id, std::move(shape), std::move(dtype)};
    SetMeta(t, alias ? 0.0 : cost_.KernelTime(flops, moved, t.dtype));
    if (alias) g_.mutable_node(id).mutable_meta().set_aliases_input(true);
    return t;
  }

  // An elementwise op over `ins` producing `shape`: 1 FLOP per element per input.
  T Elementwise(const std::string& target, std::vector<Value> args, const std::vector<T>& ins,
                const Shape& shape, const std::string& dtype, ValueDict kwargs = {}) {
    double moved = Numel(shape) * DtypeBytes(dtype);
    for (const T& in : ins) moved += in.bytes();
    return Call(target, std::move(args), shape, dtype, Numel(shape) * ins.size(), moved, false,
                std::move(kwargs));
  }

  T View(const T& x, Shape shape, const std::string& target = "aten.view.default") {
    std::vector<Value> dims;
    for (int64_t d : shape) dims.push_back(Value::Int(d));
    return Call(target, {Value::Ref(x.id), Value::List(std::move(dims))}, std::move(shape), x.dtype,
                0, 0, true);
  }

  T Transpose(const T& x, int a, int b) {
    Shape s = x.shape;
    std::swap(s[a], s[b]);
    return Call("aten.transpose.int", {Value::Ref(x.id), Value::Int(a), Value::Int(b)}, s, x.dtype,
                0, 0, true);
  }

  T GetItem(const T& tuple, int index, Shape shape, const std::string& dtype) {
    NodeId id = Must(g_.AddNode(Op::kCallFunction, g_.UniqueName("getitem"), "operator.getitem",
                                {Value::Ref(tuple.id), Value::Int(index)}));
    T t{id, std::move(shape), dtype};
    SetMeta(t, 0);
    return t;
  }

  // A tuple-returning node: meta carries `shapes` and the total bytes.
  T Tuple(const std::string& target, std::vector<Value> args, const std::vector<Shape>& shapes,
          const std::vector<std::string>& dtypes, double flops, double moved, bool alias = false) {
    T t = Call(target, std::move(args), shapes[0], dtypes[0], flops, moved, alias);
    NodeMeta& m = g_.mutable_node(t.id).mutable_meta();
    int64_t total = 0;
    std::vector<std::string> parts, names;
    for (size_t i = 0; i < shapes.size(); ++i) {
      total += Numel(shapes[i]) * DtypeBytes(dtypes[i]);
      parts.push_back(absl::StrCat("[", absl::StrJoin(shapes[i], ","), "]"));
      names.push_back(absl::StrCat("\"", dtypes[i], "\""));
    }
    m.has_shape = false;
    m.shape.clear();
    m.has_dtype = false;
    m.dtype.clear();
    m.set_tensor_size(total);
    m.extra.emplace_back("shapes", absl::StrCat("[", absl::StrJoin(parts, ","), "]"));
    m.extra.emplace_back("dtypes", absl::StrCat("[", absl::StrJoin(names, ","), "]"));
    return t;
  }

  // Declares parameter `local` of module `module`; returns its placeholder (lifted style) or
  // an empty T (module style). `tied_to` names an earlier parameter sharing its storage.
  T Param(const std::string& module, const std::string& local, Shape shape,
          const std::string& dtype, const std::string& tied_to = "") {
    const std::string pname = absl::StrCat(module, ".", local);
    overlap::Param p;
    p.name = pname;
    p.shape = shape;
    p.has_shape = true;
    p.dtype = dtype;
    p.has_dtype = true;
    p.bytes = Numel(shape) * DtypeBytes(dtype);
    if (!tied_to.empty()) {
      p.storage = tied_to;
      p.has_storage = true;
    }
    if (!lifted()) {
      p.owner = module;
      Check(g_.AddParam(std::move(p)));
      return T{};
    }
    // Lifted: one placeholder per storage; a tied parameter reuses the placeholder.
    auto it = placeholder_of_storage_.find(tied_to.empty() ? pname : tied_to);
    T t;
    if (it != placeholder_of_storage_.end()) {
      t = it->second;
    } else {
      std::string ph = absl::StrCat("p_", absl::StrReplaceAll(pname, {{".", "_"}}));
      t = Input(ph, shape, dtype);
      g_.mutable_node(t.id).mutable_meta().set_param(pname);
      placeholder_of_storage_[pname] = t;
    }
    p.owner = g_.node(t.id).name();
    Check(g_.AddParam(std::move(p)));
    return t;
  }

  // y = x W^T + b over the last dimension.
  T Linear(const std::string& module, const T& x, int64_t in, int64_t out, bool bias,
           const std::string& tied_to = "") {
    T w = Param(module, "weight", {out, in}, x.dtype, tied_to);
    T b;
    if (bias) b = Param(module, "bias", {out}, x.dtype);
    Shape out_shape = x.shape;
    out_shape.back() = out;
    const int64_t rows = Numel(x.shape) / in;
    const double flops = 2.0 * rows * in * out;
    const double moved = (rows * in + in * out + rows * out) * DtypeBytes(x.dtype);
    if (!lifted()) return Module(module, {x}, out_shape, x.dtype, flops, moved);
    T x2 = x.shape.size() == 2 ? x : View(x, {rows, in});
    T wt = Call("aten.t.default", {Value::Ref(w.id)}, {in, out}, w.dtype, 0, 0, true);
    T y = bias
              ? Call("aten.addmm.default", {Value::Ref(b.id), Value::Ref(x2.id), Value::Ref(wt.id)},
                     {rows, out}, x.dtype, flops, moved)
              : Call("aten.mm.default", {Value::Ref(x2.id), Value::Ref(wt.id)}, {rows, out},
                     x.dtype, flops, moved);
    return x.shape.size() == 2 ? y : View(y, out_shape);
  }

  T LayerNorm(const std::string& module, const T& x, double eps) {
    const int64_t h = x.shape.back();
    T w = Param(module, "weight", {h}, x.dtype);
    T b = Param(module, "bias", {h}, x.dtype);
    const double flops = 8.0 * Numel(x.shape);
    const double moved = 2.0 * x.bytes();
    if (!lifted()) return Module(module, {x}, x.shape, x.dtype, flops, moved);
    Shape stats = x.shape;
    stats.back() = 1;
    T t = Tuple("aten.native_layer_norm.default",
                {Value::Ref(x.id), Value::List({Value::Int(h)}), Value::Ref(w.id), Value::Ref(b.id),
                 Value::Double(eps)},
                {x.shape, stats, stats}, {x.dtype, AccDtype(x.dtype), AccDtype(x.dtype)}, flops,
                moved);
    return GetItem(t, 0, x.shape, x.dtype);
  }

  T RmsNorm(const std::string& module, const T& x, double eps) {
    const int64_t h = x.shape.back();
    T w = Param(module, "weight", {h}, x.dtype);
    if (!lifted())
      return Module(module, {x}, x.shape, x.dtype, 4.0 * Numel(x.shape), 2.0 * x.bytes());
    Shape stats = x.shape;
    stats.back() = 1;
    T sq = Elementwise("aten.pow.Tensor_Scalar", {Value::Ref(x.id), Value::Int(2)}, {x}, x.shape,
                       x.dtype);
    T mean =
        Call("aten.mean.dim", {Value::Ref(sq.id), Value::List({Value::Int(-1)}), Value::Bool(true)},
             stats, x.dtype, Numel(x.shape), sq.bytes());
    T add = Elementwise("aten.add.Scalar", {Value::Ref(mean.id), Value::Double(eps)}, {mean}, stats,
                        x.dtype);
    T rs = Elementwise("aten.rsqrt.default", {Value::Ref(add.id)}, {add}, stats, x.dtype);
    T mul = Elementwise("aten.mul.Tensor", {Value::Ref(x.id), Value::Ref(rs.id)}, {x, rs}, x.shape,
                        x.dtype);
    return Elementwise("aten.mul.Tensor", {Value::Ref(mul.id), Value::Ref(w.id)}, {mul, w}, x.shape,
                       x.dtype);
  }

  T Embedding(const std::string& module, const T& ids, int64_t num, int64_t dim,
              const std::string& dtype) {
    T w = Param(module, "weight", {num, dim}, dtype);
    Shape out = ids.shape;
    out.push_back(dim);
    const double moved = ids.bytes() + 2.0 * Numel(out) * DtypeBytes(dtype);
    if (!lifted()) return Module(module, {ids}, out, dtype, 0, moved);
    return Call("aten.embedding.default", {Value::Ref(w.id), Value::Ref(ids.id)}, out, dtype, 0,
                moved);
  }

  T Conv2d(const std::string& module, const T& x, int64_t cout, int64_t k, int64_t stride,
           int64_t pad) {
    const int64_t n = x.shape[0], cin = x.shape[1], hi = x.shape[2], wi = x.shape[3];
    const int64_t ho = (hi + 2 * pad - k) / stride + 1, wo = (wi + 2 * pad - k) / stride + 1;
    T w = Param(module, "weight", {cout, cin, k, k}, x.dtype);
    Shape out = {n, cout, ho, wo};
    const double flops = 2.0 * n * cout * ho * wo * cin * k * k;
    const double moved =
        x.bytes() +
        Numel(w.shape.empty() ? Shape{cout, cin, k, k} : w.shape) * DtypeBytes(x.dtype) +
        Numel(out) * DtypeBytes(x.dtype);
    if (!lifted()) return Module(module, {x}, out, x.dtype, flops, moved);
    auto pair = [](int64_t v) { return Value::List({Value::Int(v), Value::Int(v)}); };
    return Call("aten.convolution.default",
                {Value::Ref(x.id), Value::Ref(w.id), Value(), pair(stride), pair(pad), pair(1),
                 Value::Bool(false), pair(0), Value::Int(1)},
                out, x.dtype, flops, moved);
  }

  T BatchNorm2d(const std::string& module, const T& x) {
    const int64_t c = x.shape[1];
    T w = Param(module, "weight", {c}, x.dtype);
    T b = Param(module, "bias", {c}, x.dtype);
    const double flops = 8.0 * Numel(x.shape), moved = 2.0 * x.bytes();
    if (!lifted()) return Module(module, {x}, x.shape, x.dtype, flops, moved);
    T t = Tuple("aten.native_batch_norm.default",
                {Value::Ref(x.id), Value::Ref(w.id), Value::Ref(b.id), Value(), Value(),
                 Value::Bool(true), Value::Double(0.1), Value::Double(1e-5)},
                {x.shape, {c}, {c}}, {x.dtype, AccDtype(x.dtype), AccDtype(x.dtype)}, flops, moved);
    return GetItem(t, 0, x.shape, x.dtype);
  }

  // A parameter-free module (ReLU, pooling): call_module in module style, else `target`.
  T Stateless(const std::string& module, const std::string& target, std::vector<Value> extra_args,
              const T& x, Shape out) {
    const double moved = x.bytes() + Numel(out) * DtypeBytes(x.dtype);
    if (!lifted()) return Module(module, {x}, out, x.dtype, Numel(x.shape), moved);
    std::vector<Value> args = {Value::Ref(x.id)};
    for (Value& v : extra_args) args.push_back(std::move(v));
    return Call(target, std::move(args), out, x.dtype, Numel(x.shape), moved);
  }

  // Marks a node whose result is its first input's storage (in-place ops).
  void MarkAlias(const T& t) { g_.mutable_node(t.id).mutable_meta().set_aliases_input(true); }

  // Ends the graph: the loss of `out` (LossKind, models.h) against a new targets
  // placeholder, or `out` itself. `fallback` is the model's default loss.
  void Finalize(const T& out, LossKind fallback) {
    LossKind kind = o_.loss == LossKind::kDefault ? fallback : o_.loss;
    if (kind == LossKind::kNone) return Output({out});
    if (kind == LossKind::kMse) {
      T targets = Input("targets", out.shape, out.dtype);
      T loss = Elementwise("aten.mse_loss.default",
                           {Value::Ref(out.id), Value::Ref(targets.id), Value::Int(1)},
                           {out, targets}, {}, out.dtype);
      return Output({loss});
    }
    // Cross-entropy over the last dimension: logits [..., C] as [N, C], labels [...] as [N].
    const int64_t classes = out.shape.back();
    const int64_t n = Numel(out.shape) / classes;
    Shape label_shape(out.shape.begin(), out.shape.end() - 1);
    T labels = Input("labels", label_shape, "int64");
    T flat = out.shape.size() == 2 ? out : View(out, {n, classes});
    T flat_labels = label_shape.size() == 1 ? labels : View(labels, {n});
    T logp = Elementwise("aten._log_softmax.default",
                         {Value::Ref(flat.id), Value::Int(1), Value::Bool(false)}, {flat},
                         flat.shape, out.dtype);
    T nll = Tuple(
        "aten.nll_loss_forward.default",
        {Value::Ref(logp.id), Value::Ref(flat_labels.id), Value(), Value::Int(1), Value::Int(-100)},
        {{}, {}}, {out.dtype, out.dtype}, 2.0 * n, logp.bytes() / classes + labels.bytes());
    Output({GetItem(nll, 0, {}, out.dtype)});
  }

  void Output(std::vector<T> outs) {
    std::vector<Value> items;
    for (const T& t : outs) items.push_back(Value::Ref(t.id));
    Value ret = items.size() == 1 ? std::move(items[0]) : Value::List(std::move(items));
    Must(g_.AddNode(Op::kOutput, "output", "output", {std::move(ret)}));
  }

  // Moves every placeholder to the head, in creation order (AOT graphs list parameters and
  // inputs first), and returns the graph.
  Graph Finish() {
    std::vector<NodeId> order = placeholders_;
    absl::flat_hash_set<NodeId> ph(placeholders_.begin(), placeholders_.end());
    for (NodeId id : g_.order()) {
      if (!ph.contains(id)) order.push_back(id);
    }
    Check(g_.SetOrder(order));
    return std::move(g_);
  }

 private:
  static NodeId Must(absl::StatusOr<NodeId> id) {
    if (!id.ok()) {
      std::fprintf(stderr, "model builder bug: %s\n", std::string(id.status().message()).c_str());
      std::abort();
    }
    return *id;
  }
  static void Check(const absl::Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "model builder bug: %s\n", std::string(s.message()).c_str());
      std::abort();
    }
  }

  static std::string NameFromTarget(const std::string& target) {
    // aten.addmm.default -> addmm ; aten.transpose.int -> transpose
    absl::string_view t = target;
    if (absl::StartsWith(t, "aten.")) t.remove_prefix(5);
    size_t dot = t.find('.');
    if (dot != absl::string_view::npos) t = t.substr(0, dot);
    std::string name(t);
    while (!name.empty() && name[0] == '_') name.erase(0, 1);
    return name.empty() ? "op" : name;
  }

  T Module(const std::string& module, const std::vector<T>& ins, Shape out,
           const std::string& dtype, double flops, double moved) {
    std::vector<Value> args;
    for (const T& in : ins) args.push_back(Value::Ref(in.id));
    NodeId id =
        Must(g_.AddNode(Op::kCallModule, g_.UniqueName(absl::StrReplaceAll(module, {{".", "_"}})),
                        module, std::move(args)));
    T t{id, std::move(out), dtype};
    SetMeta(t, cost_.KernelTime(flops, moved, dtype));
    return t;
  }

  void SetMeta(const T& t, double time) {
    NodeMeta& m = g_.mutable_node(t.id).mutable_meta();
    m.set_shape(t.shape);
    m.set_dtype(t.dtype);
    m.set_tensor_size(t.bytes());
    m.set_device_time(time);
  }

  ModelOptions o_;
  CostModel cost_;
  Graph g_;
  std::vector<NodeId> placeholders_;
  absl::flat_hash_map<std::string, T> placeholder_of_storage_;
};

absl::Status Positive(absl::string_view field, int64_t v) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0, got ", v));
  return absl::OkStatus();
}

// Products of sizes must stay far from overflow (element counts times 8 bytes, times FLOPs).
absl::Status Bounded(absl::string_view what, std::initializer_list<int64_t> factors) {
  __int128 p = 1;
  for (int64_t f : factors) {
    p *= f;
    if (p > (static_cast<__int128>(1) << 52)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is too large (overflow)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTransformer(const TransformerConfig& c) {
  for (auto [field, v] : {std::pair<const char*, int64_t>{"layers", c.layers},
                          {"hidden", c.hidden},
                          {"heads", c.heads},
                          {"kv_heads", c.kv_heads},
                          {"ffn", c.ffn},
                          {"vocab", c.vocab},
                          {"seq", c.seq},
                          {"batch", c.batch}}) {
    OVERLAP_RETURN_IF_ERROR(Positive(field, v));
  }
  if (c.hidden % c.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heads (", c.heads, ") must divide hidden (", c.hidden, ")"));
  }
  if (c.heads % c.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_heads (", c.kv_heads, ") must divide heads (", c.heads, ")"));
  }
  if (c.max_positions < 0) return absl::InvalidArgumentError("max_positions must be >= 0");
  if (c.max_positions > 0 && c.kv_heads != c.heads) {
    // GPT-2's fused c_attn splits into three equal parts: no grouped KV heads.
    return absl::InvalidArgumentError(
        absl::StrCat("kv_heads (", c.kv_heads, ") must equal heads (", c.heads,
                     ") with learned positions (max_positions > 0: GPT-2's fused QKV)"));
  }
  if (c.max_positions > 0 && c.seq > c.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq (", c.seq, ") exceeds max_positions (", c.max_positions, ")"));
  }
  if (c.experts < 0) return absl::InvalidArgumentError("experts must be >= 0");
  if (c.experts > 0 && (c.top_k < 1 || c.top_k > c.experts)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be in [1, experts=", c.experts, "], got ", c.top_k));
  }
  if (c.layers > 100000) return absl::InvalidArgumentError("layers is too large");
  OVERLAP_RETURN_IF_ERROR(Bounded("batch x seq x vocab", {c.batch, c.seq, c.vocab}));
  OVERLAP_RETURN_IF_ERROR(
      Bounded("batch x seq x ffn", {c.batch, c.seq, c.ffn, std::max<int64_t>(1, c.top_k)}));
  OVERLAP_RETURN_IF_ERROR(Bounded("batch x heads x seq x seq", {c.batch, c.heads, c.seq, c.seq}));
  OVERLAP_RETURN_IF_ERROR(
      Bounded("hidden x ffn", {c.hidden, c.ffn, std::max<int64_t>(1, c.experts), c.layers}));
  OVERLAP_RETURN_IF_ERROR(Bounded("vocab x hidden", {c.vocab, c.hidden}));
  return absl::OkStatus();
}

}  // namespace

TransformerConfig Gpt2Config(Preset preset) {
  TransformerConfig c;
  c.name = "gpt2";
  c.max_positions = 1024;
  c.tied_embeddings = true;
  if (preset == Preset::kTiny) {
    c.layers = 2;
    c.hidden = 32;
    c.heads = c.kv_heads = 4;
    c.ffn = 128;
    c.vocab = 97;
    c.seq = c.max_positions = 16;
    c.batch = 2;
  }
  return c;
}

namespace {

// The tiny sizes every tiny transformer shares.
void MakeTiny(TransformerConfig* c) {
  c->layers = 2;
  c->hidden = 32;
  c->heads = c->kv_heads = 4;
  c->ffn = 88;
  c->vocab = 101;
  c->seq = 16;
  c->batch = 2;
  c->dtype = "float32";
}

}  // namespace

TransformerConfig Llama7bConfig(Preset preset) {
  TransformerConfig c;
  c.name = "llama-7b";
  c.layers = 32;
  c.hidden = 4096;
  c.heads = c.kv_heads = 32;
  c.ffn = 11008;
  c.vocab = 32000;
  c.seq = 4096;
  c.batch = 1;
  c.layer_norm = false;
  c.swiglu = true;
  c.bias = false;
  c.dtype = "bfloat16";
  if (preset == Preset::kTiny) MakeTiny(&c);
  return c;
}

TransformerConfig Llama70bConfig(Preset preset) {
  TransformerConfig c = Llama7bConfig();
  c.name = "llama-70b";
  c.layers = 80;
  c.hidden = 8192;
  c.heads = 64;
  c.kv_heads = 8;
  c.ffn = 28672;
  if (preset == Preset::kTiny) {
    MakeTiny(&c);
    c.kv_heads = 2;  // grouped-query attention: two query heads per KV head
  }
  return c;
}

TransformerConfig MoeConfig(Preset preset) {
  TransformerConfig c = Llama7bConfig();
  c.name = "moe";
  c.layers = 8;
  c.hidden = 2048;
  c.heads = c.kv_heads = 16;
  c.ffn = 1408;
  c.experts = 16;
  c.top_k = 2;
  c.seq = 2048;
  c.batch = 4;
  if (preset == Preset::kTiny) {
    MakeTiny(&c);
    c.experts = 4;
    c.ffn = 24;
    c.seq = 8;
  }
  return c;
}

MlpConfig MlpPreset(Preset preset) {
  MlpConfig c;
  if (preset == Preset::kTiny) {
    c.widths = {8, 16, 16, 4};
    c.batch = 4;
  }
  return c;
}

MlpConfig ResizeMlp(const MlpConfig& c, int64_t layers, int64_t width) {
  MlpConfig out = c;
  const int64_t hidden = width ? width : c.widths[c.widths.size() / 2];
  const int64_t n = layers ? layers : static_cast<int64_t>(c.widths.size()) - 1;
  out.widths = {c.widths.front()};
  for (int64_t i = 1; i < n; ++i) out.widths.push_back(hidden);
  out.widths.push_back(c.widths.back());
  return out;
}

ResNetConfig ResNetPreset(Preset preset) {
  ResNetConfig c;
  if (preset == Preset::kTiny) {
    c.width = 8;
    c.image = 32;
    c.classes = 10;
    c.batch = 2;
  }
  return c;
}

absl::StatusOr<Preset> ParsePreset(absl::string_view name) {
  if (name == "default") return Preset::kDefault;
  if (name == "tiny") return Preset::kTiny;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset \"", Printable(name), "\" (known: default, tiny)"));
}

int64_t TransformerParamCount(const TransformerConfig& c) {
  const int64_t h = c.hidden, hd = c.hidden / c.heads, kv = c.kv_heads * hd;
  const int64_t b = c.bias ? 1 : 0;
  const int64_t norm = c.layer_norm ? 2 * h : h;
  int64_t attn = h * h + b * h + 2 * (h * kv + b * kv) + h * h + b * h;
  int64_t mlp_one =
      c.swiglu ? 3 * h * c.ffn + b * (2 * c.ffn + h) : 2 * h * c.ffn + b * (c.ffn + h);
  int64_t mlp = c.experts > 0 ? c.experts * mlp_one + h * c.experts : mlp_one;
  int64_t total = c.layers * (attn + mlp + 2 * norm) + norm + c.vocab * h;
  if (c.max_positions > 0) total += c.max_positions * h;
  if (!c.tied_embeddings) total += c.vocab * h;
  return total;
}

// A SwiGLU MLP under module prefix `p`: down(silu(gate(x)) * up(x)).
T SwiGlu(Builder& b, const TransformerConfig& c, const std::string& p, const T& x) {
  const std::string& dt = c.dtype;
  T gate = b.Linear(p + ".gate_proj", x, c.hidden, c.ffn, c.bias);
  T up = b.Linear(p + ".up_proj", x, c.hidden, c.ffn, c.bias);
  T act = b.Elementwise("aten.silu.default", {Value::Ref(gate.id)}, {gate}, gate.shape, dt);
  T mul = b.Elementwise("aten.mul.Tensor", {Value::Ref(act.id), Value::Ref(up.id)}, {act, up},
                        up.shape, dt);
  return b.Linear(p + ".down_proj", mul, c.ffn, c.hidden, c.bias);
}

// Layer `p`'s causal self-attention of the normed input `a`, through its output projection:
// GPT-2's fused c_attn split in three, or Llama's q / k / v projections with grouped-query
// heads repeated; flash attention; heads merged back.
T SelfAttention(Builder& b, const TransformerConfig& c, const std::string& p, const T& a) {
  const int64_t B = c.batch, S = c.seq, H = c.hidden, nh = c.heads, nkv = c.kv_heads;
  const int64_t hd = H / nh, kvd = nkv * hd;
  const std::string& dt = c.dtype;
  const bool gpt = c.max_positions > 0;
  auto heads_view = [&](const T& x, int64_t n) {  // [B,S,n*hd] -> [B,n,S,hd]
    return b.Transpose(b.View(x, {B, S, n, hd}), 1, 2);
  };
  T q, k, v;
  if (gpt) {
    T qkv = b.Linear(p + ".attn.c_attn", a, H, 3 * H, c.bias);
    Shape part = qkv.shape;
    part.back() = H;
    T split = b.Tuple("aten.split.Tensor", {Value::Ref(qkv.id), Value::Int(H), Value::Int(2)},
                      {part, part, part}, {dt, dt, dt}, 0, 0, true);
    q = b.GetItem(split, 0, part, dt);
    k = b.GetItem(split, 1, part, dt);
    v = b.GetItem(split, 2, part, dt);
  } else {
    q = b.Linear(p + ".self_attn.q_proj", a, H, H, c.bias);
    k = b.Linear(p + ".self_attn.k_proj", a, H, kvd, c.bias);
    v = b.Linear(p + ".self_attn.v_proj", a, H, kvd, c.bias);
  }
  q = heads_view(q, nh);
  k = heads_view(k, nkv);
  v = heads_view(v, nkv);
  if (nkv < nh) {  // grouped-query attention: repeat each KV head (HF's repeat_kv)
    const int64_t rep = nh / nkv;
    for (T* t : {&k, &v}) {
      T u = b.Call("aten.unsqueeze.default", {Value::Ref(t->id), Value::Int(2)}, {B, nkv, 1, S, hd},
                   dt, 0, 0, true);
      Shape wide = {B, nkv, rep, S, hd};
      std::vector<Value> dims;
      for (int64_t d : wide) dims.push_back(Value::Int(d));
      T e = b.Call("aten.expand.default", {Value::Ref(u.id), Value::List(std::move(dims))}, wide,
                   dt, 0, 0, true);
      T r = b.Call("aten.clone.default", {Value::Ref(e.id)}, wide, dt, 0,
                   2.0 * Numel(wide) * DtypeBytes(dt), false,
                   {{"memory_format", Value::String("torch.contiguous_format")}});
      *t = b.View(r, {B, nh, S, hd});
    }
  }
  const double attn_flops = 4.0 * B * nh * S * S * hd * 0.5;  // causal: half the scores
  const double attn_bytes = 2.0 * (q.bytes() + k.bytes() + v.bytes() + q.bytes());
  Shape lse = {B, nh, S};
  T sdpa = b.Tuple(
      "aten._scaled_dot_product_flash_attention.default",
      {Value::Ref(q.id), Value::Ref(k.id), Value::Ref(v.id), Value::Double(0.0), Value::Bool(true)},
      {q.shape, lse}, {dt, "float32"}, attn_flops, attn_bytes);
  T o_heads = b.GetItem(sdpa, 0, q.shape, dt);
  T o_t = b.Transpose(o_heads, 1, 2);
  T o_c = b.Call("aten.clone.default", {Value::Ref(o_t.id)}, o_t.shape, dt, 0, 2.0 * o_t.bytes(),
                 false, {{"memory_format", Value::String("torch.contiguous_format")}});
  T o = b.View(o_c, {B, S, H});
  T proj = b.Linear(p + (gpt ? ".attn.c_proj" : ".self_attn.o_proj"), o, H, H, c.bias);
  return proj;
}

// Layer `p`'s mixture of experts on the normed input `m`: softmax gate, top-k routing,
// balanced slots per expert, each expert a SwiGLU, results weighted and summed back.
T MoeMlp(Builder& b, const TransformerConfig& c, const std::string& p, const T& m) {
  const int64_t B = c.batch, S = c.seq, H = c.hidden;
  const std::string& dt = c.dtype;
  const int64_t E = c.experts, K = c.top_k, tokens = B * S;
  const int64_t per_expert = tokens * K / E;  // balanced routing
  T logits = b.Linear(p + ".mlp.gate", m, H, E, false);
  T probs = b.Elementwise("aten._softmax.default",
                          {Value::Ref(logits.id), Value::Int(-1), Value::Bool(false)}, {logits},
                          logits.shape, dt);
  Shape topk_shape = {B, S, K};
  T topk = b.Tuple("aten.topk.default", {Value::Ref(probs.id), Value::Int(K)},
                   {topk_shape, topk_shape}, {dt, "int64"}, tokens * E, probs.bytes());
  T weights = b.GetItem(topk, 0, topk_shape, dt);
  T experts = b.GetItem(topk, 1, topk_shape, "int64");
  T flat_idx = b.View(experts, {tokens * K});
  T order = b.Call("aten.argsort.default", {Value::Ref(flat_idx.id)}, {tokens * K}, "int64",
                   tokens * K * 20.0, 2.0 * flat_idx.bytes());
  T flat_w = b.View(weights, {tokens * K, 1});
  T x = b.View(m, {tokens, H});
  T acc = b.Call("aten.zeros_like.default", {Value::Ref(x.id)}, x.shape, dt, 0, x.bytes());
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = absl::StrCat(p, ".mlp.experts.", e);
    T idx = b.Call("aten.slice.Tensor",
                   {Value::Ref(order.id), Value::Int(0), Value::Int(e * per_expert),
                    Value::Int((e + 1) * per_expert)},
                   {per_expert}, "int64", 0, 0, true);
    // Sorted slots index the routing weights; their tokens are slot // K.
    T tok =
        b.Call("aten.div.Tensor_mode", {Value::Ref(idx.id), Value::Int(K)}, {per_expert}, "int64",
               per_expert, 2.0 * idx.bytes(), false, {{"rounding_mode", Value::String("floor")}});
    T xe =
        b.Call("aten.index_select.default", {Value::Ref(x.id), Value::Int(0), Value::Ref(tok.id)},
               {per_expert, H}, dt, 0, 2.0 * per_expert * H * DtypeBytes(dt));
    T we = b.Call("aten.index_select.default",
                  {Value::Ref(flat_w.id), Value::Int(0), Value::Ref(idx.id)}, {per_expert, 1}, dt,
                  0, 2.0 * per_expert * DtypeBytes(dt));
    T y = SwiGlu(b, c, ep, xe);
    T yw = b.Elementwise("aten.mul.Tensor", {Value::Ref(y.id), Value::Ref(we.id)}, {y, we}, y.shape,
                         dt);
    // torch.fx traces the in-place index_add_; AOT graphs are functional (index_add).
    acc = b.Call(b.lifted() ? "aten.index_add.default" : "aten.index_add_.default",
                 {Value::Ref(acc.id), Value::Int(0), Value::Ref(tok.id), Value::Ref(yw.id)},
                 acc.shape, dt, per_expert * H, 3.0 * yw.bytes(), false, {}, "index_add");
    if (!b.lifted()) b.MarkAlias(acc);  // in place: the result is the accumulator itself
  }
  return b.View(acc, {B, S, H});
}

absl::StatusOr<Graph> BuildTransformer(const TransformerConfig& c, const ModelOptions& o) {
  OVERLAP_RETURN_IF_ERROR(ValidateTransformer(c));
  Builder b(c.name, o);
  const int64_t B = c.batch, S = c.seq, H = c.hidden;
  const std::string& dt = c.dtype;
  const bool gpt = c.max_positions > 0;
  const std::string root = gpt ? "transformer" : "model";
  T ids = b.Input("input_ids", {B, S}, "int64");
  T h = b.Embedding(gpt ? "transformer.wte" : "model.embed_tokens", ids, c.vocab, H, dt);
  if (gpt) {
    T pos = b.Call("aten.arange.default", {Value::Int(S)}, {S}, "int64", 0, S * 8.0, false,
                   {{"device", Value::String("cuda")}}, "position_ids");
    T pe = b.Embedding("transformer.wpe", pos, c.max_positions, H, dt);
    h = b.Elementwise("aten.add.Tensor", {Value::Ref(h.id), Value::Ref(pe.id)}, {h, pe}, h.shape,
                      dt);
  }
  auto norm = [&](const std::string& module, const T& x) {
    return c.layer_norm ? b.LayerNorm(module, x, 1e-5) : b.RmsNorm(module, x, 1e-6);
  };
  auto add = [&](const T& x, const T& y) {
    return b.Elementwise("aten.add.Tensor", {Value::Ref(x.id), Value::Ref(y.id)}, {x, y}, x.shape,
                         dt);
  };
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p =
        gpt ? absl::StrCat("transformer.h.", l) : absl::StrCat("model.layers.", l);
    T a = norm(p + (gpt ? ".ln_1" : ".input_layernorm"), h);
    T proj = SelfAttention(b, c, p, a);
    h = add(h, proj);
    T m = norm(p + (gpt ? ".ln_2" : ".post_attention_layernorm"), h);
    T mlp;
    if (c.experts > 0) {
      mlp = MoeMlp(b, c, p, m);
    } else if (c.swiglu) {
      mlp = SwiGlu(b, c, p + ".mlp", m);
    } else {
      T fc = b.Linear(p + ".mlp.c_fc", m, H, c.ffn, c.bias);
      T act = b.Elementwise("aten.gelu.default", {Value::Ref(fc.id)}, {fc}, fc.shape, dt,
                            {{"approximate", Value::String("tanh")}});
      mlp = b.Linear(p + ".mlp.c_proj", act, c.ffn, H, c.bias);
    }
    h = add(h, mlp);
  }
  h = norm(gpt ? "transformer.ln_f" : "model.norm", h);
  T logits =
      b.Linear("lm_head", h, H, c.vocab, false, c.tied_embeddings ? "transformer.wte.weight" : "");
  b.Finalize(logits, LossKind::kCrossEntropy);
  return b.Finish();
}

absl::StatusOr<Graph> BuildMlp(const MlpConfig& c, const ModelOptions& o) {
  if (c.widths.size() < 2) return absl::InvalidArgumentError("an MLP needs at least two widths");
  OVERLAP_RETURN_IF_ERROR(Positive("batch", c.batch));
  for (int64_t w : c.widths) {
    OVERLAP_RETURN_IF_ERROR(Positive("width", w));
    OVERLAP_RETURN_IF_ERROR(Bounded("batch x width", {c.batch, w, w}));
  }
  Builder b("mlp", o);
  T x = b.Input("x", {c.batch, c.widths[0]}, c.dtype);
  int64_t index = 0;
  for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
    x = b.Linear(absl::StrCat("net.", index++), x, c.widths[i], c.widths[i + 1], true);
    if (i + 2 < c.widths.size()) {
      x = b.Stateless(absl::StrCat("net.", index++), "aten.relu.default", {}, x, x.shape);
    }
  }
  b.Finalize(x, LossKind::kMse);
  return b.Finish();
}

absl::StatusOr<Graph> BuildResNet(const ResNetConfig& c, const ModelOptions& o) {
  if (c.blocks.size() != 4) return absl::InvalidArgumentError("a ResNet has four stages");
  for (int64_t n : c.blocks) OVERLAP_RETURN_IF_ERROR(Positive("blocks", n));
  OVERLAP_RETURN_IF_ERROR(Positive("batch", c.batch));
  OVERLAP_RETURN_IF_ERROR(Positive("classes", c.classes));
  OVERLAP_RETURN_IF_ERROR(Positive("width", c.width));
  if (c.image < 32) return absl::InvalidArgumentError("image must be >= 32");
  OVERLAP_RETURN_IF_ERROR(Bounded("batch x image^2", {c.batch, c.image, c.image, 64}));
  Builder b("resnet18", o);
  const std::string& dt = c.dtype;
  T x = b.Input("x", {c.batch, 3, c.image, c.image}, dt);
  x = b.Conv2d("conv1", x, c.width, 7, 2, 3);
  x = b.BatchNorm2d("bn1", x);
  x = b.Stateless("relu", "aten.relu.default", {}, x, x.shape);
  {
    Shape out = {x.shape[0], x.shape[1], (x.shape[2] - 1) / 2 + 1, (x.shape[3] - 1) / 2 + 1};
    auto pair = [](int64_t v) { return Value::List({Value::Int(v), Value::Int(v)}); };
    if (b.lifted()) {
      T t = b.Tuple("aten.max_pool2d_with_indices.default",
                    {Value::Ref(x.id), pair(3), pair(2), pair(1)}, {out, out}, {dt, "int64"},
                    9.0 * Numel(out), x.bytes() + Numel(out) * DtypeBytes(dt));
      x = b.GetItem(t, 0, out, dt);
    } else {
      x = b.Stateless("maxpool", "", {}, x, out);
    }
  }
  int64_t channels = c.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = c.width << stage;
    for (int64_t blk = 0; blk < c.blocks[stage]; ++blk) {
      const std::string p = absl::StrCat("layer", stage + 1, ".", blk);
      const int64_t stride = (stage > 0 && blk == 0) ? 2 : 1;
      T identity = x;
      T y = b.Conv2d(p + ".conv1", x, width, 3, stride, 1);
      y = b.BatchNorm2d(p + ".bn1", y);
      y = b.Stateless(p + ".relu", "aten.relu.default", {}, y, y.shape);
      y = b.Conv2d(p + ".conv2", y, width, 3, 1, 1);
      y = b.BatchNorm2d(p + ".bn2", y);
      if (stride != 1 || channels != width) {
        identity = b.Conv2d(p + ".downsample.0", x, width, 1, stride, 0);
        identity = b.BatchNorm2d(p + ".downsample.1", identity);
      }
      T sum = b.Elementwise("aten.add.Tensor", {Value::Ref(y.id), Value::Ref(identity.id)},
                            {y, identity}, y.shape, dt);
      // torchvision reuses the block's ReLU module: the same module is called twice.
      x = b.Stateless(p + ".relu", "aten.relu.default", {}, sum, sum.shape);
      channels = width;
    }
  }
  Shape pooled = {x.shape[0], x.shape[1], 1, 1};
  x = b.lifted() ? b.Call("aten.mean.dim",
                          {Value::Ref(x.id), Value::List({Value::Int(-1), Value::Int(-2)}),
                           Value::Bool(true)},
                          pooled, dt, Numel(x.shape), x.bytes())
                 : b.Stateless("avgpool", "", {}, x, pooled);
  x = b.lifted() ? b.View(x, {pooled[0], pooled[1]})
                 : b.Call("aten.flatten.using_ints", {Value::Ref(x.id), Value::Int(1)},
                          {pooled[0], pooled[1]}, dt, 0, 0, true, {}, "flatten");
  x = b.Linear("fc", x, channels, c.classes, true);
  b.Finalize(x, LossKind::kCrossEntropy);
  return b.Finish();
}

absl::StatusOr<LossKind> ParseLossKind(absl::string_view name) {
  if (name == "cross_entropy") return LossKind::kCrossEntropy;
  if (name == "mse") return LossKind::kMse;
  if (name == "none") return LossKind::kNone;
  if (name == "default") return LossKind::kDefault;
  return absl::InvalidArgumentError(absl::StrCat("unknown loss \"", Printable(name),
                                                 "\" (known: cross_entropy, mse, none, default)"));
}

absl::string_view LossKindName(LossKind kind) {
  switch (kind) {
    case LossKind::kCrossEntropy:
      return "cross_entropy";
    case LossKind::kMse:
      return "mse";
    case LossKind::kNone:
      return "none";
    case LossKind::kDefault:
      break;
  }
  return "default";
}

const std::vector<std::string>& ModelNames() {
  static const auto* names =
      new std::vector<std::string>{"mlp", "gpt2", "llama-7b", "llama-70b", "resnet18", "moe"};
  return *names;
}

absl::StatusOr<Graph> BuildModel(absl::string_view name, const ModelOptions& o, Preset preset) {
  if (o.batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch must be >= 0, got ", o.batch));
  }
  if (o.layers < 0 || o.width < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers and width must be >= 0, got ", o.layers, " and ", o.width));
  }
  if (o.width > 0 && name != "mlp") {
    return absl::InvalidArgumentError(absl::StrCat("width applies to mlp only, not ", name));
  }
  if (o.layers > 0 && name == "resnet18") {
    return absl::InvalidArgumentError("layers applies to the transformers and mlp, not resnet18");
  }
  auto sized = [&](auto config) {
    if (o.batch > 0) config.batch = o.batch;
    return config;
  };
  auto deep = [&](TransformerConfig c) {
    c = sized(c);
    if (o.layers > 0) c.layers = o.layers;
    return c;
  };
  if (name == "mlp") {
    MlpConfig c = sized(MlpPreset(preset));
    if (o.layers > 0 || o.width > 0) c = ResizeMlp(c, o.layers, o.width);
    return BuildMlp(c, o);
  }
  if (name == "gpt2") return BuildTransformer(deep(Gpt2Config(preset)), o);
  if (name == "llama-7b") return BuildTransformer(deep(Llama7bConfig(preset)), o);
  if (name == "llama-70b") return BuildTransformer(deep(Llama70bConfig(preset)), o);
  if (name == "resnet18") return BuildResNet(sized(ResNetPreset(preset)), o);
  if (name == "moe") return BuildTransformer(deep(MoeConfig(preset)), o);
  return absl::NotFoundError(absl::StrCat("unknown model \"", Printable(name), "\" (known: ",
                                          absl::StrJoin(ModelNames(), ", "), ", random)"));
}

}  // namespace overlap
