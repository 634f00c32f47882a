// DDP with the forward and backward on (fake) CUDA devices: N ranks on their shards end K
// steps with the parameters one CPU process reaches on the whole batch, whether the
// gradients are reduced by NCCL on the devices (ranks as threads sharing a fake NCCL
// world) or by Gloo through the host (ranks as forked processes): "two ranks with CUDA
// compute and Gloo collectives" of the GPU check, here without a GPU. Every buffer use is
// ordered (the fake's race detector) and no step synchronises the whole device.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/fake_gpu_api.h"
#include "runtime/cuda/testing/fake_ranks.h"
#include "runtime/testing/parallel.h"
#include "runtime/train/ddp.h"
#include "runtime/train/train.h"

namespace overlap {
namespace {

constexpr int kSteps = 4;

OptimizerOptions Sgd() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.05;
  return o;
}

// Trains rank `rank` of `c` on its device with `comm`; "" when its parameters match.
std::string TrainRank(const ParallelCase& c, int rank, int size, FakeGpuApi& api, CudaDevice& dev,
                      Communicator& comm) {
  KernelRegistry kernels = CudaKernels(dev);
  DdpOptions o;
  o.optimizer = Sgd();
  o.device = &dev;
  o.kernels = &kernels;
  int64_t param_bytes = 0;
  for (const auto& [name, p] : c.init) param_bytes += p.nbytes();
  o.bucket_cap_bytes = param_bytes / 4;  // several buckets
  absl::StatusOr<std::unique_ptr<DdpTrainer>> t = DdpTrainer::Create(c.local, c.init, &comm, o);
  if (!t.ok()) return std::string(t.status().message());
  SyntheticTask task(c.global.forward, 3);
  for (int k = 0; k < kSteps; ++k) {
    absl::StatusOr<TensorMap> mine = ShardRows(*task.Batch(k), rank, size);
    if (!mine.ok()) return std::string(mine.status().message());
    absl::StatusOr<StepResult> s = (*t)->Step(*mine);
    if (!s.ok()) return std::string(s.status().message());
  }
  std::string diff = CompareParams((*t)->params(), c.want, 1e-4);
  absl::Status synced = dev.Synchronize();
  if (!synced.ok()) diff += std::string(synced.message());
  if (!api.violations().empty()) diff += absl::StrJoin(api.violations(), "\n");
  if (api.device_synchronizations() != 0) diff += " the device was synchronised";
  return diff;
}

TEST(DdpCudaTest, NcclOnDevicesMatchesOneProcess) {
  for (const char* model : {"mlp", "gpt2"}) {
    const int size = 2;
    absl::StatusOr<ParallelCase> c = MakeParallelCase(model, 2, size, kSteps, Sgd());
    ASSERT_TRUE(c.ok()) << c.status();
    const std::vector<std::string> diffs =
        RunFakeNcclRanks(size, [&](int r, FakeGpuApi& api, CudaDevice& dev, Communicator& comm) {
          return TrainRank(*c, r, size, api, dev, comm);
        });
    for (int r = 0; r < size; ++r) EXPECT_EQ(diffs[r], "") << model << " rank " << r;
  }
}

TEST(DdpCudaTest, GlooThroughTheHostMatchesOneProcess) {
  const int size = 2;
  absl::StatusOr<ParallelCase> c = MakeParallelCase("gpt2", 2, size, kSteps, Sgd());
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<int> codes = RunFakeGlooRanks(
      size, "ddp_cuda_gloo", [&](int r, FakeGpuApi& api, CudaDevice& dev, Communicator& comm) {
        return TrainRank(*c, r, size, api, dev, comm);
      });
  for (int r = 0; r < size; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
}  // namespace overlap
