#include "graph/verifier.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/dc_ops.h"
#include "graph/status_macros.h"
#include "graph/text.h"
#include "graph/value_bytes.h"

namespace overlap {
namespace {

absl::Status NodeError(const Node& n, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("node \"", Printable(n.name()), "\": ", what));
}

absl::Status ParamError(const Param& p, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("parameter \"", Printable(p.name), "\" (owner \"",
                                                 Printable(p.owner), "\"): ", what));
}

absl::Status VerifyNodes(const Graph& g) {
  // position[id] = index in the order, or -1 while not yet reached.
  std::vector<int64_t> position(g.id_bound(), -1);
  int64_t count = 0;
  NodeId prev = kNoNode;
  NodeId output = kNoNode;
  NodeList expected;
  // Users must hold exactly the (input, node) pairs the inputs define. Counting them, and
  // checking each user entry against the user's inputs, proves it: by a scan for the usual
  // short input lists, through a hash set for the rare wide ones (an output returning
  // thousands of values), so the cost stays O(E).
  constexpr size_t kScan = 16;
  int64_t edges = 0;
  absl::flat_hash_set<uint64_t> wide_edges;
  for (NodeId id = g.first(); id != kNoNode; id = g.next(id)) {
    if (!g.IsLive(id)) return absl::InternalError(absl::StrCat("order lists dead node id ", id));
    if (position[id] >= 0) return absl::InternalError("order list has a cycle");
    if (g.prev(id) != prev) return absl::InternalError("order list links are inconsistent");
    const Node& n = g.node(id);
    if (output != kNoNode) {
      return NodeError(n, absl::StrCat("follows the output node \"", g.node(output).name(),
                                       "\" (exactly one output node, last)"));
    }
    if (!IsValidNodeName(n.name())) return NodeError(n, "malformed name");
    // Every reference must name a live node placed earlier; then the derived inputs must be
    // what the arguments say.
    absl::Status ref_error;
    auto check = [&](NodeId in) {
      if (!ref_error.ok()) return;
      if (!g.IsLive(in)) {
        ref_error = NodeError(n, "argument references a missing node");
      } else if (position[in] < 0) {
        ref_error = NodeError(n, absl::StrCat("reads \"", g.node(in).name(),
                                              "\", which is not placed before it (the order "
                                              "must be topological; cycles are not allowed)"));
      }
    };
    for (const Value& v : n.args()) v.ForEachRef(check);
    for (const auto& [k, v] : n.kwargs()) v.ForEachRef(check);
    if (!ref_error.ok()) return ref_error;
    uint32_t num_arg_inputs = 0;
    CollectDataInputs(n.args(), n.kwargs(), &expected, &num_arg_inputs);
    if (expected != n.inputs() || n.arg_inputs().size() != num_arg_inputs) {
      return NodeError(n, "inputs are out of date with its arguments");
    }
    edges += n.inputs().size();
    if (n.inputs().size() > kScan) {
      for (NodeId in : n.inputs()) {
        wide_edges.insert(static_cast<uint64_t>(in) << 32 | static_cast<uint32_t>(id));
      }
    }
    const NodeMeta& m = n.meta();
    if (m.has_tensor_size && m.tensor_size < 0) return NodeError(n, "meta.tensor_size < 0");
    for (int64_t d : m.shape) {
      if (d < 0) return NodeError(n, absl::StrCat("meta.shape has a negative dimension (", d, ")"));
    }
    if (m.has_device_time && !(std::isfinite(m.device_time) && m.device_time >= 0)) {
      return NodeError(n, "meta.device_time must be finite and >= 0");
    }
    if (n.op() == Op::kOutput) output = id;
    position[id] = count++;
    prev = id;
  }
  if (prev != g.last()) return absl::InternalError("order list tail is inconsistent");
  if (count != g.size()) {
    return absl::InternalError(absl::StrCat("order lists ", count, " nodes, graph has ", g.size()));
  }
  if (output == kNoNode) return absl::InvalidArgumentError("the graph has no output node");
  // Names: Graph indexes every live node's name on creation and rename, and refuses a name
  // already indexed; so the names are unique exactly when the index holds one entry per
  // live node. (A lookup per node would prove the same at ~100 ns of cache misses each.)
  if (g.name_index_size() != g.size()) {
    return absl::InternalError(absl::StrCat("name index holds ", g.name_index_size(), " names for ",
                                            g.size(), " live nodes"));
  }
  // Every user entry must be a distinct node that reads this one.
  std::vector<NodeId> stamp(g.id_bound(), kNoNode);
  int64_t user_entries = 0;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    for (NodeId u : n.users()) {
      if (!g.IsLive(u)) return NodeError(n, "lists an erased node among its users");
      if (stamp[u] == id) {
        return NodeError(n, absl::StrCat("lists \"", g.node(u).name(), "\" twice as a user"));
      }
      stamp[u] = id;
      ++user_entries;
      const auto& ins = g.node(u).inputs();
      const bool reads =
          ins.size() > kScan
              ? wide_edges.contains(static_cast<uint64_t>(id) << 32 | static_cast<uint32_t>(u))
              : std::find(ins.begin(), ins.end(), id) != ins.end();
      if (!reads) {
        return NodeError(n, absl::StrCat("lists \"", g.node(u).name(),
                                         "\" as a user, but that node does not read it"));
      }
    }
  }
  if (user_entries != edges) {
    return absl::InvalidArgumentError(absl::StrCat("users lists hold ", user_entries,
                                                   " entries but inputs define ", edges, " edges"));
  }
  return absl::OkStatus();
}

absl::Status VerifyParams(const Graph& g) {
  const auto& params = g.params();
  const ParamOwnership ownership = ClassifyParams(g);
  absl::flat_hash_map<absl::string_view, const Param*> storages;
  int64_t total = 0;
  for (const Param& p : params) {
    if (p.name.empty()) return absl::InvalidArgumentError("a parameter has an empty name");
    if (p.bytes < 0) return ParamError(p, "bytes < 0");
    for (int64_t d : p.shape) {
      if (d < 0) return ParamError(p, absl::StrCat("shape has a negative dimension (", d, ")"));
    }
    if (!ownership.lifted && !ownership.present[&p - params.data()]) {
      // Module-style: a misspelt owner. (In a lifted graph the row is absent: graph.h.)
      return ParamError(p,
                        "owner is not a call_module target, get_attr target or "
                        "placeholder of the graph (a graph with call_module nodes or "
                        "get_attr-owned parameters is module-style: every owner must exist)");
    }
    auto [it, inserted] = storages.emplace(p.storage_key(), &p);
    if (!inserted && it->second->ddp_ignored != p.ddp_ignored) {
      return ParamError(
          p, absl::StrCat("shares storage \"", p.storage_key(), "\" with \"", it->second->name,
                          "\" but disagrees on ddp_ignored "
                          "(DDP ignores a tensor, whichever name it is reached by)"));
    }
    if (!inserted && it->second->requires_grad != p.requires_grad) {
      return ParamError(
          p, absl::StrCat("shares storage \"", p.storage_key(), "\" with \"", it->second->name,
                          "\" but disagrees on requires_grad "
                          "(a tensor has one requires_grad)"));
    }
    if (!inserted && it->second->bytes != p.bytes) {
      return ParamError(
          p, absl::StrCat("shares storage \"", p.storage_key(), "\" with \"", it->second->name,
                          "\" but has ", p.bytes, " bytes, not ", it->second->bytes));
    }
    if (__builtin_add_overflow(total, p.bytes, &total)) {
      return ParamError(p, "the sum of parameter bytes overflows 64 bits");
    }
  }
  int64_t tensor_total = 0;
  double time_total = 0;
  absl::flat_hash_map<absl::string_view, const Node*> param_placeholders;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    const NodeMeta& m = n.meta();
    // Every value's size, stated or from shape x dtype (ValueBytes), and their sum fit in 64
    // bits: the memory figures may add them freely.
    OVERLAP_ASSIGN_OR_RETURN(const int64_t bytes, ValueBytes(n));
    if (__builtin_add_overflow(tensor_total, bytes, &tensor_total)) {
      return NodeError(n, "the sum of meta.tensor_size over the graph overflows 64 bits");
    }
    // Each time is finite; so must their sum be (every simulated step adds them up).
    if (m.has_device_time && !std::isfinite(time_total += m.device_time)) {
      return NodeError(n, "the sum of meta.device_time over the graph is not finite");
    }
    if (m.has_param && g.FindParam(m.param) < 0) {
      return NodeError(n, absl::StrCat("meta.param names unknown parameter \"", m.param, "\""));
    }
    if (m.has_param && n.op() != Op::kPlaceholder) {
      return NodeError(n, "meta.param is only for placeholders (a lifted parameter)");
    }
    if (m.has_param) {
      auto [it, inserted] = param_placeholders.emplace(m.param, &n);
      if (!inserted) {
        return NodeError(n,
                         absl::StrCat("meta.param \"", m.param, "\" is already placeholder \"",
                                      it->second->name(), "\"'s (one placeholder per parameter)"));
      }
    }
    if (m.has_grad_of && g.FindParam(m.grad_of) < 0) {
      return NodeError(n, absl::StrCat("meta.grad_of names unknown parameter \"", m.grad_of, "\""));
    }
  }
  return absl::OkStatus();
}

// args[i] when it exists and is an int.
std::optional<int64_t> IntArgAt(const Node& n, size_t i) {
  if (n.args().size() <= i || n.args()[i].kind() != Value::Kind::kInt) return std::nullopt;
  return n.args()[i].as_int();
}

// A host-memory op (graph/dc_ops.h): (tensor, graph_id, id), ints >= 0; a reload reads a
// placeholder (the host tensor a forward offloaded) or an offload; a wait_reload reads a
// reload, a wait_offload an offload, with the same id, one wait per copy.
absl::Status VerifyHostOp(const Graph& g, const Node& n, absl::flat_hash_set<NodeId>* waited) {
  if (n.args().size() != 3) {
    return NodeError(n, absl::StrCat(n.target(), " takes 3 arguments (tensor, graph_id, id), got ",
                                     n.args().size()));
  }
  if (!n.args()[0].is_ref()) return NodeError(n, "args[0] must be a node reference");
  const std::optional<int64_t> graph_id = IntArgAt(n, kGraphIdArg);
  if (!graph_id || *graph_id < 0) return NodeError(n, "graph_id (args[1]) must be an int >= 0");
  const std::optional<int64_t> id = IntArgAt(n, kDsIdArg);
  if (!id || *id < 0) return NodeError(n, "id (args[2]) must be an int >= 0");
  const Node& in = g.node(n.args()[0].as_ref());
  if (n.target() == kReloadTarget && in.op() != Op::kPlaceholder &&
      !(in.op() == Op::kCallFunction && in.target() == kOffloadTarget)) {
    return NodeError(n, "a reload must read a placeholder (a host tensor) or a dc.offload_tensor");
  }
  const bool wait_reload = n.target() == kWaitReloadTarget;
  if (wait_reload || n.target() == kWaitOffloadTarget) {
    const absl::string_view waited_on = wait_reload ? kReloadTarget : kOffloadTarget;
    if (in.op() != Op::kCallFunction || in.target() != waited_on) {
      return NodeError(n, absl::StrCat("a ", n.target(), " must read a ", waited_on));
    }
    if (IntArgAt(in, kDsIdArg) != id) {
      return NodeError(n, absl::StrCat("waits on \"", in.name(), "\" with a different id"));
    }
    if (!waited->insert(in.id()).second) {
      return NodeError(n, absl::StrCat("a second wait on \"", in.name(), "\" (one wait per copy)"));
    }
  }
  return absl::OkStatus();
}

// The ZeRO-3 ops (graph/dc_ops.h): arity and argument types, ds_id a parameter-table index,
// an allgather reading its parameter's placeholder (or another node) with that ds_id, a
// wait reading an allgather with the same ds_id (one wait per allgather), n_users >= 1.
absl::Status VerifyZero3Ops(const Graph& g) {
  const int64_t params = static_cast<int64_t>(g.params().size());
  absl::flat_hash_set<NodeId> waited;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kCallFunction || !absl::StartsWith(n.target(), kZero3Prefix)) continue;
    const bool allgather = n.target() == kAllgatherTarget, wait = n.target() == kWaitTarget;
    const bool release = n.target() == kReleaseTarget, reduce = n.target() == kReduceTarget;
    const bool wait_reduce = n.target() == kWaitReduceTarget;
    if (n.target() == kOffloadTarget || n.target() == kReloadTarget ||
        n.target() == kWaitReloadTarget || n.target() == kWaitOffloadTarget) {
      OVERLAP_RETURN_IF_ERROR(VerifyHostOp(g, n, &waited));
      continue;
    }
    if (!allgather && !wait && !release && !reduce && !wait_reduce) continue;  // other dc.* ops
    const size_t arity = release ? 4 : 3;
    if (n.args().size() != arity) {
      return NodeError(
          n, absl::StrCat(n.target(), " takes ", arity, " arguments (",
                          release ? "tensor, graph_id, ds_id, n_users" : "tensor, graph_id, ds_id",
                          "), got ", n.args().size()));
    }
    if (!n.args()[0].is_ref()) return NodeError(n, "args[0] must be a node reference");
    const std::optional<int64_t> graph_id = IntArgAt(n, kGraphIdArg);
    if (!graph_id || *graph_id < 0) return NodeError(n, "graph_id (args[1]) must be an int >= 0");
    const std::optional<int64_t> ds = IntArgAt(n, kDsIdArg);
    if (!ds || *ds < 0 || *ds >= params) {
      return NodeError(n, absl::StrCat("ds_id (args[2]) must be an index into the parameter table "
                                       "(0 to ",
                                       params - 1, ")"));
    }
    const Node& in = g.node(n.args()[0].as_ref());
    const std::string& param = g.params()[*ds].name;
    if (allgather && in.op() == Op::kPlaceholder && in.meta().has_param &&
        in.meta().param != param) {
      return NodeError(n, absl::StrCat("gathers placeholder \"", in.name(), "\" (parameter \"",
                                       in.meta().param, "\") with the ds_id of \"", param, "\""));
    }
    if (wait_reduce) {
      if (in.op() != Op::kCallFunction || in.target() != kReduceTarget) {
        return NodeError(n, "a wait_reduce must read a dc.reduce_grad");
      }
      if (IntArgAt(in, kDsIdArg) != ds) {
        return NodeError(n, absl::StrCat("waits on \"", in.name(), "\" with a different ds_id"));
      }
    }
    if (wait) {
      if (in.op() != Op::kCallFunction || in.target() != kAllgatherTarget) {
        return NodeError(n, "a wait must read a dc.allgather_param");
      }
      if (IntArgAt(in, kDsIdArg) != ds) {
        return NodeError(n, absl::StrCat("waits on \"", in.name(), "\" with a different ds_id"));
      }
      if (!waited.insert(in.id()).second) {
        return NodeError(
            n, absl::StrCat("a second wait on \"", in.name(), "\" (one wait per allgather)"));
      }
    }
    if (release) {
      const std::optional<int64_t> users = IntArgAt(n, kNUsersArg);
      if (!users || *users < 1) return NodeError(n, "n_users (args[3]) must be an int >= 1");
    }
  }
  return absl::OkStatus();
}

// Host tensors (IsHostTensor) are read by the host-memory ops and the output only: a compute
// node that read one would run on memory the simulators and the executor count as the
// host's, so the step's device peak would leave it out. Its readers read the reload's
// result (dc.wait_reload) instead.
absl::Status VerifyHostTensorReaders(const Graph& g) {
  for (NodeId id : g.order()) {
    if (!IsHostTensor(g, id)) continue;
    const Node& host = g.node(id);
    for (NodeId u : host.users()) {
      const Node& user = g.node(u);
      const bool first_arg = !user.args().empty() && user.args()[0].is_ref() &&
                             user.args()[0].as_ref() == id && user.inputs().size() == 1;
      const bool copy = user.op() == Op::kCallFunction &&
                        (user.target() == kReloadTarget || user.target() == kWaitOffloadTarget);
      if (user.op() == Op::kOutput || (copy && first_arg)) continue;
      return NodeError(
          user, absl::StrCat("reads host tensor \"", Printable(host.name()), "\" directly (",
                             host.op() == Op::kPlaceholder
                                 ? "a saved tensor a dc.reload_tensor brings back: compute reads "
                                   "the result of its dc.wait_reload"
                                 : "a copy in host memory: compute reads the offloaded value or a "
                                   "dc.wait_reload's result",
                             "; only a reload, a dc.wait_offload and the output read host "
                             "tensors)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Verify(const Graph& g) {
  OVERLAP_RETURN_IF_ERROR(VerifyNodes(g));
  OVERLAP_RETURN_IF_ERROR(VerifyParams(g));
  OVERLAP_RETURN_IF_ERROR(VerifyZero3Ops(g));
  return VerifyHostTensorReaders(g);
}

}  // namespace overlap
