// A picture of one simulated step (simulator.h) as SVG: the compute and communication
// streams (and the host link, when offloaded tensors move over it) as a Gantt chart, above
// the memory curve, with the peak marked and the budget as a
// line when there is one. Self-contained (no scripts, no external fonts); opens in any
// browser.
//
//   absl::StatusOr<SimulationResult> r = Simulate(g, g.OrderVector());
//   TimelineSvgOptions o;
//   o.title = "gpt2 forward, lookahead";
//   std::string svg = TimelineSvg(g, *r, o);
//
// Large steps stay small: intervals closer than half a pixel on one stream merge into one
// bar (per kind: compute, allgather, reduce-scatter; recomputed nodes, offloads and reloads
// in colours of their own), and the memory curve keeps each pixel
// column's first, lowest, highest and last values, so the file is O(width), not O(N).
#ifndef OVERLAP_SCHEDULE_TIMELINE_SVG_H_
#define OVERLAP_SCHEDULE_TIMELINE_SVG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "graph/graph.h"
#include "schedule/simulator.h"
#include "schedule/step_plan.h"

namespace overlap {

// How the picture is drawn.
struct TimelineSvgOptions {
  std::string title;                    // top line; empty: none
  std::optional<int64_t> budget_bytes;  // drawn as a dashed line on the memory curve
  int width_px = 1200;                  // plot width; >= 100
};

// The SVG of `r` (which must carry its trace: SimulationOptions::record_trace) for graph `g`.
// Bars carry the node's name as a tooltip when they stand for one node. O(events + memory
// changes + width).
std::string TimelineSvg(const Graph& g, const SimulationResult& r,
                        const TimelineSvgOptions& options = {});

// A training step (step_plan.h) as one picture: the forward's bars and memory, then the
// backward's from the forward's end, a dashed line at the boundary, each graph's curve with
// the residents only the other gathers added (so its top is the step's peak), and the
// resident parameters' bytes as a band along the bottom. Both simulations must carry their
// traces. O(events + memory changes + width).
std::string StepTimelineSvg(const Graph& forward, const Graph& backward, const StepSimulation& s,
                            const TimelineSvgOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_SCHEDULE_TIMELINE_SVG_H_
