// Where a schedule puts the host-memory ops of activation offloading (graph/dc_ops.h): the
// placement ours applies to every order it considers, so that the simulator judges each
// order with its offloads and reloads where they serve it best.
//
//   - each dc.offload_tensor right after the value it copies: the copy starts as soon as
//     the value exists, and the value's device memory goes as soon as the copy is done; its
//     dc.wait_offload at the end (or, throttled, below);
//   - each dc.wait_reload right before the first node that reads it;
//   - each dc.reload_tensor as late as lets it arrive in time: walking the waits from the
//     last, a reload's copy must end by its wait's compute time and before the next reload's
//     copy begins (one copy at a time on the host link), so it starts that copy time earlier;
//     it is issued at the last node whose estimated compute time is not past that time (at
//     the start when none is early enough). Compute times come from simulating the order with
//     every reload just before its wait (collective stalls included) when a Simulator of g is
//     given, else from the running sum of meta.device_time. A reload issued late by the
//     estimate shows as a stall in the simulation, never as a wrong answer: the simulator, not
//     this estimate, decides whether the order is chosen.
//
// Every other node keeps its place in `order`.
#ifndef OVERLAP_SCHEDULE_HOST_COPIES_H_
#define OVERLAP_SCHEDULE_HOST_COPIES_H_

#include <vector>

#include "graph/cost_model.h"
#include "graph/graph.h"
#include "schedule/simulator.h"

namespace overlap {

// Where reloads go: as late as lets them arrive in time (above: the copies hide behind
// compute), or each right before its wait (the least memory: held only from where it is
// needed, compute stalling for the copy).
// kThrottled: reloads just in time, and each offload's wait (dc.wait_offload) before the
// node that makes the next offloaded value, so compute cannot run ahead of the host link by
// more than one copy (the least memory when the link is slower than compute makes values);
// otherwise those waits stand at the end.
enum class HostCopyPlacement { kHidden, kJustInTime, kThrottled };

// Whether `g` has any host-memory op (offload, reload, wait_reload). O(N).
bool HasHostCopies(const Graph& g);

// `order` (a topological order of g) with g's host-memory ops placed as above; `order`
// itself when g has none. The result is a topological order when `order` is one.
// `simulator`: one bound to g (not owned; nullptr: device times only). O(N + E + R log N)
// for R reloads, plus one simulation with a simulator.
std::vector<NodeId> PlaceHostCopies(const Graph& g, std::vector<NodeId> order,
                                    const CollectiveModel& model,
                                    const Simulator* simulator = nullptr,
                                    HostCopyPlacement placement = HostCopyPlacement::kHidden);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_HOST_COPIES_H_
