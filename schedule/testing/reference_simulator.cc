#include "schedule/testing/reference_simulator.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <vector>

#include "schedule/zero3_ops.h"

// How this oracle reads the places where the contract (schedule/simulator.h) leaves a choice:
//  - A collective moves its node's meta.tensor_size: an allgather's, and for a bucket the
//    sum of its reduce_grads' (what BucketReduces feeds ReduceBucketer).
//  - A node's end: compute nodes start + device_time (slowed by 1 + the model's
//    compute_slowdown for the part of it the communication stream is busy); instant nodes
//    (placeholders, get_attr, output, releases) the compute clock where the walk reaches them; a
//    wait the clock after it blocked; an allgather its collective's end (a refresh's end for
//    forward residents, the clock for backward residents, which move nothing); a reduce_grad its
//    bucket's end.
//  - compute_s sums those nodes' run times (start to end) over the nodes that run for it
//    only (a device_time on a wait or an allgather is not compute).
//  - Every allocation and free is a point (time, position in the order), compared
//    lexicographically; placeholders, residents and communication-stream events take
//    position -1, frees at the step's end position N. Held just after allocation point a:
//    the storages with alloc <= a <= free (allocations before frees at one point).
//  - Output-held storages are freed at (step end, N); gathered parameters no release frees
//    and residents are never freed.
//  - Releases are counted per ds_id; the release whose count equals its n_users frees the
//    oldest gathered (non-resident) copy of that ds_id still held and restarts the count.
//  - peak_gathered_bytes walks the schedule order (+ at an allgather, - at its freeing
//    release), as the contract words it, not the time line: at one instant an allgather
//    followed by its release still counts.
//  - An allgather whose args[0] is a counted tensor (not a shard) reads it until its
//    collective ends. A storage several reduce_grads read frees after the latest of them.
//  - With `resident`, the graph is read as MakeResident would leave it: a release of one of
//    those ds_ids reads nothing (its users, which read the storage it hands on, still do).
//  - Host copies (offload, reload) run on a third clock in issue order; a host copy's point
//    is the later of (its end, -1) and (its issue, its position).
//  - A gathered parameter follows the release rule alone: the output node (or any other
//    reader) reading it does not hold it.
namespace overlap {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

bool IsCall(const Node& n) {
  return n.op() == Op::kCallFunction || n.op() == Op::kCallMethod || n.op() == Op::kCallModule;
}
// Whether `n` runs on the compute stream for its device_time.
bool TakesComputeTime(const Node& n) {
  return IsCall(n) && !IsAllgather(n) && !IsWait(n) && !IsRelease(n) && !IsReduce(n) &&
         !IsOffload(n) && !IsReload(n) && !IsWaitReload(n) && !IsWaitOffload(n) && !IsWaitReduce(n);
}
// The node owning the storage `id`'s result lives in (kNoNode for none): an owned tuple
// element (OwnedTupleElements) owns its own.
NodeId RootOf(const Graph& g, NodeId id, const std::vector<char>& owned) {
  while (id != kNoNode && HandsOnStorage(g.node(id)) && !owned[id]) id = HandedOnFrom(g.node(id));
  return id;
}

using Point = std::pair<double, int64_t>;  // (time, position in the order)
const Point kNeverFreed = {kNever, 0};

struct Storage {
  Point alloc;
  Point free;
  int64_t bytes;
};

// What the phases share: the inputs, each node's position and stream times, and the figures
// as the phases fill them in.
struct Walk {
  Walk(const Graph& g, absl::Span<const NodeId> order, const CollectiveModel& model,
       absl::Span<const int64_t> resident)
      : g(g),
        order(order),
        model(model),
        resident(resident),
        pos(g.id_bound(), -1),
        start(g.id_bound(), 0),
        end(g.id_bound(), 0),
        issue(g.id_bound(), 0) {
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  }

  // Whether the ds_id `ds` is simulated resident (the `resident` option).
  bool InResident(int64_t ds) const {
    return std::find(resident.begin(), resident.end(), ds) != resident.end();
  }
  // Whether allgather `ag` holds a resident parameter (persistent, or by the option).
  bool IsResident(const Node& ag) const {
    return IsPersistentAllgather(ag) || InResident(DsId(ag));
  }
  // A host copy's point: the later of its completion (position -1) and its issue.
  Point HostPoint(NodeId id) const {
    return std::max(Point{end[id], -1}, Point{issue[id], pos[id]});
  }

  const Graph& g;
  absl::Span<const NodeId> order;
  const CollectiveModel& model;
  absl::Span<const int64_t> resident;
  std::vector<int> pos;
  std::vector<double> start, end, issue;
  ReferenceSimulation r;
};

// (1a) Refreshes of forward residents run first on the communication stream, in schedule
// order; returns when that stream is next free.
double RefreshForwardResidents(Walk& w) {
  double comm = 0;
  for (NodeId id : w.order) {
    const Node& x = w.g.node(id);
    if (!IsAllgather(x) || !w.IsResident(x) || InBackwardGraph(x)) continue;
    const double cost = w.model.Allgather(SizeOf(x));
    w.start[id] = comm;
    w.end[id] = comm + cost;
    comm = w.end[id];
    w.r.comm_s += cost;
  }
  return comm;
}

// (1b) Each reduce_grad's bucket, by node id; -1 is a collective of its own.
std::vector<int64_t> ReduceBuckets(const Walk& w, int64_t reduce_bucket_bytes) {
  std::vector<int64_t> bucket(w.g.id_bound(), -1);
  ReduceBucketer bucketer(reduce_bucket_bytes > 0 ? reduce_bucket_bytes : 1);
  for (NodeId id : w.order) {
    const Node& x = w.g.node(id);
    if (!IsReduce(x)) continue;
    bucket[id] = reduce_bucket_bytes > 0 ? bucketer.Add(SizeOf(x)) : ReduceBucket(x);
  }
  return bucket;
}

// The members of reduce_grad `red`'s bucket, in schedule order.
std::vector<NodeId> BucketMembers(const Walk& w, const std::vector<int64_t>& bucket, NodeId red) {
  std::vector<NodeId> m;
  for (NodeId id : w.order) {
    if (id == red || (IsReduce(w.g.node(id)) && bucket[red] != -1 && bucket[id] == bucket[red])) {
      m.push_back(id);
    }
  }
  return m;
}

// The node a wait's args[0] refers to, or kNoNode.
NodeId WaitedOn(const Node& x) {
  return x.args().empty() || !x.args()[0].is_ref() ? kNoNode : x.args()[0].as_ref();
}

// The compute clock after wait `x` at clock `cpu`: the end of what it waits for, when later.
double AfterWait(const Walk& w, const Node& x, double cpu) {
  const NodeId on = WaitedOn(x);
  if (on == kNoNode) return cpu;
  const Node& y = w.g.node(on);
  bool waits = false;
  if (IsWait(x)) {
    // A backward resident's end is the clock where it stood: no wait.
    waits = IsAllgather(y);
  } else if (IsWaitReduce(x)) {
    // Its bucket's collective's end once issued (0 until then: no wait).
    waits = IsReduce(y);
  } else if (IsWaitReload(x) || IsWaitOffload(x)) {
    waits = IsReload(y) || IsOffload(y);
  }
  return waits ? std::max(cpu, w.end[on]) : cpu;
}

// Whether compute goes on after position k of the order: scanning on, a node taking compute
// time comes before any wait.
bool ComputeGoesOnAfter(const Walk& w, size_t k) {
  for (size_t j = k + 1; j < w.order.size(); ++j) {
    const Node& y = w.g.node(w.order[j]);
    if (IsWait(y) || IsWaitReduce(y) || IsWaitReload(y) || IsWaitOffload(y)) return false;
    if (TakesComputeTime(y) && TimeOf(y) > 0) return true;
  }
  return false;
}

// (1c) The compute, communication and host streams, walking the order; then the time figures.
void RunStreams(Walk& w, const std::vector<int64_t>& bucket, double comm) {
  double cpu = 0;   // the compute stream's clock
  double host = 0;  // when the host link is next free
  // The extra of a collective costing `cost` issued at position k at clock cpu: woken
  // beside compute (a collective that costs nothing moves nothing and wakes nothing).
  const auto wake = [&](size_t k, double cost) {
    return cost > 0 && cpu >= comm && ComputeGoesOnAfter(w, k) ? w.model.busy_start_s : 0.0;
  };
  for (size_t k = 0; k < w.order.size(); ++k) {
    const NodeId id = w.order[k];
    const Node& x = w.g.node(id);
    if (IsOffload(x) || IsReload(x)) {
      w.issue[id] = cpu;
      const double cost = w.model.HostCopy(SizeOf(x));
      w.start[id] = std::max(cpu, host);
      w.end[id] = w.start[id] + cost;
      host = w.end[id];
      w.r.host_s += cost;
      continue;
    }
    if (IsAllgather(x)) {
      w.issue[id] = cpu;
      if (w.IsResident(x)) {
        w.issue[id] = 0;
        if (InBackwardGraph(x)) w.start[id] = w.end[id] = cpu;  // already there: no communication
        continue;                                               // forward: refreshed above
      }
      const double moved = w.model.Allgather(SizeOf(x));
      const double cost = moved + wake(k, moved);
      w.start[id] = std::max(cpu, comm);
      w.end[id] = w.start[id] + cost;
      comm = w.end[id];
      w.r.comm_s += cost;
      continue;
    }
    w.start[id] = cpu;
    if (IsWait(x) || IsWaitReduce(x) || IsWaitReload(x) || IsWaitOffload(x)) {
      cpu = AfterWait(w, x, cpu);
    } else if (IsReduce(x)) {
      const std::vector<NodeId> m = BucketMembers(w, bucket, id);
      if (m.back() == id) {  // the last member issues the bucket's one collective
        int64_t bytes = 0;
        for (NodeId red : m) bytes += SizeOf(w.g.node(red));
        const double moved = w.model.ReduceScatter(bytes);
        const double cost = moved + wake(k, moved);
        const double done = std::max(cpu, comm) + cost;
        comm = done;
        w.r.comm_s += cost;
        for (NodeId red : m) w.end[red] = done;
      }
      continue;  // end set by the bucket's collective
    } else if (TakesComputeTime(x)) {
      // Slowed while a collective is in flight (the stream is busy until `comm`), by the
      // same amount of work at the slowed rate for the overlap.
      double done = cpu + TimeOf(x);
      const double slow = 1 + w.model.compute_slowdown;
      if (slow > 1 && comm > cpu && TimeOf(x) > 0) {
        const double work_in_overlap = (comm - cpu) / slow;
        done = TimeOf(x) <= work_in_overlap ? cpu + TimeOf(x) * slow
                                            : comm + (TimeOf(x) - work_in_overlap);
      }
      w.r.compute_s += done - cpu;
      cpu = done;
    }
    w.end[id] = cpu;
  }
  w.r.step_time_s = std::max({cpu, comm, host});
  w.r.exposed_comm_s = w.r.step_time_s - w.r.compute_s;
  w.r.lower_bound_s = std::max({w.r.compute_s, w.r.comm_s, w.r.host_s});
}

// (2) + (3) The storage of tensor `id` (a tensor owner: a call or a counted input), with
// `root` mapping each node to the node owning its storage.
Storage TensorStorage(const Walk& w, NodeId id, bool input, const std::vector<NodeId>& root,
                      const std::vector<char>& owned) {
  const Graph& g = w.g;
  const Node& x = g.node(id);
  bool any_reader = false, output_reads = false, reduced = false;
  Point last;
  for (NodeId m : w.order) {
    if (root[m] != id) continue;
    for (NodeId u : g.node(m).users()) {
      const Node& user = g.node(u);
      // A release of a ds_id simulated resident is erased (MakeResident): no reader.
      if (IsRelease(user) && w.InResident(DsId(user))) continue;
      if (user.op() == Op::kOutput) {
        output_reads = true;
        continue;
      }
      if (IsReduce(user)) reduced = true;
      // A reader on the communication stream ends at its collective's completion.
      const Point p = IsOffload(user) || IsReload(user)
                          ? w.HostPoint(u)
                          : Point{w.end[u], IsReduce(user) || IsAllgather(user) ? -1 : w.pos[u]};
      last = any_reader ? std::max(last, p) : p;
      any_reader = true;
    }
  }
  const Point own = IsReload(x) ? w.HostPoint(id) : Point{w.end[id], w.pos[id]};
  Point free = !any_reader ? own : IsReload(x) ? std::max(last, own) : last;
  if (output_reads && !reduced) free = {w.r.step_time_s, static_cast<int64_t>(w.order.size())};
  // An owned element is allocated when its tuple's node starts; the tuple keeps the rest.
  const NodeId made_by = owned[id] ? HandedOnFrom(x) : id;
  bool tuple = false;
  for (NodeId u : x.users()) tuple |= owned[u] != 0;
  const int64_t bytes = tuple ? TupleRemainderBytes(g, id, owned) : SizeOf(x);
  // A reload is allocated when it is issued.
  const double made_at = IsReload(x) ? w.issue[id] : w.start[made_by];
  return {input ? Point{0.0, -1} : Point{made_at, w.pos[made_by]}, free, bytes};
}

// The storages of tensors, in schedule order of their owners.
std::vector<Storage> TensorStorages(const Walk& w) {
  const Graph& g = w.g;
  const std::vector<char> owned = OwnedTupleElements(g);
  std::vector<NodeId> root(g.id_bound(), kNoNode);
  for (NodeId id : w.order) root[id] = RootOf(g, id, owned);
  std::vector<Storage> storages;
  for (NodeId id : w.order) {
    const Node& x = g.node(id);
    if (IsAllgather(x) || IsReduce(x) || IsOffload(x)) continue;  // not a tensor owner
    if (HandsOnStorage(x) && !owned[id]) continue;
    const bool input =
        x.op() == Op::kPlaceholder && !IsParameterShard(g, id) && !IsHostTensor(g, id);
    if (!IsCall(x) && !input) continue;  // shards, get_attr, output: nothing counted
    storages.push_back(TensorStorage(w, id, input, root, owned));
  }
  return storages;
}

// Gathered parameters' storages, appended to *storages; sets peak_gathered_bytes, walking
// the order.
void AddGatheredStorages(Walk& w, std::vector<Storage>* storages) {
  const Graph& g = w.g;
  int64_t gathered = 0;
  for (NodeId id : w.order) {
    const Node& x = g.node(id);
    if (IsAllgather(x) && w.IsResident(x)) gathered += SizeOf(x);
  }
  w.r.peak_gathered_bytes = gathered;
  std::vector<Point> gather_free(g.id_bound(), kNeverFreed);
  std::map<int64_t, int64_t> releases;         // per ds_id, since the last free
  std::map<int64_t, std::deque<NodeId>> held;  // per ds_id, gathered copies in issue order
  for (NodeId id : w.order) {
    const Node& x = g.node(id);
    if (IsAllgather(x) && !w.IsResident(x)) {
      held[DsId(x)].push_back(id);
      gathered += SizeOf(x);
      w.r.peak_gathered_bytes = std::max(w.r.peak_gathered_bytes, gathered);
    } else if (IsRelease(x) && ++releases[DsId(x)] == NUsers(x)) {
      releases[DsId(x)] = 0;
      std::deque<NodeId>& copies = held[DsId(x)];
      if (copies.empty()) continue;
      gather_free[copies.front()] = {w.end[id], w.pos[id]};
      gathered -= SizeOf(g.node(copies.front()));
      copies.pop_front();
    }
  }
  for (NodeId id : w.order) {
    const Node& x = g.node(id);
    if (!IsAllgather(x)) continue;
    const Point alloc = w.IsResident(x) ? Point{0.0, -1} : Point{w.issue[id], w.pos[id]};
    storages->push_back({alloc, gather_free[id], SizeOf(x)});
  }
}

// (4) The peak: held bytes change upward only at allocations, so try each allocation point
// a, holding the storages with alloc <= a <= free.
int64_t PeakOf(const std::vector<Storage>& storages) {
  int64_t peak = 0;
  for (const Storage& at : storages) {
    int64_t total = 0;
    for (const Storage& s : storages) {
      if (s.alloc <= at.alloc && at.alloc <= s.free) total += s.bytes;
    }
    peak = std::max(peak, total);
  }
  return peak;
}

}  // namespace

ReferenceSimulation ReferenceSimulate(const Graph& g, absl::Span<const NodeId> order,
                                      const CollectiveModel& model,
                                      absl::Span<const int64_t> resident,
                                      int64_t reduce_bucket_bytes) {
  Walk w(g, order, model, resident);
  const double comm = RefreshForwardResidents(w);
  RunStreams(w, ReduceBuckets(w, reduce_bucket_bytes), comm);
  std::vector<Storage> storages = TensorStorages(w);
  AddGatheredStorages(w, &storages);
  w.r.peak_memory_bytes = PeakOf(storages);
  return w.r;
}

}  // namespace overlap
