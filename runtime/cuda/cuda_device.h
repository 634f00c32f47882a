// One GPU as the executor sees it: its two streams (compute, and a higher-priority one for
// communication), its stream-ordered memory as a DeviceMemory (so an Allocator hands out
// device tensors and the interpreter runs on it), and copies between it and the host.
//
//   OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> dev, CudaDevice::Create(api, 0));
//   InterpreterOptions o;
//   o.device = dev.get();
//   KernelRegistry k = CudaKernels(*dev);
//   o.kernels = &k;
//
// Memory: blocks come from the device's cudaMallocAsync pool on the compute stream. A block
// the communication stream used (MarkCommunicated) is freed on the communication stream
// after it waits on an event recorded on the compute stream where the free is issued (its
// last compute use), so neither stream waits for a free and no record_stream-style
// deferral holds memory (docs/runtime.md, "The CUDA backend"). Thread-compatible: one
// issuing thread, plus frees from whichever thread drops a tensor last (serialised).
#ifndef OVERLAP_RUNTIME_CUDA_CUDA_DEVICE_H_
#define OVERLAP_RUNTIME_CUDA_CUDA_DEVICE_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/tensor.h"
#include "runtime/cuda/gpu_api.h"

namespace overlap {

class CudaDevice final : public DeviceMemory, public DeviceStreams {
 public:
  // Checks that `device` is usable, selects it and makes its streams. `api` is not owned
  // and must outlive the device and every tensor it allocated.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(GpuApi* api, int device);
  ~CudaDevice() override;

  GpuApi& api() const { return *api_; }
  GpuStream* compute() const { return compute_; }
  GpuStream* comm() const { return comm_; }

  Device device() const override { return Device::kCuda; }
  absl::StatusOr<std::byte*> Allocate(int64_t bytes, bool zeroed) override;
  void Free(std::byte* p) override;
  // Copies on the compute stream (the copy kernel for strides and dtypes, cudaMemcpy
  // between host and device); a copy to the host waits for the compute stream. A tensor a
  // collective wrote needs ComputeAfterComm first.
  absl::Status Copy(const Tensor& src, Tensor& dst) override;

  // `t`'s block is used by the communication stream: its free goes there (above).
  void MarkCommunicated(const Tensor& t) override;
  // The compute stream waits for an NcclCommunicator's work (its done event): true; false
  // for another library's.
  absl::StatusOr<bool> ComputeWaitFor(const Work& w) override;
  // The communication stream waits for the compute stream's work so far (a collective's
  // input is ready); the compute stream waits for the communication stream's (a
  // collective's result is needed). Device-side waits only.
  absl::Status CommAfterCompute();
  absl::Status ComputeAfterComm();
  // The end of a step: the host waits for both streams; then a bad index a kernel recorded
  // (below) is an error.
  absl::Status Synchronize();

  // Device kernels cannot return errors: one that meets a bad index (an embedding row, a
  // target, a pooling index) records it in this word (3 int64 of device memory: tag, index,
  // bound; nn_ops.h) and skips it. The host reads the word whenever it waits for the
  // compute stream anyway (a copy to the host, Synchronize) and turns a record into an
  // InvalidArgument error naming what ErrorTag was given, so a step with a bad index fails
  // at its next host wait (its loss). Allocated on first use (24 bytes from the pool).
  absl::StatusOr<int64_t*> ErrorWord();
  // The tag a kernel writes for `what` (e.g. "node %emb (aten.embedding.default): embedding
  // index"); one per distinct `what`. O(1) amortised.
  int64_t ErrorTag(const std::string& what);
  // The first error a Free met (frees cannot return one), OK before any.
  absl::Status free_status() const;

 private:
  CudaDevice() = default;
  GpuApi* api_ = nullptr;
  GpuStream* compute_ = nullptr;
  GpuStream* comm_ = nullptr;
  GpuEvent* compute_event_ = nullptr;
  GpuEvent* comm_event_ = nullptr;
  mutable std::mutex mu_;
  absl::flat_hash_set<const void*> communicated_;
  absl::Status free_status_;
  // Queues the error word's copy to the host (before a host wait), then reads it (after).
  absl::Status QueueErrorRead();
  absl::Status CheckErrorRead();
  int64_t* error_word_ = nullptr;
  int64_t error_host_[3] = {0, 0, 0};
  std::vector<std::string> error_what_;
  absl::flat_hash_map<std::string, int64_t> error_tags_;
};

// A device view of `t` (element 0's address, its shape and strides). O(dim).
DeviceView ViewOf(const Tensor& t);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_CUDA_DEVICE_H_
