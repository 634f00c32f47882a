#include "graph/structural_backward.h"

#include <string>
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

}  // namespace

absl::StatusOr<Graph> BuildStructuralBackward(const Graph& f) {
  if (std::optional<ModuleOwnedParam> m = FirstModuleOwnedParam(f)) {
    const Node& n = f.node(m->node);
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter \"", f.params()[m->param].name, "\" is owned by ", OpName(n.op()), " node \"",
        n.name(), "\": backward graphs are built from lifted forward graphs (--lifted)"));
  }
  Graph b;
  if (f.has_name()) b.set_name(absl::StrCat(f.name(), "_backward"));
  b.set_has_params_key(true);
  const NodeId none = kNoNode;
  std::vector<NodeId> param_ph(f.id_bound(), none);  // forward placeholder -> backward one
  std::vector<char> needs_grad(f.id_bound(), 0);
  std::vector<NodeId> root(f.id_bound(), none);  // the parameter a view chain reads
  for (NodeId id : f.order()) {
    const Node& n = f.node(id);
    if (IsParamPlaceholder(n)) {
      absl::StatusOr<NodeId> ph = b.AddNode(Op::kPlaceholder, n.name(), n.target());
      OVERLAP_RETURN_IF_ERROR(ph.status());
      NodeMeta m = Describe(n.meta());
      m.set_param(n.meta().param);
      b.mutable_node(*ph).mutable_meta() = m;
      param_ph[id] = *ph;
      needs_grad[id] = 1;
      root[id] = id;
      continue;
    }
    for (NodeId in : n.inputs()) needs_grad[id] |= needs_grad[in];
    if (IsView(n) && !n.inputs().empty()) root[id] = root[n.inputs()[0]];
  }
  for (const Param& p : f.params()) {
    const NodeId owner = f.FindNode(p.owner);
    if (owner != kNoNode && param_ph[owner] != none) {
      OVERLAP_RETURN_IF_ERROR(b.AddParam(p));
    }
  }

  std::vector<NodeId> grad(f.id_bound(), none);        // gradient of a forward value
  std::vector<NodeId> param_grad(f.id_bound(), none);  // final gradient of a parameter
  std::vector<NodeId> saved(f.id_bound(), none);
  CostModel cost;
  auto add = [&](NodeId a, NodeId c, const NodeMeta& like) -> absl::StatusOr<NodeId> {
    absl::StatusOr<NodeId> s = b.AddNode(Op::kCallFunction, b.UniqueName("add"), "aten.add.Tensor",
                                         {Value::Ref(a), Value::Ref(c)});
    OVERLAP_RETURN_IF_ERROR(s.status());
    NodeMeta& m = b.mutable_node(*s).mutable_meta();
    m = Describe(like);
    const double bytes = static_cast<double>(VerifiedValueBytes(b.node(*s)));
    m.set_device_time(cost.KernelTime(0, 3.0 * bytes, like.has_dtype ? like.dtype : "float32"));
    return s;
  };
  auto accumulate = [&](NodeId x, NodeId contribution) -> absl::Status {
    const Node& xn = f.node(x);
    if (IsParamPlaceholder(xn)) {
      NodeId total = contribution;
      if (param_grad[x] != none) {
        absl::StatusOr<NodeId> s = add(param_grad[x], contribution, b.node(contribution).meta());
        OVERLAP_RETURN_IF_ERROR(s.status());
        NodeMeta& prev = b.mutable_node(param_grad[x]).mutable_meta();
        prev.has_grad_of = false;
        prev.grad_of.clear();
        total = *s;
      }
      b.mutable_node(total).mutable_meta().set_grad_of(xn.meta().param);
      param_grad[x] = total;
      return absl::OkStatus();
    }
    if (xn.op() == Op::kPlaceholder || xn.op() == Op::kGetAttr) return absl::OkStatus();
    if (grad[x] == none) {
      grad[x] = contribution;
    } else {
      absl::StatusOr<NodeId> s = add(grad[x], contribution, b.node(contribution).meta());
      OVERLAP_RETURN_IF_ERROR(s.status());
      grad[x] = *s;
    }
    return absl::OkStatus();
  };
  // What a backward op reads in place of forward value y.
  auto operand = [&](NodeId y) -> absl::StatusOr<NodeId> {
    if (root[y] != none) return param_ph[root[y]];
    if (saved[y] != none) return saved[y];
    const Node& yn = f.node(y);
    absl::StatusOr<NodeId> s =
        b.AddNode(Op::kPlaceholder, b.UniqueName(absl::StrCat("saved_", yn.name())),
                  absl::StrCat("saved_", yn.name()));
    OVERLAP_RETURN_IF_ERROR(s.status());
    b.mutable_node(*s).mutable_meta() = Describe(yn.meta());
    saved[y] = *s;
    return s;
  };

  // Tangents: one per distinct output value that leads to a parameter.
  const Node& out = f.node(f.last());
  if (out.op() == Op::kOutput) {
    int k = 0;
    for (NodeId v : out.inputs()) {
      if (!needs_grad[v] || IsParamPlaceholder(f.node(v))) continue;
      // Name and target agree (arguments are evaluated in no fixed order: count first).
      const std::string tangent = absl::StrCat("tangents_", ++k);
      absl::StatusOr<NodeId> t = b.AddNode(Op::kPlaceholder, b.UniqueName(tangent), tangent);
      OVERLAP_RETURN_IF_ERROR(t.status());
      b.mutable_node(*t).mutable_meta() = Describe(f.node(v).meta());
      grad[v] = *t;
    }
  }
  for (NodeId id = f.last(); id != kNoNode; id = f.prev(id)) {
    const Node& n = f.node(id);
    if (n.op() != Op::kCallFunction && n.op() != Op::kCallMethod) continue;
    if (grad[id] == none) continue;
    const NodeId g = grad[id];
    // A pure view (no work of its own) passes its gradient to its input; an in-place op
    // (an alias with device time, like index_add_) is a computation like any other.
    const bool pure_view = IsView(n) && !(n.meta().has_device_time && n.meta().device_time > 0);
    if ((pure_view || n.target() == "operator.getitem") && !n.inputs().empty()) {
      const NodeId x = n.inputs()[0];
      if (!needs_grad[x]) continue;
      absl::StatusOr<NodeId> v = b.AddNode(Op::kCallFunction, b.UniqueName("view_backward"),
                                           "aten.view.default", {Value::Ref(g)});
      OVERLAP_RETURN_IF_ERROR(v.status());
      NodeMeta m = Describe(f.node(x).meta());
      m.set_device_time(0);
      m.set_aliases_input(true);
      b.mutable_node(*v).mutable_meta() = m;
      OVERLAP_RETURN_IF_ERROR(accumulate(x, *v));
      continue;
    }
    const double time = n.meta().has_device_time ? n.meta().device_time : 0;
    for (NodeId x : n.inputs()) {
      if (!needs_grad[x]) continue;
      std::vector<Value> args = {Value::Ref(g)};
      for (NodeId y : n.inputs()) {
        if (y == x) continue;
        absl::StatusOr<NodeId> o = operand(y);
        OVERLAP_RETURN_IF_ERROR(o.status());
        args.push_back(Value::Ref(*o));
      }
      const std::string target = BackwardTarget(n);
      absl::StatusOr<NodeId> d = b.AddNode(
          Op::kCallFunction, b.UniqueName(absl::StrCat(BaseName(target))), target, std::move(args));
      OVERLAP_RETURN_IF_ERROR(d.status());
      NodeMeta m = Describe(f.node(x).meta());
      m.set_device_time(time);
      b.mutable_node(*d).mutable_meta() = m;
      OVERLAP_RETURN_IF_ERROR(accumulate(x, *d));
    }
  }
  // Parameter gradients out, in parameter-table order (a shared placeholder once).
  std::vector<Value> grads;
  std::vector<char> emitted(f.id_bound(), 0);
  for (const Param& p : f.params()) {
    const NodeId owner = f.FindNode(p.owner);
    if (owner == kNoNode || param_ph[owner] == none || emitted[owner]) continue;
    emitted[owner] = 1;
    if (param_grad[owner] != none) grads.push_back(Value::Ref(param_grad[owner]));
  }
  absl::StatusOr<NodeId> o =
      b.AddNode(Op::kOutput, b.UniqueName("output"), "output", {Value::List(std::move(grads))});
  OVERLAP_RETURN_IF_ERROR(o.status());
  // Placeholders first, in creation order.
  std::vector<NodeId> order, rest;
  for (NodeId id : b.order()) {
    (b.node(id).op() == Op::kPlaceholder ? order : rest).push_back(id);
  }
  order.insert(order.end(), rest.begin(), rest.end());
  OVERLAP_RETURN_IF_ERROR(b.SetOrder(order));
  return b;
}

}  // namespace overlap
