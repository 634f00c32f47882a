#include "runtime/cuda/nccl_communicator.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "graph/status_macros.h"

namespace overlap {
namespace {

// What the communicator and its Works share: a Work may outlive the communicator.
struct Shared {
  GpuApi* api = nullptr;
  std::mutex mu;
  absl::Status failed;                 // the first failure
  std::vector<GpuEvent*> free_events;  // returned by dead Works
  std::vector<GpuEvent*> all_events;   // destroyed with the communicator
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Shared> shared, std::string what, GpuEvent* event)
      : shared_(std::move(shared)), what_(std::move(what)), event_(event), issued_(absl::Now()) {}
  ~NcclWork() override {
    if (event_ == nullptr) return;
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->free_events.push_back(event_);
  }

  absl::Status Wait(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      if (Done()) return result();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(what_, " did not finish within ", absl::FormatDuration(timeout)));
      }
      absl::SleepFor(absl::Microseconds(100));
    }
  }
  bool Done() const override { return done_.load(); }
  std::string what() const override { return what_; }
  absl::Time issued() const override { return issued_; }
  absl::Time started() const override { return issued_; }
  GpuEvent* event() const { return event_; }

  // The poller's: finishes the work with `status` (first call wins).
  void Finish(absl::Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_.load()) return;
      status_ = std::move(status);
    }
    done_.store(true);
  }
  absl::Status result() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::string what_;
  GpuEvent* event_;
  absl::Time issued_;
  mutable std::mutex mu_;
  absl::Status status_;
  std::atomic<bool> done_{false};
};

class NcclComm final : public NcclCommunicator {
 public:
  NcclComm(NcclOptions o, GpuComm* comm) : o_(std::move(o)), comm_(comm) {
    shared_ = std::make_shared<Shared>();
    shared_->api = o_.api;
    poller_ = std::thread([this] { Poll(); });
  }
  ~NcclComm() override {
    Shutdown().IgnoreError();
    for (GpuEvent* e : shared_->all_events) o_.api->DestroyEvent(e).IgnoreError();
  }

  int rank() const override { return o_.rank; }
  int size() const override { return o_.world_size; }
  int streams() const override { return 1; }
  Device device() const override { return Device::kCuda; }
  GpuStream* stream() const override { return o_.stream; }

  absl::Status status() const override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->failed;
  }

  std::shared_ptr<Work> AllReduce(Tensor t, const CollectiveOptions&) override {
    return Issue(NcclCollective::kAllReduce, t, t, t.numel(), 0);
  }
  std::shared_ptr<Work> AllGather(Tensor in, Tensor out, const CollectiveOptions&) override {
    if (out.numel() != in.numel() * o_.world_size) {
      return Refused(absl::InvalidArgumentError(absl::StrCat("allgather: the output has ",
                                                             out.numel(), " elements, not ",
                                                             o_.world_size, " x ", in.numel())));
    }
    return Issue(NcclCollective::kAllGather, in, out, in.numel(), 0);
  }
  std::shared_ptr<Work> ReduceScatter(Tensor in, Tensor out, const CollectiveOptions&) override {
    if (in.numel() != out.numel() * o_.world_size) {
      return Refused(absl::InvalidArgumentError(absl::StrCat("reduce_scatter: the input has ",
                                                             in.numel(), " elements, not ",
                                                             o_.world_size, " x ", out.numel())));
    }
    return Issue(NcclCollective::kReduceScatter, in, out, out.numel(), 0);
  }
  std::shared_ptr<Work> Broadcast(Tensor t, int root, const CollectiveOptions&) override {
    if (root < 0 || root >= o_.world_size) {
      return Refused(absl::InvalidArgumentError(absl::StrCat("broadcast: no rank ", root)));
    }
    return Issue(NcclCollective::kBroadcast, t, t, t.numel(), root);
  }
  std::shared_ptr<Work> Barrier(const CollectiveOptions&) override {
    // NCCL has no barrier: an allreduce of one float on a buffer of the communicator's.
    if (barrier_ == nullptr) {
      absl::StatusOr<void*> p = o_.api->MallocAsync(sizeof(float), o_.stream);
      if (!p.ok()) return Refused(p.status());
      barrier_ = *p;
    }
    std::shared_ptr<Storage> s =
        Storage::Wrap(static_cast<std::byte*>(barrier_), sizeof(float), Device::kCuda, nullptr);
    absl::StatusOr<Tensor> t = Tensor::FromStorage(s, DType::kFloat32, {1});
    return Issue(NcclCollective::kAllReduce, *t, *t, 1, 0, "barrier");
  }

  void Abort(absl::Status reason) override { Fail(std::move(reason), /*publish=*/true); }

  std::vector<std::shared_ptr<Work>> Recent() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::vector<std::shared_ptr<Work>>(recent_.begin(), recent_.end());
  }

  absl::Status GroupStart() override {
    if (in_group_) return absl::FailedPreconditionError("NCCL group already open");
    if (o_.after != nullptr) OVERLAP_RETURN_IF_ERROR(OrderAfter());
    OVERLAP_RETURN_IF_ERROR(o_.api->NcclGroupStart());
    in_group_ = true;
    return absl::OkStatus();
  }
  absl::Status GroupEnd() override {
    if (!in_group_) return absl::FailedPreconditionError("no NCCL group open");
    in_group_ = false;
    absl::Status s = o_.api->NcclGroupEnd();
    if (s.ok()) s = AwaitQueued();
    std::vector<std::shared_ptr<NcclWork>> group;
    group.swap(group_);
    for (auto& w : group) {
      if (s.ok()) s = o_.api->RecordEvent(w->event(), o_.stream);
      if (!s.ok()) {
        Fail(s, true);
        w->Finish(s);
      } else {
        Track(w);
      }
    }
    return s;
  }

  absl::Status Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return absl::OkStatus();
      shut_down_ = true;
      stopping_ = true;
    }
    cv_.notify_all();
    if (poller_.joinable()) poller_.join();
    absl::Status failed = status();
    if (barrier_ != nullptr && failed.ok()) o_.api->FreeAsync(barrier_, o_.stream).IgnoreError();
    if (!failed.ok()) return absl::OkStatus();  // aborted already: ncclCommAbort freed it
    absl::Status s = o_.api->NcclCommFinalize(comm_);
    if (s.ok()) s = AwaitQueued();
    if (!s.ok()) {
      o_.api->NcclCommAbort(comm_).IgnoreError();
      return s;
    }
    return o_.api->NcclCommDestroy(comm_);
  }

 private:
  std::shared_ptr<Work> Refused(absl::Status s) {
    auto w = std::make_shared<NcclWork>(shared_, "refused collective", nullptr);
    w->Finish(std::move(s));
    return w;
  }

  std::shared_ptr<Work> Issue(NcclCollective op, const Tensor& in, const Tensor& out, int64_t count,
                              int root, const char* name = nullptr) {
    static constexpr const char* kNames[] = {"allreduce", "allgather", "reduce_scatter",
                                             "broadcast"};
    const int64_t seq = seq_++;
    std::string what =
        absl::StrCat(name != nullptr ? name : kNames[static_cast<int>(op)], " #", seq, " (",
                     in.nbytes(), " bytes, rank ", o_.rank, " of ", o_.world_size, ")");
    if (in.device() != Device::kCuda || out.device() != Device::kCuda) {
      return Refused(absl::InvalidArgumentError(
          absl::StrCat(what, ": NCCL needs device tensors (got host memory)")));
    }
    if (!in.IsContiguous() || !out.IsContiguous() || in.dtype() != out.dtype()) {
      return Refused(absl::InvalidArgumentError(
          absl::StrCat(what, ": tensors must be contiguous and of one dtype")));
    }
    if (absl::Status f = status(); !f.ok()) return Refused(f);
    if (o_.after != nullptr && !in_group_) {
      absl::Status ordered = OrderAfter();
      if (!ordered.ok()) return Refused(ordered);
    }
    GpuEvent* event = nullptr;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (!shared_->free_events.empty()) {
        event = shared_->free_events.back();
        shared_->free_events.pop_back();
      }
    }
    if (event == nullptr) {
      absl::StatusOr<GpuEvent*> e = o_.api->CreateEvent();
      if (!e.ok()) return Refused(e.status());
      event = *e;
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->all_events.push_back(event);
    }
    auto w = std::make_shared<NcclWork>(shared_, std::move(what), event);
    absl::Status s = o_.api->NcclCollectiveAsync(op, const_cast<Tensor&>(in).data<std::byte>(),
                                                 const_cast<Tensor&>(out).data<std::byte>(), count,
                                                 in.dtype(), root, comm_, o_.stream);
    if (s.ok() && in_group_) {
      group_.push_back(w);
      return w;
    }
    if (s.ok()) s = AwaitQueued();
    if (s.ok()) s = o_.api->RecordEvent(event, o_.stream);
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat(w->what(), ": ", s.message()));
      Fail(s, true);
      w->Finish(s);
      return w;
    }
    Track(w);
    return w;
  }

  // The communication stream waits for the work queued on `after` so far (device-side).
  absl::Status OrderAfter() {
    if (after_event_ == nullptr) {
      OVERLAP_ASSIGN_OR_RETURN(after_event_, o_.api->CreateEvent());
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->all_events.push_back(after_event_);
    }
    OVERLAP_RETURN_IF_ERROR(o_.api->RecordEvent(after_event_, o_.after));
    return o_.api->StreamWaitEvent(o_.stream, after_event_);
  }

  // A nonblocking communicator's call may still be queuing when it returns; NCCL wants the
  // next call only once ncclCommGetAsyncError stops answering ncclInProgress.
  absl::Status AwaitQueued() {
    const absl::Time deadline = absl::Now() + o_.timeout;
    while (true) {
      absl::StatusOr<bool> ready = o_.api->NcclCommReady(comm_);
      if (!ready.ok()) return ready.status();
      if (*ready) return absl::OkStatus();
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "an NCCL call was still being queued after ", absl::FormatDuration(o_.timeout)));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  void Track(std::shared_ptr<NcclWork> w) {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.push_back(w);
    recent_.push_back(w);
    if (recent_.size() > 16) recent_.pop_front();
  }

  // Records the first failure, tells the other ranks (publish), aborts the communicator and
  // ends every outstanding operation with it.
  void Fail(absl::Status reason, bool publish) {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (!shared_->failed.ok()) return;
      shared_->failed = reason;
    }
    if (publish && o_.store != nullptr) {
      o_.store
          ->Set(o_.key_prefix + "/abort", absl::StrCat("rank ", o_.rank, ": ", reason.message()))
          .IgnoreError();
    }
    o_.api->NcclCommAbort(comm_).IgnoreError();
    std::vector<std::shared_ptr<NcclWork>> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending.swap(outstanding_);
    }
    for (auto& w : pending) w->Finish(reason);
  }

  void Poll() {
    absl::Time next_store = absl::Now();
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, absl::ToChronoNanoseconds(o_.poll), [&] { return stopping_; });
        if (stopping_ && outstanding_.empty()) return;
      }
      if (!status().ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        continue;
      }
      // Completed operations.
      std::vector<std::shared_ptr<NcclWork>> live;
      {
        std::lock_guard<std::mutex> lock(mu_);
        live = outstanding_;
      }
      absl::Status failure;
      for (auto& w : live) {
        absl::StatusOr<bool> done = o_.api->EventDone(w->event());
        if (!done.ok()) {
          failure = done.status();
          break;
        }
        if (*done) {
          w->Finish(absl::OkStatus());
        } else if (absl::Now() - w->issued() > o_.timeout) {
          failure = absl::DeadlineExceededError(
              absl::StrCat(w->what(), " did not complete within ", absl::FormatDuration(o_.timeout),
                           " (a rank is stuck or gone); the communicator is aborted"));
          break;
        }
      }
      if (failure.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        outstanding_.erase(std::remove_if(outstanding_.begin(), outstanding_.end(),
                                          [](const auto& w) { return w->Done(); }),
                           outstanding_.end());
      }
      if (failure.ok()) {
        absl::StatusOr<bool> ready = o_.api->NcclCommReady(comm_);
        if (!ready.ok()) failure = ready.status();
      }
      if (!failure.ok()) {
        Fail(failure, true);
        continue;
      }
      if (o_.store != nullptr && absl::Now() >= next_store) {
        next_store = absl::Now() + o_.store_poll;
        absl::StatusOr<std::string> peer =
            o_.store->Get(o_.key_prefix + "/abort", absl::ZeroDuration());
        if (peer.ok()) {
          Fail(absl::AbortedError(absl::StrCat("NCCL communicator aborted by ", *peer)),
               /*publish=*/false);
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && outstanding_.empty()) return;
    }
  }

  NcclOptions o_;
  GpuComm* comm_;
  std::shared_ptr<Shared> shared_;
  int64_t seq_ = 0;
  bool in_group_ = false;
  std::vector<std::shared_ptr<NcclWork>> group_;
  void* barrier_ = nullptr;
  GpuEvent* after_event_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool shut_down_ = false;
  std::vector<std::shared_ptr<NcclWork>> outstanding_;
  std::deque<std::shared_ptr<Work>> recent_;
  std::thread poller_;
};

}  // namespace

GpuEvent* NcclWorkEvent(const Work& w) {
  const auto* n = dynamic_cast<const NcclWork*>(&w);
  return n != nullptr ? n->event() : nullptr;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(const NcclOptions& o) {
  if (o.api == nullptr || o.stream == nullptr) {
    return absl::InvalidArgumentError("NcclOptions needs an api and a communication stream");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: rank ", o.rank, " of world size ", o.world_size));
  }
  if (o.world_size > 1 && o.store == nullptr) {
    return absl::InvalidArgumentError("NCCL across ranks needs the job's store");
  }
  const std::string id_key = o.key_prefix + "/id";
  std::string id;
  if (o.rank == 0) {
    OVERLAP_ASSIGN_OR_RETURN(id, o.api->NcclUniqueId());
    if (o.store != nullptr) OVERLAP_RETURN_IF_ERROR(o.store->Set(id_key, id));
  } else {
    absl::StatusOr<std::string> got = o.store->Get(id_key, o.timeout);
    if (!got.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("NCCL: rank ", o.rank, " got no unique id from rank 0 within ",
                       absl::FormatDuration(o.timeout), ": ", got.status().message()));
    }
    id = *std::move(got);
  }
  OVERLAP_ASSIGN_OR_RETURN(GpuComm * comm, o.api->NcclCommInit(o.world_size, o.rank, id));
  const absl::Time deadline = absl::Now() + o.timeout;
  while (true) {
    absl::StatusOr<bool> ready = o.api->NcclCommReady(comm);
    if (!ready.ok()) {
      o.api->NcclCommAbort(comm).IgnoreError();
      return ready.status();
    }
    if (*ready) break;
    if (absl::Now() > deadline) {
      o.api->NcclCommAbort(comm).IgnoreError();
      return absl::DeadlineExceededError(absl::StrCat(
          "NCCL: the communicator (rank ", o.rank, " of ", o.world_size, ") was not ready within ",
          absl::FormatDuration(o.timeout), ": a rank did not join"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return std::unique_ptr<NcclCommunicator>(new NcclComm(o, comm));
}

}  // namespace overlap
