// The compute backend of one rank, chosen by name in one place: the host's CPU kernels, a
// CUDA GPU (LOCAL_RANK's, wrapped around the devices present: ranks may share one through
// Gloo), or the CUDA backend on an emulated device (host memory, the emulator's stream-order
// checks: runtime/cuda/fake_gpu_api.h), for machines without a GPU. It also makes the rank's
// communicator: NCCL on a device by default, Gloo through the host otherwise. Only
// backend.cc includes the CUDA backend's headers: code outside runtime/cuda/ reaches the
// device through this header (CheckComputeDevice, ProbeCuda, CudaKernelKindOf), so the
// CUDA backend's types stay behind one seam.
//
//   OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b,
//                            Backend::Create({.device = ComputeDevice::kCuda}, world, local));
//   OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, b->Connect(gloo, own, timeout));
#ifndef OVERLAP_RUNTIME_JOB_BACKEND_H_
#define OVERLAP_RUNTIME_JOB_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/kernel.h"

namespace overlap {

// Where a rank's forward and backward run.
enum class ComputeDevice { kCpu, kCuda, kCudaEmulated };
// "cpu", "cuda", "cuda-emulated"; InvalidArgument listing them otherwise.
absl::StatusOr<ComputeDevice> ParseComputeDevice(absl::string_view name);
// Which library runs the collectives: the default (NCCL on CUDA and on one emulated
// device, Gloo otherwise), Gloo (through the host for a device), or NCCL (a device; the
// emulated one's spans one process).
enum class CollectiveLibrary { kDefault, kGloo, kNccl };
absl::StatusOr<CollectiveLibrary> ParseCollectiveLibrary(absl::string_view name);

struct BackendOptions {
  ComputeDevice device = ComputeDevice::kCpu;
  CollectiveLibrary collectives = CollectiveLibrary::kDefault;
  // > 0: timed replay, which runs on the host only.
  double time_scale = 0;
};

// Whether `device` can run in this process: for kCuda, opens the CUDA plugin and checks
// device 0 (the reason otherwise: no plugin, no driver, no device, named); OK at once for
// the CPU and the emulated device, which open nothing. Cost: the plugin's load for kCuda.
absl::Status CheckComputeDevice(ComputeDevice device);

// What this machine offers the CUDA backend, for reports (`overlap demo`).
struct CudaAvailability {
  bool plugin_loaded = false;  // liboverlap_cuda.so and CUDA's libraries opened
  // OK when device 0 runs kernels; the plugin's load error when it did not load.
  absl::Status usable;
  std::string cuda_version;  // "CUDA 13.0": the runtime the plugin links
  std::string nccl_version;  // "2.28.9"
  std::string device_name;   // device 0's
  int device_count = 0;
};

// Opens the CUDA plugin (as --device cuda does) and probes it. Errors only for a broken
// installation (the plugin's Probe failing); a machine without the plugin or a GPU answers
// with plugin_loaded or usable saying so. Cost: the plugin's load.
absl::StatusOr<CudaAvailability> ProbeCuda();

// The kind of kernel the CUDA backend runs `target` with: "cublas", "cudnn", "elementwise",
// ..., "host" (the CPU kernel through host copies), "" for a target it has no kernel for
// (runtime/cuda/cuda_kernels.h, CudaKernelKind). Needs no device; O(1) after the first call.
std::string CudaKernelKindOf(absl::string_view target);

class GpuApi;
class FakeGpuApi;
class CudaDevice;

class Backend {
 public:
  // The backend of rank `local_rank` of `world`. InvalidArgument for what the backends
  // refuse (NCCL without a device, the emulated device's NCCL across processes, timed replay
  // on a device); the device's own error (no usable GPU, named) otherwise.
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options, int world,
                                                         int local_rank);
  ~Backend();

  bool on_device() const { return device_ != nullptr; }
  // Whether the collectives run through NCCL (else Gloo).
  bool nccl() const { return nccl_; }
  // The device's memory; nullptr on the CPU.
  DeviceMemory* device() const;
  // The device's kernels; nullptr on the CPU (the CPU kernels).
  const KernelRegistry* kernels() const { return kernels_.get(); }

  // The rank's communicator: NCCL on the device's communication stream, ordered after its
  // compute stream, its poller on a store connection made from `own` (a client); or Gloo
  // by `gloo`. Blocks until every rank has joined or `timeout`.
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const GlooOptions& gloo,
                                                        const RendezvousInfo& own,
                                                        absl::Duration timeout);
  // Waits for the device's queued work (OK at once on the CPU).
  absl::Status Synchronize();
  // Synchronize, then Internal naming the first buffer use out of stream order the
  // emulated device saw (rank `rank`'s), if any.
  absl::Status Finish(int rank);

 private:
  Backend();
  std::unique_ptr<GpuApi> api_;
  FakeGpuApi* emulated_ = nullptr;  // api_, when the device is emulated
  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<KernelRegistry> kernels_;
  bool nccl_ = false;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_JOB_BACKEND_H_
