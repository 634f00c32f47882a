#include "runtime/job/job_report.h"

#include <string>

#include "gtest/gtest.h"

namespace overlap {
namespace {

JobSummary TwoSteps() {
  JobSummary s;
  StepReport a;
  a.step = 1;
  a.loss = 0.5;
  a.seconds = 0.010;
  a.comm_s = 0.004;
  a.exposed_s = 0.001;
  a.peak_bytes = 2048;
  StepReport b = a;
  b.step = 2;
  b.loss = 0.25;
  b.peak_bytes = 4096;
  s.steps = {a, b};
  s.simulated_peak_bytes = 4096;
  s.buckets = 3;
  s.bucket_cap_bytes = 1 << 20;
  return s;
}

TEST(JobReportTest, RankMemoryLine) {
  JobSummary s = TwoSteps();
  EXPECT_EQ(FormatRankMemory(0, s, Strategy::kDdp),
            "rank 0: peak of graph values 4.00 KiB (simulated 4.00 KiB, +0.0%)");
  s.budget_bytes = 3000;
  s.state.params = 1024;
  EXPECT_EQ(FormatRankMemory(1, s, Strategy::kZero3),
            "rank 1: peak of graph values 4.00 KiB (simulated 4.00 KiB, +0.0%), budget 2.93 KiB "
            "(EXCEEDED); apart: shards 1.00 KiB, optimizer 0 B, communication buffers 0 B");
}

TEST(JobReportTest, TotalsLine) {
  JobSummary s = TwoSteps();
  JobReportFacts ddp;
  EXPECT_EQ(FormatJobTotals(s, ddp),
            "2 steps, 10.000 ms per step; loss 0.5000 -> 0.2500; hidden communication 75.0% "
            "(2.000 ms of 8.000 ms exposed); 3 buckets, cap 1.00 MiB\n");
  JobReportFacts zero3;
  zero3.strategy = Strategy::kZero3;
  zero3.replayed = true;
  zero3.prediction_basis = " (basis)";
  s.algorithm = "lookahead";
  s.predicted_step_s = 0.001;
  EXPECT_EQ(FormatJobTotals(s, zero3),
            "2 steps, 10.000 ms per step; timed replay (no loss); hidden communication 75.0% "
            "(2.000 ms of 8.000 ms exposed); lookahead, 3 reduce-scatter buckets, predicted "
            "step 1.000 ms (basis)\n");
  // With the trained program's row, its predicted hidden fraction; DDP predicts too.
  AlgorithmTiming t;
  t.predicted_hidden = 0.625;
  s.comparison = {t};
  ddp.prediction_basis = " (profiled)";
  EXPECT_EQ(FormatJobTotals(s, ddp),
            "2 steps, 10.000 ms per step; loss 0.5000 -> 0.2500; hidden communication 75.0% "
            "(2.000 ms of 8.000 ms exposed, predicted 62.5%); 3 buckets, cap 1.00 MiB, "
            "predicted step 1.000 ms (profiled)\n");
}

TEST(JobReportTest, ComparisonWithSeveralSchedulersOrAPredictionOfThisMachine) {
  JobSummary s = TwoSteps();
  EXPECT_EQ(FormatSchedulerComparison(s, false), "");
  s.comparison.resize(1);
  EXPECT_EQ(FormatSchedulerComparison(s, false), "");  // the cost model's device: the totals
  EXPECT_NE(FormatSchedulerComparison(s, true), "");   // replayed
  s.profiled = true;
  EXPECT_NE(FormatSchedulerComparison(s, false), "");
  s.profiled = false;
  AlgorithmTiming t;
  t.algorithm = "lookahead";
  t.predicted_step_s = 0.002;
  t.measured_step_s = 0.004;
  t.hidden = 0.5;
  t.predicted_hidden = 0.75;
  s.comparison = {t, t};
  const std::string text = FormatSchedulerComparison(s, true);
  EXPECT_EQ(text.find("predicted: the schedule"), std::string::npos);  // replayed: no caveat
  EXPECT_NE(text.find("lookahead            2.000 ms     4.000 ms    2.00     75.0%    50.0%"),
            std::string::npos)
      << text;
  EXPECT_NE(FormatSchedulerComparison(s, false).find("predicted: the schedule"), std::string::npos);
  s.profiled = true;  // this machine's kernels, timed: no caveat either
  EXPECT_EQ(FormatSchedulerComparison(s, false).find("predicted: the schedule"), std::string::npos);
  // A 50 Mbit/s link's fit keeps its digits.
  s.collectives.allgather.latency_s = 100e-6;
  s.collectives.allgather.bandwidth_bytes_per_s = 6.25e6;
  EXPECT_NE(FormatSchedulerComparison(s, true).find("(allgather: 100 us + B / 0.00625 GB/s)"),
            std::string::npos)
      << FormatSchedulerComparison(s, true);
}

}  // namespace
}  // namespace overlap
