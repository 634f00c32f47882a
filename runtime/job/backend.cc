#include "runtime/job/backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_plugin.h"
#include "runtime/cuda/fake_gpu_api.h"
#include "runtime/cuda/nccl_communicator.h"

namespace overlap {

absl::StatusOr<ComputeDevice> ParseComputeDevice(absl::string_view name) {
  if (name == "cpu") return ComputeDevice::kCpu;
  if (name == "cuda") return ComputeDevice::kCuda;
  if (name == "cuda-emulated") return ComputeDevice::kCudaEmulated;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (cpu, cuda or cuda-emulated)"));
}

absl::StatusOr<CollectiveLibrary> ParseCollectiveLibrary(absl::string_view name) {
  if (name == "gloo") return CollectiveLibrary::kGloo;
  if (name == "nccl") return CollectiveLibrary::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown collectives library '", name, "' (gloo or nccl)"));
}

absl::Status CheckComputeDevice(ComputeDevice device) {
  if (device != ComputeDevice::kCuda) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<GpuApi>> api = LoadCudaGpuApi();
  return api.ok() ? (*api)->CheckUsable(0) : api.status();
}

absl::StatusOr<CudaAvailability> ProbeCuda() {
  CudaAvailability a;
  absl::StatusOr<std::unique_ptr<GpuApi>> api = LoadCudaGpuApi();
  if (!api.ok()) {
    a.usable = api.status();
    return a;
  }
  a.plugin_loaded = true;
  OVERLAP_ASSIGN_OR_RETURN(const GpuInfo info, (*api)->Probe());
  a.usable = (*api)->CheckUsable(0);
  a.cuda_version = CudaVersionString(info.runtime_version);
  a.nccl_version = NcclVersionString(info.nccl_version);
  a.device_name = info.device_name;
  a.device_count = info.device_count;
  return a;
}

std::string CudaKernelKindOf(absl::string_view target) { return CudaKernelKind(target); }

Backend::Backend() = default;
Backend::~Backend() = default;

DeviceMemory* Backend::device() const { return device_.get(); }

absl::StatusOr<std::unique_ptr<Backend>> Backend::Create(const BackendOptions& o, int world,
                                                         int local_rank) {
  const bool on_device = o.device != ComputeDevice::kCpu;
  // NCCL by default on a GPU; the emulated device's NCCL spans one process, so across
  // processes it reduces through Gloo by default.
  const bool nccl = on_device && (o.collectives == CollectiveLibrary::kNccl ||
                                  (o.collectives == CollectiveLibrary::kDefault &&
                                   (o.device == ComputeDevice::kCuda || world == 1)));
  if (!on_device && o.collectives == CollectiveLibrary::kNccl) {
    return absl::InvalidArgumentError("NCCL collectives need --device cuda");
  }
  if (o.device == ComputeDevice::kCudaEmulated && nccl && world > 1) {
    return absl::InvalidArgumentError(
        "the emulated device's NCCL spans one process: use --collectives gloo with "
        "--device cuda-emulated");
  }
  if (on_device && o.time_scale > 0) {
    return absl::InvalidArgumentError(
        "--time-scale replays on the host; on a GPU, gpu_benchmark overlap replays");
  }
  std::unique_ptr<Backend> b(new Backend());
  b->nccl_ = nccl;
  if (!on_device) return b;
  if (o.device == ComputeDevice::kCuda) {
    OVERLAP_ASSIGN_OR_RETURN(b->api_, LoadCudaGpuApi());
  } else {
    FakeGpuOptions fo;
    if (world == 1) fo.nccl = std::make_shared<FakeNcclWorld>();
    auto fake = std::make_unique<FakeGpuApi>(fo);
    b->emulated_ = fake.get();
    b->api_ = std::move(fake);
  }
  // GPU LOCAL_RANK, wrapped around the devices present: ranks may share a GPU (Gloo through
  // the host allows it; NCCL refuses two ranks on one device, by name).
  OVERLAP_ASSIGN_OR_RETURN(const GpuInfo gpus, b->api_->Probe());
  const int index = gpus.device_count > 0 ? local_rank % gpus.device_count : 0;
  OVERLAP_ASSIGN_OR_RETURN(b->device_, CudaDevice::Create(b->api_.get(), index));
  b->kernels_ = std::make_unique<KernelRegistry>(CudaKernels(*b->device_));
  return b;
}

absl::StatusOr<std::unique_ptr<Communicator>> Backend::Connect(const GlooOptions& gloo,
                                                               const RendezvousInfo& own,
                                                               absl::Duration timeout) {
  if (!nccl_) return CreateGlooCommunicator(gloo);
  NcclOptions no;
  no.api = api_.get();
  OVERLAP_ASSIGN_OR_RETURN(no.store, TcpStore::Connect(own, timeout));  // the poller's
  no.rank = gloo.rank;
  no.world_size = gloo.world_size;
  no.stream = device_->comm();
  no.after = device_->compute();
  no.timeout = gloo.timeout;
  return CreateNcclCommunicator(no);
}

absl::Status Backend::Synchronize() {
  return device_ != nullptr ? device_->Synchronize() : absl::OkStatus();
}

absl::Status Backend::Finish(int rank) {
  OVERLAP_RETURN_IF_ERROR(Synchronize());
  if (emulated_ != nullptr && !emulated_->violations().empty()) {
    const std::vector<std::string> v = emulated_->violations();
    return absl::InternalError(
        absl::StrCat("rank ", rank, ": the emulated device saw ", v.size(),
                     " buffer uses out of stream order; the first: ", v.front()));
  }
  return absl::OkStatus();
}

}  // namespace overlap
