#include "runtime/train/train_report.h"

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(TrainReportTest, StartNamesTheProductsTheModelAndTheTask) {
  TrainStartReport r;
  r.float32_products = "oneDNN 2.6.3 sgemm (avx2)";
  r.pool_threads = 2;
  r.float64_core = "Haswell";
  r.float64_threads = 1;
  r.name = "mlp";
  r.source = "tiny preset";
  r.parameters = 1234567;
  r.optimizer = "adamw";
  r.lr = 0.001;
  r.seed = 3;
  r.task = "regression onto a fixed linear teacher";
  EXPECT_EQ(FormatTrainStart(r),
            "matrix products: oneDNN 2.6.3 sgemm (avx2), 2 thread(s); float64 on OpenBLAS "
            "Haswell, 1 thread(s)\n"
            "training mlp (tiny preset, 1,234,567 parameters) with adamw, lr 0.001, seed 3: "
            "regression onto a fixed linear teacher\n");
}

TEST(TrainReportTest, StepLineKeepsNineDigitsOfTheLoss) {
  EXPECT_EQ(FormatTrainStep(12, 2.718281828459, 0.0015), "step 12 loss 2.71828183 time 1.500 ms\n");
}

TEST(TrainReportTest, SummaryGivesTheLastLossAsAShareOfTheFirst) {
  TrainSummaryReport r;
  r.steps = 4;
  r.seconds = 2;
  r.first_loss = 2;
  r.last_loss = 0.5;
  r.peak_bytes = 3 << 20;
  EXPECT_EQ(FormatTrainSummary(r),
            "4 steps in 2.000 s (500.000 ms per step); loss 2.0000 -> 0.5000 (25.0% of the "
            "first); peak of graph values 3.00 MiB\n");
  r.first_loss = 0;
  EXPECT_NE(FormatTrainSummary(r).find("(0.0% of the first)"), std::string::npos);
}

TEST(TrainReportTest, SavedLineCountsBuffersOnlyWhenThereAreAny) {
  EXPECT_EQ(FormatTrainSaved(6, 0, "w.safetensors"), "wrote 6 parameters to w.safetensors\n");
  EXPECT_EQ(FormatTrainSaved(6, 2, "w.safetensors"),
            "wrote 6 parameters and 2 buffers to w.safetensors\n");
}

}  // namespace
}  // namespace overlap
