#include "graph/structural_backward.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/cost_model.h"
#include "graph/status_macros.h"
#include "graph/value_bytes.h"

namespace overlap {
namespace {

bool IsParamPlaceholder(const Node& n) { return n.op() == Op::kPlaceholder && n.meta().has_param; }

// aten.mm.default -> aten.mm_backward.default; anything else gets "_backward" appended.
std::string BackwardTarget(const Node& f) {
  if (f.op() == Op::kCallMethod) return absl::StrCat("aten.", f.target(), "_backward.default");
  std::vector<std::string> parts = absl::StrSplit(f.target(), '.');
  if (parts.size() >= 3 && parts[0] == "aten")
    return absl::StrCat("aten.", parts[1], "_backward.default");
  return absl::StrCat(f.target(), "_backward");
}

std::string BaseName(const std::string& target) {
  std::vector<std::string> parts = absl::StrSplit(target, '.');
  std::string base = parts.size() >= 2 ? parts[1] : target;
  while (!base.empty() && base[0] == '_') base.erase(0, 1);
  return base.empty() ? "backward" : base;
}

// A value's description without its producer's cost, aliasing or roles.
NodeMeta Describe(const NodeMeta& m) {
  NodeMeta out;
  if (m.has_shape) out.set_shape(m.shape);
  if (m.has_dtype) out.set_dtype(m.dtype);
  if (m.has_tensor_size) out.set_tensor_size(m.tensor_size);
  return out;
}

// The backward under construction and, per forward node, what stands for it there: its
// parameter placeholder, saved copy, gradient so far. One use: Run.
class StructuralBackwardBuilder {
 public:
  explicit StructuralBackwardBuilder(const Graph& f)
      : f_(f),
        param_ph_(f.id_bound(), kNoNode),
        needs_grad_(f.id_bound(), 0),
        root_(f.id_bound(), kNoNode),
        grad_(f.id_bound(), kNoNode),
        param_grad_(f.id_bound(), kNoNode),
        saved_(f.id_bound(), kNoNode) {}

  absl::StatusOr<Graph> Run() {
    if (std::optional<ModuleOwnedParam> m = FirstModuleOwnedParam(f_)) {
      const Node& n = f_.node(m->node);
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter \"", f_.params()[m->param].name, "\" is owned by ", OpName(n.op()), " node \"",
          n.name(), "\": backward graphs are built from lifted forward graphs (--lifted)"));
    }
    if (f_.has_name()) b_.set_name(absl::StrCat(f_.name(), "_backward"));
    b_.set_has_params_key(true);
    OVERLAP_RETURN_IF_ERROR(AddParameters());
    OVERLAP_RETURN_IF_ERROR(AddTangents());
    for (NodeId id = f_.last(); id != kNoNode; id = f_.prev(id)) {
      OVERLAP_RETURN_IF_ERROR(Backpropagate(id));
    }
    OVERLAP_RETURN_IF_ERROR(AddOutput());
    // Placeholders first, in creation order.
    std::vector<NodeId> order, rest;
    for (NodeId id : b_.order()) {
      (b_.node(id).op() == Op::kPlaceholder ? order : rest).push_back(id);
    }
    order.insert(order.end(), rest.begin(), rest.end());
    OVERLAP_RETURN_IF_ERROR(b_.SetOrder(order));
    return std::move(b_);
  }

 private:
  // The parameter placeholders and their table rows; which forward values need a gradient
  // and which parameter a view chain reads.
  absl::Status AddParameters() {
    for (NodeId id : f_.order()) {
      const Node& n = f_.node(id);
      if (IsParamPlaceholder(n)) {
        OVERLAP_ASSIGN_OR_RETURN(const NodeId ph,
                                 b_.AddNode(Op::kPlaceholder, n.name(), n.target()));
        NodeMeta m = Describe(n.meta());
        m.set_param(n.meta().param);
        b_.mutable_node(ph).mutable_meta() = m;
        param_ph_[id] = ph;
        needs_grad_[id] = 1;
        root_[id] = id;
        continue;
      }
      for (NodeId in : n.inputs()) needs_grad_[id] |= needs_grad_[in];
      if (IsView(n) && !n.inputs().empty()) root_[id] = root_[n.inputs()[0]];
    }
    for (const Param& p : f_.params()) {
      const NodeId owner = f_.FindNode(p.owner);
      if (owner != kNoNode && param_ph_[owner] != kNoNode) {
        OVERLAP_RETURN_IF_ERROR(b_.AddParam(p));
      }
    }
    return absl::OkStatus();
  }

  // Tangents: one per distinct output value that leads to a parameter.
  absl::Status AddTangents() {
    const Node& out = f_.node(f_.last());
    if (out.op() != Op::kOutput) return absl::OkStatus();
    int k = 0;
    for (NodeId v : out.inputs()) {
      if (!needs_grad_[v] || IsParamPlaceholder(f_.node(v))) continue;
      // Name and target agree (arguments are evaluated in no fixed order: count first).
      const std::string tangent = absl::StrCat("tangents_", ++k);
      OVERLAP_ASSIGN_OR_RETURN(const NodeId t,
                               b_.AddNode(Op::kPlaceholder, b_.UniqueName(tangent), tangent));
      b_.mutable_node(t).mutable_meta() = Describe(f_.node(v).meta());
      grad_[v] = t;
    }
    return absl::OkStatus();
  }

  // The backward of forward node `id` once its gradient is complete (nodes in reverse order).
  absl::Status Backpropagate(NodeId id) {
    const Node& n = f_.node(id);
    if (n.op() != Op::kCallFunction && n.op() != Op::kCallMethod) return absl::OkStatus();
    if (grad_[id] == kNoNode) return absl::OkStatus();
    const NodeId g = grad_[id];
    // A pure view (no work of its own) passes its gradient to its input; an in-place op
    // (an alias with device time, like index_add_) is a computation like any other.
    const bool pure_view = IsView(n) && !(n.meta().has_device_time && n.meta().device_time > 0);
    if ((pure_view || n.target() == "operator.getitem") && !n.inputs().empty()) {
      const NodeId x = n.inputs()[0];
      if (!needs_grad_[x]) return absl::OkStatus();
      OVERLAP_ASSIGN_OR_RETURN(const NodeId v,
                               b_.AddNode(Op::kCallFunction, b_.UniqueName("view_backward"),
                                          "aten.view.default", {Value::Ref(g)}));
      NodeMeta m = Describe(f_.node(x).meta());
      m.set_device_time(0);
      m.set_aliases_input(true);
      b_.mutable_node(v).mutable_meta() = m;
      return Accumulate(x, v);
    }
    const double time = n.meta().has_device_time ? n.meta().device_time : 0;
    for (NodeId x : n.inputs()) {
      if (!needs_grad_[x]) continue;
      std::vector<Value> args = {Value::Ref(g)};
      for (NodeId y : n.inputs()) {
        if (y == x) continue;
        OVERLAP_ASSIGN_OR_RETURN(const NodeId o, Operand(y));
        args.push_back(Value::Ref(o));
      }
      const std::string target = BackwardTarget(n);
      OVERLAP_ASSIGN_OR_RETURN(
          const NodeId d,
          b_.AddNode(Op::kCallFunction, b_.UniqueName(absl::StrCat(BaseName(target))), target,
                     std::move(args)));
      NodeMeta m = Describe(f_.node(x).meta());
      m.set_device_time(time);
      b_.mutable_node(d).mutable_meta() = m;
      OVERLAP_RETURN_IF_ERROR(Accumulate(x, d));
    }
    return absl::OkStatus();
  }

  // Parameter gradients out, in parameter-table order (a shared placeholder once).
  absl::Status AddOutput() {
    std::vector<Value> grads;
    std::vector<char> emitted(f_.id_bound(), 0);
    for (const Param& p : f_.params()) {
      const NodeId owner = f_.FindNode(p.owner);
      if (owner == kNoNode || param_ph_[owner] == kNoNode || emitted[owner]) continue;
      emitted[owner] = 1;
      if (param_grad_[owner] != kNoNode) grads.push_back(Value::Ref(param_grad_[owner]));
    }
    return b_
        .AddNode(Op::kOutput, b_.UniqueName("output"), "output", {Value::List(std::move(grads))})
        .status();
  }

  // a + c, described like `like`, costing a pointwise kernel's time over three tensors.
  absl::StatusOr<NodeId> AddSum(NodeId a, NodeId c, const NodeMeta& like) {
    OVERLAP_ASSIGN_OR_RETURN(const NodeId s,
                             b_.AddNode(Op::kCallFunction, b_.UniqueName("add"), "aten.add.Tensor",
                                        {Value::Ref(a), Value::Ref(c)}));
    NodeMeta& m = b_.mutable_node(s).mutable_meta();
    m = Describe(like);
    const double bytes = static_cast<double>(VerifiedValueBytes(b_.node(s)));
    m.set_device_time(cost_.KernelTime(0, 3.0 * bytes, like.has_dtype ? like.dtype : "float32"));
    return s;
  }

  // Adds `contribution` to forward value x's gradient; a parameter's final gradient carries
  // meta.grad_of (moved to the sum when another contribution arrives).
  absl::Status Accumulate(NodeId x, NodeId contribution) {
    const Node& xn = f_.node(x);
    if (IsParamPlaceholder(xn)) {
      NodeId total = contribution;
      if (param_grad_[x] != kNoNode) {
        OVERLAP_ASSIGN_OR_RETURN(
            total, AddSum(param_grad_[x], contribution, b_.node(contribution).meta()));
        NodeMeta& prev = b_.mutable_node(param_grad_[x]).mutable_meta();
        prev.has_grad_of = false;
        prev.grad_of.clear();
      }
      b_.mutable_node(total).mutable_meta().set_grad_of(xn.meta().param);
      param_grad_[x] = total;
      return absl::OkStatus();
    }
    if (xn.op() == Op::kPlaceholder || xn.op() == Op::kGetAttr) return absl::OkStatus();
    if (grad_[x] == kNoNode) {
      grad_[x] = contribution;
    } else {
      OVERLAP_ASSIGN_OR_RETURN(grad_[x],
                               AddSum(grad_[x], contribution, b_.node(contribution).meta()));
    }
    return absl::OkStatus();
  }

  // What a backward op reads in place of forward value y: the parameter it views, or its
  // saved copy (a placeholder made at first use).
  absl::StatusOr<NodeId> Operand(NodeId y) {
    if (root_[y] != kNoNode) return param_ph_[root_[y]];
    if (saved_[y] != kNoNode) return saved_[y];
    const Node& yn = f_.node(y);
    OVERLAP_ASSIGN_OR_RETURN(
        const NodeId s,
        b_.AddNode(Op::kPlaceholder, b_.UniqueName(absl::StrCat("saved_", yn.name())),
                   absl::StrCat("saved_", yn.name())));
    b_.mutable_node(s).mutable_meta() = Describe(yn.meta());
    saved_[y] = s;
    return s;
  }

  const Graph& f_;
  Graph b_;
  CostModel cost_;
  std::vector<NodeId> param_ph_;  // forward placeholder -> backward one
  std::vector<char> needs_grad_;
  std::vector<NodeId> root_;        // the parameter a view chain reads
  std::vector<NodeId> grad_;        // gradient of a forward value
  std::vector<NodeId> param_grad_;  // final gradient of a parameter
  std::vector<NodeId> saved_;
};

}  // namespace

absl::StatusOr<Graph> BuildStructuralBackward(const Graph& f) {
  return StructuralBackwardBuilder(f).Run();
}

}  // namespace overlap
