// A structural backward graph: a cost model of a backward pass for graphs whose ops have no
// real derivatives (the random graphs of graph/random_graph.h), so that the scheduler
// properties, fuzzers and stress tests have backward inputs. The built-in models get real
// backward graphs from graph/aot.h instead (`overlap gen <model> --backward`); `overlap gen
// random --lifted --backward` uses this one.
//
// What it builds (reverse-mode, one backward node per (forward node, input needing a
// gradient)):
//   - placeholders: every parameter placeholder of the forward (same name and meta.param;
//     backward ops read parameters, so ZeRO-3 gathers them again), one tangent per forward
//     output value (`tangents_<k>`), and the saved activations the backward ops read
//     (`saved_<forward name>`), all at the head;
//   - for a forward compute node f and each input x that leads to a parameter, a node
//     `<aten op>_backward` (aten.X.overload -> aten.X_backward.default; these targets are
//     invented and have no shape rules) reading f's output gradient and f's other inputs
//     (parameters through their placeholders, the rest saved), costing f's device_time
//     (each matmul becomes two in backward: input and weight gradients) and sized like x;
//     views (aliases with no device time) and getitems pass gradients through a 0-time view,
//     in-place ops (aliases with device time) compute;
//   - gradients reaching the same value are summed (aten.add.Tensor); the node that holds a
//     parameter's final gradient carries meta.grad_of;
//   - the output returns the parameter gradients in parameter-table order.
// Shapes, sizes, times and which parameters each step reads are modelled; op semantics are
// not. Fails on module-owned parameters, naming the first. Cost: O(N + E).
#ifndef OVERLAP_GRAPH_STRUCTURAL_BACKWARD_H_
#define OVERLAP_GRAPH_STRUCTURAL_BACKWARD_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

absl::StatusOr<Graph> BuildStructuralBackward(const Graph& forward);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_STRUCTURAL_BACKWARD_H_
