// The rendezvous store's server alone (no Gloo): what a launcher serves so that the store
// does not die with rank 0, and what TcpStore's rank 0 serves otherwise (tcp_store.h). A
// key-value map over TCP: set, and get that waits up to a timeout for the key.
//
// Trust (docs/runtime.md, "The store's trust model"): with a secret, every connection must
// present it (its first message) before any key is read or written; a connection that does
// not is closed, counted (rejected()) and reported (StoreServerOptions::on_refused), naming
// the peer's address and the rank it claimed. Without one (an empty secret) the store is open
// to any process that reaches the port, as PyTorch's TCPStore is. Traffic is not encrypted.
//
// One thread serves every connection (poll over non-blocking sockets): an idle connection
// costs a descriptor and a few hundred bytes, never a thread or its stack.
//
// Bounds (docs/limits.md): keys up to kMaxKeyBytes, values up to kMaxValueBytes, all values
// together up to kMaxStoreBytes; a value's memory grows as its bytes arrive, never from its
// declared length alone. A request past a bound closes that connection. Connections that
// have not authenticated are at most kMaxPendingHandshakes (past it the oldest is told
// "busy" and closed) and each is closed kHelloTimeout after it was accepted; all connections
// together are at most StoreServerOptions::max_connections (a quarter of the descriptor
// limit by default, so that the process keeps descriptors for its own work). A departed
// client's descriptor is released when it leaves; accept() errors (EMFILE among them) pause
// accepting briefly and are retried.
#ifndef OVERLAP_RUNTIME_COMM_STORE_SERVER_H_
#define OVERLAP_RUNTIME_COMM_STORE_SERVER_H_

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace overlap {

struct StoreServerOptions {
  // Every client must present this (TcpStore: RendezvousInfo::secret); empty: an open store.
  std::string secret;
  // The most connections served at once, authenticated or not; 0: a quarter of this
  // process's descriptor limit (RLIMIT_NOFILE's soft limit), at least 64. A connection past
  // it is told "busy" and closed (the client retries within its timeout).
  int max_connections = 0;
  // Called (on the server's thread) with one line for each refused connection: a wrong or
  // missing secret, a handshake not finished in time, a request past a bound. The first
  // kMaxRefusalReports are reported; then one line says that later ones are only counted.
  // Empty: the lines go to stderr, prefixed "overlap: store: ".
  std::function<void(const std::string&)> on_refused;
};

class TcpStoreServer {
 public:
  // Serves at addr:port (port 0: a free port, see port()). The listening socket and every
  // client socket are close-on-exec, so a launched worker never holds the store open.
  // Unavailable naming the address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Serve(const std::string& addr, int port,
                                                               StoreServerOptions options = {});
  ~TcpStoreServer();
  int port() const { return port_; }
  // Connections closed for a missing or wrong secret, or for a request past a bound.
  int64_t rejected() const;
  // Connections open now (authenticated or not).
  int64_t connections() const;

 private:
  struct Impl;
  TcpStoreServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// The wire protocol, shared by the server and TcpStore's client (internal).
namespace store_wire {

// A connection opens with HELLO: op (1 byte), secret length (4), secret, the client's rank
// (4, signed; -1 when it has none); the reply is one byte: kHelloOk, kHelloRefused (wrong
// secret; then closed) or kHelloBusy (too many connections; closed, try again). A
// connection closed without a reply broke the protocol or the handshake's deadline. Then requests:
// op (1 byte), key length (4), key, then for SET the value length (8) and value, for GET the
// timeout in milliseconds (8). Replies: SET 1 byte (0); GET a status byte (0 found, 1 timed out)
// and, when found, the value length (8) and value. Integers little-endian (the host's order).
inline constexpr uint8_t kSet = 1, kGet = 2, kHello = 3;
inline constexpr uint8_t kHelloOk = 0, kHelloRefused = 1, kHelloBusy = 2;
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxSecretBytes = 1024;
inline constexpr uint64_t kMaxValueBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxStoreBytes = uint64_t{1} << 30;
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(10);
inline constexpr int kMaxPendingHandshakes = 64;
inline constexpr int kMaxRefusalReports = 16;

// Waits until `fd` is ready for `events` or `deadline` passes: false then (errno
// ETIMEDOUT), or on a poll error.
inline bool WaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd, events, 0};
    const int64_t ms = absl::ToInt64Milliseconds(left);
    const int r = poll(&p, 1, static_cast<int>(ms > 1000000 ? 1000000 : ms < 1 ? 1 : ms));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

// Sends or receives all `n` bytes before `deadline` (InfiniteFuture: no deadline). False
// on a closed connection, an error, or the deadline (errno ETIMEDOUT).
inline bool SendAll(int fd, const void* data, size_t n,
                    absl::Time deadline = absl::InfiniteFuture()) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (deadline != absl::InfiniteFuture() && !WaitReady(fd, POLLOUT, deadline)) return false;
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (deadline == absl::InfiniteFuture())
        WaitReady(fd, POLLOUT, absl::Now() + absl::Seconds(1));
      continue;
    }
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool RecvAll(int fd, void* data, size_t n, absl::Time deadline = absl::InfiniteFuture()) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (deadline != absl::InfiniteFuture() && !WaitReady(fd, POLLIN, deadline)) return false;
    const ssize_t r = recv(fd, p, n, deadline != absl::InfiniteFuture() ? MSG_DONTWAIT : 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0) {
      if (r == 0) errno = ECONNRESET;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace store_wire
}  // namespace overlap

#endif  // OVERLAP_RUNTIME_COMM_STORE_SERVER_H_
