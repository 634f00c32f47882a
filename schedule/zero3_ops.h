// The ZeRO-3 vocabulary: what the dc.* ops are, how to read them, and the kwargs the
// schedulers write on them. Every pass, scheduler, verifier, simulator (and later the
// executor) reads ZeRO-3 ops through this header only; docs/deepcompile.md states the ops'
// meaning.
//
//   %ag   = dc.allgather_param(%p, graph_id, ds_id)            gathers parameter ds_id
//   %w    = dc.wait_allgather(%ag, graph_id, ds_id)            blocks compute until %ag is done
//   %r    = dc.release_param(%use, graph_id, ds_id, n_users)   the n_users-th release frees it
//   %red  = dc.reduce_grad(%grad, graph_id, ds_id)             reduce-scatters a gradient
//
// kwargs written by our passes: {"persistent": true} on an allgather (a resident parameter,
// kept gathered across steps), {"bucket": b} on a reduce_grad (one collective per bucket),
// {"dtype": d} on an allgather that fused a down-cast (insertion rule 4).
//
// All readers are O(1) except where stated (kwargs lookups scan the node's few kwargs).
#ifndef OVERLAP_SCHEDULE_ZERO3_OPS_H_
#define OVERLAP_SCHEDULE_ZERO3_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/dc_ops.h"  // targets, argument positions, IsHostTensor
#include "graph/graph.h"
#include "graph/value_bytes.h"

namespace overlap {

// kwargs our passes write.
inline constexpr absl::string_view kPersistentKwarg = "persistent";
inline constexpr absl::string_view kBucketKwarg = "bucket";
inline constexpr absl::string_view kDtypeKwarg = "dtype";

// Which graph of a training step a ZeRO-3 graph is: the ops' graph_id argument. Backward
// graphs also get reduce_grads.
enum class GraphKind : int { kForward = 0, kBackward = 1 };

// Whether `n` is a call_function of `target`.
inline bool IsCallTo(const Node& n, absl::string_view target) {
  return n.op() == Op::kCallFunction && n.target() == target;
}
inline bool IsAllgather(const Node& n) { return IsCallTo(n, kAllgatherTarget); }
inline bool IsWait(const Node& n) { return IsCallTo(n, kWaitTarget); }
inline bool IsRelease(const Node& n) { return IsCallTo(n, kReleaseTarget); }
inline bool IsReduce(const Node& n) { return IsCallTo(n, kReduceTarget); }
inline bool IsWaitReduce(const Node& n) { return IsCallTo(n, kWaitReduceTarget); }
// The host-memory ops (graph/dc_ops.h): offload to the host, reload, wait for a reload, wait
// for an offload.
inline bool IsOffload(const Node& n) { return IsCallTo(n, kOffloadTarget); }
inline bool IsReload(const Node& n) { return IsCallTo(n, kReloadTarget); }
inline bool IsWaitReload(const Node& n) { return IsCallTo(n, kWaitReloadTarget); }
inline bool IsWaitOffload(const Node& n) { return IsCallTo(n, kWaitOffloadTarget); }
// Whether `n` is any dc.* op (including ones this vocabulary does not name).
bool IsZero3Op(const Node& n);

// args[i] when it is an int, else -1.
inline int64_t IntArg(const Node& n, size_t i) {
  return n.args().size() > i && n.args()[i].kind() == Value::Kind::kInt ? n.args()[i].as_int() : -1;
}
// Whether args[kDsIdArg] is an int (a ds_id may be negative in hand-written graphs; -1 from
// DsId alone does not tell "absent" from "-1").
inline bool HasDsId(const Node& n) {
  return n.args().size() > kDsIdArg && n.args()[kDsIdArg].kind() == Value::Kind::kInt;
}
// The op's ds_id (its parameter's index in the parameter table), -1 when absent.
inline int64_t DsId(const Node& n) { return IntArg(n, kDsIdArg); }
// A release's n_users, -1 when absent.
inline int64_t NUsers(const Node& n) { return IntArg(n, kNUsersArg); }

// The bytes of `n`'s result in a verified graph: meta.tensor_size, else shape x dtype
// (graph/value_bytes.h's VerifiedValueBytes, the one size every memory figure uses).
inline int64_t SizeOf(const Node& n) { return VerifiedValueBytes(n); }
// meta.device_time in seconds, 0 when absent.
inline double TimeOf(const Node& n) {
  return n.meta().has_device_time ? n.meta().device_time : 0.0;
}

// Whether `n` belongs to a backward graph: its graph_id argument is 1 (GraphKind). Ops
// without one count as forward.
inline bool InBackwardGraph(const Node& n) {
  return IntArg(n, kGraphIdArg) == static_cast<int64_t>(GraphKind::kBackward);
}

// Whether `n` hands its args[0]'s storage on instead of owning one (the simulator's memory
// model): a view (meta.aliases_input) or a tuple element (operator.getitem; graph.h's
// SharesInputStorage), a release (returns the tensor it follows), a wait (returns the
// gathered parameter) or a wait for a reload (returns the reloaded tensor).
inline bool HandsOnStorage(const Node& n) {
  return SharesInputStorage(n) || IsRelease(n) || IsWait(n) || IsWaitReload(n);
}
// The node whose storage `n` hands on (its first input), kNoNode when it has none.
inline NodeId HandedOnFrom(const Node& n) { return n.inputs().empty() ? kNoNode : n.inputs()[0]; }

// The memory model's tuple rule, by node id: whether a tuple element (operator.getitem)
// owns its element's bytes instead of handing its tuple's storage on. An element owns them
// when its bytes (SizeOf) are > 0, it is the only getitem of its index, and its tuple is a
// call_function that owns its result (not a view, collective, wait or release) and that
// only getitems of non-negative indices read; when the owned elements' sizes add up to more than
// the tuple's bytes, none of that tuple's does. An owned element's bytes are allocated
// with the tuple (when its node starts) and freed after the element's own last reader; the tuple's
// storage keeps the rest (TupleRemainderBytes), freed after its last reader. So a backward's input
// gradient dies at its last use although its sibling in the tuple, a weight's gradient, is returned
// to the end. The simulator, the reference simulator and the executor's memory plan all follow it.
// O(N).
std::vector<char> OwnedTupleElements(const Graph& g);

// The bytes a tuple node's storage keeps: its bytes (SizeOf) less its owned elements'.
// `owned` is OwnedTupleElements(g). O(users).
int64_t TupleRemainderBytes(const Graph& g, NodeId tuple, const std::vector<char>& owned);

// Whether node `id` is a parameter shard: a placeholder that owns a parameter-table row or
// that an allgather reads as args[0]. Shards are per-rank state, not step memory.
// O(users + 1) expected.
bool IsParameterShard(const Graph& g, NodeId id);

// Whether the graph already has ZeRO-3 ops (any dc.* call_function). O(N).
bool HasZero3Ops(const Graph& g);

// Whether `n` is an allgather marked persistent ({"persistent": true}): its parameter is
// kept gathered across steps (selective unsharding), so in steady state the allgather moves
// nothing and nothing releases it.
bool IsPersistentAllgather(const Node& n);

// A reduce_grad's {"bucket": b} kwarg, or -1 when it has none.
int64_t ReduceBucket(const Node& n);

// The one reduce-scatter bucketing rule: walking reduce_grads in schedule order, each joins
// the open bucket; a bucket closes once its bytes reach the cap, and the next reduce opens
// a new one. Used by BucketReduces (which writes the kwargs) and by the simulator (which
// can bucket without writing them). cap_bytes must be > 0.
class ReduceBucketer {
 public:
  explicit ReduceBucketer(int64_t cap_bytes) : cap_bytes_(cap_bytes) {}
  // The bucket index (0, 1, ...) of the next reduce_grad, of `bytes` bytes.
  int Add(int64_t bytes);
  // How many buckets have been opened.
  int count() const { return next_; }

 private:
  int64_t cap_bytes_;
  int64_t open_bytes_ = 0;
  int open_ = -1;  // -1: none open
  int next_ = 0;
};

// Selective unsharding applied to a graph with ZeRO-3 ops: the allgathers of the `resident`
// ds_ids are marked persistent and their releases are erased (their users read the
// release's input again). Erased ids are dropped from `order` when given. O(N + E).
absl::Status MakeResident(Graph* g, absl::Span<const int64_t> resident,
                          std::vector<NodeId>* order = nullptr);

// Waiting for reductions, a memory lever (the step plan's last): for each reduce_grad, in
// `g`'s order, a dc.wait_reduce of it before the next node that reads a gathered (not
// resident) parameter (none when no such node follows): where a just-in-time order gathers
// that parameter, so it is gathered only once the gradients reduced before it are gone. A wait
// whose reduce-scatter has not been issued yet (its bucket waits for later gradients) does not
// block. Returns how many waits were added. O(N + E).
absl::StatusOr<int64_t> AddReduceWaits(Graph* g);

// Reduce-scatter bucketing applied to a graph: walking `order`, each reduce_grad gets
// kwargs {"bucket": b} by ReduceBucketer's rule at `cap_bytes` (replacing any it had).
// cap_bytes <= 0 does nothing. O(N).
absl::Status BucketReduces(Graph* g, absl::Span<const NodeId> order, int64_t cap_bytes);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_ZERO3_OPS_H_
