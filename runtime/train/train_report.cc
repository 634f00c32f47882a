#include "runtime/train/train_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/size.h"

namespace overlap {

std::string FormatTrainStart(const TrainStartReport& r) {
  return absl::StrFormat(
      "matrix products: %s, %d thread(s); float64 on OpenBLAS %s, %d thread(s)\n"
      "training %s (%s, %s parameters) with %s, lr %g, seed %u: %s\n",
      r.float32_products, r.pool_threads, r.float64_core, r.float64_threads, r.name, r.source,
      FormatCount(r.parameters), r.optimizer, r.lr, r.seed, r.task);
}

std::string FormatTrainStep(int64_t step, double loss, double seconds) {
  return absl::StrFormat("step %d loss %.9g time %s\n", step, loss, FormatSeconds(seconds));
}

std::string FormatTrainSummary(const TrainSummaryReport& r) {
  return absl::StrFormat(
      "%d steps in %s (%s per step); loss %.4f -> %.4f (%.1f%% of the first); peak of graph "
      "values %s\n",
      r.steps, FormatSeconds(r.seconds), FormatSeconds(r.steps > 0 ? r.seconds / r.steps : 0),
      r.first_loss, r.last_loss, r.first_loss != 0 ? 100 * r.last_loss / r.first_loss : 0.0,
      FormatBytes(r.peak_bytes));
}

std::string FormatTrainSaved(int64_t parameters, int64_t buffers, const std::string& path) {
  return absl::StrCat("wrote ", parameters, " parameters",
                      buffers > 0 ? absl::StrCat(" and ", buffers, " buffers") : "", " to ", path,
                      "\n");
}

}  // namespace overlap
