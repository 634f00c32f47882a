#include "runtime/comm/store_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace overlap {

using store_wire::kGet;
using store_wire::kHello;
using store_wire::kSet;
using store_wire::RecvAll;
using store_wire::SendAll;

namespace {

// Equal without an early exit, so that the time of a refusal does not tell how much of a
// guess was right.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % std::max<size_t>(b.size(), 1)];
  return diff == 0;
}

}  // namespace

struct TcpStoreServer::Impl {
  std::string secret;
  int listen_fd = -1;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> data;
  uint64_t data_bytes = 0;
  std::map<int64_t, int> clients;  // connection id -> fd, while its thread runs
  std::map<int64_t, std::thread> threads;
  std::vector<int64_t> finished;  // threads that returned, to join
  int64_t next_id = 0;
  int64_t rejected = 0;
  bool stopping = false;
  std::thread accept_thread;

  // Reads the HELLO; whether the client may go on.
  bool Authenticate(int fd) {
    const absl::Time deadline = absl::Now() + store_wire::kHelloTimeout;
    uint8_t op = 0;
    uint32_t len = 0;
    if (!RecvAll(fd, &op, 1, deadline) || op != kHello || !RecvAll(fd, &len, 4, deadline) ||
        len > store_wire::kMaxSecretBytes) {
      return false;
    }
    std::string given(len, '\0');
    if (!RecvAll(fd, given.data(), len, deadline)) return false;
    if (!secret.empty() && !SameSecret(given, secret)) return false;
    const uint8_t ok = 0;
    return SendAll(fd, &ok, 1, deadline);
  }

  // Serves one client until it leaves, errs or breaks a bound (false: count it rejected).
  bool Serve(int fd) {
    if (!Authenticate(fd)) return false;
    while (true) {
      uint8_t op = 0;
      uint32_t klen = 0;
      if (!RecvAll(fd, &op, 1)) return true;  // the client left
      if (!RecvAll(fd, &klen, 4)) return true;
      if (klen > store_wire::kMaxKeyBytes || (op != kSet && op != kGet)) return false;
      std::string key(klen, '\0');
      if (!RecvAll(fd, key.data(), klen)) return true;
      if (op == kSet) {
        uint64_t vlen = 0;
        if (!RecvAll(fd, &vlen, 8)) return true;
        if (vlen > store_wire::kMaxValueBytes) return false;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (data_bytes + vlen + klen > store_wire::kMaxStoreBytes) return false;
        }
        // The value's memory follows its bytes as they arrive, a chunk at a time.
        std::string value;
        constexpr uint64_t kChunk = uint64_t{1} << 20;
        while (value.size() < vlen) {
          const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, vlen - value.size()));
          const size_t at = value.size();
          value.resize(at + n);
          if (!RecvAll(fd, value.data() + at, n)) return true;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          auto it = data.find(key);
          if (it != data.end()) {
            data_bytes -= it->first.size() + it->second.size();
            data.erase(it);
          }
          data_bytes += key.size() + value.size();
          data[key] = std::move(value);
        }
        cv.notify_all();
        const uint8_t ok = 0;
        if (!SendAll(fd, &ok, 1)) return true;
      } else {
        uint64_t ms = 0;
        if (!RecvAll(fd, &ms, 8)) return true;
        ms = std::min<uint64_t>(ms, uint64_t{86400} * 1000);  // a day: chrono must not overflow
        std::string value;
        bool found = false;
        {
          std::unique_lock<std::mutex> lock(mu);
          found = cv.wait_for(lock, std::chrono::milliseconds(ms), [&] {
            return stopping || data.count(key) > 0;
          }) && data.count(key) > 0;
          if (found) value = data[key];
        }
        const uint8_t status = found ? 0 : 1;
        if (!SendAll(fd, &status, 1)) return true;
        if (found) {
          const uint64_t vlen = value.size();
          if (!SendAll(fd, &vlen, 8) || !SendAll(fd, value.data(), vlen)) return true;
        }
      }
    }
  }

  void Client(int64_t id, int fd) {
    const bool fine = Serve(fd);
    std::lock_guard<std::mutex> lock(mu);
    if (!fine) ++rejected;
    clients.erase(id);
    close(fd);  // released now, not at the server's end
    finished.push_back(id);
  }

  // Joins the threads of clients that left. Called with `mu` held; joins outside it.
  std::vector<std::thread> TakeFinished() {
    std::vector<std::thread> done;
    for (int64_t id : finished) {
      auto it = threads.find(id);
      if (it == threads.end()) continue;
      done.push_back(std::move(it->second));
      threads.erase(it);
    }
    finished.clear();
    return done;
  }

  void Accept() {
    while (true) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      std::vector<std::thread> done;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) {
          if (fd >= 0) close(fd);
          break;
        }
        done = TakeFinished();
        if (fd >= 0) {
          const int64_t id = next_id++;
          clients[id] = fd;
          threads[id] = std::thread([this, id, fd] { Client(id, fd); });
        }
      }
      for (std::thread& t : done) t.join();
      if (fd < 0) {
        // Out of descriptors, an aborted handshake, a signal: the server keeps serving.
        // A shut-down socket (EINVAL) while not stopping would spin: pause a little.
        std::this_thread::sleep_for(std::chrono::milliseconds(errno == EINTR ? 0 : 10));
      }
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      for (const auto& [id, fd] : clients) shutdown(fd, SHUT_RDWR);
    }
    cv.notify_all();
    shutdown(listen_fd, SHUT_RDWR);  // ends accept()
    if (accept_thread.joinable()) accept_thread.join();
    std::map<int64_t, std::thread> all;
    {
      std::lock_guard<std::mutex> lock(mu);
      all.swap(threads);
    }
    for (auto& [id, t] : all) {
      if (t.joinable()) t.join();
    }
    close(listen_fd);
  }
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Serve(const std::string& addr,
                                                                      int port,
                                                                      StoreServerOptions options) {
  const std::string where = absl::StrCat(addr, ":", port);
  if (options.secret.size() > store_wire::kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the store's secret is longer than ", store_wire::kMaxSecretBytes, " bytes"));
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", where));
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->impl_ = std::make_unique<Impl>();
  Impl* impl = server->impl_.get();
  impl->secret = std::move(options.secret);
  impl->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = impl->listen_fd >= 0 &&
                  bind(impl->listen_fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  listen(impl->listen_fd, 128) == 0;
  freeaddrinfo(res);
  if (!ok) {
    const std::string why = std::strerror(errno);
    if (impl->listen_fd >= 0) close(impl->listen_fd);
    impl->listen_fd = -1;
    server->impl_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve the store at ", where, ": ", why));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ = ntohs(bound.sin_port);
  impl->accept_thread = std::thread([impl] { impl->Accept(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() = default;

int64_t TcpStoreServer::rejected() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rejected;
}

int64_t TcpStoreServer::connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->clients.size());
}

}  // namespace overlap
