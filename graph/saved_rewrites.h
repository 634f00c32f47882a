// The step planner's levers on saved tensors: recomputation (activation checkpointing) and
// offloading to host memory, as rewrites of a forward / backward pair that follows the AOT
// calling convention (graph/aot.h), ZeRO-3 ops included. The candidates say what each saved
// group would free and cost; the rewrites apply the chosen ones by name.
//
//   std::vector<std::string> names;
//   for (const RecomputeCandidate& c : RecomputeCandidates(f, b)) names.push_back(c.name);
//   absl::StatusOr<int64_t> done = RecomputeSaved(&f, &b, names);
//
// Both rewrites keep the convention: a saved value's forward output item and backward
// placeholder go (recomputation) or become a host tensor's (offloading) together.
#ifndef OVERLAP_GRAPH_SAVED_REWRITES_H_
#define OVERLAP_GRAPH_SAVED_REWRITES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// Saved tensors the backward can make again instead of receiving them, by the storage they
// live in (saved views, tuple elements and ZeRO-3 releases of one buffer go together: the
// buffer is freed only when all of them go). A group qualifies when its storage's owner and
// everything the copies must read that the backward does not hold are pure call_functions
// (not ZeRO-3 dc.* ops, which pass through when they are releases, nor random ops, nor
// placeholders such as a gathered parameter's), at most 24 nodes. `bytes`: the storage's
// bytes (ValueBytes), what the step stops holding from the forward's last use to the
// backward's; `seconds`: the copies' meta.device_time, what the backward spends again.
struct RecomputeCandidate {
  std::string name;  // the group's first saved value (forward node and backward placeholder)
  int64_t bytes = 0;
  double seconds = 0;
};

// Every group RecomputeSaved can recompute, in the forward's output order, of a pair following
// the AOT calling convention (graphs with ZeRO-3 ops too). O(N + E) per saved value.
std::vector<RecomputeCandidate> RecomputeCandidates(const Graph& forward, const Graph& backward);

// Recomputation (activation checkpointing) of the groups holding the named saved values: the
// forward stops returning them, and the backward, in place of their placeholders, runs copies
// of the forward nodes that make them (named NODE__recomputed, same target, arguments and
// metadata) just before the first reader of any of them. Names are applied in order; one
// whose group is not (or, after earlier ones, no longer) a candidate is skipped. Returns how
// many groups were recomputed. O(N + E) per name.
absl::StatusOr<int64_t> RecomputeSaved(Graph* forward, Graph* backward,
                                       absl::Span<const std::string> names);

// A saved group the step may keep in host memory instead (activation offloading): the
// group's storage is freed on the device once its copies to the host have finished, and the
// backward copies each saved value back before its first reader. A group qualifies when its
// root is a call_function other than a dc.* op, or an input placeholder (data: no
// meta.param, no parameter-table row, not gathered) of more than 0 bytes (ValueBytes), and
// each member takes more than 0 bytes (a saved parameter is gathered again, not offloaded).
// `bytes`: the root's bytes, what the device stops holding between the copies;
// `copy_bytes`: the members' bytes summed, what each direction moves.
struct OffloadCandidate {
  std::string name;  // the group's first saved value
  int64_t bytes = 0;
  int64_t copy_bytes = 0;
};

// Every group OffloadSaved can offload, in the forward's output order, of a pair following
// the AOT calling convention (graphs with ZeRO-3 ops too). O(N + E).
std::vector<OffloadCandidate> OffloadCandidates(const Graph& forward, const Graph& backward);

// Offloading of the groups holding the named saved values: for each member m, the forward
// runs H = dc.offload_tensor(m, 0, id) right after m and returns H (named m__host) in m's
// place, and dc.wait_offload(H, 0, id) (m__offloaded, read by nothing) before its output
// node; the backward's placeholder becomes H's (renamed m__host: a host tensor), and
// R = dc.reload_tensor(H, 1, id) (m__reload) then W = dc.wait_reload(R, 1, id)
// (m__reloaded) run just before its first reader, which reads W. `id`s are fresh in the
// pair. A schedule places them (schedule/host_copies.h's PlaceHostCopies); the simulator runs them
// on the host link (simulator.h). Names are applied in order; one whose group is not (or no longer)
// a candidate is skipped. Returns how many groups were offloaded. O(N + E) per name.
absl::StatusOr<int64_t> OffloadSaved(Graph* forward, Graph* backward,
                                     absl::Span<const std::string> names);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_SAVED_REWRITES_H_
