// Human and machine reports of a partition: the bucket table DDPOptimizer logs (index,
// size in bytes, parameter names) and the partition result JSON of
// docs/format.md ("Result files": "format": "overlap-result").
#ifndef OVERLAP_PARTITION_REPORT_H_
#define OVERLAP_PARTITION_REPORT_H_

#include <string>

#include "graph/graph.h"
#include "partition/bucket_cap.h"
#include "partition/ddp_partitioner.h"

namespace overlap {

// The bucket table, one row per bucket, then the submodules and call order. Parameter
// lists longer than `max_names` are cut with "... N more".
std::string FormatBucketTable(const Graph& g, const PartitionResult& r, int max_names = 4);

// The candidates `--bucket-cap auto` considered, with the predicted exposed time of each.
std::string FormatCapChoice(const CapChoice& c);

// The partition result as deterministic JSON. `cap` (optional) adds `cap_candidates`.
// Default mode adds `bytes_by_dtype` to each bucket; a hook's outcome adds `compiled` /
// `compile_error` to each submodule.
std::string PartitionResultJson(const Graph& g, const PartitionResult& r,
                                const CapChoice* cap = nullptr);

}  // namespace overlap

#endif  // OVERLAP_PARTITION_REPORT_H_
