// A two-stream simulator of one training step of a scheduled ZeRO-3 graph: peak memory and
// step time under an alpha-beta model of the collectives. docs/schedule.md, "The
// simulator", states the same contract with pictures; schedule/testing/reference_simulator.h
// is a second, deliberately simple implementation of it that tests compare with this one.
//
// Time. Compute runs the nodes in schedule order on one stream, each for its
// meta.device_time (0 when absent; placeholders, get_attr, the output node, waits, releases,
// allgathers and reduce_grads take no compute time, whatever their device_time says).
// Collectives run in issue order on one communication stream: an allgather (or a
// reduce_grad's reduce-scatter) is issued when compute reaches it and starts when the
// communication stream is free; it moves its node's meta.tensor_size bytes. A wait blocks
// compute until its allgather (args[0]) has finished. The step ends when both streams have
// drained.
//
// Collectives: the ring alpha-beta CollectiveModel of graph/cost_model.h (32 ranks, 20 us,
// 50 GB/s per rank by default).
//
// Contention for the cores (both 0 by default): a compute node runs 1 + the model's
// compute_slowdown times slower for the part of it the communication stream is busy
// (CollectiveModel::ComputeEnd). A collective that starts the moment it is issued (the
// communication stream idle) takes the model's busy_start_s longer when compute goes on
// after it: when, after its issuing node (a bucket's: its last member), the next node in
// the order that takes compute time (device_time > 0) or is a wait of any kind (wait,
// wait_reduce, wait_reload, wait_offload) takes compute time. A collective queued behind
// another, one that costs nothing under the model (one rank, zero bytes), and a forward
// resident's refresh at time 0 never do. A wait for an earlier collective ends the search
// too, although it does not block (that collective is done when this one starts on an idle
// stream): the rule is decided from the order alone, and so under-charges the prefetch
// pattern "issue the next; wait for the previous; compute".
//
// The host link (activation offloading, graph/dc_ops.h): a third stream. An offload
// (dc.offload_tensor) or a reload (dc.reload_tensor) is issued when compute reaches it and
// copies its node's meta.tensor_size bytes when the link is free, in issue order, taking
// CollectiveModel::HostCopy (25 GB/s by default). A wait_reload (wait_offload) blocks
// compute until its reload (offload), args[0], has finished.
//
// A wait_reduce (a memory lever, zero3_ops.h's AddReduceWaits) blocks compute until its
// reduce_grad's collective (its bucket's) has finished; one whose collective has not been
// issued yet when compute reaches it does not block. The step ends when all three streams
// have drained.
//
// Resident parameters (selective unsharding): an allgather with kwargs {"persistent": true},
// or one whose ds_id is in SimulationOptions::resident, stands for a parameter kept gathered
// across steps. The optimizer updates its shard every step, so the full copy is refreshed
// once per step, as DeepSpeed does for persistent parameters: in a forward graph (the
// allgather's graph_id is not 1) each resident allgather is a refresh issued at time 0, in
// schedule order, on the communication stream before any other collective, and its wait
// blocks until that refresh has finished; in a backward graph (graph_id 1) the parameter is
// already there: no communication, its wait does not block. Either way its bytes are held
// for the whole step (from time 0) and its releases free nothing.
//
// Reduce-scatter buckets: reduce_grads with the same kwargs {"bucket": b} (or, with
// SimulationOptions::reduce_bucket_bytes, ReduceBucketer's buckets in schedule order) are one
// collective of their summed bytes (one latency), issued when compute reaches the last of them
// in the order; every member completes when that collective does.
//
// Memory (peak_memory_bytes) counts the step's transient tensors; the per-rank state
// (parameter and gradient shards, optimizer state: budget.h) is not in it. A tensor's bytes
// (meta.tensor_size below) are graph/value_bytes.h's ValueBytes: meta.tensor_size when given,
// else shape x dtype. They are held by its storage:
//   - Storages. A view (meta.aliases_input), a tuple element (operator.getitem: it lives in
//     its tuple's storage, as execution holds it), a release and a wait hand their args[0]'s
//     storage on and allocate nothing, except an owned tuple element (zero3_ops.h's
//     OwnedTupleElements: the one getitem of its index, of a tuple only getitems read): it
//     owns its meta.tensor_size bytes, allocated when its tuple's node starts, and the
//     tuple's storage keeps the rest (TupleRemainderBytes). A gathered parameter's storage belongs
//     to its allgather (below). Every other call node (call_function / call_method / call_module)
//     owns meta.tensor_size bytes, allocated when it starts. A placeholder that is
//     not a parameter shard (inputs, saved activations and tangents of a backward graph) owns its
//     bytes from time 0. Parameter shards (a placeholder read as args[0] by an allgather, or the
//     owner of a parameter-table row) and get_attr nodes are state: not counted. Host
//     tensors (graph/dc_ops.h's IsHostTensor: an offload's result, a placeholder a reload
//     reads) are host memory: not counted (Verify lets no compute read one); a wait_reload
//     hands its reload's storage on.
//   - Host copies. A reload owns its meta.tensor_size bytes, allocated when it is issued. An
//     offload reads its args[0]'s storage, and a reload holds its own, until the later of
//     the copy's completion (position -1, as a collective) and the node's issue (its own
//     position: with a free link the source dies where the offload stands, as in execution).
//   - Readers of a storage: every user of the owning node or of any node that hands the
//     storage on (transitively); a node that hands it on is itself a reader.
//   - Frees. A storage is freed at the latest end time of its readers other than the output
//     node (its own end when it has none), except that:
//       * a storage the output node reads (directly or handed on) is held until the step ends
//         (forward outputs are the saved activations; the backward graph returns its
//         gradients), unless it is reduced;
//       * a reduced storage (one some reduce_grad reads) is freed at the later of its
//         reduce-scatter's completion (its bucket's collective) and the end of its last reader
//         other than the output node and the reduce_grads: the gradient's shard is state, its
//         full copy dies with the reduction.
//     A reduce_grad allocates nothing.
//   - Gathered parameters: allocated when the allgather is issued, freed at the release that
//     brings the count of releases of that ds_id to the release's n_users (residents: held
//     for the whole step, never freed).
//   - Order of changes. Each allocation and free happens at a time and at a position: the
//     position in the order of the node it belongs to (an allocation: the owning node, or
//     the allgather; a free: the last reader, or the release). Changes are ordered by
//     time, then position, then allocations before frees, so a node's output is allocated
//     before the frees its reading causes, and zero-time nodes still hold memory. Changes
//     that no compute node places (time 0 for placeholders and residents, a collective's
//     completion, including a reader on the communication stream) take position -1; frees
//     at the step's end take position N (after everything). With positive device times
//     this is simply "at one instant, frees come before allocations".
//   - peak_memory_bytes is the largest total of held bytes after any change.
//   - Corner cases: a tensor nobody reads is freed at its node's end; a gathered parameter
//     that no release frees is held to the end; with two allgathers of one ds_id, a release
//     count reaching n_users frees the older copy and restarts the count.
//
// Reported (the result keys of docs/format.md): peak_memory_bytes; peak_gathered_bytes (the
// largest total of gathered parameters held walking the schedule order, residents included
// from the start: + at each allgather, - at the release reaching n_users); step_time_s;
// exposed_comm_s (step time - total compute time); lower_bound_s = max(total compute, total
// communication). Cost: O(N log N + E) per run (the memory events are sorted); the graph's part is
// computed once per Simulator.
#ifndef OVERLAP_SCHEDULE_SIMULATOR_H_
#define OVERLAP_SCHEDULE_SIMULATOR_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

// One interval on a stream, for the trace.
struct SimEvent {
  NodeId node = kNoNode;
  int stream = 0;  // 0 compute, 1 communication, 2 the host link
  double start_s = 0;
  double end_s = 0;
};

// The figures of one simulated step (docs/format.md, "Result files"), and with
// SimulationOptions::record_trace its trace.
struct SimulationResult {
  int64_t peak_memory_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  double step_time_s = 0;
  double compute_s = 0;       // the compute stream's busy time: device_time, slowed while
                              // collectives run by the model's compute_slowdown
  double comm_s = 0;          // sum of collective times
  double host_s = 0;          // sum of host-link copy times (offloads and reloads)
  double exposed_comm_s = 0;  // step_time_s - compute_s
  double lower_bound_s = 0;   // max(compute_s, comm_s, host_s)
  std::vector<SimEvent> events;
  std::vector<std::pair<double, int64_t>> memory;  // (time, bytes in use) after each change
  // By position in the order: the compute stream's clock when the walk reaches that node
  // (before it runs; a node allocates at this time, an allgather is issued at it). With
  // record_trace only. What executors use to place a simulated completion at time T: after
  // the last position reached before T (frees at T come before allocations at T).
  std::vector<double> reached_s;
};

// What a simulation run may vary besides the order.
struct SimulationOptions {
  // Record the trace (events, memory timeline). false: the same figures without it.
  bool record_trace = true;
  // ds_ids to simulate as resident, besides the allgathers marked persistent: the graph as
  // MakeResident (zero3_ops.h) would leave it, so their releases are not readers of the
  // storage they hand on (MakeResident erases them). Not owned: must outlive the Run call.
  absl::Span<const int64_t> resident = {};
  // > 0: bucket the reduce_grads by ReduceBucketer's rule with this cap (zero3_ops.h)
  // instead of by their "bucket" kwargs.
  int64_t reduce_bucket_bytes = 0;
  // Check that the order is a topological permutation of the graph (O(N + E)). false is for
  // schedulers simulating orders they built from a valid one; anything else is undefined.
  bool check_order = true;
};

// A simulator bound to one graph: what depends only on the graph (node kinds, sizes,
// collective times, last uses, which reduction frees a gradient) is computed once, O(N + E),
// so a scheduler can simulate many candidate orders of the same graph cheaply. `g` must
// outlive it and not change.
class Simulator {
 public:
  explicit Simulator(const Graph& g, const CollectiveModel& model = {});

  // Simulates `order` (a topological permutation of g's nodes; InvalidArgument otherwise,
  // when options.check_order). InvalidArgument naming the node when a value's size is not
  // computable (ValueBytes, graph/value_bytes.h) or the sizes overflow 64 bits together, as
  // Verify would say. O(N log N + E).
  absl::StatusOr<SimulationResult> Run(absl::Span<const NodeId> order,
                                       const SimulationOptions& options = {}) const;

 private:
  enum Kind : uint8_t {
    kInstant,
    kAllgather,
    kReduce,
    kWait,
    kRelease,
    kView,
    kCompute,
    kOffload,
    kReload
  };
  class Residents;
  struct Buckets;
  struct Timeline;
  Residents MarkResidents(absl::Span<const NodeId> order, absl::Span<const int64_t> resident) const;
  Buckets AssignBuckets(absl::Span<const NodeId> order, int64_t reduce_bucket_bytes) const;
  void RunStreams(absl::Span<const NodeId> order, const Residents& residents, Buckets& buckets,
                  bool record, Timeline* t, SimulationResult* r) const;
  void PeakMemory(absl::Span<const NodeId> order, const Residents& erased, bool record,
                  double step_end, Timeline* t, SimulationResult* r) const;
  // When storage `id` is freed: (time, position in the order), per the memory model.
  // `erased`: options.resident, whose releases read nothing.
  std::pair<double, int64_t> FreeAt(NodeId id, const Residents& erased, const Timeline& t,
                                    double step_end, int64_t n) const;

  const Graph& g_;
  CollectiveModel model_;
  std::vector<uint8_t> kind_;
  absl::Status sizes_;  // the first value whose size ValueBytes refuses, else OK
  std::vector<int64_t> bytes_;
  std::vector<double> time_;      // device time, or the collective's time
  std::vector<int64_t> ds_;       // ds_id (args[2]) of ZeRO-3 ops, else -1
  std::vector<char> persistent_;  // allgathers marked {"persistent": true}
  std::vector<char> backward_;    // ZeRO-3 ops of a backward graph (graph_id 1)
  std::vector<int64_t> bucket_;   // reduce_grads' {"bucket": b} kwarg, else -1
  // Counted storages (memory model in the comment above): the owners, in graph order, and
  // for each its readers (except the output node and reduce_grads) and reduce_grads, as
  // compressed rows; whether the output node holds it.
  std::vector<NodeId> storages_;
  std::vector<int32_t> slot_;   // per node: its index in storages_ when it owns one, else -1
  std::vector<char> at_start_;  // per node: a placeholder allocated at time 0
  std::vector<char> held_;      // per node: held to the end of the step by the output
  // per node: the tuple an owned tuple element (OwnedTupleElements) is allocated with, else
  // kNoNode
  std::vector<NodeId> allocated_with_;
  std::vector<int64_t> first_reader_, first_reduce_;  // per storage index, +1 sentinel
  std::vector<NodeId> readers_, reduces_;
};

// Simulates `order` (a topological permutation of g's nodes; InvalidArgument otherwise)
// with the trace. O(N log N + E).
absl::StatusOr<SimulationResult> Simulate(const Graph& g, absl::Span<const NodeId> order,
                                          const CollectiveModel& model = {});

// `order` of `g` alone (world size 1: collectives take no time), without the trace: the
// executor's memory rule, what the interpreter, replay and the up-front memory checks
// compare against. O(N log N + E).
absl::StatusOr<SimulationResult> SimulateAlone(const Graph& g, absl::Span<const NodeId> order);

// The largest simulated peak of graph values among `graphs`, each alone in its node order
// (an AOT pair's forward and backward: what a step holds at most); a graph without nodes
// counts 0. O(sum of N log N + E).
absl::StatusOr<int64_t> LargestPeakBytes(std::initializer_list<const Graph*> graphs);

// The Chrome / Perfetto trace of a simulation: one track per stream, a memory counter.
// O(events + memory changes).
std::string ChromeTraceJson(const Graph& g, const SimulationResult& r);

// One graph's simulation as part of a longer trace (a training step: the forward, then the
// backward): its events and memory placed `offset_s` later, its memory counter raised by
// `extra_bytes`, and an instant event named `label` where it begins (none when empty).
struct TracePart {
  const Graph* graph = nullptr;
  const SimulationResult* result = nullptr;
  double offset_s = 0;
  int64_t extra_bytes = 0;
  std::string label;
};
// The trace of several parts on the same two tracks and memory counter. O(events + memory
// changes).
std::string ChromeTraceJson(absl::Span<const TracePart> parts);

// The simulation's figures as result JSON keys (without the enclosing braces), e.g.
// "peak_memory_bytes": 123, "step_time_s": 0.5, ... O(1).
std::string SimulationJsonFields(const SimulationResult& r);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_SIMULATOR_H_
