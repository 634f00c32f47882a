// ZeRO-3 with the forward and backward on (fake) CUDA devices: ranks hold 1/world of the
// parameters, and after K steps the gathered parameters match one CPU process on the whole
// batch, with the collectives in NCCL on the devices (ranks as threads; dc.wait_allgather a
// device-side wait) or in Gloo staged through the host (ranks as processes). Every buffer
// use is ordered (the fake's race detector), gathered buffers included, and no step
// synchronises the whole device.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/fake_gpu_api.h"
#include "runtime/cuda/testing/fake_ranks.h"
#include "runtime/testing/parallel.h"
#include "runtime/train/zero3.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

constexpr int kSteps = 3;

OptimizerOptions Sgd() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.05;
  return o;
}

absl::StatusOr<AotPair> Scheduled(AotPair pair, const std::string& scheduler, int world) {
  SchedulerOptions so;
  so.collectives.world_size = world;
  so.record_trace = false;
  for (auto [g, kind] : {std::pair{&pair.forward, GraphKind::kForward},
                         std::pair{&pair.backward, GraphKind::kBackward}}) {
    absl::StatusOr<bool> inserted = Zero3Insertion(kind).Run(g);
    if (!inserted.ok()) return inserted.status();
    absl::StatusOr<ScheduleReport> r = RunScheduler(scheduler, g, so);
    if (!r.ok()) return r.status();
  }
  return pair;
}

// Trains rank `rank` on its device with `comm` under every scheduler; "" when its gathered
// parameters match one process each time.
std::string TrainRank(const ParallelCase& c, int rank, int size, FakeGpuApi& api, CudaDevice& dev,
                      Communicator& comm) {
  KernelRegistry kernels = CudaKernels(dev);
  for (const char* scheduler : {"lookahead", "simple_prefetch"}) {
    absl::StatusOr<AotPair> pair = Scheduled(c.local, scheduler, size);
    if (!pair.ok()) return std::string(pair.status().message());
    Zero3Options o;
    o.optimizer = Sgd();
    o.device = &dev;
    o.kernels = &kernels;
    o.timeout = absl::Seconds(20);
    absl::StatusOr<std::unique_ptr<Zero3Trainer>> t = Zero3Trainer::Create(*pair, c.init, &comm, o);
    if (!t.ok()) return std::string(t.status().message());
    SyntheticTask task(c.global.forward, 3);
    for (int k = 0; k < kSteps; ++k) {
      absl::StatusOr<TensorMap> mine = ShardRows(*task.Batch(k), rank, size);
      if (!mine.ok()) return std::string(mine.status().message());
      absl::StatusOr<StepResult> s = (*t)->Step(*mine);
      if (!s.ok()) return std::string(s.status().message());
      if (s->allgathers == 0 || s->reduce_scatters == 0) return "no collectives ran";
      if (s->forward_peak_bytes != (*t)->simulated_forward_peak_bytes() &&
          std::abs(s->forward_peak_bytes - (*t)->simulated_forward_peak_bytes()) >
              0.1 * (*t)->simulated_forward_peak_bytes()) {
        return "the forward's measured peak is not the simulated one";
      }
    }
    absl::StatusOr<TensorMap> got = (*t)->GatherParams();
    if (!got.ok()) return std::string(got.status().message());
    const std::string diff = CompareParams(*got, c.want, 1e-4);
    if (!diff.empty()) return std::string(scheduler) + ": " + diff;
  }
  std::string problems;
  if (absl::Status s = dev.Synchronize(); !s.ok()) problems += std::string(s.message());
  if (!api.violations().empty()) problems += absl::StrJoin(api.violations(), "\n");
  if (api.device_synchronizations() != 0) problems += " the device was synchronised";
  return problems;
}

TEST(Zero3CudaTest, NcclOnDevicesMatchesOneProcess) {
  const int size = 2;
  absl::StatusOr<ParallelCase> c = MakeParallelCase("gpt2", 2, size, kSteps, Sgd());
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> diffs =
      RunFakeNcclRanks(size, [&](int r, FakeGpuApi& api, CudaDevice& dev, Communicator& comm) {
        return TrainRank(*c, r, size, api, dev, comm);
      });
  for (int r = 0; r < size; ++r) EXPECT_EQ(diffs[r], "") << "rank " << r;
}

TEST(Zero3CudaTest, GlooThroughTheHostMatchesOneProcess) {
  const int size = 2;
  absl::StatusOr<ParallelCase> c = MakeParallelCase("gpt2", 2, size, kSteps, Sgd());
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<int> codes = RunFakeGlooRanks(
      size, "zero3_cuda_gloo", [&](int r, FakeGpuApi& api, CudaDevice& dev, Communicator& comm) {
        return TrainRank(*c, r, size, api, dev, comm);
      });
  for (int r = 0; r < size; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
}  // namespace overlap
