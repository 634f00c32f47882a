// ZeRO-3 op insertion: the first pass of DeepSpeed DeepCompile (shared/reference/
// deepcompile.md, "Ops inserted into the graph"), on graphs whose parameters are lifted to
// placeholders (meta.param).
//
// For each parameter placeholder with at least one real use:
//   allgather_ds_param_<target>_<ds_id>   after the placeholder; takes over its users except
//                                         the output node (which keeps the raw shard);
//   wait_allgather_ds_param__<target>_<ds_id>  after the allgather; takes over its users;
//   release_ds_param_<target>_<anchor>_<ds_id> after each real use's anchor (its first
//                                         getitem user when it returns a tuple, else the use);
//                                         takes over the anchor's users; n_users = the number
//                                         of real uses. Names clash the FX way (a trailing
//                                         _<n> is incremented), so read ds_id from args[2].
// In a backward graph (graph_id 1), reduce_ds_param_<target> after each node whose
// meta.grad_of names a parameter. Finally the placeholders move to the head, in order.
//
// Real uses are found once, before anything is inserted: the parameter's readers, looking
// through alias ops (meta.aliases_input: the result is a view of its first input), skipping
// the output node, with a reader that reads the value twice counted twice.
// ds_id is the parameter's index in the parameter table, so a forward and a backward graph
// of one model agree. The inserted ops carry the gathered parameter's bytes as tensor_size.
//
// Rule 4: when the placeholder's only non-output user is a down-cast
// (prims.convert_element_type / aten._to_copy to a smaller floating dtype), the cast is
// fused: the allgather gets kwargs {"dtype": <to>} and the smaller size, the cast's users
// read the wait, the cast is erased, and the releases follow the cast's real uses.
//
// Cost: O(N + E) plus O(uses) per parameter.
#ifndef OVERLAP_SCHEDULE_ZERO3_INSERTION_H_
#define OVERLAP_SCHEDULE_ZERO3_INSERTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// Targets of the ZeRO-3 ops (call_function nodes).
inline constexpr absl::string_view kAllgatherTarget = "dc.allgather_param";
inline constexpr absl::string_view kWaitTarget = "dc.wait_allgather";
inline constexpr absl::string_view kReleaseTarget = "dc.release_param";
inline constexpr absl::string_view kReduceTarget = "dc.reduce_grad";

// Small readers shared by the ZeRO-3 passes. Whether `n` is a call_function of `target`.
inline bool IsCallTo(const Node& n, absl::string_view target) {
  return n.op() == Op::kCallFunction && n.target() == target;
}
// args[i] when it is an int (ds_id is args[2], n_users args[3]), else -1.
inline int64_t IntArg(const Node& n, size_t i) {
  return n.args().size() > i && n.args()[i].kind() == Value::Kind::kInt ? n.args()[i].as_int() : -1;
}
// meta.tensor_size, 0 when absent.
inline int64_t SizeOf(const Node& n) { return n.meta().has_tensor_size ? n.meta().tensor_size : 0; }

// Whether the graph already has ZeRO-3 ops (any dc.* call_function).
bool HasZero3Ops(const Graph& g);

// Whether `n` is an allgather marked persistent (kwargs {"persistent": true}): its parameter
// is kept gathered across steps (selective unsharding), so in steady state the allgather
// moves nothing and nothing releases it.
bool IsPersistentAllgather(const Node& n);

// Selective unsharding applied to a graph with ZeRO-3 ops: the allgathers of the `resident`
// ds_ids are marked persistent and their releases are erased (their users read the
// release's input again). Erased ids are dropped from `order` when given. O(N + E).
absl::Status MakeResident(Graph* g, absl::Span<const int64_t> resident,
                          std::vector<NodeId>* order = nullptr);

// Reduce-scatter bucketing: walking `order`, consecutive reduce_grads join one bucket until
// its bytes reach `cap_bytes`, then the next opens; each gets kwargs {"bucket": <index>}
// (the simulator runs a bucket as one collective). cap_bytes <= 0 does nothing. O(N).
absl::Status BucketReduces(Graph* g, absl::Span<const NodeId> order, int64_t cap_bytes);

class Zero3Insertion {
 public:
  // graph_id: 0 for a forward graph, 1 for a backward graph (which also gets reduce_grad).
  explicit Zero3Insertion(int graph_id) : graph_id_(graph_id) {}
  static constexpr absl::string_view name() { return "zero3-insertion"; }

  // Inserts the ops into `g` (which must pass Verify()). Returns whether it changed the
  // graph. Fails, naming the first one, if a parameter is owned by a module (call_module or
  // get_attr): ZeRO-3 graphs have their parameters lifted. On failure `g` is unchanged.
  absl::StatusOr<bool> Run(Graph* g) const;

 private:
  int graph_id_;
};

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_ZERO3_INSERTION_H_
