// Reports the CUDA devices and the NCCL version this build links against. It proves that
// GPU code compiles and links here (CUDA 13 and NCCL 2.28 from /usr/local/cuda, wired in as
// @cuda) and says plainly when a machine has no GPU; it never fails for lack of one.
#include <cstdio>

#include "cuda_runtime_api.h"
#include "nccl.h"

int main() {
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) == ncclSuccess) {
    std::printf("NCCL %d.%d.%d\n", nccl_version / 10000, (nccl_version / 100) % 100,
                nccl_version % 100);
  }
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::printf("CUDA runtime %d.%d\n", runtime / 1000, (runtime % 1000) / 10);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("no CUDA device (%s): GPU checks are skipped on this machine\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 0;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::printf("device %d: %s, %.1f GiB, compute capability %d.%d\n", i, p.name,
                p.totalGlobalMem / 1073741824.0, p.major, p.minor);
  }
  return 0;
}
