#include "partition/testing/slow_reference.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap::slow {
namespace {

bool Counted(const Param& p) { return p.requires_grad && !p.ddp_ignored; }

// The name DDPOptimizer gives a module's parameter: "<module>_<name relative to module>".
std::string ModuleName(const std::string& module, const std::string& name) {
  const std::string prefix = module + ".";
  if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
    return module + "_" + name.substr(prefix.size());
  }
  return module + "_" + name;
}

// Every node a value references, depth-first, left to right, repeats included.
void Refs(const Value& v, std::vector<NodeId>* out) {
  switch (v.kind()) {
    case Value::Kind::kRef:
      out->push_back(v.as_ref());
      return;
    case Value::Kind::kList:
    case Value::Kind::kSlice:
      for (const Value& item : v.items()) Refs(item, out);
      return;
    case Value::Kind::kDict:
      for (const auto& [key, item] : v.dict()) Refs(item, out);
      return;
    default:
      return;
  }
}

std::vector<NodeId> ReadsOf(const Node& n) {
  std::vector<NodeId> out;
  for (const Value& a : n.args()) Refs(a, &out);
  for (const auto& [key, v] : n.kwargs()) Refs(v, &out);
  return out;
}

template <typename T>
void AddOnce(std::vector<T>* v, const T& x) {
  if (std::find(v->begin(), v->end(), x) == v->end()) v->push_back(x);
}

}  // namespace

std::vector<Bucket> ReferenceBuckets(const Graph& g, int64_t bucket_cap, int64_t first_cap) {
  const std::vector<NodeId> order = g.OrderVector();
  std::vector<Bucket> buckets(1);  // buckets[0] is the one being filled
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.node(*it);
    if (n.op() == Op::kOutput || n.op() == Op::kPlaceholder) continue;
    if (buckets[0].size >= bucket_cap || (buckets.size() == 1 && buckets[0].size >= first_cap)) {
      buckets.insert(buckets.begin(), Bucket{});
    }
    if (n.op() == Op::kCallModule) {
      std::vector<std::string> storages_seen;  // named_parameters() lists a tensor once
      for (const Param& p : g.params()) {
        if (p.owner != n.target()) continue;
        if (std::find(storages_seen.begin(), storages_seen.end(), p.storage_key()) !=
            storages_seen.end()) {
          continue;
        }
        storages_seen.push_back(p.storage_key());
        if (!Counted(p)) continue;
        buckets[0].size += p.bytes;
        buckets[0].params.push_back(ModuleName(n.target(), p.name));
      }
    } else if (n.op() == Op::kGetAttr) {
      for (const Param& p : g.params()) {
        if (p.name != n.target()) continue;
        if (Counted(p)) {
          buckets[0].size += p.bytes;
          buckets[0].params.push_back(n.target());
        }
        break;  // the first entry of that name
      }
    }
    buckets[0].nodes.insert(buckets[0].nodes.begin(), n.name());
  }
  if (buckets.size() > 1 && buckets[0].size == 0) {
    buckets[1].nodes.insert(buckets[1].nodes.begin(), buckets[0].nodes.begin(),
                            buckets[0].nodes.end());
    buckets.erase(buckets.begin());
  }
  return buckets;
}

Split SplitByBuckets(const Graph& g, const std::vector<Bucket>& buckets) {
  // Partition of each node name; placeholders and get_attr stay outside (-1).
  std::map<std::string, int> part;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (const std::string& name : buckets[b].nodes) {
      if (g.node(g.FindNode(name)).op() != Op::kGetAttr) part[name] = static_cast<int>(b);
    }
  }
  std::map<int, Piece> pieces;
  for (const auto& [name, p] : part) pieces[p].partition = p;
  std::map<int, std::set<int>> deps;  // partition -> partitions it reads from
  for (NodeId id : g.OrderVector()) {
    const Node& n = g.node(id);
    const bool is_output = n.op() == Op::kOutput;
    if (!is_output && !part.count(n.name())) continue;
    const int user = is_output ? -1 : part[n.name()];
    if (!is_output) pieces[user].nodes.push_back(n.name());
    for (NodeId src_id : ReadsOf(n)) {
      const std::string& src = g.node(src_id).name();
      const bool outside = !part.count(src);
      if (!outside && part[src] == user) continue;
      if (!is_output) AddOnce(&pieces[user].inputs, src);
      if (!outside) {
        AddOnce(&pieces[part[src]].outputs, src);
        if (!is_output) deps[user].insert(part[src]);
      }
    }
  }
  Split s;
  for (auto& [p, piece] : pieces) s.pieces.push_back(piece);
  std::set<int> done;
  bool progress = true;
  while (done.size() < pieces.size() && progress) {  // buckets are contiguous: never stuck
    progress = false;
    for (const auto& [p, piece] : pieces) {
      if (done.count(p)) continue;
      bool ready = true;
      for (int d : deps[p]) ready = ready && done.count(d);
      if (ready) {
        s.call_order.push_back(p);
        done.insert(p);
        progress = true;
        break;
      }
    }
  }
  return s;
}

namespace {

std::string Names(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<std::string> names;
  for (NodeId id : ids) names.push_back(g.node(id).name());
  return absl::StrJoin(names, ",");
}

}  // namespace

absl::Status CompareReferenceMode(const Graph& g, const PartitionResult& r) {
  const BucketOptions& o = r.options;
  const std::vector<Bucket> want =
      ReferenceBuckets(g, o.bucket_cap_bytes, o.first_bucket_cap_bytes);
  if (want.size() != r.buckets.size()) {
    return absl::InternalError(
        absl::StrCat("slow reference has ", want.size(), " buckets, fast has ", r.buckets.size()));
  }
  for (size_t b = 0; b < want.size(); ++b) {
    const overlap::Bucket& got = r.buckets[b];
    const std::string where = absl::StrCat("bucket ", b, ": ");
    if (got.size_bytes != want[b].size) {
      return absl::InternalError(
          absl::StrCat(where, "size ", got.size_bytes, " vs slow ", want[b].size));
    }
    if (got.params != want[b].params) {
      return absl::InternalError(absl::StrCat(where, "params [", absl::StrJoin(got.params, ","),
                                              "] vs slow [", absl::StrJoin(want[b].params, ","),
                                              "]"));
    }
    const std::string nodes = Names(g, got.nodes);
    if (nodes != absl::StrJoin(want[b].nodes, ",")) {
      return absl::InternalError(absl::StrCat(where, "nodes [", nodes, "] vs slow [",
                                              absl::StrJoin(want[b].nodes, ","), "]"));
    }
  }
  if (r.split != (want.size() > 1)) {
    return absl::InternalError(
        absl::StrCat("split is ", r.split, " with ", want.size(), " buckets"));
  }
  if (!r.split) return absl::OkStatus();
  const Split s = SplitByBuckets(g, want);
  if (s.pieces.size() != r.pieces.submodules.size()) {
    return absl::InternalError(absl::StrCat("slow split has ", s.pieces.size(),
                                            " pieces, fast has ", r.pieces.submodules.size()));
  }
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    const Piece& w = s.pieces[i];
    const Submodule& got = r.pieces.submodules[i];
    const std::string where = absl::StrCat("piece ", got.name, ": ");
    if (got.partition != w.partition) {
      return absl::InternalError(
          absl::StrCat(where, "partition ", got.partition, " vs slow ", w.partition));
    }
    const std::pair<const std::vector<NodeId>*, const std::vector<std::string>*> lists[] = {
        {&got.nodes, &w.nodes}, {&got.inputs, &w.inputs}, {&got.outputs, &w.outputs}};
    const char* what[] = {"nodes", "inputs", "outputs"};
    for (int k = 0; k < 3; ++k) {
      const std::string fast = Names(g, *lists[k].first);
      const std::string slow = absl::StrJoin(*lists[k].second, ",");
      if (fast != slow) {
        return absl::InternalError(
            absl::StrCat(where, what[k], " [", fast, "] vs slow [", slow, "]"));
      }
    }
  }
  std::vector<int> order;
  for (int i : r.pieces.call_order) order.push_back(r.pieces.submodules[i].partition);
  if (order != s.call_order) {
    return absl::InternalError(absl::StrCat("call order [", absl::StrJoin(order, ","),
                                            "] vs slow [", absl::StrJoin(s.call_order, ","), "]"));
  }
  return absl::OkStatus();
}

}  // namespace overlap::slow
