#include "runtime/comm/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace overlap {

using store_wire::kGet;
using store_wire::kHello;
using store_wire::kSet;

namespace {

// Equal without an early exit, so that the time of a refusal does not tell how much of a
// guess was right.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % std::max<size_t>(b.size(), 1)];
  return diff == 0;
}

// "127.0.0.1:40312" for a connected socket's peer.
std::string PeerName(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown peer";
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return absl::StrCat(ip, ":", ntohs(a.sin_port));
}

int DefaultMaxConnections() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 4096;
  return static_cast<int>(std::max<rlim_t>(64, std::min<rlim_t>(r.rlim_cur / 4, 1 << 20)));
}

// A little-endian integer at `p` (the host's order, as the client writes it).
template <typename T>
T Read(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Connections accepted between two passes of the loop.
constexpr int kAcceptRound = 16;

// How long a refused connection may linger after its reply (Conn::lingering).
constexpr absl::Duration kLinger = absl::Seconds(1);

// The bytes a connection may hold unparsed: a whole SET of the largest key and value.
constexpr size_t kMaxBuffered = 1 + 4 + store_wire::kMaxKeyBytes + 8 + store_wire::kMaxValueBytes;

}  // namespace

struct TcpStoreServer::Impl {
  // One client connection and where its protocol stands.
  struct Conn {
    int fd = -1;
    std::string peer;
    bool authed = false;
    int claimed_rank = -1;
    absl::Time hello_deadline;
    std::string in;   // received, not yet parsed
    std::string out;  // to send
    size_t out_at = 0;
    // A GET parked until its key is set or `wait_until` passes.
    bool waiting = false;
    std::string wait_key;
    absl::Time wait_until;
    bool close_when_sent = false;  // a refusal: closed once its reply is out
    bool replied = false;          // the refusal has a reply ("busy", "refused")
    // A refusal's reply is followed by our FIN, not a reset: the connection lingers (reading
    // and dropping what the client sent) until the client closes or `linger_until`, since
    // closing with unread bytes would send a reset that can discard the reply.
    bool lingering = false;
    absl::Time linger_until;
  };

  std::string secret;
  std::string where;
  int max_connections = 0;
  std::function<void(const std::string&)> on_refused;
  int listen_fd = -1;
  int wake_read = -1, wake_write = -1;  // the destructor's way into poll()
  std::map<std::string, std::string> data;
  uint64_t data_bytes = 0;
  std::list<Conn> conns;  // oldest first
  int pending = 0;        // connections awaiting their handshake
  int lingering = 0;      // refused connections lingering after their reply
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> open{0};
  int64_t reports = 0;
  absl::Time accept_paused_until = absl::InfinitePast();
  std::thread thread;

  void Report(const std::string& line) {
    if (reports > store_wire::kMaxRefusalReports) return;
    const std::string text =
        ++reports <= store_wire::kMaxRefusalReports
            ? line
            : absl::StrCat("more refused connections; they are counted, not reported");
    if (on_refused) {
      on_refused(text);
    } else {
      std::fprintf(stderr, "overlap: store: %s\n", text.c_str());
    }
  }

  // Counts and reports a refused connection; it is closed once `reply` (if any) is sent.
  void Refuse(Conn& c, const std::string& why, int reply = -1) {
    ++rejected;
    if (!c.authed && !c.close_when_sent) --pending;
    Report(absl::StrCat("the store at ", where, " refused a connection from ", c.peer,
                        c.claimed_rank >= 0 ? absl::StrCat(" (rank ", c.claimed_rank, ")") : "",
                        ": ", why));
    c.in.clear();
    c.waiting = false;
    c.close_when_sent = true;
    if (reply >= 0) {
      c.out.push_back(static_cast<char>(reply));
      c.replied = true;
    }
  }

  void Reply(Conn& c, uint8_t status, const std::string* value) {
    c.out.push_back(static_cast<char>(status));
    if (value != nullptr) {
      const uint64_t vlen = value->size();
      c.out.append(reinterpret_cast<const char*>(&vlen), 8);
      c.out.append(*value);
    }
  }

  // Parses what `c` has received: the HELLO, then requests, until one is incomplete or the
  // connection waits on a GET.
  void Parse(Conn& c) {
    while (!c.close_when_sent && !c.waiting) {
      const std::string& b = c.in;
      if (!c.authed) {
        if (b.empty()) return;
        if (static_cast<uint8_t>(b[0]) != kHello) {
          return Refuse(c, "it sent a request before the handshake");
        }
        if (b.size() < 5) return;
        const uint32_t len = Read<uint32_t>(b.data() + 1);
        if (len > store_wire::kMaxSecretBytes) return Refuse(c, "its secret is too long");
        if (b.size() < 5 + size_t{len} + 4) return;
        c.claimed_rank = Read<int32_t>(b.data() + 5 + len);
        if (c.claimed_rank < -1) c.claimed_rank = -1;
        if (!secret.empty() && !SameSecret(b.substr(5, len), secret)) {
          return Refuse(
              c,
              len == 0 ? "it presented no secret (the job has one)" : "it presented a wrong secret",
              store_wire::kHelloRefused);
        }
        c.in.erase(0, 5 + size_t{len} + 4);
        c.authed = true;
        --pending;
        c.out.push_back(static_cast<char>(store_wire::kHelloOk));
        continue;
      }
      if (b.size() < 5) return;
      const uint8_t op = static_cast<uint8_t>(b[0]);
      const uint32_t klen = Read<uint32_t>(b.data() + 1);
      if (op != kSet && op != kGet) return Refuse(c, absl::StrCat("unknown request ", int{op}));
      if (klen > store_wire::kMaxKeyBytes) return Refuse(c, "a key past the bound");
      if (b.size() < 5 + size_t{klen} + 8) return;
      const uint64_t n = Read<uint64_t>(b.data() + 5 + klen);
      std::string key = b.substr(5, klen);
      if (op == kSet) {
        if (n > store_wire::kMaxValueBytes) return Refuse(c, "a value past the bound");
        auto it = data.find(key);
        const uint64_t replaced = it == data.end() ? 0 : it->first.size() + it->second.size();
        if (data_bytes - replaced + n + klen > store_wire::kMaxStoreBytes) {
          return Refuse(c, "the store's total bound");
        }
        const size_t whole = 5 + size_t{klen} + 8 + static_cast<size_t>(n);
        if (b.size() < whole) return;  // the value's bytes arrive as they come
        std::string value = b.substr(whole - n, n);
        c.in.erase(0, whole);
        data_bytes = data_bytes - replaced + key.size() + value.size();
        data[key] = std::move(value);
        c.out.push_back(0);
        WakeWaiters(key);
      } else {
        c.in.erase(0, 5 + size_t{klen} + 8);
        const uint64_t ms = std::min<uint64_t>(n, uint64_t{86400} * 1000);
        auto it = data.find(key);
        if (it != data.end()) {
          Reply(c, 0, &it->second);
        } else if (ms == 0) {
          Reply(c, 1, nullptr);
        } else {
          c.waiting = true;
          c.wait_key = std::move(key);
          c.wait_until = absl::Now() + absl::Milliseconds(static_cast<int64_t>(ms));
        }
      }
    }
  }

  void WakeWaiters(const std::string& key) {
    auto it = data.find(key);
    for (Conn& w : conns) {
      if (!w.waiting || w.wait_key != key) continue;
      w.waiting = false;
      Reply(w, 0, &it->second);
      Parse(w);  // a client may have sent its next request behind the GET
    }
  }

  // Sends what `c` has queued; false when it is to be closed (gone, or a refusal sent).
  bool Flush(Conn& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t w =
          send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) return true;
      if (w <= 0) return false;
      c.out_at += static_cast<size_t>(w);
    }
    c.out.clear();
    c.out_at = 0;
    if (!c.close_when_sent || c.lingering) return true;
    if (!c.replied || lingering >= store_wire::kMaxPendingHandshakes) return false;
    shutdown(c.fd, SHUT_WR);
    c.lingering = true;
    c.linger_until = absl::Now() + kLinger;
    ++lingering;
    return true;
  }

  // Reads what `c` has received; false when the connection is gone.
  bool Receive(Conn& c) {
    char chunk[64 << 10];
    while (true) {
      const ssize_t r = recv(c.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EAGAIN) return true;
      if (r <= 0) return false;
      if (c.close_when_sent) continue;  // a refused connection's bytes are dropped
      if (c.in.size() + static_cast<size_t>(r) > kMaxBuffered) {
        Refuse(c, "more bytes than any request holds");
        return true;
      }
      c.in.append(chunk, static_cast<size_t>(r));
    }
  }

  void Close(std::list<Conn>::iterator it) {
    if (!it->authed && !it->close_when_sent) --pending;
    if (it->lingering) --lingering;
    close(it->fd);
    conns.erase(it);
    --open;
  }

  // Accepts up to a round's worth of connections: refused ones are closed by the loop
  // between rounds, so a flood never holds more descriptors than the bounds and a round.
  void AcceptRound() {
    for (int round = 0; round < kAcceptRound; ++round) {
      const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors (EMFILE, ENFILE) or memory: the listening socket stays
        // readable, so polling it again at once would spin.
        if (errno != EAGAIN) accept_paused_until = absl::Now() + absl::Milliseconds(50);
        return;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      conns.emplace_back();
      Conn& c = conns.back();
      c.fd = fd;
      c.peer = PeerName(fd);
      c.hello_deadline = absl::Now() + store_wire::kHelloTimeout;
      ++open;
      ++pending;
      if (static_cast<int>(conns.size()) > max_connections) {
        Refuse(c, absl::StrCat("the store serves at most ", max_connections, " connections"),
               store_wire::kHelloBusy);
        continue;
      }
      if (pending > store_wire::kMaxPendingHandshakes) {
        for (Conn& p : conns) {
          if (p.authed || p.close_when_sent) continue;
          Refuse(p,
                 absl::StrCat("more than ", store_wire::kMaxPendingHandshakes,
                              " connections awaited their handshake (the oldest is closed)"),
                 store_wire::kHelloBusy);
          break;
        }
      }
    }
  }

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<std::list<Conn>::iterator> which;
    while (true) {
      const absl::Time now = absl::Now();
      absl::Time next = now + absl::Seconds(1);
      for (auto it = conns.begin(); it != conns.end();) {
        Conn& c = *it;
        if (!c.authed && !c.close_when_sent && now >= c.hello_deadline) {
          Refuse(c, absl::StrCat("no handshake within ",
                                 absl::FormatDuration(store_wire::kHelloTimeout)));
        }
        if (c.waiting && now >= c.wait_until) {
          c.waiting = false;
          Reply(c, 1, nullptr);
          Parse(c);
        }
        if (!Flush(c) || (c.lingering && now >= c.linger_until)) {
          Close(it++);
          continue;
        }
        if (!c.authed && !c.close_when_sent) next = std::min(next, c.hello_deadline);
        if (c.waiting) next = std::min(next, c.wait_until);
        if (c.lingering) next = std::min(next, c.linger_until);
        ++it;
      }
      fds.clear();
      which.clear();
      fds.push_back({wake_read, POLLIN, 0});
      const bool accepting = now >= accept_paused_until;
      fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
      if (!accepting) next = std::min(next, accept_paused_until);
      for (auto it = conns.begin(); it != conns.end(); ++it) {
        fds.push_back({it->fd, static_cast<short>(POLLIN | (it->out.empty() ? 0 : POLLOUT)), 0});
        which.push_back(it);
      }
      const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(next - absl::Now()) + 1);
      const int r = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(ms, 1000)));
      if (r < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) break;  // the destructor
      for (size_t k = 0; k < which.size(); ++k) {
        const short ev = fds[k + 2].revents;
        if (ev == 0) continue;
        Conn& c = *which[k];
        bool alive = true;
        if (ev & (POLLIN | POLLHUP | POLLERR)) alive = Receive(c);
        if (alive && !c.in.empty()) Parse(c);
        if (alive) alive = Flush(c);
        if (!alive) Close(which[k]);
      }
      if (fds[1].revents != 0) AcceptRound();
    }
  }

  ~Impl() {
    if (thread.joinable()) {
      const char c = 0;
      while (write(wake_write, &c, 1) < 0 && errno == EINTR) {
      }
      thread.join();
    }
    for (Conn& c : conns) close(c.fd);
    if (listen_fd >= 0) close(listen_fd);
    if (wake_read >= 0) close(wake_read);
    if (wake_write >= 0) close(wake_write);
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
  if (options.max_connections < 0) {
    return absl::InvalidArgumentError("the store's max_connections must be >= 0");
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
  impl->on_refused = std::move(options.on_refused);
  impl->max_connections =
      options.max_connections > 0 ? options.max_connections : DefaultMaxConnections();
  int wake[2] = {-1, -1};
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    freeaddrinfo(res);
    return absl::UnavailableError(
        absl::StrCat("cannot serve the store at ", where, ": pipe: ", std::strerror(errno)));
  }
  impl->wake_read = wake[0];
  impl->wake_write = wake[1];
  impl->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = impl->listen_fd >= 0 &&
                  bind(impl->listen_fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  listen(impl->listen_fd, 1024) == 0;
  freeaddrinfo(res);
  if (!ok) {
    const std::string why = std::strerror(errno);
    return absl::UnavailableError(absl::StrCat("cannot serve the store at ", where, ": ", why));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ = ntohs(bound.sin_port);
  impl->where = absl::StrCat(addr, ":", server->port_);
  impl->thread = std::thread([impl] { impl->Loop(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() = default;

int64_t TcpStoreServer::rejected() const { return impl_->rejected.load(); }

int64_t TcpStoreServer::connections() const { return impl_->open.load(); }

}  // namespace overlap
