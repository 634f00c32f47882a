// Timed replay: a graph executed without kernels. Every compute node waits its
// meta.device_time (times a scale) instead of running, and real buffers of each value's
// bytes (meta.tensor_size, else shape x dtype: graph/value_bytes.h) are allocated (or only
// counted) and freed by the executor's rules, so any graph runs, random and exported ones
// included, and its measured memory can be compared with the simulator's
// (schedule/simulator.h).
//
// The executor's memory rules, walking the order one node at a time (the interpreter with
// kernels follows the same ones):
//   - inputs that are not parameter shards (placeholders) are live from the start, and so
//     are resident (persistent) parameters' gathered copies;
//   - a node that owns a value (every call node but views, releases, waits, allgathers and
//     reduce_grads) allocates its bytes before it runs; views, releases and waits
//     hand their input's buffer on; an allgather allocates the gathered parameter;
//   - after a node runs, each buffer whose last reader (through hand-ons; the output node
//     aside) it was is freed, except buffers the output returns (held to the end) and
//     reduced gradients, freed once their reduction (their bucket's last reduce_grad, in
//     one process immediate) has run and their other readers have;
//   - a release frees the oldest gathered copy of its parameter when its count reaches
//     n_users.
// At world size 1 (collectives take no time) and with every compute node's device_time > 0
// these are the simulator's rules, so the measured peak equals peak_memory_bytes; the
// tests check it on every tiny model under every scheduler and on random graphs.
#ifndef OVERLAP_RUNTIME_EXEC_REPLAY_H_
#define OVERLAP_RUNTIME_EXEC_REPLAY_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/graph.h"
#include "runtime/core/tensor.h"

namespace overlap {

// The longest one node may wait in a replay (device_time x time scale): longer is refused
// up front, naming the node (docs/limits.md).
inline constexpr double kMaxReplayWaitSeconds = 3600;

// What compute node `node` waits in a replay: meta.device_time x time_scale, 0 without a
// device time. The one rule every timed replay follows (Replay, ReplayOn's devices, and the
// waiting kernels of replay_kernels.h). O(1).
double ReplayWaitSeconds(const Node& node, double time_scale);

struct ReplayOptions {
  // Each compute node waits device_time * time_scale seconds (0: no waiting). Must be >= 0.
  double time_scale = 0;
  // Count the bytes without allocating them (any size runs); false: real, zeroed buffers
  // from the allocator, refused up front when the graph's peak exceeds the guard.
  bool count_only = false;
  // With real buffers: the memory guard (memory_plan.h; none: the memory available now).
  std::optional<int64_t> guard_bytes;
};

struct ReplayResult {
  int64_t peak_bytes = 0;   // measured peak of live values
  int64_t final_bytes = 0;  // live at the end (what the output holds, residents)
  // The simulator's peak_memory_bytes for the same graph and order at world size 1, which
  // peak_bytes equals when every compute node has a device time.
  int64_t simulated_peak_bytes = 0;
  int64_t nodes_run = 0;
  double wall_s = 0;
};

// Replays `g` in its node order. Errors: a graph whose peak (simulated, up front) exceeds
// the memory limit, with both figures; the allocator's. O(N log N + E) plus the waits.
absl::StatusOr<ReplayResult> Replay(const Graph& g, const ReplayOptions& options = {});

// Where a replay's buffers and work go: the host (Replay above) or a device (the CUDA
// backend's GPU replay, runtime/cuda/gpu_replay.h). ReplayOn walks the order with the rules
// above and calls these in order; buffers are named by the node that owns them (a plan
// root). One walk, so every device follows the same memory rules.
class ReplayDevice {
 public:
  virtual ~ReplayDevice() = default;
  // A buffer of `bytes` for `owner`'s value; Give frees it.
  virtual absl::Status Take(NodeId owner, int64_t bytes) = 0;
  virtual absl::Status Give(NodeId owner) = 0;
  // A compute node: `seconds` of work (device_time x time_scale; 0 for none) reading the
  // buffers `reads` and writing `write` (-1: a node that owns no buffer).
  virtual absl::Status Compute(const Node& node, double seconds, absl::Span<const NodeId> reads,
                               NodeId write) = 0;
  // ZeRO-3 ops at their positions (defaults: nothing, as in one process). `buffer` is the
  // gathered copy; a reduce's `grad` the gradient's buffer, `bucket_last` whether it is its
  // bucket's last member (or has no bucket): where the reduction is issued.
  virtual absl::Status Allgather(const Node& node, NodeId buffer) { return absl::OkStatus(); }
  virtual absl::Status WaitAllgather(const Node& node, NodeId buffer) { return absl::OkStatus(); }
  virtual absl::Status Reduce(const Node& node, NodeId grad, bool bucket_last) {
    return absl::OkStatus();
  }
  // After the last node (before the buffers the output holds are counted as final).
  virtual absl::Status Finish() { return absl::OkStatus(); }
  // Bytes live now and at most, by the rules above.
  virtual int64_t live() const = 0;
  virtual int64_t peak() const = 0;
};

// The walk Replay runs, on `device`, with Replay's up-front refusal (unless count_only; the
// guard's default is the host's available memory, so a device passes its own). O(N log N + E)
// plus the device's calls.
absl::StatusOr<ReplayResult> ReplayOn(const Graph& g, const ReplayOptions& options,
                                      ReplayDevice& device);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_EXEC_REPLAY_H_
