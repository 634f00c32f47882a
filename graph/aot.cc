#include "graph/aot.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/aot_interface.h"
#include "graph/op_schema.h"
#include "graph/shape_rules.h"
#include "graph/status_macros.h"
#include "graph/text.h"
#include "graph/value_bytes.h"

namespace overlap {
namespace {

using Types = std::vector<TensorType>;

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t Bytes(const TensorType& t) { return Numel(t.shape) * DtypeBytes(t.dtype); }

Value Ints(absl::Span<const int64_t> v) {
  std::vector<Value> items;
  for (int64_t x : v) items.push_back(Value::Int(x));
  return Value::List(std::move(items));
}

// Targets whose results carry no gradient (integer results, constants).
const absl::flat_hash_set<std::string>& NonDifferentiable() {
  static const auto* s = new absl::flat_hash_set<std::string>{
      "aten.arange.default",      "aten.argsort.default",    "aten.div.Tensor_mode",
      "aten.zeros_like.default",  "aten.new_zeros.default",  "aten.empty_like.default",
      "aten.fill.Scalar",         "aten.zeros.default",      "aten.eq.Scalar",
      "aten.ne.Scalar",           "aten.zero.default",       "aten.new_empty.default",
      "aten.fill.Tensor",         "aten.new_ones.default",   "aten.new_full.default",
      "aten.bitwise_and.Tensor",  "aten.bitwise_or.Tensor",  "aten.bitwise_xor.Tensor",
      "aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default"};
  return *s;
}

// Every target with a formula (AotBuilder::FormulaTable, below; docs/ops.md lists each with its
// backward ops), and operator.getitem.
const absl::flat_hash_set<std::string>& Formulas();

// How a backward node's device_time is estimated.
struct Cost {
  enum class Kind { kAlias, kMemory, kMatmul, kScaled };
  Kind kind = Kind::kMemory;
  double factor = 1;  // kScaled: times the forward node's device_time
  static Cost Alias() { return {Kind::kAlias}; }
  static Cost Memory() { return {Kind::kMemory}; }
  static Cost Matmul() { return {Kind::kMatmul}; }
  static Cost Scaled(double f) { return {Kind::kScaled, f}; }
};

class AotBuilder {
 public:
  AotBuilder(const Graph& f, const AotOptions& o) : f_(f), fwd_(f), cost_(o.device) {}

  absl::StatusOr<AotPair> Run() {
    OVERLAP_RETURN_IF_ERROR(CheckLifted());
    for (NodeId id : f_.order()) taken_.insert(f_.node(id).name());
    taken_.insert("output");  // the backward's output node is "output" too
    b_.set_has_params_key(true);
    if (f_.has_name()) b_.set_name(absl::StrCat(f_.name(), "_backward"));
    OVERLAP_RETURN_IF_ERROR(MarkNeedsGrad());
    OVERLAP_RETURN_IF_ERROR(SeedTangents());
    for (NodeId id = f_.last(); id != kNoNode; id = f_.prev(id)) {
      const Node& n = f_.node(id);
      if (n.op() != Op::kCallFunction || !needs_[id]) continue;
      if (!HasGrad(id)) continue;
      OVERLAP_RETURN_IF_ERROR(Differentiate(id));
    }
    return Finish();
  }

 private:
  // ---- the forward ---------------------------------------------------------------------

  absl::Status Error(const Node& n, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("node \"", n.name(), "\" (", Printable(n.target()), "): ", what));
  }

  absl::Status CheckLifted() const {
    if (std::optional<ModuleOwnedParam> m = FirstModuleOwnedParam(f_)) {
      const Node& n = f_.node(m->node);
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter \"", f_.params()[m->param].name, "\" is owned by ", OpName(n.op()), " node \"",
          n.name(), "\": AOT pairs are built from lifted forward graphs (--lifted)"));
    }
    if (f_.last() == kNoNode || f_.node(f_.last()).op() != Op::kOutput) {
      return absl::InvalidArgumentError("the forward graph has no output node");
    }
    return absl::OkStatus();
  }

  bool IsTrainableParam(const Node& n) const {
    if (n.op() != Op::kPlaceholder || !n.meta().has_param) return false;
    const int i = f_.FindParam(n.meta().param);
    return i >= 0 && f_.params()[i].requires_grad;
  }

  absl::Status MarkNeedsGrad() {
    needs_.assign(f_.id_bound(), 0);
    for (NodeId id : f_.order()) {
      const Node& n = f_.node(id);
      if (n.op() == Op::kPlaceholder) {
        needs_[id] = IsTrainableParam(n);
        continue;
      }
      if (n.op() != Op::kCallFunction || NonDifferentiable().contains(n.target())) continue;
      bool any = false;
      for (NodeId in : n.inputs()) any |= needs_[in] != 0;
      if (!any) continue;
      bool floating = false;
      for (const TensorType& t : StatedTypes(n)) floating |= IsFloatingDtype(t.dtype);
      needs_[id] = floating;
    }
    return absl::OkStatus();
  }

  static bool IsFloatingDtype(absl::string_view d) {
    return d == "float32" || d == "float64" || d == "float16" || d == "bfloat16";
  }

  absl::StatusOr<TensorType> TypeOf(NodeId fwd_id) const {
    Types t = StatedTypes(fwd_.node(fwd_id));
    if (t.size() != 1) {
      return Error(fwd_.node(fwd_id), "has no single stated shape and dtype");
    }
    return t[0];
  }

  // The forward's operator.getitem of element `i` of tuple node `t`, made when missing.
  absl::StatusOr<NodeId> Elem(NodeId t, int i) {
    for (NodeId u : fwd_.node(t).users()) {
      const Node& un = fwd_.node(u);
      if (un.target() == "operator.getitem" && un.args().size() == 2 && un.args()[0].is_ref() &&
          un.args()[0].as_ref() == t && un.args()[1].kind() == Value::Kind::kInt &&
          un.args()[1].as_int() == i) {
        return u;
      }
    }
    Types types = StatedTypes(fwd_.node(t));
    if (i < 0 || i >= static_cast<int>(types.size())) {
      return Error(fwd_.node(t), absl::StrCat("has no element ", i, " to save"));
    }
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, fwd_.AddNode(Op::kCallFunction, Fresh("getitem"), "operator.getitem",
                               {Value::Ref(t), Value::Int(i)}, {}, InsertPoint::After(t)));
    SetTypes(&fwd_, g, {types[i]});
    fwd_.mutable_node(g).mutable_meta().set_device_time(0);
    return g;
  }

  // ---- names and emission --------------------------------------------------------------

  // A name free in both graphs (backward names never shadow forward values).
  std::string Fresh(const std::string& base) {
    int64_t& k = next_[base];
    while (true) {
      std::string name = k == 0 ? base : absl::StrCat(base, "_", k);
      ++k;
      if (taken_.insert(name).second) return name;
    }
  }

  static std::string BaseName(absl::string_view target) {
    absl::string_view t = target;
    if (absl::StartsWith(t, "aten.")) t.remove_prefix(5);
    if (absl::StartsWith(t, "operator.")) t.remove_prefix(9);
    t = t.substr(0, t.find('.'));
    std::string s(t);
    while (!s.empty() && s[0] == '_') s.erase(0, 1);
    return s.empty() ? "op" : s;
  }

  static void SetTypes(Graph* g, NodeId id, const Types& types) {
    NodeMeta& m = g->mutable_node(id).mutable_meta();
    int64_t total = 0;
    for (const TensorType& t : types) total += Bytes(t);
    m.set_tensor_size(total);
    if (types.size() == 1) {
      m.set_shape(types[0].shape);
      m.set_dtype(types[0].dtype);
      return;
    }
    std::vector<std::string> shapes, dtypes;
    for (const TensorType& t : types) {
      shapes.push_back(absl::StrCat("[", absl::StrJoin(t.shape, ","), "]"));
      dtypes.push_back(absl::StrCat("\"", t.dtype, "\""));
    }
    m.extra.emplace_back("shapes", absl::StrCat("[", absl::StrJoin(shapes, ","), "]"));
    m.extra.emplace_back("dtypes", absl::StrCat("[", absl::StrJoin(dtypes, ","), "]"));
  }

  // A backward node; its types come from the shape rules, its time from `cost` (`fwd` is
  // the forward node a kScaled cost refers to).
  absl::StatusOr<NodeId> Emit(const std::string& target, std::vector<Value> args,
                              ValueDict kwargs = {}, Cost cost = Cost::Memory(),
                              NodeId fwd = kNoNode) {
    OVERLAP_ASSIGN_OR_RETURN(NodeId id, b_.AddNode(Op::kCallFunction, Fresh(BaseName(target)),
                                                   target, std::move(args), std::move(kwargs)));
    absl::StatusOr<Types> types = InferTypes(b_, b_.node(id));
    if (!types.ok()) {
      return absl::InternalError(absl::StrCat("backward formula: ", types.status().message()));
    }
    SetTypes(&b_, id, *types);
    NodeMeta& m = b_.mutable_node(id).mutable_meta();
    // A fused backward's output mask (its last argument): a gradient it does not ask for is
    // None and takes no memory.
    const std::vector<Value>& a = b_.node(id).args();
    if (types->size() == 3 && !a.empty() && a.back().kind() == Value::Kind::kList &&
        a.back().items().size() == 3) {
      int64_t produced = 0;
      for (size_t i = 0; i < 3; ++i) {
        const Value& bit = a.back().items()[i];
        if (bit.kind() != Value::Kind::kBool || bit.as_bool()) produced += Bytes((*types)[i]);
      }
      m.set_tensor_size(produced);
    }
    const std::string dtype = (*types)[0].dtype;
    double time = 0;
    switch (cost.kind) {
      case Cost::Kind::kAlias:
        m.set_aliases_input(true);
        break;
      case Cost::Kind::kMemory: {
        double moved = m.tensor_size, elements = 0;
        for (NodeId in : b_.node(id).inputs()) {
          for (const TensorType& t : StatedTypes(b_.node(in))) {
            moved += Bytes(t);
            elements += Numel(t.shape);
          }
        }
        time = cost_.KernelTime(elements, moved, dtype);
        break;
      }
      case Cost::Kind::kMatmul: {
        const Node& n = b_.node(id);
        const TensorType a = StatedTypes(b_.node(n.inputs()[0]))[0];
        const TensorType& out = (*types)[0];
        const double flops = 2.0 * Numel(out.shape) * (a.shape.empty() ? 1 : a.shape.back());
        double moved = m.tensor_size;
        for (NodeId in : n.inputs()) moved += Bytes(StatedTypes(b_.node(in))[0]);
        time = cost_.KernelTime(flops, moved, dtype);
        break;
      }
      case Cost::Kind::kScaled: {
        const NodeMeta& fm = f_.node(fwd).meta();
        time = cost.factor * (fm.has_device_time ? fm.device_time : 0);
        break;
      }
    }
    m.set_device_time(time);
    return id;
  }

  absl::StatusOr<NodeId> Item(NodeId tuple, int i) {
    return Emit("operator.getitem", {Value::Ref(tuple), Value::Int(i)}, {}, Cost::Alias());
  }

  // What the backward reads in place of forward value `y`: the primal of a parameter, a
  // recomputed view of one, or a saved tensor.
  absl::StatusOr<NodeId> Use(NodeId y) {
    auto it = in_b_.find(y);
    if (it != in_b_.end()) return it->second;
    const Node& n = fwd_.node(y);
    NodeId out;
    if (n.op() == Op::kPlaceholder && n.meta().has_param) {
      OVERLAP_ASSIGN_OR_RETURN(out, b_.AddNode(Op::kPlaceholder, n.name(), n.target()));
      NodeMeta& m = b_.mutable_node(out).mutable_meta();
      m = n.meta();
      m.extra.clear();
      primals_.push_back(y);
    } else if (IsView(n) && RootsAtParam(y)) {
      std::vector<Value> args = n.args();
      for (Value& a : args) {
        if (!a.is_ref()) continue;
        OVERLAP_ASSIGN_OR_RETURN(NodeId r, Use(a.as_ref()));
        a = Value::Ref(r);
      }
      OVERLAP_ASSIGN_OR_RETURN(out, Emit(n.target(), std::move(args), n.kwargs(), Cost::Alias()));
    } else {
      if (StatedTypes(n).size() != 1) return Error(n, "a tuple cannot be saved whole");
      OVERLAP_ASSIGN_OR_RETURN(out, b_.AddNode(Op::kPlaceholder, n.name(), n.name()));
      SetTypes(&b_, out, StatedTypes(n));
      b_.mutable_node(out).mutable_meta().set_device_time(0);
      saved_.push_back(y);
    }
    in_b_[y] = out;
    return out;
  }

  // Use(y) as an argument, or None when there is no such input (an optional tensor).
  absl::StatusOr<Value> OptionalUse(NodeId y) {
    if (y == kNoNode) return Value();
    OVERLAP_ASSIGN_OR_RETURN(NodeId b, Use(y));
    return Value::Ref(b);
  }

  bool RootsAtParam(NodeId y) const {
    while (true) {
      const Node& n = fwd_.node(y);
      if (n.op() == Op::kPlaceholder) return n.meta().has_param;
      if (!IsView(n) || n.inputs().empty()) return false;
      y = n.inputs()[0];
    }
  }

  // ---- gradients -----------------------------------------------------------------------

  bool HasGrad(NodeId id) const { return grad_.contains(id) || tuples_with_grad_.contains(id); }

  // Adds contribution `g` (a backward node) to forward value x's gradient, checking that it
  // has x's shape and dtype: the independent check of every formula.
  absl::Status Accumulate(NodeId x, NodeId g) {
    if (x >= static_cast<NodeId>(needs_.size()) || !needs_[x]) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(TensorType want, TypeOf(x));
    const Types got = StatedTypes(b_.node(g));
    if (got.size() != 1 || got[0].shape != want.shape) {
      return absl::InternalError(absl::StrCat("backward formula: the gradient of \"",
                                              fwd_.node(x).name(), "\" (", FormatType(want),
                                              ") would be \"", b_.node(g).name(), "\" (",
                                              got.empty() ? "no type" : FormatType(got[0]), ")"));
    }
    auto it = grad_.find(x);
    if (it == grad_.end()) {
      grad_[x] = g;
      return absl::OkStatus();
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId sum,
                             Emit("aten.add.Tensor", {Value::Ref(it->second), Value::Ref(g)}));
    it->second = sum;
    return absl::OkStatus();
  }

  absl::Status AccumulateElem(NodeId tuple, int i, NodeId g) {
    auto key = std::make_pair(tuple, i);
    auto it = elem_grad_.find(key);
    if (it == elem_grad_.end()) {
      elem_grad_[key] = g;
      tuples_with_grad_.insert(tuple);
      return absl::OkStatus();
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId sum,
                             Emit("aten.add.Tensor", {Value::Ref(it->second), Value::Ref(g)}));
    it->second = sum;
    return absl::OkStatus();
  }

  std::optional<NodeId> ElemGrad(NodeId tuple, int i) const {
    auto it = elem_grad_.find(std::make_pair(tuple, i));
    if (it == elem_grad_.end()) return std::nullopt;
    return it->second;
  }

  bool Needs(NodeId x) const { return x < static_cast<NodeId>(needs_.size()) && needs_[x]; }

  // `g` summed down to `shape` (the inverse of broadcasting), viewed to it.
  absl::StatusOr<NodeId> SumTo(NodeId g, const Shape& shape) {
    const Shape gs = StatedTypes(b_.node(g))[0].shape;
    if (gs == shape) return g;
    const size_t lead = gs.size() - shape.size();
    std::vector<int64_t> dims;
    for (size_t i = 0; i < gs.size(); ++i) {
      if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) dims.push_back(i);
    }
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId s, Emit("aten.sum.dim_IntList", {Value::Ref(g), Ints(dims), Value::Bool(true)}));
    if (StatedTypes(b_.node(s))[0].shape == shape) return s;
    return Emit("aten.view.default", {Value::Ref(s), Ints(shape)}, {}, Cost::Alias());
  }

  // Whether backward value `g` may be laid out non-contiguously: a transpose, expand or
  // slice (or a view of one). Values kernels compute are contiguous.
  bool MaybeNonContiguous(NodeId g, int depth = 0) const {
    if (depth > 64) return true;
    const Node& n = b_.node(g);
    if (n.op() != Op::kCallFunction || !SharesInputStorage(n)) return false;
    const std::string& t = n.target();
    if (t == "aten.transpose.int" || t == "aten.t.default" || t == "aten.expand.default" ||
        t == "aten.permute.default" || t == "aten.slice.Tensor" || t == "aten.select.int" ||
        t == "aten.split.Tensor") {
      return true;
    }
    return !n.inputs().empty() && MaybeNonContiguous(n.inputs()[0], depth + 1);
  }

  // `g` viewed as `shape`: PyTorch's view backward is reshape, a view when the layout
  // allows one and a contiguous copy (clone, then view) when it does not.
  absl::StatusOr<NodeId> Reshape(NodeId g, const Shape& shape) {
    if (MaybeNonContiguous(g)) {
      OVERLAP_ASSIGN_OR_RETURN(g,
                               Emit("aten.clone.default", {Value::Ref(g)},
                                    {{"memory_format", Value::String("torch.contiguous_format")}}));
    }
    return Emit("aten.view.default", {Value::Ref(g), Ints(shape)}, {}, Cost::Alias());
  }

  absl::StatusOr<NodeId> Mul(NodeId a, NodeId b) {
    return Emit("aten.mul.Tensor", {Value::Ref(a), Value::Ref(b)});
  }

  absl::StatusOr<NodeId> T(NodeId a) {
    return Emit("aten.t.default", {Value::Ref(a)}, {}, Cost::Alias());
  }

  // The gradient flowing into forward node `id` (a tensor result).
  NodeId G(NodeId id) const { return grad_.at(id); }

  // ---- the formulas (docs/ops.md's backward column), one per operator -------------------

  // What a formula reads: the forward node and its arguments by name, through its
  // operator's schema (graph/op_schema.h).
  struct Call {
    NodeId id;
    const Node& n;
    const OpArgs& a;
    // The node the argument `name` references; kNoNode for None or a constant.
    NodeId Ref(absl::string_view name) const {
      const Value* v = a.Get(name);
      return v != nullptr && v->is_ref() ? v->as_ref() : kNoNode;
    }
    // The argument as given, else the schema's default, else None.
    Value Arg(absl::string_view name) const {
      const Value* v = a.Get(name);
      return v != nullptr ? *v : Value();
    }
    // An int argument; `fallback` for None (slice's end: the dimension's size).
    int64_t Int(absl::string_view name, int64_t fallback) const {
      const Value* v = a.Get(name);
      return v != nullptr && v->kind() == Value::Kind::kInt ? v->as_int() : fallback;
    }
    // The first declared argument (self, input, weight, query): what most formulas
    // differentiate.
    NodeId First() const { return Ref(a.schema().arg(0).name); }
    // alpha (add.Tensor, index_add) is 1 where a formula ignores it.
    bool AlphaIsOne() const {
      const Value* v = a.Get("alpha");
      return v == nullptr || (v->kind() == Value::Kind::kInt && v->as_int() == 1) ||
             (v->kind() == Value::Kind::kDouble && v->as_double() == 1.0);
    }
  };
  using Formula = absl::Status (AotBuilder::*)(const Call&);

 public:
  // Every operator with a formula, by target.
  static const absl::flat_hash_map<std::string, Formula>& FormulaTable() {
    static const auto* table = new absl::flat_hash_map<std::string, Formula>{
        {"aten.t.default", &AotBuilder::TBackward},
        {"aten.view.default", &AotBuilder::ReshapeBackward},
        {"aten._unsafe_view.default", &AotBuilder::ReshapeBackward},
        {"aten.reshape.default", &AotBuilder::ReshapeBackward},
        {"aten.flatten.using_ints", &AotBuilder::ReshapeBackward},
        {"aten.transpose.int", &AotBuilder::TransposeBackward},
        {"aten.unsqueeze.default", &AotBuilder::UnsqueezeBackward},
        {"aten.expand.default", &AotBuilder::ExpandBackward},
        {"aten.clone.default", &AotBuilder::IdentityBackward},
        {"aten.add.Scalar", &AotBuilder::IdentityBackward},
        {"aten.lift_fresh_copy.default", &AotBuilder::IdentityBackward},
        {"aten.split.Tensor", &AotBuilder::SplitBackward},
        {"aten.unsafe_split.Tensor", &AotBuilder::SplitBackward},
        {"aten.unbind.int", &AotBuilder::UnbindBackward},
        {"aten.stack.default", &AotBuilder::StackBackward},
        {"aten.constant_pad_nd.default", &AotBuilder::PadBackward},
        {"aten.roll.default", &AotBuilder::RollBackward},
        {"aten.slice_scatter.default", &AotBuilder::SliceScatterBackward},
        {"aten.as_strided.default", &AotBuilder::AsStridedBackward},
        {"aten.split_with_sizes.default", &AotBuilder::SplitBackward},
        {"aten.hardswish.default", &AotBuilder::ActivationBackward},
        {"aten.exp.default", &AotBuilder::ExpBackward},
        {"aten.sin.default", &AotBuilder::UnaryBackward},
        {"aten.cos.default", &AotBuilder::UnaryBackward},
        {"aten.log.default", &AotBuilder::UnaryBackward},
        {"aten.abs.default", &AotBuilder::UnaryBackward},
        {"aten.clamp.default", &AotBuilder::ClampBackward},
        {"aten.clamp_min.default", &AotBuilder::ClampBackward},
        {"aten.where.self", &AotBuilder::WhereBackward},
        {"aten.norm.ScalarOpt_dim", &AotBuilder::NormBackward},
        {"aten.hardsigmoid.default", &AotBuilder::ActivationBackward},
        {"aten.native_group_norm.default", &AotBuilder::GroupNormBackward},
        {"aten.upsample_nearest2d.vec", &AotBuilder::UpsampleBackward},
        {"aten.upsample_bilinear2d.vec", &AotBuilder::UpsampleBackward},
        {"aten._adaptive_avg_pool2d.default", &AotBuilder::AdaptivePoolBackward},
        {"aten._adaptive_avg_pool3d.default", &AotBuilder::AdaptivePoolBackward},
        {"aten.as_strided_scatter.default", &AotBuilder::AsStridedScatterBackward},
        {"aten.index.Tensor", &AotBuilder::IndexBackward},
        {"aten.index_put.default", &AotBuilder::IndexPutBackward},
        {"aten.mm.default", &AotBuilder::MatmulBackward},
        {"aten.addmm.default", &AotBuilder::MatmulBackward},
        {"aten.add.Tensor", &AotBuilder::AddMulBackward},
        {"aten.mul.Tensor", &AotBuilder::AddMulBackward},
        {"aten.sub.Tensor", &AotBuilder::AddMulBackward},
        {"aten.neg.default", &AotBuilder::NegBackward},
        {"aten.pow.Tensor_Scalar", &AotBuilder::PowBackward},
        {"aten.rsqrt.default", &AotBuilder::RsqrtBackward},
        {"aten.mean.dim", &AotBuilder::MeanBackward},
        {"aten.sum.dim_IntList", &AotBuilder::MeanBackward},
        {"aten.select.int", &AotBuilder::SelectBackward},
        {"aten.amax.default", &AotBuilder::AmaxBackward},
        {"aten.sum.default", &AotBuilder::TotalBackward},
        {"aten.mean.default", &AotBuilder::TotalBackward},
        {"aten.relu.default", &AotBuilder::ReluBackward},
        {"aten.sigmoid.default", &AotBuilder::SigmoidBackward},
        {"aten.tanh.default", &AotBuilder::TanhBackward},
        {"aten.silu.default", &AotBuilder::ActivationBackward},
        {"aten.gelu.default", &AotBuilder::ActivationBackward},
        {"aten._softmax.default", &AotBuilder::SoftmaxBackward},
        {"aten._log_softmax.default", &AotBuilder::SoftmaxBackward},
        {"aten.native_layer_norm.default", &AotBuilder::LayerNormBackward},
        {"aten.native_batch_norm.default", &AotBuilder::BatchNormBackward},
        {"aten._scaled_dot_product_flash_attention.default", &AotBuilder::AttentionBackward},
        {"aten.topk.default", &AotBuilder::TopkBackward},
        {"aten.max.dim", &AotBuilder::MaxDimBackward},
        {"aten.leaky_relu.default", &AotBuilder::LeakyReluBackward},
        {"aten.softplus.default", &AotBuilder::SoftplusBackward},
        {"aten.prelu.default", &AotBuilder::PreluBackward},
        {"aten._prelu_kernel.default", &AotBuilder::PreluBackward},
        {"aten.pixel_shuffle.default", &AotBuilder::PixelShuffleBackward},
        {"aten.pixel_unshuffle.default", &AotBuilder::PixelShuffleBackward},
        {"aten.max_pool2d_with_indices.default", &AotBuilder::MaxPoolBackward},
        {"aten.avg_pool2d.default", &AotBuilder::AvgPoolBackward},
        {"aten.max_pool3d_with_indices.default", &AotBuilder::MaxPoolBackward},
        {"aten.avg_pool3d.default", &AotBuilder::AvgPoolBackward},
        {"aten.adaptive_max_pool2d.default", &AotBuilder::AdaptiveMaxPoolBackward},
        {"aten.adaptive_max_pool3d.default", &AotBuilder::AdaptiveMaxPoolBackward},
        {"aten.nll_loss_forward.default", &AotBuilder::NllLossBackward},
        {"aten.mse_loss.default", &AotBuilder::MseLossBackward},
        {"aten.embedding.default", &AotBuilder::EmbeddingBackward},
        {"aten._embedding_bag.default", &AotBuilder::EmbeddingBagBackward},
        {"aten.convolution.default", &AotBuilder::ConvolutionBackward},
        {"aten.index_select.default", &AotBuilder::IndexSelectBackward},
        {"aten.gather.default", &AotBuilder::GatherBackward},
        {"aten.scatter_add.default", &AotBuilder::ScatterBackward},
        {"aten.scatter.src", &AotBuilder::ScatterBackward},
        {"aten.scatter.value", &AotBuilder::ScatterBackward},
        {"aten.select_scatter.default", &AotBuilder::SelectScatterBackward},
        {"aten.cumsum.default", &AotBuilder::CumsumBackward},
        {"aten.flip.default", &AotBuilder::FlipBackward},
        {"aten.index_add.default", &AotBuilder::IndexAddBackward},
        {"aten.index_add_.default", &AotBuilder::IndexAddBackward},
        {"aten.slice.Tensor", &AotBuilder::SliceBackward},
    };
    return *table;
  }

 private:
  absl::Status Differentiate(NodeId id) {
    const Node& n = f_.node(id);
    if (n.target() == "operator.getitem") {  // not an ATen operator: (tuple, index)
      const Value* tuple = n.args().empty() ? nullptr : &n.args()[0];
      const int64_t i =
          n.args().size() > 1 && n.args()[1].kind() == Value::Kind::kInt ? n.args()[1].as_int() : 0;
      return AccumulateElem(tuple != nullptr && tuple->is_ref() ? tuple->as_ref() : kNoNode,
                            static_cast<int>(i), G(id));
    }
    auto it = FormulaTable().find(n.target());
    if (it == FormulaTable().end()) {
      return Error(n, "has no backward formula (docs/ops.md) but lies on a gradient path");
    }
    OVERLAP_ASSIGN_OR_RETURN(const OpArgs a, OpArgs::Bind(n));
    return (this->*(it->second))(Call{id, n, a});
  }

  absl::Status TBackward(const Call& c) {
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, T(G(c.id)));
    return Accumulate(c.First(), g);
  }

  absl::Status ReshapeBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Reshape(G(c.id), xt.shape));
    return Accumulate(x, g);
  }

  absl::Status TransposeBackward(const Call& c) {
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g,
        Emit(c.n.target(), {Value::Ref(G(c.id)), c.Arg("dim0"), c.Arg("dim1")}, {}, Cost::Alias()));
    return Accumulate(c.First(), g);
  }

  absl::Status UnsqueezeBackward(const Call& c) {
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.squeeze.dim", {Value::Ref(G(c.id)), c.Arg("dim")}, {}, Cost::Alias()));
    return Accumulate(c.First(), g);
  }

  absl::Status ExpandBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, SumTo(G(c.id), xt.shape));
    return Accumulate(x, g);
  }

  absl::Status IdentityBackward(const Call& c) { return Accumulate(c.First(), G(c.id)); }

  absl::Status SplitBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    const Types parts = StatedTypes(c.n);
    const int64_t d = c.Int("dim", 0);
    const int64_t dim = d < 0 ? d + static_cast<int64_t>(xt.shape.size()) : d;
    std::vector<Value> pieces;
    for (int i = 0; i < static_cast<int>(parts.size()); ++i) {
      std::optional<NodeId> gi = ElemGrad(c.id, i);
      if (!gi) {
        OVERLAP_ASSIGN_OR_RETURN(
            NodeId z,
            Emit("aten.new_zeros.default", {Value::Ref(x_first_grad(c.id)), Ints(parts[i].shape)}));
        gi = z;
      }
      pieces.push_back(Value::Ref(*gi));
    }
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.cat.default", {Value::List(std::move(pieces)), Value::Int(dim)}));
    return Accumulate(x, g);
  }

  // unbind's steps stacked back; a step without a gradient is zeros of its shape.
  absl::Status UnbindBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    const Types steps = StatedTypes(c.n);
    const int64_t d = c.Int("dim", 0);
    const int64_t dim = d < 0 ? d + static_cast<int64_t>(xt.shape.size()) : d;
    std::vector<Value> pieces;
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      std::optional<NodeId> gi = ElemGrad(c.id, i);
      if (!gi) {
        OVERLAP_ASSIGN_OR_RETURN(
            NodeId z,
            Emit("aten.new_zeros.default", {Value::Ref(x_first_grad(c.id)), Ints(steps[i].shape)}));
        gi = z;
      }
      pieces.push_back(Value::Ref(*gi));
    }
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.stack.default", {Value::List(std::move(pieces)), Value::Int(dim)}));
    return Accumulate(x, g);
  }

  // constant_pad_nd: the gradient padded by the negated pads, which crops it back.
  absl::Status PadBackward(const Call& c) {
    const Value pad = c.Arg("pad");
    if (pad.kind() != Value::Kind::kList) return Error(c.n, "pad is not a list");
    std::vector<int64_t> negated;
    for (const Value& p : pad.items())
      negated.push_back(p.kind() == Value::Kind::kInt ? -p.as_int() : 0);
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.constant_pad_nd.default", {Value::Ref(G(c.id)), Ints(negated)}));
    return Accumulate(c.First(), g);
  }

  // A scatter of src into a window of self (slice_scatter, as_strided_scatter): self's
  // gradient is g scattered over with zeros in the window; src's is g's window, read by
  // `read` (after a contiguous copy when `dense`: as_strided addresses storage).
  absl::Status WindowScatterBackward(const Call& c, const std::vector<Value>& where,
                                     const char* read, bool dense) {
    const NodeId x = c.Ref("self"), src = c.Ref("src");
    if (Needs(x)) {
      OVERLAP_ASSIGN_OR_RETURN(NodeId srcb, Use(src));
      OVERLAP_ASSIGN_OR_RETURN(NodeId z, Emit("aten.zeros_like.default", {Value::Ref(srcb)}));
      std::vector<Value> args = {Value::Ref(G(c.id)), Value::Ref(z)};
      args.insert(args.end(), where.begin(), where.end());
      OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit(c.n.target(), std::move(args)));
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, g));
    }
    if (Needs(src)) {
      NodeId from = G(c.id);
      if (dense) {
        OVERLAP_ASSIGN_OR_RETURN(from, Emit("aten.clone.default", {Value::Ref(from)}));
      }
      std::vector<Value> args = {Value::Ref(from)};
      args.insert(args.end(), where.begin(), where.end());
      OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit(read, std::move(args), {}, Cost::Alias()));
      OVERLAP_RETURN_IF_ERROR(Accumulate(src, g));
    }
    return absl::OkStatus();
  }

  // slice_scatter: self's gradient is g with the slice zeroed; src's is g's slice.
  absl::Status SliceScatterBackward(const Call& c) {
    return WindowScatterBackward(c, {c.Arg("dim"), c.Arg("start"), c.Arg("end"), c.Arg("step")},
                                 "aten.slice.Tensor",
                                 /*dense=*/false);
  }

  // as_strided: the gradient written through the same window into zeros of self's shape
  // (exact when self is contiguous from its storage's start, as the views it follows are).
  absl::Status AsStridedBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    // A window that reads an element twice needs its gradients added up, which a scatter
    // (the last write wins) does not do: refused rather than wrong.
    const Value size = c.Arg("size"), stride = c.Arg("stride");
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with size > 1
    if (size.kind() == Value::Kind::kList && stride.kind() == Value::Kind::kList &&
        size.items().size() == stride.items().size()) {
      for (size_t i = 0; i < size.items().size(); ++i) {
        const int64_t n = size.items()[i].as_int(), st = stride.items()[i].as_int();
        if (n > 1) dims.push_back({st, n});
      }
    }
    std::sort(dims.begin(), dims.end());
    int64_t reach = 0;  // the span of the smaller-stride dims, in elements
    for (const auto& [st, n] : dims) {
      if (st <= reach) {
        return Error(c.n, "as_strided with a window that overlaps itself has no formula here");
      }
      reach += st * (n - 1);
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId z, Emit("aten.zeros_like.default", {Value::Ref(xb)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.as_strided_scatter.default",
                                            {Value::Ref(z), Value::Ref(G(c.id)), c.Arg("size"),
                                             c.Arg("stride"), c.Arg("storage_offset")}));
    return Accumulate(x, g);
  }

  // as_strided_scatter: self's gradient is g with the window zeroed; src's is g's window
  // (read from a contiguous copy: the window addresses storage).
  absl::Status AsStridedScatterBackward(const Call& c) {
    return WindowScatterBackward(c, {c.Arg("size"), c.Arg("stride"), c.Arg("storage_offset")},
                                 "aten.as_strided.default", /*dense=*/true);
  }

  // The backward's copy of an `indices` list (Tensor?[]): each tensor used, None kept.
  absl::StatusOr<Value> UseIndices(const Call& c) {
    const Value* list = c.a.Get("indices");
    if (list == nullptr || list->kind() != Value::Kind::kList) {
      return Error(c.n, "indices is not a list");
    }
    std::vector<Value> items;
    for (const Value& item : list->items()) {
      if (!item.is_ref()) {
        items.push_back(item);
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(NodeId r, Use(item.as_ref()));
      items.push_back(Value::Ref(r));
    }
    return Value::List(std::move(items));
  }

  // index: the gradient added back where it was read from (repeated indices add up).
  absl::Status IndexBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(Value indices, UseIndices(c));
    OVERLAP_ASSIGN_OR_RETURN(NodeId z,
                             Emit("aten.new_zeros.default", {Value::Ref(G(c.id)), Ints(xt.shape)}));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.index_put.default",
                       {Value::Ref(z), indices, Value::Ref(G(c.id)), Value::Bool(true)}));
    return Accumulate(x, g);
  }

  // index_put: self's gradient is g where values did not overwrite it (all of g when they
  // were added); values' is g read at the indexed places, summed to values' shape.
  absl::Status IndexPutBackward(const Call& c) {
    const NodeId x = c.Ref("self"), v = c.Ref("values");
    const Value* acc = c.a.Get("accumulate");
    const bool accumulate = acc != nullptr && acc->kind() == Value::Kind::kBool && acc->as_bool();
    OVERLAP_ASSIGN_OR_RETURN(Value indices, UseIndices(c));
    if (Needs(x)) {
      NodeId g = G(c.id);
      if (!accumulate) {
        OVERLAP_ASSIGN_OR_RETURN(NodeId vb, Use(v));
        OVERLAP_ASSIGN_OR_RETURN(NodeId z, Emit("aten.zeros_like.default", {Value::Ref(vb)}));
        OVERLAP_ASSIGN_OR_RETURN(g,
                                 Emit("aten.index_put.default",
                                      {Value::Ref(g), indices, Value::Ref(z), Value::Bool(false)}));
      }
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, g));
    }
    if (Needs(v)) {
      OVERLAP_ASSIGN_OR_RETURN(TensorType vt, TypeOf(v));
      OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.index.Tensor", {Value::Ref(G(c.id)), indices}));
      OVERLAP_ASSIGN_OR_RETURN(g, SumTo(g, vt.shape));
      OVERLAP_RETURN_IF_ERROR(Accumulate(v, g));
    }
    return absl::OkStatus();
  }

  // roll: the gradient rolled back.
  absl::Status RollBackward(const Call& c) {
    const Value shifts = c.Arg("shifts");
    std::vector<int64_t> back;
    if (shifts.kind() == Value::Kind::kList) {
      for (const Value& s : shifts.items())
        back.push_back(s.kind() == Value::Kind::kInt ? -s.as_int() : 0);
    } else if (shifts.kind() == Value::Kind::kInt) {
      back.push_back(-shifts.as_int());
    }
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.roll.default", {Value::Ref(G(c.id)), Ints(back), c.Arg("dims")}));
    return Accumulate(c.First(), g);
  }

  // stack: the i-th tensor's gradient is g's slot i along `dim` (a view).
  absl::Status StackBackward(const Call& c) {
    const Value* list = c.a.Get("tensors");
    if (list == nullptr || list->kind() != Value::Kind::kList) {
      return Error(c.n, "tensors is not a list");
    }
    const int64_t rank =
        static_cast<int64_t>(StatedTypes(c.n).empty() ? 0 : StatedTypes(c.n)[0].shape.size());
    const int64_t d = c.Int("dim", 0);
    const int64_t dim = d < 0 ? d + rank : d;
    for (int64_t i = 0; i < static_cast<int64_t>(list->items().size()); ++i) {
      const Value& item = list->items()[i];
      if (!item.is_ref() || !Needs(item.as_ref())) continue;
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId g, Emit("aten.select.int", {Value::Ref(G(c.id)), Value::Int(dim), Value::Int(i)},
                         {}, Cost::Alias()));
      OVERLAP_RETURN_IF_ERROR(Accumulate(item.as_ref(), g));
    }
    return absl::OkStatus();
  }

  // mm(self, mat2) and addmm(self = bias, mat1, mat2): dA = dY B^T, dB = A^T dY, and the
  // bias the gradient summed to its shape.
  absl::Status MatmulBackward(const Call& c) {
    const bool add = c.n.target() == "aten.addmm.default";
    const NodeId a = c.Ref(add ? "mat1" : "self"), b = c.Ref(add ? "mat2" : "mat2");
    const NodeId g = G(c.id);
    if (add && Needs(c.Ref("self"))) {
      OVERLAP_ASSIGN_OR_RETURN(TensorType bt, TypeOf(c.Ref("self")));
      OVERLAP_ASSIGN_OR_RETURN(NodeId gb, SumTo(g, bt.shape));
      OVERLAP_RETURN_IF_ERROR(Accumulate(c.Ref("self"), gb));
    }
    if (Needs(a)) {
      OVERLAP_ASSIGN_OR_RETURN(NodeId bb, Use(b));
      OVERLAP_ASSIGN_OR_RETURN(NodeId bt, T(bb));
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId ga, Emit("aten.mm.default", {Value::Ref(g), Value::Ref(bt)}, {}, Cost::Matmul()));
      OVERLAP_RETURN_IF_ERROR(Accumulate(a, ga));
    }
    if (Needs(b)) {
      OVERLAP_ASSIGN_OR_RETURN(NodeId ab, Use(a));
      OVERLAP_ASSIGN_OR_RETURN(NodeId at, T(ab));
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId gb, Emit("aten.mm.default", {Value::Ref(at), Value::Ref(g)}, {}, Cost::Matmul()));
      OVERLAP_RETURN_IF_ERROR(Accumulate(b, gb));
    }
    return absl::OkStatus();
  }

  absl::Status AddMulBackward(const Call& c) {
    if (!c.AlphaIsOne()) return Error(c.n, "alpha other than 1 has no formula here (docs/ops.md)");
    const bool mul = c.n.target() == "aten.mul.Tensor";
    const bool subtract = c.n.target() == "aten.sub.Tensor";
    const NodeId a = c.Ref("self"), b = c.Ref("other");
    if (b == kNoNode) return Error(c.n, "a scalar operand has no formula here (docs/ops.md)");
    for (auto [self, other] : {std::pair{a, b}, std::pair{b, a}}) {
      if (!Needs(self)) continue;
      NodeId g = G(c.id);
      if (mul) {
        OVERLAP_ASSIGN_OR_RETURN(NodeId o, Use(other));
        OVERLAP_ASSIGN_OR_RETURN(g, Mul(g, o));
      }
      if (subtract && self == b && self != a) {  // d(self - other)/d other = -1
        OVERLAP_ASSIGN_OR_RETURN(g, Emit("aten.neg.default", {Value::Ref(g)}));
      }
      OVERLAP_ASSIGN_OR_RETURN(TensorType st, TypeOf(self));
      OVERLAP_ASSIGN_OR_RETURN(g, SumTo(g, st.shape));
      OVERLAP_RETURN_IF_ERROR(Accumulate(self, g));  // x * x: two contributions, 2 x g
    }
    return absl::OkStatus();
  }

  absl::Status NegBackward(const Call& c) {
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.neg.default", {Value::Ref(G(c.id))}));
    return Accumulate(c.First(), g);
  }

  absl::Status PowBackward(const Call& c) {  // d/dx x^e = e x^(e-1)
    const NodeId x = c.First();
    const Value e = c.Arg("exponent");
    const double exponent = e.kind() == Value::Kind::kInt      ? static_cast<double>(e.as_int())
                            : e.kind() == Value::Kind::kDouble ? e.as_double()
                                                               : 0.0;
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    NodeId base = xb;
    if (exponent != 2.0) {
      OVERLAP_ASSIGN_OR_RETURN(
          base, Emit("aten.pow.Tensor_Scalar", {Value::Ref(xb), Value::Double(exponent - 1)}));
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId d,
                             Emit("aten.mul.Scalar", {Value::Ref(base), Value::Double(exponent)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Mul(G(c.id), d));
    return Accumulate(x, g);
  }

  absl::Status RsqrtBackward(const Call& c) {  // d/dx x^-1/2 = -1/2 y^3 with y = rsqrt(x)
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    OVERLAP_ASSIGN_OR_RETURN(NodeId p,
                             Emit("aten.pow.Tensor_Scalar", {Value::Ref(y), Value::Int(3)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId d,
                             Emit("aten.mul.Scalar", {Value::Ref(p), Value::Double(-0.5)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Mul(G(c.id), d));
    return Accumulate(c.First(), g);
  }

  // A reduction's `dim` (int[1]?: none or empty for every dimension), wrapped and sorted.
  static std::vector<int64_t> ReducedDims(const Call& c, const TensorType& xt) {
    const Value dims_v = c.Arg("dim");
    std::vector<int64_t> dims;
    if (dims_v.kind() == Value::Kind::kList) {
      for (const Value& d : dims_v.items()) {
        dims.push_back(d.as_int() < 0 ? d.as_int() + xt.shape.size() : d.as_int());
      }
    }
    if (dims.empty()) {
      for (size_t i = 0; i < xt.shape.size(); ++i) dims.push_back(i);
    }
    std::sort(dims.begin(), dims.end());
    return dims;
  }

  // `v` with the reduced dimensions put back as size 1 (a reduction without keepdim).
  absl::StatusOr<NodeId> Unsqueezed(NodeId v, const std::vector<int64_t>& dims) {
    for (int64_t d : dims) {
      OVERLAP_ASSIGN_OR_RETURN(
          v, Emit("aten.unsqueeze.default", {Value::Ref(v), Value::Int(d)}, {}, Cost::Alias()));
    }
    return v;
  }

  absl::Status MeanBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    const std::vector<int64_t> dims = ReducedDims(c, xt);
    const Value keep_v = c.Arg("keepdim");
    const bool keep = keep_v.kind() == Value::Kind::kBool && keep_v.as_bool();
    int64_t count = 1;
    for (int64_t d : dims) count *= xt.shape[d];
    NodeId g = G(c.id);
    if (!keep) {
      OVERLAP_ASSIGN_OR_RETURN(g, Unsqueezed(g, dims));
    }
    OVERLAP_ASSIGN_OR_RETURN(
        g, Emit("aten.expand.default", {Value::Ref(g), Ints(xt.shape)}, {}, Cost::Alias()));
    if (c.n.target() == "aten.sum.dim_IntList") return Accumulate(x, g);  // no count to divide
    OVERLAP_ASSIGN_OR_RETURN(
        g, Emit("aten.div.Scalar", {Value::Ref(g), Value::Double(static_cast<double>(count))}));
    return Accumulate(x, g);
  }

  // amax: g shared evenly among the elements equal to the maximum (torch's amax_backward):
  // mask = (self == y), g mask / sum(mask) over the reduced dimensions.
  absl::Status AmaxBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    const std::vector<int64_t> dims = ReducedDims(c, xt);
    const Value keep_v = c.Arg("keepdim");
    const bool keep = keep_v.kind() == Value::Kind::kBool && keep_v.as_bool();
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    NodeId g = G(c.id);
    if (!keep) {
      OVERLAP_ASSIGN_OR_RETURN(g, Unsqueezed(g, dims));
      OVERLAP_ASSIGN_OR_RETURN(y, Unsqueezed(y, dims));
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId xs, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId eq, Emit("aten.eq.Tensor", {Value::Ref(xs), Value::Ref(y)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId mask,
                             Emit("aten._to_copy.default", {Value::Ref(eq)},
                                  {{"dtype", Value::String(absl::StrCat("torch.", xt.dtype))}}));
    std::vector<Value> dv;
    for (int64_t d : dims) dv.push_back(Value::Int(d));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId count, Emit("aten.sum.dim_IntList",
                           {Value::Ref(mask), Value::List(std::move(dv)), Value::Bool(true)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId share,
                             Emit("aten.div.Tensor", {Value::Ref(g), Value::Ref(count)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId gx, Mul(share, mask));
    return Accumulate(x, gx);
  }

  // select.int: g placed at the index of dim in zeros of self's shape (select_backward).
  absl::Status SelectBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.select_backward.default",
                       {Value::Ref(G(c.id)), Ints(xt.shape), c.Arg("dim"), c.Arg("index")}));
    return Accumulate(x, g);
  }

  // sum / mean of every element: g (a scalar) expanded to self's shape, over its count for mean.
  absl::Status TotalBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g,
        Emit("aten.expand.default", {Value::Ref(G(c.id)), Ints(xt.shape)}, {}, Cost::Alias()));
    if (c.n.target() == "aten.mean.default") {
      int64_t count = 1;
      for (int64_t d : xt.shape) count *= d;
      OVERLAP_ASSIGN_OR_RETURN(
          g, Emit("aten.div.Scalar", {Value::Ref(g), Value::Double(static_cast<double>(count))}));
    }
    return Accumulate(x, g);
  }

  absl::Status ReluBackward(const Call& c) {
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.threshold_backward.default",
                                            {Value::Ref(G(c.id)), Value::Ref(y), Value::Int(0)}));
    return Accumulate(c.First(), g);
  }

  // A 0-d zero of forward value `id`'s dtype (a `where`'s other branch).
  absl::StatusOr<NodeId> Zero(NodeId id) {
    OVERLAP_ASSIGN_OR_RETURN(TensorType t, TypeOf(id));
    return Emit("aten.scalar_tensor.default", {Value::Double(0)},
                {{"dtype", Value::String(absl::StrCat("torch.", t.dtype))}});
  }

  // Backwards written in the forward's input x, as torch's derivatives.yaml writes them:
  // sin: g cos(x); cos: g (-sin(x)); log: g / x; abs: g sgn(x).
  absl::Status UnaryBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xs, Use(x));
    const std::string& t = f_.node(c.id).target();
    NodeId g = kNoNode;
    if (t == "aten.log.default") {
      OVERLAP_ASSIGN_OR_RETURN(g, Emit("aten.div.Tensor", {Value::Ref(G(c.id)), Value::Ref(xs)}));
      return Accumulate(x, g);
    }
    const char* derivative = t == "aten.sin.default"   ? "aten.cos.default"
                             : t == "aten.cos.default" ? "aten.sin.default"
                                                       : "aten.sgn.default";
    OVERLAP_ASSIGN_OR_RETURN(NodeId d, Emit(derivative, {Value::Ref(xs)}));
    if (t == "aten.cos.default") {
      OVERLAP_ASSIGN_OR_RETURN(d, Emit("aten.neg.default", {Value::Ref(d)}));
    }
    OVERLAP_ASSIGN_OR_RETURN(g, Mul(G(c.id), d));
    return Accumulate(x, g);
  }

  absl::Status ExpBackward(const Call& c) {  // written in its result: g y
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Mul(G(c.id), y));
    return Accumulate(x, g);
  }

  // g where the bound(s) let self through (min <= self <= max, as ATen's clamp_backward),
  // else 0.
  absl::Status ClampBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId zero, Zero(c.id));
    NodeId g = G(c.id);
    for (const auto& [bound, compare] :
         {std::pair{"min", "aten.ge.Scalar"}, std::pair{"max", "aten.le.Scalar"}}) {
      const Value v = c.Arg(bound);
      if (v.is_none()) continue;
      OVERLAP_ASSIGN_OR_RETURN(NodeId mask, Emit(compare, {Value::Ref(xb), v}));
      OVERLAP_ASSIGN_OR_RETURN(
          g, Emit("aten.where.self", {Value::Ref(mask), Value::Ref(g), Value::Ref(zero)}));
    }
    return Accumulate(x, g);
  }

  // where: the gradient to self where the condition holds, to other elsewhere, each summed to
  // its operand's shape.
  absl::Status WhereBackward(const Call& c) {
    const NodeId a = c.Ref("self"), b = c.Ref("other");
    if (!Needs(a) && !Needs(b)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId cond, Use(c.Ref("condition")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId zero, Zero(c.id));
    for (const NodeId x : {a, b}) {
      if (!Needs(x)) continue;
      OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
      const Value g = Value::Ref(G(c.id)), z = Value::Ref(zero);
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId gx, Emit("aten.where.self", {Value::Ref(cond), x == a ? g : z, x == a ? z : g}));
      OVERLAP_ASSIGN_OR_RETURN(gx, SumTo(gx, xt.shape));
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, gx));
    }
    return absl::OkStatus();
  }

  // norm, p = 2: g self / norm (the norm kept as a dimension of size 1), 0 where the norm is
  // 0 (ATen's subgradient there).
  absl::Status NormBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    const Value p = c.Arg("p");
    const double pv = p.kind() == Value::Kind::kDouble ? p.as_double()
                      : p.kind() == Value::Kind::kInt  ? static_cast<double>(p.as_int())
                                                       : 2.0;
    if (pv != 2.0) return Error(c.n, "norm's backward has a formula for p = 2 only");
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    NodeId g = G(c.id);
    const Value keep = c.Arg("keepdim");
    if (!(keep.kind() == Value::Kind::kBool && keep.as_bool())) {  // re-insert the dims
      const Value* dv = c.a.Get("dim");
      const int64_t r = static_cast<int64_t>(xt.shape.size());
      if (r == 0) return Error(c.n, "norm of a 0-d tensor has no formula here");
      std::vector<bool> reduced(
          r, dv == nullptr || dv->kind() != Value::Kind::kList || dv->items().empty());
      if (dv != nullptr && dv->kind() == Value::Kind::kList) {
        for (const Value& d : dv->items()) reduced[(d.as_int() + r) % r] = true;
      } else if (dv != nullptr && dv->kind() == Value::Kind::kInt) {
        reduced[(dv->as_int() + r) % r] = true;
      }
      Shape kept;
      for (int64_t i = 0; i < r; ++i) kept.push_back(reduced[i] ? 1 : xt.shape[i]);
      OVERLAP_ASSIGN_OR_RETURN(g, Reshape(g, kept));
      OVERLAP_ASSIGN_OR_RETURN(y, Reshape(y, kept));
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId unit, Emit("aten.div.Tensor", {Value::Ref(xb), Value::Ref(y)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId zero_norm,
                             Emit("aten.eq.Scalar", {Value::Ref(y), Value::Int(0)}));
    OVERLAP_ASSIGN_OR_RETURN(unit, Emit("aten.masked_fill.Scalar",
                                        {Value::Ref(unit), Value::Ref(zero_norm), Value::Int(0)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId gx, Mul(g, unit));
    return Accumulate(x, gx);
  }

  absl::Status SigmoidBackward(const Call& c) {  // written in its result: y (1 - y)
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.sigmoid_backward.default", {Value::Ref(G(c.id)), Value::Ref(y)}));
    return Accumulate(c.First(), g);
  }

  absl::Status TanhBackward(const Call& c) {  // written in its result: 1 - y^2
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.tanh_backward.default", {Value::Ref(G(c.id)), Value::Ref(y)}));
    return Accumulate(c.First(), g);
  }

  // silu, gelu, hardswish, hardsigmoid: backwards written in their input, `<op>_backward(g,
  // self)`.
  absl::Status ActivationBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    const std::string& t = c.n.target();
    const std::string backward =
        absl::StrCat(t.substr(0, t.size() - std::string(".default").size()), "_backward.default");
    ValueDict kw;  // gelu's approximation, passed on as the forward wrote it
    for (const auto& [key, value] : c.n.kwargs()) {
      if (t == "aten.gelu.default" && key == "approximate") kw.emplace_back(key, value);
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId g,
                             Emit(backward, {Value::Ref(G(c.id)), Value::Ref(xb)}, std::move(kw)));
    return Accumulate(x, g);
  }

  absl::Status SoftmaxBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId y, Use(c.id));
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit(c.n.target() == "aten._softmax.default"
                                                ? "aten._softmax_backward_data.default"
                                                : "aten._log_softmax_backward_data.default",
                                            {Value::Ref(G(c.id)), Value::Ref(y), c.Arg("dim"),
                                             Value::String("torch." + xt.dtype)}));
    return Accumulate(x, g);
  }

  absl::Status LayerNormBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.Ref("input"), w = c.Ref("weight"), b = c.Ref("bias");
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId mean, ElemUse(c.id, 1));
    OVERLAP_ASSIGN_OR_RETURN(NodeId rstd, ElemUse(c.id, 2));
    OVERLAP_ASSIGN_OR_RETURN(Value wv, OptionalUse(w));
    OVERLAP_ASSIGN_OR_RETURN(Value bv, OptionalUse(b));
    const bool mask[3] = {Needs(x), w != kNoNode && Needs(w), b != kNoNode && Needs(b)};
    OVERLAP_ASSIGN_OR_RETURN(NodeId r,
                             Emit("aten.native_layer_norm_backward.default",
                                  {Value::Ref(*g0), Value::Ref(xb), c.Arg("normalized_shape"),
                                   Value::Ref(mean), Value::Ref(rstd), wv, bv, Mask(mask)},
                                  {}, Cost::Scaled(2.0), c.id));
    return Spread(r, mask, {x, w, b});
  }

  absl::Status GroupNormBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.Ref("input"), w = c.Ref("weight"), b = c.Ref("bias");
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId mean, ElemUse(c.id, 1));
    OVERLAP_ASSIGN_OR_RETURN(NodeId rstd, ElemUse(c.id, 2));
    OVERLAP_ASSIGN_OR_RETURN(Value wv, OptionalUse(w));
    const bool mask[3] = {Needs(x), w != kNoNode && Needs(w), b != kNoNode && Needs(b)};
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId r, Emit("aten.native_group_norm_backward.default",
                       {Value::Ref(*g0), Value::Ref(xb), Value::Ref(mean), Value::Ref(rstd), wv,
                        c.Arg("N"), c.Arg("C"), c.Arg("HxW"), c.Arg("group"), Mask(mask)},
                       {}, Cost::Scaled(2.0), c.id));
    return Spread(r, mask, {x, w, b});
  }

  // upsample_{nearest,bilinear}2d.vec: the backward op of the same mode, told the input's
  // size.
  absl::Status UpsampleBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    const bool bilinear = c.n.target() == "aten.upsample_bilinear2d.vec";
    std::vector<Value> args = {Value::Ref(G(c.id)), c.Arg("output_size"), Ints(xt.shape)};
    if (bilinear) args.push_back(c.Arg("align_corners"));
    args.push_back(c.Arg("scale_factors"));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit(bilinear ? "aten.upsample_bilinear2d_backward.vec"
                                                     : "aten.upsample_nearest2d_backward.vec",
                                            std::move(args), {}, Cost::Scaled(1.0), c.id));
    return Accumulate(x, g);
  }

  absl::Status AdaptivePoolBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit(c.n.target() == "aten._adaptive_avg_pool3d.default"
                           ? "aten._adaptive_avg_pool3d_backward.default"
                           : "aten._adaptive_avg_pool2d_backward.default",
                       {Value::Ref(G(c.id)), Value::Ref(xb)}, {}, Cost::Scaled(1.0), c.id));
    return Accumulate(x, g);
  }

  absl::Status BatchNormBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.Ref("input"), w = c.Ref("weight"), b = c.Ref("bias");
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId mean, ElemUse(c.id, 1));
    OVERLAP_ASSIGN_OR_RETURN(NodeId invstd, ElemUse(c.id, 2));
    OVERLAP_ASSIGN_OR_RETURN(Value wv, OptionalUse(w));
    // Evaluation mode normalizes with the running statistics: the backward reads them.
    OVERLAP_ASSIGN_OR_RETURN(Value running_mean, OptionalUse(c.Ref("running_mean")));
    OVERLAP_ASSIGN_OR_RETURN(Value running_var, OptionalUse(c.Ref("running_var")));
    const bool mask[3] = {Needs(x), w != kNoNode && Needs(w), b != kNoNode && Needs(b)};
    OVERLAP_ASSIGN_OR_RETURN(NodeId r, Emit("aten.native_batch_norm_backward.default",
                                            {Value::Ref(*g0), Value::Ref(xb), wv, running_mean,
                                             running_var, Value::Ref(mean), Value::Ref(invstd),
                                             c.Arg("training"), c.Arg("eps"), Mask(mask)},
                                            {}, Cost::Scaled(2.0), c.id));
    return Spread(r, mask, {x, w, b});
  }

  absl::Status AttentionBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId q = c.Ref("query"), k = c.Ref("key"), v = c.Ref("value");
    OVERLAP_ASSIGN_OR_RETURN(NodeId qb, Use(q));
    OVERLAP_ASSIGN_OR_RETURN(NodeId kb, Use(k));
    OVERLAP_ASSIGN_OR_RETURN(NodeId vb, Use(v));
    OVERLAP_ASSIGN_OR_RETURN(NodeId out, ElemUse(c.id, 0));
    OVERLAP_ASSIGN_OR_RETURN(NodeId lse, ElemUse(c.id, 1));
    OVERLAP_ASSIGN_OR_RETURN(TensorType qt, TypeOf(q));
    OVERLAP_ASSIGN_OR_RETURN(TensorType kt, TypeOf(k));
    ValueDict kw;
    if (!c.a.IsNone("scale")) kw.emplace_back("scale", c.Arg("scale"));
    // cum_seq_q / cum_seq_k / philox_seed / philox_offset: None (dense batches, no dropout);
    // max_q / max_k: the sequence lengths.
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId r,
        Emit("aten._scaled_dot_product_flash_attention_backward.default",
             {Value::Ref(*g0), Value::Ref(qb), Value::Ref(kb), Value::Ref(vb), Value::Ref(out),
              Value::Ref(lse), Value(), Value(), Value::Int(qt.shape[2]), Value::Int(kt.shape[2]),
              c.Arg("dropout_p"), c.Arg("is_causal"), Value(), Value()},
             std::move(kw), Cost::Scaled(2.5), c.id));
    const bool mask[3] = {Needs(q), Needs(k), Needs(v)};
    return Spread(r, mask, {q, k, v});
  }

  // max.dim: as topk's, the values' gradient scattered back to its indices; without keepdim
  // both regain the reduced dimension first. A 0-d self is its own maximum.
  absl::Status MaxDimBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    if (xt.shape.empty()) return Accumulate(x, *g0);
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, ElemUse(c.id, 1));
    const int64_t d = c.Int("dim", 0);
    const int64_t dim = d < 0 ? d + static_cast<int64_t>(xt.shape.size()) : d;
    NodeId g = *g0;
    const Value keep = c.Arg("keepdim");
    if (!(keep.kind() == Value::Kind::kBool && keep.as_bool())) {
      OVERLAP_ASSIGN_OR_RETURN(
          g, Emit("aten.unsqueeze.default", {Value::Ref(g), Value::Int(dim)}, {}, Cost::Alias()));
      OVERLAP_ASSIGN_OR_RETURN(idx, Emit("aten.unsqueeze.default",
                                         {Value::Ref(idx), Value::Int(dim)}, {}, Cost::Alias()));
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId z,
                             Emit("aten.new_zeros.default", {Value::Ref(g), Ints(xt.shape)}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId s, Emit("aten.scatter.src", {Value::Ref(z), Value::Int(dim),
                                                                 Value::Ref(idx), Value::Ref(g)}));
    return Accumulate(x, s);
  }

  absl::Status LeakyReluBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.leaky_relu_backward.default",
                                            {Value::Ref(G(c.id)), Value::Ref(xb),
                                             c.Arg("negative_slope"), Value::Bool(false)}));
    return Accumulate(x, g);
  }

  absl::Status SoftplusBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.softplus_backward.default",
                       {Value::Ref(G(c.id)), Value::Ref(xb), c.Arg("beta"), c.Arg("threshold")}));
    return Accumulate(x, g);
  }

  // prelu (1.13): prelu_backward's weight gradient has the weight's shape; _prelu_kernel
  // (2.x): its kernel's has self's, summed to the weight's as autograd sums it.
  absl::Status PreluBackward(const Call& c) {
    const NodeId x = c.First(), w = c.Ref("weight");
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId wb, Use(w));
    const bool v113 = c.n.target() == "aten.prelu.default";
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId r, Emit(v113 ? "aten.prelu_backward.default" : "aten._prelu_kernel_backward.default",
                       {Value::Ref(G(c.id)), Value::Ref(xb), Value::Ref(wb)}));
    if (Needs(x)) {
      OVERLAP_ASSIGN_OR_RETURN(NodeId gx, Item(r, 0));
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, gx));
    }
    if (!Needs(w)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId gw, Item(r, 1));
    OVERLAP_ASSIGN_OR_RETURN(TensorType wt, TypeOf(w));
    OVERLAP_ASSIGN_OR_RETURN(gw, SumTo(gw, wt.shape));
    return Accumulate(w, gw);
  }

  absl::Status PixelShuffleBackward(const Call& c) {  // each is the other's inverse
    const bool up = c.n.target() == "aten.pixel_shuffle.default";
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit(up ? "aten.pixel_unshuffle.default" : "aten.pixel_shuffle.default",
                       {Value::Ref(G(c.id)), c.Arg(up ? "upscale_factor" : "downscale_factor")}));
    return Accumulate(c.First(), g);
  }

  absl::Status TopkBackward(const Call& c) {  // values scatter back to where they came from
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, ElemUse(c.id, 1));
    OVERLAP_ASSIGN_OR_RETURN(NodeId z,
                             Emit("aten.new_zeros.default", {Value::Ref(*g0), Ints(xt.shape)}));
    const int64_t d = c.Int("dim", -1);
    const int64_t dim = d < 0 ? d + static_cast<int64_t>(xt.shape.size()) : d;
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.scatter.src",
                       {Value::Ref(z), Value::Int(dim), Value::Ref(idx), Value::Ref(*g0)}));
    return Accumulate(x, g);
  }

  absl::Status MaxPoolBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, ElemUse(c.id, 1));
    std::vector<Value> args = {Value::Ref(*g0), Value::Ref(xb)};
    for (const char* name : {"kernel_size", "stride", "padding", "dilation", "ceil_mode"}) {
      args.push_back(c.Arg(name));
    }
    args.push_back(Value::Ref(idx));
    const bool volume = c.n.target() == "aten.max_pool3d_with_indices.default";
    OVERLAP_ASSIGN_OR_RETURN(NodeId g,
                             Emit(volume ? "aten.max_pool3d_with_indices_backward.default"
                                         : "aten.max_pool2d_with_indices_backward.default",
                                  std::move(args), {}, Cost::Scaled(1.0), c.id));
    return Accumulate(x, g);
  }

  absl::Status AdaptiveMaxPoolBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, ElemUse(c.id, 1));
    const bool volume = c.n.target() == "aten.adaptive_max_pool3d.default";
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit(volume ? "aten.adaptive_max_pool3d_backward.default"
                                                   : "aten.adaptive_max_pool2d_backward.default",
                                            {Value::Ref(*g0), Value::Ref(xb), Value::Ref(idx)}, {},
                                            Cost::Scaled(1.0), c.id));
    return Accumulate(x, g);
  }

  absl::Status AvgPoolBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    std::vector<Value> args = {Value::Ref(G(c.id)), Value::Ref(xb)};
    for (const char* name : {"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                             "divisor_override"}) {
      args.push_back(c.Arg(name));
    }
    const bool volume = c.n.target() == "aten.avg_pool3d.default";
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit(volume ? "aten.avg_pool3d_backward.default"
                                                   : "aten.avg_pool2d_backward.default",
                                            std::move(args), {}, Cost::Scaled(1.0), c.id));
    return Accumulate(x, g);
  }

  absl::Status NllLossBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    if (!g0) return absl::OkStatus();
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId target, Use(c.Ref("target")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId total, ElemUse(c.id, 1));
    // Class weights, when given, are read again.
    OVERLAP_ASSIGN_OR_RETURN(Value weight, OptionalUse(c.Ref("weight")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g,
                             Emit("aten.nll_loss_backward.default",
                                  {Value::Ref(*g0), Value::Ref(xb), Value::Ref(target), weight,
                                   c.Arg("reduction"), c.Arg("ignore_index"), Value::Ref(total)}));
    return Accumulate(x, g);
  }

  absl::Status MseLossBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId target, Use(c.Ref("target")));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.mse_loss_backward.default", {Value::Ref(G(c.id)), Value::Ref(xb),
                                                          Value::Ref(target), c.Arg("reduction")}));
    return Accumulate(x, g);
  }

  absl::Status EmbeddingBackward(const Call& c) {
    const NodeId x = c.Ref("weight");
    OVERLAP_ASSIGN_OR_RETURN(TensorType wt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId ids, Use(c.Ref("indices")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g,
                             Emit("aten.embedding_dense_backward.default",
                                  {Value::Ref(G(c.id)), Value::Ref(ids), Value::Int(wt.shape[0]),
                                   c.Arg("padding_idx"), c.Arg("scale_grad_by_freq")}));
    return Accumulate(x, g);
  }

  // _embedding_bag: ATen's autograd formula, _embedding_bag_dense_backward on the forward's
  // offset2bag, bag_size and max_indices. Where the forward leaves offset2bag empty (sum mode,
  // ATen's fast path) it is rebuilt from the offsets as ATen's formula does: index i lies in
  // bag #{j >= 1 : offsets[j] <= i}, a cumsum of the later offsets counted at their positions.
  // A per_sample_weights that needs a gradient has no formula here; sparse=True gives the same
  // values densely.
  absl::Status EmbeddingBagBackward(const Call& c) {
    std::optional<NodeId> g0 = ElemGrad(c.id, 0);
    const NodeId w = c.Ref("weight");
    if (!g0 || !Needs(w)) return absl::OkStatus();
    const NodeId psw = c.Ref("per_sample_weights");
    if (psw != kNoNode && Needs(psw)) {
      return Error(c.n, "the gradient of per_sample_weights has no formula here (docs/ops.md)");
    }
    OVERLAP_ASSIGN_OR_RETURN(TensorType wt, TypeOf(w));
    OVERLAP_ASSIGN_OR_RETURN(TensorType it, TypeOf(c.Ref("indices")));
    const Types outs = StatedTypes(c.n);
    if (wt.shape.size() != 2 || it.shape.size() != 1 || outs.size() != 4) {
      return Error(c.n, "needs a 2-d weight, 1-d indices and its four stated outputs");
    }
    OVERLAP_ASSIGN_OR_RETURN(NodeId ids, Use(c.Ref("indices")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId bag_size, ElemUse(c.id, 2));
    OVERLAP_ASSIGN_OR_RETURN(NodeId max_indices, ElemUse(c.id, 3));
    NodeId offset2bag = kNoNode;
    const int64_t n = it.shape[0];
    if (outs[1].shape.size() == 1 && outs[1].shape[0] == n) {
      OVERLAP_ASSIGN_OR_RETURN(offset2bag, ElemUse(c.id, 1));
    } else {
      OVERLAP_ASSIGN_OR_RETURN(NodeId offsets, Use(c.Ref("offsets")));
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId z, Emit("aten.new_zeros.default", {Value::Ref(offsets), Ints({n + 1})}));
      OVERLAP_ASSIGN_OR_RETURN(NodeId later, Emit("aten.slice.Tensor",
                                                  {Value::Ref(offsets), Value::Int(0),
                                                   Value::Int(1), Value::Int(INT64_MAX)},
                                                  {}, Cost::Alias()));
      OVERLAP_ASSIGN_OR_RETURN(NodeId ones, Emit("aten.ones_like.default", {Value::Ref(later)}));
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId marks, Emit("aten.index_add.default",
                             {Value::Ref(z), Value::Int(0), Value::Ref(later), Value::Ref(ones)}));
      OVERLAP_ASSIGN_OR_RETURN(NodeId bags,
                               Emit("aten.cumsum.default", {Value::Ref(marks), Value::Int(0)}));
      OVERLAP_ASSIGN_OR_RETURN(
          offset2bag,
          Emit("aten.slice.Tensor", {Value::Ref(bags), Value::Int(0), Value::Int(0), Value::Int(n)},
               {}, Cost::Alias()));
    }
    Value weights = Value();
    if (psw != kNoNode) {
      OVERLAP_ASSIGN_OR_RETURN(NodeId pb, Use(psw));
      weights = Value::Ref(pb);
    }
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten._embedding_bag_dense_backward.default",
                       {Value::Ref(*g0), Value::Ref(ids), Value::Ref(offset2bag),
                        Value::Ref(bag_size), Value::Ref(max_indices), Value::Int(wt.shape[0]),
                        c.Arg("scale_grad_by_freq"), c.Arg("mode"), weights, c.Arg("padding_idx")},
                       {}, Cost::Scaled(1.0), c.id));
    return Accumulate(w, g);
  }

  absl::Status ConvolutionBackward(const Call& c) {
    const NodeId x = c.Ref("input"), w = c.Ref("weight"), b = c.Ref("bias");
    OVERLAP_ASSIGN_OR_RETURN(NodeId xb, Use(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId wb, Use(w));
    OVERLAP_ASSIGN_OR_RETURN(TensorType wt, TypeOf(w));
    const bool mask[3] = {Needs(x), Needs(w), b != kNoNode && Needs(b)};
    std::vector<Value> args = {
        Value::Ref(G(c.id)), Value::Ref(xb), Value::Ref(wb),
        b != kNoNode ? Ints({wt.shape[0]}) : Ints({0})};  // PyTorch's AOT graphs: [0]
    for (const char* name :
         {"stride", "padding", "dilation", "transposed", "output_padding", "groups"}) {
      args.push_back(c.Arg(name));
    }
    args.push_back(Mask(mask));
    OVERLAP_ASSIGN_OR_RETURN(NodeId r, Emit("aten.convolution_backward.default", std::move(args),
                                            {}, Cost::Scaled(2.0), c.id));
    return Spread(r, mask, {x, w, b});
  }

  absl::Status IndexSelectBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, Use(c.Ref("index")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId z,
                             Emit("aten.new_zeros.default", {Value::Ref(G(c.id)), Ints(xt.shape)}));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.index_add.default",
                       {Value::Ref(z), c.Arg("dim"), Value::Ref(idx), Value::Ref(G(c.id))}));
    return Accumulate(x, g);
  }

  // gather: the gradient scattered back, added where indices repeat (torch's
  // gather_backward: new_zeros, then scatter_add).
  absl::Status GatherBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, Use(c.Ref("index")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId z,
                             Emit("aten.new_zeros.default", {Value::Ref(G(c.id)), Ints(xt.shape)}));
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.scatter_add.default",
                       {Value::Ref(z), c.Arg("dim"), Value::Ref(idx), Value::Ref(G(c.id))}));
    return Accumulate(x, g);
  }

  // scatter_add: self's gradient is g, src's is g gathered at the indices. scatter (src or
  // value): self's gradient is g with the overwritten positions zeroed, src's g gathered.
  absl::Status ScatterBackward(const Call& c) {
    const NodeId x = c.First();
    const std::string& t = f_.node(c.id).target();
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, Use(c.Ref("index")));
    if (Needs(x)) {
      NodeId gx = G(c.id);
      if (t != "aten.scatter_add.default") {
        OVERLAP_ASSIGN_OR_RETURN(gx, Emit("aten.scatter.value", {Value::Ref(G(c.id)), c.Arg("dim"),
                                                                 Value::Ref(idx), Value::Int(0)}));
      }
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, gx));
    }
    if (t == "aten.scatter.value") return absl::OkStatus();
    const NodeId src = c.Ref("src");
    if (!Needs(src)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.gather.default",
                                            {Value::Ref(G(c.id)), c.Arg("dim"), Value::Ref(idx)}));
    return Accumulate(src, g);
  }

  // select_scatter: self's gradient is g with the slice zeroed, src's the slice of g.
  absl::Status SelectScatterBackward(const Call& c) {
    const NodeId x = c.First();
    const NodeId src = c.Ref("src");
    if (Needs(x)) {
      OVERLAP_ASSIGN_OR_RETURN(TensorType st, TypeOf(src));
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId z, Emit("aten.new_zeros.default", {Value::Ref(G(c.id)), Ints(st.shape)}));
      OVERLAP_ASSIGN_OR_RETURN(
          NodeId gx, Emit("aten.select_scatter.default",
                          {Value::Ref(G(c.id)), Value::Ref(z), c.Arg("dim"), c.Arg("index")}));
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, gx));
    }
    if (!Needs(src)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(
        NodeId g, Emit("aten.select.int", {Value::Ref(G(c.id)), c.Arg("dim"), c.Arg("index")}));
    return Accumulate(src, g);
  }

  // cumsum: the reversed cumulative sum of g along dim (torch's cumsum_backward).
  absl::Status CumsumBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    const Value dims = Value::List({c.Arg("dim")});
    OVERLAP_ASSIGN_OR_RETURN(NodeId f, Emit("aten.flip.default", {Value::Ref(G(c.id)), dims}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId s, Emit("aten.cumsum.default", {Value::Ref(f), c.Arg("dim")}));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.flip.default", {Value::Ref(s), dims}));
    return Accumulate(x, g);
  }

  absl::Status FlipBackward(const Call& c) {
    const NodeId x = c.First();
    if (!Needs(x)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId g,
                             Emit("aten.flip.default", {Value::Ref(G(c.id)), c.Arg("dims")}));
    return Accumulate(x, g);
  }

  absl::Status IndexAddBackward(const Call& c) {
    if (!c.AlphaIsOne()) return Error(c.n, "alpha other than 1 has no formula here (docs/ops.md)");
    OVERLAP_RETURN_IF_ERROR(Accumulate(c.First(), G(c.id)));
    const NodeId src = c.Ref("source");
    if (!Needs(src)) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(NodeId idx, Use(c.Ref("index")));
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.index_select.default",
                                            {Value::Ref(G(c.id)), c.Arg("dim"), Value::Ref(idx)}));
    return Accumulate(src, g);
  }

  absl::Status SliceBackward(const Call& c) {
    const NodeId x = c.First();
    OVERLAP_ASSIGN_OR_RETURN(TensorType xt, TypeOf(x));
    // slice_backward takes no None: the values slice.Tensor's None stands for.
    const int64_t dim = c.Int("dim", 0);
    const int64_t d = dim < 0 ? dim + static_cast<int64_t>(xt.shape.size()) : dim;
    const int64_t end =
        d >= 0 && d < static_cast<int64_t>(xt.shape.size()) ? xt.shape[d] : int64_t{0};
    std::vector<Value> args = {Value::Ref(G(c.id)),
                               Ints(xt.shape),
                               Value::Int(dim),
                               Value::Int(c.Int("start", 0)),
                               Value::Int(c.Int("end", end)),
                               Value::Int(c.Int("step", 1))};
    OVERLAP_ASSIGN_OR_RETURN(NodeId g, Emit("aten.slice_backward.default", std::move(args)));
    return Accumulate(x, g);
  }

  // split's missing pieces borrow any existing element gradient for new_zeros' dtype.
  NodeId x_first_grad(NodeId tuple) const {
    for (const auto& [key, g] : elem_grad_) {
      if (key.first == tuple) return g;
    }
    return kNoNode;
  }

  static Value Mask(const bool (&mask)[3]) {
    return Value::List({Value::Bool(mask[0]), Value::Bool(mask[1]), Value::Bool(mask[2])});
  }

  // The forward tuple element `i` of node `t`, as the backward reads it (saved).
  absl::StatusOr<NodeId> ElemUse(NodeId t, int i) {
    OVERLAP_ASSIGN_OR_RETURN(NodeId e, Elem(t, i));
    return Use(e);
  }

  // Hands element i of backward tuple `r` to forward input ins[i] where mask[i].
  absl::Status Spread(NodeId r, const bool (&mask)[3], std::initializer_list<NodeId> ins) {
    int i = 0;
    for (NodeId in : ins) {
      if (mask[i] && in != kNoNode) {
        OVERLAP_ASSIGN_OR_RETURN(NodeId gi, Item(r, i));
        OVERLAP_RETURN_IF_ERROR(Accumulate(in, gi));
      }
      ++i;
    }
    return absl::OkStatus();
  }

  // ---- tangents and the two outputs ----------------------------------------------------

  absl::Status SeedTangents() {
    const Node& out = f_.node(f_.last());
    if (!out.args().empty()) {
      const Value& ret = out.args()[0];
      if (ret.kind() == Value::Kind::kList) {
        for (const Value& v : ret.items()) outputs_.push_back(v.is_ref() ? v.as_ref() : kNoNode);
      } else {
        outputs_.push_back(ret.is_ref() ? ret.as_ref() : kNoNode);
      }
    }
    int k = 0;
    for (NodeId v : outputs_) {
      if (v == kNoNode || !Needs(v) || grad_.contains(v)) continue;
      const Types types = StatedTypes(f_.node(v));
      if (types.size() != 1) return Error(f_.node(v), "a tuple output has no tangent rule");
      const std::string name = Fresh(absl::StrCat("tangents_", ++k));
      OVERLAP_ASSIGN_OR_RETURN(NodeId tp, b_.AddNode(Op::kPlaceholder, name, name));
      SetTypes(&b_, tp, types);
      b_.mutable_node(tp).mutable_meta().set_device_time(0);
      tangents_.push_back(tp);
      grad_[v] = tp;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<AotPair> Finish() {
    AotPair pair;
    // Backward output: per forward placeholder, its gradient or null.
    std::vector<Value> grads;
    for (NodeId id : f_.order()) {
      const Node& n = f_.node(id);
      if (n.op() != Op::kPlaceholder) continue;
      auto it = grad_.find(id);
      if (!n.meta().has_param || it == grad_.end()) {
        grads.push_back(Value());
        continue;
      }
      NodeId g = it->second;
      const Node& gn = b_.node(g);
      if (gn.op() == Op::kPlaceholder || gn.meta().has_grad_of || gn.users().size() > 0) {
        // The gradient must be a node of its own (meta.grad_of marks where it is final).
        OVERLAP_ASSIGN_OR_RETURN(g, Emit("aten.clone.default", {Value::Ref(g)}));
      }
      b_.mutable_node(g).mutable_meta().set_grad_of(n.meta().param);
      grads.push_back(Value::Ref(g));
    }
    OVERLAP_RETURN_IF_ERROR(
        b_.AddNode(Op::kOutput, "output", "output", {Value::List(std::move(grads))}).status());
    // The whole parameter table (rows whose primal the backward does not read are absent).
    for (const Param& p : f_.params()) OVERLAP_RETURN_IF_ERROR(b_.AddParam(p));
    // Placeholders first: primals, saved (both in forward order), tangents.
    auto by_forward_position = [&](std::vector<NodeId>* v) {
      absl::flat_hash_map<NodeId, int64_t> pos;
      int64_t i = 0;
      for (NodeId id : fwd_.order()) pos[id] = i++;
      std::sort(v->begin(), v->end(), [&](NodeId a, NodeId b) { return pos[a] < pos[b]; });
    };
    by_forward_position(&primals_);
    by_forward_position(&saved_);
    std::vector<NodeId> order;
    for (NodeId p : primals_) order.push_back(in_b_.at(p));
    for (NodeId s : saved_) order.push_back(in_b_.at(s));
    order.insert(order.end(), tangents_.begin(), tangents_.end());
    for (NodeId id : b_.order()) {
      if (b_.node(id).op() != Op::kPlaceholder) order.push_back(id);
    }
    OVERLAP_RETURN_IF_ERROR(b_.SetOrder(order));
    // Forward output: its own outputs, then the saved tensors.
    std::vector<Value> rets;
    for (NodeId v : outputs_) rets.push_back(v == kNoNode ? Value() : Value::Ref(v));
    absl::flat_hash_set<NodeId> storages;  // a saved view and its base are one storage
    for (NodeId s : saved_) {
      rets.push_back(Value::Ref(s));
      NodeId root = s;
      while (IsView(fwd_.node(root)) && !fwd_.node(root).inputs().empty()) {
        root = fwd_.node(root).inputs()[0];
      }
      if (storages.insert(root).second) pair.saved_bytes += VerifiedValueBytes(fwd_.node(root));
    }
    OVERLAP_RETURN_IF_ERROR(fwd_.SetArgs(fwd_.last(), {Value::List(std::move(rets))}, {}));
    pair.num_outputs = static_cast<int64_t>(outputs_.size());
    pair.num_saved = static_cast<int64_t>(saved_.size());
    pair.num_primals = static_cast<int64_t>(primals_.size());
    pair.forward = std::move(fwd_);
    pair.backward = std::move(b_);
    return pair;
  }

  const Graph& f_;
  Graph fwd_;
  Graph b_;
  CostModel cost_;
  std::vector<char> needs_;  // per forward id (of f_)
  absl::flat_hash_map<NodeId, NodeId> grad_;
  absl::flat_hash_map<std::pair<NodeId, int>, NodeId> elem_grad_;
  absl::flat_hash_set<NodeId> tuples_with_grad_;
  absl::flat_hash_map<NodeId, NodeId> in_b_;  // forward value -> backward node
  std::vector<NodeId> primals_, saved_, tangents_, outputs_;
  absl::flat_hash_set<std::string> taken_;
  absl::flat_hash_map<std::string, int64_t> next_;
};

const absl::flat_hash_set<std::string>& Formulas() {
  static const auto* s = [] {
    auto* set = new absl::flat_hash_set<std::string>{"operator.getitem"};
    for (const auto& [target, formula] : AotBuilder::FormulaTable()) set->insert(target);
    return set;
  }();
  return *s;
}

}  // namespace

bool HasBackwardFormula(absl::string_view target) {
  return Formulas().contains(target) || NonDifferentiable().contains(target);
}

absl::StatusOr<AotPair> BuildAotPair(const Graph& forward, const AotOptions& options) {
  return AotBuilder(forward, options).Run();
}

namespace {

// DropSavedOutputs on a pair's forward; num_saved follows.
absl::Status DropSavedPairOutputs(AotPair* pair, const absl::flat_hash_set<std::string>& names,
                                  int64_t tangents) {
  OVERLAP_ASSIGN_OR_RETURN(const int64_t dropped,
                           DropSavedOutputs(&pair->forward, names, tangents));
  if (pair->num_saved >= dropped) pair->num_saved -= dropped;
  return absl::OkStatus();
}

// A view of its one input that keeps the elements' row-major order: a reshape, an alias,
// or an expand to the input's own shape (what a decomposed matmul makes of its operand).
bool IsReshapeLikeView(const Graph& g, const Node& n) {
  static const absl::flat_hash_set<absl::string_view> kReshapes = {
      "aten.view.default",           "aten._unsafe_view.default", "aten.reshape.default",
      "aten._reshape_alias.default", "aten.alias.default",        "aten.detach.default"};
  if (n.op() != Op::kCallFunction || !IsView(n) || n.inputs().size() != 1) return false;
  if (kReshapes.contains(n.target())) return true;
  const NodeMeta& in = g.node(n.inputs()[0]).meta();
  return n.target() == "aten.expand.default" && n.meta().has_shape && in.has_shape &&
         in.shape == n.meta().shape;
}

}  // namespace

absl::StatusOr<int64_t> ShareSavedReshapes(AotPair* pair) {
  Graph& f = pair->forward;
  Graph& b = pair->backward;
  const NodeId out_id = ForwardOutputList(f);
  if (out_id == kNoNode || b.size() == 0) return 0;
  const std::vector<Value> items = f.node(out_id).args()[0].items();
  BackwardInputs in = ReadBackwardInputs(b);
  absl::flat_hash_map<std::string, NodeId>& placeholder = in.placeholder;
  // Saved items by the node their reshapes reach; the first of each group stays.
  absl::flat_hash_map<NodeId, NodeId> kept;  // reached node -> the kept item's forward node
  absl::flat_hash_set<std::string> removed;
  for (size_t i = static_cast<size_t>(in.tangents); i < items.size(); ++i) {
    if (!items[i].is_ref()) continue;
    const NodeId s = items[i].as_ref();
    auto p = placeholder.find(f.node(s).name());
    if (p == placeholder.end()) continue;
    NodeId reached = s;
    while (IsReshapeLikeView(f, f.node(reached))) reached = f.node(reached).inputs()[0];
    auto [it, first] = kept.emplace(reached, s);
    if (first || it->second == s) continue;
    const Node& keep_p = b.node(placeholder.at(f.node(it->second).name()));
    const Node& drop_p = b.node(p->second);
    const NodeMeta& km = keep_p.meta();
    const NodeMeta& dm = drop_p.meta();
    // The same elements: one dtype and byte count, and a shape to reshape to.
    if (!dm.has_shape || !km.has_dtype || !dm.has_dtype || km.dtype != dm.dtype ||
        VerifiedValueBytes(keep_p) != VerifiedValueBytes(drop_p)) {
      continue;
    }
    std::vector<Value> shape;
    for (int64_t d : dm.shape) shape.push_back(Value::Int(d));
    const std::string name = drop_p.name();
    const NodeId old_id = drop_p.id();
    NodeMeta meta = dm;
    meta.set_aliases_input(true);
    OVERLAP_RETURN_IF_ERROR(b.Rename(old_id, absl::StrCat(name, "__shared_saved")));
    OVERLAP_ASSIGN_OR_RETURN(const NodeId view,
                             b.AddNode(Op::kCallFunction, name, "aten.reshape.default",
                                       {Value::Ref(keep_p.id()), Value::List(std::move(shape))}, {},
                                       InsertPoint::After(in.last)));
    b.mutable_node(view).mutable_meta() = std::move(meta);
    b.ReplaceAllUsesWith(old_id, view);
    OVERLAP_RETURN_IF_ERROR(b.Erase(old_id));
    placeholder.erase(p);
    removed.insert(name);
  }
  OVERLAP_RETURN_IF_ERROR(DropSavedPairOutputs(pair, removed, in.tangents));
  return static_cast<int64_t>(removed.size());
}

absl::StatusOr<int64_t> AliasLastUseClones(Graph* g) {
  int64_t changed = 0;
  std::vector<NodeId> clones;
  for (NodeId id : g->order()) {
    const Node& n = g->node(id);
    if (n.op() == Op::kCallFunction && n.target() == "aten.clone.default") clones.push_back(id);
  }
  for (NodeId id : clones) {
    const Node& c = g->node(id);
    if (c.inputs().size() != 1 || c.args().empty() || !c.args()[0].is_ref()) continue;
    const Node& x = g->node(c.inputs()[0]);
    if (x.users().size() != 1) continue;
    // The layout asked for: none, or contiguous / preserved (every buffer here is
    // contiguous).
    bool contiguous = true;
    for (const auto& [k, v] : c.kwargs()) {
      if (k != "memory_format" || v.is_none()) continue;
      contiguous &=
          v.kind() == Value::Kind::kString &&
          (v.as_string() == "torch.contiguous_format" || v.as_string() == "torch.preserve_format");
    }
    if (!contiguous) continue;
    bool own_buffer = false;
    if (x.op() == Op::kPlaceholder) {
      own_buffer = g->ParamsOwnedBy(x.name()).empty() && !x.meta().has_param;
    } else if (x.op() == Op::kCallFunction) {
      own_buffer = !SharesInputStorage(x);
    }
    if (!own_buffer) continue;
    g->set_target(id, "aten.detach.default");
    OVERLAP_RETURN_IF_ERROR(g->SetArgs(id, {Value::Ref(x.id())}, {}));
    g->mutable_node(id).mutable_meta().set_aliases_input(true);
    ++changed;
  }
  return changed;
}

namespace {

// Through clones and aliases of the same shape (detach, alias) to the value they copy.
NodeId ThroughCopies(const Graph& g, NodeId id) {
  while (true) {
    const Node& n = g.node(id);
    if (n.op() != Op::kCallFunction || n.inputs().size() != 1) return id;
    if (n.target() != "aten.clone.default" && n.target() != "aten.detach.default" &&
        n.target() != "aten.alias.default") {
      return id;
    }
    id = n.inputs()[0];
  }
}

std::optional<double> NumberArg(const Node& n, size_t i) {
  if (n.args().size() <= i) return std::nullopt;
  const Value& v = n.args()[i];
  if (v.kind() == Value::Kind::kDouble) return v.as_double();
  if (v.kind() == Value::Kind::kInt) return static_cast<double>(v.as_int());
  return std::nullopt;
}

}  // namespace

absl::StatusOr<int64_t> MaskActivationBackwardsByOutputs(AotPair* pair) {
  Graph& f = pair->forward;
  Graph& b = pair->backward;
  if (ForwardOutputList(f) == kNoNode || b.size() == 0) return 0;
  const BackwardInputs in = ReadBackwardInputs(b);
  const absl::flat_hash_map<std::string, NodeId>& placeholder = in.placeholder;
  // The forward's saved hardtanh outputs by the value (through copies) they clamp.
  absl::flat_hash_map<NodeId, std::vector<NodeId>> hardtanh_of;
  for (NodeId id : f.order()) {
    const Node& n = f.node(id);
    if (n.op() == Op::kCallFunction && n.target() == "aten.hardtanh.default" &&
        n.kwargs().empty() && n.args().size() == 3 && n.args()[0].is_ref() &&
        placeholder.contains(n.name())) {
      hardtanh_of[ThroughCopies(f, n.args()[0].as_ref())].push_back(id);
    }
  }
  int64_t rewritten = 0;
  std::vector<NodeId> maybe_dead;
  std::vector<NodeId> backwards;
  for (NodeId id : b.order()) {
    const Node& n = b.node(id);
    if (n.op() == Op::kCallFunction && n.target() == "aten.hardtanh_backward.default" &&
        n.kwargs().empty() && n.args().size() == 4 && n.args()[1].is_ref()) {
      backwards.push_back(id);
    }
  }
  for (NodeId id : backwards) {
    const Node& n = b.node(id);
    const std::optional<double> lo = NumberArg(n, 2), hi = NumberArg(n, 3);
    if (!lo || !hi || !(*lo <= *hi)) continue;
    const NodeId self = n.args()[1].as_ref();
    const NodeId saved = ThroughCopies(b, self);
    if (b.node(saved).op() != Op::kPlaceholder) continue;
    const NodeId in_forward = f.FindNode(b.node(saved).name());
    if (in_forward == kNoNode) continue;
    auto it = hardtanh_of.find(ThroughCopies(f, in_forward));
    if (it == hardtanh_of.end()) continue;
    for (NodeId h : it->second) {
      const Node& hn = f.node(h);
      if (NumberArg(hn, 1) != lo || NumberArg(hn, 2) != hi) continue;
      const NodeId out_p = placeholder.at(hn.name());
      const NodeMeta& om = b.node(out_p).meta();
      const NodeMeta& sm = b.node(self).meta();
      if (!om.has_shape || !sm.has_shape || om.shape != sm.shape || om.dtype != sm.dtype) break;
      std::vector<Value> args = n.args();
      args[1] = Value::Ref(out_p);
      for (NodeId x = self;; x = b.node(x).inputs()[0]) {  // the copies, then the placeholder
        maybe_dead.push_back(x);
        if (x == saved) break;
      }
      OVERLAP_RETURN_IF_ERROR(b.SetArgs(id, std::move(args), n.kwargs()));
      ++rewritten;
      break;
    }
  }
  // What the rewrites left unread: the copies, then saved placeholders (out of the forward's
  // outputs too; only past the tangents' indices).
  absl::flat_hash_set<std::string> unsaved;
  for (NodeId x : maybe_dead) {
    if (!b.IsLive(x) || !b.node(x).users().empty()) continue;
    if (b.node(x).op() == Op::kPlaceholder) {
      unsaved.insert(b.node(x).name());
    }
    OVERLAP_RETURN_IF_ERROR(b.Erase(x));
  }
  OVERLAP_RETURN_IF_ERROR(DropSavedPairOutputs(pair, unsaved, in.tangents));
  return rewritten;
}

absl::StatusOr<int64_t> DropIdentitySliceBackwards(Graph* g) {
  std::vector<NodeId> slices;
  for (NodeId id : g->order()) {
    const Node& n = g->node(id);
    if (n.op() == Op::kCallFunction && n.target() == "aten.slice_backward.default") {
      slices.push_back(id);
    }
  }
  int64_t dropped = 0;
  for (NodeId id : slices) {  // in order: a chain's later links see the earlier ones gone
    const Node& n = g->node(id);
    const std::vector<Value>& a = n.args();
    if (!n.kwargs().empty() || a.size() != 6 || !a[0].is_ref() ||
        a[1].kind() != Value::Kind::kList || a[2].kind() != Value::Kind::kInt ||
        a[3].kind() != Value::Kind::kInt || a[4].kind() != Value::Kind::kInt ||
        a[5].kind() != Value::Kind::kInt) {
      continue;
    }
    const Node& x = g->node(a[0].as_ref());
    if (x.op() != Op::kCallFunction || SharesInputStorage(x) || !x.meta().has_shape) continue;
    const std::vector<Value>& sizes = a[1].items();
    const Shape& shape = x.meta().shape;
    if (sizes.size() != shape.size()) continue;
    bool same = true;
    for (size_t d = 0; d < sizes.size(); ++d) {
      same = same && sizes[d].kind() == Value::Kind::kInt && sizes[d].as_int() == shape[d];
    }
    int64_t dim = a[2].as_int();
    const int64_t rank = static_cast<int64_t>(shape.size());
    if (dim < 0) dim += rank;
    if (!same || dim < 0 || dim >= rank || a[3].as_int() != 0 || a[4].as_int() < shape[dim] ||
        a[5].as_int() != 1) {
      continue;
    }
    g->ReplaceAllUsesWith(id, x.id());
    OVERLAP_RETURN_IF_ERROR(g->Erase(id));
    ++dropped;
  }
  return dropped;
}

absl::StatusOr<int64_t> TightenPairMemory(AotPair* pair) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t changed, ShareSavedReshapes(pair));
  OVERLAP_ASSIGN_OR_RETURN(const int64_t masks, MaskActivationBackwardsByOutputs(pair));
  changed += masks;
  OVERLAP_ASSIGN_OR_RETURN(const int64_t f, AliasLastUseClones(&pair->forward));
  OVERLAP_ASSIGN_OR_RETURN(const int64_t b, AliasLastUseClones(&pair->backward));
  OVERLAP_ASSIGN_OR_RETURN(const int64_t s, DropIdentitySliceBackwards(&pair->backward));
  return changed + f + b + s;
}

}  // namespace overlap
