#include "schedule/simulator.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/json_writer.h"
#include "graph/status_macros.h"
#include "graph/value_bytes.h"
#include "schedule/analysis.h"
#include "schedule/zero3_ops.h"

namespace overlap {

Simulator::Simulator(const Graph& g, const CollectiveModel& model)
    : g_(g),
      model_(model),
      kind_(g.id_bound(), kCompute),
      bytes_(g.id_bound(), 0),
      time_(g.id_bound(), 0),
      ds_(g.id_bound(), -1),
      persistent_(g.id_bound(), 0),
      backward_(g.id_bound(), 0),
      bucket_(g.id_bound(), -1),
      slot_(g.id_bound(), -1),
      at_start_(g.id_bound(), 0),
      held_(g.id_bound(), 0),
      allocated_with_(g.id_bound(), kNoNode) {
  // Each node's storage: its own, or the one it hands on (inputs come first in graph order).
  // An owned tuple element has its own, allocated with its tuple, which keeps the rest.
  const std::vector<char> owned = OwnedTupleElements(g);
  std::vector<NodeId> root(g.id_bound(), kNoNode);
  int64_t total = 0;  // every value's bytes together, as Verify bounds them
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    // A graph Verify has not seen may hold a size that is not computable: Run refuses it.
    absl::StatusOr<int64_t> bytes = ValueBytes(n);
    if (bytes.ok() && __builtin_add_overflow(total, *bytes, &total)) {
      bytes = absl::InvalidArgumentError(absl::StrCat(
          "node \"", n.name(), "\": the sum of meta.tensor_size over the graph overflows 64 bits"));
    }
    if (!bytes.ok() && sizes_.ok()) sizes_ = bytes.status();
    bytes_[id] = bytes.value_or(0);
    ds_[id] = DsId(n);
    persistent_[id] = IsPersistentAllgather(n);
    backward_[id] = InBackwardGraph(n);
    time_[id] = TimeOf(n);
    root[id] = id;
    if (HandsOnStorage(n) && !owned[id] && HandedOnFrom(n) != kNoNode) {
      root[id] = root[HandedOnFrom(n)];
    }
    bool counted = false;
    if (n.op() == Op::kPlaceholder) {
      kind_[id] = kInstant;
      counted = !IsParameterShard(g, id) && !IsHostTensor(g, id);
      at_start_[id] = counted;
      time_[id] = 0;
    } else if (n.op() == Op::kOutput || n.op() == Op::kGetAttr) {
      kind_[id] = kInstant;
      time_[id] = 0;
    } else if (IsAllgather(n)) {
      kind_[id] = kAllgather;
      time_[id] = model.Allgather(bytes_[id]);
    } else if (IsReduce(n)) {
      kind_[id] = kReduce;
      bucket_[id] = ReduceBucket(n);
      time_[id] = model.ReduceScatter(bytes_[id]);
    } else if (IsOffload(n)) {  // its result is host memory: no storage
      kind_[id] = kOffload;
      time_[id] = model.HostCopy(bytes_[id]);
    } else if (IsReload(n)) {
      kind_[id] = kReload;
      time_[id] = model.HostCopy(bytes_[id]);
      counted = true;
    } else if (IsWait(n) || IsWaitReload(n) || IsWaitOffload(n) || IsWaitReduce(n)) {
      kind_[id] = kWait;
      time_[id] = 0;
    } else if (IsRelease(n)) {
      kind_[id] = kRelease;
      time_[id] = 0;
    } else if (SharesInputStorage(n)) {
      kind_[id] = kView;
      if (owned[id]) {
        counted = true;
        allocated_with_[id] = HandedOnFrom(n);
      }
    } else {
      counted = true;
      bool tuple = false;
      for (NodeId u : n.users()) tuple |= owned[u] != 0;
      if (tuple) bytes_[id] = TupleRemainderBytes(g, id, owned);
    }
    if (counted && bytes_[id] > 0) {
      slot_[id] = static_cast<int32_t>(storages_.size());
      storages_.push_back(id);
    }
  }
  // Readers per storage, as compressed rows: count, then fill.
  const size_t S = storages_.size();
  first_reader_.assign(S + 1, 0);
  first_reduce_.assign(S + 1, 0);
  auto for_each_read = [&](auto&& f) {
    for (NodeId u : g.order()) {
      const Node& user = g.node(u);
      for (NodeId in : user.inputs()) {
        const int32_t s = slot_[root[in]];
        if (s >= 0) f(u, user, s);
      }
    }
  };
  for_each_read([&](NodeId, const Node& user, int32_t s) {
    if (user.op() == Op::kOutput) {
      held_[storages_[s]] = 1;
    } else if (IsReduce(user)) {
      ++first_reduce_[s + 1];
    } else {
      ++first_reader_[s + 1];
    }
  });
  for (size_t s = 0; s < S; ++s) {
    first_reader_[s + 1] += first_reader_[s];
    first_reduce_[s + 1] += first_reduce_[s];
  }
  readers_.resize(first_reader_[S]);
  reduces_.resize(first_reduce_[S]);
  std::vector<int64_t> next_reader(first_reader_.begin(), first_reader_.end() - 1);
  std::vector<int64_t> next_reduce(first_reduce_.begin(), first_reduce_.end() - 1);
  for_each_read([&](NodeId u, const Node& user, int32_t s) {
    if (user.op() == Op::kOutput) return;
    if (IsReduce(user)) {
      reduces_[next_reduce[s]++] = u;
    } else {
      readers_[next_reader[s]++] = u;
    }
  });
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

// One memory change: at `time`, at position `pos` of the order (-1: placed by no compute
// node; N: after everything), +bytes or -bytes. Sorted by (time, pos, allocation first).
struct MemEvent {
  double time;
  int64_t pos;
  int64_t delta;
  bool operator<(const MemEvent& o) const {
    if (time != o.time) return time < o.time;
    if (pos != o.pos) return pos < o.pos;
    return (delta < 0) < (o.delta < 0);
  }
};

// The streams' state while walking an order.
struct Simulator::Timeline {
  std::vector<double> start, end;
  std::vector<int64_t> pos;  // position in the order
  double compute_t = 0;      // when compute is free
  double comm_free = 0;      // when the communication stream is free
  double host_free = 0;      // when the host link is free
  // By position: whether compute goes on after that node (the next node taking compute
  // time or waiting takes compute time). Empty when the model's busy_start_s is 0.
  std::vector<char> busy_after;
  // Gathered-parameter memory changes, in (time, pos) order.
  std::vector<MemEvent> gather_deltas;
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
  // Gathered parameters per ds_id: the copies held (bytes, oldest first) and the releases
  // counted since the last free.
  struct Held {
    std::vector<int64_t> copies;
    size_t oldest = 0;
    int64_t releases = 0;
  };
  absl::flat_hash_map<int64_t, Held> gathered;
  int64_t gathered_now = 0;
  // Resident parameters are held for the whole step, from time 0; in a forward graph each
  // is refreshed at time 0, ahead of every other collective.
  std::vector<char> refresh(g_.id_bound(), 0);
  for (NodeId id : order) {
    if (kind_[id] != kAllgather || !residents.Contains(ds_[id])) continue;
    t->gather_deltas.push_back({0.0, -1, bytes_[id]});
    gathered_now += bytes_[id];
    if (backward_[id]) continue;
    refresh[id] = 1;
    start[id] = t->comm_free;
    end[id] = start[id] + time_[id];
    t->comm_free = end[id];
    r->comm_s += time_[id];
    if (record) r->events.push_back({id, 1, start[id], end[id]});
  }
  r->peak_gathered_bytes = gathered_now;
  int64_t i = 0;
  if (record) r->reached_s.reserve(order.size());
  for (NodeId id : order) {
    t->pos[id] = i++;
    const double now = t->compute_t;
    if (record) r->reached_s.push_back(now);
    if ((kind_[id] == kAllgather || kind_[id] == kRelease) && residents.Contains(ds_[id])) {
      // Already gathered (a refresh keeps the times set above); nothing to free.
      if (!refresh[id]) start[id] = end[id] = now;
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
        if (duration > 0 && now >= t->comm_free && !t->busy_after.empty() &&
            t->busy_after[t->pos[id]]) {
          duration += model_.busy_start_s;  // the communication thread woken beside compute
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
          t->gather_deltas.push_back({now, t->pos[id], bytes_[id]});  // allocated at issue
          gathered[ds_[id]].copies.push_back(bytes_[id]);
          gathered_now += bytes_[id];
          r->peak_gathered_bytes = std::max(r->peak_gathered_bytes, gathered_now);
        }
        break;
      }
      case kOffload:
      case kReload: {  // the host link: issued here (start), copied when the link is free
        start[id] = now;
        const double begin = std::max(now, t->host_free);
        end[id] = begin + time_[id];
        t->host_free = end[id];
        r->host_s += time_[id];
        if (record) r->events.push_back({id, 2, begin, end[id]});
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
        if (it == gathered.end() || ++it->second.releases != NUsers(g_.node(id))) break;
        Held& h = it->second;
        h.releases = 0;
        if (h.oldest == h.copies.size()) break;  // nothing gathered to free
        const int64_t bytes = h.copies[h.oldest++];
        t->gather_deltas.push_back({now, t->pos[id], -bytes});
        gathered_now -= bytes;
        break;
      }
      case kView:
      case kCompute: {
        start[id] = now;
        // Every collective issued so far runs back to back until comm_free.
        end[id] = model_.ComputeEnd(now, time_[id], t->comm_free);
        t->compute_t = end[id];
        r->compute_s += end[id] - now;
        if (record && time_[id] > 0) r->events.push_back({id, 0, start[id], end[id]});
        break;
      }
    }
  }
}

void Simulator::PeakMemory(absl::Span<const NodeId> order, const Residents& erased, bool record,
                           double step_end, Timeline* t, SimulationResult* r) const {
  std::vector<MemEvent>& gathers = t->gather_deltas;
  // Storages: allocated when their node starts (placeholders at 0), freed by FreeAt.
  std::vector<MemEvent> allocs, frees;
  allocs.reserve(storages_.size());
  frees.reserve(storages_.size());
  for (NodeId id : storages_) {
    if (at_start_[id]) allocs.push_back({0.0, -1, bytes_[id]});
  }
  // An owned tuple element is allocated with its tuple: pushed when the walk reaches the
  // tuple, so the allocations stay in order.
  std::vector<std::vector<NodeId>> elements;
  for (NodeId id : storages_) {
    const NodeId with = allocated_with_[id];
    if (with == kNoNode) continue;
    if (elements.empty()) elements.resize(g_.id_bound());
    elements[with].push_back(id);
  }
  for (NodeId id : order) {
    if (slot_[id] >= 0 && !at_start_[id] && allocated_with_[id] == kNoNode) {
      allocs.push_back({t->start[id], t->pos[id], bytes_[id]});
    }
    if (!elements.empty()) {
      for (NodeId e : elements[id]) allocs.push_back({t->start[id], t->pos[id], bytes_[e]});
    }
  }
  const int64_t n = static_cast<int64_t>(order.size());
  for (NodeId id : storages_) {
    const auto [time, pos] = FreeAt(id, erased, *t, step_end, n);
    frees.push_back({time, pos, -bytes_[id]});
  }
  // The gather changes and the allocations are already in order (both follow the walk);
  // only the frees need sorting, then a three-way merge visits every change in order.
  std::sort(frees.begin(), frees.end());
  const std::vector<MemEvent>* seqs[3] = {&gathers, &allocs, &frees};
  size_t at[3] = {0, 0, 0};
  int64_t in_use = 0;
  if (record) r->memory.reserve(gathers.size() + allocs.size() + frees.size());
  while (true) {
    int pick = -1;
    for (int q = 0; q < 3; ++q) {
      if (at[q] < seqs[q]->size() && (pick < 0 || (*seqs[q])[at[q]] < (*seqs[pick])[at[pick]])) {
        pick = q;
      }
    }
    if (pick < 0) break;
    const MemEvent& e = (*seqs[pick])[at[pick]++];
    in_use += e.delta;
    r->peak_memory_bytes = std::max(r->peak_memory_bytes, in_use);
    if (record) r->memory.push_back({e.time, in_use});
  }
}

absl::StatusOr<SimulationResult> Simulator::Run(absl::Span<const NodeId> order,
                                                const SimulationOptions& options) const {
  OVERLAP_RETURN_IF_ERROR(sizes_);
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
  t.pos.assign(g_.id_bound(), -1);
  const Residents residents = MarkResidents(order, options.resident);
  // The releases MakeResident would erase: a reader of nothing (their users read args[0]).
  Residents erased(g_.params().size());
  for (int64_t ds : options.resident) erased.Add(ds);
  Buckets buckets = AssignBuckets(order, options.reduce_bucket_bytes);
  if (model_.busy_start_s > 0) {
    t.busy_after.assign(order.size(), 0);
    bool computes = false;  // whether compute goes on after the position being visited
    for (size_t i = order.size(); i-- > 0;) {
      t.busy_after[i] = computes;
      const NodeId id = order[i];
      if (kind_[id] == kWait) {
        computes = false;
      } else if ((kind_[id] == kCompute || kind_[id] == kView) && time_[id] > 0) {
        computes = true;
      }
    }
  }
  RunStreams(order, residents, buckets, options.record_trace, &t, &r);
  r.step_time_s = std::max({t.compute_t, t.comm_free, t.host_free});
  PeakMemory(order, erased, options.record_trace, r.step_time_s, &t, &r);
  r.exposed_comm_s = std::max(0.0, r.step_time_s - r.compute_s);
  r.lower_bound_s = std::max({r.compute_s, r.comm_s, r.host_s});
  return r;
}

std::pair<double, int64_t> Simulator::FreeAt(NodeId id, const Residents& erased, const Timeline& t,
                                             double step_end, int64_t n) const {
  // A reader on the communication stream frees at its collective's completion (position -1);
  // a host copy at the later of its completion and its issue (its position).
  auto at = [&](NodeId u) -> std::pair<double, int64_t> {
    if (kind_[u] == kOffload || kind_[u] == kReload) {
      return std::max(std::pair<double, int64_t>{t.end[u], -1},
                      std::pair<double, int64_t>{t.start[u], t.pos[u]});
    }
    const bool comm = kind_[u] == kAllgather || kind_[u] == kReduce;
    return {t.end[u], comm ? -1 : t.pos[u]};
  };
  const int32_t s = slot_[id];
  std::pair<double, int64_t> free_at = at(id);
  for (int64_t k = first_reader_[s]; k < first_reader_[s + 1]; ++k) {
    const NodeId u = readers_[k];
    if (kind_[u] == kRelease && erased.Contains(ds_[u])) continue;
    free_at = std::max(free_at, at(u));
  }
  if (first_reduce_[s] < first_reduce_[s + 1]) {  // reduced: dies with the reduction
    for (int64_t k = first_reduce_[s]; k < first_reduce_[s + 1]; ++k) {
      free_at = std::max(free_at, at(reduces_[k]));
    }
  } else if (held_[id]) {
    free_at = {step_end, n};
  }
  return free_at;
}

absl::StatusOr<SimulationResult> Simulate(const Graph& g, absl::Span<const NodeId> order,
                                          const CollectiveModel& model) {
  return Simulator(g, model).Run(order);
}

absl::StatusOr<SimulationResult> SimulateAlone(const Graph& g, absl::Span<const NodeId> order) {
  CollectiveModel one;
  one.world_size = 1;
  one.host_bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  SimulationOptions so;
  so.record_trace = false;
  return Simulator(g, one).Run(order, so);
}

absl::StatusOr<int64_t> LargestPeakBytes(std::initializer_list<const Graph*> graphs) {
  int64_t peak = 0;
  for (const Graph* g : graphs) {
    if (g->size() == 0) continue;
    OVERLAP_ASSIGN_OR_RETURN(const SimulationResult sim, SimulateAlone(*g, g->OrderVector()));
    peak = std::max(peak, sim.peak_memory_bytes);
  }
  return peak;
}

std::string ChromeTraceJson(absl::Span<const TracePart> parts) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out.append(
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": "
      "\"compute\"}},\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 1, "
      "\"args\": {\"name\": \"communication\"}}");
  bool host = false;
  for (const TracePart& p : parts) {
    for (const SimEvent& e : p.result->events) host |= e.stream == 2;
  }
  if (host) {
    out.append(
        ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 2, \"args\": "
        "{\"name\": \"host link\"}}");
  }
  for (const TracePart& p : parts) {
    const Graph& g = *p.graph;
    if (!p.label.empty()) {  // where this part begins, on the compute lane
      out.append(",\n{\"name\": ");
      AppendJsonString(&out, p.label);
      out.append(", \"ph\": \"i\", \"s\": \"p\", \"pid\": 0, \"tid\": 0, \"ts\": ");
      AppendJsonDouble(&out, p.offset_s * 1e6);
      out.push_back('}');
    }
    for (const SimEvent& e : p.result->events) {
      out.append(",\n{\"name\": ");
      AppendJsonString(&out, g.node(e.node).name());
      out.append(", \"cat\": ");
      AppendJsonString(&out, g.node(e.node).target());
      absl::StrAppend(&out, ", \"ph\": \"X\", \"pid\": 0, \"tid\": ", e.stream, ", \"ts\": ");
      AppendJsonDouble(&out, (p.offset_s + e.start_s) * 1e6);
      out.append(", \"dur\": ");
      AppendJsonDouble(&out, (e.end_s - e.start_s) * 1e6);
      out.push_back('}');
    }
    for (const auto& [t, bytes] : p.result->memory) {
      out.append(",\n{\"name\": \"memory\", \"ph\": \"C\", \"pid\": 0, \"ts\": ");
      AppendJsonDouble(&out, (p.offset_s + t) * 1e6);
      absl::StrAppend(&out, ", \"args\": {\"bytes\": ", bytes + p.extra_bytes, "}}");
    }
  }
  out.append("\n]}\n");
  return out;
}

std::string ChromeTraceJson(const Graph& g, const SimulationResult& r) {
  TracePart part;
  part.graph = &g;
  part.result = &r;
  return ChromeTraceJson({part});
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
