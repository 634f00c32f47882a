// The executor's memory rules as a plan over a graph's order (internal to runtime/): which
// node owns a buffer, which buffer each node's result lives in, and after which position
// each buffer dies. Timed replay and the interpreter both follow it, so that their measured
// peaks are the simulator's (replay.h states the rules).
#ifndef OVERLAP_RUNTIME_EXEC_MEMORY_PLAN_H_
#define OVERLAP_RUNTIME_EXEC_MEMORY_PLAN_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

struct MemoryPlan {
  std::vector<NodeId> order;                  // the graph's node order
  std::vector<int64_t> pos;                   // position in `order` by node id (-1: dead)
  std::vector<NodeId> root;                   // the node whose buffer a result lives in
  std::vector<char> owns;                     // whether the node's result is a buffer of its own
  std::vector<std::vector<NodeId>> frees_at;  // buffers (roots) freed after each position
  std::vector<std::vector<NodeId>> members;   // by root: the nodes whose results live in it
  absl::flat_hash_set<int64_t> resident;      // ds_ids of persistent (resident) parameters
  // By node id: a tuple element owning its bytes (OwnedTupleElements): allocated with its
  // tuple's node, freed after its own last reader.
  std::vector<char> owned_element;
};

// O(N + E).
MemoryPlan BuildMemoryPlan(const Graph& g);

// The memory guard: the most a run may hold in real buffers, checked up front against what
// the simulator says the run needs, so that a run that cannot fit is refused before it
// allocates rather than failing part-way or swapping. Every executor option names it
// `guard_bytes`; none (the default) means the memory available on this machine when the run
// starts (AvailableMemoryBytes()). Not the scheduler's budget (schedule/budget.h), which caps a
// schedule's simulated peak on the device the cost model describes.
//
// OK when `need_bytes` fits the guard; otherwise ResourceExhausted: "<what> needs <need>
// (<detail>; its largest value: node "<name>", <bytes>), more than the <guard> limit" (or
// "available"), then `hint` in parentheses. The largest value (SizeOf: meta.tensor_size,
// else shape x dtype) is looked up among `graphs`, so a graph that declares a huge tensor
// names it. O(1) plus O(N) over `graphs` when refusing, plus reading /proc/meminfo without
// a guard.
absl::Status CheckMemoryGuard(int64_t need_bytes, std::optional<int64_t> guard_bytes,
                              absl::string_view what, absl::string_view detail,
                              absl::string_view hint,
                              std::initializer_list<const Graph*> graphs = {});

// Whether `n` calls something (call_function, call_method, call_module).
bool IsCallNode(const Node& n);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_EXEC_MEMORY_PLAN_H_
