// What `overlap inspect` reports about a graph: node counts by op, the parameter table
// (entries, unique storages, elements, bytes, tied groups, frozen / ignored), the total
// device time, and the critical path (the longest chain of data dependencies by
// device_time: no schedule on any number of streams can finish the forward faster).
#ifndef OVERLAP_GRAPH_SUMMARY_H_
#define OVERLAP_GRAPH_SUMMARY_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace overlap {

struct GraphSummary {
  int64_t nodes = 0;
  std::array<int64_t, 6> nodes_by_op{};  // indexed by Op
  int64_t param_entries = 0;             // rows of the parameter table
  int64_t unique_storages = 0;           // tied rows counted once
  int64_t param_elements = 0;            // elements over unique storages (the model size)
  int64_t param_bytes = 0;               // bytes over unique storages
  int64_t trainable_bytes = 0;           // requires_grad and not ddp_ignored, unique storages
  std::map<std::string, int64_t> param_bytes_by_dtype;
  int64_t frozen = 0;   // rows with requires_grad false
  int64_t absent = 0;   // rows of a lifted graph's whole-model table it does not read (graph.h)
  int64_t ignored = 0;  // rows with ddp_ignored
  std::vector<std::vector<std::string>> tied_groups;  // parameter names per shared storage
  int64_t tensor_bytes = 0;        // sum of the values' bytes (ValueBytes, graph/value_bytes.h)
  int64_t nodes_without_time = 0;  // non-placeholder nodes lacking meta.device_time
  double device_time = 0;          // sum of meta.device_time
  double critical_path_time = 0;
  std::vector<NodeId> critical_path;  // first to last
};

// Summarises a graph that passes Verify(). O(N + E + P).
GraphSummary Summarize(const Graph& g);

// Sum of elements over unique parameter storages (tied weights once). Uses the shape when
// given, else bytes / dtype size. O(P).
int64_t CountParameters(const Graph& g);

// The human-readable report `overlap inspect` prints.
std::string FormatSummary(const Graph& g, const GraphSummary& s);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_SUMMARY_H_
