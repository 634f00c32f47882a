// A picture of a partition as Graphviz DOT: one cluster per subgraph (= DDP bucket,
// labelled with its bytes and parameters), the forward graph's dataflow edges between
// nodes, placeholders and the output outside the clusters. Render with `dot -Tsvg`.
//
// Graphviz lays out a few thousand nodes in seconds and larger graphs in minutes into
// pictures nobody can read, so graphs above PartitionDotOptions::max_nodes are refused with
// an error that says so (docs/partition.md, "Pictures").
#ifndef OVERLAP_PARTITION_DOT_H_
#define OVERLAP_PARTITION_DOT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "partition/ddp_partitioner.h"

namespace overlap {

// The largest graph PartitionDot draws by default.
inline constexpr int64_t kDefaultDotMaxNodes = 2000;

struct PartitionDotOptions {
  int64_t max_nodes = kDefaultDotMaxNodes;  // more nodes: FailedPrecondition
};

// The DOT text of partition `r` of `g` (the graph DdpPartitioner ran on). FailedPrecondition
// naming the node count and the limit when g has more than options.max_nodes nodes.
// O(N + E).
absl::StatusOr<std::string> PartitionDot(const Graph& g, const PartitionResult& r,
                                         const PartitionDotOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_PARTITION_DOT_H_
