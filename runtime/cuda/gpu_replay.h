// Timed replay on a GPU: each compute node is a spin kernel of its device_time on the
// compute stream, its buffers come from the device's stream-ordered pool, and the ZeRO-3
// ops are real NCCL collectives on the communication stream, ordered by events only:
//   - dc.allgather_param: an event recorded on the compute stream where the schedule issues
//     it, the communication stream waits on it, then the allgather (adjacent allgathers in
//     one NCCL group: fused), with a done event;
//   - dc.wait_allgather: the compute stream waits on that done event (the host never waits);
//   - dc.reduce_grad: the bucket's reduce-scatters, in one NCCL group at its last member,
//     after an event on the compute stream; into shard gradients allocated up front;
//   - a buffer the communication stream used is freed on the communication stream after it
//     waits on an event recorded on the compute stream at the free's position (its last
//     compute use), so the compute stream never waits for a free and the pool needs no
//     record_stream-style deferral; other buffers are freed on the compute stream.
// The host waits once per step, at its end (the collectives' events, then each stream),
// never on the whole device. Memory rules are replay.h's (one walk, ReplayOn); the figures
// are the executor's count of graph values (the simulator's peak at world size 1) and the
// pool's allocated high-water mark.
//
//   OVERLAP_ASSIGN_OR_RETURN(GpuReplayResult r,
//       GpuReplay(graph, {.api = api, .compute = s0, .comm = nccl.get()}, {.steps = 5}));
#ifndef OVERLAP_RUNTIME_CUDA_GPU_REPLAY_H_
#define OVERLAP_RUNTIME_CUDA_GPU_REPLAY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph/graph.h"
#include "runtime/cuda/gpu_api.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/exec/replay.h"

namespace overlap {

// The device a replay runs on. Not owned.
struct GpuTarget {
  GpuApi* api = nullptr;
  GpuStream* compute = nullptr;      // the compute stream (normal priority)
  NcclCommunicator* comm = nullptr;  // its stream() is the communication stream; nullptr:
                                     // no collectives (one process, compute only)
};

struct GpuReplayOptions {
  double time_scale = 1;                       // spin device_time x this
  int steps = 1;                               // replays of the graph, each timed
  bool compute = true;                         // false: no spin kernels (communication only)
  bool communicate = true;                     // false: ZeRO-3 ops move nothing (compute only)
  absl::Duration timeout = absl::Seconds(60);  // the end-of-step wait for collectives
  // Tests only: dc.wait_allgather issues no event wait, so compute reads gathered buffers
  // unordered (the fake's race detector must then object).
  bool debug_drop_waits = false;
};

struct GpuReplayResult {
  ReplayResult replay;          // the last step: peaks (executor's count, simulated), wall_s
  std::vector<double> step_s;   // every step's wall time, host-measured to its end
  int64_t pool_peak_bytes = 0;  // the pool's allocated high-water mark, less residents
  int64_t resident_bytes = 0;   // shards and shard gradients, allocated up front
  int64_t collectives = 0;      // per step
};

// Replays `g` (any graph; ZeRO-3 graphs get collectives) on `target`. Errors: the api's and
// the communicator's (a failed or timed-out collective ends the replay with its error), a
// graph whose simulated peak exceeds the device's memory.
absl::StatusOr<GpuReplayResult> GpuReplay(const Graph& g, const GpuTarget& target,
                                          const GpuReplayOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_GPU_REPLAY_H_
