// The partitioner's invariants (docs/ddp-optimizer.md, "Invariants"), checked from first
// principles: property tests and the fuzzer run this on every partition they make.
#ifndef OVERLAP_PARTITION_INVARIANTS_H_
#define OVERLAP_PARTITION_INVARIANTS_H_

#include "absl/status/status.h"
#include "graph/graph.h"
#include "partition/ddp_partitioner.h"

namespace overlap {

// Returns the first violated invariant, naming it:
//  - every non-placeholder, non-output node is in exactly one bucket, and (when split) every
//    one of them that is not a get_attr is in exactly one subgraph;
//  - buckets are contiguous: in forward order they list those nodes in graph order;
//  - calling the pieces in call order is a valid execution (each input is available);
//  - parameter bytes: reference counts each (node, parameter) use in that node's bucket;
//    default counts each trainable storage that some node uses exactly once;
//  - reference: a bucket exceeds its cap only by the node that closed it;
//  - every subgraph and the outer graph verify, and inlining gives back the original;
//  - default mode: no subgraph without outputs.
// O(N + E + P) plus the inlining.
absl::Status CheckPartitionInvariants(const Graph& g, const PartitionResult& r);

}  // namespace overlap

#endif  // OVERLAP_PARTITION_INVARIANTS_H_
