// The real CUDA / NCCL path. Without a usable GPU every test skips, saying why; on a GPU
// (tools/gpu_check.sh) they check what the fake cannot: events really order the streams,
// the pool's counters, NCCL at world size 1 through the communicator, GPU replay's memory.
#include "runtime/cuda/cuda_gpu_api.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/gpu_replay.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/cuda/testing/differential.h"
#include "runtime/exec/interpreter.h"
#include "runtime/train/synthetic.h"
#include "runtime/train/train.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

class CudaGpuApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = CudaGpuApi();
    absl::Status usable = api_->CheckUsable(0);
    if (!usable.ok()) GTEST_SKIP() << "skipped: " << usable.message();
    ASSERT_TRUE(api_->SetDevice(0).ok());
    compute_ = *api_->CreateStream(false);
    comm_ = *api_->CreateStream(true);
  }
  std::unique_ptr<GpuApi> api_;
  GpuStream* compute_ = nullptr;
  GpuStream* comm_ = nullptr;
};

TEST(CudaGpuApiProbeTest, ProbeWorksOnAnyMachine) {
  std::unique_ptr<GpuApi> api = CudaGpuApi();
  absl::StatusOr<GpuInfo> info = api->Probe();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GE(info->runtime_version, 13000);
  EXPECT_GE(info->nccl_version, 22800);
  absl::Status usable = api->CheckUsable(0);
  if (!usable.ok()) {
    EXPECT_EQ(usable.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(usable.message().find("no usable GPU"), std::string::npos) << usable;
  }
}

TEST_F(CudaGpuApiTest, AnEventOrdersTheCommunicationStreamAfterCompute) {
  void* a = *api_->MallocAsync(1 << 20, compute_);
  void* b = *api_->MallocAsync(1 << 20, compute_);
  GpuEvent* e = *api_->CreateEvent();
  ASSERT_TRUE(api_->Spin(compute_, 0.05, {}, {}).ok());
  ASSERT_TRUE(api_->RecordEvent(e, compute_).ok());
  ASSERT_TRUE(api_->StreamWaitEvent(comm_, e).ok());
  GpuEvent* copied = *api_->CreateEvent();
  ASSERT_TRUE(api_->MemcpyAsync(b, a, 1 << 20, comm_).ok());
  ASSERT_TRUE(api_->RecordEvent(copied, comm_).ok());
  // The copy waits for the 50 ms spin: not done right after issue.
  EXPECT_FALSE(*api_->EventDone(copied));
  ASSERT_TRUE(api_->StreamSynchronize(comm_).ok());
  EXPECT_TRUE(*api_->EventDone(copied));
  EXPECT_TRUE(*api_->EventDone(e));
  EXPECT_GE(*api_->PoolUsedHighBytes(), 2 << 20);
  ASSERT_TRUE(api_->FreeAsync(a, compute_).ok());
  ASSERT_TRUE(api_->FreeAsync(b, comm_).ok());
  ASSERT_TRUE(api_->DeviceSynchronize().ok());  // a test, not a step
}

TEST_F(CudaGpuApiTest, GpuReplayAtWorldSizeOneMatchesTheSimulator) {
  NcclOptions o;
  o.api = api_.get();
  o.stream = comm_;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = CreateNcclCommunicator(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  absl::StatusOr<AotPair> pair = BuildAotPair(*BuildModel("gpt2", mo, Preset::kTiny));
  ASSERT_TRUE(pair.ok());
  for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
    Graph g = kind == GraphKind::kForward ? pair->forward : pair->backward;
    ASSERT_TRUE(Zero3Insertion(kind).Run(&g).ok());
    ASSERT_TRUE(RunScheduler("lookahead", &g).ok());
    absl::StatusOr<GpuReplayResult> r =
        GpuReplay(g, {api_.get(), compute_, comm->get()}, {.time_scale = 1, .steps = 2});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->replay.peak_bytes, r->replay.simulated_peak_bytes);
    EXPECT_GE(r->pool_peak_bytes, r->replay.peak_bytes);
    EXPECT_GT(r->collectives, 0);
  }
  EXPECT_TRUE((*comm)->Shutdown().ok());
}

// The differential test, CPU against CUDA: every tiny model's forward and backward on the
// device's kernels against the CPU interpreter (the reference), by differential.h's
// criteria (float64 within 1e-9; float32 no worse than four times the CPU's own error).
TEST_F(CudaGpuApiTest, DifferentialEveryTinyModelMatchesTheCpu) {
  auto dev = CudaDevice::Create(api_.get(), 0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  KernelRegistry kernels = CudaKernels(**dev);
  for (const std::string& model : ModelNames()) {
    EXPECT_EQ(CompareModelWithCpu(model, **dev, kernels), "") << model;
  }
}

}  // namespace
}  // namespace overlap
