// The reports of running one graph (`overlap exec`): each section a plain struct of figures
// that the caller fills from the interpreter's RunResult (interpreter.h) and the replay's
// ReplayResult (replay.h), and its text. The report lives beside those results because it
// names their figures the same way; it depends on neither (no kernel library), so front ends
// print the same lines and its tests build reports by hand.
//
//   ExecInputsReport r;
//   r.from_files = 2;
//   r.from_seed = 5;
//   std::fputs(FormatExecInputs(r).c_str(), stdout);  // "inputs: 2 from files, 5 seeded ..."
#ifndef OVERLAP_RUNTIME_EXEC_EXEC_REPORT_H_
#define OVERLAP_RUNTIME_EXEC_EXEC_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace overlap {

// Where the forward's placeholders came from.
struct ExecInputsReport {
  int64_t from_files = 0;  // given by --weights / --inputs
  int64_t from_seed = 0;   // seeded
  uint64_t seed = 0;
};

// "inputs: F from files, S seeded (seed N)\n". O(1).
std::string FormatExecInputs(const ExecInputsReport& r);

// One replay without kernels (ReplayResult's figures, and how its buffers were kept).
struct ExecReplayReport {
  int64_t nodes_run = 0;
  double wall_s = 0;
  bool count_only = false;  // buffers counted, not allocated
  int64_t peak_bytes = 0;
  int64_t simulated_peak_bytes = 0;
  int64_t final_bytes = 0;
};

// "replayed N nodes in T (buffers allocated|counted); measured peak X, simulated peak Y
// (world size 1): equal|DIFFERENT; Z live at the end\n". O(1).
std::string FormatExecReplay(const ExecReplayReport& r);

// One output's checksum line: its name (grad:<parameter> for a gradient), the tensor's
// description (Tensor::DebugString) and the sums of its elements and of their magnitudes.
struct OutputChecksum {
  std::string name;
  std::string tensor;
  double sum = 0;
  double abs_sum = 0;
};

// One graph's run on the kernels (RunResult's figures) and its first outputs.
struct GraphRunReport {
  std::string what;  // "forward" or "backward"
  int64_t nodes_run = 0;
  double wall_s = 0;
  int64_t peak_bytes = 0;
  int64_t simulated_peak_bytes = 0;
  int64_t scratch_peak_bytes = 0;
  int64_t total_peak_bytes = 0;
  int64_t view_copies = 0;
  int64_t view_copy_bytes = 0;
  std::vector<OutputChecksum> shown;  // the outputs listed, in the output node's order
  int64_t more_outputs = 0;           // the outputs counted beyond them
};

// How many outputs a GraphRunReport lists per graph; the rest are counted.
inline constexpr int64_t kShownOutputs = 12;

// "<what>: N nodes in T; measured peak X, simulated peak Y (world size 1): equal|DIFFERENT;
// kernel scratch peak S; both at once B (b bytes)[; view copies]\n", then a line per shown
// output ("  name  tensor  sum s  sum|x| a") and "  ... and K more outputs ..." when K > 0.
// O(shown).
std::string FormatGraphRun(const GraphRunReport& r);

// One op's time under --profile, summed over its calls in every timed run.
struct OpTimeRow {
  std::string op;  // the call_function target
  double s = 0;
  int64_t calls = 0;
};

// The steady-state timing of `runs` more runs: median seconds, and the profile when taken.
struct ExecRepeatReport {
  int64_t runs = 0;
  double forward_s = 0;
  std::optional<double> backward_s;  // with a backward graph
  double together_s = 0;
  std::vector<OpTimeRow> profile;  // any order; empty without --profile
};

// "repeat: N runs, median forward F[, backward B], together T\n", then with a profile its
// 20 longest ops (mean per run, share of the total, calls per run). O(ops log ops).
std::string FormatExecRepeat(const ExecRepeatReport& r);

// "wrote N tensors to PATH\n". O(1).
std::string FormatExecSaved(int64_t tensors, const std::string& path);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_EXEC_EXEC_REPORT_H_
