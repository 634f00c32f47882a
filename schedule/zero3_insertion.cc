#include "schedule/zero3_insertion.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "graph/errors.h"
#include "graph/status_macros.h"

namespace overlap {
namespace {

int CountRefs(const Node& n, NodeId v) {
  int count = 0;
  auto add = [&](NodeId id) { count += id == v; };
  for (const Value& a : n.args()) a.ForEachRef(add);
  for (const auto& [k, a] : n.kwargs()) a.ForEachRef(add);
  return count;
}

// The real uses of `param`: its readers, through alias ops, without the output node; a
// reader reading a value k times appears k times. Depth-first in users order, iterative
// (alias chains can be long in hostile input).
std::vector<NodeId> RealUses(const Graph& g, NodeId param) {
  std::vector<NodeId> uses;
  struct Frame {
    NodeId value;
    size_t next_user;
  };
  std::vector<Frame> stack = {{param, 0}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    const NodeList& users = g.node(f.value).users();
    if (f.next_user == users.size()) {
      stack.pop_back();
      continue;
    }
    const NodeId value = f.value;
    const NodeId u = users[f.next_user++];
    const Node& user = g.node(u);
    if (user.op() == Op::kOutput) continue;
    if (IsViewOf(user, value)) {
      stack.push_back({u, 0});
      continue;
    }
    for (int k = CountRefs(user, value); k > 0; --k) uses.push_back(u);
  }
  return uses;
}

// The node a release follows: the use's first getitem user when the use returns a tuple.
NodeId Anchor(const Graph& g, NodeId use) {
  for (NodeId u : g.node(use).users()) {
    const Node& n = g.node(u);
    if (n.op() == Op::kCallFunction && n.target() == "operator.getitem" && !n.args().empty() &&
        n.args()[0].is_ref() && n.args()[0].as_ref() == use) {
      return u;
    }
  }
  return use;
}

void SetParamMeta(Graph& g, NodeId id, const Param& p, bool alias) {
  NodeMeta& m = g.mutable_node(id).mutable_meta();
  if (p.has_shape) m.set_shape(p.shape);
  if (p.has_dtype) m.set_dtype(p.dtype);
  m.set_tensor_size(p.bytes);
  m.set_device_time(0);
  if (alias) m.set_aliases_input(true);
}

// Bytes per element of a floating dtype, "torch." prefix allowed; 0 when not a floating
// dtype we know (then no cast is fused: "smaller" must be certain).
int64_t FloatBytes(absl::string_view dtype) {
  absl::ConsumePrefix(&dtype, "torch.");
  if (dtype == "float64" || dtype == "double") return 8;
  if (dtype == "float32" || dtype == "float") return 4;
  if (dtype == "bfloat16" || dtype == "float16" || dtype == "half") return 2;
  if (dtype == "float8_e4m3fn" || dtype == "float8_e5m2") return 1;
  return 0;
}

// Rule 4: the dtype a parameter placeholder's only non-output user casts it down to, or ""
// when that user is not such a cast. The destination is the cast's meta.dtype, else its
// dtype argument (convert_element_type's args[1], _to_copy's kwargs["dtype"]).
std::string FusibleCast(const Graph& g, NodeId p, const Param& param, NodeId* cast) {
  NodeId only = kNoNode;
  for (NodeId u : g.node(p).users()) {
    if (g.node(u).op() == Op::kOutput) continue;
    if (only != kNoNode) return "";
    only = u;
  }
  if (only == kNoNode) return "";
  const Node& c = g.node(only);
  if (c.op() != Op::kCallFunction ||
      (c.target() != "prims.convert_element_type.default" &&
       c.target() != "aten._to_copy.default") ||
      c.args().empty() || !c.args()[0].is_ref() || c.args()[0].as_ref() != p ||
      c.inputs().size() != 1) {
    return "";
  }
  std::string to;
  if (c.meta().has_dtype) {
    to = c.meta().dtype;
  } else if (c.args().size() > 1 && c.args()[1].kind() == Value::Kind::kString) {
    to = c.args()[1].as_string();
  } else {
    for (const auto& [k, v] : c.kwargs()) {
      if (k == "dtype" && v.kind() == Value::Kind::kString) to = v.as_string();
    }
  }
  if (absl::StartsWith(to, "torch.")) to.erase(0, 6);
  const absl::string_view from =
      param.has_dtype ? absl::string_view(param.dtype) : absl::string_view(g.node(p).meta().dtype);
  const int64_t to_bytes = FloatBytes(to), from_bytes = FloatBytes(from);
  if (to_bytes == 0 || from_bytes == 0 || to_bytes >= from_bytes) return "";
  *cast = only;
  return to;
}

// ReplaceAllUsesWith for every user but the output node, whose rewrite is deferred to one
// SetArgs at the end: the output can read thousands of values, and relinking it once per
// replacement made insertion quadratic in them. `held` is what the output reads now (as the
// immediate rewrites would have left it); `moved` where each replaced value went.
class OutputRewrite {
 public:
  explicit OutputRewrite(Graph& g) : g_(g) {
    const NodeId last = g.last();
    if (last != kNoNode && g.node(last).op() == Op::kOutput) {
      output_ = last;
      held_.insert(g.node(last).inputs().begin(), g.node(last).inputs().end());
    }
  }

  // Users of `from` read `to` instead (`to` itself excepted); the output too when
  // `output_too`.
  void Replace(NodeId from, NodeId to, bool output_too = true) {
    g_.ReplaceAllUsesWith(from, to, [](const Node& u) { return u.op() != Op::kOutput; });
    if (output_too && held_.erase(from) > 0) {
      held_.insert(to);
      moved_[from] = to;
    }
  }

  // Rewrites the output's references once: each follows its chain of replacements.
  absl::Status Apply() {
    if (moved_.empty()) return absl::OkStatus();
    const Node& out = g_.node(output_);
    auto resolve = [&](NodeId id) {
      for (auto it = moved_.find(id); it != moved_.end(); it = moved_.find(id)) id = it->second;
      return id;
    };
    std::vector<Value> args = out.args();
    ValueDict kwargs = out.kwargs();
    for (Value& v : args) v.MapRefs(resolve);
    for (auto& [k, v] : kwargs) v.MapRefs(resolve);
    return g_.SetArgs(output_, std::move(args), std::move(kwargs));
  }

 private:
  Graph& g_;
  NodeId output_ = kNoNode;
  absl::flat_hash_set<NodeId> held_;
  absl::flat_hash_map<NodeId, NodeId> moved_;
};

}  // namespace

absl::StatusOr<bool> Zero3Insertion::Run(Graph* graph) const {
  // Work on a copy, so that a failure leaves the caller's graph as it was.
  Graph g = *graph;
  OVERLAP_ASSIGN_OR_RETURN(const bool changed, RunInPlace(&g));
  *graph = std::move(g);
  return changed;
}

absl::StatusOr<bool> Zero3Insertion::RunInPlace(Graph* graph) const {
  const Graph& in = *graph;
  if (std::optional<ModuleOwnedParam> m = FirstModuleOwnedParam(in)) {
    const Node& n = in.node(m->node);
    return UnsupportedError(
        absl::StrCat("parameter \"", in.params()[m->param].name, "\" is owned by ", OpName(n.op()),
                     " node \"", n.name(),
                     "\": ZeRO-3 insertion needs parameters lifted to placeholders with "
                     "meta.param (`overlap gen <model> --lifted`, or an AOT-exported graph)"));
  }
  Graph& g = *graph;
  bool changed = false;
  std::vector<NodeId> placeholders;
  for (NodeId id : g.order()) {
    if (g.node(id).op() == Op::kPlaceholder) placeholders.push_back(id);
  }
  OutputRewrite output(g);
  std::vector<NodeId> fused_casts;  // erased once the output no longer reads them
  for (NodeId p : placeholders) {
    const Node& ph = g.node(p);
    if (!ph.meta().has_param) continue;
    const int ds_id = g.FindParam(ph.meta().param);
    if (ds_id < 0) continue;  // Verify() rules this out
    std::vector<NodeId> uses = RealUses(g, p);
    if (uses.empty()) continue;
    Param param = g.params()[ds_id];
    // Rule 4: a down-cast that is the only user is fused into the allgather, which then
    // gathers (and holds) the smaller tensor; the cast's users are the real uses.
    NodeId cast = kNoNode;
    const std::string cast_to = FusibleCast(g, p, param, &cast);
    if (cast != kNoNode) {
      uses = RealUses(g, cast);
      const int64_t from = FloatBytes(param.has_dtype ? param.dtype : ph.meta().dtype);
      const NodeMeta& cm = g.node(cast).meta();
      param.bytes = cm.has_tensor_size || cm.has_shape ? SizeOf(g.node(cast))
                                                       : param.bytes / from * FloatBytes(cast_to);
      param.dtype = cast_to;
      param.has_dtype = true;
    }
    const std::string target = ph.target();
    const std::string suffix = absl::StrCat("_", ds_id);
    const Value gid = Value::Int(static_cast<int>(kind_));
    const Value ds = Value::Int(ds_id);

    absl::StatusOr<NodeId> ag = g.AddNode(
        Op::kCallFunction, g.UniqueName(absl::StrCat("allgather_ds_param_", target, suffix)),
        std::string(kAllgatherTarget), {Value::Ref(p), gid, ds},
        cast == kNoNode ? ValueDict{}
                        : ValueDict{{std::string(kDtypeKwarg), Value::String(cast_to)}},
        InsertPoint::After(p));
    OVERLAP_RETURN_IF_ERROR(ag.status());
    SetParamMeta(g, *ag, param, false);
    output.Replace(p, *ag, /*output_too=*/false);  // the output keeps the raw shard

    absl::StatusOr<NodeId> wait = g.AddNode(
        Op::kCallFunction, g.UniqueName(absl::StrCat("wait_allgather_ds_param__", target, suffix)),
        std::string(kWaitTarget), {Value::Ref(*ag), gid, ds}, {}, InsertPoint::After(*ag));
    OVERLAP_RETURN_IF_ERROR(wait.status());
    SetParamMeta(g, *wait, param, true);
    output.Replace(*ag, *wait);
    if (cast != kNoNode) {
      output.Replace(cast, *wait);
      fused_casts.push_back(cast);
    }

    const Value n_users = Value::Int(static_cast<int64_t>(uses.size()));
    for (NodeId use : uses) {
      const NodeId anchor = Anchor(g, use);
      absl::StatusOr<NodeId> release =
          g.AddNode(Op::kCallFunction,
                    g.UniqueName(absl::StrCat("release_ds_param_", target, "_",
                                              g.node(anchor).name(), suffix)),
                    std::string(kReleaseTarget), {Value::Ref(anchor), gid, ds, n_users}, {},
                    InsertPoint::After(anchor));
      OVERLAP_RETURN_IF_ERROR(release.status());
      SetParamMeta(g, *release, param, false);
      output.Replace(anchor, *release);
    }
    changed = true;
  }
  OVERLAP_RETURN_IF_ERROR(output.Apply());
  for (NodeId cast : fused_casts) OVERLAP_RETURN_IF_ERROR(g.Erase(cast));
  if (kind_ == GraphKind::kBackward) {
    absl::flat_hash_map<std::string, std::string> placeholder_target;  // parameter -> target
    for (NodeId p : placeholders) {
      const Node& ph = g.node(p);
      if (ph.meta().has_param) placeholder_target.emplace(ph.meta().param, ph.target());
    }
    std::vector<NodeId> grads;
    for (NodeId id : g.order()) {
      if (g.node(id).meta().has_grad_of) grads.push_back(id);
    }
    for (NodeId grad : grads) {
      const std::string& of = g.node(grad).meta().grad_of;
      const int ds_id = g.FindParam(of);
      if (ds_id < 0) continue;  // Verify() rules this out
      auto it = placeholder_target.find(of);
      const std::string target = it != placeholder_target.end() ? it->second : of;
      absl::StatusOr<NodeId> reduce =
          g.AddNode(Op::kCallFunction, g.UniqueName(absl::StrCat("reduce_ds_param_", target)),
                    std::string(kReduceTarget),
                    {Value::Ref(grad), Value::Int(static_cast<int>(kind_)), Value::Int(ds_id)}, {},
                    InsertPoint::After(grad));
      OVERLAP_RETURN_IF_ERROR(reduce.status());
      SetParamMeta(g, *reduce, g.params()[ds_id], false);
      changed = true;
    }
  }
  // Placeholders first, in their original order (as DeepSpeed leaves the graph).
  std::vector<NodeId> order = placeholders;
  for (NodeId id : g.order()) {
    if (g.node(id).op() != Op::kPlaceholder) order.push_back(id);
  }
  OVERLAP_RETURN_IF_ERROR(g.SetOrder(order));
  return changed;
}

}  // namespace overlap
