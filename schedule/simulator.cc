#include "schedule/simulator.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/json_writer.h"
#include "graph/status_macros.h"
#include "schedule/analysis.h"
#include "schedule/zero3_ops.h"

namespace overlap {

Simulator::Simulator(const Graph& g, const CollectiveModel& model)
    : g_(g),
      model_(model),
      // When a tensor's storage dies: a release hands the same tensor on, like a view.
      last_use_(LastUses(g, LastUseRule::kViewsAndReleases)),
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
    ds_[id] = DsId(n);
    persistent_[id] = IsPersistentAllgather(n);
    time_[id] = TimeOf(n);
    if (n.op() == Op::kPlaceholder || n.op() == Op::kOutput || n.op() == Op::kGetAttr) {
      kind_[id] = kInstant;
    } else if (IsAllgather(n)) {
      kind_[id] = kAllgather;
      time_[id] = model.Allgather(bytes_[id]);
    } else if (IsReduce(n)) {
      kind_[id] = kReduce;
      bucket_[id] = ReduceBucket(n);
      time_[id] = model.ReduceScatter(bytes_[id]);
      if (!n.inputs().empty()) reduced_by_[n.inputs()[0]] = id;
    } else if (IsWait(n)) {
      kind_[id] = kWait;
    } else if (IsRelease(n)) {
      kind_[id] = kRelease;
    } else if (IsView(n)) {
      kind_[id] = kView;
    }
  }
}

// The resident parameters of one run: a flag per parameter-table index (ds_ids are those
// indices), a hash set for any other id a hand-written graph may carry.
class Simulator::Residents {
 public:
  explicit Residents(size_t params) : flag_(params, 0) {}
  void Add(int64_t ds) {
    any_ = true;
    if (ds >= 0 && static_cast<size_t>(ds) < flag_.size()) {
      flag_[ds] = 1;
    } else {
      other_.insert(ds);
    }
  }
  bool Contains(int64_t ds) const {
    if (!any_) return false;
    return ds >= 0 && static_cast<size_t>(ds) < flag_.size() ? flag_[ds] != 0 : other_.contains(ds);
  }

 private:
  bool any_ = false;
  std::vector<char> flag_;
  absl::flat_hash_set<int64_t> other_;
};

// Reduce-scatter buckets of one run: each reduce_grad's dense bucket index (-1: alone), the
// members of each bucket, how many members each still waits for, and the bytes seen so far.
// One collective per bucket, issued at its last member.
struct Simulator::Buckets {
  std::vector<int> bucket_of;  // empty when no reduce is bucketed
  std::vector<std::vector<NodeId>> members;
  std::vector<int> waiting;
  std::vector<int64_t> bytes;
  int of(NodeId id) const { return bucket_of.empty() ? -1 : bucket_of[id]; }
};

// The streams' state while walking an order.
struct Simulator::Timeline {
  std::vector<double> start, end;
  double compute_t = 0;  // when compute is free
  double comm_free = 0;  // when the communication stream is free
  // Gathered-parameter memory events (time, +/- bytes), in time order.
  std::vector<std::pair<double, int64_t>> gather_deltas;
};

Simulator::Residents Simulator::MarkResidents(absl::Span<const NodeId> order,
                                              absl::Span<const int64_t> resident) const {
  Residents residents(g_.params().size());
  for (int64_t ds : resident) residents.Add(ds);
  for (NodeId id : order) {
    if (kind_[id] == kAllgather && persistent_[id]) residents.Add(ds_[id]);
  }
  return residents;
}

Simulator::Buckets Simulator::AssignBuckets(absl::Span<const NodeId> order,
                                            int64_t reduce_bucket_bytes) const {
  Buckets b;
  std::optional<ReduceBucketer> bucketer;
  if (reduce_bucket_bytes > 0) bucketer.emplace(reduce_bucket_bytes);
  absl::flat_hash_map<int64_t, int> dense_of;  // graph-marked ids may be anything
  for (NodeId id : order) {
    if (kind_[id] != kReduce) continue;
    int dense = -1;
    if (bucketer) {
      dense = bucketer->Add(bytes_[id]);
    } else if (bucket_[id] >= 0) {
      dense = dense_of.try_emplace(bucket_[id], static_cast<int>(dense_of.size())).first->second;
    }
    if (dense < 0) continue;
    if (b.bucket_of.empty()) b.bucket_of.assign(g_.id_bound(), -1);
    if (dense >= static_cast<int>(b.members.size())) {
      b.members.resize(dense + 1);
      b.waiting.resize(dense + 1, 0);
    }
    b.members[dense].push_back(id);
    ++b.waiting[dense];
    b.bucket_of[id] = dense;
  }
  b.bytes.assign(b.members.size(), 0);
  return b;
}

void Simulator::RunStreams(absl::Span<const NodeId> order, const Residents& residents,
                           Buckets& buckets, bool record, Timeline* t, SimulationResult* r) const {
  std::vector<double>& start = t->start;
  std::vector<double>& end = t->end;
  // Gathered parameters: ds_id -> (bytes, releases seen).
  absl::flat_hash_map<int64_t, std::pair<int64_t, int64_t>> gathered;
  int64_t gathered_now = 0;
  // Resident parameters are gathered for the whole step, before it starts.
  for (NodeId id : order) {
    if (kind_[id] == kAllgather && residents.Contains(ds_[id])) {
      t->gather_deltas.push_back({0.0, bytes_[id]});
      gathered_now += bytes_[id];
    }
  }
  r->peak_gathered_bytes = gathered_now;
  for (NodeId id : order) {
    const double now = t->compute_t;
    if ((kind_[id] == kAllgather || kind_[id] == kRelease) && residents.Contains(ds_[id])) {
      start[id] = end[id] = now;  // already gathered; nothing to free
      continue;
    }
    switch (kind_[id]) {
      case kInstant:
        start[id] = end[id] = now;
        break;
      case kAllgather:
      case kReduce: {
        double duration = time_[id];
        const int b = kind_[id] == kReduce ? buckets.of(id) : -1;
        if (b >= 0) {
          buckets.bytes[b] += bytes_[id];
          if (--buckets.waiting[b] > 0) {  // not the last member: the collective comes later
            start[id] = end[id] = now;
            break;
          }
          duration = model_.ReduceScatter(buckets.bytes[b]);
        }
        start[id] = std::max(now, t->comm_free);
        end[id] = start[id] + duration;
        t->comm_free = end[id];
        r->comm_s += duration;
        if (record) r->events.push_back({id, 1, start[id], end[id]});
        if (b >= 0) {
          for (NodeId m : buckets.members[b]) end[m] = end[id];  // gradients freed together
        }
        if (kind_[id] == kAllgather) {
          t->gather_deltas.push_back({now, bytes_[id]});  // allocated at issue
          gathered[ds_[id]] = {bytes_[id], 0};
          gathered_now += bytes_[id];
          r->peak_gathered_bytes = std::max(r->peak_gathered_bytes, gathered_now);
        }
        break;
      }
      case kWait: {
        const Node& n = g_.node(id);
        if (!n.inputs().empty()) t->compute_t = std::max(now, end[n.inputs()[0]]);
        start[id] = end[id] = t->compute_t;
        break;
      }
      case kRelease: {
        start[id] = end[id] = now;
        auto it = gathered.find(ds_[id]);
        if (it != gathered.end() && ++it->second.second == NUsers(g_.node(id))) {
          t->gather_deltas.push_back({now, -it->second.first});
          gathered_now -= it->second.first;
          gathered.erase(it);
        }
        break;
      }
      case kView:
      case kCompute: {
        start[id] = now;
        end[id] = now + time_[id];
        t->compute_t = end[id];
        r->compute_s += time_[id];
        if (record && time_[id] > 0) r->events.push_back({id, 0, start[id], end[id]});
        break;
      }
    }
  }
}

void Simulator::PeakMemory(absl::Span<const NodeId> order, bool record, Timeline* t,
                           SimulationResult* r) const {
  std::vector<std::pair<double, int64_t>>& deltas = t->gather_deltas;
  // Activations: allocated at start, freed when the last use (or the reduction) finishes.
  if (record) {
    for (NodeId id : order) {
      if (kind_[id] != kCompute || bytes_[id] == 0) continue;
      deltas.push_back({t->start[id], bytes_[id]});
      deltas.push_back({FreeTime(id, t->end), -bytes_[id]});
    }
    // Ties: frees first; a strict total order, so an unstable sort gives the same sequence.
    std::sort(deltas.begin(), deltas.end());
    int64_t in_use = 0;
    r->memory.reserve(deltas.size());
    for (const auto& [time, d] : deltas) {
      in_use += d;
      r->peak_memory_bytes = std::max(r->peak_memory_bytes, in_use);
      r->memory.push_back({time, in_use});
    }
    return;
  }
  // The same peak without sorting every event: with frees first at equal times, the running
  // total peaks at the end of an instant, so the peak is the largest total over instants.
  // The gather events and the activations' allocations are already in time order (both
  // follow compute time along the order); only the activations' frees need sorting, and a
  // three-way merge by time gives every instant's total.
  std::vector<std::pair<double, int64_t>> allocs, frees;
  for (NodeId id : order) {
    if (kind_[id] != kCompute || bytes_[id] == 0) continue;
    allocs.push_back({t->start[id], bytes_[id]});
    frees.push_back({FreeTime(id, t->end), -bytes_[id]});
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
    const auto& [time, d] = (*seqs[pick])[at[pick]++];
    if (time > instant) {
      r->peak_memory_bytes = std::max(r->peak_memory_bytes, in_use);
      instant = time;
    }
    in_use += d;
  }
  r->peak_memory_bytes = std::max(r->peak_memory_bytes, in_use);
}

absl::StatusOr<SimulationResult> Simulator::Run(absl::Span<const NodeId> order,
                                                const SimulationOptions& options) const {
  if (options.check_order) {
    if (absl::Status s = CheckTopologicalPermutation(g_, order); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("not a valid schedule: ", s.message()));
    }
  }
  if (!model_.Valid()) {
    return absl::InvalidArgumentError(
        "collective model needs world size >= 1, latency >= 0, bandwidth > 0");
  }
  SimulationResult r;
  Timeline t;
  t.start.assign(g_.id_bound(), 0);
  t.end.assign(g_.id_bound(), 0);
  const Residents residents = MarkResidents(order, options.resident);
  Buckets buckets = AssignBuckets(order, options.reduce_bucket_bytes);
  RunStreams(order, residents, buckets, options.record_trace, &t, &r);
  PeakMemory(order, options.record_trace, &t, &r);
  r.step_time_s = std::max(t.compute_t, t.comm_free);
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
