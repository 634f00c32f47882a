// Copying part of a graph into a new graph (what split_module does for each partition).
//
//   absl::StatusOr<Graph> sub = ExtractSubgraph(g, {fc1, relu});
//
// The copy keeps the chosen nodes in graph order, with their targets, arguments, metadata
// and extras. Each value they read from outside the set becomes a placeholder named like the
// source node, in order of first use; each copied value read outside the set (or by the
// source graph's output) is returned by a new output node: bare when there is one, as a
// list (tuple) when several, as an empty list when none. Parameters owned by copied nodes
// (call_module / get_attr targets, placeholders), and those the copied nodes name in
// meta.grad_of / meta.param, are copied into the new table, in table order (a row whose owner
// is not copied is absent there: a piece of a backward graph keeps its gradients' rows).
#ifndef OVERLAP_GRAPH_SUBGRAPH_H_
#define OVERLAP_GRAPH_SUBGRAPH_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// The metadata a value carries into another graph, where a placeholder or a getitem stands
// for it: its shape, dtype, size, parameter and unknown keys, but not its producer's
// device time, aliasing or gradient role (those belong to the node that computes it).
NodeMeta DescribeValue(const NodeMeta& producer);

// Appends a copy of `src`'s node `id` to `dst`, with every reference rewritten through
// `remap` (source id -> destination id). Fails if a reference has no mapping or the name is
// taken in `dst`. O(size of the node's arguments).
absl::StatusOr<NodeId> CopyNode(const Graph& src, NodeId id,
                                const absl::flat_hash_map<NodeId, NodeId>& remap, Graph* dst);

// The same with the mapping as a function returning kNoNode for "no copy" (for callers
// that keep the mapping in an id-indexed vector).
absl::StatusOr<NodeId> CopyNode(const Graph& src, NodeId id,
                                absl::FunctionRef<NodeId(NodeId)> remap, Graph* dst);

// The chosen nodes as a graph of their own, with inputs and outputs as described above.
// `nodes` must be live, distinct, and not contain the output node. Also reports, through
// the optional out-parameters, the source nodes that became inputs and outputs (in order).
// O(size of the chosen nodes and their users).
absl::StatusOr<Graph> ExtractSubgraph(const Graph& g, absl::Span<const NodeId> nodes,
                                      std::vector<NodeId>* inputs = nullptr,
                                      std::vector<NodeId>* outputs = nullptr);

// The general form: copies `nodes` (graph order) with a placeholder for each of `inputs`
// (in that order, named like the source nodes) and an output node returning `outputs` (bare
// when one, a list when several, an empty list when none). Every value a copied node reads
// must be copied or an input. Parameters owned by copied nodes or by input placeholders, and
// those named by copied nodes' meta.grad_of / meta.param, are copied. This is what
// split_module builds for one partition.
absl::StatusOr<Graph> BuildSubgraph(const Graph& g, absl::Span<const NodeId> nodes,
                                    absl::Span<const NodeId> inputs,
                                    absl::Span<const NodeId> outputs);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_SUBGRAPH_H_
