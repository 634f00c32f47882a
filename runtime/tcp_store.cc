#include "runtime/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

// Requests: op (1 byte), key length (4), key, then for SET the value length (8) and value,
// for GET the timeout in milliseconds (8). Replies: SET 1 byte (0); GET a status byte (0
// found, 1 timed out) and, when found, the value length (8) and value.
constexpr uint8_t kSet = 1, kGet = 2;

bool SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool RecvAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

absl::StatusOr<int> EnvInt(const char* name, std::optional<int> fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set (torchrun sets it)"));
  }
  int x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=", v, " is not a non-negative integer"));
  }
  return x;
}

}  // namespace

absl::StatusOr<RendezvousInfo> RendezvousFromEnv() {
  RendezvousInfo info;
  absl::StatusOr<int> v = EnvInt("RANK", std::nullopt);
  if (!v.ok()) return v.status();
  info.rank = *v;
  v = EnvInt("WORLD_SIZE", std::nullopt);
  if (!v.ok()) return v.status();
  info.world_size = *v;
  if (info.world_size < 1 || info.rank >= info.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", info.rank, " is not in WORLD_SIZE=", info.world_size));
  }
  v = EnvInt("LOCAL_RANK", info.rank);
  if (!v.ok()) return v.status();
  info.local_rank = *v;
  v = EnvInt("LOCAL_WORLD_SIZE", info.world_size);
  if (!v.ok()) return v.status();
  info.local_world_size = *v;
  if (const char* a = std::getenv("MASTER_ADDR")) info.master_addr = a;
  v = EnvInt("MASTER_PORT", 29500);
  if (!v.ok()) return v.status();
  if (*v < 1 || *v > 65535) return absl::InvalidArgumentError("MASTER_PORT out of range");
  info.master_port = *v;
  if (const char* a = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) {
    info.agent_store = absl::AsciiStrToLower(a) == "true" || std::string(a) == "1";
  }
  return info;
}

struct TcpStoreServer::Impl {
  int listen_fd = -1;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> data;
  std::vector<int> clients;
  std::vector<std::thread> threads;
  bool stopping = false;

  void Serve(int fd) {
    while (true) {
      uint8_t op = 0;
      uint32_t klen = 0;
      if (!RecvAll(fd, &op, 1) || !RecvAll(fd, &klen, 4) || klen > (1u << 20)) return;
      std::string key(klen, '\0');
      if (!RecvAll(fd, key.data(), klen)) return;
      if (op == kSet) {
        uint64_t vlen = 0;
        if (!RecvAll(fd, &vlen, 8) || vlen > (uint64_t{1} << 30)) return;
        std::string value(vlen, '\0');
        if (!RecvAll(fd, value.data(), vlen)) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          data[key] = std::move(value);
        }
        cv.notify_all();
        const uint8_t ok = 0;
        if (!SendAll(fd, &ok, 1)) return;
      } else if (op == kGet) {
        uint64_t ms = 0;
        if (!RecvAll(fd, &ms, 8)) return;
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
        if (!SendAll(fd, &status, 1)) return;
        if (found) {
          const uint64_t vlen = value.size();
          if (!SendAll(fd, &vlen, 8) || !SendAll(fd, value.data(), vlen)) return;
        }
      } else {
        return;
      }
    }
  }

  void Accept() {
    while (true) {
      const int fd = accept(listen_fd, nullptr, nullptr);
      if (fd < 0) return;  // the listening socket was shut down
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        close(fd);
        return;
      }
      clients.push_back(fd);
      threads.emplace_back([this, fd] { Serve(fd); });
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      for (int fd : clients) shutdown(fd, SHUT_RDWR);
    }
    cv.notify_all();
    shutdown(listen_fd, SHUT_RDWR);  // ends accept()
    if (accept_thread.joinable()) accept_thread.join();
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
    for (int fd : clients) close(fd);
    close(listen_fd);
  }
  std::thread accept_thread;
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Serve(const std::string& addr,
                                                                      int port) {
  const std::string where = absl::StrCat(addr, ":", port);
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
  impl->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = bind(impl->listen_fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  listen(impl->listen_fd, 128) == 0;
  freeaddrinfo(res);
  if (!ok) {
    const std::string why = std::strerror(errno);
    close(impl->listen_fd);
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

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::Connect(const RendezvousInfo& info,
                                                            absl::Duration timeout) {
  std::shared_ptr<TcpStore> store(new TcpStore());
  store->timeout_ = timeout;
  const std::string where = absl::StrCat(info.master_addr, ":", info.master_port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(info.master_addr.c_str(), std::to_string(info.master_port).c_str(), &hints,
                  &res) != 0 ||
      res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve MASTER_ADDR ", where));
  }
  if (info.rank == 0 && !info.agent_store) {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
        TcpStoreServer::Serve(info.master_addr, info.master_port);
    if (!server.ok()) {
      freeaddrinfo(res);
      return server.status();
    }
    store->server_ = std::move(*server);
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      store->fd_ = fd;
      break;
    }
    close(fd);
    if (absl::Now() > deadline) {
      freeaddrinfo(res);
      return absl::DeadlineExceededError(absl::StrCat("rank ", info.rank, ": no store at ", where,
                                                      " within ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  freeaddrinfo(res);
  return store;
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
  server_.reset();
}

absl::Status TcpStore::Set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t klen = static_cast<uint32_t>(key.size());
  const uint64_t vlen = value.size();
  uint8_t ok = 1;
  if (!SendAll(fd_, &kSet, 1) || !SendAll(fd_, &klen, 4) || !SendAll(fd_, key.data(), klen) ||
      !SendAll(fd_, &vlen, 8) || !SendAll(fd_, value.data(), vlen) || !RecvAll(fd_, &ok, 1) ||
      ok != 0) {
    return absl::UnavailableError(
        absl::StrCat("store: cannot set '", key, "' (the store is gone)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::Get(const std::string& key, absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t klen = static_cast<uint32_t>(key.size());
  const uint64_t ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(timeout));
  uint8_t status = 2;
  if (!SendAll(fd_, &kGet, 1) || !SendAll(fd_, &klen, 4) || !SendAll(fd_, key.data(), klen) ||
      !SendAll(fd_, &ms, 8) || !RecvAll(fd_, &status, 1)) {
    return absl::UnavailableError(
        absl::StrCat("store: cannot get '", key, "' (the store is gone)"));
  }
  if (status != 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("store: no '", key, "' within ", absl::FormatDuration(timeout)));
  }
  uint64_t vlen = 0;
  if (!RecvAll(fd_, &vlen, 8)) return absl::UnavailableError("store: connection lost");
  std::string value(vlen, '\0');
  if (!RecvAll(fd_, value.data(), vlen)) return absl::UnavailableError("store: connection lost");
  return value;
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = Set(key, std::string(data.begin(), data.end()));
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
}

std::vector<char> TcpStore::get(const std::string& key) {
  absl::StatusOr<std::string> v = Get(key, timeout_);
  if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
  return std::vector<char>(v->begin(), v->end());
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  wait(keys, absl::ToChronoMilliseconds(timeout_));
}

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> v = Get(key, absl::FromChrono(timeout));
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
  }
}

absl::Status CheckSameProgram(TcpStore& store, int rank, int world_size,
                              const std::string& fingerprint, absl::Duration timeout) {
  absl::Status s = store.Set(absl::StrCat("fingerprint/", rank), fingerprint);
  if (!s.ok()) return s;
  absl::StatusOr<std::string> first = store.Get("fingerprint/0", timeout);
  if (!first.ok()) return first.status();
  for (int r = 1; r < world_size; ++r) {
    absl::StatusOr<std::string> other = store.Get(absl::StrCat("fingerprint/", r), timeout);
    if (!other.ok()) return other.status();
    if (*other != *first) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r,
                       " runs a different program from rank 0 (graphs, order, parameter table "
                       "or flags differ): every rank must compile the same step"));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap
