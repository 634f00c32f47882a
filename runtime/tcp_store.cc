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
  if (!store_wire::SendAll(fd_, &store_wire::kSet, 1) || !store_wire::SendAll(fd_, &klen, 4) ||
      !store_wire::SendAll(fd_, key.data(), klen) || !store_wire::SendAll(fd_, &vlen, 8) ||
      !store_wire::SendAll(fd_, value.data(), vlen) || !store_wire::RecvAll(fd_, &ok, 1) ||
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
  if (!store_wire::SendAll(fd_, &store_wire::kGet, 1) || !store_wire::SendAll(fd_, &klen, 4) ||
      !store_wire::SendAll(fd_, key.data(), klen) || !store_wire::SendAll(fd_, &ms, 8) ||
      !store_wire::RecvAll(fd_, &status, 1)) {
    return absl::UnavailableError(
        absl::StrCat("store: cannot get '", key, "' (the store is gone)"));
  }
  if (status != 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("store: no '", key, "' within ", absl::FormatDuration(timeout)));
  }
  uint64_t vlen = 0;
  if (!store_wire::RecvAll(fd_, &vlen, 8)) return absl::UnavailableError("store: connection lost");
  std::string value(vlen, '\0');
  if (!store_wire::RecvAll(fd_, value.data(), vlen))
    return absl::UnavailableError("store: connection lost");
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
