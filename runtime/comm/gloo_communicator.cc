#include "runtime/comm/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace overlap {
namespace {

constexpr uint8_t kReduceScatterSlotPrefix = 0x40;  // beside Gloo's own prefixes (0x01-0x08)
// GlooOptions::allgather_segment_bytes's size across hosts.
constexpr int64_t kAllgatherSegmentBytes = int64_t{512} << 10;

class GlooWork : public Work {
 public:
  explicit GlooWork(std::string what) : what_(std::move(what)), issued_(absl::Now()) {}

  absl::Status Wait(absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] { return done_; })) {
      return absl::DeadlineExceededError(
          absl::StrCat(what_, " did not finish within ", absl::FormatDuration(timeout)));
    }
    return status_;
  }
  bool Done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  double run_seconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return run_s_;
  }
  std::string what() const override { return what_; }
  absl::Time issued() const override { return issued_; }
  absl::Time started() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }
  void Start() {  // on the stream's thread
    std::lock_guard<std::mutex> lock(mu_);
    start_ = std::chrono::steady_clock::now();
    started_ = absl::Now();
  }
  void Finish(absl::Status s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(s);
      done_ = true;
      if (start_ != std::chrono::steady_clock::time_point()) {
        run_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      }
    }
    cv_.notify_all();
  }

 private:
  std::string what_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
  std::chrono::steady_clock::time_point start_;
  double run_s_ = 0;
  const absl::Time issued_;
  absl::Time started_ = absl::InfinitePast();
};

// A contiguous tensor's first byte.
uint8_t* Bytes(const Tensor& t) {
  return reinterpret_cast<uint8_t*>(t.storage()->data()) + t.offset() * DTypeSize(t.dtype());
}

struct Task {
  std::function<void()> run;  // throws on failure
  std::shared_ptr<GlooWork> work;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& o) : options_(o) {}
  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    for (auto& s : streams_) s->cv.notify_all();
    for (auto& s : streams_) {
      if (s->thread.joinable()) s->thread.join();
    }
  }

  absl::Status Connect() {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options_.hostname;
      device_ = gloo::transport::tcp::CreateDevice(attr);
      if (options_.store != nullptr) {
        store_ = options_.store;
      } else {
        store_ = std::make_shared<gloo::rendezvous::FileStore>(options_.store_path);
      }
      for (int s = 0; s < options_.streams; ++s) {
        auto stream = std::make_unique<Stream>();
        gloo::rendezvous::PrefixStore prefix(absl::StrCat(options_.key_prefix, "/stream", s),
                                             *store_);
        stream->context =
            std::make_shared<gloo::rendezvous::Context>(options_.rank, options_.world_size);
        stream->context->setTimeout(absl::ToChronoMilliseconds(
            options_.connect_timeout > absl::ZeroDuration() ? options_.connect_timeout
                                                            : options_.timeout));
        stream->context->connectFullMesh(prefix, device_);
        stream->context->setTimeout(absl::ToChronoMilliseconds(options_.timeout));
        streams_.push_back(std::move(stream));
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", options_.rank, " of ", options_.world_size, ": cannot connect through the store",
          options_.store ? "" : absl::StrCat(" at ", options_.store_path), ": ", e.what()));
    }
    for (auto& s : streams_) {
      Stream* raw = s.get();
      s->thread = std::thread([this, raw] { Loop(raw); });
    }
    return absl::OkStatus();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.world_size; }
  int streams() const override { return options_.streams; }

  std::shared_ptr<Work> AllReduce(Tensor t, const CollectiveOptions& o) override {
    return Enqueue(o, "allreduce", t.nbytes(), [this, t](Stream& s, uint32_t tag) mutable {
      Check(t.IsContiguous() && IsFloat(t), "allreduce needs a contiguous float tensor");
      if (t.dtype() == DType::kFloat32) {
        if (options_.deterministic) {
          RunOrderedAllReduce<float>(s, tag, t.data<float>(), t.numel());
        } else {
          RunAllReduce<float>(s, tag, t.data<float>(), t.numel());
        }
      } else if (options_.deterministic) {
        RunOrderedAllReduce<double>(s, tag, t.data<double>(), t.numel());
      } else {
        RunAllReduce<double>(s, tag, t.data<double>(), t.numel());
      }
    });
  }

  std::shared_ptr<Work> AllGather(Tensor in, Tensor out, const CollectiveOptions& o) override {
    return Enqueue(o, "allgather", out.nbytes(), [this, in, out](Stream& s, uint32_t tag) mutable {
      Check(in.IsContiguous() && out.IsContiguous() && in.dtype() == out.dtype(),
            "allgather needs contiguous tensors of one dtype");
      Check(out.numel() == in.numel() * options_.world_size,
            "allgather: out should be size() x in");
      const int64_t bytes = in.nbytes();
      if (bytes == 0) return;
      auto gather = [&](uint8_t* from, uint8_t* to, int64_t n) {
        gloo::AllgatherOptions opts(s.context);  // bytes: any dtype
        opts.setInput(from, n);
        opts.setOutput(to, n * options_.world_size);
        opts.setTag(tag);
        opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
        gloo::allgather(opts);
      };
      const int64_t segment = options_.allgather_segment_bytes;
      if (segment <= 0 || bytes <= segment) {
        gather(Bytes(in), Bytes(out), bytes);
        return;
      }
      // Segment k of every rank lands in `staging`, then at its place in each rank's part.
      std::vector<uint8_t> staging(segment * options_.world_size);
      for (int64_t off = 0; off < bytes; off += segment) {
        const int64_t n = std::min(segment, bytes - off);
        gather(Bytes(in) + off, staging.data(), n);
        for (int r = 0; r < options_.world_size; ++r) {
          std::memcpy(Bytes(out) + r * bytes + off, staging.data() + r * n, n);
        }
      }
    });
  }

  std::shared_ptr<Work> ReduceScatter(Tensor in, Tensor out, const CollectiveOptions& o) override {
    return Enqueue(
        o, "reduce_scatter", in.nbytes(), [this, in, out](Stream& s, uint32_t tag) mutable {
          Check(in.IsContiguous() && out.IsContiguous() && in.dtype() == out.dtype() && IsFloat(in),
                "reduce_scatter needs contiguous float tensors of one dtype");
          Check(in.numel() == out.numel() * options_.world_size,
                "reduce_scatter: in should be size() x out");
          if (in.dtype() == DType::kFloat32) {
            if (options_.deterministic) {
              RunOrderedReduceScatter<float>(s, tag, in.data<float>(), out.data<float>(),
                                             out.numel());
            } else {
              RunReduceScatter<float>(s, tag, in.data<float>(), out.data<float>(), out.numel());
            }
          } else if (options_.deterministic) {
            RunOrderedReduceScatter<double>(s, tag, in.data<double>(), out.data<double>(),
                                            out.numel());
          } else {
            RunReduceScatter<double>(s, tag, in.data<double>(), out.data<double>(), out.numel());
          }
        });
  }

  std::shared_ptr<Work> Broadcast(Tensor t, int root, const CollectiveOptions& o) override {
    return Enqueue(o, "broadcast", t.nbytes(), [this, t, root](Stream& s, uint32_t tag) mutable {
      Check(t.IsContiguous(), "broadcast needs a contiguous tensor");
      Check(root >= 0 && root < options_.world_size, "broadcast: root out of range");
      if (t.nbytes() == 0) return;
      gloo::BroadcastOptions opts(s.context);  // bytes: any dtype
      opts.setOutput(Bytes(t), t.nbytes());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
      gloo::broadcast(opts);
    });
  }

  std::shared_ptr<Work> Barrier(const CollectiveOptions& o) override {
    return Enqueue(o, "barrier", 0, [this](Stream& s, uint32_t tag) {
      gloo::BarrierOptions opts(s.context);
      opts.setTag(tag);
      opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
      gloo::barrier(opts);
    });
  }

  std::vector<std::shared_ptr<Work>> Recent() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::vector<std::shared_ptr<Work>>(recent_.begin(), recent_.end());
  }

  void Abort(absl::Status reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abort_.ok()) abort_ = std::move(reason);
    }
    for (auto& s : streams_) s->cv.notify_all();
  }

 private:
  struct Stream {
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::thread thread;
    std::condition_variable cv;
    std::deque<Task> queue;
    uint32_t sequence = 0;
  };

  static bool IsFloat(const Tensor& t) {
    return t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64;
  }
  static void Check(bool ok, const char* message) {
    if (!ok) throw std::invalid_argument(message);
  }

  // Per-thread temporaries reused across operations (each stream's thread has its own):
  // fresh large buffers cost their page faults on every call, and reused ones keep Gloo's
  // transfers into them at full speed.
  template <typename T>
  static std::vector<T>& Scratch(int which, int64_t n) {
    thread_local std::vector<T> buffers[3];
    std::vector<T>& b = buffers[which];
    if (static_cast<int64_t>(b.size()) < n) b.resize(n);
    return b;
  }

  template <typename T>
  void RunAllReduce(Stream& s, uint32_t tag, T* data, int64_t n) {
    gloo::AllreduceOptions opts(s.context);
    opts.setInput(data, n);
    opts.setOutput(data, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    opts.setTag(tag);
    opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
    gloo::allreduce(opts);
  }

  // Deterministic reduce-scatter: chunk j of every rank goes to rank j (all-to-all), which
  // sums the P chunks in rank order.
  template <typename T>
  void RunOrderedReduceScatter(Stream& s, uint32_t tag, const T* in, T* out, int64_t n) {
    const int p = options_.world_size;
    std::vector<T>& received = Scratch<T>(0, n * p);
    if (n > 0) {
      gloo::AlltoallOptions opts(s.context);
      opts.setInput(const_cast<T*>(in), n * p);
      opts.setOutput(received.data(), n * p);
      opts.setTag(tag);
      opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
      gloo::alltoall(opts);
    }
    for (int64_t i = 0; i < n; ++i) {
      T sum = received[i];
      for (int r = 1; r < p; ++r) sum += received[r * n + i];
      out[i] = sum;
    }
  }

  // Deterministic allreduce: the ordered reduce-scatter of a copy padded to a multiple of P,
  // then an allgather of the summed chunks.
  template <typename T>
  void RunOrderedAllReduce(Stream& s, uint32_t tag, T* data, int64_t n) {
    const int p = options_.world_size;
    const int64_t chunk = (n + p - 1) / p;
    if (chunk == 0) return;
    std::vector<T> padded(chunk * p, T{0}), mine(chunk), gathered(chunk * p);
    std::copy(data, data + n, padded.begin());
    RunOrderedReduceScatter<T>(s, tag, padded.data(), mine.data(), chunk);
    gloo::AllgatherOptions opts(s.context);
    opts.setInput(mine.data(), chunk);
    opts.setOutput(gathered.data(), chunk * p);
    opts.setTag(tag);
    opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
    gloo::allgather(opts);
    std::copy(gathered.begin(), gathered.begin() + n, data);
  }

  // The ring: at step k rank r sends chunk (r - k - 1) mod P to r + 1 and adds the chunk
  // (r - k - 2) mod P received from r - 1, so after P - 1 steps it holds chunk r summed.
  template <typename T>
  void RunReduceScatter(Stream& s, uint32_t tag, const T* in, T* out, int64_t n) {
    const int p = options_.world_size, r = options_.rank;
    std::vector<T>& acc = Scratch<T>(1, n * p);
    std::copy(in, in + n * p, acc.begin());
    std::vector<T>& incoming = Scratch<T>(2, std::max<int64_t>(n, 1));
    if (p == 1 || n == 0) {
      std::memcpy(out, acc.data() + r * n, n * sizeof(T));
      return;
    }
    const size_t bytes = n * sizeof(T);
    auto send = s.context->createUnboundBuffer(acc.data(), acc.size() * sizeof(T));
    auto recv = s.context->createUnboundBuffer(incoming.data(), bytes);
    const auto timeout = absl::ToChronoMilliseconds(options_.timeout);
    const gloo::Slot slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    const int next = (r + 1) % p, prev = (r + p - 1) % p;
    // Each chunk moves in pieces of at most kPiece bytes, receives posted before sends: one
    // message of 16 MiB or more through Gloo's TCP pair ran 20x slower than the same bytes
    // in pieces (bench-comm, 2 ranks on loopback), and the sum of a piece overlaps the
    // arrival of the next.
    constexpr size_t kPiece = size_t{4} << 20;
    const size_t pieces = (bytes + kPiece - 1) / kPiece;
    for (int k = 0; k < p - 1; ++k) {
      const int sent = ((r - k - 1) % p + p) % p, received = ((r - k - 2) % p + p) % p;
      const gloo::Slot step = slot + static_cast<uint8_t>(k);
      for (size_t q = 0; q < pieces; ++q) {
        recv->recv(prev, step, q * kPiece, std::min(kPiece, bytes - q * kPiece));
      }
      for (size_t q = 0; q < pieces; ++q) {
        send->send(next, step, sent * bytes + q * kPiece, std::min(kPiece, bytes - q * kPiece));
      }
      T* dst = acc.data() + received * n;
      for (size_t q = 0; q < pieces; ++q) {
        if (!recv->waitRecv(timeout)) throw std::runtime_error("receive aborted");
        const int64_t begin = static_cast<int64_t>(q * kPiece / sizeof(T));
        const int64_t end =
            std::min<int64_t>(n, static_cast<int64_t>((q + 1) * kPiece / sizeof(T)));
        for (int64_t i = begin; i < end; ++i) dst[i] += incoming[i];
      }
      for (size_t q = 0; q < pieces; ++q) {
        if (!send->waitSend(timeout)) throw std::runtime_error("send aborted");
      }
    }
    std::memcpy(out, acc.data() + r * n, bytes);
  }

  using Op = std::function<void(Stream&, uint32_t)>;

  std::shared_ptr<Work> Enqueue(const CollectiveOptions& o, const char* name, int64_t bytes,
                                Op op) {
    const int index = o.stream >= 0 && o.stream < options_.streams ? o.stream : -1;
    std::shared_ptr<GlooWork> work;
    std::lock_guard<std::mutex> lock(mu_);
    if (index < 0) {
      work = std::make_shared<GlooWork>(name);
      work->Finish(absl::InvalidArgumentError(
          absl::StrCat(name, ": stream ", o.stream, " out of range [0, ", options_.streams, ")")));
      return work;
    }
    Stream& s = *streams_[index];
    const uint32_t tag = s.sequence++;
    work = std::make_shared<GlooWork>(absl::StrCat(name, " #", tag, " (stream ", index, ", ", bytes,
                                                   " bytes, rank ", options_.rank, " of ",
                                                   options_.world_size, ")"));
    Stream* raw = &s;
    recent_.push_back(work);
    if (recent_.size() > 8) recent_.pop_front();
    s.queue.push_back({[raw, tag, op = std::move(op)] { op(*raw, tag); }, work});
    s.cv.notify_all();
    return work;
  }

  void Loop(Stream* s) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> delay(0, 2000);
    while (true) {
      Task task;
      absl::Status aborted;
      {
        std::unique_lock<std::mutex> lock(mu_);
        s->cv.wait(lock, [&] { return stopping_ || !s->queue.empty(); });
        if (s->queue.empty()) return;  // stopping, nothing left
        task = std::move(s->queue.front());
        s->queue.pop_front();
        aborted = abort_;
      }
      if (!aborted.ok()) {
        task.run = nullptr;
        task.work->Finish(absl::AbortedError(absl::StrCat(
            task.work->what(), ": the communicator was aborted: ", aborted.message())));
        continue;
      }
      // The operation's closure holds its tensors: it is dropped before the Work is
      // finished, so that a waiter who frees them really frees them.
      absl::Status status;
      if (options_.random_delays) {
        std::this_thread::sleep_for(std::chrono::microseconds(delay(rng)));
      }
      try {
        task.work->Start();
        task.run();
      } catch (const std::invalid_argument& e) {
        status = absl::InvalidArgumentError(e.what());
      } catch (const std::exception& e) {
        status = absl::UnavailableError(absl::StrCat(task.work->what(), ": ", e.what()));
        Abort(status);  // the peers are out of step now: nothing later can succeed
      }
      task.run = nullptr;
      task.work->Finish(std::move(status));
    }
  }

  GlooOptions options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  std::vector<std::unique_ptr<Stream>> streams_;
  mutable std::mutex mu_;  // guards the queues, recent_, stopping_, abort_
  std::deque<std::shared_ptr<Work>> recent_;
  bool stopping_ = false;
  absl::Status abort_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is not in a world of size ", o.world_size));
  }
  if (o.streams < 1 || o.streams > 16) {
    return absl::InvalidArgumentError(absl::StrCat("streams must be 1 to 16, got ", o.streams));
  }
  if (o.store == nullptr && o.store_path.empty()) {
    return absl::InvalidArgumentError("no store for the rendezvous (a TcpStore or a folder)");
  }
  if (!(o.timeout > absl::ZeroDuration())) return absl::InvalidArgumentError("timeout must be > 0");
  // A write to a dead peer's socket must be an error, not SIGPIPE killing the process (Gloo
  // does not write with MSG_NOSIGNAL everywhere): ignore SIGPIPE unless the program handles it.
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  if (o.allgather_segment_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "allgather_segment_bytes must be -1, 0 or positive, got ", o.allgather_segment_bytes));
  }
  GlooOptions resolved = o;
  if (resolved.allgather_segment_bytes == -1) {
    resolved.allgather_segment_bytes =
        absl::StartsWith(o.hostname, "127.") || o.hostname == "localhost" || o.hostname == "::1"
            ? 0
            : kAllgatherSegmentBytes;
  }
  auto comm = std::make_unique<GlooCommunicator>(resolved);
  absl::Status s = comm->Connect();
  if (!s.ok()) return s;
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace overlap
