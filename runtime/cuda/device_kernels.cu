#include "device_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../kernels/elementwise_ops.h"
#include "../kernels/nn_ops.h"
#include "../kernels/reduction_ops.h"

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

// Reads element `i` of a buffer of type `t` as double (every type converts exactly but
// int64 beyond 2^53, which no graph value reaches).
__device__ double Load(const void* p, int t, int64_t i) {
  switch (t) {
    case kCopyF32: return static_cast<const float*>(p)[i];
    case kCopyF64: return static_cast<const double*>(p)[i];
    case kCopyF16: return __half2float(static_cast<const __half*>(p)[i]);
    case kCopyBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kCopyI64: return static_cast<double>(static_cast<const long long*>(p)[i]);
    case kCopyI32: return static_cast<const int*>(p)[i];
    case kCopyU8: return static_cast<const unsigned char*>(p)[i];
    default: return static_cast<const unsigned char*>(p)[i] != 0 ? 1.0 : 0.0;
  }
}

__device__ void Store(void* p, int t, int64_t i, double v) {
  switch (t) {
    case kCopyF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case kCopyF64: static_cast<double*>(p)[i] = v; break;
    // Through float, as the host's conversions go (double -> float -> half, each to nearest).
    case kCopyF16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case kCopyBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case kCopyI64: static_cast<long long*>(p)[i] = static_cast<long long>(v); break;
    case kCopyI32: static_cast<int*>(p)[i] = static_cast<int>(v); break;
    case kCopyU8: static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(v); break;
    default: static_cast<unsigned char*>(p)[i] = v != 0 ? 1 : 0;
  }
}

// Element i of a row-major index space of `ndim` dimensions, as offsets through two sets of
// strides.
__device__ __forceinline__ void Offsets(int64_t i, int ndim, const int64_t* shape,
                                        const int64_t* sa, const int64_t* sb, int64_t* a,
                                        int64_t* b) {
  int64_t rest = i;
  *a = 0;
  *b = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t k = rest % shape[d];
    rest /= shape[d];
    *a += k * sa[d];
    *b += k * sb[d];
  }
}

__global__ void CopyKernel(CopyArgs a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    int64_t src, dst;
    Offsets(i, a.ndim, a.shape, a.src_strides, a.dst_strides, &src, &dst);
    Store(a.dst, a.dst_type, dst, Load(a.src, a.src_type, src));
  }
}

template <typename T>
__global__ void ElementwiseKernel(ElementwiseKernelArgs k) {
  const EwOp op = static_cast<EwOp>(k.op);
  const T* a = static_cast<const T*>(k.a);
  const T* b = static_cast<const T*>(k.b);
  T* out = static_cast<T*>(k.out);
  const T s = static_cast<T>(k.s);
  const T scalar = static_cast<T>(k.b_scalar);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < k.n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    int64_t ia, ib;
    Offsets(i, k.ndim, k.shape, k.a_strides, k.b_strides, &ia, &ib);
    out[i] = Ew<T>(op, a[ia], b != nullptr ? b[ib] : scalar, s);
  }
}

template <typename T>
__global__ void ReduceKernel(ReduceKernelArgs k) {
  const ReduceOp op = static_cast<ReduceOp>(k.op);
  const T* x = static_cast<const T*>(k.x);
  const T* y = static_cast<const T*>(k.y);
  T* out = static_cast<T*>(k.out);
  const int64_t columns = k.outer * k.inner;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < columns;
       c += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t p = c / k.inner, q = c % k.inner;
    const int64_t base = p * k.n * k.inner + q;
    ReduceColumn<T>(op, x + base, y != nullptr ? y + base : nullptr,
                    op == ReduceOp::kSum ? out + c : out + base, k.n, k.inner, k.scale);
  }
}

template <typename T>
__global__ void NnKernel(NnArgs a, int64_t units) {
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    NnUnit<T>(a, u);
  }
}

unsigned Blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

}  // namespace

cudaError_t LaunchElementwiseKernel(cudaStream_t stream, const ElementwiseKernelArgs& args) {
  if (args.n == 0) return cudaSuccess;
  if (args.is_double) {
    ElementwiseKernel<double><<<Blocks(args.n, 256), 256, 0, stream>>>(args);
  } else {
    ElementwiseKernel<float><<<Blocks(args.n, 256), 256, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

cudaError_t LaunchReduceKernel(cudaStream_t stream, const ReduceKernelArgs& args) {
  const int64_t columns = args.outer * args.inner;
  if (columns == 0) return cudaSuccess;
  if (args.is_double) {
    ReduceKernel<double><<<Blocks(columns, 128), 128, 0, stream>>>(args);
  } else {
    ReduceKernel<float><<<Blocks(columns, 128), 128, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

cudaError_t LaunchNnKernel(cudaStream_t stream, const NnArgs& args) {
  const int64_t units = NnUnits(args);
  if (units == 0) return cudaSuccess;
  if (args.is_double) {
    NnKernel<double><<<Blocks(units, 128), 128, 0, stream>>>(args, units);
  } else {
    NnKernel<float><<<Blocks(units, 128), 128, 0, stream>>>(args, units);
  }
  return cudaGetLastError();
}

cudaError_t LaunchCopyKernel(cudaStream_t stream, const CopyArgs& args) {
  if (args.n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (args.n + threads - 1) / threads;
  CopyKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), threads, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds) {
  SpinKernel<<<1, 1, 0, stream>>>(static_cast<long long>(nanoseconds));
  return cudaGetLastError();
}

}  // namespace overlap
