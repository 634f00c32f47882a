// Fuzz target: every ZeRO-3 pass on structure-aware random graphs.
// The first byte picks forward / backward insertion, the next four a memory budget; the
// rest decode into a graph (GraphFromBytes). Insertion may only refuse a graph as
// unsupported (module-owned parameters). Then: fast_free equals its reference; every
// scheduler of the registry either leaves a final graph that passes the schedule verifier
// and simulates to its report's figures, or refuses the graph as unsupported (a kwargs
// dependency the baselines cannot see); ours never exceeds a feasible budget and explains
// its choice (one chosen candidate, with the report's figures). Error kinds are told apart
// by graph/errors.h's predicates, never by message text. Any violation aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/errors.h"
#include "graph/random_graph.h"
#include "schedule/fast_free.h"
#include "schedule/schedule_verifier.h"
#include "schedule/scheduler_registry.h"
#include "schedule/simulator.h"
#include "schedule/testing/fast_free_reference.h"
#include "schedule/zero3_insertion.h"

namespace {
[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "schedule_fuzzer: %s\n", what.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  if (size < 5) return 0;
  const int graph_id = data[0] & 1;
  uint32_t budget = 0;
  for (size_t i = 1; i < 5; ++i) budget = budget << 8 | data[i];
  Graph g = GraphFromBytes(absl::MakeConstSpan(data + 5, size - 5), 200);
  absl::StatusOr<bool> inserted = Zero3Insertion(static_cast<GraphKind>(graph_id)).Run(&g);
  if (!inserted.ok()) {
    if (!IsUnsupported(inserted.status())) {
      Fail("insertion failed: " + std::string(inserted.status().message()));
    }
    return 0;
  }
  absl::StatusOr<std::vector<NodeId>> ref = FastFreeScheduleReference(g);
  for (FastFreeOptions::PathSets p :
       {FastFreeOptions::PathSets::kBitsets, FastFreeOptions::PathSets::kCounts}) {
    FastFreeOptions o;
    o.path_sets = p;
    absl::StatusOr<std::vector<NodeId>> fast = FastFreeScheduleWith(g, o);
    if (fast.ok() != ref.ok() || (fast.ok() && *fast != *ref) ||
        (!fast.ok() && (!IsUnsupported(fast.status()) || !IsUnsupported(ref.status())))) {
      Fail("fast_free differs from its reference");
    }
  }
  SchedulerOptions options;
  options.lookahead.budget_bytes = static_cast<int64_t>(budget);
  for (const SchedulerEntry& e : Schedulers()) {
    Graph scheduled = g;
    absl::StatusOr<ScheduleReport> r = RunScheduler(e.name, &scheduled, options);
    if (!r.ok()) {
      if (!IsUnsupported(r.status())) {
        Fail(std::string(e.name) + " failed: " + std::string(r.status().message()));
      }
      continue;
    }
    if (absl::Status s = VerifySchedule(scheduled, r->order); !s.ok()) {
      Fail(std::string(s.message()));
    }
    if (scheduled.OrderVector() != r->order) Fail("the final graph's order is not the report's");
    absl::StatusOr<SimulationResult> again = Simulate(scheduled, r->order);
    if (!again.ok() || again->peak_memory_bytes != r->simulation.peak_memory_bytes ||
        again->step_time_s != r->simulation.step_time_s) {
      Fail(std::string(e.name) + ": the report's figures are not the final graph's");
    }
    if (!r->lookahead) continue;
    const LookaheadResult& ours = *r->lookahead;
    if (ours.feasible && r->simulation.peak_memory_bytes > static_cast<int64_t>(budget)) {
      Fail("ours exceeded its budget");
    }
    if (!ours.feasible && ours.min_feasible_bytes <= static_cast<int64_t>(budget)) {
      Fail("ours reported infeasible below its own smallest feasible budget");
    }
    int chosen = 0;
    for (const LookaheadCandidate& c : ours.candidates) {
      if (c.verdict == CandidateVerdict::kOverBudget && c.peak_memory_bytes <= budget) {
        Fail("a candidate within the budget is explained as over budget");
      }
      if (c.verdict != CandidateVerdict::kChosen) continue;
      ++chosen;
      if (c.peak_memory_bytes != r->simulation.peak_memory_bytes ||
          c.step_time_s != r->simulation.step_time_s) {
        Fail("the chosen candidate's figures are not the final graph's");
      }
    }
    if (chosen != (ours.feasible ? 1 : 0)) Fail("not exactly one chosen candidate");
  }
  return 0;
}
