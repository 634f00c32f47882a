#include "partition/buckets.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace overlap {

absl::string_view PartitionModeName(PartitionMode m) {
  switch (m) {
    case PartitionMode::kReference:
      return "reference";
    case PartitionMode::kReference2x:
      return "reference-2x";
    default:
      return "default";
  }
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
  if (s == "reference-2x") {
    *m = PartitionMode::kReference2x;
    return true;
  }
  return false;
}

namespace {

// A parameter a node uses: which table entry, and how the bucket names it (the name is
// built only when the parameter is counted).
struct Use {
  enum class Naming : uint8_t { kModule, kParamName, kTarget };
  int param;
  Naming naming;
  const std::string* module;  // for kModule and kTarget: the call_module / get_attr target
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

std::string UseName(const Graph& g, const Use& u) {
  switch (u.naming) {
    case Use::Naming::kModule:
      return ModuleParamName(*u.module, g.params()[u.param].name);
    case Use::Naming::kTarget:
      return *u.module;
    default:
      return g.params()[u.param].name;
  }
}

// Dense ids for storages, so per-storage state is a vector, not a hash map of strings.
std::vector<int> StorageIds(const Graph& g, int* count) {
  absl::flat_hash_map<absl::string_view, int> ids;
  std::vector<int> out(g.params().size());
  for (size_t i = 0; i < g.params().size(); ++i) {
    out[i] = ids.emplace(g.params()[i].storage_key(), static_cast<int>(ids.size())).first->second;
  }
  *count = static_cast<int>(ids.size());
  return out;
}

// The parameters a module owns, each storage once (named_parameters()).
void ModuleUses(const Graph& g, const std::string& module, const std::vector<int>& storage,
                std::vector<Use>* out) {
  const size_t start = out->size();
  for (int i : g.ParamsOwnedBy(module)) {
    bool seen = false;
    for (size_t k = start; k < out->size() && !seen; ++k) {
      seen = storage[(*out)[k].param] == storage[i];
    }
    if (!seen) out->push_back({i, Use::Naming::kModule, &module});
  }
}

// PyTorch 2.x's call_function / call_method rule: each top-level positional argument that is
// a placeholder holding a parameter, at every occurrence (the same parameter twice counts
// twice); a method called on a submodule fetched by get_attr also counts that module's
// parameters (once per module: the caller's set).
void Reference2xUses(const Graph& g, const Node& n, const std::vector<int>& storage,
                     std::vector<Use>* out) {
  if (n.op() == Op::kCallMethod && !n.args().empty() && n.args()[0].is_ref()) {
    const Node& self = g.node(n.args()[0].as_ref());
    if (self.op() == Op::kGetAttr && g.FindParam(self.target()) < 0) {
      ModuleUses(g, self.target(), storage, out);
    }
  }
  for (const Value& v : n.args()) {
    if (!v.is_ref()) continue;
    const Node& src = g.node(v.as_ref());
    if (src.op() == Op::kPlaceholder && src.meta().has_param) {
      const int i = g.FindParam(src.meta().param);
      if (i >= 0) out->push_back({i, Use::Naming::kParamName, nullptr});
    }
  }
}

// Every parameter the node uses, by the rules of `mode` (requires_grad / ignored filtering
// is the caller's).
void NodeUses(const Graph& g, const Node& n, PartitionMode mode, const std::vector<int>& storage,
              std::vector<Use>* out) {
  out->clear();
  switch (n.op()) {
    case Op::kCallModule:
      ModuleUses(g, n.target(), storage, out);
      return;
    case Op::kGetAttr: {
      const int i = g.FindParam(n.target());
      if (i >= 0) out->push_back({i, Use::Naming::kTarget, &n.target()});
      return;
    }
    case Op::kCallFunction:
    case Op::kCallMethod: {
      if (mode == PartitionMode::kReference) return;
      if (mode == PartitionMode::kReference2x) {
        Reference2xUses(g, n, storage, out);
        return;
      }
      for (NodeId in : n.inputs()) {
        const Node& src = g.node(in);
        if (src.op() == Op::kPlaceholder && src.meta().has_param) {
          const int i = g.FindParam(src.meta().param);
          if (i >= 0) out->push_back({i, Use::Naming::kParamName, nullptr});
        }
      }
      // A method called on a submodule fetched by get_attr uses that module's parameters.
      if (n.op() == Op::kCallMethod && !n.arg_inputs().empty()) {
        const Node& self = g.node(n.arg_inputs()[0]);
        if (self.op() == Op::kGetAttr && g.FindParam(self.target()) < 0) {
          ModuleUses(g, self.target(), storage, out);
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
    return absl::InvalidArgumentError(absl::StrCat("first bucket cap (", o.first_bucket_cap_bytes,
                                                   " bytes) exceeds the bucket cap (",
                                                   o.bucket_cap_bytes, " bytes)"));
  }
  // Both reference modes count at every use, in the walk; 2.x's also waits for an external
  // output before opening a bucket, and counts a module once.
  const bool reference =
      o.mode == PartitionMode::kReference || o.mode == PartitionMode::kReference2x;
  const bool v2 = o.mode == PartitionMode::kReference2x;
  absl::flat_hash_set<std::string> counted_modules;  // 2.x: modules already counted
  std::vector<Use> uses;

  int storages = 0;
  const std::vector<int> storage = StorageIds(g, &storages);
  // Default mode counts each storage once, at its first use in forward order. One forward
  // pass finds those uses and keeps them per node (a contiguous range of `counted`), so the
  // reverse walk need not look at parameters again.
  std::vector<char> seen_storage(reference ? 0 : storages, 0);
  std::vector<Use> counted;
  std::vector<uint32_t> counted_begin, counted_end;
  if (!reference) {
    counted_begin.assign(g.id_bound(), 0);
    counted_end.assign(g.id_bound(), 0);
    for (NodeId id : g.order()) {
      const Node& n = g.node(id);
      if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput) continue;
      NodeUses(g, n, o.mode, storage, &uses);
      counted_begin[id] = static_cast<uint32_t>(counted.size());
      for (const Use& u : uses) {
        char& seen = seen_storage[storage[u.param]];
        if (!seen && Counts(g.params()[u.param])) {
          seen = 1;
          counted.push_back(u);
        }
      }
      counted_end[id] = static_cast<uint32_t>(counted.size());
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
    if (full && ((reference && !v2) || cur.has_external_output)) walk.emplace_back();
    WalkBucket& b = walk.back();
    const int index = static_cast<int>(walk.size()) - 1;
    auto count = [&](const Use& u) {
      const Param& p = g.params()[u.param];
      b.size += p.bytes;
      b.params.push_back(UseName(g, u));
      b.by_dtype[p.has_dtype ? p.dtype : "unknown"] += p.bytes;
    };
    if (reference) {
      NodeUses(g, n, o.mode, storage, &uses);
      // 2.x: a module's parameters count once, at its first call in the walk.
      const std::string* module = nullptr;
      bool module_counted = false;
      for (const Use& u : uses) {
        if (v2 && u.naming == Use::Naming::kModule) {
          if (module == nullptr) {
            module = u.module;
            module_counted = counted_modules.contains(*module);
          }
          if (module_counted) continue;
        }
        if (Counts(g.params()[u.param])) count(u);
      }
      if (module != nullptr) counted_modules.insert(*module);
    } else {
      for (uint32_t k = counted_begin[id]; k < counted_end[id]; ++k) count(counted[k]);
    }
    b.nodes.push_back(id);
    bucket_of[id] = index;
    // 2.x looks at every node's users, get_attr nodes' too.
    if ((v2 || n.op() != Op::kGetAttr) && !b.has_external_output) {
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
