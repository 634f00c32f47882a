#include "schedule/report.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/json_writer.h"
#include "graph/size.h"
#include "schedule/schedule_verifier.h"

namespace overlap {

int64_t ResidentBytes(const Graph& g, const LookaheadResult& r) {
  int64_t bytes = 0;
  for (int64_t ds : r.resident) {
    if (ds >= 0 && ds < static_cast<int64_t>(g.params().size())) bytes += g.params()[ds].bytes;
  }
  return bytes;
}

std::string FormatScheduleSummary(const Graph& g, const ScheduleReport& r) {
  const SimulationResult& s = r.simulation;
  std::string out = absl::StrFormat(
      "%s: %d nodes; peak gathered %s, peak memory %s, step %s (lower bound %s, exposed "
      "communication %s)\n",
      r.algorithm, r.order.size(), FormatBytes(s.peak_gathered_bytes),
      FormatBytes(s.peak_memory_bytes), FormatSeconds(s.step_time_s),
      FormatSeconds(s.lower_bound_s), FormatSeconds(s.exposed_comm_s));
  if (r.lookahead && r.lookahead->feasible) {
    const LookaheadResult& ours = *r.lookahead;
    if (ours.base == kPrefetchBase) {
      absl::StrAppendFormat(&out, "%s: prefetch k = %d", r.algorithm, ours.lookahead);
    } else {
      absl::StrAppendFormat(&out, "%s: %s's order", r.algorithm, ours.base);
    }
    if (!ours.resident.empty()) {
      absl::StrAppendFormat(&out, "; %d parameters kept resident (%s)", ours.resident.size(),
                            FormatBytes(ResidentBytes(g, ours)));
    }
    if (ours.reduce_bucket_bytes > 0) {
      absl::StrAppend(&out, "; reduce-scatters bucketed at ",
                      FormatBytes(ours.reduce_bucket_bytes));
    }
    out.push_back('\n');
  }
  return out;
}

std::string FormatExplainTable(const ScheduleReport& r, size_t max_rows) {
  if (!r.lookahead) return "";
  const std::vector<LookaheadCandidate>& rows = r.lookahead->candidates;
  // One line per (order, k, reduce cap): its chosen row, else its fastest row within the
  // budget, else its first row; "tried" counts the resident prefixes simulated.
  struct Group {
    size_t best;
    size_t tried;
  };
  std::vector<Group> groups;
  auto same = [&](size_t a, size_t b) {
    return rows[a].base == rows[b].base && rows[a].k == rows[b].k &&
           rows[a].reduce_bucket_bytes == rows[b].reduce_bucket_bytes &&
           rows[a].verdict != CandidateVerdict::kStoppedAtComputeBound &&
           rows[b].verdict != CandidateVerdict::kStoppedAtComputeBound;
  };
  auto rank = [&](size_t i) {  // lower is better
    const LookaheadCandidate& c = rows[i];
    if (c.verdict == CandidateVerdict::kChosen) return std::make_pair(0, 0.0);
    if (c.verdict == CandidateVerdict::kSlower) return std::make_pair(1, c.step_time_s);
    return std::make_pair(2, 0.0);
  };
  size_t chosen_group = SIZE_MAX;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!groups.empty() && same(groups.back().best, i)) {
      ++groups.back().tried;
      if (rank(i) < rank(groups.back().best)) groups.back().best = i;
    } else {
      groups.push_back({i, 1});
    }
    if (rows[i].verdict == CandidateVerdict::kChosen) chosen_group = groups.size() - 1;
  }
  std::string out =
      absl::StrFormat("%-15s  %5s  %12s  %9s  %5s  %14s  %12s  %s\n", "order", "k", "reduce cap",
                      "residents", "tried", "peak memory", "step", "verdict");
  const size_t shown = std::min(groups.size(), std::max<size_t>(max_rows, 1));
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    // The first `shown` lines, and the chosen one wherever it is.
    if (gi >= shown && gi != chosen_group) continue;
    if (gi >= shown && gi == chosen_group && shown > 0) out.append("  ...\n");
    const LookaheadCandidate& c = rows[groups[gi].best];
    const bool simulated = c.verdict != CandidateVerdict::kStoppedAtComputeBound;
    absl::StrAppendFormat(
        &out, "%-15s  %5s  %12s  %9s  %5s  %14s  %12s  %s\n", c.base,
        c.base == kPrefetchBase ? absl::StrCat(c.k) : "-",
        simulated ? (c.reduce_bucket_bytes > 0 ? FormatBytes(c.reduce_bucket_bytes) : "none") : "-",
        simulated ? absl::StrCat(c.residents) : "-",
        simulated ? absl::StrCat(groups[gi].tried) : "-",
        simulated ? FormatBytes(c.peak_memory_bytes) : "-",
        simulated ? FormatSeconds(c.step_time_s) : "-", CandidateVerdictName(c.verdict));
  }
  const size_t left =
      groups.size() - shown - (chosen_group >= shown && chosen_group < groups.size() ? 1 : 0);
  if (left > 0) absl::StrAppendFormat(&out, "(%d more lines not shown)\n", left);
  absl::StrAppendFormat(&out, "%d choices simulated; `--json` lists each\n", rows.size());
  if (!r.lookahead->feasible) {
    absl::StrAppend(&out, "no candidate fits the budget; the smallest feasible budget is ",
                    FormatBytes(r.lookahead->min_feasible_bytes), "\n");
  }
  return out;
}

std::string ScheduleResultJson(const Graph& g, const ScheduleReport& r,
                               const SchedulerOptions& options, const MemoryBudget& budget) {
  std::string json = "{\"format\": \"overlap-result\", \"version\": 1, \"algorithm\": ";
  AppendJsonString(&json, r.algorithm);
  json.append(", \"order\": [");
  for (size_t i = 0; i < r.order.size(); ++i) {
    if (i) json.append(", ");
    AppendJsonString(&json, g.node(r.order[i]).name());
  }
  absl::StrAppend(&json, "], ", SimulationJsonFields(r.simulation), ", \"scheduler_s\": ");
  AppendJsonDouble(&json, r.scheduler_s);
  MemoryBudget b = budget;
  if (!b.budget_bytes) b.budget_bytes = options.lookahead.budget_bytes;
  json.append(MemoryBudgetJsonFields(b, r.simulation.peak_memory_bytes));
  if (r.lookahead) {
    const LookaheadResult& ours = *r.lookahead;
    json.append(", \"base\": ");
    AppendJsonString(&json, ours.base);
    absl::StrAppend(&json, ", \"lookahead\": ", ours.lookahead,
                    ", \"reduce_bucket_bytes\": ", ours.reduce_bucket_bytes,
                    ", \"resident_params\": [");
    for (size_t i = 0; i < ours.resident.size(); ++i) {
      if (i) json.append(", ");
      const int64_t ds = ours.resident[i];
      const bool known = ds >= 0 && ds < static_cast<int64_t>(g.params().size());
      AppendJsonString(&json, known ? g.params()[ds].name : absl::StrCat("ds_id ", ds));
    }
    json.append("], \"candidates\": [");
    for (size_t i = 0; i < ours.candidates.size(); ++i) {
      const LookaheadCandidate& c = ours.candidates[i];
      json.append(i ? ", {\"base\": " : "{\"base\": ");
      AppendJsonString(&json, c.base);
      absl::StrAppend(&json, ", \"k\": ", c.k, ", \"reduce_bucket_bytes\": ", c.reduce_bucket_bytes,
                      ", \"residents\": ", c.residents,
                      ", \"peak_memory_bytes\": ", c.peak_memory_bytes, ", \"step_time_s\": ");
      AppendJsonDouble(&json, c.step_time_s);
      json.append(", \"verdict\": ");
      AppendJsonString(&json, CandidateVerdictName(c.verdict));
      json.push_back('}');
    }
    json.append("]");
    if (!ours.feasible) {
      absl::StrAppend(&json, ", \"min_feasible_bytes\": ", ours.min_feasible_bytes);
    }
  }
  json.append("}\n");
  return json;
}

std::string FormatStepTable(absl::Span<const std::pair<std::string, StepPlan>> plans) {
  std::string out = absl::StrFormat("  %-16s %11s %11s %11s %11s %11s %9s\n", "scheduler", "step",
                                    "forward", "backward", "exposed", "peak", "residents");
  for (const auto& [name, p] : plans) {
    const StepFigures& x = p.simulation.figures;
    absl::StrAppendFormat(&out, "  %-16s %11s %11s %11s %11s %11s %9d %s\n", name,
                          FormatSeconds(x.step_time_s), FormatSeconds(x.forward_time_s),
                          FormatSeconds(x.backward_time_s), FormatSeconds(x.exposed_comm_s),
                          FormatBytes(x.peak_memory_bytes), x.residents,
                          p.fits ? "fits" : "over budget");
  }
  return out;
}

std::string FormatStepSummary(const StepPlan& p) {
  const StepFigures& x = p.simulation.figures;
  std::string out = absl::StrFormat(
      "%s: step %s = forward %s + backward %s; peak %s (forward %s, backward %s); %d resident "
      "parameters (%s)",
      p.algorithm, FormatSeconds(x.step_time_s), FormatSeconds(x.forward_time_s),
      FormatSeconds(x.backward_time_s), FormatBytes(x.peak_memory_bytes),
      FormatBytes(x.forward_peak_bytes), FormatBytes(x.backward_peak_bytes), x.residents,
      FormatBytes(x.resident_bytes));
  if (p.reduce_bucket_bytes > 0) {
    absl::StrAppend(&out, "; reduce-scatter buckets of ", FormatBytes(p.reduce_bucket_bytes));
  }
  if (!p.recomputed.empty()) {
    int64_t bytes = 0;
    double seconds = 0;
    for (const RecomputeCandidate& c : p.recomputed) {
      bytes += c.bytes;
      seconds += c.seconds;
    }
    absl::StrAppend(&out, "; recomputes ", p.recomputed.size(), " saved tensors (",
                    FormatBytes(bytes), " not kept, ", FormatSeconds(seconds), " of compute)");
  }
  if (!p.offloaded.empty()) {
    int64_t bytes = 0;
    for (const OffloadCandidate& c : p.offloaded) bytes += c.bytes;
    absl::StrAppend(&out, "; offloads ", p.offloaded.size(), " saved tensors (", FormatBytes(bytes),
                    " in host memory, ", FormatSeconds(x.host_s), " on the host link)");
  }
  if (p.reduce_waits > 0) {
    absl::StrAppend(&out, "; waits for ", p.reduce_waits,
                    " reduce-scatters before the next gather");
  }
  return out + "\n";
}

std::string FormatStepExplainTable(const StepPlan& p) {
  if (p.candidates.empty()) return "";
  std::string out;
  if (!p.recomputed.empty()) {
    out +=
        "no order fitted with every saved tensor kept: the backward recomputes these (each saved "
        "tensor's cheaper lever; cheapest first, bytes not kept per second; the fewest that "
        "fit):\n"
        "  saved tensor                              bytes     compute\n";
    for (const RecomputeCandidate& c : p.recomputed) {
      absl::StrAppendFormat(&out, "  %-36s %11s %11s\n", c.name, FormatBytes(c.bytes),
                            FormatSeconds(c.seconds));
    }
  }
  if (!p.offloaded.empty()) {
    out +=
        "no order fitted with every saved tensor kept: these live in host memory between the "
        "forward and the backward (offloaded after they are made, reloaded before their first "
        "reader; recomputing them would cost more):\n"
        "  saved tensor                              bytes      copied\n";
    for (const OffloadCandidate& c : p.offloaded) {
      absl::StrAppendFormat(&out, "  %-36s %11s %11s\n", c.name, FormatBytes(c.bytes),
                            FormatBytes(c.copy_bytes));
    }
  }
  if (p.reduce_waits > 0) {
    absl::StrAppendFormat(
        &out,
        "no order fitted with those: compute waits for each reduce-scatter before the next "
        "gather (%d dc.wait_reduce), so gradients and gathered parameters do not meet\n",
        p.reduce_waits);
  }
  out +=
      "ours' resident prefixes (ranked by backward allgather time saved per byte):\n"
      "  residents       bytes  forward peak  backward peak        step  fits\n";
  for (const StepCandidate& c : p.candidates) {
    const bool chosen = p.fits && c.residents == static_cast<int64_t>(p.resident.size());
    absl::StrAppendFormat(
        &out, "  %9d %11s %13s %14s %11s  %s%s\n", c.residents, FormatBytes(c.resident_bytes),
        FormatBytes(c.figures.forward_peak_bytes), FormatBytes(c.figures.backward_peak_bytes),
        FormatSeconds(c.figures.step_time_s), c.fits ? "yes" : "no", chosen ? "  (chosen)" : "");
  }
  return out;
}

}  // namespace overlap
