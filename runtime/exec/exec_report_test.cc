#include "runtime/exec/exec_report.h"

#include <string>

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(ExecReportTest, InputsLineCountsFilesAndSeeded) {
  ExecInputsReport r;
  r.from_files = 2;
  r.from_seed = 5;
  r.seed = 7;
  EXPECT_EQ(FormatExecInputs(r), "inputs: 2 from files, 5 seeded (seed 7)\n");
}

TEST(ExecReportTest, ReplayLineSaysWhetherPeaksAgree) {
  ExecReplayReport r;
  r.nodes_run = 10;
  r.wall_s = 0.5;
  r.count_only = true;
  r.peak_bytes = 2048;
  r.simulated_peak_bytes = 2048;
  r.final_bytes = 512;
  EXPECT_EQ(FormatExecReplay(r),
            "replayed 10 nodes in 500.000 ms (buffers counted); measured peak 2.00 KiB, "
            "simulated peak 2.00 KiB (world size 1): equal; 512 B live at the end\n");
  r.count_only = false;
  r.simulated_peak_bytes = 1024;
  EXPECT_EQ(FormatExecReplay(r),
            "replayed 10 nodes in 500.000 ms (buffers allocated); measured peak 2.00 KiB, "
            "simulated peak 1.00 KiB (world size 1): DIFFERENT; 512 B live at the end\n");
}

TEST(ExecReportTest, GraphRunListsShownOutputsAndCountsTheRest) {
  GraphRunReport r;
  r.what = "backward";
  r.nodes_run = 3;
  r.wall_s = 2;
  r.peak_bytes = 1024;
  r.simulated_peak_bytes = 1024;
  r.scratch_peak_bytes = 100;
  r.total_peak_bytes = 1124;
  r.shown = {{"grad:fc.weight", "float32[2, 3]", 1.5, 2.25}, {"out", "float64[4]", -1e-7, 3}};
  r.more_outputs = 4;
  EXPECT_EQ(FormatGraphRun(r),
            "backward: 3 nodes in 2.000 s; measured peak 1.00 KiB, simulated peak 1.00 KiB "
            "(world size 1): equal; kernel scratch peak 100 B; both at once 1.10 KiB (1124 "
            "bytes)\n"
            "  grad:fc.weight               float32[2, 3]  sum 1.5  sum|x| 2.25\n"
            "  out                          float64[4]  sum -1e-07  sum|x| 3\n"
            "  ... and 4 more outputs (--save writes them all)\n");
}

TEST(ExecReportTest, GraphRunNamesViewCopies) {
  GraphRunReport r;
  r.what = "forward";
  r.peak_bytes = 2048;
  r.simulated_peak_bytes = 1024;
  r.view_copies = 1;
  r.view_copy_bytes = 1024;
  EXPECT_EQ(FormatGraphRun(r),
            "forward: 0 nodes in 0 s; measured peak 2.00 KiB, simulated peak 1.00 KiB (world "
            "size 1): DIFFERENT; kernel scratch peak 0 B; both at once 0 B (0 bytes); 1 view "
            "node(s) had to copy (1.00 KiB the simulator counts as views: their input's layout "
            "allows no view)\n");
}

TEST(ExecReportTest, RepeatLineNamesTheBackwardOnlyWhenThereIsOne) {
  ExecRepeatReport r;
  r.runs = 3;
  r.forward_s = 0.002;
  r.together_s = 0.002;
  EXPECT_EQ(FormatExecRepeat(r), "repeat: 3 runs, median forward 2.000 ms, together 2.000 ms\n");
  r.backward_s = 0.004;
  r.together_s = 0.006;
  EXPECT_EQ(FormatExecRepeat(r),
            "repeat: 3 runs, median forward 2.000 ms, backward 4.000 ms, together 6.000 ms\n");
}

TEST(ExecReportTest, ProfileSortsOpsByTimeAsMeansPerRun) {
  ExecRepeatReport r;
  r.runs = 2;
  r.forward_s = 1;
  r.together_s = 1;
  r.profile = {{"aten.add.Tensor", 0.002, 4}, {"aten.mm.default", 0.006, 2}};
  EXPECT_EQ(FormatExecRepeat(r),
            "repeat: 2 runs, median forward 1.000 s, together 1.000 s\n"
            "profile: time per run by op (mean over 2 runs):\n"
            "  aten.mm.default                                3.000 ms  75.0%  1 calls\n"
            "  aten.add.Tensor                                1.000 ms  25.0%  2 calls\n");
}

TEST(ExecReportTest, ProfileShowsTwentyOps) {
  ExecRepeatReport r;
  r.runs = 1;
  for (int i = 0; i < 25; ++i) r.profile.push_back({std::to_string(i), 1.0 + i, 1});
  const std::string s = FormatExecRepeat(r);
  EXPECT_NE(s.find("\n  24 "), std::string::npos);
  EXPECT_NE(s.find("\n  5 "), std::string::npos);
  EXPECT_EQ(s.find("\n  4 "), std::string::npos);
}

TEST(ExecReportTest, SavedLineNamesThePath) {
  EXPECT_EQ(FormatExecSaved(3, "/tmp/out.safetensors"),
            "wrote 3 tensors to /tmp/out.safetensors\n");
}

}  // namespace
}  // namespace overlap
