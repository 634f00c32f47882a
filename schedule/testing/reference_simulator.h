// The two-stream ZeRO-3 step simulator written straight from its contract (the header
// comment of schedule/simulator.h), for differential tests of the efficient Simulator.
// Test-only.
//
// An oracle must not share what it checks: this file reads the dc.* ops through
// zero3_ops.h only and computes storages, readers, free times and the peak the plain way
// (readers by scanning every node, the peak by summing every storage at every allocation
// instant). O(N^2): use it on graphs of up to a few thousand nodes.
//
//   ReferenceSimulation r = ReferenceSimulate(g, g.OrderVector(), CollectiveModel{});
#ifndef OVERLAP_SCHEDULE_TESTING_REFERENCE_SIMULATOR_H_
#define OVERLAP_SCHEDULE_TESTING_REFERENCE_SIMULATOR_H_

#include <cstdint>

#include "absl/types/span.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

// The figures of SimulationResult (schedule/simulator.h), without the trace.
struct ReferenceSimulation {
  int64_t peak_memory_bytes = 0;
  int64_t peak_gathered_bytes = 0;
  double step_time_s = 0;
  double compute_s = 0;
  double comm_s = 0;
  double host_s = 0;
  double exposed_comm_s = 0;
  double lower_bound_s = 0;
};

// Simulates `order` (assumed a topological permutation of g's nodes; not checked) under the
// contract of schedule/simulator.h. `resident` and `reduce_bucket_bytes` mean what
// SimulationOptions' fields of those names mean. O(N^2).
ReferenceSimulation ReferenceSimulate(const Graph& g, absl::Span<const NodeId> order,
                                      const CollectiveModel& model,
                                      absl::Span<const int64_t> resident = {},
                                      int64_t reduce_bucket_bytes = 0);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_TESTING_REFERENCE_SIMULATOR_H_
