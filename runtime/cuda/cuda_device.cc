#include "runtime/cuda/cuda_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/cuda/nccl_communicator.h"

namespace overlap {

DeviceView ViewOf(const Tensor& t) {
  DeviceView v;
  v.data = const_cast<std::byte*>(t.storage()->data()) + t.offset() * DTypeSize(t.dtype());
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.strides = t.strides();
  return v;
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(GpuApi* api, int device) {
  OVERLAP_RETURN_IF_ERROR(api->CheckUsable(device));
  OVERLAP_RETURN_IF_ERROR(api->SetDevice(device));
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->api_ = api;
  OVERLAP_ASSIGN_OR_RETURN(d->compute_, api->CreateStream(/*high_priority=*/false));
  OVERLAP_ASSIGN_OR_RETURN(d->comm_, api->CreateStream(/*high_priority=*/true));
  OVERLAP_ASSIGN_OR_RETURN(d->compute_event_, api->CreateEvent());
  OVERLAP_ASSIGN_OR_RETURN(d->comm_event_, api->CreateEvent());
  return d;
}

CudaDevice::~CudaDevice() {
  if (api_ == nullptr) return;
  if (error_word_ != nullptr) api_->FreeAsync(error_word_, compute_).IgnoreError();
  api_->DestroyEvent(compute_event_).IgnoreError();
  api_->DestroyEvent(comm_event_).IgnoreError();
  api_->DestroyStream(compute_).IgnoreError();
  api_->DestroyStream(comm_).IgnoreError();
}

absl::StatusOr<std::byte*> CudaDevice::Allocate(int64_t bytes, bool zeroed) {
  OVERLAP_ASSIGN_OR_RETURN(void* p, api_->MallocAsync(std::max<int64_t>(bytes, 1), compute_));
  if (zeroed && bytes > 0) OVERLAP_RETURN_IF_ERROR(api_->MemsetAsync(p, 0, bytes, compute_));
  return static_cast<std::byte*>(p);
}

void CudaDevice::Free(std::byte* p) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status s;
  if (communicated_.erase(p) > 0) {
    s = api_->RecordEvent(compute_event_, compute_);
    if (s.ok()) s = api_->StreamWaitEvent(comm_, compute_event_);
    if (s.ok()) s = api_->FreeAsync(p, comm_);
  } else {
    s = api_->FreeAsync(p, compute_);
  }
  if (!s.ok() && free_status_.ok()) free_status_ = s;
}

absl::Status CudaDevice::free_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_status_;
}

void CudaDevice::MarkCommunicated(const Tensor& t) {
  if (!t.defined() || t.device() != Device::kCuda) return;
  std::lock_guard<std::mutex> lock(mu_);
  communicated_.insert(t.storage()->data());
}

absl::StatusOr<bool> CudaDevice::ComputeWaitFor(const Work& w) {
  GpuEvent* done = NcclWorkEvent(w);
  if (done == nullptr) return false;
  OVERLAP_RETURN_IF_ERROR(api_->StreamWaitEvent(compute_, done));
  return true;
}

absl::Status CudaDevice::CommAfterCompute() {
  OVERLAP_RETURN_IF_ERROR(api_->RecordEvent(compute_event_, compute_));
  return api_->StreamWaitEvent(comm_, compute_event_);
}

absl::Status CudaDevice::ComputeAfterComm() {
  OVERLAP_RETURN_IF_ERROR(api_->RecordEvent(comm_event_, comm_));
  return api_->StreamWaitEvent(compute_, comm_event_);
}

absl::Status CudaDevice::Synchronize() {
  OVERLAP_RETURN_IF_ERROR(QueueErrorRead());
  OVERLAP_RETURN_IF_ERROR(api_->StreamSynchronize(comm_));
  OVERLAP_RETURN_IF_ERROR(api_->StreamSynchronize(compute_));
  OVERLAP_RETURN_IF_ERROR(CheckErrorRead());
  return free_status();
}

absl::StatusOr<int64_t*> CudaDevice::ErrorWord() {
  if (error_word_ == nullptr) {
    OVERLAP_ASSIGN_OR_RETURN(void* p, api_->MallocAsync(sizeof(error_host_), compute_));
    OVERLAP_RETURN_IF_ERROR(api_->MemsetAsync(p, 0, sizeof(error_host_), compute_));
    error_word_ = static_cast<int64_t*>(p);
  }
  return error_word_;
}

int64_t CudaDevice::ErrorTag(const std::string& what) {
  auto [it, added] = error_tags_.try_emplace(what, static_cast<int64_t>(error_what_.size()) + 1);
  if (added) error_what_.push_back(what);
  return it->second;
}

absl::Status CudaDevice::QueueErrorRead() {
  if (error_word_ == nullptr) return absl::OkStatus();
  return api_->MemcpyAsync(error_host_, error_word_, sizeof(error_host_), compute_);
}

absl::Status CudaDevice::CheckErrorRead() {
  if (error_word_ == nullptr || error_host_[0] == 0) return absl::OkStatus();
  const int64_t tag = error_host_[0];
  const std::string what = tag >= 1 && tag <= static_cast<int64_t>(error_what_.size())
                               ? error_what_[tag - 1]
                               : absl::StrCat("a device kernel (tag ", tag, ")");
  absl::Status error = absl::InvalidArgumentError(
      absl::StrCat(what, " ", error_host_[1], " out of range [0, ", error_host_[2],
                   ") (found by a device kernel; the step's results are invalid)"));
  error_host_[0] = 0;
  OVERLAP_RETURN_IF_ERROR(api_->MemsetAsync(error_word_, 0, sizeof(error_host_), compute_));
  return error;
}

absl::Status CudaDevice::Copy(const Tensor& src, Tensor& dst) {
  if (src.shape() != dst.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy: shapes differ (", src.DebugString(), " into ", dst.DebugString(), ")"));
  }
  if (src.numel() == 0) return absl::OkStatus();
  const bool from_host = src.device() == Device::kCpu;
  const bool to_host = dst.device() == Device::kCpu;
  if (from_host && to_host) return CopyConvert(src, dst);
  if (!from_host && !to_host) return api_->CopyStrided(ViewOf(src), ViewOf(dst), compute_);
  if (from_host) {
    // Host -> device: made contiguous and converted on the host, then one transfer (from
    // pageable memory: the call returns once the bytes are staged, so `tmp` may go).
    Allocator host;
    Tensor tmp = src;
    if (!src.IsContiguous() || src.dtype() != dst.dtype()) {
      OVERLAP_ASSIGN_OR_RETURN(tmp, Tensor::Uninitialized(host, dst.dtype(), src.shape()));
      OVERLAP_RETURN_IF_ERROR(CopyConvert(src, tmp));
    }
    if (dst.IsContiguous()) {
      return api_->MemcpyAsync(ViewOf(dst).data, ViewOf(tmp).data, dst.nbytes(), compute_);
    }
    Allocator on_device(this);
    OVERLAP_ASSIGN_OR_RETURN(Tensor staged,
                             Tensor::Uninitialized(on_device, dst.dtype(), dst.shape()));
    OVERLAP_RETURN_IF_ERROR(
        api_->MemcpyAsync(ViewOf(staged).data, ViewOf(tmp).data, dst.nbytes(), compute_));
    return api_->CopyStrided(ViewOf(staged), ViewOf(dst), compute_);
  }
  // Device -> host: made contiguous in dst's dtype on the device, one transfer, then the
  // host waits for it.
  Allocator on_device(this);
  Tensor packed = src;
  if (!src.IsContiguous() || src.dtype() != dst.dtype()) {
    OVERLAP_ASSIGN_OR_RETURN(packed, Tensor::Uninitialized(on_device, dst.dtype(), src.shape()));
    OVERLAP_RETURN_IF_ERROR(api_->CopyStrided(ViewOf(src), ViewOf(packed), compute_));
  }
  Allocator host;
  Tensor landing = dst;
  if (!dst.IsContiguous()) {
    OVERLAP_ASSIGN_OR_RETURN(landing, Tensor::Uninitialized(host, dst.dtype(), dst.shape()));
  }
  OVERLAP_RETURN_IF_ERROR(
      api_->MemcpyAsync(ViewOf(landing).data, ViewOf(packed).data, dst.nbytes(), compute_));
  OVERLAP_RETURN_IF_ERROR(QueueErrorRead());
  OVERLAP_RETURN_IF_ERROR(api_->StreamSynchronize(compute_));
  OVERLAP_RETURN_IF_ERROR(CheckErrorRead());
  return landing.SharesStorageWith(dst) ? absl::OkStatus() : CopyConvert(landing, dst);
}

}  // namespace overlap
