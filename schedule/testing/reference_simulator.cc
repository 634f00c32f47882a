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
//  - A node's end: compute nodes start + device_time; instant nodes (placeholders, get_attr,
//    output, releases) the compute clock where the walk reaches them; a wait the clock after
//    it blocked; an allgather its collective's end (a refresh's end for forward residents,
//    the clock for backward residents, which move nothing); a reduce_grad its bucket's end.
//  - compute_s sums device_time over the nodes that run for it only (a device_time on a wait
//    or an allgather is not compute).
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

}  // namespace

ReferenceSimulation ReferenceSimulate(const Graph& g, absl::Span<const NodeId> order,
                                      const CollectiveModel& model,
                                      absl::Span<const int64_t> resident,
                                      int64_t reduce_bucket_bytes) {
  const size_t n = static_cast<size_t>(g.id_bound());
  auto is_resident = [&](const Node& ag) {
    return IsPersistentAllgather(ag) ||
           std::find(resident.begin(), resident.end(), DsId(ag)) != resident.end();
  };
  std::vector<int> pos(n, -1);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  ReferenceSimulation r;

  // (1) The two streams. Refreshes of forward residents go first, in schedule order.
  std::vector<double> start(n, 0), end(n, 0), issue(n, 0);
  double comm = 0;  // when the communication stream is next free
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (!IsAllgather(x) || !is_resident(x) || InBackwardGraph(x)) continue;
    const double cost = model.Allgather(SizeOf(x));
    start[id] = comm;
    end[id] = comm + cost;
    comm = end[id];
    r.comm_s += cost;
  }
  // Reduce buckets: -1 is a collective of its own.
  std::vector<int64_t> bucket(n, -1);
  ReduceBucketer bucketer(reduce_bucket_bytes > 0 ? reduce_bucket_bytes : 1);
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (!IsReduce(x)) continue;
    bucket[id] = reduce_bucket_bytes > 0 ? bucketer.Add(SizeOf(x)) : ReduceBucket(x);
  }
  auto members = [&](NodeId red) {  // red's bucket, in schedule order
    std::vector<NodeId> m;
    for (NodeId id : order) {
      if (id == red || (IsReduce(g.node(id)) && bucket[red] != -1 && bucket[id] == bucket[red])) {
        m.push_back(id);
      }
    }
    return m;
  };
  double cpu = 0;   // the compute stream's clock
  double host = 0;  // when the host link is next free
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (IsOffload(x) || IsReload(x)) {
      issue[id] = cpu;
      const double cost = model.HostCopy(SizeOf(x));
      start[id] = std::max(cpu, host);
      end[id] = start[id] + cost;
      host = end[id];
      r.host_s += cost;
      continue;
    }
    if (IsAllgather(x)) {
      issue[id] = cpu;
      if (is_resident(x)) {
        issue[id] = 0;
        if (InBackwardGraph(x)) start[id] = end[id] = cpu;  // already there: no communication
        continue;                                           // forward: refreshed above
      }
      const double cost = model.Allgather(SizeOf(x));
      start[id] = std::max(cpu, comm);
      end[id] = start[id] + cost;
      comm = end[id];
      r.comm_s += cost;
      continue;
    }
    start[id] = cpu;
    if (IsWait(x)) {
      const NodeId ag = x.args().empty() || !x.args()[0].is_ref() ? kNoNode : x.args()[0].as_ref();
      // A backward resident's end is the clock where it stood: no wait.
      if (ag != kNoNode && IsAllgather(g.node(ag))) cpu = std::max(cpu, end[ag]);
    } else if (IsWaitReduce(x)) {
      // Its bucket's collective's end once issued (0 until then: no wait).
      const NodeId red = x.args().empty() || !x.args()[0].is_ref() ? kNoNode : x.args()[0].as_ref();
      if (red != kNoNode && IsReduce(g.node(red))) cpu = std::max(cpu, end[red]);
    } else if (IsWaitReload(x) || IsWaitOffload(x)) {
      const NodeId rl = x.args().empty() || !x.args()[0].is_ref() ? kNoNode : x.args()[0].as_ref();
      if (rl != kNoNode && (IsReload(g.node(rl)) || IsOffload(g.node(rl)))) {
        cpu = std::max(cpu, end[rl]);
      }
    } else if (IsReduce(x)) {
      const std::vector<NodeId> m = members(id);
      if (m.back() == id) {  // the last member issues the bucket's one collective
        int64_t bytes = 0;
        for (NodeId red : m) bytes += SizeOf(g.node(red));
        const double cost = model.ReduceScatter(bytes);
        const double done = std::max(cpu, comm) + cost;
        comm = done;
        r.comm_s += cost;
        for (NodeId red : m) end[red] = done;
      }
      continue;  // end set by the bucket's collective
    } else if (TakesComputeTime(x)) {
      cpu += TimeOf(x);
      r.compute_s += TimeOf(x);
    }
    end[id] = cpu;
  }
  r.step_time_s = std::max({cpu, comm, host});
  r.exposed_comm_s = r.step_time_s - r.compute_s;
  r.lower_bound_s = std::max({r.compute_s, r.comm_s, r.host_s});
  // A host copy's point: the later of its completion (position -1) and its issue.
  auto host_point = [&](NodeId id) {
    return std::max(Point{end[id], -1}, Point{issue[id], pos[id]});
  };

  // (2) + (3) Storages of tensors: owners, readers, frees.
  const std::vector<char> owned = OwnedTupleElements(g);
  std::vector<NodeId> root(n, kNoNode);
  for (NodeId id : order) root[id] = RootOf(g, id, owned);
  std::vector<Storage> storages;
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (IsAllgather(x) || IsReduce(x) || IsOffload(x)) continue;  // not a tensor owner
    if (HandsOnStorage(x) && !owned[id]) continue;
    const bool input =
        x.op() == Op::kPlaceholder && !IsParameterShard(g, id) && !IsHostTensor(g, id);
    if (!IsCall(x) && !input) continue;  // shards, get_attr, output: nothing counted
    bool any_reader = false, output_reads = false, reduced = false;
    Point last;
    for (NodeId m : order) {
      if (root[m] != id) continue;
      for (NodeId u : g.node(m).users()) {
        const Node& user = g.node(u);
        // A release of a ds_id simulated resident is erased (MakeResident): no reader.
        if (IsRelease(user) &&
            std::find(resident.begin(), resident.end(), DsId(user)) != resident.end()) {
          continue;
        }
        if (user.op() == Op::kOutput) {
          output_reads = true;
          continue;
        }
        if (IsReduce(user)) reduced = true;
        // A reader on the communication stream ends at its collective's completion.
        const Point p = IsOffload(user) || IsReload(user)
                            ? host_point(u)
                            : Point{end[u], IsReduce(user) || IsAllgather(user) ? -1 : pos[u]};
        last = any_reader ? std::max(last, p) : p;
        any_reader = true;
      }
    }
    const Point own = IsReload(x) ? host_point(id) : Point{end[id], pos[id]};
    Point free = !any_reader ? own : IsReload(x) ? std::max(last, own) : last;
    if (output_reads && !reduced) free = {r.step_time_s, static_cast<int64_t>(order.size())};
    // An owned element is allocated when its tuple's node starts; the tuple keeps the rest.
    const NodeId made_by = owned[id] ? HandedOnFrom(x) : id;
    bool tuple = false;
    for (NodeId u : x.users()) tuple |= owned[u] != 0;
    const int64_t bytes = tuple ? TupleRemainderBytes(g, id, owned) : SizeOf(x);
    // A reload is allocated when it is issued.
    const double made_at = IsReload(x) ? issue[id] : start[made_by];
    storages.push_back({input ? Point{0.0, -1} : Point{made_at, pos[made_by]}, free, bytes});
  }

  // Gathered parameters, with peak_gathered_bytes walking the order.
  int64_t gathered = 0;
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (IsAllgather(x) && is_resident(x)) gathered += SizeOf(x);
  }
  r.peak_gathered_bytes = gathered;
  std::vector<Point> gather_free(n, kNeverFreed);
  std::map<int64_t, int64_t> releases;         // per ds_id, since the last free
  std::map<int64_t, std::deque<NodeId>> held;  // per ds_id, gathered copies in issue order
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (IsAllgather(x) && !is_resident(x)) {
      held[DsId(x)].push_back(id);
      gathered += SizeOf(x);
      r.peak_gathered_bytes = std::max(r.peak_gathered_bytes, gathered);
    } else if (IsRelease(x) && ++releases[DsId(x)] == NUsers(x)) {
      releases[DsId(x)] = 0;
      std::deque<NodeId>& copies = held[DsId(x)];
      if (copies.empty()) continue;
      gather_free[copies.front()] = {end[id], pos[id]};
      gathered -= SizeOf(g.node(copies.front()));
      copies.pop_front();
    }
  }
  for (NodeId id : order) {
    const Node& x = g.node(id);
    if (!IsAllgather(x)) continue;
    const Point alloc = is_resident(x) ? Point{0.0, -1} : Point{issue[id], pos[id]};
    storages.push_back({alloc, gather_free[id], SizeOf(x)});
  }

  // (4) The peak: held bytes change upward only at allocations, so try each allocation
  // point a, holding the storages with alloc <= a <= free.
  for (const Storage& at : storages) {
    int64_t total = 0;
    for (const Storage& s : storages) {
      if (s.alloc <= at.alloc && at.alloc <= s.free) total += s.bytes;
    }
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, total);
  }
  return r;
}

}  // namespace overlap
