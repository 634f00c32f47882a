// The DDP partitioner pass: buckets a forward graph as DDP buckets gradients, splits it at
// the bucket boundaries, and hands each piece to a backend compiler.
//
// This is the C++ counterpart of PyTorch's DDPOptimizer (docs/ddp-optimizer.md;
// docs/partition.md). Compiler teams link //partition:ddp_partitioner and call it directly:
//
//   PartitionOptions options;
//   options.buckets.mode = PartitionMode::kReference;
//   options.compile = [](const Submodule& s) -> absl::Status { return MyBackend(s.graph); };
//   absl::StatusOr<PartitionResult> r = DdpPartitioner(options).Run(graph);
//   // r->buckets: the bucket table; r->split.outer calls r->split.submodules
//
// The compile hook is called once per submodule, in call order. If it fails on one, that
// piece runs uncompiled (the reference behaves so): the result records compiled = false and
// the error, and the other pieces stay compiled. With one bucket the graph is not split.
// Cost: O(N + E) plus copying the nodes into the pieces.
#ifndef OVERLAP_PARTITION_DDP_PARTITIONER_H_
#define OVERLAP_PARTITION_DDP_PARTITIONER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "partition/buckets.h"
#include "partition/split.h"

namespace overlap {

// Compiles one piece; OK means compiled. Called with the finished, verified subgraph.
using CompileFn = std::function<absl::Status(const Submodule& piece)>;

struct PartitionOptions {
  BucketOptions buckets;
  CompileFn compile;  // optional
};

// What happened to one submodule in the compile hook.
struct CompileOutcome {
  bool attempted = false;  // false when there is no hook
  bool compiled = false;
  std::string error;  // the hook's message when it failed
};

struct PartitionResult {
  BucketOptions options;
  std::vector<Bucket> buckets;
  bool split = false;                    // false when there is one bucket
  SplitGraph pieces;                     // empty unless split
  std::vector<CompileOutcome> compiled;  // parallel to pieces.submodules
};

class DdpPartitioner {
 public:
  explicit DdpPartitioner(PartitionOptions options) : options_(std::move(options)) {}
  static constexpr absl::string_view name() { return "ddp-partitioner"; }

  // Partitions `g`, which must pass Verify(). The result's graphs all pass Verify().
  absl::StatusOr<PartitionResult> Run(const Graph& g) const;

 private:
  PartitionOptions options_;
};

}  // namespace overlap

#endif  // OVERLAP_PARTITION_DDP_PARTITIONER_H_
