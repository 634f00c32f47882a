#include "schedule/simulator.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/json_writer.h"
#include "schedule/fast_free_reference.h"  // LastUses, CheckTopologicalPermutation
#include "schedule/zero3_insertion.h"

namespace overlap {

namespace {

bool IsView(const Node& n) { return n.meta().has_aliases_input && n.meta().aliases_input; }

// A reduce_grad's bucket (kwargs {"bucket": <int>}), or -1.
int ReduceBucket(const Node& n) {
  for (const auto& [k, v] : n.kwargs()) {
    if (k == "bucket" && v.kind() == Value::Kind::kInt) return static_cast<int>(v.as_int());
  }
  return -1;
}

}  // namespace

Simulator::Simulator(const Graph& g, const CollectiveModel& model)
    : g_(g),
      model_(model),
      // When a tensor's storage dies: a release hands the same tensor on, like a view.
      last_use_(LastUses(g, /*releases_pass_through=*/true)),
      reduced_by_(g.id_bound(), kNoNode),
      kind_(g.id_bound(), kCompute),
      bytes_(g.id_bound(), 0),
      time_(g.id_bound(), 0),
      ds_(g.id_bound(), -1),
      persistent_(g.id_bound(), 0),
      bucket_(g.id_bound(), -1) {
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    bytes_[id] = SizeOf(n);
    ds_[id] = IntArg(n, 2);
    persistent_[id] = IsPersistentAllgather(n);
    time_[id] = n.meta().has_device_time ? n.meta().device_time : 0;
    if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput || n.op() == Op::kGetAttr) {
      kind_[id] = kInstant;
    } else if (IsCallTo(n, kAllgatherTarget)) {
      kind_[id] = kAllgather;
      time_[id] = model.Allgather(bytes_[id]);
    } else if (IsCallTo(n, kReduceTarget)) {
      kind_[id] = kReduce;
      bucket_[id] = ReduceBucket(n);
      time_[id] = model.ReduceScatter(bytes_[id]);
      if (!n.inputs().empty()) reduced_by_[n.inputs()[0]] = id;
    } else if (IsCallTo(n, kWaitTarget)) {
      kind_[id] = kWait;
    } else if (IsCallTo(n, kReleaseTarget)) {
      kind_[id] = kRelease;
    } else if (IsView(n)) {
      kind_[id] = kView;
    }
  }
}

absl::StatusOr<SimulationResult> Simulator::Run(absl::Span<const NodeId> order, bool record,
                                                absl::Span<const int64_t> resident,
                                                int64_t reduce_bucket_bytes) const {
  if (absl::Status s = CheckTopologicalPermutation(g_, order); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a valid schedule: ", s.message()));
  }
  return RunUnchecked(order, record, resident, reduce_bucket_bytes);
}

absl::StatusOr<SimulationResult> Simulator::RunUnchecked(absl::Span<const NodeId> order,
                                                         bool record,
                                                         absl::Span<const int64_t> resident,
                                                         int64_t reduce_bucket_bytes) const {
  const Graph& g = g_;
  if (!model_.Valid()) {
    return absl::InvalidArgumentError(
        "collective model needs world size >= 1, latency >= 0, bandwidth > 0");
  }
  SimulationResult r;
  std::vector<double> start(g.id_bound(), 0), end(g.id_bound(), 0);
  double compute_t = 0, comm_free = 0;
  // Gathered parameters: (ds_id) -> (bytes, releases seen).
  absl::flat_hash_map<int64_t, std::pair<int64_t, int64_t>> gathered;
  int64_t gathered_now = 0;
  std::vector<std::pair<double, int64_t>> deltas;  // (time, +/- bytes)
  // Resident parameters: gathered for the whole step, before it starts.
  // ds_ids are parameter-table indices: a flag per parameter (a hash set for any other id a
  // hand-written graph may carry).
  const size_t params = g.params().size();
  std::vector<char> resident_flag(params, 0);
  absl::flat_hash_set<int64_t> resident_other;
  bool any_resident = false;
  auto mark = [&](int64_t ds) {
    any_resident = true;
    if (ds >= 0 && static_cast<size_t>(ds) < params) {
      resident_flag[ds] = 1;
    } else {
      resident_other.insert(ds);
    }
  };
  for (int64_t ds : resident) mark(ds);
  for (NodeId id : order) {
    if (kind_[id] == kAllgather && persistent_[id]) mark(ds_[id]);
  }
  auto is_resident = [&](NodeId id) {
    if (!any_resident) return false;
    const int64_t ds = ds_[id];
    return ds >= 0 && static_cast<size_t>(ds) < params ? resident_flag[ds] != 0
                                                       : resident_other.contains(ds);
  };
  for (NodeId id : order) {
    if (kind_[id] == kAllgather && is_resident(id)) {
      deltas.push_back({0.0, bytes_[id]});
      gathered_now += bytes_[id];
    }
  }
  r.peak_gathered_bytes = gathered_now;
  // Reduce-scatter buckets: each reduce_grad's bucket (-1: alone), and how many members
  // each bucket still waits for. One collective per bucket, issued at its last member.
  std::vector<int> bucket_of;
  std::vector<int> waiting;
  std::vector<std::vector<NodeId>> members;
  {
    int open = -1;
    int64_t open_bytes = 0;
    absl::flat_hash_map<int, int> dense_of;
    for (NodeId id : order) {
      if (kind_[id] != kReduce) continue;
      int b = bucket_[id];
      if (reduce_bucket_bytes > 0) {
        if (open < 0) {
          open = static_cast<int>(members.size());
          open_bytes = 0;
        }
        b = open;
        open_bytes += bytes_[id];
        if (open_bytes >= reduce_bucket_bytes) open = -1;
      }
      if (b < 0) continue;
      if (bucket_of.empty()) bucket_of.assign(g.id_bound(), -1);
      // Graph-marked ids may be anything: map them to dense indices in first-seen order.
      const int dense =
          reduce_bucket_bytes > 0
              ? b
              : dense_of.try_emplace(b, static_cast<int>(dense_of.size())).first->second;
      if (dense >= static_cast<int>(members.size())) {
        members.resize(dense + 1);
        waiting.resize(dense + 1, 0);
      }
      members[dense].push_back(id);
      ++waiting[dense];
      bucket_of[id] = dense;
    }
  }
  std::vector<int64_t> bucket_bytes(members.size(), 0);
  for (NodeId id : order) {
    const Node& n = g.node(id);
    if ((kind_[id] == kAllgather || kind_[id] == kRelease) && is_resident(id)) {
      start[id] = end[id] = compute_t;  // already gathered; nothing to free
      continue;
    }
    switch (kind_[id]) {
      case kInstant:
        start[id] = end[id] = compute_t;
        break;
      case kAllgather:
      case kReduce: {
        const int64_t bytes = bytes_[id];
        double t = time_[id];
        if (kind_[id] == kReduce && !bucket_of.empty() && bucket_of[id] >= 0) {
          const int b = bucket_of[id];
          bucket_bytes[b] += bytes;
          if (--waiting[b] > 0) {  // not the last member: the bucket's collective comes later
            start[id] = end[id] = compute_t;
            break;
          }
          t = model_.ReduceScatter(bucket_bytes[b]);
        }
        start[id] = std::max(compute_t, comm_free);
        end[id] = start[id] + t;
        comm_free = end[id];
        r.comm_s += t;
        if (record) r.events.push_back({id, 1, start[id], end[id]});
        if (kind_[id] == kReduce && !bucket_of.empty() && bucket_of[id] >= 0) {
          for (NodeId m : members[bucket_of[id]]) end[m] = end[id];  // gradients freed together
        }
        if (kind_[id] == kAllgather) {
          deltas.push_back({compute_t, bytes});  // allocated at issue
          auto& [size, seen] = gathered[ds_[id]];
          size = bytes;
          seen = 0;
          gathered_now += bytes;
          r.peak_gathered_bytes = std::max(r.peak_gathered_bytes, gathered_now);
        }
        break;
      }
      case kWait: {
        const NodeId ag = n.inputs().empty() ? kNoNode : n.inputs()[0];
        if (ag != kNoNode) compute_t = std::max(compute_t, end[ag]);
        start[id] = end[id] = compute_t;
        break;
      }
      case kRelease: {
        start[id] = end[id] = compute_t;
        auto it = gathered.find(ds_[id]);
        if (it != gathered.end() && ++it->second.second == IntArg(n, 3)) {
          deltas.push_back({compute_t, -it->second.first});
          gathered_now -= it->second.first;
          gathered.erase(it);
        }
        break;
      }
      case kView:
      case kCompute: {
        const double t = time_[id];
        start[id] = compute_t;
        end[id] = compute_t + t;
        compute_t = end[id];
        r.compute_s += t;
        if (record && t > 0) r.events.push_back({id, 0, start[id], end[id]});
        break;
      }
    }
  }
  // Activations: allocated at start, freed when the last use (or the reduction) finishes.
  if (record) {
    for (NodeId id : order) {
      if (kind_[id] != kCompute || bytes_[id] == 0) continue;
      deltas.push_back({start[id], bytes_[id]});
      deltas.push_back({FreeTime(id, end), -bytes_[id]});
    }
    // Ties: frees first; a strict total order, so an unstable sort gives the same sequence.
    std::sort(deltas.begin(), deltas.end());
    int64_t in_use = 0;
    r.memory.reserve(deltas.size());
    for (const auto& [t, d] : deltas) {
      in_use += d;
      r.peak_memory_bytes = std::max(r.peak_memory_bytes, in_use);
      r.memory.push_back({t, in_use});
    }
  } else {
    // The same peak without sorting every event: with frees first at equal times, the
    // running total peaks at the end of an instant, so the peak is the largest total over
    // instants. The gather events above and the activations' allocations are already in
    // time order (both follow compute time along the order); only the activations' frees
    // need sorting, and a three-way merge by time gives every instant's total.
    std::vector<std::pair<double, int64_t>> allocs, frees;
    for (NodeId id : order) {
      if (kind_[id] != kCompute || bytes_[id] == 0) continue;
      allocs.push_back({start[id], bytes_[id]});
      frees.push_back({FreeTime(id, end), -bytes_[id]});
    }
    std::sort(frees.begin(), frees.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::vector<std::pair<double, int64_t>>* seqs[3] = {&deltas, &allocs, &frees};
    size_t at[3] = {0, 0, 0};
    int64_t in_use = 0;
    double instant = -1;
    while (true) {
      int pick = -1;
      for (int q = 0; q < 3; ++q) {
        if (at[q] < seqs[q]->size() &&
            (pick < 0 || (*seqs[q])[at[q]].first < (*seqs[pick])[at[pick]].first)) {
          pick = q;
        }
      }
      if (pick < 0) break;
      const auto& [t, d] = (*seqs[pick])[at[pick]++];
      if (t > instant) {
        r.peak_memory_bytes = std::max(r.peak_memory_bytes, in_use);
        instant = t;
      }
      in_use += d;
    }
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, in_use);
  }
  r.step_time_s = std::max(compute_t, comm_free);
  r.exposed_comm_s = std::max(0.0, r.step_time_s - r.compute_s);
  r.lower_bound_s = std::max(r.compute_s, r.comm_s);
  return r;
}

double Simulator::FreeTime(NodeId id, const std::vector<double>& end) const {
  double free_at = last_use_[id] == kNoNode ? end[id] : end[last_use_[id]];
  if (reduced_by_[id] != kNoNode) free_at = std::max(free_at, end[reduced_by_[id]]);
  return free_at;
}

absl::StatusOr<SimulationResult> Simulate(const Graph& g, absl::Span<const NodeId> order,
                                          const CollectiveModel& model) {
  return Simulator(g, model).Run(order);
}

std::string ChromeTraceJson(const Graph& g, const SimulationResult& r) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out.append(
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": "
      "\"compute\"}},\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 1, "
      "\"args\": {\"name\": \"communication\"}}");
  for (const SimEvent& e : r.events) {
    out.append(",\n{\"name\": ");
    AppendJsonString(&out, g.node(e.node).name());
    out.append(", \"cat\": ");
    AppendJsonString(&out, g.node(e.node).target());
    absl::StrAppend(&out, ", \"ph\": \"X\", \"pid\": 0, \"tid\": ", e.stream, ", \"ts\": ");
    AppendJsonDouble(&out, e.start_s * 1e6);
    out.append(", \"dur\": ");
    AppendJsonDouble(&out, (e.end_s - e.start_s) * 1e6);
    out.push_back('}');
  }
  for (const auto& [t, bytes] : r.memory) {
    out.append(",\n{\"name\": \"memory\", \"ph\": \"C\", \"pid\": 0, \"ts\": ");
    AppendJsonDouble(&out, t * 1e6);
    absl::StrAppend(&out, ", \"args\": {\"bytes\": ", bytes, "}}");
  }
  out.append("\n]}\n");
  return out;
}

std::string SimulationJsonFields(const SimulationResult& r) {
  std::string out;
  absl::StrAppend(&out, "\"peak_memory_bytes\": ", r.peak_memory_bytes,
                  ", \"peak_gathered_bytes\": ", r.peak_gathered_bytes, ", \"step_time_s\": ");
  AppendJsonDouble(&out, r.step_time_s);
  out.append(", \"exposed_comm_s\": ");
  AppendJsonDouble(&out, r.exposed_comm_s);
  out.append(", \"lower_bound_s\": ");
  AppendJsonDouble(&out, r.lower_bound_s);
  return out;
}

}  // namespace overlap
