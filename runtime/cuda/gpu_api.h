// The seam between the CUDA backend and the CUDA runtime / NCCL / cuBLAS: every device call
// the backend makes (streams, events, stream-ordered memory, copies, its kernels, matrix
// products, NCCL) goes through GpuApi. CudaGpuApi() (cuda_gpu_api.h) is the real one, which
// programs reach through LoadCudaGpuApi() (cuda_plugin.h) so that only --device cuda loads the
// CUDA libraries; FakeGpuApi (fake_gpu_api.h, the emulated device) runs the same calls on the host,
// so the backend's ordering, memory, kernels' wrapping and error handling are tested on machines
// without a GPU.
//
//   OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<GpuApi> api, LoadCudaGpuApi());
//   OVERLAP_ASSIGN_OR_RETURN(GpuStream* compute, api->CreateStream(/*high_priority=*/false));
//
// Contract for implementations:
//   - every call returns an error value, never aborts; a real call's error names the call,
//     the file and line that made it and the library's message (NCCL: ncclGetLastError);
//   - calls on a stream are asynchronous: they are ordered after earlier calls on the same
//     stream and after events the stream waits on, and after nothing else;
//   - handles are owned by the caller and destroyed through the api that made them.
// Cost: each call is one driver / library call (microseconds), except where noted.
#ifndef OVERLAP_RUNTIME_CUDA_GPU_API_H_
#define OVERLAP_RUNTIME_CUDA_GPU_API_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/elementwise_ops.h"
#include "runtime/kernels/nn_ops.h"
#include "runtime/kernels/reduction_ops.h"

namespace overlap {

// Opaque handles; each implementation defines what they point to.
struct GpuStream;
struct GpuEvent;
struct GpuComm;

// What a machine offers, for `overlap run --device cuda` and the GPU check.
struct GpuInfo {
  int runtime_version = 0;  // CUDA runtime the binary links, e.g. 13000
  int driver_version = 0;   // the CUDA version the driver supports; 0 without a driver
  int nccl_version = 0;     // e.g. 22809
  int device_count = 0;
  std::string device_name;  // device 0
  int64_t device_memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
};

// "CUDA 13.0" from 13000 (and NCCL's 22809 as "2.28.9"). O(1).
std::string CudaVersionString(int version);
std::string NcclVersionString(int version);

// A strided view of device memory: `data` is element 0's address; shape and strides in
// elements (at most kMaxDims dimensions).
struct DeviceView {
  static constexpr int kMaxDims = 8;
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape, strides;
};

// One (strided-batched) matrix product, cuBLAS's column-major convention:
// C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, op(X) = X^T when trans_x; A_i is
// m x k after op, B_i k x n, C_i m x n; X_i starts stride_x elements after X_{i-1}. float32
// (computed in float32, no TF32) or float64.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  DType dtype = DType::kFloat32;
};

// One elementwise op (elementwise_ops.h) into a contiguous `out`: a and b strided over out's
// shape (stride 0 where broadcast); without b (b.data null) the number b_scalar stands for
// it. float32 or float64, all three of one dtype.
struct ElementwiseArgs {
  EwOp op = EwOp::kAdd;
  DeviceView a, b, out;
  double b_scalar = 0;
  double s = 0;
};

// One reduction (reduction_ops.h) over the columns of contiguous [outer, n, inner] tensors:
// kSum writes out[outer, inner], the softmax family out[outer, n, inner]; y is the
// backwards' forward output. float32 or float64.
struct ReduceArgs {
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  int64_t outer = 0, n = 0, inner = 0;
  const void* x = nullptr;
  const void* y = nullptr;
  void* out = nullptr;
  double scale = 1;
};

// A 2-D convolution for cuDNN: NCHW input [n, c, h, w], weight [o, c / groups, kh, kw],
// output [n, o, ho, wo]; float32 (FMA math: no TF32) or float64.
struct ConvShape {
  int64_t n = 0, c = 0, h = 0, w = 0, o = 0, kh = 0, kw = 0, groups = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, ho = 0, wo = 0;
  DType dtype = DType::kFloat32;
};
// Which product: forward (a: input, b: weight, out: output), backward data (a: grad of the
// output, b: weight, out: grad of the input), backward filter (a: input, b: grad of the
// output, out: grad of the weight). All contiguous; out is overwritten.
enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// Batch normalization through cuDNN (spatial mode: statistics per channel) over contiguous
// [batch, channels, inner] tensors, float32 or float64, weight and bias present:
//   kTraining   x, weight, bias -> y, save_mean, save_invstd (batch statistics, biased
//               variance; the running statistics are not updated)
//   kInference  x, weight, bias, mean, var (running) -> y
//   kBackward   x, dy, weight, mean, var (the saved mean and invstd) -> dx, dweight, dbias
// Each pass is nn_ops.h's kBatchNorm / kBatchNormBackward up to rounding (cuDNN's order of
// summation and float32 accumulation).
enum class BatchNormPass { kTraining, kInference, kBackward };
struct BatchNormArgs {
  BatchNormPass pass = BatchNormPass::kTraining;
  DType dtype = DType::kFloat32;
  int64_t batch = 0, channels = 0, inner = 0;
  double eps = 1e-5;
  const void* x = nullptr;
  const void* dy = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  const void* mean = nullptr;
  const void* var = nullptr;
  void* y = nullptr;  // kBackward: dx
  void* save_mean = nullptr;
  void* save_invstd = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};

// The reductions the backend issues (sum only: gradients).
enum class NcclCollective { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

class GpuApi {
 public:
  virtual ~GpuApi() = default;

  // Versions and device 0. Never fails for want of a GPU or a driver (device_count 0,
  // driver_version 0); errors are for a broken installation.
  virtual absl::StatusOr<GpuInfo> Probe() = 0;
  // OK when this process can run kernels on `device`; FailedPrecondition saying why not
  // ("no CUDA device", "the driver supports CUDA 12.4 but this build needs CUDA 13.0").
  virtual absl::Status CheckUsable(int device) = 0;
  virtual absl::Status SetDevice(int device) = 0;

  // Streams: high priority for communication (DeepSpeed's and PyTorch's choice), so a
  // collective's kernel is scheduled ahead of queued compute kernels.
  virtual absl::StatusOr<GpuStream*> CreateStream(bool high_priority) = 0;
  virtual absl::Status DestroyStream(GpuStream* s) = 0;
  // Events without timing (the cheap kind).
  virtual absl::StatusOr<GpuEvent*> CreateEvent() = 0;
  virtual absl::Status DestroyEvent(GpuEvent* e) = 0;
  // `e` completes when the work queued on `s` so far has.
  virtual absl::Status RecordEvent(GpuEvent* e, GpuStream* s) = 0;
  // Later work on `s` starts after `e` completes (no host wait).
  virtual absl::Status StreamWaitEvent(GpuStream* s, GpuEvent* e) = 0;
  // Whether `e` has completed; never blocks.
  virtual absl::StatusOr<bool> EventDone(GpuEvent* e) = 0;
  // Host waits. The backend uses StreamSynchronize only at the end of a step and
  // DeviceSynchronize never inside one (the fake counts both).
  virtual absl::Status StreamSynchronize(GpuStream* s) = 0;
  virtual absl::Status DeviceSynchronize() = 0;

  // Stream-ordered memory from the device's pool (cudaMallocAsync): usable by `s` at once
  // and by other streams after an event; FreeAsync returns the block when the work queued
  // on `s` so far is done, so `s` must be the block's last-use stream (or ordered after it).
  virtual absl::StatusOr<void*> MallocAsync(int64_t bytes, GpuStream* s) = 0;
  virtual absl::Status FreeAsync(void* p, GpuStream* s) = 0;
  // The pool's bytes in use now and at most since the last reset (allocated, not reserved).
  virtual absl::StatusOr<int64_t> PoolUsedBytes() = 0;
  virtual absl::StatusOr<int64_t> PoolUsedHighBytes() = 0;
  virtual absl::Status ResetPoolUsedHigh() = 0;
  // Copies on `s`; either side may be host or device memory (host memory must stay alive
  // until the stream reaches the copy).
  virtual absl::Status MemcpyAsync(void* dst, const void* src, int64_t bytes, GpuStream* s) = 0;
  virtual absl::Status MemsetAsync(void* p, int value, int64_t bytes, GpuStream* s) = 0;

  // The timed-replay kernel: occupies the device for `seconds` on `s`. `reads` and `writes`
  // are the buffers the node it stands for reads and writes; the real kernel ignores them,
  // the fake checks each use against the stream order (alive, after its allocation and its
  // last write; a write after the reads before it).
  virtual absl::Status Spin(GpuStream* s, double seconds, absl::Span<void* const> reads,
                            absl::Span<void* const> writes) = 0;

  // dst's elements become src's, converted between dtypes as CopyConvert does (equal shapes,
  // any strides): the backend's one copy kernel.
  virtual absl::Status CopyStrided(const DeviceView& src, const DeviceView& dst, GpuStream* s) = 0;
  // A matrix product on `s` (cublasGemmStridedBatchedEx).
  virtual absl::Status Gemm(const GemmArgs& g, GpuStream* s) = 0;
  // The elementwise kernel family (one kernel, the op a parameter).
  virtual absl::Status Elementwise(const ElementwiseArgs& e, GpuStream* s) = 0;
  // The reduction kernel family (sum, mean, the softmax family).
  virtual absl::Status Reduce(const ReduceArgs& r, GpuStream* s) = 0;
  // The nn kernel family (nn_ops.h: norms, max pooling, losses, embedding's backward,
  // attention's softmax rows): NnUnit on every unit, one device thread each. A bad index is
  // recorded in a.error (device memory) for the caller to read after the stream.
  virtual absl::Status Nn(const NnArgs& a, GpuStream* s) = 0;
  // Batch normalization on `s` (cuDNN: cudnnBatchNormalizationForwardTraining /
  // ForwardInference / Backward).
  virtual absl::Status BatchNorm(const BatchNormArgs& a, GpuStream* s) = 0;
  // A convolution pass on `st` (cuDNN: cudnnConvolutionForward / BackwardData /
  // BackwardFilter, the heuristics' first algorithm, its workspace from the pool).
  virtual absl::Status Convolution(ConvPass pass, const ConvShape& shape, const void* a,
                                   const void* b, void* out, GpuStream* st) = 0;

  // NCCL. The unique id is 128 bytes, made by one rank and shared through the store.
  virtual absl::StatusOr<std::string> NcclUniqueId() = 0;
  // A nonblocking communicator (config.blocking = 0): returns at once; poll NcclCommReady.
  virtual absl::StatusOr<GpuComm*> NcclCommInit(int nranks, int rank,
                                                const std::string& unique_id) = 0;
  // true when the communicator is ready and idle of errors, false while an operation (its
  // initialisation) is in progress; the communicator's asynchronous error otherwise
  // (ncclCommGetAsyncError).
  virtual absl::StatusOr<bool> NcclCommReady(GpuComm* c) = 0;
  // Ends every operation of `c` and frees it; safe from another thread while one is stuck.
  virtual absl::Status NcclCommAbort(GpuComm* c) = 0;
  // Clean shutdown: Finalize (flushes; nonblocking, poll NcclCommReady) then Destroy.
  virtual absl::Status NcclCommFinalize(GpuComm* c) = 0;
  virtual absl::Status NcclCommDestroy(GpuComm* c) = 0;
  // Queues one collective on `s` (sum for reductions). `count` is elements per rank's send
  // buffer for allreduce / broadcast / allgather, and per rank's receive buffer for
  // reduce-scatter (NCCL's convention). `root` is for broadcast only.
  virtual absl::Status NcclCollectiveAsync(NcclCollective op, const void* send, void* recv,
                                           int64_t count, DType dtype, int root, GpuComm* c,
                                           GpuStream* s) = 0;
  // Collectives between GroupStart and GroupEnd launch as one (bucketed reduce-scatters,
  // fused allgathers).
  virtual absl::Status NcclGroupStart() = 0;
  virtual absl::Status NcclGroupEnd() = 0;
};

// Identifies this interface across the CUDA plugin's boundary (cuda_plugin.h): a plugin built
// from another GpuApi is refused rather than called. The version changes with any method; the
// sizes catch a changed argument struct. O(1), constant.
inline constexpr uint64_t kGpuApiVersion = 1;
constexpr uint64_t GpuApiFingerprint() {
  uint64_t h = kGpuApiVersion;
  for (uint64_t size :
       {sizeof(GpuInfo), sizeof(DeviceView), sizeof(GemmArgs), sizeof(ElementwiseArgs),
        sizeof(ReduceArgs), sizeof(ConvShape), sizeof(BatchNormArgs), sizeof(NnArgs),
        sizeof(absl::Status), sizeof(absl::StatusOr<GpuInfo>), sizeof(std::string)}) {
    h = h * 1000003 + size;
  }
  return h;
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_GPU_API_H_
