#include "runtime/exec/exec_report.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/size.h"

namespace overlap {

std::string FormatExecInputs(const ExecInputsReport& r) {
  return absl::StrFormat("inputs: %d from files, %d seeded (seed %u)\n", r.from_files, r.from_seed,
                         r.seed);
}

std::string FormatExecReplay(const ExecReplayReport& r) {
  return absl::StrFormat(
      "replayed %d nodes in %s (%s); measured peak %s, simulated peak %s (world size 1): %s; %s "
      "live at the end\n",
      r.nodes_run, FormatSeconds(r.wall_s), r.count_only ? "buffers counted" : "buffers allocated",
      FormatBytes(r.peak_bytes), FormatBytes(r.simulated_peak_bytes),
      r.peak_bytes == r.simulated_peak_bytes ? "equal" : "DIFFERENT", FormatBytes(r.final_bytes));
}

std::string FormatGraphRun(const GraphRunReport& r) {
  std::string s = absl::StrCat(
      r.what, ": ", r.nodes_run, " nodes in ", FormatSeconds(r.wall_s), "; measured peak ",
      FormatBytes(r.peak_bytes), ", simulated peak ", FormatBytes(r.simulated_peak_bytes),
      " (world size 1): ", r.peak_bytes == r.simulated_peak_bytes ? "equal" : "DIFFERENT",
      "; kernel scratch peak ", FormatBytes(r.scratch_peak_bytes), "; both at once ",
      FormatBytes(r.total_peak_bytes), " (", r.total_peak_bytes, " bytes)");
  if (r.view_copies > 0) {
    absl::StrAppend(&s, "; ", r.view_copies, " view node(s) had to copy (",
                    FormatBytes(r.view_copy_bytes),
                    " the simulator counts as views: their input's layout allows no view)");
  }
  s += "\n";
  for (const OutputChecksum& o : r.shown) {
    absl::StrAppendFormat(&s, "  %-28s %s  sum %.6g  sum|x| %.6g\n", o.name, o.tensor, o.sum,
                          o.abs_sum);
  }
  if (r.more_outputs > 0) {
    absl::StrAppend(&s, "  ... and ", r.more_outputs, " more outputs (--save writes them all)\n");
  }
  return s;
}

std::string FormatExecRepeat(const ExecRepeatReport& r) {
  std::string s =
      absl::StrCat("repeat: ", r.runs, " runs, median forward ", FormatSeconds(r.forward_s),
                   r.backward_s ? absl::StrCat(", backward ", FormatSeconds(*r.backward_s)) : "",
                   ", together ", FormatSeconds(r.together_s), "\n");
  if (r.profile.empty()) return s;
  std::vector<OpTimeRow> ops = r.profile;
  std::sort(ops.begin(), ops.end(),
            [](const OpTimeRow& a, const OpTimeRow& b) { return a.s > b.s; });
  double total = 0;
  for (const OpTimeRow& op : ops) total += op.s;
  const int64_t runs = std::max<int64_t>(r.runs, 1);
  absl::StrAppend(&s, "profile: time per run by op (mean over ", r.runs, " runs):\n");
  for (size_t i = 0; i < ops.size() && i < 20; ++i) {
    absl::StrAppendFormat(&s, "  %-44s %10s %5.1f%%  %d calls\n", ops[i].op,
                          FormatSeconds(ops[i].s / runs), 100 * ops[i].s / std::max(total, 1e-30),
                          ops[i].calls / runs);
  }
  return s;
}

std::string FormatExecSaved(int64_t tensors, const std::string& path) {
  return absl::StrCat("wrote ", tensors, " tensors to ", path, "\n");
}

}  // namespace overlap
