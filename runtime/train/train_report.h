// The reports of training in one process (`overlap train`): each section a plain struct of
// figures that the caller fills from the Trainer and its StepResults (train.h), and its
// text. The report lives beside the trainer because it names the trainer's figures (steps,
// losses, the peak of graph values); it depends on neither the trainer nor the kernels, so
// its tests build reports by hand.
//
//   std::fputs(FormatTrainStep(1, 2.5, 0.01).c_str(), stdout);  // "step 1 loss 2.5 time ..."
#ifndef OVERLAP_RUNTIME_TRAIN_TRAIN_REPORT_H_
#define OVERLAP_RUNTIME_TRAIN_TRAIN_REPORT_H_

#include <cstdint>
#include <string>

namespace overlap {

// What is trained, on what, before the first step.
struct TrainStartReport {
  // The matrix products (core/blas.h's BlasInfo): float32's library and OpenMP threads,
  // float64's OpenBLAS core and threads.
  std::string float32_products;
  int pool_threads = 1;
  std::string float64_core;
  int float64_threads = 1;
  std::string name;    // the model, or the forward graph's path
  std::string source;  // "AOT pair from files", "tiny preset" or "default preset"
  int64_t parameters = 0;
  std::string optimizer;  // schedule/optimizer.h's OptimizerLabel
  double lr = 0;
  uint64_t seed = 0;
  std::string task;  // the data, in words
};

// "matrix products: ...\n" then "training NAME (SOURCE, P parameters) with OPT, lr L, seed
// S: TASK\n". O(1).
std::string FormatTrainStart(const TrainStartReport& r);

// "step K loss X time T\n" (the loss to 9 significant digits). O(1).
std::string FormatTrainStep(int64_t step, double loss, double seconds);

// The steps taken, their time and losses, the largest peak of graph values of any step.
struct TrainSummaryReport {
  int64_t steps = 0;
  double seconds = 0;  // all steps together
  double first_loss = 0;
  double last_loss = 0;
  int64_t peak_bytes = 0;
};

// "K steps in T (t per step); loss A -> B (R% of the first); peak of graph values P\n".
// O(1).
std::string FormatTrainSummary(const TrainSummaryReport& r);

// "wrote N parameters[ and M buffers] to PATH\n". O(1).
std::string FormatTrainSaved(int64_t parameters, int64_t buffers, const std::string& path);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_TRAIN_REPORT_H_
