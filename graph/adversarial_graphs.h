// Graph shapes that once took time or memory out of proportion to their size (test support
// and benchmarks; each is valid and lifted, ready for ZeRO-3 insertion).
//
//   WideOutputGraph(1, 30000)   one parameter read by 30,000 nodes, all returned
//   WideOutputGraph(20000, 1)   20,000 parameters each read once, the reads returned
//   MatmulChainGraph(100000)    h_i = mm(h_{i-1}, w_i): a chain with a parameter per link
#ifndef OVERLAP_GRAPH_ADVERSARIAL_GRAPHS_H_
#define OVERLAP_GRAPH_ADVERSARIAL_GRAPHS_H_

#include <cstdint>

#include "graph/graph.h"

namespace overlap {

// x and `params` lifted parameters (64 KiB each); each parameter is read by
// `uses_per_param` matmuls mm(x, p), and the output returns every matmul. O(size).
Graph WideOutputGraph(int64_t params, int64_t uses_per_param);

// A chain of `links` matmuls, each reading the previous one and its own lifted parameter;
// the output returns the last. O(links).
Graph MatmulChainGraph(int64_t links);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_ADVERSARIAL_GRAPHS_H_
