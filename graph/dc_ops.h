// The ZeRO-3 ops as the interchange format defines them (docs/format.md, "ZeRO-3 ops";
// docs/deepcompile.md): their targets and argument positions. The IR verifier checks every
// such op against this; schedule/zero3_ops.h builds the schedulers' vocabulary (readers,
// the kwargs our passes write) on these definitions.
//
//   %ag  = dc.allgather_param(%p, graph_id, ds_id)
//   %w   = dc.wait_allgather(%ag, graph_id, ds_id)
//   %r   = dc.release_param(%use, graph_id, ds_id, n_users)
//   %red = dc.reduce_grad(%grad, graph_id, ds_id)
//   %wr  = dc.wait_reduce(%red, graph_id, ds_id)                blocks compute until %red's
//                                                               reduce-scatter is done
//
// and the host-memory ops of activation offloading (a saved tensor moved to host memory in
// the forward and brought back in the backward; docs/deepcompile.md, "Offload"):
//
//   %h   = dc.offload_tensor(%x, graph_id, id)   copies %x to host memory (the host link)
//   %d   = dc.reload_tensor(%h, graph_id, id)    copies host tensor %h back to the device
//   %v   = dc.wait_reload(%d, graph_id, id)      blocks compute until %d has arrived
//   %w   = dc.wait_offload(%h, graph_id, id)     blocks compute until %h's copy is done
//
// `id` names the offloaded tensor (an int >= 0, the same on its three ops); it is not a
// parameter-table index. A host tensor (IsHostTensor) lives outside the device's memory, so
// compute never reads one: only a reload, a wait_offload and the output do (Verify).
#ifndef OVERLAP_GRAPH_DC_OPS_H_
#define OVERLAP_GRAPH_DC_OPS_H_

#include <cstddef>

#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

// Targets of the ZeRO-3 ops (call_function nodes).
inline constexpr absl::string_view kAllgatherTarget = "dc.allgather_param";
inline constexpr absl::string_view kWaitTarget = "dc.wait_allgather";
inline constexpr absl::string_view kReleaseTarget = "dc.release_param";
inline constexpr absl::string_view kReduceTarget = "dc.reduce_grad";
inline constexpr absl::string_view kWaitReduceTarget = "dc.wait_reduce";
inline constexpr absl::string_view kOffloadTarget = "dc.offload_tensor";
inline constexpr absl::string_view kReloadTarget = "dc.reload_tensor";
inline constexpr absl::string_view kWaitReloadTarget = "dc.wait_reload";
inline constexpr absl::string_view kWaitOffloadTarget = "dc.wait_offload";
// Every ZeRO-3 target starts with this; other dc.* targets (DeepCompile has more) are
// accepted unchecked.
inline constexpr absl::string_view kZero3Prefix = "dc.";

// Whether `target` is one of the four host-memory ops' (offload, reload and their waits). O(1).
inline bool IsHostMemoryTarget(absl::string_view target) {
  return target == kOffloadTarget || target == kReloadTarget || target == kWaitReloadTarget ||
         target == kWaitOffloadTarget;
}

// Positions of the ops' arguments: args[0] is the tensor the op acts on.
inline constexpr size_t kGraphIdArg = 1;
inline constexpr size_t kDsIdArg = 2;    // the host-memory ops' id
inline constexpr size_t kNUsersArg = 3;  // releases only

// Whether node `id` of `g` is a host tensor, outside the device's memory: an offload's result
// (or a wait for it), or a placeholder that a reload reads as args[0] (a saved tensor the
// forward offloaded). The simulators and the executor count none of its bytes on the device.
// O(users + 1).
bool IsHostTensor(const Graph& g, NodeId id);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_DC_OPS_H_
