#include "partition/buckets.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace overlap {

absl::string_view PartitionModeName(PartitionMode m) {
  return m == PartitionMode::kReference ? "reference" : "default";
}

bool ParsePartitionMode(absl::string_view s, PartitionMode* m) {
  if (s == "reference") {
    *m = PartitionMode::kReference;
    return true;
  }
  if (s == "default") {
    *m = PartitionMode::kDefault;
    return true;
  }
  return false;
}

namespace {

// A parameter counted at a node: which table entry, and the name the bucket lists.
struct Use {
  int param;
  std::string name;
};

bool Counts(const Param& p) { return p.requires_grad && !p.ddp_ignored; }

// "<module>_<name relative to the module>", as DDPOptimizer names module parameters.
std::string ModuleParamName(const std::string& module, const std::string& name) {
  absl::string_view local = name;
  if (absl::StartsWith(local, module) && local.size() > module.size() &&
      local[module.size()] == '.') {
    local.remove_prefix(module.size() + 1);
  }
  return absl::StrCat(module, "_", local);
}

// The parameters a call_module's module owns, each storage once (named_parameters()).
void ModuleUses(const Graph& g, const std::string& module, std::vector<Use>* out) {
  absl::flat_hash_set<absl::string_view> seen;
  for (int i : g.ParamsOwnedBy(module)) {
    const Param& p = g.params()[i];
    if (!seen.insert(p.storage_key()).second) continue;
    out->push_back({i, ModuleParamName(module, p.name)});
  }
}

// Every parameter the node uses, by the rules of `mode` (requires_grad / ignored filtering
// is the caller's).
void NodeUses(const Graph& g, const Node& n, PartitionMode mode, std::vector<Use>* out) {
  out->clear();
  switch (n.op()) {
    case Op::kCallModule:
      ModuleUses(g, n.target(), out);
      return;
    case Op::kGetAttr: {
      const int i = g.FindParam(n.target());
      if (i >= 0) out->push_back({i, n.target()});
      return;
    }
    case Op::kCallFunction:
    case Op::kCallMethod: {
      if (mode == PartitionMode::kReference) return;
      for (NodeId in : n.inputs()) {
        const Node& src = g.node(in);
        if (src.op() == Op::kPlaceholder && src.meta().has_param) {
          const int i = g.FindParam(src.meta().param);
          if (i >= 0) out->push_back({i, g.params()[i].name});
        }
      }
      // A method called on a submodule fetched by get_attr uses that module's parameters.
      if (n.op() == Op::kCallMethod && !n.arg_inputs().empty()) {
        const Node& self = g.node(n.arg_inputs()[0]);
        if (self.op() == Op::kGetAttr && g.FindParam(self.target()) < 0) {
          ModuleUses(g, self.target(), out);
        }
      }
      return;
    }
    default:
      return;
  }
}

struct WalkBucket {
  int64_t size = 0;
  std::vector<std::string> params;
  std::vector<NodeId> nodes;  // reverse graph order
  std::map<std::string, int64_t> by_dtype;
  bool has_external_output = false;
};

}  // namespace

absl::StatusOr<std::vector<Bucket>> AssignBuckets(const Graph& g, const BucketOptions& o) {
  if (o.bucket_cap_bytes < 0 || o.first_bucket_cap_bytes < 0) {
    return absl::InvalidArgumentError("bucket caps must be >= 0");
  }
  if (o.first_bucket_cap_bytes > o.bucket_cap_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "first bucket cap (", o.first_bucket_cap_bytes, " bytes) exceeds the bucket cap (",
        o.bucket_cap_bytes, " bytes)"));
  }
  const bool reference = o.mode == PartitionMode::kReference;
  std::vector<Use> uses;

  // Default mode counts each storage once, at its first use in forward order.
  absl::flat_hash_map<absl::string_view, NodeId> first_use;
  if (!reference) {
    for (NodeId id : g.order()) {
      const Node& n = g.node(id);
      if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput) continue;
      NodeUses(g, n, o.mode, &uses);
      for (const Use& u : uses) {
        const Param& p = g.params()[u.param];
        if (Counts(p)) first_use.emplace(p.storage_key(), id);
      }
    }
  }

  std::vector<WalkBucket> walk(1);  // walk.back() is the bucket being filled
  std::vector<int> bucket_of(g.id_bound(), -1);
  for (NodeId id = g.last(); id != kNoNode; id = g.prev(id)) {
    const Node& n = g.node(id);
    if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput) continue;
    WalkBucket& cur = walk.back();
    const bool full = cur.size >= o.bucket_cap_bytes ||
                      (walk.size() == 1 && cur.size >= o.first_bucket_cap_bytes);
    if (full && (reference || cur.has_external_output)) walk.emplace_back();
    WalkBucket& b = walk.back();
    const int index = static_cast<int>(walk.size()) - 1;
    NodeUses(g, n, o.mode, &uses);
    for (const Use& u : uses) {
      const Param& p = g.params()[u.param];
      if (!Counts(p)) continue;
      if (!reference) {
        auto it = first_use.find(p.storage_key());
        if (it == first_use.end() || it->second != id) continue;
        first_use.erase(it);  // once, even if this node reaches the storage twice
      }
      b.size += p.bytes;
      b.params.push_back(u.name);
      b.by_dtype[p.has_dtype ? p.dtype : "unknown"] += p.bytes;
    }
    b.nodes.push_back(id);
    bucket_of[id] = index;
    if (n.op() != Op::kGetAttr && !b.has_external_output) {
      for (NodeId u : n.users()) {
        if (bucket_of[u] != index) {  // a later bucket, or the output node (-1)
          b.has_external_output = true;
          break;
        }
      }
    }
  }

  // Forward order: the last bucket of the walk is bucket 0.
  std::reverse(walk.begin(), walk.end());
  // Merge bucket 0 forward when it is a parameter-free preamble (both modes), or, in default
  // mode, when nothing outside reads it (it would become a subgraph without outputs: dead
  // code at the start of the graph).
  if (walk.size() > 1 && (walk[0].size == 0 || (!reference && !walk[0].has_external_output))) {
    // Its nodes precede bucket 1's in graph order, and the walk counted them after bucket
    // 1's; both node lists are still reversed.
    WalkBucket& into = walk[1];
    into.nodes.insert(into.nodes.end(), walk[0].nodes.begin(), walk[0].nodes.end());
    into.params.insert(into.params.end(), walk[0].params.begin(), walk[0].params.end());
    into.size += walk[0].size;
    for (const auto& [dtype, bytes] : walk[0].by_dtype) into.by_dtype[dtype] += bytes;
    walk.erase(walk.begin());
  }
  std::vector<Bucket> out(walk.size());
  for (size_t i = 0; i < walk.size(); ++i) {
    out[i].index = static_cast<int>(i);
    out[i].size_bytes = walk[i].size;
    out[i].params = std::move(walk[i].params);
    out[i].nodes.assign(walk[i].nodes.rbegin(), walk[i].nodes.rend());
    out[i].bytes_by_dtype = std::move(walk[i].by_dtype);
  }
  return out;
}

}  // namespace overlap
