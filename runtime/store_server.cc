#include "runtime/store_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

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
using store_wire::kSet;
using store_wire::RecvAll;
using store_wire::SendAll;

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

}  // namespace overlap
