// The memory a rank has for one step's transient tensors: the device's memory minus the
// per-rank state ZeRO-3 keeps across steps, minus a reserve. The simulator's
// peak_memory_bytes (simulator.h) counts only the transient tensors, so this budget is what
// it is compared with.
//
//   absl::StatusOr<MemoryBudget> b =
//       DeviceMemoryBudget(g, int64_t{80} * 1000 * 1000 * 1000, StateOptions{});
//   // b->state_bytes, b->reserve_bytes, *b->budget_bytes
//
// Per-rank state, for every parameter in the table (tied parameters once, by storage), each
// sharded over the world with its elements padded to a multiple of the world size (as
// DeepSpeed pads each parameter), ceil(numel / world) elements per rank:
//   - the parameter shard, in the parameter's dtype;
//   - for parameters that require a gradient: the gradient shard (same dtype), the optimizer
//     state in fp32 (sgd: none; momentum: 1 value per element; adam: 2), and an fp32 master
//     copy when the parameter is 16-bit (float16 / bfloat16: mixed precision keeps one).
// A parameter's element count is the product of its shape, or its bytes / dtype size when it
// has no shape; a missing dtype counts as float32.
//
// Reserve: what the allocator cannot hand to tensors (the CUDA context, the caching
// allocator's fragmentation, communication buffers): 512 MiB + 5% of the device memory
// unless set explicitly. docs/schedule.md, "Memory budgets", explains the choice.
#ifndef OVERLAP_SCHEDULE_BUDGET_H_
#define OVERLAP_SCHEDULE_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "schedule/optimizer.h"

namespace overlap {

// What the per-rank state depends on besides the graph.
struct StateOptions {
  // Its state per parameter: OptimizerStateTensors (AdamW 2, SGD 1, SGD at momentum 0 none).
  OptimizerOptions optimizer;
  int world_size = 32;  // ranks the state is sharded over; must be >= 1
};

// Per-rank state by kind, in bytes.
struct RankState {
  int64_t params = 0;     // parameter shards
  int64_t grads = 0;      // gradient shards
  int64_t optimizer = 0;  // optimizer state (fp32)
  int64_t master = 0;     // fp32 master weights of 16-bit parameters
  int64_t total() const { return params + grads + optimizer + master; }
};

// The per-rank state of `g`'s parameter table (see above). InvalidArgument when
// world_size < 1. O(parameters).
absl::StatusOr<RankState> PerRankState(const Graph& g, const StateOptions& options);

// A budget on peak_memory_bytes and where it came from.
struct MemoryBudget {
  int64_t state_bytes = 0;              // per-rank state (always computed)
  std::optional<int64_t> device_bytes;  // the device's memory, when the budget derives from it
  int64_t reserve_bytes = 0;            // with device_bytes: the reserve taken off
  std::optional<int64_t> budget_bytes;  // the cap on peak_memory_bytes; none: no budget
};

// The default reserve for a device of `device_bytes`: 512 MiB + 5%. O(1).
int64_t DefaultReserveBytes(int64_t device_bytes);

// budget = device_bytes - per-rank state - reserve (DefaultReserveBytes when none).
// InvalidArgument naming the three figures when that leaves nothing (<= 0), or when
// device_bytes or the reserve is negative. O(parameters).
absl::StatusOr<MemoryBudget> DeviceMemoryBudget(const Graph& g, int64_t device_bytes,
                                                const StateOptions& options,
                                                std::optional<int64_t> reserve_bytes = {});

// A budget given directly (--memory-limit), with the state computed for the report.
// O(parameters).
absl::StatusOr<MemoryBudget> DirectMemoryBudget(const Graph& g, std::optional<int64_t> limit,
                                                const StateOptions& options);

// What a command asks its budget to be, before the graph is read: a budget given directly
// (`--memory-limit`), or one derived from the device's memory (`--device-memory`, less the
// per-rank state and `--reserve`), or none. One rule for schedule, simulate, run and worker.
struct BudgetRequest {
  std::optional<int64_t> budget_bytes;         // given directly
  std::optional<int64_t> device_memory_bytes;  // derive it (not with budget_bytes)
  std::optional<int64_t> reserve_bytes;        // with device_memory_bytes; default: 512 MiB + 5%
  StateOptions state;
};

// The request's budget for `g`: DeviceMemoryBudget with a device, else DirectMemoryBudget (the
// state always computed). InvalidArgument when both a budget and a device are given, a reserve
// without a device, or a device too small for the state. O(parameters).
absl::StatusOr<MemoryBudget> ResolveBudget(const BudgetRequest& request, const Graph& g);

// The budget as result JSON keys (no braces, a leading ", "): state_bytes, and with a
// budget budget_bytes, memory_limit_bytes (the same; older readers) and feasible (peak <=
// budget); with a device, device_memory_bytes and reserve_bytes. O(1).
std::string MemoryBudgetJsonFields(const MemoryBudget& b, int64_t peak_memory_bytes);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_BUDGET_H_
