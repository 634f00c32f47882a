// A two-stream simulator of one training step of a scheduled ZeRO-3 graph: peak memory and
// step time under an alpha-beta model of the collectives.
//
// Streams: compute runs the nodes in schedule order, each for its meta.device_time;
// collectives run in order on one communication stream. An allgather (and a reduce_grad's
// reduce-scatter) is issued when compute reaches it and starts when the communication stream
// is free; a wait blocks compute until its allgather has finished; releases and the output
// take no time.
//
// Collectives: the ring alpha-beta CollectiveModel of graph/cost_model.h (32 ranks, 20 us,
// 50 GB/s per rank by default).
//
// Memory: a gathered parameter is allocated when its allgather is issued and freed at the
// release that brings its count to n_users; a computed tensor (meta.tensor_size) is
// allocated when its node starts and freed when its last use finishes (looking through
// views and releases, which pass the same tensor on), or, for a gradient that is reduced, when its
// reduction completes. Views (meta.aliases_input) allocate nothing. Placeholders (inputs, parameter
// shards) are resident and not counted. Frees at an instant come before allocations at that
// instant.
//
// Resident parameters (selective unsharding): an allgather with kwargs {"persistent": true},
// or one whose ds_id is passed to Simulator::Run as resident, stands for a parameter kept
// gathered across steps: it takes no communication time, its bytes are allocated for the
// whole step (from time 0), and its releases free nothing.
//
// Reduce-scatter buckets: reduce_grads with the same kwargs {"bucket": b} are one
// collective of their summed bytes (one latency), issued when compute reaches the last of
// them in the order; each member's gradient is freed when that collective completes.
//
// Reported (the result keys of docs/format.md): peak_memory_bytes,
// peak_gathered_bytes (walking the order: + at each allgather, - at the release reaching
// n_users), step_time_s (both streams drained), exposed_comm_s (step time - compute time),
// lower_bound_s = max(total compute, total communication).
// Cost: O(N log N) (the memory events are sorted).
#ifndef OVERLAP_SCHEDULE_SIMULATOR_H_
#define OVERLAP_SCHEDULE_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

// One interval on a stream, for the trace.
struct SimEvent {
  NodeId node = kNoNode;
  int stream = 0;  // 0 compute, 1 communication
  double start_s = 0;
  double end_s = 0;
};

// The figures of one simulated step (docs/format.md, "Result files"), and with
// SimulationOptions::record_trace its trace.
struct SimulationResult {
  int64_t peak_memory_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  double step_time_s = 0;
  double compute_s = 0;       // sum of device_time
  double comm_s = 0;          // sum of collective times
  double exposed_comm_s = 0;  // step_time_s - compute_s
  double lower_bound_s = 0;   // max(compute_s, comm_s)
  std::vector<SimEvent> events;
  std::vector<std::pair<double, int64_t>> memory;  // (time, bytes in use) after each change
};

// What a simulation run may vary besides the order.
struct SimulationOptions {
  // Record the trace (events, memory timeline). false: the same figures, cheaper (no sort
  // of every memory event).
  bool record_trace = true;
  // ds_ids to simulate as resident, besides the allgathers marked persistent. Not owned:
  // must outlive the Run call.
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
  // when options.check_order). O(N log N).
  absl::StatusOr<SimulationResult> Run(absl::Span<const NodeId> order,
                                       const SimulationOptions& options = {}) const;

 private:
  enum Kind : uint8_t { kInstant, kAllgather, kReduce, kWait, kRelease, kView, kCompute };
  class Residents;
  struct Buckets;
  struct Timeline;
  Residents MarkResidents(absl::Span<const NodeId> order, absl::Span<const int64_t> resident) const;
  Buckets AssignBuckets(absl::Span<const NodeId> order, int64_t reduce_bucket_bytes) const;
  void RunStreams(absl::Span<const NodeId> order, const Residents& residents, Buckets& buckets,
                  bool record, Timeline* t, SimulationResult* r) const;
  void PeakMemory(absl::Span<const NodeId> order, bool record, Timeline* t,
                  SimulationResult* r) const;
  double FreeTime(NodeId id, const std::vector<double>& end) const;

  const Graph& g_;
  CollectiveModel model_;
  std::vector<NodeId> last_use_;
  std::vector<NodeId> reduced_by_;  // gradient -> the reduce_grad that frees it
  std::vector<uint8_t> kind_;
  std::vector<int64_t> bytes_;
  std::vector<double> time_;      // device time, or the collective's time
  std::vector<int64_t> ds_;       // ds_id (args[2]) of ZeRO-3 ops, else -1
  std::vector<char> persistent_;  // allgathers marked {"persistent": true}
  std::vector<int64_t> bucket_;   // reduce_grads' {"bucket": b} kwarg, else -1
};

// Simulates `order` (a topological permutation of g's nodes; InvalidArgument otherwise)
// with the trace. O(N log N + E).
absl::StatusOr<SimulationResult> Simulate(const Graph& g, absl::Span<const NodeId> order,
                                          const CollectiveModel& model = {});

// The Chrome / Perfetto trace of a simulation: one track per stream, a memory counter.
// O(events + memory changes).
std::string ChromeTraceJson(const Graph& g, const SimulationResult& r);

// The simulation's figures as result JSON keys (without the enclosing braces), e.g.
// "peak_memory_bytes": 123, "step_time_s": 0.5, ... O(1).
std::string SimulationJsonFields(const SimulationResult& r);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_SIMULATOR_H_
