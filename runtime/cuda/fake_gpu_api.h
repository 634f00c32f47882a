// A GpuApi on the host: the emulated device. The oracle of the backend's tests on machines
// without a GPU, and `overlap run --device cuda-emulated`.
//
// Device memory is host memory, and every call but a collective runs when it is issued,
// after the host has waited for what the stream would have waited for (earlier collectives
// on the stream, events it waits on). A collective runs when the last rank of its
// communicator has issued it (ranks are threads of one test sharing a FakeNcclWorld), so a
// rank issues it and goes on, as with NCCL.
//
// What it checks, as a race detector for stream order: every operation carries a vector
// clock (one entry per stream; an event carries its stream's clock, a wait merges it), and
// each use of a device buffer must happen after its allocation and its last write, a write
// after the reads since that write, and a free after every use. A use that is not ordered
// so is recorded in violations() (the call itself proceeds). It also counts host
// synchronisations (the backend must issue none inside a step) and the pool's bytes.
//
// Faults (FakeNcclWorld): an asynchronous error on one rank at a chosen collective, or a
// collective that never completes on any rank; ncclCommAbort ends a communicator's pending
// operations, as NCCL's does.
#ifndef OVERLAP_RUNTIME_CUDA_FAKE_GPU_API_H_
#define OVERLAP_RUNTIME_CUDA_FAKE_GPU_API_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "runtime/cuda/gpu_api.h"

namespace overlap {

// One queued operation's completion, shared with the world that completes it.
struct FakeOpState {
  std::atomic<bool> done{false};
};

// The communicators of one test's ranks. Thread-safe.
class FakeNcclWorld {
 public:
  // Rank `rank`'s collective number `seq` (0-based, counting every collective it issues)
  // never arrives, and that rank's communicator reports `message` as its asynchronous error.
  void InjectError(int rank, int64_t seq, std::string message);
  // Collective number `seq` arrives on every rank but never completes (a stuck network).
  void InjectHang(int64_t seq);

  // Internals for FakeGpuApi.
  struct Comm;
  std::shared_ptr<Comm> Init(int nranks, int rank, const std::string& id);
  absl::StatusOr<bool> Ready(Comm& c);
  void Abort(Comm& c);
  absl::StatusOr<std::shared_ptr<FakeOpState>> Issue(Comm& c, NcclCollective op, const void* send,
                                                     void* recv, int64_t count, DType dtype,
                                                     int root);
  std::string NewId();

 private:
  struct Pending;
  void Run(Pending& p);

  std::mutex mu_;
  int64_t next_id_ = 0;
  // Communicators by unique id, then collectives by sequence number.
  std::map<std::string, std::vector<std::shared_ptr<Comm>>> comms_;
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<Pending>> pending_;
  std::map<std::pair<int, int64_t>, std::string> errors_;
  int64_t hang_seq_ = -1;
};

struct FakeGpuOptions {
  std::shared_ptr<FakeNcclWorld> nccl;             // nullptr: NCCL calls fail
  int64_t device_memory_bytes = int64_t{1} << 32;  // MallocAsync beyond it: ResourceExhausted
  // A host wait that the fake cannot finish (a collective that never completes, with no
  // abort) fails after this long rather than hanging the test.
  absl::Duration block_limit = absl::Seconds(20);
};

class FakeGpuApi final : public GpuApi {
 public:
  explicit FakeGpuApi(FakeGpuOptions options = {});
  ~FakeGpuApi() override;

  // One issued operation: what it was, its stream and its vector clock.
  struct Op {
    std::string what;
    int stream = -1;
    std::vector<int64_t> clock;
  };
  // Whether `a` happens before `b` in stream order (same stream: issue order; otherwise
  // through events). O(1).
  static bool HappensBefore(const Op& a, const Op& b);
  std::vector<Op> ops() const;
  std::vector<std::string> violations() const;
  int device_synchronizations() const { return device_syncs_.load(); }
  int stream_synchronizations() const { return stream_syncs_.load(); }
  int64_t live_bytes() const;
  int64_t peak_bytes() const;

  absl::StatusOr<GpuInfo> Probe() override;
  absl::Status CheckUsable(int device) override;
  absl::Status SetDevice(int device) override;
  absl::StatusOr<GpuStream*> CreateStream(bool high_priority) override;
  absl::Status DestroyStream(GpuStream* s) override;
  absl::StatusOr<GpuEvent*> CreateEvent() override;
  absl::Status DestroyEvent(GpuEvent* e) override;
  absl::Status RecordEvent(GpuEvent* e, GpuStream* s) override;
  absl::Status StreamWaitEvent(GpuStream* s, GpuEvent* e) override;
  absl::StatusOr<bool> EventDone(GpuEvent* e) override;
  absl::Status StreamSynchronize(GpuStream* s) override;
  absl::Status DeviceSynchronize() override;
  absl::StatusOr<void*> MallocAsync(int64_t bytes, GpuStream* s) override;
  absl::Status FreeAsync(void* p, GpuStream* s) override;
  absl::StatusOr<int64_t> PoolUsedBytes() override;
  absl::StatusOr<int64_t> PoolUsedHighBytes() override;
  absl::Status ResetPoolUsedHigh() override;
  absl::Status MemcpyAsync(void* dst, const void* src, int64_t bytes, GpuStream* s) override;
  absl::Status MemsetAsync(void* p, int value, int64_t bytes, GpuStream* s) override;
  absl::Status Spin(GpuStream* s, double seconds, absl::Span<void* const> reads,
                    absl::Span<void* const> writes) override;
  absl::Status CopyStrided(const DeviceView& src, const DeviceView& dst, GpuStream* s) override;
  absl::Status Gemm(const GemmArgs& g, GpuStream* s) override;
  absl::Status Elementwise(const ElementwiseArgs& e, GpuStream* s) override;
  absl::Status Reduce(const ReduceArgs& r, GpuStream* s) override;
  absl::Status Nn(const NnArgs& a, GpuStream* s) override;
  // The definition: nn_ops.h's batch-norm units (the CPU kernel's very formula).
  absl::Status BatchNorm(const BatchNormArgs& a, GpuStream* s) override;
  absl::Status Convolution(ConvPass pass, const ConvShape& shape, const void* a, const void* b,
                           void* out, GpuStream* st) override;
  absl::StatusOr<std::string> NcclUniqueId() override;
  absl::StatusOr<GpuComm*> NcclCommInit(int nranks, int rank,
                                        const std::string& unique_id) override;
  absl::StatusOr<bool> NcclCommReady(GpuComm* c) override;
  absl::Status NcclCommAbort(GpuComm* c) override;
  absl::Status NcclCommFinalize(GpuComm* c) override;
  absl::Status NcclCommDestroy(GpuComm* c) override;
  absl::Status NcclCollectiveAsync(NcclCollective op, const void* send, void* recv, int64_t count,
                                   DType dtype, int root, GpuComm* c, GpuStream* s) override;
  absl::Status NcclGroupStart() override { return absl::OkStatus(); }
  absl::Status NcclGroupEnd() override { return absl::OkStatus(); }

 private:
  struct Stream;
  struct Event;
  struct Block;
  // Waits (without the lock) until the stream's dependencies are done; then, under the lock,
  // stamps a new operation on it and checks its buffer uses.
  absl::Status Enter(Stream& st);
  // Enter for a handle: the stream, ready for its next operation.
  absl::StatusOr<Stream*> Entered(GpuStream* s);
  Op Stamp(Stream& st, std::string what);
  void Use(const Op& op, const void* p, bool write);
  // Runs the nn kernel's units as the operation `what` (Nn, and BatchNorm's definition).
  absl::Status RunNn(const NnArgs& a, GpuStream* s, const char* what);
  Block* Find(const void* p);
  absl::Status WaitAll(std::vector<std::shared_ptr<FakeOpState>> deps, const char* what);

  FakeGpuOptions options_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Event>> events_;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks_;  // by start address; freed ones kept
  std::vector<Op> ops_;
  std::vector<std::string> violations_;
  std::vector<std::shared_ptr<FakeNcclWorld::Comm>> comms_;
  std::vector<int64_t> host_clock_;  // what the host has seen complete
  int64_t live_ = 0, peak_ = 0;
  std::atomic<int> device_syncs_{0}, stream_syncs_{0};
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_FAKE_GPU_API_H_
