// An AOT-style backward graph derived from a lifted forward graph, so every built-in model
// has a forward and a backward graph for the ZeRO-3 passes (`overlap gen <model> --lifted
// --backward`).
//
// What it builds (reverse-mode, one backward node per (forward node, input needing a
// gradient)):
//   - placeholders: every parameter placeholder of the forward (same name and meta.param;
//     backward ops read parameters, so ZeRO-3 gathers them again), one tangent per forward
//     output value (`tangents_<k>`), and the saved activations the backward ops read
//     (`saved_<forward name>`), all at the head;
//   - for a forward compute node f and each input x that leads to a parameter, a node
//     `<aten op>_backward` (aten.X.overload -> aten.X_backward.default) reading f's output
//     gradient and f's other inputs (parameters through their placeholders, the rest saved),
//     costing f's device_time (each matmul becomes two in backward: input and weight
//     gradients) and sized like x; views (aliases with no device time) and getitems pass
//     gradients through a 0-time view, in-place ops (aliases with device time) compute;
//   - gradients reaching the same value are summed (aten.add.Tensor); the node that holds a
//     parameter's final gradient carries meta.grad_of;
//   - the output returns the parameter gradients in parameter-table order.
// It is a model of a backward graph for scheduling and simulation (shapes, sizes, times,
// which parameters each step reads), not a differentiator: op semantics are not checked.
// Fails on module-owned parameters, naming the first. Cost: O(N + E).
#ifndef OVERLAP_GRAPH_BACKWARD_H_
#define OVERLAP_GRAPH_BACKWARD_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

absl::StatusOr<Graph> BuildBackward(const Graph& forward);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_BACKWARD_H_
