#include "graph/shape_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "graph/op_schema.h"
#include "graph/status_macros.h"
#include "graph/text.h"
#include "graph/type_promotion.h"

namespace overlap {
namespace {

using Types = std::vector<TensorType>;
using Result = absl::StatusOr<Types>;

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string FormatShape(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

bool IsFloating(absl::string_view d) { return CategoryOf(d) == DtypeCategory::kFloating; }

// The floating dtype PyTorch accumulates statistics in (layer / batch norm's mean and rstd).
std::string AccDtype(const std::string& d) {
  return d == "float16" || d == "bfloat16" ? "float32" : d;
}

// A tensor as an operand of type promotion (graph/type_promotion.h).
PromotionOperand Operand(const TensorType& t) {
  return PromotionOperand::Tensor(t.dtype, static_cast<int64_t>(t.shape.size()));
}

// The type of a tuple's undefined element: an output a backward's mask leaves out (null in
// a node's `shapes` / `dtypes`).
constexpr absl::string_view kUndefinedDtype = "none";
TensorType Undefined() { return TensorType{{}, std::string(kUndefinedDtype)}; }

// `t` with the elements `mask` leaves out undefined.
std::vector<TensorType> Masked(std::vector<TensorType> t, const std::vector<bool>& mask) {
  for (size_t i = 0; i < t.size() && i < mask.size(); ++i) {
    if (!mask[i]) t[i] = Undefined();
  }
  return t;
}

// operator.getitem is not an ATen operator: the one target read by a schema of its own.
const OpSchema& GetItemSchema() {
  static const OpSchema* s = [] {
    auto* schema = new OpSchema();
    schema->target = "operator.getitem";
    schema->signature = "getitem(Any self, int index) -> Any";
    schema->args.resize(2);
    schema->args[0].name = "self";
    schema->args[0].type = ArgType::kOther;
    schema->args[1].name = "index";
    schema->args[1].type = ArgType::kInt;
    return schema;
  }();
  return *s;
}

// A node's arguments, read by name through its operator's schema (graph/op_schema.h): given
// by position or keyword, else the declared default.
class Args {
 public:
  Args(const Graph& g, const Node& n)
      : g_(g),
        n_(n),
        bound_(n.target() == "operator.getitem" ? OpArgs::Bind(n, GetItemSchema())
                                                : OpArgs::Bind(n)) {}

  // The schema's refusal of the node's arguments (undeclared target, unknown or surplus
  // arguments), checked before any rule reads them.
  absl::Status bound() const { return bound_.status(); }

  const Node& node() const { return n_; }
  const Graph& graph() const { return g_; }

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("node \"", n_.name(), "\" (", Printable(n_.target()), "): ", what));
  }

  // The argument `name`: given, else the schema's default; nullptr when neither.
  const Value* Get(absl::string_view name) const {
    return bound_.ok() ? bound_->Get(name) : nullptr;
  }

  // Whether the node's schema has an argument `name`.
  bool Declares(absl::string_view name) const {
    return bound_.ok() && bound_->schema().Position(name) >= 0;
  }

  // Whether the schema declares `name` as a number (Scalar), not a tensor.
  bool DeclaresNumber(absl::string_view name) const {
    if (!Declares(name)) return false;
    const OpSchema& s = bound_->schema();
    return s.arg(s.Position(name)).type == ArgType::kScalar;
  }

  // A dtype decided by graph/type_promotion.h, its refusal as an error naming the node.
  absl::StatusOr<std::string> Decided(absl::StatusOr<std::string> dtype) const {
    if (!dtype.ok()) return Error(std::string(dtype.status().message()));
    return dtype;
  }

  // The argument `name` as an operand of type promotion: a tensor, or a Python number.
  absl::StatusOr<PromotionOperand> OperandOf(absl::string_view name) const {
    const Value* v = Get(name);
    if (v != nullptr && !v->is_ref()) {
      std::optional<PromotionOperand> number = PromotionOperand::Number(*v);
      if (!number)
        return Error(absl::StrCat("argument ", name, " is neither a tensor nor a number"));
      return *number;
    }
    OVERLAP_ASSIGN_OR_RETURN(TensorType t, Tensor(name));
    return Operand(t);
  }

  bool IsNone(absl::string_view name) const {
    const Value* v = Get(name);
    return v == nullptr || v->is_none();
  }

  absl::StatusOr<Types> TypesOf(const Value& v, absl::string_view name) const {
    if (!v.is_ref()) return Error(absl::StrCat("argument ", name, " is not a node"));
    const Node& in = g_.node(v.as_ref());
    Types t = StatedTypes(in);
    if (t.empty()) {
      return Error(absl::StrCat("argument ", name, " (node \"", in.name(),
                                "\") has no stated shape and dtype"));
    }
    return t;
  }

  absl::StatusOr<Types> Tuple(absl::string_view name) const {
    const Value* v = Get(name);
    if (v == nullptr) return Error(absl::StrCat("missing argument ", name));
    return TypesOf(*v, name);
  }

  absl::StatusOr<TensorType> Tensor(absl::string_view name) const {
    OVERLAP_ASSIGN_OR_RETURN(Types t, Tuple(name));
    if (t.size() != 1) {
      return Error(absl::StrCat("argument ", name, " is a tuple of ", t.size(), ", not a tensor"));
    }
    return t[0];
  }

  // A tensor, or nullopt when the argument is absent or None.
  absl::StatusOr<std::optional<TensorType>> OptionalTensor(absl::string_view name) const {
    if (IsNone(name)) return std::optional<TensorType>();
    OVERLAP_ASSIGN_OR_RETURN(TensorType t, Tensor(name));
    return std::optional<TensorType>(std::move(t));
  }

  absl::StatusOr<Types> TensorList(absl::string_view name) const {
    const Value* v = Get(name);
    if (v == nullptr || v->kind() != Value::Kind::kList) {
      return Error(absl::StrCat("argument ", name, " is not a list of nodes"));
    }
    Types out;
    for (const Value& item : v->items()) {
      OVERLAP_ASSIGN_OR_RETURN(Types t, TypesOf(item, name));
      if (t.size() != 1) return Error(absl::StrCat("argument ", name, " holds a tuple"));
      out.push_back(std::move(t[0]));
    }
    return out;
  }

  absl::StatusOr<int64_t> Int(absl::string_view name,
                              std::optional<int64_t> fallback = std::nullopt) const {
    const Value* v = Get(name);
    if (v == nullptr || v->is_none()) {
      if (fallback) return *fallback;
      return Error(absl::StrCat("missing argument ", name));
    }
    if (v->kind() == Value::Kind::kInt) return v->as_int();
    if (v->kind() == Value::Kind::kBool) return v->as_bool() ? 1 : 0;
    return Error(absl::StrCat("argument ", name, " is not an integer"));
  }

  absl::StatusOr<double> Number(absl::string_view name) const {
    const Value* v = Get(name);
    if (v != nullptr && v->kind() == Value::Kind::kInt) return static_cast<double>(v->as_int());
    if (v != nullptr && v->kind() == Value::Kind::kDouble) return v->as_double();
    return Error(absl::StrCat("argument ", name, " is not a number"));
  }

  // A backward's output_mask (default: every output).
  absl::StatusOr<std::vector<bool>> Mask() const {
    const Value* v = Get("output_mask");
    if (v == nullptr || v->is_none()) return std::vector<bool>{true, true, true};
    if (v->kind() != Value::Kind::kList) return Error("output_mask is not a list");
    std::vector<bool> out;
    for (const Value& b : v->items()) {
      if (b.kind() != Value::Kind::kBool) return Error("output_mask holds a non-bool");
      out.push_back(b.as_bool());
    }
    return out;
  }

  absl::StatusOr<bool> Bool(absl::string_view name,
                            std::optional<bool> fallback = std::nullopt) const {
    const Value* v = Get(name);
    if (v == nullptr || v->is_none()) {
      if (fallback) return *fallback;
      return Error(absl::StrCat("missing argument ", name));
    }
    if (v->kind() == Value::Kind::kBool) return v->as_bool();
    if (v->kind() == Value::Kind::kInt) return v->as_int() != 0;
    return Error(absl::StrCat("argument ", name, " is not a bool"));
  }

  // A list of ints; a single int stands for a list of `repeat` copies of it (PyTorch's
  // int[2] arguments accept one int).
  absl::StatusOr<std::vector<int64_t>> Ints(absl::string_view name,
                                            std::optional<std::vector<int64_t>> fallback = {},
                                            int repeat = 1) const {
    const Value* v = Get(name);
    // None, or an empty list where the caller says what that means (max_pool2d's stride=[]:
    // the kernel size).
    if (v == nullptr || v->is_none() ||
        (fallback && v->kind() == Value::Kind::kList && v->items().empty())) {
      if (fallback) return *fallback;
      return Error(absl::StrCat("missing argument ", name));
    }
    if (v->kind() == Value::Kind::kInt) return std::vector<int64_t>(repeat, v->as_int());
    if (v->kind() != Value::Kind::kList) {
      return Error(absl::StrCat("argument ", name, " is not a list of integers"));
    }
    std::vector<int64_t> out;
    for (const Value& item : v->items()) {
      if (item.kind() != Value::Kind::kInt) {
        return Error(absl::StrCat("argument ", name, " is not a list of integers"));
      }
      out.push_back(item.as_int());
    }
    return out;
  }

  // An optional dtype keyword (`dtype=torch.float32`); empty when absent or None.
  std::string DtypeKwarg(absl::string_view name = "dtype") const {
    const Value* v = Get(name);
    if (v == nullptr || v->kind() != Value::Kind::kString) return "";
    return CanonicalDtype(v->as_string());
  }

  // Dimension `d` of a rank-`rank` tensor, negative counting from the end.
  absl::StatusOr<int64_t> Dim(int64_t d, int64_t rank, absl::string_view name) const {
    const int64_t r = std::max<int64_t>(rank, 1);
    if (d < -r || d >= r) {
      return Error(absl::StrCat(name, " ", d, " is out of range for rank ", rank));
    }
    return d < 0 ? d + r : d;
  }

 private:
  const Graph& g_;
  const Node& n_;
  absl::StatusOr<OpArgs> bound_;
};

// Broadcasts two shapes (numpy rules).
absl::StatusOr<Shape> Broadcast(const Args& a, const Shape& x, const Shape& y) {
  Shape out(std::max(x.size(), y.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t dx = i < x.size() ? x[x.size() - 1 - i] : 1;
    const int64_t dy = i < y.size() ? y[y.size() - 1 - i] : 1;
    if (dx != dy && dx != 1 && dy != 1) {
      return a.Error(
          absl::StrCat("shapes ", FormatShape(x), " and ", FormatShape(y), " do not broadcast"));
    }
    out[out.size() - 1 - i] = dx == 1 ? dy : dx;
  }
  return out;
}

Types One(Shape s, std::string dtype) { return {TensorType{std::move(s), std::move(dtype)}}; }

absl::Status SameShape(const Args& a, const TensorType& x, const TensorType& y,
                       absl::string_view what) {
  if (x.shape == y.shape) return absl::OkStatus();
  return a.Error(absl::StrCat(what, ": ", FormatShape(x.shape), " vs ", FormatShape(y.shape)));
}

// ---- rules ------------------------------------------------------------------------------

Result Identity(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  const std::string d = a.DtypeKwarg();
  if (!d.empty()) x.dtype = d;
  return Types{x};
}

// add / sub / mul / div (.Tensor, .Scalar, .Tensor_mode): self and other (a tensor, or a
// number) broadcast; the dtype is ArithmeticResultType's (graph/type_promotion.h).
Result Binary(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  const Value* other = a.Get("other");
  if (other == nullptr) return a.Error("missing argument other");
  if (other->is_ref() && a.DeclaresNumber("other")) {
    return a.Error("argument other is not a number");
  }
  OVERLAP_ASSIGN_OR_RETURN(PromotionOperand y, a.OperandOf("other"));
  Shape shape = x.shape;
  if (other->is_ref()) {
    OVERLAP_ASSIGN_OR_RETURN(TensorType t, a.Tensor("other"));
    OVERLAP_ASSIGN_OR_RETURN(shape, Broadcast(a, x.shape, t.shape));
  }
  const std::string& target = a.node().target();
  const ArithmeticOp op = absl::StartsWith(target, "aten.sub.")    ? ArithmeticOp::kSub
                          : absl::StartsWith(target, "aten.mul.")  ? ArithmeticOp::kMul
                          : target == "aten.floor_divide.default"  ? ArithmeticOp::kRoundingDivide
                          : !absl::StartsWith(target, "aten.div.") ? ArithmeticOp::kAdd
                          : a.IsNone("rounding_mode")              ? ArithmeticOp::kTrueDivide
                                                                   : ArithmeticOp::kRoundingDivide;
  OVERLAP_ASSIGN_OR_RETURN(std::string dtype, a.Decided(ArithmeticResultType(op, {Operand(x), y})));
  if (const Value* alpha = a.Get("alpha"); alpha != nullptr) {
    const absl::Status s = CheckAlpha(dtype, *alpha);
    if (!s.ok()) return a.Error(std::string(s.message()));
  }
  return One(std::move(shape), std::move(dtype));
}

// pow(self, exponent) with a number exponent: result_type of the two (an integer tensor to
// an integer power stays integral; to a float power it is float32).
Result PowScalar(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(PromotionOperand e, a.OperandOf("exponent"));
  OVERLAP_ASSIGN_OR_RETURN(x.dtype, a.Decided(ResultType({Operand(x), e})));
  return Types{x};
}

// A pointwise op (OpSchema::pointwise): the tensor operands broadcast, or, for a backward
// (first argument grad_output), have one shape, as the kernels take them; the dtype by the
// schema's DtypeRule over the tensor and number operands (graph/type_promotion.h).
Result Pointwise(const Args& a) {
  const OpSchema* schema = FindOpSchema(a.node().target());
  if (schema == nullptr) return a.Error("no declaration");
  std::vector<PromotionOperand> operands;
  std::optional<TensorType> first;
  Shape shape;
  const bool backward = !schema->args.empty() && schema->arg(0).name == "grad_output";
  for (const ArgSchema& arg : schema->args) {
    if (arg.type == ArgType::kTensor) {
      OVERLAP_ASSIGN_OR_RETURN(TensorType t, a.Tensor(arg.name));
      operands.push_back(Operand(t));
      if (!first) {
        first = t;
        shape = t.shape;
      } else if (backward) {
        OVERLAP_RETURN_IF_ERROR(
            SameShape(a, *first, t, absl::StrCat("grad_output and ", arg.name, " differ")));
      } else {
        OVERLAP_ASSIGN_OR_RETURN(shape, Broadcast(a, shape, t.shape));
      }
    } else if (arg.type == ArgType::kScalar && !a.IsNone(arg.name)) {
      OVERLAP_ASSIGN_OR_RETURN(PromotionOperand number, a.OperandOf(arg.name));
      operands.push_back(std::move(number));
    }
  }
  if (!first) return a.Error("a pointwise op without a tensor operand");
  switch (schema->dtype) {
    case DtypeRule::kFirstTensor:
      return One(std::move(shape), first->dtype);
    case DtypeRule::kBool:
      OVERLAP_RETURN_IF_ERROR(a.Decided(ResultType(operands)).status());
      return One(std::move(shape), std::string(kComparisonDtype));
    case DtypeRule::kPromoted:
    case DtypeRule::kPromotedFloat: {
      OVERLAP_ASSIGN_OR_RETURN(std::string d, a.Decided(ResultType(operands)));
      return One(std::move(shape),
                 schema->dtype == DtypeRule::kPromotedFloat ? IntegralToFloat(d) : d);
    }
    case DtypeRule::kSameDtype:
    case DtypeRule::kFromArgs:
      break;
  }
  return a.Error("a pointwise op's dtype rule must be first-tensor, promoted or bool");
}

// clamp / clamp_min: self's shape; result_type of self and the bounds given (numbers).
Result Clamp(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  std::vector<PromotionOperand> operands = {Operand(x)};
  for (const char* bound : {"min", "max"}) {
    if (a.IsNone(bound)) continue;
    OVERLAP_ASSIGN_OR_RETURN(PromotionOperand b, a.OperandOf(bound));
    operands.push_back(std::move(b));
  }
  if (operands.size() == 1) return a.Error("at least one of min and max must be given");
  OVERLAP_ASSIGN_OR_RETURN(x.dtype, a.Decided(ResultType(operands)));
  return Types{x};
}

// neg: self's type; ATen refuses bool ("use ~ or logical_not").
Result Neg(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  if (x.dtype == "bool")
    return a.Error("negation of a bool tensor (ATen refuses it: use bitwise_not)");
  return Types{x};
}

// bitwise_and / or / xor: the operands broadcast, result_type's dtype, which must be bool or
// an integer (ATen refuses floating operands).
Result BitwiseBinary(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("other"));
  OVERLAP_ASSIGN_OR_RETURN(Shape s, Broadcast(a, x.shape, y.shape));
  OVERLAP_ASSIGN_OR_RETURN(std::string d, a.Decided(ResultType({Operand(x), Operand(y)})));
  if (IsFloating(d))
    return a.Error(absl::StrCat("bitwise operation on ", d, " (bool or integers)"));
  return One(std::move(s), std::move(d));
}

// bitwise_not: self's type; bool and integers only (ATen refuses floating dtypes).
Result BitwiseNot(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  if (IsFloating(x.dtype)) return a.Error(absl::StrCat("bitwise_not of ", x.dtype));
  return Types{x};
}

// The operands of a matrix product or convolution have one dtype (ATen refuses mixed ones:
// "expected mat1 and mat2 to have the same dtype"); the result has it. Unstated dtypes ("")
// are not compared.
absl::StatusOr<std::string> SameDtype(const Args& a, std::initializer_list<const TensorType*> ts) {
  std::string d;
  for (const TensorType* t : ts) {
    if (t->dtype.empty()) continue;
    if (!d.empty() && t->dtype != d) {
      std::vector<std::string> all;
      for (const TensorType* u : ts) all.push_back(u->dtype.empty() ? "?" : u->dtype);
      return a.Error(absl::StrCat("operands of dtypes ", absl::StrJoin(all, ", "),
                                  ": ATen takes one dtype here, no promotion"));
    }
    d = t->dtype;
  }
  return d;
}

Result Mm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("mat2"));
  if (x.shape.size() != 2 || y.shape.size() != 2 || x.shape[1] != y.shape[0]) {
    return a.Error(
        absl::StrCat("cannot multiply ", FormatShape(x.shape), " by ", FormatShape(y.shape)));
  }
  OVERLAP_ASSIGN_OR_RETURN(std::string d, SameDtype(a, {&x, &y}));
  return One({x.shape[0], y.shape[1]}, std::move(d));
}

Result Addmm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType bias, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("mat1"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("mat2"));
  if (x.shape.size() != 2 || y.shape.size() != 2 || x.shape[1] != y.shape[0]) {
    return a.Error(
        absl::StrCat("cannot multiply ", FormatShape(x.shape), " by ", FormatShape(y.shape)));
  }
  Shape out = {x.shape[0], y.shape[1]};
  OVERLAP_ASSIGN_OR_RETURN(Shape b, Broadcast(a, bias.shape, out));
  if (b != out) return a.Error(absl::StrCat("bias ", FormatShape(bias.shape), " does not fit"));
  OVERLAP_ASSIGN_OR_RETURN(std::string d, SameDtype(a, {&bias, &x, &y}));
  return One(std::move(out), std::move(d));
}

Result TRule(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  if (x.shape.size() > 2) return a.Error("t() takes a tensor of rank <= 2");
  std::reverse(x.shape.begin(), x.shape.end());
  return Types{x};
}

Result Bmm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("mat2"));
  if (x.shape.size() != 3 || y.shape.size() != 3 || x.shape[0] != y.shape[0] ||
      x.shape[2] != y.shape[1]) {
    return a.Error(absl::StrCat("bmm of ", FormatShape(x.shape), " and ", FormatShape(y.shape)));
  }
  OVERLAP_ASSIGN_OR_RETURN(std::string d, SameDtype(a, {&x, &y}));
  return Types{{{x.shape[0], x.shape[1], y.shape[2]}, std::move(d)}};
}

Result Baddbmm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType s, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("batch1"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("batch2"));
  if (x.shape.size() != 3 || y.shape.size() != 3 || x.shape[0] != y.shape[0] ||
      x.shape[2] != y.shape[1]) {
    return a.Error(
        absl::StrCat("baddbmm of ", FormatShape(x.shape), " and ", FormatShape(y.shape)));
  }
  const Shape out = {x.shape[0], x.shape[1], y.shape[2]};
  OVERLAP_ASSIGN_OR_RETURN(Shape b, Broadcast(a, s.shape, out));
  if (b != out) return a.Error(absl::StrCat("self ", FormatShape(s.shape), " does not broadcast"));
  // batch1 and batch2 of one dtype, the result's; self is converted to it (as ATen).
  OVERLAP_ASSIGN_OR_RETURN(std::string d, SameDtype(a, {&x, &y}));
  return Types{{out, std::move(d)}};
}

Result PermuteRule(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.Ints("dims"));
  if (dims.size() != x.shape.size()) return a.Error("dims should name every dimension");
  Shape out;
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dims"));
    out.push_back(x.shape[d]);
  }
  return Types{{out, x.dtype}};
}

Result SelectRule(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  if (x.shape.empty()) return a.Error("select of a 0-d tensor");
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  x.shape.erase(x.shape.begin() + d);
  return Types{x};
}

// view / _unsafe_view / _reshape_alias (`size`) and reshape (`shape`, ATen's name there).
Result View(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size,
                           a.Ints(a.node().target() == "aten.reshape.default" ? "shape" : "size"));
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1 && infer < 0) {
      infer = static_cast<int>(i);
    } else if (size[i] < 0) {
      return a.Error(absl::StrCat("size has a bad dimension ", size[i]));
    } else {
      known *= size[i];
    }
  }
  const int64_t n = Numel(x.shape);
  if (infer >= 0) {
    if (known == 0 || n % known != 0) return a.Error("cannot infer the -1 dimension of size");
    size[infer] = n / known;
    known = n;
  }
  if (known != n) {
    return a.Error(absl::StrCat("cannot view ", FormatShape(x.shape), " (", n, " elements) as [",
                                absl::StrJoin(size, ", "), "]"));
  }
  return One(Shape(size.begin(), size.end()), x.dtype);
}

Result Transpose(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  const int64_t r = x.shape.size();
  OVERLAP_ASSIGN_OR_RETURN(int64_t d0, a.Int("dim0"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d1, a.Int("dim1"));
  OVERLAP_ASSIGN_OR_RETURN(d0, a.Dim(d0, r, "dim0"));
  OVERLAP_ASSIGN_OR_RETURN(d1, a.Dim(d1, r, "dim1"));
  if (r > 0) std::swap(x.shape[d0], x.shape[d1]);
  return Types{x};
}

Result Unsqueeze(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size() + 1, "dim"));
  x.shape.insert(x.shape.begin() + d, 1);
  return Types{x};
}

// squeeze.dim (one int) and squeeze.dims (a list): each named size-1 dimension goes.
Result SqueezeDim(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.Ints("dim"));
  std::vector<bool> drop(x.shape.size(), false);
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
    if (!x.shape.empty() && x.shape[d] == 1) drop[d] = true;
  }
  Shape kept;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!drop[i]) kept.push_back(x.shape[i]);
  }
  x.shape = kept;
  return Types{x};
}

Result Expand(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("size"));
  if (size.size() < x.shape.size()) return a.Error("size has fewer dimensions than self");
  const size_t lead = size.size() - x.shape.size();
  Shape out(size.size());
  for (size_t i = 0; i < size.size(); ++i) {
    if (i < lead) {
      if (size[i] < 0) return a.Error("a new leading dimension cannot be -1");
      out[i] = size[i];
      continue;
    }
    const int64_t have = x.shape[i - lead];
    const int64_t want = size[i] == -1 ? have : size[i];
    if (have != want && have != 1) {
      return a.Error(absl::StrCat("cannot expand ", FormatShape(x.shape), " to [",
                                  absl::StrJoin(size, ", "), "]"));
    }
    out[i] = want;
  }
  return One(std::move(out), x.dtype);
}

// `out` becomes the shape of a reduction of `x` over `dims` (empty: every dimension), keeping
// them as 1 with `keep`. A dimension named twice is refused, as ATen refuses it.
absl::Status ReducedShape(const Args& a, const Shape& x, const std::vector<int64_t>& dims,
                          bool keep, Shape& out) {
  const int64_t r = x.size();
  std::vector<char> reduced(r, dims.empty() ? 1 : 0);
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Dim(d, r, "dim"));
    if (r == 0) continue;
    if (reduced[n]) return a.Error(absl::StrCat("dim ", d, " appears more than once in dim"));
    reduced[n] = 1;
  }
  out.clear();
  for (int64_t i = 0; i < r; ++i) {
    if (!reduced[i]) {
      out.push_back(x[i]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  return absl::OkStatus();
}

// sum.dim_IntList / mean.dim (self, dim: None or [] for every dimension, keepdim, dtype) and
// sum.default / mean.default (self and dtype only: every dimension, none kept). The dtype:
// ReductionResultType's (graph/type_promotion.h: sum of bool or integers is int64).
Result SumOrMean(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  std::vector<int64_t> dims;
  bool keep = false;
  if (a.Declares("dim")) {
    OVERLAP_ASSIGN_OR_RETURN(dims, a.Ints("dim", std::vector<int64_t>{}));
    OVERLAP_ASSIGN_OR_RETURN(keep, a.Bool("keepdim"));
  }
  Shape out;
  OVERLAP_RETURN_IF_ERROR(ReducedShape(a, x.shape, dims, keep, out));
  const ReductionOp op =
      absl::StartsWith(a.node().target(), "aten.sum.") ? ReductionOp::kSum : ReductionOp::kMean;
  OVERLAP_ASSIGN_OR_RETURN(std::string dtype,
                           a.Decided(ReductionResultType(op, x.dtype, a.DtypeKwarg())));
  return One(std::move(out), std::move(dtype));
}

// norm.ScalarOpt_dim (self, p, dim, keepdim): self's dtype, which must be floating (ATen).
Result Norm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.Ints("dim", std::vector<int64_t>{}));
  OVERLAP_ASSIGN_OR_RETURN(bool keep, a.Bool("keepdim"));
  Shape out;
  OVERLAP_RETURN_IF_ERROR(ReducedShape(a, x.shape, dims, keep, out));
  if (CategoryOf(x.dtype) && !IsFloating(x.dtype)) {
    return a.Error(absl::StrCat("norm of ", x.dtype, ": a floating dtype is needed"));
  }
  return One(std::move(out), x.dtype);
}

Result Softmax(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_RETURN_IF_ERROR(a.Dim(d, x.shape.size(), "dim").status());
  OVERLAP_ASSIGN_OR_RETURN(bool half_to_float, a.Bool("half_to_float"));
  if (half_to_float) x.dtype = "float32";
  return Types{x};
}

// _softmax_backward_data / _log_softmax_backward_data(grad_output, output, dim, input_dtype).
Result SoftmaxBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("output"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, y, "grad_output and output differ"));
  const Value* d = a.Get("input_dtype");
  if (d != nullptr && d->kind() == Value::Kind::kString) g.dtype = CanonicalDtype(d->as_string());
  return Types{g};
}

Result FlashAttention(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType q, a.Tensor("query"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType k, a.Tensor("key"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType v, a.Tensor("value"));
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4) {
    return a.Error("query, key and value must be [batch, heads, seq, head_dim]");
  }
  if (k.shape[0] != q.shape[0] || v.shape[0] != q.shape[0] || k.shape[1] != q.shape[1] ||
      v.shape[1] != q.shape[1] || k.shape[3] != q.shape[3] || v.shape[2] != k.shape[2]) {
    return a.Error(absl::StrCat("query ", FormatShape(q.shape), ", key ", FormatShape(k.shape),
                                " and value ", FormatShape(v.shape), " do not fit"));
  }
  Shape out = q.shape;
  out[3] = v.shape[3];
  return Types{{out, q.dtype}, {{q.shape[0], q.shape[1], q.shape[2]}, "float32"}};
}

Result FlashAttentionBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType q, a.Tensor("query"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType k, a.Tensor("key"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType v, a.Tensor("value"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType out, a.Tensor("out"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, out, "grad_out and out differ"));
  return Types{q, k, v};
}

Result GetItem(const Args& a) {
  // Python indexing of a tensor or a size (module-style graphs: x[:, :d], x.shape[1]) is
  // not tuple access: no rule (counted as such, not checked).
  const Value* index = a.Get("index");
  const Value* self = a.Get("self");
  if (index == nullptr || index->kind() != Value::Kind::kInt || self == nullptr ||
      !self->is_ref() || a.graph().node(self->as_ref()).meta().has_shape ||
      StatedTypes(a.graph().node(self->as_ref())).empty()) {
    return absl::NotFoundError("getitem of a tensor or a size: no rule");
  }
  OVERLAP_ASSIGN_OR_RETURN(Types t, a.Tuple("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t i, a.Int("index"));
  if (i < 0) i += static_cast<int64_t>(t.size());
  if (i < 0 || i >= static_cast<int64_t>(t.size())) {
    return a.Error(absl::StrCat("index ", i, " is out of range for a tuple of ", t.size()));
  }
  return Types{t[i]};
}

Result Split(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t size, a.Int("split_size"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  if (size <= 0 || x.shape.empty()) return a.Error("split_size must be > 0 on a tensor");
  Types out;
  for (int64_t at = 0; at < x.shape[d] || (at == 0 && x.shape[d] == 0); at += size) {
    TensorType piece = x;
    piece.shape[d] = std::min(size, x.shape[d] - at);
    out.push_back(std::move(piece));
    if (x.shape[d] == 0) break;
  }
  return out;
}

Result SplitWithSizes(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, a.Ints("split_sizes"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  if (x.shape.empty()) return a.Error("split of a 0-d tensor");
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  int64_t total = 0;
  Types out;
  for (int64_t n : sizes) {
    if (n < 0) return a.Error(absl::StrCat("split_sizes holds a negative size ", n));
    total += n;
    TensorType piece = x;
    piece.shape[d] = n;
    out.push_back(std::move(piece));
  }
  if (total != x.shape[d]) {
    return a.Error(absl::StrCat("split_sizes add up to ", total, ", not ", x.shape[d]));
  }
  return out;
}

// group norm: the input's type, and the statistics [N, group] (float32 for 16-bit inputs).
Result GroupNorm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Int("N"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t c, a.Int("C"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t hw, a.Int("HxW"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t group, a.Int("group"));
  int64_t numel = 1;
  for (int64_t d : x.shape) numel *= d;
  if (x.shape.size() < 2 || x.shape[0] != n || x.shape[1] != c || n * c * hw != numel) {
    return a.Error(
        absl::StrCat("input ", FormatShape(x.shape), " is not N ", n, " x C ", c, " x HxW ", hw));
  }
  if (group <= 0 || c % group != 0) {
    return a.Error(absl::StrCat("group ", group, " does not divide C ", c));
  }
  for (const char* name : {"weight", "bias"}) {
    OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> p, a.OptionalTensor(name));
    if (p && p->shape != Shape{c}) return a.Error("weight and bias must be [C]");
  }
  return Types{x, {{n, group}, AccDtype(x.dtype)}, {{n, group}, AccDtype(x.dtype)}};
}

Result GroupNormBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, x, "grad_out and input differ"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t c, a.Int("C"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> w, a.OptionalTensor("weight"));
  const std::string pd = w ? w->dtype : x.dtype;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask, a.Mask());
  return Masked(Types{x, {{c}, pd}, {{c}, pd}}, mask);
}

// The spatial output size of a 2-D upsampling: output_size, else floor(in * scale).
absl::StatusOr<std::pair<int64_t, int64_t>> UpsampledSize(const Args& a, const Shape& in) {
  if (in.size() != 4) return a.Error(absl::StrCat("input ", FormatShape(in), " is not 4-d"));
  if (!a.IsNone("output_size")) {
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("output_size"));
    if (size.size() != 2 || size[0] <= 0 || size[1] <= 0) {
      return a.Error("output_size must be two positive sizes");
    }
    return std::make_pair(size[0], size[1]);
  }
  const Value* v = a.Get("scale_factors");
  if (v == nullptr || v->kind() != Value::Kind::kList || v->items().size() != 2) {
    return a.Error("neither output_size nor two scale_factors");
  }
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    const Value& f = v->items()[i];
    const double scale = f.kind() == Value::Kind::kDouble ? f.as_double()
                         : f.kind() == Value::Kind::kInt  ? static_cast<double>(f.as_int())
                                                          : -1;
    const double size = std::floor(static_cast<double>(in[2 + i]) * scale);
    if (!(scale > 0) || !(size < 9.0e18)) {
      return a.Error("scale_factors must be positive numbers with a representable size");
    }
    out[i] = static_cast<int64_t>(size);
    if (out[i] <= 0) return a.Error("the upsampled size is empty");
  }
  return std::make_pair(out[0], out[1]);
}

// _adaptive_avg_pool2d / 3d over `spatial` dimensions: self [C, spatial...] or [N, C,
// spatial...] with the last `spatial` sizes replaced by output_size's.
template <int spatial>
Result AdaptiveAvgPool(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("output_size", {}, spatial));
  if (x.shape.size() != spatial + 1 && x.shape.size() != spatial + 2) {
    return a.Error(absl::StrCat("input ", FormatShape(x.shape), " is not ", spatial + 1, "-d or ",
                                spatial + 2, "-d"));
  }
  if (size.size() == 1) size.assign(spatial, size[0]);
  if (size.size() != spatial ||
      std::any_of(size.begin(), size.end(), [](int64_t v) { return v <= 0; })) {
    return a.Error(absl::StrCat("output_size must be ", spatial, " positive sizes"));
  }
  for (int i = 0; i < spatial; ++i) x.shape[x.shape.size() - spatial + i] = size[i];
  return Types{x};
}

// adaptive_max_pool2d / 3d: adaptive average pooling's shape, and int64 indices of it.
template <int spatial>
Result AdaptiveMaxPool(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(Types t, AdaptiveAvgPool<spatial>(a));
  return Types{t[0], {t[0].shape, "int64"}};
}

// A backward that returns the gradient of its `self` argument: self's type.
Result LikeSelf(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  x.dtype = g.dtype;
  return Types{x};
}

Result Upsample(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(auto size, UpsampledSize(a, x.shape));
  x.shape[2] = size.first;
  x.shape[3] = size.second;
  return Types{x};
}

Result UpsampleBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> in, a.Ints("input_size"));
  if (in.size() != 4) return a.Error("input_size must have 4 entries");
  OVERLAP_ASSIGN_OR_RETURN(auto size, UpsampledSize(a, Shape(in.begin(), in.end())));
  if (g.shape != Shape{in[0], in[1], size.first, size.second}) {
    return a.Error(absl::StrCat("grad_output ", FormatShape(g.shape),
                                " is not the upsampled shape of input_size"));
  }
  return One(Shape(in.begin(), in.end()), g.dtype);
}

// unbind: the steps along `dim`, each without it.
Result Unbind(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  if (x.shape.empty()) return a.Error("unbind of a 0-d tensor");
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  TensorType piece = x;
  piece.shape.erase(piece.shape.begin() + d);
  return Types(static_cast<size_t>(x.shape[d]), piece);
}

// stack: equal shapes, a new dimension of size N at `dim` (0..rank).
Result Stack(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(Types xs, a.TensorList("tensors"));
  if (xs.empty()) return a.Error("stack of no tensors");
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, xs[0].shape.size() + 1, "dim"));
  TensorType out = xs[0];
  std::vector<PromotionOperand> operands;
  for (const TensorType& t : xs) {
    if (t.shape != xs[0].shape) {
      return a.Error(
          absl::StrCat("stack of ", FormatShape(xs[0].shape), " and ", FormatShape(t.shape)));
    }
    // ATen stacks the tensors unsqueezed: each has a dimension.
    operands.push_back(PromotionOperand::Tensor(t.dtype, t.shape.size() + 1));
  }
  OVERLAP_ASSIGN_OR_RETURN(out.dtype, a.Decided(ResultType(operands)));
  out.shape.insert(out.shape.begin() + d, static_cast<int64_t>(xs.size()));
  return Types{out};
}

// zeros(size, dtype=): float32 unless dtype says otherwise.
Result Zeros(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("size"));
  for (int64_t s : size) {
    if (s < 0) return a.Error(absl::StrCat("size ", s, " is negative"));
  }
  const std::string d = a.DtypeKwarg();
  return One(Shape(size.begin(), size.end()), d.empty() ? "float32" : d);
}

// where(condition, self, other): the three broadcast; the dtype is result_type of self and
// other (a 0-d operand counts only when of a higher category).
Result Where(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType cond, a.Tensor("condition"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType y, a.Tensor("other"));
  if (cond.dtype != "bool") return a.Error("condition must be bool");
  OVERLAP_ASSIGN_OR_RETURN(Shape s, Broadcast(a, x.shape, y.shape));
  OVERLAP_ASSIGN_OR_RETURN(s, Broadcast(a, s, cond.shape));
  OVERLAP_ASSIGN_OR_RETURN(std::string d, a.Decided(ResultType({Operand(x), Operand(y)})));
  return One(std::move(s), std::move(d));
}

// scalar_tensor: a 0-d tensor, float32 unless dtype says otherwise.
Result ScalarTensor(const Args& a) {
  const std::string d = a.DtypeKwarg();
  return One(Shape{}, d.empty() ? "float32" : d);
}

// full: `size`, of `dtype` or the fill value's type (float32, int64, bool).
Result Full(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("size"));
  for (int64_t s : size) {
    if (s < 0) return a.Error(absl::StrCat("size ", s, " is negative"));
  }
  std::string d = a.DtypeKwarg();
  if (d.empty()) {
    const Value* v = a.Get("fill_value");
    d = v != nullptr && v->kind() == Value::Kind::kBool  ? "bool"
        : v != nullptr && v->kind() == Value::Kind::kInt ? "int64"
                                                         : "float32";
  }
  return One(Shape(size.begin(), size.end()), d);
}

// constant_pad_nd: each (left, right) pair, from the last dimension back, widens (or, when
// negative, crops) that dimension.
Result ConstantPad(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad, a.Ints("pad"));
  if (pad.size() % 2 != 0 || pad.size() / 2 > x.shape.size()) {
    return a.Error(absl::StrCat("pad has ", pad.size(), " entries for a rank-", x.shape.size(),
                                " tensor (an even number, two per dimension at most)"));
  }
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    int64_t& d = x.shape[x.shape.size() - 1 - i];
    d += pad[2 * i] + pad[2 * i + 1];
    if (d < 0) return a.Error("the padding crops a dimension below zero");
  }
  return Types{x};
}

// as_strided: `size`, whatever self's shape (the window's bounds are the kernel's check).
Result AsStrided(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("size"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, a.Ints("stride"));
  if (size.size() != stride.size()) return a.Error("size and stride differ in length");
  for (int64_t d : size) {
    if (d < 0) return a.Error(absl::StrCat("size has a negative dimension ", d));
  }
  return One(Shape(size.begin(), size.end()), x.dtype);
}

// as_strided_scatter: self's type; src must have the window's shape.
Result AsStridedScatter(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType src, a.Tensor("src"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("size"));
  if (src.shape != Shape(size.begin(), size.end())) {
    return a.Error(absl::StrCat("src ", FormatType(src), " does not have the window's size"));
  }
  return Types{x};
}

// The shape of self[indices] (NumPy advanced indexing, as ATen's index.Tensor): the index
// tensors broadcast together; their shape replaces the indexed dimensions where those are
// adjacent, else leads.
absl::StatusOr<Shape> AdvancedIndexShape(const Args& a, const Shape& self) {
  const Value* list = a.Get("indices");
  if (list == nullptr || list->kind() != Value::Kind::kList) {
    return a.Error("indices is not a list");
  }
  if (list->items().size() > self.size()) {
    return a.Error(absl::StrCat("too many indices (", list->items().size(), ") for a rank-",
                                self.size(), " tensor"));
  }
  Shape index_shape;
  std::vector<size_t> indexed;
  bool first = true;
  for (size_t i = 0; i < list->items().size(); ++i) {
    const Value& item = list->items()[i];
    if (item.is_none()) continue;
    OVERLAP_ASSIGN_OR_RETURN(Types t, a.TypesOf(item, "indices"));
    if (t.size() != 1) return a.Error("indices holds a tuple");
    if (t[0].dtype == "bool" || t[0].dtype == "uint8") {
      return a.Error(absl::StrCat("index ", i,
                                  " is a boolean mask: its result's shape depends on "
                                  "the data (use masked_fill / where)"));
    }
    if (t[0].dtype != "int64" && t[0].dtype != "int32") {
      return a.Error(absl::StrCat("index ", i, " is ", t[0].dtype, ", not int64 or int32"));
    }
    if (first) {
      index_shape = t[0].shape;
      first = false;
    } else {
      OVERLAP_ASSIGN_OR_RETURN(index_shape, Broadcast(a, index_shape, t[0].shape));
    }
    indexed.push_back(i);
  }
  if (indexed.empty()) return self;
  const bool adjacent = indexed.back() - indexed.front() + 1 == indexed.size();
  Shape out;
  if (!adjacent) out = index_shape;
  for (size_t d = 0; d < self.size(); ++d) {
    if (d == indexed.front() && adjacent)
      out.insert(out.end(), index_shape.begin(), index_shape.end());
    if (std::find(indexed.begin(), indexed.end(), d) == indexed.end()) out.push_back(self[d]);
  }
  return out;
}

Result Index(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(Shape s, AdvancedIndexShape(a, x.shape));
  return One(std::move(s), x.dtype);
}

// index_put: self's type; values must broadcast to self[indices]'s shape.
Result IndexPut(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType v, a.Tensor("values"));
  OVERLAP_ASSIGN_OR_RETURN(Shape s, AdvancedIndexShape(a, x.shape));
  OVERLAP_ASSIGN_OR_RETURN(Shape b, Broadcast(a, s, v.shape));
  if (b != s) {
    return a.Error(absl::StrCat("values ", FormatType(v), " do not broadcast to the indexed shape ",
                                FormatShape(s)));
  }
  return Types{x};
}

// abs: self's type; ATen refuses a bool tensor.
Result Abs(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  if (x.dtype == "bool") return a.Error("abs of a bool tensor (ATen refuses it)");
  return Types{x};
}

// cat: ATen's legacy rule skips 1-D empty tensors (an empty KV cache, torch.tensor([]))
// for the shapes; every tensor counts for the dtype.
Result Cat(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(Types all, a.TensorList("tensors"));
  if (all.empty()) return a.Error("cat of no tensors");
  std::vector<PromotionOperand> operands;
  Types xs;
  for (const TensorType& t : all) {
    operands.push_back(Operand(t));
    if (!(t.shape.size() == 1 && t.shape[0] == 0)) xs.push_back(t);
  }
  if (xs.empty()) {  // only empty 1-D tensors: an empty 1-D result
    OVERLAP_ASSIGN_OR_RETURN(std::string d, a.Decided(ResultType(operands)));
    return One(Shape{0}, std::move(d));
  }
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, xs[0].shape.size(), "dim"));
  TensorType out = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    Shape s = xs[i].shape;
    if (s.size() != out.shape.size()) return a.Error("cat of tensors of different ranks");
    for (size_t j = 0; j < s.size(); ++j) {
      if (static_cast<int64_t>(j) != d && s[j] != out.shape[j]) {
        return a.Error(
            absl::StrCat("cat along ", d, " of ", FormatShape(out.shape), " and ", FormatShape(s)));
      }
    }
    out.shape[d] += s[d];
  }
  OVERLAP_ASSIGN_OR_RETURN(out.dtype, a.Decided(ResultType(operands)));
  return Types{out};
}

Result Embedding(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType ids, a.Tensor("indices"));
  if (w.shape.size() != 2) return a.Error("weight must be [num_embeddings, dim]");
  if (IsFloating(ids.dtype)) return a.Error("indices must be integers");
  Shape out = ids.shape;
  out.push_back(w.shape[1]);
  return One(std::move(out), w.dtype);
}

Result EmbeddingBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType ids, a.Tensor("indices"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Int("num_weights"));
  Shape expect = ids.shape;
  if (g.shape.empty()) return a.Error("grad_output must end in the embedding dimension");
  expect.push_back(g.shape.back());
  if (expect != g.shape) {
    return a.Error(absl::StrCat("grad_output ", FormatShape(g.shape), " does not fit indices ",
                                FormatShape(ids.shape)));
  }
  return One({n, g.shape.back()}, g.dtype);
}

// arange(end): [0, end) by 1, so ceil(end) elements; int64 for an integer end, the default
// float dtype for a float one, unless dtype says otherwise.
Result Arange(const Args& a) {
  // arange(end) and arange(start, end, step): ceil((end - start) / step) values; int64 when
  // every bound is an integer, else the default float dtype, unless dtype says (the kernel's
  // rule, runtime/kernels/factory.cc).
  bool ints = true;
  double bound[3] = {0, 0, 1};  // start, end, step
  const char* names[3] = {"start", "end", "step"};
  for (int i = 0; i < 3; ++i) {
    const Value* v = a.Get(names[i]);
    if (v == nullptr || v->is_none()) {
      if (i == 1) return a.Error("arange needs an end");
      continue;
    }
    if (v->kind() == Value::Kind::kDouble) {
      ints = false;
      bound[i] = v->as_double();
    } else {
      OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Int(names[i]));
      bound[i] = static_cast<double>(n);
    }
    if (!std::isfinite(bound[i])) return a.Error(absl::StrCat(names[i], " must be finite"));
  }
  const double start = bound[0], end = bound[1], step = bound[2];
  if (step == 0) return a.Error("step must be nonzero");
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    return a.Error(absl::StrCat("the bounds (start ", start, ", end ", end,
                                ") are inconsistent with the step's sign (step ", step, ")"));
  }
  const double count = std::ceil((end - start) / step);
  if (!(count < 9.0e18)) return a.Error("too many elements");
  std::string d = a.DtypeKwarg();
  if (d.empty()) d = ints ? "int64" : std::string(kDefaultFloatDtype);
  return One({static_cast<int64_t>(count)}, d);
}

Result LayerNorm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, a.Ints("normalized_shape"));
  if (norm.size() > x.shape.size() ||
      !std::equal(norm.begin(), norm.end(), x.shape.end() - norm.size())) {
    return a.Error(absl::StrCat("normalized_shape [", absl::StrJoin(norm, ", "),
                                "] is not a suffix of ", FormatShape(x.shape)));
  }
  for (const char* name : {"weight", "bias"}) {
    OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> p, a.OptionalTensor(name));
    if (p && !std::equal(p->shape.begin(), p->shape.end(), norm.begin(), norm.end())) {
      return a.Error(absl::StrCat(name, " ", FormatShape(p->shape), " is not normalized_shape"));
    }
  }
  Shape stats = x.shape;
  for (size_t i = stats.size() - norm.size(); i < stats.size(); ++i) stats[i] = 1;
  return Types{x, {stats, AccDtype(x.dtype)}, {stats, AccDtype(x.dtype)}};
}

Result LayerNormBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, a.Ints("normalized_shape"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, x, "grad_out and input differ"));
  Types out = {x};
  for (const char* name : {"weight", "bias"}) {
    OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> p, a.OptionalTensor(name));
    out.push_back(p ? *p : TensorType{Shape(norm.begin(), norm.end()), x.dtype});
  }
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask, a.Mask());
  return Masked(std::move(out), mask);
}

Result Topk(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t k, a.Int("k"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  if (x.shape.empty() || k < 0 || k > x.shape[d]) return a.Error("k is out of range");
  x.shape[d] = k;
  return Types{x, {x.shape, "int64"}};
}

// sort: (values in self's type, int64 indices), dim in range.
Result Sort(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_RETURN_IF_ERROR(a.Dim(d, x.shape.size(), "dim").status());
  return Types{x, {x.shape, "int64"}};
}

Result Argsort(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  return One(x.shape, "int64");
}

// Python slice bounds: clamped to [0, n], None = the end.
Result Slice(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  if (x.shape.empty()) return a.Error("slice of a scalar");
  const int64_t n = x.shape[d];
  OVERLAP_ASSIGN_OR_RETURN(int64_t start, a.Int("start", 0));
  OVERLAP_ASSIGN_OR_RETURN(int64_t end, a.Int("end", n));
  OVERLAP_ASSIGN_OR_RETURN(int64_t step, a.Int("step"));
  if (step <= 0) return a.Error("step must be > 0");
  auto clamp = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
  start = clamp(start);
  end = clamp(end);
  x.shape[d] = end > start ? (end - start + step - 1) / step : 0;
  return Types{x};
}

Result SliceBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, a.Ints("input_sizes"));
  return One(Shape(sizes.begin(), sizes.end()), g.dtype);
}

Result IndexSelect(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType index, a.Tensor("index"));
  if (index.shape.size() > 1 || IsFloating(index.dtype)) {
    return a.Error("index must be a vector of integers");
  }
  if (!x.shape.empty()) x.shape[d] = Numel(index.shape);
  return Types{x};
}

Result IndexAdd(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType index, a.Tensor("index"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType src, a.Tensor("source"));
  Shape expect = x.shape;
  if (!expect.empty()) expect[d] = Numel(index.shape);
  if (src.shape != expect) {
    return a.Error(absl::StrCat("source ", FormatShape(src.shape), " does not fit self ",
                                FormatShape(x.shape), " along ", d));
  }
  return Types{x};
}

// A shape with a scalar as [1] (ATen's ensure_nonempty for gathers and scatters).
Shape NonEmptyShape(const Shape& s) { return s.empty() ? Shape{1} : s; }

// gather and the scatters along a dimension (scatter.src / .value, scatter_add): an int64
// index of self's rank, no larger than self apart from `dim` and, with src (of self's dtype),
// no larger than src; an empty index is not checked further, as in ATen. gather gives
// index's shape, the scatters self's.
Result DimIndexed(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType index, a.Tensor("index"));
  const bool gather = a.node().target() == "aten.gather.default";
  std::optional<TensorType> src;
  if (a.Declares("src")) {
    OVERLAP_ASSIGN_OR_RETURN(src, a.Tensor("src"));
    if (src->dtype != x.dtype) {
      return a.Error(absl::StrCat("src is ", src->dtype, " but self is ", x.dtype));
    }
  }
  TensorType out = gather ? TensorType{index.shape, x.dtype} : x;
  if (Numel(index.shape) == 0) return Types{out};
  if (index.dtype != "int64") return a.Error(absl::StrCat("index is ", index.dtype, ", not int64"));
  const Shape xs = NonEmptyShape(x.shape), is = NonEmptyShape(index.shape);
  const Shape ss = src ? NonEmptyShape(src->shape) : is;
  bool fits = is.size() == xs.size() && ss.size() == xs.size();
  for (size_t i = 0; fits && i < is.size(); ++i) {
    fits = (static_cast<int64_t>(i) == d || is[i] <= xs[i]) && is[i] <= ss[i];
  }
  if (!fits) {
    return a.Error(absl::StrCat("index ", FormatShape(index.shape), " does not fit self ",
                                FormatShape(x.shape), src ? " and src " : "",
                                src ? FormatShape(src->shape) : "", " along dim ", d));
  }
  return Types{out};
}

// select_scatter: self's type; src has self.select(dim, index)'s shape.
Result SelectScatter(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType src, a.Tensor("src"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t index, a.Int("index"));
  if (x.shape.empty()) return a.Error("select_scatter into a scalar");
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  const int64_t n = x.shape[d];
  if (index < -n || index >= n) {
    return a.Error(
        absl::StrCat("index ", index, " is out of range for dimension ", d, " of size ", n));
  }
  Shape selected = x.shape;
  selected.erase(selected.begin() + d);
  if (src.shape != selected) {
    return a.Error(absl::StrCat("src ", FormatShape(src.shape), " is not the selected ",
                                FormatShape(selected)));
  }
  return Types{x};
}

// cumsum: self's shape; the dtype is sum's (bool and integers to int64 unless dtype is given).
Result Cumsum(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_RETURN_IF_ERROR(a.Dim(d, x.shape.size(), "dim").status());
  OVERLAP_ASSIGN_OR_RETURN(
      x.dtype, a.Decided(ReductionResultType(ReductionOp::kSum, x.dtype, a.DtypeKwarg())));
  return Types{x};
}

// flip: self's type; each of dims in range and named once.
Result Flip(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.Ints("dims"));
  std::vector<bool> seen(std::max<size_t>(x.shape.size(), 1), false);
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
    if (seen[d]) return a.Error(absl::StrCat("dim ", d, " appears more than once in dims"));
    seen[d] = true;
  }
  return Types{x};
}

// _embedding_bag: (output [bags, dim] of weight's dtype, offset2bag, bag_size [bags],
// max_indices) with the indices' dtype (int64 when indices and offsets differ, as ATen
// promotes). offset2bag is [0] where ATen's CPU sum takes its fast path (a float32 / 16-bit
// weight, no padding_idx), else one per index; max_indices is [bags, dim] in max mode.
Result EmbeddingBag(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType ids, a.Tensor("indices"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType offsets, a.Tensor("offsets"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t mode, a.Int("mode"));
  OVERLAP_ASSIGN_OR_RETURN(bool include_last, a.Bool("include_last_offset"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t padding_idx, a.Int("padding_idx"));
  if (w.shape.size() != 2 || !IsFloating(w.dtype)) {
    return a.Error(absl::StrCat("weight ", FormatType(w), " is not a float matrix"));
  }
  for (const TensorType* t : {&ids, &offsets}) {
    if (t->shape.size() != 1 || (t->dtype != "int64" && t->dtype != "int32")) {
      return a.Error(
          absl::StrCat("indices and offsets should be 1-D int64 or int32, got ", FormatType(*t)));
    }
  }
  if (mode < 0 || mode > 2) return a.Error(absl::StrCat("mode ", mode, " is not 0, 1 or 2"));
  const int64_t bags = offsets.shape[0] - (include_last ? 1 : 0);
  if (bags < 0) return a.Error("include_last_offset needs at least one offset");
  const std::string index = ids.dtype == offsets.dtype ? ids.dtype : "int64";
  const bool fast_sum = mode == 0 && padding_idx < 0 &&
                        (w.dtype == "float32" || w.dtype == "float16" || w.dtype == "bfloat16");
  Shape max_shape = {bags};
  if (mode == 2) max_shape.push_back(w.shape[1]);
  return Types{{{bags, w.shape[1]}, w.dtype},
               {{fast_sum ? 0 : ids.shape[0]}, index},
               {{bags}, index},
               {max_shape, index}};
}

Result EmbeddingBagBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Int("num_weights"));
  if (g.shape.size() != 2) return a.Error(absl::StrCat("grad ", FormatType(g), " is not 2-D"));
  if (n < 0) return a.Error(absl::StrCat("num_weights ", n, " is negative"));
  return One({n, g.shape[1]}, g.dtype);
}

// repeat(self, repeats): self's shape padded with leading ones to len(repeats), each
// dimension times its count; fewer counts than dimensions, or a negative one, is ATen's
// error.
Result Repeat(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> r, a.Ints("repeats"));
  if (r.size() < x.shape.size()) {
    return a.Error(
        absl::StrCat("repeats has ", r.size(), " dimensions, fewer than self's ", x.shape.size()));
  }
  Shape out(r.size());
  const size_t pad = r.size() - x.shape.size();
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] < 0) return a.Error(absl::StrCat("repeat count ", r[i], " is negative"));
    out[i] = r[i] * (i < pad ? 1 : x.shape[i - pad]);
  }
  return One(std::move(out), x.dtype);
}

// repeat_interleave.Tensor: 1-D, repeats' dtype; its length is the data's (the sum of
// repeats): output_size when given, else the node's stated length.
Result RepeatInterleave(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType r, a.Tensor("repeats"));
  if (r.shape.size() != 1 || (r.dtype != "int64" && r.dtype != "int32")) {
    return a.Error(absl::StrCat("repeats ", FormatType(r), " is not a 1-D int64 / int32 tensor"));
  }
  if (!a.IsNone("output_size")) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Int("output_size"));
    if (n < 0) return a.Error(absl::StrCat("output_size ", n, " is negative"));
    return One({n}, r.dtype);
  }
  const std::vector<TensorType> stated = StatedTypes(a.node());
  if (stated.size() != 1 || stated[0].shape.size() != 1) {
    return a.Error("the length depends on the data: give output_size or a stated 1-D shape");
  }
  return One(stated[0].shape, r.dtype);
}

// triu_indices(row, col, offset): [2, count], count the elements of a row x col matrix on
// and above diagonal `offset`; int64 unless dtype says otherwise.
// histc: [bins] in self's floating dtype.
Result Histc(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t bins, a.Int("bins"));
  if (!IsFloating(x.dtype)) {
    return a.Error(absl::StrCat("self ", FormatType(x), " is not floating (histc counts floats)"));
  }
  if (bins <= 0) return a.Error(absl::StrCat("bins must be > 0, got ", bins));
  return One({bins}, x.dtype);
}

// transformers' grouped_mm_fallback (and its backward): input [S, K], weight [E, K, N] of
// one floating dtype, offs [E] integer.
absl::Status GroupedMmOperands(const Args& a, TensorType* x, TensorType* w) {
  OVERLAP_ASSIGN_OR_RETURN(*x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(*w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType offs, a.Tensor("offs"));
  if (x->shape.size() != 2 || w->shape.size() != 3 || x->shape[1] != w->shape[1]) {
    return a.Error(absl::StrCat("input ", FormatType(*x), " and weight ", FormatType(*w),
                                " are not [S, K] and [E, K, N]"));
  }
  if (x->dtype != w->dtype || !IsFloating(x->dtype)) {
    return a.Error(absl::StrCat("input ", FormatType(*x), " and weight ", FormatType(*w),
                                " must share one floating dtype"));
  }
  if (offs.shape.size() != 1 || offs.shape[0] != w->shape[0] ||
      (offs.dtype != "int32" && offs.dtype != "int64")) {
    return a.Error(absl::StrCat("offs ", FormatType(offs), " is not [", w->shape[0],
                                "] int32 or int64 (one offset per expert)"));
  }
  return absl::OkStatus();
}

Result GroupedMm(const Args& a) {
  TensorType x, w;
  OVERLAP_RETURN_IF_ERROR(GroupedMmOperands(a, &x, &w));
  return One({x.shape[0], w.shape[2]}, x.dtype);
}

Result GroupedMmBackward(const Args& a) {
  TensorType x, w;
  OVERLAP_RETURN_IF_ERROR(GroupedMmOperands(a, &x, &w));
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  if (g.shape != Shape{x.shape[0], w.shape[2]} || g.dtype != x.dtype) {
    return a.Error(absl::StrCat("grad_output ", FormatType(g), " is not the forward's [",
                                x.shape[0], ", ", w.shape[2], "] ", x.dtype));
  }
  return Types{x, w};
}

Result TriuIndices(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t rows, a.Int("row"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t cols, a.Int("col"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t offset, a.Int("offset"));
  if (rows < 0 || cols < 0) return a.Error("row and col must be non-negative");
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += cols - std::clamp<int64_t>(r + offset, 0, cols);
  const std::string d = a.DtypeKwarg();
  return One({2, count}, d.empty() ? "int64" : d);
}

Result NewZeros(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, a.Ints("size"));
  std::string d = a.DtypeKwarg();
  return One(Shape(size.begin(), size.end()), d.empty() ? x.dtype : d);
}

// out = floor((in + 2 pad - dilation (k - 1) - 1) / stride) + 1 (ceil with ceil_mode).
absl::StatusOr<int64_t> PooledSize(const Args& a, int64_t in, int64_t k, int64_t stride,
                                   int64_t pad, int64_t dilation, bool ceil_mode) {
  if (stride <= 0 || dilation <= 0 || k <= 0 || pad < 0) {
    return a.Error("kernel, stride and dilation must be > 0 and padding >= 0");
  }
  const int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  if (span < 0) return a.Error("the kernel is larger than the padded input");
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch: with ceil_mode the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// A per-dimension argument of a convolution or pooling (stride, padding, dilation, ...): one
// value per spatial dimension, or one for all of them (an int, or a list of one: ATen
// expands it so). `fallback` stands for None and [] where the caller gives one.
absl::StatusOr<std::vector<int64_t>> SpatialInts(
    const Args& a, absl::string_view name, size_t n,
    std::optional<std::vector<int64_t>> fallback = {}) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.Ints(name, std::move(fallback), n));
  if (v.size() == 1) v.assign(n, v[0]);
  if (v.size() != n) {
    return a.Error(absl::StrCat(name, " has ", v.size(), " values for ", n,
                                " spatial dimensions (one, or one per dimension)"));
  }
  return v;
}

// aten.convolution: 1-, 2- or 3-d (input [N, C, spatial...], weight [O, C / groups,
// kernel...], of one rank), transposed or not. out = floor((in + 2 pad - dilation (k - 1) -
// 1) / stride) + 1 per spatial dimension; transposed: (in - 1) stride - 2 pad + dilation
// (k - 1) + output_padding + 1.
Result Convolution(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> b, a.OptionalTensor("bias"));
  const size_t rank = x.shape.size();
  if (rank < 3 || rank > 5 || w.shape.size() != rank) {
    return a.Error(absl::StrCat("input ", FormatShape(x.shape), " and weight ",
                                FormatShape(w.shape),
                                " must both be 3-, 4- or 5-d: (N, C, spatial...) and (O, "
                                "C / groups, kernel...) for a 1-, 2- or 3-d convolution"));
  }
  const size_t n = rank - 2;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, SpatialInts(a, "stride", n));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad, SpatialInts(a, "padding", n));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, SpatialInts(a, "dilation", n));
  OVERLAP_ASSIGN_OR_RETURN(bool transposed, a.Bool("transposed"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t groups, a.Int("groups"));
  // input and weight of one dtype, the result's; a bias is converted to it (as ATen).
  OVERLAP_ASSIGN_OR_RETURN(std::string dtype, SameDtype(a, {&x, &w}));
  Shape out(rank, 0);
  out[0] = x.shape[0];
  if (transposed) {  // weight [in, out / groups, kernel...]
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> extra,
                             SpatialInts(a, "output_padding", n, std::vector<int64_t>{0}));
    if (groups <= 0 || x.shape[1] != w.shape[0] || w.shape[0] % groups != 0) {
      return a.Error(absl::StrCat("input ", FormatShape(x.shape), " and weight ",
                                  FormatShape(w.shape), " disagree on channels (transposed)"));
    }
    out[1] = w.shape[1] * groups;
    if (b && b->shape != Shape{out[1]}) return a.Error("bias must be [out_channels]");
    for (size_t i = 0; i < n; ++i) {
      out[2 + i] = (x.shape[2 + i] - 1) * stride[i] - 2 * pad[i] + dil[i] * (w.shape[2 + i] - 1) +
                   extra[i] + 1;
      if (out[2 + i] <= 0) return a.Error("the transposed convolution's output is empty");
    }
    return One(std::move(out), std::move(dtype));
  }
  if (groups <= 0 || x.shape[1] != w.shape[1] * groups || w.shape[0] % groups != 0) {
    return a.Error(absl::StrCat("input ", FormatShape(x.shape), " and weight ",
                                FormatShape(w.shape), " disagree on channels"));
  }
  if (b && b->shape != Shape{w.shape[0]}) return a.Error("bias must be [out_channels]");
  out[1] = w.shape[0];
  for (size_t i = 0; i < n; ++i) {
    OVERLAP_ASSIGN_OR_RETURN(out[2 + i], PooledSize(a, x.shape[2 + i], w.shape[2 + i], stride[i],
                                                    pad[i], dil[i], false));
  }
  return One(std::move(out), std::move(dtype));
}

// convolution_backward: (d_input, d_weight, d_bias) of input's, weight's and [out_channels]
// types (bias_sizes where given), as output_mask asks; 1-, 2- or 3-d as the forward.
Result ConvolutionBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> bias_sizes,
                           a.Ints("bias_sizes", std::vector<int64_t>{}));
  OVERLAP_ASSIGN_OR_RETURN(bool transposed, a.Bool("transposed"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t groups, a.Int("groups"));
  const size_t rank = x.shape.size();
  // The output's channels: weight [out, in / groups, ...], or transposed [in, out / groups, ...].
  const bool fits = rank >= 3 && rank <= 5 && w.shape.size() == rank && g.shape.size() == rank;
  const int64_t channels = !fits ? -1 : transposed ? w.shape[1] * groups : w.shape[0];
  if (!fits || g.shape[0] != x.shape[0] || g.shape[1] != channels) {
    return a.Error(absl::StrCat("grad_output ", FormatShape(g.shape), " does not fit input ",
                                FormatShape(x.shape), " and weight ", FormatShape(w.shape),
                                " (3-, 4- or 5-d, one rank)"));
  }
  Shape bias = bias_sizes.empty() ? Shape{channels} : Shape(bias_sizes.begin(), bias_sizes.end());
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask, a.Mask());
  return Masked(Types{x, w, {bias, g.dtype}}, mask);
}

Result BatchNorm(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  if (x.shape.size() < 2) return a.Error("input must be (N, C, ...)");
  const int64_t c = x.shape[1];
  for (const char* name : {"weight", "bias"}) {
    OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> p, a.OptionalTensor(name));
    if (p && p->shape != Shape{c}) return a.Error("weight and bias must be [channels]");
  }
  // Evaluation mode saves no statistics: ATen returns them empty ([0]).
  OVERLAP_ASSIGN_OR_RETURN(bool training, a.Bool("training"));
  const int64_t saved = training ? c : 0;
  return Types{x, {{saved}, AccDtype(x.dtype)}, {{saved}, AccDtype(x.dtype)}};
}

Result BatchNormBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("input"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, x, "grad_out and input differ"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<TensorType> w, a.OptionalTensor("weight"));
  const int64_t c = x.shape.size() >= 2 ? x.shape[1] : 1;
  const std::string pd = w ? w->dtype : x.dtype;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<bool> mask, a.Mask());
  return Masked(Types{x, {{c}, pd}, {{c}, pd}}, mask);
}

// Max pooling over the last `n` (2 or 3) dimensions, and average pooling's shape: self (N, C,
// spatial...) or (C, spatial...); kernel_size, stride (None or []: the kernel's), padding,
// dilation each one value or one per spatial dimension.
Result PoolOver(const Args& a, size_t n) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> k, SpatialInts(a, "kernel_size", n));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, SpatialInts(a, "stride", n, k));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad,
                           SpatialInts(a, "padding", n, std::vector<int64_t>{0}));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dil,
                           SpatialInts(a, "dilation", n, std::vector<int64_t>{1}));
  OVERLAP_ASSIGN_OR_RETURN(bool ceil_mode, a.Bool("ceil_mode"));
  const size_t rank = x.shape.size();
  if (rank != n + 1 && rank != n + 2) {
    return a.Error(n == 2 ? "self must be (N, C, H, W) or (C, H, W)"
                          : "self must be (N, C, D, H, W) or (C, D, H, W)");
  }
  Shape out = x.shape;
  for (size_t i = 0; i < n; ++i) {
    if (2 * pad[i] > k[i]) return a.Error("padding must be at most half the kernel");
    OVERLAP_ASSIGN_OR_RETURN(out[rank - n + i], PooledSize(a, x.shape[rank - n + i], k[i],
                                                           stride[i], pad[i], dil[i], ceil_mode));
  }
  return Types{{out, x.dtype}, {out, "int64"}};
}

// max_pool2d_with_indices / max_pool3d_with_indices: (out, int64 indices).
Result MaxPool(const Args& a) { return PoolOver(a, 2); }
Result MaxPool3d(const Args& a) { return PoolOver(a, 3); }

// avg_pool2d / avg_pool3d: max pooling's output shape (no dilation), one result.
Result AvgPool(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(Types t, PoolOver(a, 2));
  return Types{t[0]};
}
Result AvgPool3d(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(Types t, PoolOver(a, 3));
  return Types{t[0]};
}

// avg_pool2d_backward / avg_pool3d_backward: self's type, grad_output pooled from it.
Result AvgPoolBackwardOver(const Args& a, size_t n) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Types pooled, PoolOver(a, n));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, pooled[0], "grad_output and the pooled self differ"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  return Types{{x.shape, g.dtype}};
}
Result AvgPoolBackward(const Args& a) { return AvgPoolBackwardOver(a, 2); }
Result AvgPool3dBackward(const Args& a) { return AvgPoolBackwardOver(a, 3); }

Result MaxPoolBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType idx, a.Tensor("indices"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, idx, "grad_output and indices differ"));
  return Types{{x.shape, g.dtype}};
}

Result Flatten(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  const int64_t r = x.shape.size();
  OVERLAP_ASSIGN_OR_RETURN(int64_t s, a.Int("start_dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t e, a.Int("end_dim"));
  OVERLAP_ASSIGN_OR_RETURN(s, a.Dim(s, r, "start_dim"));
  OVERLAP_ASSIGN_OR_RETURN(e, a.Dim(e, r, "end_dim"));
  if (r == 0) return One({1}, x.dtype);
  if (s > e) return a.Error("start_dim is after end_dim");
  Shape out(x.shape.begin(), x.shape.begin() + s);
  int64_t n = 1;
  for (int64_t i = s; i <= e; ++i) n *= x.shape[i];
  out.push_back(n);
  out.insert(out.end(), x.shape.begin() + e + 1, x.shape.end());
  return One(std::move(out), x.dtype);
}

// reduction: 0 none, 1 mean, 2 sum (torch's Reduction enum).
Result NllLoss(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType t, a.Tensor("target"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, a.Int("reduction"));
  if (reduction < 0 || reduction > 2) {
    return a.Error(absl::StrCat("argument 'reduction' is ", reduction,
                                "; ATen's reductions are 0 (none), 1 (mean) and 2 (sum)"));
  }
  if (x.shape.size() < 1 || x.shape.size() > 2 || IsFloating(t.dtype) ||
      t.shape != Shape(x.shape.begin(), x.shape.end() - 1)) {
    return a.Error(absl::StrCat("self ", FormatShape(x.shape), " (N, C) and target ",
                                FormatShape(t.shape), " (N, integers) do not fit"));
  }
  Shape out = reduction == 0 ? t.shape : Shape{};
  return Types{{out, x.dtype}, {{}, x.dtype}};
}

Result NllLossBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_RETURN_IF_ERROR(a.Tensor("grad_output").status());
  OVERLAP_RETURN_IF_ERROR(a.Tensor("target").status());
  return Types{x};
}

Result MseLoss(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType t, a.Tensor("target"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, x, t, "self and target differ"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, a.Int("reduction"));
  if (reduction < 0 || reduction > 2) {
    return a.Error(absl::StrCat("argument 'reduction' is ", reduction,
                                "; ATen's reductions are 0 (none), 1 (mean) and 2 (sum)"));
  }
  // An elementwise op of the two (ATen's TensorIterator): result_type.
  OVERLAP_ASSIGN_OR_RETURN(std::string d, a.Decided(ResultType({Operand(x), Operand(t)})));
  return One(reduction == 0 ? x.shape : Shape{}, std::move(d));
}

Result MseLossBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType t, a.Tensor("target"));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, x, t, "self and target differ"));
  return Types{x};
}

// A one-dimension reduction's (self, dim, keepdim) result shape: self's less `dim`, or with it
// 1 under keepdim (a 0-d self stays 0-d). `nonempty`: the reduced dimension must not be empty
// (ATen's rule for max.dim).
absl::StatusOr<Shape> ReducedDimShape(const Args& a, const TensorType& x, bool nonempty) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, a.Int("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool keep, a.Bool("keepdim"));
  OVERLAP_ASSIGN_OR_RETURN(d, a.Dim(d, x.shape.size(), "dim"));
  Shape out = x.shape;
  if (out.empty()) return out;
  if (nonempty && out[d] == 0) return a.Error(absl::StrCat("reduction dim ", d, " has size 0"));
  if (keep) {
    out[d] = 1;
  } else {
    out.erase(out.begin() + d);
  }
  return out;
}

// max.dim (self, dim, keepdim): values of self's dtype and int64 indices. As ATen, the reduced
// dimension must not be empty (a 0-d self is its own maximum, dim 0 or -1).
Result MaxDim(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(Shape out, ReducedDimShape(a, x, /*nonempty=*/true));
  return Types{{out, x.dtype}, {out, "int64"}};
}

// argmax / argmin (self, dim=None, keepdim): int64; dim None reduces the flattened self
// (keepdim: every dimension 1). The reduced elements must not be none (ATen's rule).
Result ArgMaxMin(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  const Value* dim = a.Get("dim");
  if (dim != nullptr && !dim->is_none()) {
    OVERLAP_ASSIGN_OR_RETURN(Shape out, ReducedDimShape(a, x, /*nonempty=*/true));
    return One(std::move(out), "int64");
  }
  OVERLAP_ASSIGN_OR_RETURN(bool keep, a.Bool("keepdim"));
  int64_t n = 1;
  for (int64_t s : x.shape) n *= s;
  if (n == 0) return a.Error("an empty self has no maximum or minimum (dim None)");
  return One(keep ? Shape(x.shape.size(), 1) : Shape{}, "int64");
}

// all.dim / any.dim (self, dim, keepdim): the reduced shape, bool.
Result AllAnyDim(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(Shape out, ReducedDimShape(a, x, /*nonempty=*/false));
  return One(std::move(out), "bool");
}

// amax (self, dim = [] for every dimension, keepdim): self's dtype. An empty self needs its
// dimensions named, none of size 0 (ATen's zero-numel check).
Result Amax(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.Ints("dim", std::vector<int64_t>{}));
  OVERLAP_ASSIGN_OR_RETURN(bool keep, a.Bool("keepdim"));
  Shape out;
  OVERLAP_RETURN_IF_ERROR(ReducedShape(a, x.shape, dims, keep, out));
  if (Numel(x.shape) == 0) {
    if (dims.empty()) return a.Error("an empty self needs the dimensions to reduce named");
    for (int64_t d : dims) {
      OVERLAP_ASSIGN_OR_RETURN(int64_t n, a.Dim(d, x.shape.size(), "dim"));
      if (x.shape[n] == 0) return a.Error(absl::StrCat("reduction dim ", d, " has size 0"));
    }
  }
  return One(std::move(out), x.dtype);
}

// leaky_relu, prelu and _prelu_kernel exist for floating dtypes only in ATen.
absl::Status FloatingOnly(const Args& a, const TensorType& x) {
  if (!CategoryOf(x.dtype) || IsFloating(x.dtype)) return absl::OkStatus();
  return a.Error(absl::StrCat("self is ", x.dtype, ": a floating dtype is needed"));
}

Result LeakyRelu(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_RETURN_IF_ERROR(FloatingOnly(a, x));
  return Types{x};
}

// prelu's weight: self's dtype, at most 1-d, one element or one per channel (dimension 1 of
// self; a 1-d self has one channel).
absl::Status CheckPreluWeight(const Args& a, const TensorType& x, const TensorType& w) {
  if (w.shape.size() > 1) return a.Error("weight must be a scalar or 1-d");
  const int64_t n = Numel(w.shape);
  if (n != 1) {
    if (x.shape.empty()) return a.Error("a 0-d self takes a one-element weight only");
    const int64_t channels = x.shape.size() > 1 ? x.shape[1] : 1;
    if (channels != n) {
      return a.Error(absl::StrCat("weight has ", n, " elements, self ", channels, " channels"));
    }
  }
  OVERLAP_RETURN_IF_ERROR(FloatingOnly(a, x));
  return SameDtype(a, {&x, &w}).status();
}

Result Prelu(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_RETURN_IF_ERROR(CheckPreluWeight(a, x, w));
  return Types{x};
}

// prelu_backward (1.13): (self's type, weight's type).
Result PreluBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_RETURN_IF_ERROR(CheckPreluWeight(a, x, w));
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, x, "grad_output and self differ"));
  return Types{x, w};
}

// _prelu_kernel (2.x): weight broadcast to self (NumPy rules); one floating dtype.
Result PreluKernel(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::string dtype, SameDtype(a, {&x, &w}));
  OVERLAP_RETURN_IF_ERROR(FloatingOnly(a, x));
  OVERLAP_ASSIGN_OR_RETURN(Shape out, Broadcast(a, x.shape, w.shape));
  return One(std::move(out), std::move(dtype));
}

// _prelu_kernel_backward (2.x): both gradients of self's shape; weight broadcasts to it.
Result PreluKernelBackward(const Args& a) {
  OVERLAP_ASSIGN_OR_RETURN(TensorType g, a.Tensor("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(TensorType w, a.Tensor("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::string dtype, SameDtype(a, {&x, &w}));
  OVERLAP_RETURN_IF_ERROR(FloatingOnly(a, x));
  OVERLAP_ASSIGN_OR_RETURN(Shape out, Broadcast(a, x.shape, w.shape));
  if (out != x.shape) {
    return a.Error(absl::StrCat("weight ", FormatShape(w.shape), " does not broadcast to self ",
                                FormatShape(x.shape)));
  }
  OVERLAP_RETURN_IF_ERROR(SameShape(a, g, x, "grad_output and self differ"));
  return Types{x, x};
}

// pixel_shuffle [..., C r^2, H, W] -> [..., C, H r, W r]; pixel_unshuffle the inverse.
Result PixelShuffle(const Args& a) {
  const bool up = a.node().target() == "aten.pixel_shuffle.default";
  OVERLAP_ASSIGN_OR_RETURN(TensorType x, a.Tensor("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t r, a.Int(up ? "upscale_factor" : "downscale_factor"));
  const size_t n = x.shape.size();
  if (n < 3) return a.Error(absl::StrCat("self has ", n, " dimensions, at least 3 are needed"));
  if (r <= 0) return a.Error(absl::StrCat("the factor must be positive, got ", r));
  int64_t& c = x.shape[n - 3];
  int64_t& h = x.shape[n - 2];
  int64_t& w = x.shape[n - 1];
  int64_t rr = 0;
  if (__builtin_mul_overflow(r, r, &rr)) return a.Error("the factor's square overflows int64");
  bool overflow = false;
  if (up) {
    if (c % rr != 0) return a.Error(absl::StrCat("channels ", c, " not divisible by ", r, "^2"));
    c /= rr;
    overflow = __builtin_mul_overflow(h, r, &h) || __builtin_mul_overflow(w, r, &w);
  } else {
    if (h % r != 0 || w % r != 0) {
      return a.Error(absl::StrCat("height ", h, " and width ", w, " must be divisible by ", r));
    }
    h /= r;
    w /= r;
    overflow = __builtin_mul_overflow(c, rr, &c);
  }
  if (overflow) return a.Error("the result's size overflows int64");
  return Types{x};
}

using Rule = Result (*)(const Args&);
using RuleRow = std::pair<absl::string_view, Rule>;

// The rule table by op family; Rules merges them.

// Matrix products, attention and convolution.
constexpr RuleRow kMatmulRules[] = {
    {"aten.mm.default", Mm},
    {"aten.addmm.default", Addmm},
    {"aten.t.default", TRule},
    {"aten.bmm.default", Bmm},
    {"aten._scaled_dot_product_flash_attention.default", FlashAttention},
    {"aten._scaled_dot_product_flash_attention_backward.default", FlashAttentionBackward},
    {"aten.baddbmm.default", Baddbmm},
    {"aten.convolution.default", Convolution},
    {"aten.convolution_backward.default", ConvolutionBackward},
};

// Views, copies and layout changes: reshapes, transposes, slices, splits, joins, pads.
constexpr RuleRow kLayoutRules[] = {
    {"aten._reshape_alias.default", View},  // its strides do not change the shape
    {"aten.detach.default", Identity},
    {"aten.permute.default", PermuteRule},
    {"aten.select.int", SelectRule},
    {"aten.select_backward.default", SliceBackward},  // input_sizes, as slice's
    {"aten.view.default", View},
    {"aten._unsafe_view.default", View},
    {"aten.reshape.default", View},
    {"aten.transpose.int", Transpose},
    {"aten.unsqueeze.default", Unsqueeze},
    {"aten.squeeze.dim", SqueezeDim},
    {"aten.squeeze.dims", SqueezeDim},
    {"aten.expand.default", Expand},
    {"aten.clone.default", Identity},
    {"operator.getitem", GetItem},
    {"aten.split.Tensor", Split},
    {"aten.unsafe_split.Tensor", Split},
    {"aten.unbind.int", Unbind},
    {"aten.stack.default", Stack},
    {"aten.slice_scatter.default", Identity},
    {"aten.as_strided.default", AsStrided},
    {"aten.as_strided_scatter.default", AsStridedScatter},
    {"aten.split_with_sizes.default", SplitWithSizes},
    {"aten._to_copy.default", Identity},
    {"aten.roll.default", Identity},
    {"aten.constant_pad_nd.default", ConstantPad},
    {"aten.lift_fresh_copy.default", Identity},
    {"aten.cat.default", Cat},
    {"aten.slice.Tensor", Slice},
    {"aten.slice_backward.default", SliceBackward},
    {"aten.select_scatter.default", SelectScatter},
    {"aten.flip.default", Flip},
    {"aten.flatten.using_ints", Flatten},
    {"aten.pixel_shuffle.default", PixelShuffle},
    {"aten.pixel_unshuffle.default", PixelShuffle},
};

// Factories: new tensors from sizes, values or another tensor's type.
constexpr RuleRow kCreationRules[] = {
    {"aten.ones_like.default", Identity},  {"aten.full_like.default", Identity},
    {"aten.empty_like.default", Identity}, {"aten.fill.Scalar", Identity},
    {"aten.zeros.default", Zeros},         {"aten.fill.Tensor", Identity},
    {"aten.full.default", Full},           {"aten.scalar_tensor.default", ScalarTensor},
    {"aten.ones.default", Zeros},          {"aten.empty.memory_format", Zeros},
    {"aten.arange.start_step", Arange},    {"aten.arange.start", Arange},
    {"aten.zero.default", Identity},       {"aten.new_empty.default", NewZeros},
    {"aten.arange.default", Arange},       {"aten.zeros_like.default", Identity},
    {"aten.new_zeros.default", NewZeros},  {"aten.new_ones.default", NewZeros},
    {"aten.new_full.default", NewZeros},   {"aten.triu_indices.default", TriuIndices},
};

// Pointwise ops: arithmetic, comparisons, activations and their backwards.
constexpr RuleRow kPointwiseRules[] = {
    {"aten.leaky_relu.default", LeakyRelu},  // floating self only
    {"aten.masked_fill.Scalar", Identity},
    {"aten.triu.default", Identity},
    {"aten.tril.default", Identity},
    {"aten.where.self", Where},
    {"aten.bitwise_not.default", BitwiseNot},
    {"aten.bitwise_and.Tensor", BitwiseBinary},
    {"aten.bitwise_or.Tensor", BitwiseBinary},
    {"aten.bitwise_xor.Tensor", BitwiseBinary},
    {"aten.clamp.default", Clamp},
    {"aten.clamp_min.default", Clamp},
    {"aten.abs.default", Abs},
    {"aten.sub.Scalar", Binary},
    {"aten.bernoulli_.float", Identity},
    {"aten.bernoulli.p", Identity},
    {"aten.pow.Tensor_Scalar", PowScalar},
    {"aten.neg.default", Neg},
    {"aten.add.Scalar", Binary},
    {"aten.mul.Scalar", Binary},
    {"aten.div.Scalar", Binary},
    {"aten.add.Tensor", Binary},
    {"aten.sub.Tensor", Binary},
    {"aten.mul.Tensor", Binary},
    {"aten.div.Tensor", Binary},
    {"aten.div.Tensor_mode", Binary},
    {"aten.floor_divide.default", Binary},
    {"aten.prelu.default", Prelu},
    {"aten.prelu_backward.default", PreluBackward},
    {"aten._prelu_kernel.default", PreluKernel},
    {"aten._prelu_kernel_backward.default", PreluKernelBackward},
};

// Reductions, normalizations, sorts and scans.
constexpr RuleRow kReductionRules[] = {
    {"aten.norm.ScalarOpt_dim", Norm},
    {"aten.native_group_norm.default", GroupNorm},
    {"aten.native_group_norm_backward.default", GroupNormBackward},
    {"aten.native_layer_norm.default", LayerNorm},
    {"aten.native_layer_norm_backward.default", LayerNormBackward},
    {"aten.mean.dim", SumOrMean},
    {"aten.sum.dim_IntList", SumOrMean},
    {"aten.sum.default", SumOrMean},
    {"aten.mean.default", SumOrMean},
    {"aten._softmax.default", Softmax},
    {"aten._log_softmax.default", Softmax},
    {"aten._softmax_backward_data.default", SoftmaxBackward},
    {"aten._log_softmax_backward_data.default", SoftmaxBackward},
    {"aten.topk.default", Topk},
    {"aten.argsort.default", Argsort},
    {"aten.sort.default", Sort},
    {"aten.cumsum.default", Cumsum},
    {"aten.histc.default", Histc},
    {"transformers.grouped_mm_fallback.default", GroupedMm},
    {"transformers.grouped_mm_fallback_backward.default", GroupedMmBackward},
    {"aten.native_batch_norm.default", BatchNorm},
    {"aten.native_batch_norm_backward.default", BatchNormBackward},
    {"aten.max.dim", MaxDim},
    {"aten.argmax.default", ArgMaxMin},
    {"aten.argmin.default", ArgMaxMin},
    {"aten.all.dim", AllAnyDim},
    {"aten.any.dim", AllAnyDim},
    {"aten.amax.default", Amax},
};

// Indexing, scatter / gather and embeddings.
constexpr RuleRow kIndexingRules[] = {
    {"aten.index.Tensor", Index},
    {"aten.index_put.default", IndexPut},
    {"aten.embedding.default", Embedding},
    {"aten.embedding_dense_backward.default", EmbeddingBackward},
    {"aten.index_select.default", IndexSelect},
    {"aten.index_add.default", IndexAdd},
    {"aten.index_add_.default", IndexAdd},
    {"aten.scatter.src", DimIndexed},
    {"aten.scatter.value", DimIndexed},
    {"aten.scatter_add.default", DimIndexed},
    {"aten.gather.default", DimIndexed},
    {"aten._embedding_bag.default", EmbeddingBag},
    {"aten._embedding_bag_dense_backward.default", EmbeddingBagBackward},
    {"aten.repeat_interleave.Tensor", RepeatInterleave},
    {"aten.repeat.default", Repeat},
};

// Pooling and resampling.
constexpr RuleRow kPoolingRules[] = {
    {"aten.upsample_nearest2d.vec", Upsample},
    {"aten._adaptive_avg_pool2d.default", AdaptiveAvgPool<2>},
    {"aten._adaptive_avg_pool2d_backward.default", LikeSelf},
    {"aten._adaptive_avg_pool3d.default", AdaptiveAvgPool<3>},
    {"aten._adaptive_avg_pool3d_backward.default", LikeSelf},
    {"aten.upsample_bilinear2d.vec", Upsample},
    {"aten.upsample_nearest2d_backward.vec", UpsampleBackward},
    {"aten.upsample_bilinear2d_backward.vec", UpsampleBackward},
    {"aten.max_pool2d_with_indices.default", MaxPool},
    {"aten.max_pool2d_with_indices_backward.default", MaxPoolBackward},
    {"aten.avg_pool2d.default", AvgPool},
    {"aten.avg_pool2d_backward.default", AvgPoolBackward},
    {"aten.max_pool3d_with_indices.default", MaxPool3d},
    {"aten.max_pool3d_with_indices_backward.default", MaxPoolBackward},
    {"aten.avg_pool3d.default", AvgPool3d},
    {"aten.avg_pool3d_backward.default", AvgPool3dBackward},
    {"aten.adaptive_max_pool2d.default", AdaptiveMaxPool<2>},
    {"aten.adaptive_max_pool2d_backward.default", MaxPoolBackward},
    {"aten.adaptive_max_pool3d.default", AdaptiveMaxPool<3>},
    {"aten.adaptive_max_pool3d_backward.default", MaxPoolBackward},
};

// Losses.
constexpr RuleRow kLossRules[] = {
    {"aten.nll_loss_forward.default", NllLoss},
    {"aten.nll_loss_backward.default", NllLossBackward},
    {"aten.mse_loss.default", MseLoss},
    {"aten.mse_loss_backward.default", MseLossBackward},
};

// Every rule by target, merged from the family tables at first use.
const absl::flat_hash_map<std::string, Rule>& Rules() {
  static const auto* rules = [] {
    auto* merged = new absl::flat_hash_map<std::string, Rule>;
    for (absl::Span<const RuleRow> family :
         {absl::Span<const RuleRow>(kMatmulRules), absl::Span<const RuleRow>(kLayoutRules),
          absl::Span<const RuleRow>(kCreationRules), absl::Span<const RuleRow>(kPointwiseRules),
          absl::Span<const RuleRow>(kReductionRules), absl::Span<const RuleRow>(kIndexingRules),
          absl::Span<const RuleRow>(kPoolingRules), absl::Span<const RuleRow>(kLossRules)}) {
      for (const auto& [target, rule] : family) merged->emplace(std::string(target), rule);
    }
    // Pointwise ops without a rule of their own: the rule their declaration implies.
    for (const OpSchema& schema : OpSchemas()) {
      if (schema.pointwise) merged->emplace(schema.target, Pointwise);
    }
    return merged;
  }();
  return *rules;
}

// Parses a JSON array of int arrays ("[[2,3],[4]]"); false when malformed.
// A tuple's undefined element (null in `shapes` / `dtypes`: an output a mask left out).
constexpr int64_t kUndefinedDim = std::numeric_limits<int64_t>::min();

bool ParseShapes(absl::string_view s, std::vector<Shape>* out) {
  size_t i = 0;
  auto skip = [&] {
    while (i < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  auto eat = [&](char c) {
    skip();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  };
  if (!eat('[')) return false;
  if (eat(']')) return true;
  do {
    skip();
    if (s.substr(i, 4) == "null") {  // an undefined element of a tuple
      i += 4;
      out->push_back(Shape{kUndefinedDim});
      continue;
    }
    if (!eat('[')) return false;
    Shape shape;
    if (!eat(']')) {
      do {
        skip();
        size_t j = i;
        if (j < s.size() && s[j] == '-') ++j;
        while (j < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[j]))) ++j;
        int64_t v;
        if (!absl::SimpleAtoi(s.substr(i, j - i), &v)) return false;
        shape.push_back(v);
        i = j;
      } while (eat(','));
      if (!eat(']')) return false;
    }
    out->push_back(std::move(shape));
  } while (eat(','));
  return eat(']');
}

// Parses a JSON array of plain strings ("[\"float32\", \"int64\"]"); false when malformed.
bool ParseStrings(absl::string_view s, std::vector<std::string>* out) {
  size_t i = 0;
  auto skip = [&] {
    while (i < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  skip();
  if (i >= s.size() || s[i++] != '[') return false;
  skip();
  if (i < s.size() && s[i] == ']') return true;
  while (true) {
    skip();
    if (s.substr(i, 4) == "null") {
      i += 4;
      out->emplace_back(kUndefinedDtype);
      skip();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      return i < s.size() && s[i] == ']';
    }
    if (i >= s.size() || s[i++] != '"') return false;
    const size_t end = s.find('"', i);
    if (end == absl::string_view::npos) return false;
    out->emplace_back(s.substr(i, end - i));
    i = end + 1;
    skip();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    return i < s.size() && s[i] == ']';
  }
}

}  // namespace

std::string FormatType(const TensorType& t) {
  return absl::StrCat(FormatShape(t.shape), " ", t.dtype.empty() ? "?" : t.dtype);
}

std::vector<TensorType> StatedTypes(const Node& n) {
  const NodeMeta& m = n.meta();
  if (m.has_shape) return {TensorType{m.shape, m.has_dtype ? m.dtype : ""}};
  const std::string* shapes = nullptr;
  const std::string* dtypes = nullptr;
  for (const auto& [k, v] : m.extra) {
    if (k == "shapes") shapes = &v;
    if (k == "dtypes") dtypes = &v;
  }
  std::vector<Shape> ss;
  if (shapes == nullptr || !ParseShapes(*shapes, &ss)) return {};
  std::vector<std::string> ds;
  if (dtypes != nullptr && (!ParseStrings(*dtypes, &ds) || ds.size() != ss.size())) return {};
  std::vector<TensorType> out;
  for (size_t i = 0; i < ss.size(); ++i) {
    if (ss[i] == Shape{kUndefinedDim}) {
      out.push_back(Undefined());
      continue;
    }
    out.push_back({std::move(ss[i]), dtypes != nullptr ? ds[i] : (m.has_dtype ? m.dtype : "")});
  }
  return out;
}

bool HasShapeRule(absl::string_view target) { return Rules().contains(target); }

std::vector<std::string> ShapeRuleTargets() {
  std::vector<std::string> out;
  for (const auto& [target, rule] : Rules()) out.push_back(target);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<TensorType>> InferTypes(const Graph& g, const Node& n) {
  auto it = Rules().find(n.target());
  if (it == Rules().end()) {
    return absl::NotFoundError(
        absl::StrCat("node \"", n.name(), "\": no shape rule for ", Printable(n.target())));
  }
  const Args args(g, n);
  OVERLAP_RETURN_IF_ERROR(args.bound());
  return it->second(args);
}

absl::StatusOr<ShapeCheckReport> CheckShapes(const Graph& g, const ShapeCheckOptions& options) {
  ShapeCheckReport report;
  absl::flat_hash_set<std::string> seen;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kCallFunction) continue;
    auto it = Rules().find(n.target());
    if (it == Rules().end()) {
      if (options.require_rules) {
        return absl::InvalidArgumentError(absl::StrCat("node \"", n.name(),
                                                       "\": no shape rule for ",
                                                       Printable(n.target()), " (docs/ops.md)"));
      }
      ++report.no_rule;
      if (seen.insert(n.target()).second) report.targets_without_rule.push_back(n.target());
      continue;
    }
    const std::vector<TensorType> stated = StatedTypes(n);
    if (stated.empty()) {
      ++report.unstated;
      continue;
    }
    const Args args(g, n);
    absl::StatusOr<std::vector<TensorType>> inferred =
        args.bound().ok() ? it->second(args) : absl::StatusOr<Types>(args.bound());
    if (absl::IsNotFound(inferred.status()) && !options.require_rules) {
      // A use of the target its rule does not cover (getitem of a tensor).
      ++report.no_rule;
      const std::string what = absl::StrCat(n.target(), " (", inferred.status().message(), ")");
      if (seen.insert(what).second) report.targets_without_rule.push_back(what);
      continue;
    }
    OVERLAP_ASSIGN_OR_RETURN(std::vector<TensorType> rule, std::move(inferred));
    // A stated dtype may be absent, and a rule's undecided (""; an input's dtype unknown):
    // then only shapes are compared.
    bool same = rule.size() == stated.size();
    for (size_t i = 0; same && i < rule.size(); ++i) {
      same = rule[i].shape == stated[i].shape &&
             (stated[i].dtype.empty() || rule[i].dtype.empty() || rule[i].dtype == stated[i].dtype);
    }
    if (!same) {
      std::vector<std::string> ins, says, gives;
      for (NodeId in : n.inputs()) {
        for (const TensorType& t : StatedTypes(g.node(in))) ins.push_back(FormatType(t));
      }
      for (const TensorType& t : stated) says.push_back(FormatType(t));
      for (const TensorType& t : rule) gives.push_back(FormatType(t));
      return absl::InvalidArgumentError(
          absl::StrCat("node \"", n.name(), "\": its metadata says ", absl::StrJoin(says, ", "),
                       " but ", Printable(n.target()), " of ", absl::StrJoin(ins, ", "), " gives ",
                       absl::StrJoin(gives, ", ")));
    }
    ++report.checked;
  }
  return report;
}

}  // namespace overlap
