#include "runtime/cuda/gpu_replay.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

// A device pointer as a tensor for the communicator (the replay owns the bytes).
Tensor DeviceTensor(void* p, int64_t bytes, DType dtype) {
  auto s = Storage::Wrap(static_cast<std::byte*>(p), bytes, Device::kCuda, nullptr);
  return *Tensor::FromStorage(std::move(s), dtype, {bytes / DTypeSize(dtype)});
}

// Buffers are padded to a multiple of world_size x 4 bytes so that a gradient splits into
// equal float32 shards and a parameter into equal byte shards (DeepSpeed pads likewise).
int64_t Padded(int64_t bytes, int world) {
  const int64_t unit = int64_t{4} * world;
  return std::max<int64_t>(unit, (bytes + unit - 1) / unit * unit);
}

// Per ds_id: a resident device block (a parameter's shard or a shard gradient).
struct ShardBuf {
  void* p = nullptr;
  int64_t bytes = 0;
};
using Shards = absl::flat_hash_map<int64_t, ShardBuf>;

class GpuDevice final : public ReplayDevice {
 public:
  GpuDevice(const GpuTarget& t, const GpuReplayOptions& o, const Shards* shards,
            const Shards* grad_shards)
      : t_(t),
        o_(o),
        api_(*t.api),
        world_(t.comm != nullptr ? t.comm->size() : 1),
        shards_(*shards),
        grad_shards_(*grad_shards) {}
  ~GpuDevice() override {
    for (auto& [id, b] : bufs_) api_.FreeAsync(b.p, t_.compute).IgnoreError();
  }

  absl::Status Init() {
    OVERLAP_ASSIGN_OR_RETURN(event_, api_.CreateEvent());
    return absl::OkStatus();
  }
  void DestroyEvent() {
    if (event_ != nullptr) api_.DestroyEvent(event_).IgnoreError();
  }

  absl::Status Take(NodeId id, int64_t bytes) override {
    OVERLAP_ASSIGN_OR_RETURN(void* p, api_.MallocAsync(Padded(bytes, world_), t_.compute));
    bufs_[id] = Buf{p, bytes, false};
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return absl::OkStatus();
  }

  absl::Status Give(NodeId id) override {
    OVERLAP_RETURN_IF_ERROR(Flush());
    auto it = bufs_.find(id);
    if (it == bufs_.end()) return absl::OkStatus();
    const Buf b = it->second;
    bufs_.erase(it);
    live_ -= b.bytes;
    if (!b.on_comm) return api_.FreeAsync(b.p, t_.compute);
    // Its last compute use is behind us on the compute stream: the communication stream
    // waits for that point, then frees after its own use.
    OVERLAP_RETURN_IF_ERROR(api_.RecordEvent(event_, t_.compute));
    OVERLAP_RETURN_IF_ERROR(api_.StreamWaitEvent(t_.comm->stream(), event_));
    return api_.FreeAsync(b.p, t_.comm->stream());
  }

  absl::Status Compute(const Node&, double seconds, absl::Span<const NodeId> reads,
                       NodeId write) override {
    OVERLAP_RETURN_IF_ERROR(Flush());
    if (!o_.compute) return absl::OkStatus();
    std::vector<void*> r, w;
    for (NodeId id : reads) {
      auto it = bufs_.find(id);
      if (it != bufs_.end() && id != write) r.push_back(it->second.p);
    }
    auto it = bufs_.find(write);
    if (it != bufs_.end()) w.push_back(it->second.p);
    return api_.Spin(t_.compute, seconds, r, w);
  }

  absl::Status Allgather(const Node& node, NodeId buffer) override {
    if (!Communicating() || IsPersistentAllgather(node)) return absl::OkStatus();
    pending_.push_back({DsId(node), buffer});
    return absl::OkStatus();
  }

  absl::Status WaitAllgather(const Node&, NodeId buffer) override {
    OVERLAP_RETURN_IF_ERROR(Flush());
    auto it = gathers_.find(buffer);
    if (it == gathers_.end()) return absl::OkStatus();  // resident, or not communicating
    GpuEvent* done = NcclWorkEvent(*it->second);
    if (done == nullptr) return it->second->Wait(absl::ZeroDuration());  // refused: its error
    if (!o_.debug_drop_waits) OVERLAP_RETURN_IF_ERROR(api_.StreamWaitEvent(t_.compute, done));
    gathers_.erase(it);
    return absl::OkStatus();
  }

  absl::Status Reduce(const Node& node, NodeId grad, bool bucket_last) override {
    OVERLAP_RETURN_IF_ERROR(Flush());
    if (!Communicating()) return absl::OkStatus();
    bucket_.push_back({DsId(node), grad});
    if (!bucket_last) return absl::OkStatus();
    OVERLAP_RETURN_IF_ERROR(OrderAfterCompute());
    OVERLAP_RETURN_IF_ERROR(t_.comm->GroupStart());
    for (const auto& [ds, id] : bucket_) {
      auto b = bufs_.find(id);
      auto out = grad_shards_.find(ds);
      if (b == bufs_.end() || out == grad_shards_.end()) continue;
      b->second.on_comm = true;
      // The shard gradient's size is the gradient's (its buffer may be a larger root).
      const int64_t shard = out->second.bytes;
      if (shard * world_ > Padded(b->second.bytes, world_)) {
        return absl::InvalidArgumentError(
            absl::StrCat("reduce_grad of ds_id ", ds, ": the gradient's buffer (", b->second.bytes,
                         " bytes) is smaller than its meta.tensor_size says"));
      }
      works_.push_back(
          t_.comm->ReduceScatter(DeviceTensor(b->second.p, shard * world_, DType::kFloat32),
                                 DeviceTensor(out->second.p, shard, DType::kFloat32)));
      ++collectives_;
    }
    bucket_.clear();
    return t_.comm->GroupEnd();
  }

  absl::Status Finish() override {
    OVERLAP_RETURN_IF_ERROR(Flush());
    for (auto& [id, w] : gathers_) works_.push_back(w);
    gathers_.clear();
    // The step's one host wait: its collectives' done events (polled, with the
    // communicator's deadline and abort), then each stream.
    for (auto& w : works_) OVERLAP_RETURN_IF_ERROR(w->Wait(o_.timeout));
    works_.clear();
    if (t_.comm != nullptr) OVERLAP_RETURN_IF_ERROR(api_.StreamSynchronize(t_.comm->stream()));
    return api_.StreamSynchronize(t_.compute);
  }

  int64_t live() const override { return live_; }
  int64_t peak() const override { return peak_; }
  int64_t collectives() const { return collectives_; }

 private:
  struct Buf {
    void* p;
    int64_t bytes;
    bool on_comm;  // used on the communication stream: freed there
  };

  bool Communicating() const { return o_.communicate && t_.comm != nullptr; }

  absl::Status OrderAfterCompute() {
    OVERLAP_RETURN_IF_ERROR(api_.RecordEvent(event_, t_.compute));
    return api_.StreamWaitEvent(t_.comm->stream(), event_);
  }

  // Issues the allgathers queued since the last other node, as one group, ordered after
  // the compute stream's work so far.
  absl::Status Flush() {
    if (pending_.empty()) return absl::OkStatus();
    OVERLAP_RETURN_IF_ERROR(OrderAfterCompute());
    OVERLAP_RETURN_IF_ERROR(t_.comm->GroupStart());
    for (const auto& [ds, id] : pending_) {
      auto b = bufs_.find(id);
      auto in = shards_.find(ds);
      if (b == bufs_.end() || in == shards_.end()) continue;
      b->second.on_comm = true;
      const int64_t shard = in->second.bytes;
      gathers_[id] = t_.comm->AllGather(DeviceTensor(in->second.p, shard, DType::kUInt8),
                                        DeviceTensor(b->second.p, shard * world_, DType::kUInt8));
      ++collectives_;
    }
    pending_.clear();
    return t_.comm->GroupEnd();
  }

  GpuTarget t_;
  GpuReplayOptions o_;
  GpuApi& api_;
  int world_;
  const Shards& shards_;
  const Shards& grad_shards_;
  GpuEvent* event_ = nullptr;
  absl::flat_hash_map<NodeId, Buf> bufs_;
  std::vector<std::pair<int64_t, NodeId>> pending_, bucket_;
  absl::flat_hash_map<NodeId, std::shared_ptr<Work>> gathers_;
  std::vector<std::shared_ptr<Work>> works_;
  int64_t live_ = 0, peak_ = 0, collectives_ = 0;
};

}  // namespace

absl::StatusOr<GpuReplayResult> GpuReplay(const Graph& g, const GpuTarget& target,
                                          const GpuReplayOptions& options) {
  if (target.api == nullptr || target.compute == nullptr) {
    return absl::InvalidArgumentError("GpuReplay needs an api and a compute stream");
  }
  if (options.steps < 1 || !(options.time_scale >= 0)) {
    return absl::InvalidArgumentError("GpuReplay: steps must be >= 1 and time_scale >= 0");
  }
  GpuApi& api = *target.api;
  const int world = target.comm != nullptr ? target.comm->size() : 1;
  OVERLAP_ASSIGN_OR_RETURN(const GpuInfo info, api.Probe());

  // Residents, allocated up front: each parameter's shard and each shard gradient.
  GpuReplayResult result;
  Shards shards, grad_shards;
  std::vector<void*> residents;
  auto allocate = [&](int64_t bytes) -> absl::StatusOr<void*> {
    OVERLAP_ASSIGN_OR_RETURN(void* p, api.MallocAsync(bytes, target.compute));
    OVERLAP_RETURN_IF_ERROR(api.MemsetAsync(p, 0, bytes, target.compute));
    residents.push_back(p);
    result.resident_bytes += bytes;
    return p;
  };
  absl::Status status;
  for (NodeId id : g.OrderVector()) {
    const Node& n = g.node(id);
    if (IsAllgather(n) && !shards.contains(DsId(n))) {
      const int64_t bytes = Padded(SizeOf(n), world) / world;
      absl::StatusOr<void*> p = allocate(bytes);
      if (!p.ok()) status = p.status();
      shards[DsId(n)] = {p.ok() ? *p : nullptr, bytes};
    }
    if (IsReduce(n) && !n.inputs().empty() && !grad_shards.contains(DsId(n))) {
      const int64_t bytes = Padded(SizeOf(g.node(n.inputs()[0])), world) / world;
      absl::StatusOr<void*> p = allocate(bytes);
      if (!p.ok()) status = p.status();
      grad_shards[DsId(n)] = {p.ok() ? *p : nullptr, bytes};
    }
    if (!status.ok()) break;
  }
  if (status.ok()) status = api.StreamSynchronize(target.compute);
  if (status.ok()) status = api.ResetPoolUsedHigh();

  ReplayOptions ro;
  ro.time_scale = options.compute ? options.time_scale : 0;
  ro.guard_bytes = std::max<int64_t>(1, info.device_memory_bytes - result.resident_bytes);
  for (int step = 0; status.ok() && step < options.steps; ++step) {
    GpuDevice device(target, options, &shards, &grad_shards);
    status = device.Init();
    if (status.ok()) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<ReplayResult> r = ReplayOn(g, ro, device);
      if (r.ok()) {
        result.replay = *r;
        result.step_s.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        result.collectives = device.collectives();
      } else {
        status = r.status();
      }
    }
    device.DestroyEvent();
  }
  if (status.ok()) {
    // The step's buffers the output held went back to the pool with each step's device.
    status = api.StreamSynchronize(target.compute);
  }
  if (status.ok()) {
    absl::StatusOr<int64_t> high = api.PoolUsedHighBytes();
    if (high.ok()) result.pool_peak_bytes = *high - result.resident_bytes;
    status = high.status();
  }
  for (void* p : residents) api.FreeAsync(p, target.compute).IgnoreError();
  if (!status.ok()) return status;
  return result;
}

}  // namespace overlap
