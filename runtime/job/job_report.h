// What `overlap run` prints after a job's steps, as text from the job's own figures
// (JobSummary): each rank's memory line, the job's totals line, the schedulers' comparison
// table. The CLI handler only chooses the stream; the words live here, testable on a summary
// built by hand.
#ifndef OVERLAP_RUNTIME_JOB_JOB_REPORT_H_
#define OVERLAP_RUNTIME_JOB_JOB_REPORT_H_

#include <string>

#include "runtime/job/job.h"

namespace overlap {

// x as a percentage with one decimal ("48.4%").
std::string FormatFraction(double x);

// What the totals line says beside the figures.
struct JobReportFacts {
  Strategy strategy = Strategy::kDdp;
  bool replayed = false;         // timed replay (--time-scale): no loss to report
  std::string prediction_basis;  // ZeRO-3: what the predicted step is of (after the figure)
};

// "rank R: peak of graph values P (simulated S, +x%), budget B (within); apart: ..." (no
// newline): the rank's measured peak beside the largest simulated one, its budget, and
// under ZeRO-3 the state kept apart. O(steps + schedulers).
std::string FormatRankMemory(int rank, const JobSummary& s, Strategy strategy);

// "K steps, T per step; loss a -> b; hidden communication H (E of C exposed); ..." with a
// newline: the job's totals on rank 0. O(steps).
std::string FormatJobTotals(const JobSummary& s, const JobReportFacts& facts);

// The programs' predicted and measured steps and hidden fractions, one row each (a
// scheduler, or "ddp") after a header (and, unless replayed or profiled, a line on what the
// two measure); empty with no row, or one row predicted on the cost model's device.
// O(schedulers).
std::string FormatSchedulerComparison(const JobSummary& s, bool replayed);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_JOB_JOB_REPORT_H_
