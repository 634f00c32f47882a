// The rendezvous store's server alone (no Gloo): what a launcher serves so that the store
// does not die with rank 0, and what TcpStore's rank 0 serves otherwise (tcp_store.h). A
// key-value map over TCP: set, and get that waits up to a timeout for the key.
#ifndef OVERLAP_RUNTIME_STORE_SERVER_H_
#define OVERLAP_RUNTIME_STORE_SERVER_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace overlap {

class TcpStoreServer {
 public:
  // Serves at addr:port (port 0: a free port, see port()). Unavailable naming the address
  // when it cannot listen.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Serve(const std::string& addr, int port);
  ~TcpStoreServer();
  int port() const { return port_; }

 private:
  struct Impl;
  TcpStoreServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// The wire protocol, shared by the server and TcpStore's client (internal).
namespace store_wire {

// Requests: op (1 byte), key length (4), key, then for SET the value length (8) and value,
// for GET the timeout in milliseconds (8). Replies: SET 1 byte (0); GET a status byte (0
// found, 1 timed out) and, when found, the value length (8) and value.
inline constexpr uint8_t kSet = 1, kGet = 2;

inline bool SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool RecvAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace store_wire
}  // namespace overlap

#endif  // OVERLAP_RUNTIME_STORE_SERVER_H_
