// DeepSpeed DeepCompile's fast_free_schedule, efficiently: the same order as
// FastFreeScheduleReference (schedule/testing/fast_free_reference.h, written straight from
// the definition), which tests check differentially on random graphs and on every built-in
// model, in every PathSets mode.
//
// The reference recomputes, every round, each pending allgather's path set and each
// candidate's requirement lists. Here (PathSets::kIntervals, the default) a round costs
// what changed: the allgathers among each node's args-ancestors are interval lists over a
// ranking of the allgathers (contiguous on chains, transformer stacks and trees); a lazy
// min-heap keyed by count + chosen finds the candidates (a count only falls when an
// allgather is chosen); Fenwick trees give each candidate's fields; a reduce or output row
// is pulled when its last unchosen ancestor allgather is chosen, found by a propagation
// that visits each node once. Cost: O((N + E) + A log A) on chains and transformer stacks
// (docs/benchmarks.md records the growth); graphs with many ties in every round (A
// independent parameters) stay O(A^2) as in the reference; graphs whose ancestor sets no
// ranking keeps contiguous fall back to the bitsets or counts below.
#ifndef OVERLAP_SCHEDULE_FAST_FREE_H_
#define OVERLAP_SCHEDULE_FAST_FREE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace overlap {

// How fast_free holds its path sets (the allgathers each target still needs).
struct FastFreeOptions {
  enum class PathSets {
    // Interval lists (above), falling back to kBitsets / kCounts by kAuto's rule when the
    // lists would exceed about 8 entries per node and edge.
    kAuto,
    // The previous implementations, kept as differential oracles and fallbacks: bitsets
    // over the allgathers (A^2 bits; bounded at 4 GiB: beyond, ResourceExhausted),
    // recounted every round, O(A^3 / 64) in all ...
    kBitsets,
    // ... or counts kept by walking each chosen allgather's args-descendants: O(N + E)
    // memory, O(A x N) time at worst. kAuto picks bitsets while they take at most 64 bytes
    // per node (or 16 MiB), counts otherwise.
    kCounts,
    // Interval lists only; when they would exceed their budget, kAuto's fallback anyway.
    kIntervals,
  };
  PathSets path_sets = PathSets::kAuto;
  // Whose rules: the DeepCompile source docs/deepcompile.md restates ("fast_free_schedule"),
  // or DeepSpeed 0.19's (the version tools/requirements.txt pins), which changed two
  // ("Checked against DeepSpeed": R1, every reduce and output item whose path set is empty
  // is scheduled at each round's end, those that need no allgather included; R2, every
  // allgather the chosen list scheduled leaves the path sets). The 0.19 rules run on the
  // bitsets or the counts (kIntervals then means kAuto).
  enum class Rules { kDeepCompile, kDeepSpeed019 };
  Rules rules = Rules::kDeepCompile;
  // DeepSpeed 0.19's scheduler memory budget (`SchedulerMemoryBudget.max_gathered_bytes`):
  // the bytes of gathered parameters resident at once that a round's chosen list may
  // reach, simulated from the rounds before it (a ds_id's gather lives until its last
  // release; a repeated gather while live grows it to the larger size). Each round looks
  // at the dependency tiers in ascending count until one holds a list that fits; when none
  // does, the list with the least overage. Only with Rules::kDeepSpeed019 (InvalidArgument
  // otherwise); < 0: no budget, DeepSpeed's order without one. Costs a copy of the live
  // set per candidate list, and a tier's lists each round until one fits.
  int64_t gathered_budget_bytes = -1;
};

// The fast_free order of `g`; same contract and errors as FastFreeScheduleReference.
absl::StatusOr<std::vector<NodeId>> FastFreeSchedule(const Graph& g);
// The same under DeepSpeed 0.19's rules (FastFreeOptions::Rules::kDeepSpeed019): the order
// DeepSpeed 0.19.8's fast_free_schedule gives without a memory budget.
absl::StatusOr<std::vector<NodeId>> FastFreeScheduleDeepSpeed019(const Graph& g);
// The same with explicit options (the order depends on `rules` and on
// `gathered_budget_bytes`, not on `path_sets`).
absl::StatusOr<std::vector<NodeId>> FastFreeScheduleWith(const Graph& g,
                                                         const FastFreeOptions& options);

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_FAST_FREE_H_
