// Fuzz target: every ZeRO-3 pass on structure-aware random graphs.
// The first byte picks forward / backward insertion, the next four a memory budget; the
// rest decode into a graph (GraphFromBytes). Graphs whose parameters are module-owned are
// rejected by insertion (checked to say so). Then: fast_free equals its reference; every
// scheduler's order passes the schedule verifier or is reported as a kwargs dependency the
// baselines cannot see; the simulator accepts every valid order; ours never exceeds a
// feasible budget. Any violation aborts with its description.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/random_graph.h"
#include "schedule/fast_free.h"
#include "schedule/fast_free_reference.h"
#include "schedule/list_schedule.h"
#include "schedule/lookahead_prefetch.h"
#include "schedule/schedule_verifier.h"
#include "schedule/simple_prefetch.h"
#include "schedule/simulator.h"
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
  absl::StatusOr<bool> inserted = Zero3Insertion(graph_id).Run(&g);
  if (!inserted.ok()) {
    if (std::string(inserted.status().message()).find("is owned by") == std::string::npos) {
      Fail("insertion failed: " + std::string(inserted.status().message()));
    }
    return 0;
  }
  absl::StatusOr<std::vector<NodeId>> fast = FastFreeSchedule(g);
  absl::StatusOr<std::vector<NodeId>> ref = FastFreeScheduleReference(g);
  if (fast.ok() != ref.ok() || (fast.ok() && *fast != *ref))
    Fail("fast_free differs from its reference");
  for (auto* scheduler : {&FastFreeSchedule, &ListSchedule, &SimplePrefetchSchedule}) {
    absl::StatusOr<std::vector<NodeId>> order = (*scheduler)(g);
    if (!order.ok()) {
      const std::string m(order.status().message());
      if (m.find("kwargs") == std::string::npos && m.find("args only") == std::string::npos &&
          m.find("no last use") == std::string::npos) {
        Fail("scheduler failed: " + m);
      }
      continue;
    }
    if (absl::Status s = VerifySchedule(g, *order); !s.ok()) Fail(std::string(s.message()));
    if (!Simulate(g, *order).ok()) Fail("simulator rejected a valid order");
  }
  absl::StatusOr<LookaheadResult> ours = LookaheadPrefetchSchedule(g, static_cast<int64_t>(budget));
  if (!ours.ok()) return 0;  // only a kwargs order problem, shared with the simulator
  if (absl::Status s = VerifySchedule(g, ours->order); !s.ok()) Fail(std::string(s.message()));
  if (ours->feasible && ours->peak_memory_bytes > static_cast<int64_t>(budget))
    Fail("ours exceeded its budget");
  if (!ours->feasible && ours->min_feasible_bytes <= static_cast<int64_t>(budget)) {
    Fail("ours reported infeasible below its own smallest feasible budget");
  }
  return 0;
}
