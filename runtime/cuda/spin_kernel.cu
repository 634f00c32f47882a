#include "spin_kernel.h"

namespace overlap {
namespace {

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(long long nanoseconds) {
  const unsigned long long start = GlobalTimerNs();
  while (GlobalTimerNs() - start < static_cast<unsigned long long>(nanoseconds)) {
  }
}

}  // namespace

cudaError_t LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds) {
  SpinKernel<<<1, 1, 0, stream>>>(static_cast<long long>(nanoseconds));
  return cudaGetLastError();
}

}  // namespace overlap
