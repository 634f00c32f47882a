// The backend's device kernels, compiled by nvcc (spin_kernel.cu, sm_90 + PTX). Plain
// launchers with C++ types only, so the rest of the backend compiles with the host compiler.
#ifndef OVERLAP_RUNTIME_CUDA_SPIN_KERNEL_H_
#define OVERLAP_RUNTIME_CUDA_SPIN_KERNEL_H_

#include <cstdint>

#include "cuda_runtime_api.h"

namespace overlap {

// One thread that holds the stream for `nanoseconds` of device time (the global timer, so
// the clock rate does not matter): timed replay's stand-in for a node's kernels. Returns the
// launch's error.
cudaError_t LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_SPIN_KERNEL_H_
