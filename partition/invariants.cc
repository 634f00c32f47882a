#include "partition/invariants.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/verifier.h"
#include "partition/split.h"

namespace overlap {
namespace {

absl::Status Violated(absl::string_view what) {
  return absl::InternalError(absl::StrCat("partition invariant violated: ", what));
}

bool Trainable(const Param& p) { return p.requires_grad && !p.ddp_ignored; }

// Bytes the reference counts at node n: a call_module's parameters (each storage once per
// module) and a get_attr's parameter, when trainable. Written out again on purpose.
int64_t ReferenceBytes(const Graph& g, const Node& n) {
  int64_t bytes = 0;
  if (n.op() == Op::kCallModule) {
    absl::flat_hash_set<std::string> seen;
    for (int i : g.ParamsOwnedBy(n.target())) {
      const Param& p = g.params()[i];
      if (seen.insert(p.storage_key()).second && Trainable(p)) bytes += p.bytes;
    }
  } else if (n.op() == Op::kGetAttr) {
    const int i = g.FindParam(n.target());
    if (i >= 0 && Trainable(g.params()[i])) bytes += g.params()[i].bytes;
  }
  return bytes;
}

// Coverage and contiguity: the buckets list every node but the placeholders and the output
// (`expected`, in graph order) exactly once, in order, with indices 0..n-1.
absl::Status CheckCoverage(const PartitionResult& r, const std::vector<NodeId>& expected) {
  std::vector<NodeId> listed;
  for (size_t i = 0; i < r.buckets.size(); ++i) {
    if (r.buckets[i].index != static_cast<int>(i)) return Violated("bucket indices are not 0..n-1");
    listed.insert(listed.end(), r.buckets[i].nodes.begin(), r.buckets[i].nodes.end());
  }
  if (listed != expected) {
    return Violated("buckets do not list every node exactly once, contiguously, in graph order");
  }
  return absl::OkStatus();
}

// Reference mode: each bucket's bytes are its nodes' parameters, and a bucket closes after
// the node that brings it to its cap.
absl::Status CheckReferenceBytes(const Graph& g, const PartitionResult& r) {
  for (const Bucket& b : r.buckets) {
    int64_t sum = 0;
    for (NodeId id : b.nodes) sum += ReferenceBytes(g, g.node(id));
    if (sum != b.size_bytes) {
      return Violated(absl::StrCat("reference bucket ", b.index, " counts ", b.size_bytes,
                                   " bytes, its nodes' parameters are ", sum));
    }
  }
  for (const Bucket& b : r.buckets) {
    const bool first_walked = b.index + 1 == static_cast<int>(r.buckets.size());
    const int64_t cap = first_walked && r.buckets.size() > 1 ? r.options.first_bucket_cap_bytes
                                                             : r.options.bucket_cap_bytes;
    if (r.buckets.size() == 1) break;  // one bucket: no cap was ever applied
    std::vector<int64_t> per_node;
    for (NodeId id : b.nodes) per_node.push_back(ReferenceBytes(g, g.node(id)));
    size_t k = 0;
    while (k < per_node.size() && per_node[k] == 0) ++k;  // merged empty preamble
    int64_t rest = 0;
    for (size_t j = k + 1; j < per_node.size(); ++j) rest += per_node[j];
    if (per_node.size() > k && rest >= cap && rest > 0) {
      return Violated(absl::StrCat("reference bucket ", b.index, " holds ", rest,
                                   " bytes besides its closing node, cap ", cap));
    }
  }
  return absl::OkStatus();
}

// Default mode: every trainable storage some node uses is counted once: the bytes add up to
// the unique storages, and there are as many names as storages.
absl::Status CheckDefaultBytes(const Graph& g, const PartitionResult& r,
                               const std::vector<NodeId>& expected) {
  absl::flat_hash_map<std::string, int64_t> used;
  auto use = [&](int i) {
    if (i >= 0 && Trainable(g.params()[i])) {
      used.emplace(g.params()[i].storage_key(), g.params()[i].bytes);
    }
  };
  for (NodeId id : expected) {
    const Node& n = g.node(id);
    if (n.op() == Op::kCallModule) {
      for (int i : g.ParamsOwnedBy(n.target())) use(i);
    } else if (n.op() == Op::kGetAttr) {
      use(g.FindParam(n.target()));
    } else {
      for (NodeId in : n.inputs()) {
        const Node& src = g.node(in);
        if (src.op() == Op::kPlaceholder && src.meta().has_param)
          use(g.FindParam(src.meta().param));
      }
      if (n.op() == Op::kCallMethod && !n.arg_inputs().empty()) {
        const Node& self = g.node(n.arg_inputs()[0]);
        if (self.op() == Op::kGetAttr && g.FindParam(self.target()) < 0) {
          for (int i : g.ParamsOwnedBy(self.target())) use(i);
        }
      }
    }
  }
  int64_t total = 0;
  for (const Bucket& b : r.buckets) total += b.size_bytes;
  int64_t want = 0;
  for (const auto& [key, bytes] : used) want += bytes;
  size_t names = 0;
  for (const Bucket& b : r.buckets) names += b.params.size();
  if (want != total || names != used.size()) {
    return Violated(absl::StrCat("default mode counts ", total, " bytes in ", names,
                                 " names; the graph uses ", used.size(), " trainable storages of ",
                                 want, " bytes"));
  }
  return absl::OkStatus();
}

// Subgraphs: each verifies, every node but the get_attrs is in exactly one.
absl::Status CheckMembership(const Graph& g, const PartitionResult& r,
                             const std::vector<NodeId>& expected) {
  // Both reference modes may leave a subgraph without outputs, as PyTorch's does.
  const bool reference = r.options.mode != PartitionMode::kDefault;
  absl::flat_hash_map<NodeId, int> in_piece;
  for (size_t s = 0; s < r.pieces.submodules.size(); ++s) {
    const Submodule& sm = r.pieces.submodules[s];
    if (absl::Status v = Verify(sm.graph); !v.ok()) {
      return Violated(absl::StrCat(sm.name, " does not verify: ", v.message()));
    }
    if (!reference && sm.outputs.empty()) {
      return Violated(absl::StrCat("default mode made ", sm.name, " without outputs"));
    }
    for (NodeId id : sm.nodes) {
      if (!in_piece.emplace(id, static_cast<int>(s)).second) {
        return Violated(absl::StrCat("node \"", g.node(id).name(), "\" is in two subgraphs"));
      }
    }
  }
  for (NodeId id : expected) {
    const bool get_attr = g.node(id).op() == Op::kGetAttr;
    if (get_attr == in_piece.contains(id)) {
      return Violated(
          absl::StrCat("node \"", g.node(id).name(),
                       get_attr ? "\" (get_attr) is in a subgraph" : "\" is in no subgraph"));
    }
  }
  return absl::OkStatus();
}

// Execution order: each subgraph runs after its inputs are computed, the output reads
// computed values, and inlining the pieces gives back the original graph.
absl::Status CheckCallOrder(const Graph& g, const PartitionResult& r) {
  absl::flat_hash_set<NodeId> available;
  for (NodeId id : g.order()) {
    const Op op = g.node(id).op();
    if (op == Op::kPlaceholder || op == Op::kGetAttr) available.insert(id);
  }
  for (int s : r.pieces.call_order) {
    const Submodule& sm = r.pieces.submodules[s];
    for (NodeId in : sm.inputs) {
      if (!available.contains(in)) {
        return Violated(absl::StrCat(sm.name, " runs before its input \"", g.node(in).name(),
                                     "\" is computed"));
      }
    }
    available.insert(sm.nodes.begin(), sm.nodes.end());
  }
  for (NodeId in : g.node(g.last()).inputs()) {
    if (!available.contains(in)) return Violated("the graph output reads a value never computed");
  }
  if (absl::Status v = Verify(r.pieces.outer); !v.ok()) {
    return Violated(absl::StrCat("outer graph does not verify: ", v.message()));
  }
  absl::StatusOr<Graph> inlined = InlineSubmodules(r.pieces);
  if (!inlined.ok()) return Violated(absl::StrCat("inlining failed: ", inlined.status().message()));
  std::string why;
  if (!SameNodesAndEdges(g, *inlined, &why)) {
    return Violated(absl::StrCat("inlining does not give back the original: ", why));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPartitionInvariants(const Graph& g, const PartitionResult& r) {
  std::vector<NodeId> expected;
  for (NodeId id : g.order()) {
    const Op op = g.node(id).op();
    if (op != Op::kPlaceholder && op != Op::kOutput) expected.push_back(id);
  }
  if (absl::Status s = CheckCoverage(r, expected); !s.ok()) return s;
  // reference-2x's bytes are checked against torch's own DDPOptimizer instead
  // (tools/ddp_optimizer_oracle.py, //tools:ddp_optimizer_test).
  absl::Status bytes = r.options.mode == PartitionMode::kReference ? CheckReferenceBytes(g, r)
                       : r.options.mode == PartitionMode::kDefault
                           ? CheckDefaultBytes(g, r, expected)
                           : absl::OkStatus();
  if (!bytes.ok()) return bytes;
  if (!r.split) {
    if (r.buckets.size() > 1) return Violated("several buckets but no split");
    return absl::OkStatus();
  }
  if (absl::Status s = CheckMembership(g, r, expected); !s.ok()) return s;
  return CheckCallOrder(g, r);
}

}  // namespace overlap
