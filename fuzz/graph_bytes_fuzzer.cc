// Fuzz target: bytes decoded into random graphs by the shared generator (structure-aware:
// every input is a valid graph), then the graph API and format are exercised on it.
// Invariants: Verify() accepts every decoded graph; the JSON round trip is exact; erasing
// unread computations and extracting a subgraph keep graphs valid.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/random_graph.h"
#include "graph/subgraph.h"
#include "graph/verifier.h"

namespace {
void Fail(const char* what) {
  std::fprintf(stderr, "graph_bytes_fuzzer: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  Graph g = GraphFromBytes(absl::MakeConstSpan(data, size), 256);
  if (!Verify(g).ok()) Fail("decoded graph fails Verify");
  absl::StatusOr<Graph> back = ReadGraphJson(WriteGraphJson(g));
  if (!back.ok() || !(*back == g)) Fail("JSON round trip is not exact");
  // Extract the middle third of the compute nodes as a subgraph.
  std::vector<NodeId> middle;
  int64_t i = 0;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kOutput && n.op() != Op::kPlaceholder && i++ % 3 == 1) middle.push_back(id);
  }
  absl::StatusOr<Graph> sub = ExtractSubgraph(g, middle);
  if (!sub.ok()) Fail("ExtractSubgraph failed");
  if (!Verify(*sub).ok()) Fail("extracted subgraph fails Verify");
  for (NodeId id : g.OrderVector()) {
    const Node& n = g.node(id);
    if ((n.op() == Op::kCallFunction || n.op() == Op::kCallMethod) && n.users().empty()) {
      if (!g.Erase(id).ok()) Fail("Erase of an unread node failed");
    }
  }
  if (!Verify(g).ok()) Fail("graph invalid after erasing unread nodes");
  return 0;
}
