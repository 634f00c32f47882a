#include "graph/aot_invariants.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/shape_rules.h"
#include "graph/value_bytes.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

absl::Status Violated(const std::string& what) {
  return absl::InternalError(absl::StrCat("AOT pair: ", what));
}

std::vector<NodeId> Placeholders(const Graph& g) {
  std::vector<NodeId> out;
  for (NodeId id : g.order()) {
    if (g.node(id).op() == Op::kPlaceholder) out.push_back(id);
  }
  return out;
}

std::vector<Value> Returned(const Graph& g) {
  const Node& out = g.node(g.last());
  if (out.op() != Op::kOutput || out.args().empty() || out.args()[0].kind() != Value::Kind::kList) {
    return {};
  }
  return out.args()[0].items();
}

// The node whose storage `id` shares (itself unless it is a view).
NodeId Base(const Graph& g, NodeId id) {
  while (IsView(g.node(id)) && !g.node(id).inputs().empty()) id = g.node(id).inputs()[0];
  return id;
}

}  // namespace

absl::Status CheckAotPair(const Graph& input, const AotPair& pair) {
  const Graph& fw = pair.forward;
  const Graph& bw = pair.backward;
  ShapeCheckOptions strict;
  strict.require_rules = true;
  for (const Graph* g : {&fw, &bw}) {
    const char* which = g == &fw ? "forward" : "backward";
    if (absl::Status s = Verify(*g); !s.ok()) {
      return Violated(absl::StrCat("the ", which, " does not verify: ", s.message()));
    }
    absl::StatusOr<ShapeCheckReport> r = CheckShapes(*g, strict);
    if (!r.ok()) return Violated(absl::StrCat("the ", which, ": ", r.status().message()));
    if (r->unstated != 0) return Violated(absl::StrCat("a node of the ", which, " states no type"));
    if (g->params() != input.params()) {
      return Violated(absl::StrCat("the ", which, " does not list the model's parameter table"));
    }
  }
  // Forward: outputs, then saved tensors that alias no parameter.
  const std::vector<Value> rets = Returned(fw);
  if (static_cast<int64_t>(rets.size()) != pair.num_outputs + pair.num_saved) {
    return Violated("the forward does not return num_outputs + num_saved values");
  }
  int64_t saved_bytes = 0;
  absl::flat_hash_set<NodeId> bases;
  std::vector<NodeId> saved;
  for (size_t i = pair.num_outputs; i < rets.size(); ++i) {
    if (!rets[i].is_ref()) return Violated("a saved value is not a node");
    const NodeId base = Base(fw, rets[i].as_ref());
    if (fw.node(base).op() == Op::kPlaceholder && fw.node(base).meta().has_param) {
      return Violated(absl::StrCat("saved tensor \"", fw.node(rets[i].as_ref()).name(),
                                   "\" aliases parameter placeholder \"", fw.node(base).name(),
                                   "\""));
    }
    if (bases.insert(base).second) saved_bytes += VerifiedValueBytes(fw.node(base));
    saved.push_back(rets[i].as_ref());
  }
  if (saved_bytes != pair.saved_bytes)
    return Violated("saved_bytes is not the saved storages' size");
  // Backward placeholders: primals (read), saved (forward names, same order), tangents.
  const std::vector<NodeId> bph = Placeholders(bw);
  if (static_cast<int64_t>(bph.size()) < pair.num_primals + pair.num_saved) {
    return Violated("the backward has too few placeholders");
  }
  for (int64_t i = 0; i < pair.num_primals; ++i) {
    const Node& p = bw.node(bph[i]);
    if (!p.meta().has_param)
      return Violated(absl::StrCat("primal \"", p.name(), "\" has no meta.param"));
    if (p.users().empty()) return Violated(absl::StrCat("primal \"", p.name(), "\" is never read"));
  }
  for (int64_t i = 0; i < pair.num_saved; ++i) {
    const Node& p = bw.node(bph[pair.num_primals + i]);
    if (p.name() != fw.node(saved[i]).name() || p.meta().has_param) {
      return Violated(absl::StrCat("backward placeholder \"", p.name(), "\" is not saved tensor \"",
                                   fw.node(saved[i]).name(), "\""));
    }
  }
  for (size_t i = pair.num_primals + pair.num_saved; i < bph.size(); ++i) {
    if (bw.node(bph[i]).meta().has_param) return Violated("a parameter after the saved tensors");
  }
  // Backward output: a gradient per trainable parameter placeholder, null otherwise.
  const std::vector<NodeId> fph = Placeholders(fw);
  const std::vector<Value> grads = Returned(bw);
  if (grads.size() != fph.size()) {
    return Violated("the backward does not return one value per forward placeholder");
  }
  for (size_t i = 0; i < fph.size(); ++i) {
    const Node& p = fw.node(fph[i]);
    const int row = p.meta().has_param ? fw.FindParam(p.meta().param) : -1;
    const bool trainable = row >= 0 && fw.params()[row].requires_grad;
    if (!trainable) {
      if (!grads[i].is_none()) return Violated(absl::StrCat("\"", p.name(), "\" has a gradient"));
      continue;
    }
    if (!grads[i].is_ref()) return Violated(absl::StrCat("\"", p.name(), "\" has no gradient"));
    const Node& g = bw.node(grads[i].as_ref());
    if (g.meta().shape != p.meta().shape || !g.meta().has_grad_of ||
        g.meta().grad_of != p.meta().param) {
      return Violated(absl::StrCat("the gradient of \"", p.name(), "\" (\"", g.name(),
                                   "\") is not shaped like it or not marked grad_of it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap
