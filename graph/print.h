// A compact, human-readable text form of a graph, one line per node, for reading and
// diffing graphs (as torch.fx's print_tabular or MLIR's generic form). Not parsed back: the
// JSON interchange format is the round-trip form.
//
//   %mm = aten.mm.default(%x, %w) : [8, 768] float32  # 12.3 us, 24.0 KiB
//   %ag = dc.allgather_param(%p_w, 0, 3, persistent=True) : [768, 768] bfloat16  # 1.12 MiB
//   %x = placeholder[x] : [8, 768] float32
//   %p_w = placeholder[p_w] : [768, 768] float32  # param w
//   %h = call_module[layers.0](%x) : [8, 768] float32
//   output(%mm)
//
// Values: %name for a reference, Python literals otherwise (True / False / None, quoted
// strings, [lists], {"dict": values}, slice(a, b, c)); kwargs as key=value after the args.
// After the colon: meta shape and dtype when present; after "#": device time, tensor size,
// and view / param / grad_of marks when present. The parameter table comes first, one
// "param" line per entry. Names, targets, keys and dtypes print as they are, except that a
// backslash and any byte outside printable ASCII print as \\ and \xNN, so a node is always
// one line. Cost: O(size of the graph).
#ifndef OVERLAP_GRAPH_PRINT_H_
#define OVERLAP_GRAPH_PRINT_H_

#include <string>

#include "graph/graph.h"

namespace overlap {

// One node's line, without the trailing newline. `n` must belong to `g` (its references
// are printed by name).
std::string PrintNode(const Graph& g, const Node& n);

// The whole graph: the parameter table, then one line per node in graph order.
std::string PrintGraph(const Graph& g);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_PRINT_H_
