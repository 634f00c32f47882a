#include "runtime/job/backend.h"

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(BackendTest, HostDevicesAreUsableWithoutOpeningThePlugin) {
  EXPECT_TRUE(CheckComputeDevice(ComputeDevice::kCpu).ok());
  EXPECT_TRUE(CheckComputeDevice(ComputeDevice::kCudaEmulated).ok());
}

TEST(BackendTest, CudaCheckAgreesWithTheProbe) {
  absl::StatusOr<CudaAvailability> cuda = ProbeCuda();
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  // A plugin that did not load leaves no usable device, and its reason is the check's.
  if (!cuda->plugin_loaded) {
    EXPECT_FALSE(cuda->usable.ok());
  }
  const absl::Status check = CheckComputeDevice(ComputeDevice::kCuda);
  EXPECT_EQ(check.ok(), cuda->usable.ok());
  if (!check.ok()) {
    EXPECT_EQ(check.message(), cuda->usable.message());
  }
}

TEST(BackendTest, KernelKindsComeFromTheCudaRegistrations) {
  EXPECT_EQ(CudaKernelKindOf("aten.mm.default"), "cublas");
  EXPECT_EQ(CudaKernelKindOf("no.such.op"), "");
}

}  // namespace
}  // namespace overlap
