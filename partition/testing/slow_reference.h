// A slow, obviously-correct DDPOptimizer (reference mode) and split_module, written straight
// from docs/ddp-optimizer.md for differential testing of the fast ones
// (partition/buckets.h, partition/split.h). Everything is by node name and by linear
// scans; quadratic time is fine here, clarity is the point. Test tree only.
#ifndef OVERLAP_PARTITION_TESTING_SLOW_REFERENCE_H_
#define OVERLAP_PARTITION_TESTING_SLOW_REFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "partition/ddp_partitioner.h"

namespace overlap::slow {

struct Bucket {
  int64_t size = 0;
  std::vector<std::string> params;  // in the order counted (reverse walk)
  std::vector<std::string> nodes;   // node names, graph order
};

// Bucketing rules B1-B7 of docs/ddp-optimizer.md: the buckets in forward order.
std::vector<Bucket> ReferenceBuckets(const Graph& g, int64_t bucket_cap, int64_t first_cap);

struct Piece {
  int partition = 0;
  std::vector<std::string> nodes;    // graph order
  std::vector<std::string> inputs;   // first-use order
  std::vector<std::string> outputs;  // first-use order
};

struct Split {
  std::vector<Piece> pieces;    // ascending partition
  std::vector<int> call_order;  // partitions, smallest ready first
};

// Split rules S1-S6 of docs/ddp-optimizer.md: split_module semantics over the buckets' node lists.
Split SplitByBuckets(const Graph& g, const std::vector<Bucket>& buckets);

// Runs the slow reference on `g` with `r`'s caps and returns the first difference from the
// fast reference-mode result `r` (buckets: sizes, names, nodes; pieces: nodes, inputs,
// outputs; call order), or OK.
absl::Status CompareReferenceMode(const Graph& g, const PartitionResult& r);

}  // namespace overlap::slow

#endif  // OVERLAP_PARTITION_TESTING_SLOW_REFERENCE_H_
