// The real GpuApi: the CUDA runtime (13), NCCL (2.28) and the backend's kernels, from
// /usr/local/cuda (@cuda). Linking it needs the CUDA libraries; running it needs none of a
// GPU until a call wants one (Probe and CheckUsable work on any machine).
#ifndef OVERLAP_RUNTIME_CUDA_CUDA_GPU_API_H_
#define OVERLAP_RUNTIME_CUDA_CUDA_GPU_API_H_

#include <memory>

#include "runtime/cuda/gpu_api.h"

namespace overlap {

// One per process (it holds the device's memory pool settings). O(1); no device call until
// the first method.
std::unique_ptr<GpuApi> CudaGpuApi();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_CUDA_GPU_API_H_
