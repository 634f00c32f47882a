// The backend's own device kernels, compiled by nvcc (device_kernels.cu, sm_90 + PTX). Plain
// launchers with C++ types only, so the rest of the backend compiles with the host compiler.
#ifndef OVERLAP_RUNTIME_CUDA_DEVICE_KERNELS_H_
#define OVERLAP_RUNTIME_CUDA_DEVICE_KERNELS_H_

#include <cstdint>

#include "cuda_runtime_api.h"

namespace overlap {

struct NnArgs;  // runtime/kernels/nn_ops.h

// One thread that holds the stream for `nanoseconds` of device time (the global timer, so
// the clock rate does not matter): timed replay's stand-in for a node's kernels. Returns the
// launch's error.
cudaError_t LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds);

// Element types of the copy kernel (overlap::DType's order).
enum CopyType : int {
  kCopyF32,
  kCopyF64,
  kCopyF16,
  kCopyBF16,
  kCopyI64,
  kCopyI32,
  kCopyU8,
  kCopyBool
};

// dst[i] = convert(src[i]) over a strided index space of `ndim` <= 8 dimensions, `n`
// elements; floats round to nearest even when narrowed, as the host's CopyConvert does.
struct CopyArgs {
  int ndim = 0;
  int64_t n = 0;
  int64_t shape[8] = {};
  int64_t src_strides[8] = {};
  int64_t dst_strides[8] = {};
  const void* src = nullptr;
  void* dst = nullptr;
  int src_type = kCopyF32;
  int dst_type = kCopyF32;
};
cudaError_t LaunchCopyKernel(cudaStream_t stream, const CopyArgs& args);

// out[i] = Ew(op, a[i], b[i], s) (elementwise_ops.h) over `n` elements of a contiguous
// `out`; a and b strided over out's shape (stride 0 where broadcast), b a number (b_scalar)
// when b is null. float32 (is_double false) or float64.
struct ElementwiseKernelArgs {
  int op = 0;
  bool is_double = false;
  int ndim = 0;
  int64_t n = 0;
  int64_t shape[8] = {};
  int64_t a_strides[8] = {};
  int64_t b_strides[8] = {};
  const void* a = nullptr;
  const void* b = nullptr;
  double b_scalar = 0;
  double s = 0;
  void* out = nullptr;
};
cudaError_t LaunchElementwiseKernel(cudaStream_t stream, const ElementwiseKernelArgs& args);

// ReduceColumn (reduction_ops.h) on every column of contiguous [outer, n, inner] tensors, one
// thread per column; kSum writes out[outer, inner], the others out[outer, n, inner].
struct ReduceKernelArgs {
  int op = 0;
  bool is_double = false;
  int64_t outer = 0, n = 0, inner = 0;
  const void* x = nullptr;
  const void* y = nullptr;
  void* out = nullptr;
  double scale = 1;
};
cudaError_t LaunchReduceKernel(cudaStream_t stream, const ReduceKernelArgs& args);

// NnUnit (runtime/kernels/nn_ops.h) on every unit of `args`, one thread per unit.
cudaError_t LaunchNnKernel(cudaStream_t stream, const NnArgs& args);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_DEVICE_KERNELS_H_
