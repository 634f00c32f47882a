#include "runtime/cuda/fake_gpu_api.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "graph/status_macros.h"

namespace overlap {

struct FakeNcclWorld::Comm {
  std::string id;
  int nranks = 0, rank = 0;
  int64_t seq = 0;  // collectives issued
  std::string error;
  bool aborted = false;
  std::vector<std::shared_ptr<FakeOpState>> pending;
};

struct FakeNcclWorld::Pending {
  NcclCollective op;
  int64_t count = 0;
  DType dtype = DType::kFloat32;
  int root = 0;
  int arrived = 0;
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<std::shared_ptr<FakeOpState>> states;
};

namespace {

const char* OpName(NcclCollective op) {
  switch (op) {
    case NcclCollective::kAllReduce:
      return "allreduce";
    case NcclCollective::kAllGather:
      return "allgather";
    case NcclCollective::kReduceScatter:
      return "reduce_scatter";
    case NcclCollective::kBroadcast:
      return "broadcast";
  }
  return "?";
}

template <typename T>
void Sum(const std::vector<const void*>& send, int64_t offset, int64_t count, T* out) {
  std::vector<T> acc(count, T(0));
  for (const void* s : send) {
    const T* in = static_cast<const T*>(s) + offset;
    for (int64_t i = 0; i < count; ++i) acc[i] += in[i];
  }
  std::copy(acc.begin(), acc.end(), out);
}

// Any other dtype (16-bit floats, integers): summed in double through tensor.h's element
// conversions (16-bit floats round to nearest even, integers by C++ rules).
void SumAnyType(const std::vector<const void*>& send, DType dtype, int64_t offset, int64_t count,
                std::byte* out) {
  const int64_t size = DTypeSize(dtype);
  auto view = [&](const void* p) {  // `count` elements from p
    auto s = Storage::Wrap(static_cast<std::byte*>(const_cast<void*>(p)), count * size,
                           Device::kCpu, nullptr);
    return *Tensor::FromStorage(std::move(s), dtype, {count});
  };
  std::vector<Tensor> in;
  for (const void* s : send) in.push_back(view(static_cast<const std::byte*>(s) + offset * size));
  Tensor result = view(out);
  for (int64_t i = 0; i < count; ++i) {
    double acc = 0;
    for (const Tensor& t : in) acc += GetElement(t, i);
    SetElement(result, i, acc);
  }
}

}  // namespace

void FakeNcclWorld::InjectError(int rank, int64_t seq, std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  errors_[{rank, seq}] = std::move(message);
}

void FakeNcclWorld::InjectHang(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  hang_seq_ = seq;
}

std::string FakeNcclWorld::NewId() {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = absl::StrCat("fake-nccl-", next_id_++);
  id.resize(128, '\0');
  return id;
}

std::shared_ptr<FakeNcclWorld::Comm> FakeNcclWorld::Init(int nranks, int rank,
                                                         const std::string& id) {
  auto c = std::make_shared<Comm>();
  c->id = id;
  c->nranks = nranks;
  c->rank = rank;
  std::lock_guard<std::mutex> lock(mu_);
  comms_[id].push_back(c);
  return c;
}

absl::StatusOr<bool> FakeNcclWorld::Ready(Comm& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c.aborted) return absl::FailedPreconditionError("the communicator was aborted");
  if (!c.error.empty()) {
    return absl::InternalError(absl::StrCat(
        "ncclCommGetAsyncError (the communicator's asynchronous error) failed at "
        "fake_gpu_api.cc: remote process exited or there was a network error (ncclResult 6); "
        "last NCCL error: ",
        c.error));
  }
  return static_cast<int>(comms_[c.id].size()) >= c.nranks;
}

void FakeNcclWorld::Abort(Comm& c) {
  std::lock_guard<std::mutex> lock(mu_);
  c.aborted = true;
  for (auto& s : c.pending) s->done.store(true);
  c.pending.clear();
}

absl::StatusOr<std::shared_ptr<FakeOpState>> FakeNcclWorld::Issue(Comm& c, NcclCollective op,
                                                                  const void* send, void* recv,
                                                                  int64_t count, DType dtype,
                                                                  int root) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c.aborted) return absl::FailedPreconditionError("the communicator was aborted");
  const int64_t seq = c.seq++;
  auto state = std::make_shared<FakeOpState>();
  c.pending.push_back(state);
  auto err = errors_.find({c.rank, seq});
  if (err != errors_.end()) {
    c.error = err->second;  // this rank's collective never arrives
    return state;
  }
  std::shared_ptr<Pending>& p = pending_[{c.id, seq}];
  if (p == nullptr) {
    p = std::make_shared<Pending>();
    p->op = op;
    p->count = count;
    p->dtype = dtype;
    p->root = root;
    p->send.assign(c.nranks, nullptr);
    p->recv.assign(c.nranks, nullptr);
  } else if (p->op != op || p->count != count || p->dtype != dtype || p->root != root) {
    // NCCL would hang or corrupt memory; the fake says which ranks disagree.
    c.error = absl::StrCat("collective #", seq, ": rank ", c.rank, " issued ", OpName(op), " of ",
                           count, " ", DTypeName(dtype), ", another rank ", OpName(p->op), " of ",
                           p->count, " ", DTypeName(p->dtype));
    return state;
  }
  p->send[c.rank] = send;
  p->recv[c.rank] = recv;
  p->states.push_back(state);
  if (++p->arrived == c.nranks && seq != hang_seq_) {
    Run(*p);
    for (auto& s : p->states) s->done.store(true);
    for (auto& comm : comms_[c.id]) {
      auto& v = comm->pending;
      v.erase(std::remove_if(v.begin(), v.end(), [](const auto& s) { return s->done.load(); }),
              v.end());
    }
    pending_.erase({c.id, seq});
  }
  return state;
}

void FakeNcclWorld::Run(Pending& p) {
  const int n = static_cast<int>(p.send.size());
  const int64_t bytes = p.count * DTypeSize(p.dtype);
  switch (p.op) {
    case NcclCollective::kAllGather: {
      for (int r = 0; r < n; ++r) {
        for (int i = 0; i < n; ++i) {
          std::memmove(static_cast<std::byte*>(p.recv[r]) + i * bytes, p.send[i], bytes);
        }
      }
      return;
    }
    case NcclCollective::kBroadcast: {
      std::vector<std::byte> root(bytes);
      std::memcpy(root.data(), p.send[p.root], bytes);
      for (int r = 0; r < n; ++r) std::memcpy(p.recv[r], root.data(), bytes);
      return;
    }
    case NcclCollective::kAllReduce:
    case NcclCollective::kReduceScatter: {
      const bool all = p.op == NcclCollective::kAllReduce;
      // Every result first, then the writes: buffers may be in place.
      std::vector<std::vector<std::byte>> out(n, std::vector<std::byte>(bytes));
      for (int r = 0; r < n; ++r) {
        const int64_t offset = all ? 0 : r * p.count;
        if (p.dtype == DType::kFloat32) {
          Sum<float>(p.send, offset, p.count, reinterpret_cast<float*>(out[r].data()));
        } else if (p.dtype == DType::kFloat64) {
          Sum<double>(p.send, offset, p.count, reinterpret_cast<double*>(out[r].data()));
        } else {
          SumAnyType(p.send, p.dtype, offset, p.count, out[r].data());
        }
      }
      for (int r = 0; r < n; ++r) std::memcpy(p.recv[r], out[r].data(), bytes);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------

struct FakeGpuApi::Stream {
  int id = 0;
  std::vector<int64_t> clock;
  std::vector<std::shared_ptr<FakeOpState>> deps;  // incomplete work it must wait for
};

struct FakeGpuApi::Event {
  int stream = -1;
  std::vector<int64_t> clock;
  std::vector<std::shared_ptr<FakeOpState>> deps;
};

struct FakeGpuApi::Block {
  std::unique_ptr<std::byte[]> data;
  int64_t bytes = 0;
  bool freed = false;
  Op alloc;
  std::optional<Op> write;  // the last write
  std::map<int, Op> reads;  // the latest read on each stream since that write
  std::map<int, Op> uses;   // the latest use on each stream
};

namespace {

void Merge(std::vector<int64_t>& into, const std::vector<int64_t>& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

template <typename T>
T* Handle(std::vector<std::unique_ptr<T>>& v, void* h) {
  for (auto& p : v) {
    if (p.get() == h) return p.get();
  }
  return nullptr;
}

}  // namespace

FakeGpuApi::FakeGpuApi(FakeGpuOptions options) : options_(std::move(options)) {}
FakeGpuApi::~FakeGpuApi() = default;

bool FakeGpuApi::HappensBefore(const Op& a, const Op& b) {
  if (a.stream < 0) return true;
  const int64_t mine = a.clock[a.stream];
  const int64_t seen = a.stream < static_cast<int>(b.clock.size()) ? b.clock[a.stream] : 0;
  return mine <= seen;
}

std::vector<FakeGpuApi::Op> FakeGpuApi::ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}
std::vector<std::string> FakeGpuApi::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}
int64_t FakeGpuApi::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}
int64_t FakeGpuApi::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

absl::StatusOr<GpuInfo> FakeGpuApi::Probe() {
  GpuInfo info;
  info.runtime_version = info.driver_version = 13000;
  info.nccl_version = 22809;
  info.device_count = 1;
  info.device_name = "fake GPU (host memory)";
  info.device_memory_bytes = options_.device_memory_bytes;
  info.compute_major = 9;
  return info;
}
absl::Status FakeGpuApi::CheckUsable(int device) {
  return device == 0 ? absl::OkStatus() : absl::FailedPreconditionError("the fake has one device");
}
absl::Status FakeGpuApi::SetDevice(int device) { return CheckUsable(device); }

absl::StatusOr<GpuStream*> FakeGpuApi::CreateStream(bool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = std::make_unique<Stream>();
  s->id = static_cast<int>(streams_.size());
  s->clock.assign(s->id + 1, 0);
  streams_.push_back(std::move(s));
  return reinterpret_cast<GpuStream*>(streams_.back().get());
}
absl::Status FakeGpuApi::DestroyStream(GpuStream*) { return absl::OkStatus(); }
absl::StatusOr<GpuEvent*> FakeGpuApi::CreateEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::make_unique<Event>());
  return reinterpret_cast<GpuEvent*>(events_.back().get());
}
absl::Status FakeGpuApi::DestroyEvent(GpuEvent*) { return absl::OkStatus(); }

absl::Status FakeGpuApi::RecordEvent(GpuEvent* e, GpuStream* s) {
  std::lock_guard<std::mutex> lock(mu_);
  Event* ev = Handle(events_, e);
  Stream* st = Handle(streams_, s);
  if (ev == nullptr || st == nullptr) return absl::InvalidArgumentError("unknown event or stream");
  ev->stream = st->id;
  ev->clock = st->clock;
  ev->deps = st->deps;
  return absl::OkStatus();
}

absl::Status FakeGpuApi::StreamWaitEvent(GpuStream* s, GpuEvent* e) {
  std::lock_guard<std::mutex> lock(mu_);
  Event* ev = Handle(events_, e);
  Stream* st = Handle(streams_, s);
  if (ev == nullptr || st == nullptr) return absl::InvalidArgumentError("unknown event or stream");
  Merge(st->clock, ev->clock);
  st->deps.insert(st->deps.end(), ev->deps.begin(), ev->deps.end());
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeGpuApi::EventDone(GpuEvent* e) {
  std::lock_guard<std::mutex> lock(mu_);
  Event* ev = Handle(events_, e);
  if (ev == nullptr) return absl::InvalidArgumentError("unknown event");
  for (const auto& d : ev->deps) {
    if (!d->done.load()) return false;
  }
  Merge(host_clock_, ev->clock);
  return true;
}

absl::Status FakeGpuApi::WaitAll(std::vector<std::shared_ptr<FakeOpState>> deps, const char* what) {
  const absl::Time deadline = absl::Now() + options_.block_limit;
  for (const auto& d : deps) {
    while (!d->done.load()) {
      if (absl::Now() > deadline) {
        std::lock_guard<std::mutex> lock(mu_);
        violations_.push_back(absl::StrCat(what, ": the host waited ",
                                           absl::FormatDuration(options_.block_limit),
                                           " for a collective that never completed"));
        return absl::DeadlineExceededError(violations_.back());
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }
  return absl::OkStatus();
}

absl::Status FakeGpuApi::StreamSynchronize(GpuStream* s) {
  stream_syncs_.fetch_add(1);
  std::vector<std::shared_ptr<FakeOpState>> deps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Stream* st = Handle(streams_, s);
    if (st == nullptr) return absl::InvalidArgumentError("unknown stream");
    deps = st->deps;
  }
  OVERLAP_RETURN_IF_ERROR(WaitAll(std::move(deps), "cudaStreamSynchronize"));
  std::lock_guard<std::mutex> lock(mu_);
  Merge(host_clock_, Handle(streams_, s)->clock);
  return absl::OkStatus();
}

absl::Status FakeGpuApi::DeviceSynchronize() {
  device_syncs_.fetch_add(1);
  std::vector<std::shared_ptr<FakeOpState>> deps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& st : streams_) deps.insert(deps.end(), st->deps.begin(), st->deps.end());
  }
  OVERLAP_RETURN_IF_ERROR(WaitAll(std::move(deps), "cudaDeviceSynchronize"));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& st : streams_) Merge(host_clock_, st->clock);
  return absl::OkStatus();
}

absl::StatusOr<FakeGpuApi::Stream*> FakeGpuApi::Entered(GpuStream* s) {
  Stream* st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = Handle(streams_, s);
    if (st == nullptr) return absl::InvalidArgumentError("unknown stream");
  }
  absl::Status entered = Enter(*st);
  if (!entered.ok()) return entered;
  return st;
}

absl::Status FakeGpuApi::Enter(Stream& st) {
  std::vector<std::shared_ptr<FakeOpState>> deps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deps = st.deps;
  }
  absl::Status s = WaitAll(deps, "a stream's wait");
  std::lock_guard<std::mutex> lock(mu_);
  st.deps.erase(
      std::remove_if(st.deps.begin(), st.deps.end(), [](const auto& d) { return d->done.load(); }),
      st.deps.end());
  return s;
}

FakeGpuApi::Op FakeGpuApi::Stamp(Stream& st, std::string what) {
  // What the host has seen complete (a synchronisation, a done event) is ordered before
  // anything it issues next, on any stream.
  Merge(st.clock, host_clock_);
  ++st.clock[st.id];
  Op op{std::move(what), st.id, st.clock};
  ops_.push_back(op);
  return op;
}

FakeGpuApi::Block* FakeGpuApi::Find(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return nullptr;
  --it;
  Block* b = it->second.get();
  return a < it->first + std::max<int64_t>(b->bytes, 1) ? b : nullptr;
}

void FakeGpuApi::Use(const Op& op, const void* p, bool write) {
  Block* b = Find(p);
  if (b == nullptr) return;  // host memory
  auto violation = [&](const std::string& why, const Op& other) {
    violations_.push_back(absl::StrCat(op.what, " (stream ", op.stream, ") ", why, " ", other.what,
                                       " (stream ", other.stream, ")"));
  };
  if (b->freed) {
    violations_.push_back(absl::StrCat(op.what, " (stream ", op.stream, ") uses a freed buffer"));
    return;
  }
  if (!HappensBefore(b->alloc, op)) violation("is not ordered after the allocation", b->alloc);
  if (b->write && !HappensBefore(*b->write, op)) violation("is not ordered after", *b->write);
  if (write) {
    for (const auto& [stream, read] : b->reads) {
      if (!HappensBefore(read, op)) violation("writes, not ordered after the read", read);
    }
    b->reads.clear();
    b->write = op;
  } else {
    b->reads[op.stream] = op;
  }
  b->uses[op.stream] = op;
}

absl::StatusOr<void*> FakeGpuApi::MallocAsync(int64_t bytes, GpuStream* s) {
  Stream* st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = Handle(streams_, s);
    if (st == nullptr) return absl::InvalidArgumentError("unknown stream");
    if (bytes < 0 || live_ + bytes > options_.device_memory_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cudaMallocAsync of ", bytes, " bytes: out of memory (fake device of ",
                       options_.device_memory_bytes, " bytes, ", live_, " in use)"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto b = std::make_unique<Block>();
  b->bytes = bytes;
  b->data.reset(new std::byte[std::max<int64_t>(bytes, 1)]);
  std::memset(b->data.get(), 0xFF, bytes);  // uninitialised device memory reads as NaN
  b->alloc = Stamp(*st, absl::StrCat("malloc ", bytes));
  void* p = b->data.get();
  blocks_[reinterpret_cast<uintptr_t>(p)] = std::move(b);
  live_ += bytes;
  peak_ = std::max(peak_, live_);
  return p;
}

absl::Status FakeGpuApi::FreeAsync(void* p, GpuStream* s) {
  Stream* st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = Handle(streams_, s);
    if (st == nullptr) return absl::InvalidArgumentError("unknown stream");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
  if (it == blocks_.end() || it->second->freed) {
    return absl::InvalidArgumentError("cudaFreeAsync of a pointer that is not a live block");
  }
  Block& b = *it->second;
  const Op op = Stamp(*st, absl::StrCat("free ", b.bytes));
  for (const auto& [stream, use] : b.uses) {
    if (!HappensBefore(use, op)) {
      violations_.push_back(absl::StrCat("free ", b.bytes, " (stream ", op.stream,
                                         ") is not ordered after its use ", use.what, " (stream ",
                                         use.stream, ")"));
    }
  }
  b.freed = true;  // the bytes stay until the fake goes: a late writer cannot corrupt the heap
  live_ -= b.bytes;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FakeGpuApi::PoolUsedBytes() { return live_bytes(); }
absl::StatusOr<int64_t> FakeGpuApi::PoolUsedHighBytes() { return peak_bytes(); }
absl::Status FakeGpuApi::ResetPoolUsedHigh() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = live_;
  return absl::OkStatus();
}

absl::Status FakeGpuApi::MemcpyAsync(void* dst, const void* src, int64_t bytes, GpuStream* s) {
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, absl::StrCat("memcpy ", bytes));
  Use(op, src, false);
  Use(op, dst, true);
  std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status FakeGpuApi::MemsetAsync(void* p, int value, int64_t bytes, GpuStream* s) {
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, absl::StrCat("memset ", bytes));
  Use(op, p, true);
  std::memset(p, value, bytes);
  return absl::OkStatus();
}

absl::Status FakeGpuApi::Spin(GpuStream* s, double seconds, absl::Span<void* const> reads,
                              absl::Span<void* const> writes) {
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  if (seconds > 0) absl::SleepFor(absl::Seconds(seconds));
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, "spin");
  for (void* p : reads) Use(op, p, false);
  for (void* p : writes) Use(op, p, true);
  return absl::OkStatus();
}

namespace {

// A host tensor over a DeviceView's bytes (the fake's device memory is host memory).
absl::StatusOr<Tensor> HostView(const DeviceView& v) {
  int64_t extent = 1;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 0) extent = 0;
  }
  if (extent > 0) {
    for (size_t d = 0; d < v.shape.size(); ++d) extent += (v.shape[d] - 1) * v.strides[d];
  }
  auto storage = Storage::Wrap(static_cast<std::byte*>(v.data), extent * DTypeSize(v.dtype),
                               Device::kCpu, nullptr);
  OVERLAP_ASSIGN_OR_RETURN(Tensor flat, Tensor::FromStorage(storage, v.dtype, {extent}));
  return flat.AsStrided(v.shape, v.strides, 0);
}

}  // namespace

absl::Status FakeGpuApi::CopyStrided(const DeviceView& src, const DeviceView& dst, GpuStream* s) {
  if (src.shape != dst.shape) return absl::InvalidArgumentError("CopyStrided: shapes differ");
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, "copy");
  Use(op, src.data, false);
  Use(op, dst.data, true);
  OVERLAP_ASSIGN_OR_RETURN(Tensor from, HostView(src));
  OVERLAP_ASSIGN_OR_RETURN(Tensor to, HostView(dst));
  return CopyConvert(from, to);
}

absl::Status FakeGpuApi::Gemm(const GemmArgs& g, GpuStream* s) {
  if (g.dtype != DType::kFloat32 && g.dtype != DType::kFloat64) {
    return absl::InvalidArgumentError("Gemm: float32 or float64 only");
  }
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, "gemm");
  Use(op, g.a, false);
  Use(op, g.b, false);
  Use(op, g.c, true);
  // Column-major, as cuBLAS: X(i, j) is at i + j * ldx.
  const bool f32 = g.dtype == DType::kFloat32;
  auto at = [&](const void* p, int64_t idx) {
    return f32 ? static_cast<const float*>(p)[idx] : static_cast<const double*>(p)[idx];
  };
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t j = 0; j < g.n; ++j) {
      for (int64_t i = 0; i < g.m; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const int64_t ai = g.trans_a ? l + i * g.lda : i + l * g.lda;
          const int64_t bi = g.trans_b ? j + l * g.ldb : l + j * g.ldb;
          acc += at(g.a, b * g.stride_a + ai) * at(g.b, b * g.stride_b + bi);
        }
        const int64_t ci = b * g.stride_c + i + j * g.ldc;
        const double v = g.alpha * acc + (g.beta != 0 ? g.beta * at(g.c, ci) : 0.0);
        if (f32) {
          static_cast<float*>(g.c)[ci] = static_cast<float>(v);
        } else {
          static_cast<double*>(g.c)[ci] = v;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FakeGpuApi::Elementwise(const ElementwiseArgs& e, GpuStream* s) {
  if (e.out.dtype != DType::kFloat32 && e.out.dtype != DType::kFloat64) {
    return absl::InvalidArgumentError("Elementwise: float32 / float64");
  }
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, "elementwise");
  Use(op, e.a.data, false);
  if (e.b.data != nullptr) Use(op, e.b.data, false);
  Use(op, e.out.data, true);
  // The same formulas in the same type as the CPU kernels (elementwise_ops.h).
  const int ndim = static_cast<int>(e.out.shape.size());
  int64_t n = 1;
  for (int64_t d : e.out.shape) n *= d;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(e.a.data);
    const T* b = static_cast<const T*>(e.b.data);
    T* out = static_cast<T*>(e.out.data);
    for (int64_t i = 0; i < n; ++i) {
      int64_t rest = i, ia = 0, ib = 0;
      for (int d = ndim - 1; d >= 0; --d) {
        const int64_t c = rest % e.out.shape[d];
        rest /= e.out.shape[d];
        ia += c * e.a.strides[d];
        if (b != nullptr) ib += c * e.b.strides[d];
      }
      out[i] = Ew<T>(e.op, a[ia], b != nullptr ? b[ib] : static_cast<T>(e.b_scalar),
                     static_cast<T>(e.s));
    }
  };
  if (e.out.dtype == DType::kFloat32) {
    run(float{});
  } else {
    run(double{});
  }
  return absl::OkStatus();
}

absl::Status FakeGpuApi::Reduce(const ReduceArgs& r, GpuStream* s) {
  if (r.dtype != DType::kFloat32 && r.dtype != DType::kFloat64) {
    return absl::InvalidArgumentError("Reduce: float32 / float64");
  }
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, "reduce");
  Use(op, r.x, false);
  if (r.y != nullptr) Use(op, r.y, false);
  Use(op, r.out, true);
  auto run = [&](auto tag) {  // the device kernel's loop, column by column
    using T = decltype(tag);
    const T* x = static_cast<const T*>(r.x);
    const T* y = static_cast<const T*>(r.y);
    T* out = static_cast<T*>(r.out);
    for (int64_t c = 0; c < r.outer * r.inner; ++c) {
      const int64_t base = (c / r.inner) * r.n * r.inner + c % r.inner;
      ReduceColumn<T>(r.op, x + base, y != nullptr ? y + base : nullptr,
                      r.op == ReduceOp::kSum ? out + c : out + base, r.n, r.inner, r.scale);
    }
  };
  if (r.dtype == DType::kFloat32) {
    run(float{});
  } else {
    run(double{});
  }
  return absl::OkStatus();
}

absl::Status FakeGpuApi::Nn(const NnArgs& a, GpuStream* s) { return RunNn(a, s, "nn"); }

// The nn kernel's units on the host, each buffer's use checked against the stream order (the
// error word is read and written, atomically on a device).
absl::Status FakeGpuApi::RunNn(const NnArgs& a, GpuStream* s, const char* what) {
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**st, what);
  for (const void* in : {a.x, a.g, a.w, a.b, a.mean, a.var, a.index}) {
    if (in != nullptr) Use(op, in, false);
  }
  for (const void* out : {static_cast<const void*>(a.out), static_cast<const void*>(a.out2),
                          static_cast<const void*>(a.out3), static_cast<const void*>(a.error)}) {
    if (out != nullptr) Use(op, out, true);
  }
  NnRunOnHost(a);
  return absl::OkStatus();
}

absl::Status FakeGpuApi::BatchNorm(const BatchNormArgs& a, GpuStream* s) {
  if (a.dtype != DType::kFloat32 && a.dtype != DType::kFloat64) {
    return absl::InvalidArgumentError("BatchNorm: float32 / float64");
  }
  if (a.weight == nullptr || (a.bias == nullptr && a.pass != BatchNormPass::kBackward)) {
    return absl::InvalidArgumentError("BatchNorm: cuDNN needs the weight and the bias");
  }
  NnArgs n;
  n.is_double = a.dtype == DType::kFloat64;
  n.batch = a.batch;
  n.cols = a.channels;
  n.inner = a.inner;
  n.eps = a.eps;
  n.x = a.x;
  n.w = a.weight;
  switch (a.pass) {
    case BatchNormPass::kTraining:
    case BatchNormPass::kInference:
      n.op = NnOp::kBatchNorm;
      n.flag = a.pass == BatchNormPass::kTraining ? 1 : 0;
      n.b = a.bias;
      n.mean = a.mean;
      n.var = a.var;
      n.out = a.y;
      n.out2 = a.save_mean;
      n.out3 = a.save_invstd;
      break;
    case BatchNormPass::kBackward:
      n.op = NnOp::kBatchNormBackward;
      n.flag = 1;
      n.g = a.dy;
      n.mean = a.mean;
      n.var = a.var;
      n.out = a.y;
      n.out2 = a.dweight;
      n.out3 = a.dbias;
      break;
  }
  return RunNn(n, s, "batch norm");
}

absl::Status FakeGpuApi::Convolution(ConvPass pass, const ConvShape& g, const void* a,
                                     const void* b, void* out, GpuStream* st) {
  if (g.dtype != DType::kFloat32 && g.dtype != DType::kFloat64) {
    return absl::InvalidArgumentError("Convolution: float32 / float64");
  }
  absl::StatusOr<Stream*> stream = Entered(st);
  if (!stream.ok()) return stream.status();
  std::lock_guard<std::mutex> lock(mu_);
  const Op op = Stamp(**stream, "convolution");
  Use(op, a, false);
  Use(op, b, false);
  Use(op, out, true);
  // The definition, in double: y[b][oc][i][j] = sum over the group's input channels and the
  // kernel window of x * w; the backward passes scatter the same products.
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    const int64_t out_elems = pass == ConvPass::kForward        ? g.n * g.o * g.ho * g.wo
                              : pass == ConvPass::kBackwardData ? g.n * g.c * g.h * g.w
                                                                : g.o * cg * g.kh * g.kw;
    std::vector<double> acc(out_elems, 0.0);
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t oc = 0; oc < g.o; ++oc) {
        const int64_t gr = oc / og;
        for (int64_t i = 0; i < g.ho; ++i) {
          for (int64_t j = 0; j < g.wo; ++j) {
            const int64_t yi = ((n * g.o + oc) * g.ho + i) * g.wo + j;
            for (int64_t ci = 0; ci < cg; ++ci) {
              const int64_t cin = gr * cg + ci;
              for (int64_t ki = 0; ki < g.kh; ++ki) {
                const int64_t ih = i * g.sh - g.ph + ki * g.dh;
                if (ih < 0 || ih >= g.h) continue;
                for (int64_t kj = 0; kj < g.kw; ++kj) {
                  const int64_t iw = j * g.sw - g.pw + kj * g.dw;
                  if (iw < 0 || iw >= g.w) continue;
                  const int64_t xi = ((n * g.c + cin) * g.h + ih) * g.w + iw;
                  const int64_t wi = ((oc * cg + ci) * g.kh + ki) * g.kw + kj;
                  switch (pass) {
                    case ConvPass::kForward:
                      acc[yi] += double(pa[xi]) * pb[wi];
                      break;
                    case ConvPass::kBackwardData:
                      acc[xi] += double(pa[yi]) * pb[wi];
                      break;
                    case ConvPass::kBackwardFilter:
                      acc[wi] += double(pa[xi]) * pb[yi];
                      break;
                  }
                }
              }
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < out_elems; ++i) po[i] = static_cast<T>(acc[i]);
  };
  if (g.dtype == DType::kFloat32) {
    run(float{});
  } else {
    run(double{});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FakeGpuApi::NcclUniqueId() {
  if (options_.nccl == nullptr) return absl::FailedPreconditionError("the fake has no NCCL world");
  return options_.nccl->NewId();
}

absl::StatusOr<GpuComm*> FakeGpuApi::NcclCommInit(int nranks, int rank,
                                                  const std::string& unique_id) {
  if (options_.nccl == nullptr) return absl::FailedPreconditionError("the fake has no NCCL world");
  auto c = options_.nccl->Init(nranks, rank, unique_id);
  std::lock_guard<std::mutex> lock(mu_);
  comms_.push_back(c);
  return reinterpret_cast<GpuComm*>(c.get());
}

absl::StatusOr<bool> FakeGpuApi::NcclCommReady(GpuComm* c) {
  return options_.nccl->Ready(*reinterpret_cast<FakeNcclWorld::Comm*>(c));
}
absl::Status FakeGpuApi::NcclCommAbort(GpuComm* c) {
  options_.nccl->Abort(*reinterpret_cast<FakeNcclWorld::Comm*>(c));
  return absl::OkStatus();
}
absl::Status FakeGpuApi::NcclCommFinalize(GpuComm*) { return absl::OkStatus(); }
absl::Status FakeGpuApi::NcclCommDestroy(GpuComm*) { return absl::OkStatus(); }

absl::Status FakeGpuApi::NcclCollectiveAsync(NcclCollective op, const void* send, void* recv,
                                             int64_t count, DType dtype, int root, GpuComm* c,
                                             GpuStream* s) {
  absl::StatusOr<Stream*> st = Entered(s);
  if (!st.ok()) return st.status();
  auto* comm = reinterpret_cast<FakeNcclWorld::Comm*>(c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Op o = Stamp(**st, absl::StrCat(OpName(op), " ", count, " ", DTypeName(dtype)));
    Use(o, send, false);
    Use(o, recv, true);
  }
  auto state = options_.nccl->Issue(*comm, op, send, recv, count, dtype, root);
  if (!state.ok()) return state.status();
  std::lock_guard<std::mutex> lock(mu_);
  (*st)->deps.push_back(*std::move(state));
  return absl::OkStatus();
}

}  // namespace overlap
