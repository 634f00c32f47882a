// ZeRO-3 op insertion: the first pass of DeepSpeed DeepCompile (docs/deepcompile.md,
// "Insertion rules"), on graphs whose parameters are lifted to placeholders (meta.param).
// The ops themselves are described in zero3_ops.h.
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
// In a backward graph (GraphKind::kBackward), reduce_ds_param_<target> after each node whose
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
#include "graph/graph.h"
#include "schedule/zero3_ops.h"

namespace overlap {

class Zero3Insertion {
 public:
  // A backward graph also gets reduce_grads; the kind is the ops' graph_id argument.
  explicit Zero3Insertion(GraphKind kind) : kind_(kind) {}
  static constexpr absl::string_view name() { return "zero3-insertion"; }

  // Inserts the ops into `g` (which must pass Verify()). Returns whether it changed the
  // graph. An unsupported-graph error (graph/errors.h) naming the first one if a parameter
  // is owned by a module (call_module or get_attr): ZeRO-3 graphs have their parameters
  // lifted. On failure `g` is unchanged (the work is done on a copy).
  absl::StatusOr<bool> Run(Graph* g) const;
  // The same without the copy (half the time on a large graph): on failure `g` is left
  // valid to destroy or assign to, nothing more. For callers that drop `g` on error.
  absl::StatusOr<bool> RunInPlace(Graph* g) const;

 private:
  GraphKind kind_;
};

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_ZERO3_INSERTION_H_
