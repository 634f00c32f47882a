// RapidCheck generator of graphs, for property tests.
//
// ArbitraryGraph() draws a byte string and decodes it with GraphFromBytes (random_graph.h),
// so RapidCheck shrinks a failing graph by shrinking its bytes: every shrunk input still
// decodes to a valid, smaller graph, and the counterexample stays acyclic and verifiable.
//
//   RC_GTEST_PROP(GraphJsonTest, prop_RoundTripIsIdentity, ()) {
//     Graph g = *ArbitraryGraph();
//     ...
//   }
#ifndef OVERLAP_GRAPH_RANDOM_GRAPH_RC_H_
#define OVERLAP_GRAPH_RANDOM_GRAPH_RC_H_

#include <cstdint>
#include <ostream>
#include <vector>

#include "graph/graph.h"
#include "graph/json_writer.h"
#include "graph/random_graph.h"
#include "rapidcheck.h"

namespace overlap {

// How RapidCheck prints a counterexample: the graph in the interchange format, ready to save
// as a file and replay with `overlap inspect`.
inline void showValue(const Graph& g, std::ostream& os) { os << WriteGraphJson(g); }

// Graphs of at most `max_nodes` nodes; RapidCheck's size parameter scales the byte count.
// Bytes scale 40x with the size parameter: a node takes about 30 bytes of decisions, so at
// RapidCheck's default sizes (up to 100) this gives graphs of up to about 200 nodes.
inline rc::Gen<Graph> ArbitraryGraph(int64_t max_nodes = 200) {
  return rc::gen::map(
      rc::gen::scale(40.0, rc::gen::container<std::vector<uint8_t>>(rc::gen::arbitrary<uint8_t>())),
      [max_nodes](const std::vector<uint8_t>& bytes) { return GraphFromBytes(bytes, max_nodes); });
}

}  // namespace overlap

#endif  // OVERLAP_GRAPH_RANDOM_GRAPH_RC_H_
