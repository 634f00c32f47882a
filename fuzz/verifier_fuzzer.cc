// Fuzz target: Verify() against a slow, obviously-correct restatement of its contract, on
// valid graphs broken on purpose. Input: byte 0 = how many corruptions (0-7), 3 bytes each
// (kind, node / parameter a, b), then a graph decoded by the shared generator.
// Corruptions go through the public API only (moves, extra references, bad sizes and times,
// bad or overflowing parameter bytes, dangling meta.param / grad_of, unknown owners, tied
// entries that disagree, a second output), so they are what a buggy pass could produce.
// Invariants: Verify() and the slow checker agree on every graph; a rejection has a message
// naming something; an accepted graph round-trips through JSON exactly.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "graph/cost_model.h"
#include "graph/errors.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/random_graph.h"
#include "graph/shape_rules.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

void Fail(const std::string& what) {
  std::fprintf(stderr, "verifier_fuzzer: %s\n", what.c_str());
  std::abort();
}

void Refs(const Value& v, std::vector<NodeId>* out) {
  if (v.is_ref()) {
    out->push_back(v.as_ref());
  } else if (v.kind() == Value::Kind::kList || v.kind() == Value::Kind::kSlice) {
    for (const Value& item : v.items()) Refs(item, out);
  } else if (v.kind() == Value::Kind::kDict) {
    for (const auto& [key, item] : v.dict()) Refs(item, out);
  }
}

// Verify()'s contract (graph/verifier.h), checked by linear scans; returns why it fails.
std::string SlowCheck(const Graph& g) {
  const std::vector<NodeId> order = g.OrderVector();
  std::vector<std::string> names;
  int outputs = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = g.node(order[i]);
    if (!IsValidNodeName(n.name())) return "malformed name";
    for (const std::string& seen : names) {
      if (seen == n.name()) return "duplicate name";
    }
    names.push_back(n.name());
    std::vector<NodeId> refs;
    for (const Value& a : n.args()) Refs(a, &refs);
    for (const auto& [key, v] : n.kwargs()) Refs(v, &refs);
    for (NodeId r : refs) {
      bool earlier = false;
      for (size_t j = 0; j < i; ++j) earlier = earlier || order[j] == r;
      if (!earlier) return "reference to a node not placed earlier";
    }
    if (n.op() == Op::kOutput) {
      ++outputs;
      if (i + 1 != order.size()) return "output is not last";
    }
    const NodeMeta& m = n.meta();
    if (m.has_tensor_size && m.tensor_size < 0) return "negative tensor_size";
    for (int64_t d : m.shape) {
      if (d < 0) return "negative shape dimension";
    }
    if (m.has_device_time && !(std::isfinite(m.device_time) && m.device_time >= 0)) {
      return "bad device_time";
    }
  }
  if (outputs != 1) return "not exactly one output";
  __int128 param_total = 0, tensor_total = 0;
  // Lifted: no call_module node and no parameter owned by a get_attr node. There an owner
  // naming no node is an absent row of a whole-model table, not an error.
  bool lifted = true;
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if (n.op() == Op::kCallModule) lifted = false;
    for (const Param& p : g.params()) {
      if (n.op() == Op::kGetAttr && n.target() == p.owner) lifted = false;
    }
  }
  for (size_t i = 0; i < g.params().size(); ++i) {
    const Param& p = g.params()[i];
    if (p.name.empty()) return "empty parameter name";
    if (p.bytes < 0) return "negative parameter bytes";
    for (int64_t d : p.shape) {
      if (d < 0) return "negative parameter shape dimension";
    }
    bool owned = false;
    for (NodeId id : order) {
      const Node& n = g.node(id);
      owned =
          owned ||
          ((n.op() == Op::kCallModule || n.op() == Op::kGetAttr || n.op() == Op::kPlaceholder) &&
           n.target() == p.owner) ||
          (n.op() == Op::kPlaceholder && n.name() == p.owner);
    }
    if (!owned && !lifted) return "parameter owner missing (module-style graph)";
    for (size_t j = 0; j < i; ++j) {
      const Param& q = g.params()[j];
      if (q.storage_key() != p.storage_key()) continue;
      if (q.bytes != p.bytes || q.requires_grad != p.requires_grad ||
          q.ddp_ignored != p.ddp_ignored) {
        return "tied parameters disagree";
      }
    }
    param_total += p.bytes;
  }
  if (param_total > std::numeric_limits<int64_t>::max()) return "parameter bytes overflow";
  for (NodeId id : order) {
    const NodeMeta& m = g.node(id).meta();
    const Node& n = g.node(id);
    if (m.has_tensor_size) {
      tensor_total += m.tensor_size;
    } else if (n.op() != Op::kOutput) {
      // No stated size: each stated type's element count x its dtype's bytes (4 when no dtype).
      for (const TensorType& t : StatedTypes(n)) {
        if (t.dtype == "none") continue;
        __int128 bytes = 4;
        if (!t.dtype.empty()) {
          const std::optional<int64_t> item = KnownDtypeBytes(t.dtype);
          if (!item.has_value()) return "unknown dtype";
          bytes = *item;
        }
        bool empty = false;
        for (int64_t d : t.shape) {
          if (d < 0) return "negative stated dimension";
          empty = empty || d == 0;
        }
        if (empty) continue;
        for (int64_t d : t.shape) {
          bytes *= d;  // stays below 2^126: stop once past int64
          if (bytes > std::numeric_limits<int64_t>::max()) return "a stated type's bytes overflow";
        }
        tensor_total += bytes;
        if (tensor_total > std::numeric_limits<int64_t>::max()) return "tensor sizes overflow";
      }
    }
    for (const auto& [has, name] :
         {std::pair{m.has_param, &m.param}, std::pair{m.has_grad_of, &m.grad_of}}) {
      if (!has) continue;
      bool found = false;
      for (const Param& p : g.params()) found = found || p.name == *name;
      if (!found) return "meta names an unknown parameter";
    }
  }
  if (tensor_total > std::numeric_limits<int64_t>::max()) return "tensor sizes overflow";
  double time_total = 0;  // every term finite and >= 0: the sum only grows
  for (NodeId id : order) {
    const NodeMeta& m = g.node(id).meta();
    if (m.has_device_time) time_total += m.device_time;
  }
  if (!std::isfinite(time_total)) return "device times sum to infinity";
  // meta.param: placeholders only, one placeholder per parameter.
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = g.node(order[i]);
    if (!n.meta().has_param) continue;
    if (n.op() != Op::kPlaceholder) return "meta.param on a non-placeholder";
    for (size_t j = 0; j < i; ++j) {
      const Node& o = g.node(order[j]);
      if (o.meta().has_param && o.meta().param == n.meta().param) return "meta.param twice";
    }
  }
  // The ZeRO-3 ops, straight from docs/format.md.
  const int64_t np = static_cast<int64_t>(g.params().size());
  auto int_at = [](const Node& n, size_t i, int64_t* v) {
    if (i >= n.args().size() || n.args()[i].kind() != Value::Kind::kInt) return false;
    *v = n.args()[i].as_int();
    return true;
  };
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = g.node(order[i]);
    if (n.op() != Op::kCallFunction) continue;
    const std::string& t = n.target();
    const bool ag = t == "dc.allgather_param", wait = t == "dc.wait_allgather";
    const bool rel = t == "dc.release_param", red = t == "dc.reduce_grad";
    if (!ag && !wait && !rel && !red) continue;
    if (n.args().size() != (rel ? 4u : 3u)) return "dc op arity";
    if (!n.args()[0].is_ref()) return "dc op args[0] not a reference";
    int64_t gid = 0, ds = 0, users = 0;
    if (!int_at(n, 1, &gid) || gid < 0) return "dc op graph_id";
    if (!int_at(n, 2, &ds) || ds < 0 || ds >= np) return "dc op ds_id";
    const Node& in = g.node(n.args()[0].as_ref());
    if (ag && in.op() == Op::kPlaceholder && in.meta().has_param &&
        in.meta().param != g.params()[ds].name) {
      return "allgather of another parameter's placeholder";
    }
    if (wait) {
      int64_t in_ds = 0;
      if (in.op() != Op::kCallFunction || in.target() != "dc.allgather_param") {
        return "wait on a non-allgather";
      }
      if (!int_at(in, 2, &in_ds) || in_ds != ds) return "wait with another ds_id";
      for (size_t j = 0; j < i; ++j) {
        const Node& o = g.node(order[j]);
        if (o.op() == Op::kCallFunction && o.target() == "dc.wait_allgather" && !o.args().empty() &&
            o.args()[0] == n.args()[0]) {
          return "two waits on one allgather";
        }
      }
    }
    if (rel && (!int_at(n, 3, &users) || users < 1)) return "release n_users";
  }
  return "";
}

NodeId PickNode(const Graph& g, uint8_t b) {
  const NodeId id = g.id_bound() == 0 ? kNoNode : static_cast<NodeId>(b % g.id_bound());
  return g.IsLive(id) ? id : kNoNode;
}

void Corrupt(Graph& g, uint8_t kind, uint8_t a, uint8_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const NodeId x = PickNode(g, a), y = PickNode(g, b);
  const int np = static_cast<int>(g.params().size());
  Param* p = np > 0 ? &g.mutable_param(a % np) : nullptr;
  const Param* q = np > 0 ? &g.params()[b % np] : nullptr;
  const NodeId out = g.last();
  // A ZeRO-3 op with arguments drawn from the bytes, just before the output.
  auto add_dc = [&](absl::string_view target, std::vector<Value> args) {
    if (out == kNoNode) return;
    (void)g.AddNode(Op::kCallFunction, g.UniqueName("dc_op"), std::string(target), std::move(args),
                    {}, InsertPoint::Before(out));
  };
  const Value ref = x != kNoNode ? Value::Ref(x) : Value::Int(0);
  const Value ds = b % 5 == 0 ? Value::String("zero") : Value::Int(static_cast<int>(b % 7) - 2);
  switch (kind % 16) {
    case 0:
      if (x != kNoNode && y != kNoNode && x != y) g.MoveBefore(x, y);
      break;
    case 1:
      if (x != kNoNode && y != kNoNode && x != y) g.MoveAfter(x, y);
      break;
    case 2:
      if (x != kNoNode && y != kNoNode) {
        std::vector<Value> args = g.node(x).args();
        args.push_back(Value::Ref(y));
        (void)g.SetArgs(x, std::move(args), g.node(x).kwargs());
      }
      break;
    case 3:
      if (x != kNoNode) {
        const int64_t sizes[] = {-1, kMax, kMax / 2 + 1, 0};
        g.mutable_node(x).mutable_meta().set_tensor_size(sizes[b % 4]);
      }
      break;
    case 4:
      if (x != kNoNode) {
        const double times[] = {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 0.0};
        g.mutable_node(x).mutable_meta().set_device_time(times[b % 4]);
      }
      break;
    case 5:
      if (p != nullptr) {
        const int64_t sizes[] = {-1, kMax, kMax / 2 + 1, 0};
        p->bytes = sizes[b % 4];
      }
      break;
    case 6:
      if (x != kNoNode) {
        g.mutable_node(x).mutable_meta().set_param(q != nullptr && b % 2 ? q->name : "nowhere.w");
      }
      break;
    case 7:
      if (x != kNoNode) {
        g.mutable_node(x).mutable_meta().set_grad_of(q != nullptr && b % 2 ? q->name : "nowhere.w");
      }
      break;
    case 8:
      if (p != nullptr) p->owner = y != kNoNode ? g.node(y).target() : "nowhere";
      break;
    case 9:
      if (p != nullptr && q != nullptr) p->storage = q->storage_key();
      break;
    case 10:
      (void)g.AddNode(Op::kOutput, g.UniqueName("output"), "output", {});
      break;
    case 11:
      add_dc("dc.allgather_param",
             b % 11 == 0 ? std::vector<Value>{} : std::vector<Value>{ref, Value::Int(b % 3), ds});
      break;
    case 12:
      add_dc("dc.wait_allgather", {ref, Value::Int(0), ds});
      break;
    case 13:
      add_dc("dc.release_param", {ref, Value::Int(0), ds, Value::Int(static_cast<int>(a % 3) - 1)});
      break;
    case 14:
      add_dc("dc.reduce_grad", {ref, Value::Int(1), ds});
      break;
    case 15:
      if (x != kNoNode)
        g.mutable_node(x).mutable_meta().set_shape({2, static_cast<int64_t>(b) - 128});
      if (p != nullptr) p->shape = {static_cast<int64_t>(a) - 128};
      break;
  }
}

}  // namespace
}  // namespace overlap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  if (size == 0) return 0;
  const size_t count = data[0] % 8;
  const size_t header = 1 + 3 * count;
  if (size < header) return 0;
  Graph g = GraphFromBytes(absl::MakeConstSpan(data + header, size - header), 128);
  for (size_t i = 0; i < count; ++i) {
    Corrupt(g, data[1 + 3 * i], data[2 + 3 * i], data[3 + 3 * i]);
  }
  const absl::Status s = Verify(g);
  const std::string slow = SlowCheck(g);
  if (s.ok() != slow.empty()) {
    Fail("Verify says \"" + std::string(s.ok() ? "OK" : s.message()) + "\", slow check says \"" +
         (slow.empty() ? "OK" : slow) + "\"");
  }
  if (!s.ok()) {
    if (s.message().empty()) Fail("a rejection without a message");
    // The public API cannot break the graph's own bookkeeping: every rejection is bad input.
    if (!IsBadInput(s))
      Fail("Verify's rejection is not a bad-input error: " + std::string(s.message()));
    return 0;
  }
  absl::StatusOr<Graph> back = ReadGraphJson(WriteGraphJson(g));
  if (!back.ok())
    Fail("an accepted graph does not read back: " + std::string(back.status().message()));
  if (!(*back == g)) Fail("an accepted graph does not round-trip exactly");
  return 0;
}
