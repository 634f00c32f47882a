// Timed replay inside a trainer: a kernel registry whose kernels wait instead of computing,
// so a training job (runtime/job/job.h, `overlap run --time-scale`) runs its real
// collectives against compute that takes the graphs' device times, and the graphs with those
// times for the simulator's prediction of the same step. Each node's wait follows replay.h's
// rule (ReplayWaitSeconds), raised to at least kMinReplayKernelWaitSeconds.
//
//   std::unique_ptr<KernelRegistry> k = ReplayKernels(1000);  // options.kernels = k.get()
//   Graph predicted = ReplayTimes(forward, 1000);              // what the kernels wait
#ifndef OVERLAP_RUNTIME_EXEC_REPLAY_KERNELS_H_
#define OVERLAP_RUNTIME_EXEC_REPLAY_KERNELS_H_

#include <memory>

#include "graph/graph.h"
#include "runtime/kernels/kernel.h"

namespace overlap {

// The shortest wait of a node that has a device time: a sleep much shorter than this
// measures the scheduler's wake-up, not the time asked for.
inline constexpr double kMinReplayKernelWaitSeconds = 1e-3;

// What a waiting kernel waits for `node`: 0 for views and getitems (they run: they are free
// and must alias) and nodes without a device time; else ReplayWaitSeconds(node, time_scale),
// at least kMinReplayKernelWaitSeconds. O(1).
double ReplayKernelSeconds(const Node& node, double time_scale);

// Every CPU kernel's target (CpuKernels()), registered as a waiting kernel: views run the
// real kernel; every other node waits ReplayKernelSeconds and returns results of its stated
// types (meta.shape and meta.dtype), uninitialised (nothing reads their values; zeroing them
// would add CPU work the simulator does not model). A node whose wait exceeds
// kMaxReplayWaitSeconds (replay.h), or without stated types, fails naming itself.
// `time_scale` > 0.
std::unique_ptr<KernelRegistry> ReplayKernels(double time_scale);

// `g` with each compute node's meta.device_time replaced by what ReplayKernels waits for it
// (ZeRO-3 ops and nodes that wait nothing keep theirs): the graph the simulator predicts the
// replayed step from. O(N).
Graph ReplayTimes(Graph g, double time_scale);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_EXEC_REPLAY_KERNELS_H_
