#include "runtime/job/job_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/size.h"

namespace overlap {

std::string FormatFraction(double x) { return absl::StrFormat("%.1f%%", 100 * x); }

std::string FormatRankMemory(int rank, const JobSummary& s, Strategy strategy) {
  int64_t peak = 0;
  for (const StepReport& r : s.steps) peak = std::max(peak, r.peak_bytes);
  std::string memory = absl::StrCat("rank ", rank, ": peak of graph values ", FormatBytes(peak));
  // With several schedulers trained, the peak is the largest of theirs, beside the largest
  // simulated one (each scheduler's own pair is in its comparison row).
  int64_t simulated = s.simulated_peak_bytes;
  for (const AlgorithmTiming& t : s.comparison) {
    simulated = std::max(simulated, t.simulated_peak_bytes);
  }
  if (simulated >= 0) {
    absl::StrAppend(
        &memory, " (simulated ", FormatBytes(simulated), ", ",
        absl::StrFormat("%+.1f%%", simulated > 0 ? 100.0 * (peak - simulated) / simulated : 0.0),
        ")");
  }
  if (s.budget_bytes) {
    absl::StrAppend(&memory, ", budget ", FormatBytes(*s.budget_bytes),
                    peak <= *s.budget_bytes ? " (within)" : " (EXCEEDED)");
  }
  if (strategy == Strategy::kZero3) {
    absl::StrAppend(&memory, "; apart: shards ", FormatBytes(s.state.params), ", optimizer ",
                    FormatBytes(s.state.optimizer), ", communication buffers ",
                    FormatBytes(s.state.buffers));
  }
  return memory;
}

std::string FormatJobTotals(const JobSummary& s, const JobReportFacts& facts) {
  double comm = 0, exposed = 0, seconds = 0;
  for (const StepReport& r : s.steps) {
    comm += r.comm_s;
    exposed += r.exposed_s;
    seconds += r.seconds;
  }
  const size_t k = s.steps.size();
  const std::string loss =
      facts.replayed || k == 0
          ? std::string("timed replay (no loss)")
          : absl::StrFormat("loss %.4f -> %.4f", s.steps.front().loss, s.steps.back().loss);
  std::string how =
      facts.strategy == Strategy::kDdp
          ? absl::StrCat("; ", s.buckets, " buckets, cap ", FormatBytes(s.bucket_cap_bytes))
          : absl::StrCat("; ", s.algorithm, ", ", s.buckets, " reduce-scatter buckets");
  std::string predicted_hidden;
  if (s.predicted_step_s > 0) {
    absl::StrAppend(&how, ", predicted step ", FormatSeconds(s.predicted_step_s),
                    facts.prediction_basis);
    if (s.comparison.size() == 1) {  // several: each row has its own (the table)
      predicted_hidden =
          absl::StrCat(", predicted ", FormatFraction(s.comparison.back().predicted_hidden));
    }
  }
  return absl::StrFormat(
      "%d steps, %s per step; %s; hidden communication %s (%s of %s exposed%s)%s\n", k,
      FormatSeconds(k > 0 ? seconds / k : 0), loss,
      FormatFraction(comm > 0 ? 1 - exposed / comm : 1), FormatSeconds(exposed),
      FormatSeconds(comm), predicted_hidden, how);
}

std::string FormatSchedulerComparison(const JobSummary& s, bool replayed) {
  // One program's row only where its prediction is of this machine (the totals line has
  // the cost model's figure).
  if (s.comparison.empty() || (s.comparison.size() == 1 && !replayed && !s.profiled)) return "";
  std::string out;
  if (!replayed && !s.profiled) {
    out +=
        "predicted: the schedule on the cost model's device (the graphs' device_time) with "
        "the fitted collectives; measured: this machine's kernels, so the ratio is mostly the "
        "gap between the two (`--time-scale` replays the device times here instead)\n";
  }
  const CollectiveModel& m = s.collectives;
  const bool fit = m.allgather.bandwidth_bytes_per_s > 0;
  // Three significant digits: a rate-limited link's 0.00625 GB/s must not print as 0.00.
  std::string contention =
      m.compute_slowdown > 0
          ? absl::StrFormat("; compute x%.2f beside collectives", 1 + m.compute_slowdown)
          : "";
  if (m.busy_start_s > 0) {
    absl::StrAppendFormat(&contention, "; +%.0f us a collective started beside compute",
                          m.busy_start_s * 1e6);
  }
  absl::StrAppendFormat(
      &out, "%-16s %12s %12s %7s %9s %8s  (allgather: %.0f us + B / %.3g GB/s%s)\n", "algorithm",
      "predicted", "measured", "ratio", "predicted", "hidden",
      (fit ? m.allgather.latency_s : m.latency_s) * 1e6,
      (fit ? m.allgather.bandwidth_bytes_per_s : m.bandwidth_bytes_per_s) / 1e9, contention);
  for (const AlgorithmTiming& t : s.comparison) {
    absl::StrAppendFormat(&out, "%-16s %12s %12s %7.2f %9s %8s\n", t.algorithm,
                          FormatSeconds(t.predicted_step_s), FormatSeconds(t.measured_step_s),
                          t.predicted_step_s > 0 ? t.measured_step_s / t.predicted_step_s : 0.0,
                          FormatFraction(t.predicted_hidden), FormatFraction(t.hidden));
  }
  return out;
}

}  // namespace overlap
