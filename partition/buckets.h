// Gradient-bucket assignment of a forward graph, as DDP buckets its allreduces.
//
// Two modes (docs/partition.md explains both and every difference from PyTorch):
//
//   kReference  PyTorch 2.0's DDPOptimizer, reproduced exactly: walk the nodes in reverse,
//               count each call_module's parameters (named "<module>_<local name>") and each
//               get_attr parameter (named by its target) that requires grad and is not
//               ddp_ignored, at every use; open a new bucket before a node when the current
//               one reached bucket_cap (or first_bucket_cap while it is the only one); merge
//               a parameter-free first bucket into the next.
//   kDefault    Better: a new bucket opens only once the current one has a value used outside
//               it (so no subgraph is left without outputs); each storage is counted once, at
//               its first use in forward order (its gradient is complete only when backward
//               reaches that use), so tied weights and modules called twice count once;
//               parameters lifted to placeholders (meta.param) count where a call_function /
//               call_method reads them, named by their parameter name; bytes are reported
//               per dtype (one flat allreduce buffer per dtype).
//   kReference2x PyTorch 2.x's DDPOptimizer (checked against torch 2.14.1's, on graphs
//               torch.compile captures): as kReference, except that a parameter lifted to a
//               placeholder (meta.param) counts at each call_function / call_method that
//               takes it as a top-level positional argument, a module counts once however
//               often it is called, and a new bucket opens only once the current one has a
//               value used outside it (docs/ddp-optimizer.md, "PyTorch 2.x").
//
//   absl::StatusOr<std::vector<Bucket>> b = AssignBuckets(g, BucketOptions{});
//
// Cost: O(N + E + P) time and memory. Deterministic.
#ifndef OVERLAP_PARTITION_BUCKETS_H_
#define OVERLAP_PARTITION_BUCKETS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

enum class PartitionMode { kReference, kDefault, kReference2x };

// "reference" / "default" / "reference-2x", and back (false when unknown).
absl::string_view PartitionModeName(PartitionMode m);
bool ParsePartitionMode(absl::string_view s, PartitionMode* m);

inline constexpr int64_t kDefaultBucketCapBytes = 25 * 1024 * 1024;      // DDP's 25 MiB
inline constexpr int64_t kDefaultFirstBucketCapBytes = 1 * 1024 * 1024;  // DDP's 1 MiB

struct BucketOptions {
  PartitionMode mode = PartitionMode::kDefault;
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  // Must be <= bucket_cap_bytes (InvalidArgument otherwise).
  int64_t first_bucket_cap_bytes = kDefaultFirstBucketCapBytes;
};

struct Bucket {
  int index = 0;                                  // 0 = nearest the inputs
  int64_t size_bytes = 0;                         // counted parameter bytes
  std::vector<std::string> params;                // in the order they were counted
  std::vector<NodeId> nodes;                      // graph order
  std::map<std::string, int64_t> bytes_by_dtype;  // "unknown" when a parameter has no dtype
};

// Assigns every node except placeholders and the output to exactly one bucket; buckets are
// returned in forward order. Fails on negative caps or a first cap above the cap.
absl::StatusOr<std::vector<Bucket>> AssignBuckets(const Graph& g, const BucketOptions& options);

}  // namespace overlap

#endif  // OVERLAP_PARTITION_BUCKETS_H_
