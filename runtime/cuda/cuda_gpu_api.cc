#include "runtime/cuda/cuda_gpu_api.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "cublas_v2.h"
#include "cuda_runtime_api.h"
#include "cudnn.h"
#include "graph/status_macros.h"
#include "nccl.h"
#include "runtime/cuda/device_kernels.h"

namespace overlap {
namespace {

// The build's oldest usable device: kernels are sm_90 cubins plus compute_90 PTX.
constexpr int kMinComputeMajor = 9;

absl::Status CudaError(const char* call, cudaError_t e, const char* file, int line) {
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
}

absl::Status NcclError(const char* call, ncclResult_t r, ncclComm_t comm, const char* file,
                       int line) {
  const char* last = ncclGetLastError(comm);
  return absl::InternalError(absl::StrCat(
      call, " failed at ", file, ":", line, ": ", ncclGetErrorString(r), " (ncclResult ",
      static_cast<int>(r), ")",
      last != nullptr && *last != '\0' ? absl::StrCat("; last NCCL error: ", last) : ""));
}

#define OVERLAP_CUDA(call)                                                    \
  do {                                                                        \
    const cudaError_t overlap_cuda_e = (call);                                \
    if (overlap_cuda_e != cudaSuccess) {                                      \
      return ::overlap::CudaError(#call, overlap_cuda_e, __FILE__, __LINE__); \
    }                                                                         \
  } while (0)

absl::Status CublasError(const char* call, cublasStatus_t st, const char* file, int line) {
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cublasGetStatusString(st), " (", cublasGetStatusName(st),
                                          ")"));
}

#define OVERLAP_CUBLAS(call)                                                      \
  do {                                                                            \
    const cublasStatus_t overlap_cublas_s = (call);                               \
    if (overlap_cublas_s != CUBLAS_STATUS_SUCCESS) {                              \
      return ::overlap::CublasError(#call, overlap_cublas_s, __FILE__, __LINE__); \
    }                                                                             \
  } while (0)

absl::Status CudnnError(const char* call, cudnnStatus_t st, const char* file, int line) {
  return absl::InternalError(
      absl::StrCat(call, " failed at ", file, ":", line, ": ", cudnnGetErrorString(st)));
}

#define OVERLAP_CUDNN(call)                                                     \
  do {                                                                          \
    const cudnnStatus_t overlap_cudnn_s = (call);                               \
    if (overlap_cudnn_s != CUDNN_STATUS_SUCCESS) {                              \
      return ::overlap::CudnnError(#call, overlap_cudnn_s, __FILE__, __LINE__); \
    }                                                                           \
  } while (0)

// cuDNN descriptors for one convolution, destroyed with it.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~ConvDescriptors() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
  absl::Status Make(const ConvShape& g) {
    const cudnnDataType_t type = g.dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    OVERLAP_CUDNN(cudnnCreateTensorDescriptor(&x));
    OVERLAP_CUDNN(cudnnCreateTensorDescriptor(&y));
    OVERLAP_CUDNN(cudnnCreateFilterDescriptor(&w));
    OVERLAP_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
    OVERLAP_CUDNN(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.c), i(g.h), i(g.w)));
    OVERLAP_CUDNN(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.o), i(g.ho), i(g.wo)));
    OVERLAP_CUDNN(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, i(g.o), i(g.c / g.groups),
                                             i(g.kh), i(g.kw)));
    OVERLAP_CUDNN(cudnnSetConvolution2dDescriptor(conv, i(g.ph), i(g.pw), i(g.sh), i(g.sw), i(g.dh),
                                                  i(g.dw), CUDNN_CROSS_CORRELATION, type));
    OVERLAP_CUDNN(cudnnSetConvolutionGroupCount(conv, i(g.groups)));
    // FMA math: no tensor cores, so float32 stays float32 (no TF32), as on the CPU.
    OVERLAP_CUDNN(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
    return absl::OkStatus();
  }
};

// ncclInProgress is not an error for a nonblocking communicator's calls.
#define OVERLAP_NCCL(call, comm)                                                      \
  do {                                                                                \
    const ncclResult_t overlap_nccl_r = (call);                                       \
    if (overlap_nccl_r != ncclSuccess && overlap_nccl_r != ncclInProgress) {          \
      return ::overlap::NcclError(#call, overlap_nccl_r, (comm), __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

cudaStream_t S(GpuStream* s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t E(GpuEvent* e) { return reinterpret_cast<cudaEvent_t>(e); }
ncclComm_t C(GpuComm* c) { return reinterpret_cast<ncclComm_t>(c); }

absl::StatusOr<ncclDataType_t> NcclType(DType d) {
  switch (d) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt64:
      return ncclInt64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kUInt8:
    case DType::kBool:
      return ncclUint8;
  }
  return absl::InvalidArgumentError("no NCCL type for this dtype");
}

class CudaApi final : public GpuApi {
 public:
  absl::StatusOr<GpuInfo> Probe() override {
    GpuInfo info;
    cudaRuntimeGetVersion(&info.runtime_version);
    cudaDriverGetVersion(&info.driver_version);  // 0 without a driver
    ncclGetVersion(&info.nccl_version);
    if (cudaGetDeviceCount(&info.device_count) != cudaSuccess) {
      cudaGetLastError();  // clear it: no device is not an error here
      info.device_count = 0;
    }
    if (info.device_count > 0) {
      cudaDeviceProp p;
      OVERLAP_CUDA(cudaGetDeviceProperties(&p, 0));
      info.device_name = p.name;
      info.device_memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
      info.compute_major = p.major;
      info.compute_minor = p.minor;
    }
    return info;
  }

  absl::Status CheckUsable(int device) override {
    int runtime = 0, driver = 0, count = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    if (driver == 0) {
      return absl::FailedPreconditionError(
          "no usable GPU: no NVIDIA driver is installed (libcuda.so not found)");
    }
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver || driver < runtime) {
      cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat(
          "no usable GPU: the driver supports ", CudaVersionString(driver),
          " but this build needs ", CudaVersionString(runtime), "; update the driver"));
    }
    if (e != cudaSuccess || count == 0) {
      cudaGetLastError();
      return absl::FailedPreconditionError(
          absl::StrCat("no usable GPU: no CUDA device (",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the device count is 0", ")"));
    }
    if (device < 0 || device >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("no usable GPU: device ", device, " asked for, ", count, " present"));
    }
    cudaDeviceProp p;
    OVERLAP_CUDA(cudaGetDeviceProperties(&p, device));
    if (p.major < kMinComputeMajor) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no usable GPU: device ", device, " (", p.name, ") has compute capability ", p.major, ".",
          p.minor, "; this build's kernels need ", kMinComputeMajor, ".0 or newer"));
    }
    return absl::OkStatus();
  }

  absl::Status SetDevice(int device) override {
    OVERLAP_CUDA(cudaSetDevice(device));
    // Keep freed blocks in the pool across synchronisations (the default threshold of 0
    // hands them back to the driver at every sync, and the next step pays to map them).
    cudaMemPool_t pool;
    OVERLAP_CUDA(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    OVERLAP_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    device_ = device;
    return absl::OkStatus();
  }

  absl::StatusOr<GpuStream*> CreateStream(bool high_priority) override {
    int least = 0, greatest = 0;  // numerically: greatest priority is the lowest number
    OVERLAP_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s;
    OVERLAP_CUDA(
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? greatest : least));
    return reinterpret_cast<GpuStream*>(s);
  }
  absl::Status DestroyStream(GpuStream* s) override {
    OVERLAP_CUDA(cudaStreamDestroy(S(s)));
    return absl::OkStatus();
  }
  absl::StatusOr<GpuEvent*> CreateEvent() override {
    cudaEvent_t e;
    OVERLAP_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return reinterpret_cast<GpuEvent*>(e);
  }
  absl::Status DestroyEvent(GpuEvent* e) override {
    OVERLAP_CUDA(cudaEventDestroy(E(e)));
    return absl::OkStatus();
  }
  absl::Status RecordEvent(GpuEvent* e, GpuStream* s) override {
    OVERLAP_CUDA(cudaEventRecord(E(e), S(s)));
    return absl::OkStatus();
  }
  absl::Status StreamWaitEvent(GpuStream* s, GpuEvent* e) override {
    OVERLAP_CUDA(cudaStreamWaitEvent(S(s), E(e), 0));
    return absl::OkStatus();
  }
  absl::StatusOr<bool> EventDone(GpuEvent* e) override {
    const cudaError_t r = cudaEventQuery(E(e));
    if (r == cudaErrorNotReady) return false;
    OVERLAP_CUDA(r);
    return true;
  }
  absl::Status StreamSynchronize(GpuStream* s) override {
    OVERLAP_CUDA(cudaStreamSynchronize(S(s)));
    return absl::OkStatus();
  }
  absl::Status DeviceSynchronize() override {
    OVERLAP_CUDA(cudaDeviceSynchronize());
    return absl::OkStatus();
  }

  absl::StatusOr<void*> MallocAsync(int64_t bytes, GpuStream* s) override {
    void* p = nullptr;
    OVERLAP_CUDA(cudaMallocAsync(&p, static_cast<size_t>(bytes), S(s)));
    return p;
  }
  absl::Status FreeAsync(void* p, GpuStream* s) override {
    OVERLAP_CUDA(cudaFreeAsync(p, S(s)));
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> PoolUsedBytes() override {
    return PoolAttribute(cudaMemPoolAttrUsedMemCurrent);
  }
  absl::StatusOr<int64_t> PoolUsedHighBytes() override {
    return PoolAttribute(cudaMemPoolAttrUsedMemHigh);
  }
  absl::Status ResetPoolUsedHigh() override {
    cudaMemPool_t pool;
    OVERLAP_CUDA(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t zero = 0;  // the only value it accepts: "reset to the current use"
    OVERLAP_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    return absl::OkStatus();
  }
  absl::Status MemcpyAsync(void* dst, const void* src, int64_t bytes, GpuStream* s) override {
    OVERLAP_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, S(s)));
    return absl::OkStatus();
  }
  absl::Status MemsetAsync(void* p, int value, int64_t bytes, GpuStream* s) override {
    OVERLAP_CUDA(cudaMemsetAsync(p, value, static_cast<size_t>(bytes), S(s)));
    return absl::OkStatus();
  }

  absl::Status Spin(GpuStream* s, double seconds, absl::Span<void* const>,
                    absl::Span<void* const>) override {
    OVERLAP_CUDA(LaunchSpinKernel(S(s), static_cast<int64_t>(seconds * 1e9)));
    return absl::OkStatus();
  }

  absl::Status CopyStrided(const DeviceView& src, const DeviceView& dst, GpuStream* s) override {
    if (src.shape != dst.shape || src.shape.size() > DeviceView::kMaxDims ||
        src.strides.size() != src.shape.size() || dst.strides.size() != dst.shape.size()) {
      return absl::InvalidArgumentError("CopyStrided: shapes differ or exceed 8 dimensions");
    }
    CopyArgs a;
    a.ndim = static_cast<int>(src.shape.size());
    a.n = 1;
    for (int d = 0; d < a.ndim; ++d) {
      a.shape[d] = src.shape[d];
      a.src_strides[d] = src.strides[d];
      a.dst_strides[d] = dst.strides[d];
      a.n *= src.shape[d];
    }
    a.src = src.data;
    a.dst = dst.data;
    static_assert(static_cast<int>(DType::kBool) == kCopyBool, "CopyType follows DType");
    a.src_type = static_cast<int>(src.dtype);
    a.dst_type = static_cast<int>(dst.dtype);
    OVERLAP_CUDA(LaunchCopyKernel(S(s), a));
    return absl::OkStatus();
  }

  absl::Status Gemm(const GemmArgs& g, GpuStream* s) override {
    if (g.dtype != DType::kFloat32 && g.dtype != DType::kFloat64) {
      return absl::InvalidArgumentError("Gemm: float32 or float64 only");
    }
    if (blas_ == nullptr) OVERLAP_CUBLAS(cublasCreate(&blas_));
    OVERLAP_CUBLAS(cublasSetStream(blas_, S(s)));
    const bool f32 = g.dtype == DType::kFloat32;
    const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
    const void* alpha = f32 ? static_cast<const void*>(&alpha32) : &g.alpha;
    const void* beta = f32 ? static_cast<const void*>(&beta32) : &g.beta;
    const cudaDataType_t type = f32 ? CUDA_R_32F : CUDA_R_64F;
    OVERLAP_CUBLAS(cublasGemmStridedBatchedEx(
        blas_, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), alpha, g.a, type,
        static_cast<int>(g.lda), g.stride_a, g.b, type, static_cast<int>(g.ldb), g.stride_b, beta,
        g.c, type, static_cast<int>(g.ldc), g.stride_c, static_cast<int>(g.batch),
        f32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }

  absl::Status Elementwise(const ElementwiseArgs& e, GpuStream* s) override {
    const int ndim = static_cast<int>(e.out.shape.size());
    if (ndim > DeviceView::kMaxDims || e.a.strides.size() != e.out.shape.size() ||
        (e.b.data != nullptr && e.b.strides.size() != e.out.shape.size()) ||
        (e.out.dtype != DType::kFloat32 && e.out.dtype != DType::kFloat64)) {
      return absl::InvalidArgumentError("Elementwise: float32 / float64, <= 8 dimensions");
    }
    ElementwiseKernelArgs k;
    k.op = static_cast<int>(e.op);
    k.is_double = e.out.dtype == DType::kFloat64;
    k.ndim = ndim;
    k.n = 1;
    for (int d = 0; d < ndim; ++d) {
      k.shape[d] = e.out.shape[d];
      k.a_strides[d] = e.a.strides[d];
      k.b_strides[d] = e.b.data != nullptr ? e.b.strides[d] : 0;
      k.n *= e.out.shape[d];
    }
    k.a = e.a.data;
    k.b = e.b.data;
    k.b_scalar = e.b_scalar;
    k.s = e.s;
    k.out = e.out.data;
    OVERLAP_CUDA(LaunchElementwiseKernel(S(s), k));
    return absl::OkStatus();
  }

  absl::Status Reduce(const ReduceArgs& r, GpuStream* s) override {
    if (r.dtype != DType::kFloat32 && r.dtype != DType::kFloat64) {
      return absl::InvalidArgumentError("Reduce: float32 / float64");
    }
    ReduceKernelArgs k;
    k.op = static_cast<int>(r.op);
    k.is_double = r.dtype == DType::kFloat64;
    k.outer = r.outer;
    k.n = r.n;
    k.inner = r.inner;
    k.x = r.x;
    k.y = r.y;
    k.out = r.out;
    k.scale = r.scale;
    OVERLAP_CUDA(LaunchReduceKernel(S(s), k));
    return absl::OkStatus();
  }

  absl::Status Nn(const NnArgs& a, GpuStream* s) override {
    OVERLAP_CUDA(LaunchNnKernel(S(s), a));
    return absl::OkStatus();
  }

  // cuDNN's legacy batch-norm API (deprecated in cuDNN 9 in favour of its graph API, still
  // what PyTorch calls): spatial mode over [batch, channels, inner, 1].
  absl::Status BatchNorm(const BatchNormArgs& a, GpuStream* st) override {
    if (a.dtype != DType::kFloat32 && a.dtype != DType::kFloat64) {
      return absl::InvalidArgumentError("BatchNorm: float32 / float64");
    }
    if (dnn_ == nullptr) OVERLAP_CUDNN(cudnnCreate(&dnn_));
    OVERLAP_CUDNN(cudnnSetStream(dnn_, S(st)));
    const cudnnDataType_t type = a.dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    struct Descriptors {
      cudnnTensorDescriptor_t x = nullptr, param = nullptr;
      ~Descriptors() {
        if (x != nullptr) cudnnDestroyTensorDescriptor(x);
        if (param != nullptr) cudnnDestroyTensorDescriptor(param);
      }
    } d;
    constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;
    OVERLAP_CUDNN(cudnnCreateTensorDescriptor(&d.x));
    OVERLAP_CUDNN(cudnnCreateTensorDescriptor(&d.param));
    OVERLAP_CUDNN(
        cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, type, static_cast<int>(a.batch),
                                   static_cast<int>(a.channels), static_cast<int>(a.inner), 1));
    OVERLAP_CUDNN(cudnnDeriveBNTensorDescriptor(d.param, d.x, kMode));
    const double one64 = 1, zero64 = 0;
    const float one32 = 1, zero32 = 0;
    const bool f64 = a.dtype == DType::kFloat64;
    const void* one = f64 ? static_cast<const void*>(&one64) : &one32;
    const void* zero = f64 ? static_cast<const void*>(&zero64) : &zero32;
    switch (a.pass) {
      case BatchNormPass::kTraining:
        OVERLAP_CUDNN(cudnnBatchNormalizationForwardTraining(
            dnn_, kMode, one, zero, d.x, a.x, d.x, a.y, d.param, a.weight, a.bias,
            /*exponentialAverageFactor=*/0.0, /*resultRunningMean=*/nullptr,
            /*resultRunningVariance=*/nullptr, a.eps, a.save_mean, a.save_invstd));
        break;
      case BatchNormPass::kInference:
        OVERLAP_CUDNN(cudnnBatchNormalizationForwardInference(dnn_, kMode, one, zero, d.x, a.x, d.x,
                                                              a.y, d.param, a.weight, a.bias,
                                                              a.mean, a.var, a.eps));
        break;
      case BatchNormPass::kBackward:
        OVERLAP_CUDNN(cudnnBatchNormalizationBackward(dnn_, kMode, one, zero, one, zero, d.x, a.x,
                                                      d.x, a.dy, d.x, a.y, d.param, a.weight,
                                                      a.dweight, a.dbias, a.eps, a.mean, a.var));
        break;
    }
    return absl::OkStatus();
  }

  absl::Status Convolution(ConvPass pass, const ConvShape& g, const void* a, const void* b,
                           void* out, GpuStream* st) override {
    if (g.dtype != DType::kFloat32 && g.dtype != DType::kFloat64) {
      return absl::InvalidArgumentError("Convolution: float32 / float64");
    }
    if (dnn_ == nullptr) OVERLAP_CUDNN(cudnnCreate(&dnn_));
    OVERLAP_CUDNN(cudnnSetStream(dnn_, S(st)));
    ConvDescriptors d;
    OVERLAP_RETURN_IF_ERROR(d.Make(g));
    const double one64 = 1, zero64 = 0;
    const float one32 = 1, zero32 = 0;
    const bool f64 = g.dtype == DType::kFloat64;
    const void* one = f64 ? static_cast<const void*>(&one64) : &one32;
    const void* zero = f64 ? static_cast<const void*>(&zero64) : &zero32;
    int found = 0;
    size_t bytes = 0;
    // The workspace goes back to the pool (stream-ordered) however the pass ends.
    struct Workspace {
      void* p = nullptr;
      cudaStream_t stream;
      ~Workspace() {
        if (p != nullptr) cudaFreeAsync(p, stream);
      }
    } ws{nullptr, S(st)};
    switch (pass) {
      case ConvPass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t perf;
        OVERLAP_CUDNN(
            cudnnGetConvolutionForwardAlgorithm_v7(dnn_, d.x, d.w, d.conv, d.y, 1, &found, &perf));
        OVERLAP_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(dnn_, d.x, d.w, d.conv, d.y,
                                                              perf.algo, &bytes));
        if (bytes > 0) OVERLAP_CUDA(cudaMallocAsync(&ws.p, bytes, S(st)));
        OVERLAP_CUDNN(cudnnConvolutionForward(dnn_, one, d.x, a, d.w, b, d.conv, perf.algo, ws.p,
                                              bytes, zero, d.y, out));
        break;
      }
      case ConvPass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf;
        OVERLAP_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn_, d.w, d.y, d.conv, d.x, 1,
                                                                  &found, &perf));
        OVERLAP_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn_, d.w, d.y, d.conv, d.x,
                                                                   perf.algo, &bytes));
        if (bytes > 0) OVERLAP_CUDA(cudaMallocAsync(&ws.p, bytes, S(st)));
        OVERLAP_CUDNN(cudnnConvolutionBackwardData(dnn_, one, d.w, b, d.y, a, d.conv, perf.algo,
                                                   ws.p, bytes, zero, d.x, out));
        break;
      }
      case ConvPass::kBackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf;
        OVERLAP_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn_, d.x, d.y, d.conv, d.w, 1,
                                                                    &found, &perf));
        OVERLAP_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn_, d.x, d.y, d.conv, d.w,
                                                                     perf.algo, &bytes));
        if (bytes > 0) OVERLAP_CUDA(cudaMallocAsync(&ws.p, bytes, S(st)));
        OVERLAP_CUDNN(cudnnConvolutionBackwardFilter(dnn_, one, d.x, a, d.y, b, d.conv, perf.algo,
                                                     ws.p, bytes, zero, d.w, out));
        break;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> NcclUniqueId() override {
    ncclUniqueId id;
    OVERLAP_NCCL(ncclGetUniqueId(&id), nullptr);
    return std::string(id.internal, sizeof(id.internal));
  }
  absl::StatusOr<GpuComm*> NcclCommInit(int nranks, int rank,
                                        const std::string& unique_id) override {
    ncclUniqueId id;
    if (unique_id.size() != sizeof(id.internal)) {
      return absl::InvalidArgumentError(absl::StrCat("an NCCL unique id has ", sizeof(id.internal),
                                                     " bytes, got ", unique_id.size()));
    }
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    OVERLAP_NCCL(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), comm);
    return reinterpret_cast<GpuComm*>(comm);
  }
  absl::StatusOr<bool> NcclCommReady(GpuComm* c) override {
    ncclResult_t state = ncclSuccess;
    OVERLAP_NCCL(ncclCommGetAsyncError(C(c), &state), C(c));
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) {
      return NcclError("ncclCommGetAsyncError (the communicator's asynchronous error)", state, C(c),
                       __FILE__, __LINE__);
    }
    return true;
  }
  absl::Status NcclCommAbort(GpuComm* c) override {
    OVERLAP_NCCL(ncclCommAbort(C(c)), nullptr);
    return absl::OkStatus();
  }
  absl::Status NcclCommFinalize(GpuComm* c) override {
    OVERLAP_NCCL(ncclCommFinalize(C(c)), C(c));
    return absl::OkStatus();
  }
  absl::Status NcclCommDestroy(GpuComm* c) override {
    OVERLAP_NCCL(ncclCommDestroy(C(c)), nullptr);
    return absl::OkStatus();
  }
  absl::Status NcclCollectiveAsync(NcclCollective op, const void* send, void* recv, int64_t count,
                                   DType dtype, int root, GpuComm* c, GpuStream* s) override {
    OVERLAP_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclType(dtype));
    const size_t n = static_cast<size_t>(count);
    switch (op) {
      case NcclCollective::kAllReduce:
        OVERLAP_NCCL(ncclAllReduce(send, recv, n, type, ncclSum, C(c), S(s)), C(c));
        break;
      case NcclCollective::kAllGather:
        OVERLAP_NCCL(ncclAllGather(send, recv, n, type, C(c), S(s)), C(c));
        break;
      case NcclCollective::kReduceScatter:
        OVERLAP_NCCL(ncclReduceScatter(send, recv, n, type, ncclSum, C(c), S(s)), C(c));
        break;
      case NcclCollective::kBroadcast:
        OVERLAP_NCCL(ncclBroadcast(send, recv, n, type, root, C(c), S(s)), C(c));
        break;
    }
    return absl::OkStatus();
  }
  absl::Status NcclGroupStart() override {
    OVERLAP_NCCL(ncclGroupStart(), nullptr);
    return absl::OkStatus();
  }
  absl::Status NcclGroupEnd() override {
    OVERLAP_NCCL(ncclGroupEnd(), nullptr);
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<int64_t> PoolAttribute(cudaMemPoolAttr attr) {
    cudaMemPool_t pool;
    OVERLAP_CUDA(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t v = 0;
    OVERLAP_CUDA(cudaMemPoolGetAttribute(pool, attr, &v));
    return static_cast<int64_t>(v);
  }

  int device_ = 0;
  cublasHandle_t blas_ = nullptr;  // made on the first Gemm (it allocates device memory)
  cudnnHandle_t dnn_ = nullptr;    // made on the first convolution
};

}  // namespace

std::unique_ptr<GpuApi> CudaGpuApi() { return std::make_unique<CudaApi>(); }

}  // namespace overlap
