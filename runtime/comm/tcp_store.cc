#include "runtime/comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "graph/status_macros.h"
#include "graph/text.h"

namespace overlap {
namespace {

absl::StatusOr<int> EnvInt(const char* name, std::optional<int> fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     " is not set (torchrun sets RANK and WORLD_SIZE; srun SLURM_PROCID and "
                     "SLURM_NTASKS)"));
  }
  int x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=", v, " is not a non-negative integer"));
  }
  return x;
}

}  // namespace

absl::StatusOr<std::string> FirstSlurmHost(absl::string_view list) {
  // The first entry: up to the first comma outside brackets.
  int depth = 0;
  size_t end = 0;
  for (; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    if (list[end] == ']') --depth;
    if (depth < 0 || depth > 1) break;
    if (list[end] == ',' && depth == 0) break;
  }
  if (depth != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed Slurm host list \"", Printable(list), "\": unbalanced brackets"));
  }
  absl::string_view entry = list.substr(0, end);
  // Each bracket group ("07-09,12") stands for its first number, zero padding kept.
  std::string host;
  while (!entry.empty()) {
    const size_t open = entry.find('[');
    absl::StrAppend(&host, entry.substr(0, open));
    if (open == absl::string_view::npos) break;
    const size_t close = entry.find(']', open);
    absl::string_view group = entry.substr(open + 1, close - open - 1);
    const size_t stop = group.find_first_of(",-");
    absl::string_view first = group.substr(0, stop);
    if (first.empty() || !std::all_of(first.begin(), first.end(), [](char c) {
          return absl::ascii_isdigit(static_cast<unsigned char>(c));
        })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed Slurm host list \"", Printable(list), "\": [", Printable(group), "]"));
    }
    absl::StrAppend(&host, first);
    entry.remove_prefix(close + 1);
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed Slurm host list \"", Printable(list), "\": no first host"));
  }
  return host;
}

namespace {

// This node's task count from SLURM_TASKS_PER_NODE ("4(x2),2,1": 4, 4, 2, 1 by node index).
std::optional<int> SlurmTasksOnNode(absl::string_view spec, int node) {
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    int count = 0, repeat = 1;
    const size_t paren = item.find("(x");
    if (!absl::SimpleAtoi(item.substr(0, paren), &count)) return std::nullopt;
    if (paren != absl::string_view::npos &&
        (!absl::ConsumeSuffix(&item, ")") || !absl::SimpleAtoi(item.substr(paren + 2), &repeat) ||
         repeat < 1)) {
      return std::nullopt;
    }
    if (node < repeat) return count;
    node -= repeat;
  }
  return std::nullopt;
}

}  // namespace

namespace {

// The ranks and the store's address: torchrun's variables, else Slurm's (srun), each named
// by its own variable in messages.
absl::Status ReadRanks(RendezvousInfo& info) {
  // torchrun's variables, else Slurm's (srun), each with torchrun's names in messages.
  const bool slurm = std::getenv("RANK") == nullptr && std::getenv("SLURM_PROCID") != nullptr;
  if (slurm) info.launcher = "Slurm";
  const char* rank_var = slurm ? "SLURM_PROCID" : "RANK";
  const char* world_var = slurm ? "SLURM_NTASKS" : "WORLD_SIZE";
  absl::StatusOr<int> v = EnvInt(rank_var, std::nullopt);
  if (!v.ok()) return v.status();
  info.rank = *v;
  v = EnvInt(world_var, std::nullopt);
  if (!v.ok()) return v.status();
  info.world_size = *v;
  if (info.world_size < 1 || info.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(world_var, "=", info.world_size, " is out of range: 1 to ", kMaxWorldSize));
  }
  if (info.rank >= info.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(rank_var, "=", info.rank,
                                                   " is out of range: 0 to ", info.world_size - 1,
                                                   " (", world_var, "=", info.world_size, ")"));
  }
  const char* local_rank_var = slurm ? "SLURM_LOCALID" : "LOCAL_RANK";
  v = EnvInt(local_rank_var, slurm ? 0 : info.rank);
  if (!v.ok()) return v.status();
  info.local_rank = *v;
  if (slurm) {
    // The ranks on this node: this node's entry of SLURM_TASKS_PER_NODE; without it, at
    // least as many as this rank's local id implies.
    info.local_world_size = info.local_rank + 1;
    const char* spec = std::getenv("SLURM_TASKS_PER_NODE");
    absl::StatusOr<int> node = EnvInt("SLURM_NODEID", 0);
    if (!node.ok()) return node.status();
    if (spec != nullptr) {
      std::optional<int> here = SlurmTasksOnNode(spec, *node);
      if (!here) {
        return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE=", Printable(spec),
                                                       " has no entry for SLURM_NODEID=", *node));
      }
      info.local_world_size = *here;
    }
  } else {
    v = EnvInt("LOCAL_WORLD_SIZE", info.world_size);
    if (!v.ok()) return v.status();
    info.local_world_size = *v;
  }
  if (info.local_world_size < 1 || info.local_world_size > info.world_size ||
      info.local_rank >= info.local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(local_rank_var, "=", info.local_rank, " with ", info.local_world_size,
                     " local ranks is out of range: 0 <= local rank < local ranks <= ", world_var,
                     "=", info.world_size));
  }
  if (const char* a = std::getenv("MASTER_ADDR")) {
    info.master_addr = a;
  } else if (slurm) {
    const char* list = nullptr;
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if ((list = std::getenv(name)) != nullptr) break;
    }
    if (list == nullptr) {
      return absl::InvalidArgumentError(
          "under Slurm without MASTER_ADDR, SLURM_JOB_NODELIST names the store's host: neither "
          "is set");
    }
    OVERLAP_ASSIGN_OR_RETURN(info.master_addr, FirstSlurmHost(list));
  }
  v = EnvInt("MASTER_PORT", 29500);
  if (!v.ok()) return v.status();
  if (*v < 1 || *v > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", *v, " is out of range: 1 to 65535"));
  }
  info.master_port = *v;
  return absl::OkStatus();
}

// Whose store it is (overlap's or PyTorch's c10d), and for c10d the attempt's key prefix and
// the server's generation.
absl::Status ReadStoreProtocol(RendezvousInfo& info) {
  if (const char* a = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) {
    info.agent_store = absl::AsciiStrToLower(a) == "true" || std::string(a) == "1";
  }
  info.protocol = info.agent_store ? StoreProtocol::kC10d : StoreProtocol::kOverlap;
  if (const char* p = std::getenv("OVERLAP_STORE_PROTOCOL")) {
    if (std::string(p) == "overlap") {
      info.protocol = StoreProtocol::kOverlap;
    } else if (std::string(p) == "c10d") {
      info.protocol = StoreProtocol::kC10d;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("OVERLAP_STORE_PROTOCOL=", Printable(p), ": give overlap or c10d"));
    }
  }
  if (info.protocol == StoreProtocol::kC10d) {
    if (!info.agent_store) {
      return absl::InvalidArgumentError(
          "OVERLAP_STORE_PROTOCOL=c10d needs TORCHELASTIC_USE_AGENT_STORE=True: PyTorch's store "
          "is served by torchrun's agent, not by a rank");
    }
    absl::StatusOr<int> v = EnvInt("TORCHELASTIC_RESTART_COUNT", 0);
    if (!v.ok()) return v.status();
    info.key_prefix = absl::StrCat("/worker/attempt_", *v, "/");
    if (const char* w = std::getenv("OVERLAP_C10D_WIRE")) {
      if (std::string(w) != "1" && std::string(w) != "2") {
        return absl::InvalidArgumentError(absl::StrCat(
            "OVERLAP_C10D_WIRE=", Printable(w), ": give 1 (PyTorch 1.x) or 2 (PyTorch 2.x)"));
      }
      info.c10d_wire = w[0] - '0';
    }
  }
  return absl::OkStatus();
}

// The store secret: OVERLAP_STORE_SECRET or the first line of OVERLAP_STORE_SECRET_FILE.
absl::Status ReadSecret(RendezvousInfo& info) {
  const char* secret = std::getenv("OVERLAP_STORE_SECRET");
  const char* secret_file = std::getenv("OVERLAP_STORE_SECRET_FILE");
  if (secret != nullptr && secret_file != nullptr) {
    return absl::InvalidArgumentError(
        "OVERLAP_STORE_SECRET and OVERLAP_STORE_SECRET_FILE are both set: give one");
  }
  if (secret != nullptr) info.secret = secret;
  if (secret_file != nullptr) {
    const std::string what = absl::StrCat("OVERLAP_STORE_SECRET_FILE=", secret_file);
    // O_NONBLOCK: a FIFO named here must not hang the open; it is refused below.
    const int fd = open(secret_file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": ", std::strerror(errno)));
    absl::Cleanup closer = [fd] { close(fd); };
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": not a regular file"));
    }
    // As ssh treats private keys: a secret others can read (or write) is no secret.
    if ((st.st_mode & 077) != 0) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "%s: the secret file's permissions %04o let others read or change it; it must be "
          "readable by its owner alone (chmod 600 %s)",
          what, st.st_mode & 07777, secret_file));
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": the secret file belongs to another user (uid ", st.st_uid,
                       "); it must be this user's (uid ", geteuid(), ") or root's"));
    }
    char buf[store_wire::kMaxSecretBytes + 2];
    ssize_t n = 0;
    while (true) {
      n = read(fd, buf, sizeof(buf));
      if (n >= 0 || errno != EINTR) break;
    }
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": ", std::strerror(errno)));
    std::string line(buf, static_cast<size_t>(n));
    line = line.substr(0, line.find('\n'));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (static_cast<size_t>(n) > store_wire::kMaxSecretBytes &&
        line.size() == static_cast<size_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": longer than ", store_wire::kMaxSecretBytes, " bytes"));
    }
    if (line.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the first line is empty"));
    }
    info.secret = line;
  }
  if (info.secret.size() > store_wire::kMaxSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("OVERLAP_STORE_SECRET is longer than ",
                                                   store_wire::kMaxSecretBytes, " bytes"));
  }
  if (!info.secret.empty() && info.protocol == StoreProtocol::kC10d) {
    return absl::InvalidArgumentError(
        "a store secret (OVERLAP_STORE_SECRET / OVERLAP_STORE_SECRET_FILE) is set, but the store "
        "is PyTorch's c10d TCPStore (torchrun's agent store), which takes none: unset it, or "
        "serve overlap's store (OVERLAP_STORE_PROTOCOL=overlap)");
  }
  return absl::OkStatus();
}

}  // namespace

std::string ListenAddress(const RendezvousInfo& info) {
  if (const char* h = std::getenv("OVERLAP_HOSTNAME")) return h;
  if (info.master_addr == "127.0.0.1" || info.master_addr == "localhost") return "127.0.0.1";
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string out;
  if (getaddrinfo(info.master_addr.c_str(), std::to_string(info.master_port).c_str(), &hints,
                  &found) == 0) {
    for (addrinfo* a = found; a != nullptr && out.empty(); a = a->ai_next) {
      const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
      if (fd < 0) continue;
      sockaddr_storage local = {};
      socklen_t len = sizeof(local);
      char text[INET6_ADDRSTRLEN] = {0};
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        const void* raw =
            local.ss_family == AF_INET6
                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
        if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) out = text;
      }
      close(fd);
    }
    freeaddrinfo(found);
  }
  if (out.empty()) {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0) out = host;
  }
  return out.empty() ? "127.0.0.1" : out;
}

absl::StatusOr<RendezvousInfo> RendezvousFromEnv() {
  RendezvousInfo info;
  OVERLAP_RETURN_IF_ERROR(ReadRanks(info));
  OVERLAP_RETURN_IF_ERROR(ReadStoreProtocol(info));
  OVERLAP_RETURN_IF_ERROR(ReadSecret(info));
  return info;
}

namespace {

// PyTorch's c10d TCPStore wire (torch/csrc/distributed/c10d/TCPStore.cpp): a request is a
// code byte, then strings as an 8-byte length and bytes. Codes by generation: 1.x (1.13's)
// and 2.x, which inserted VALIDATE (a 4-byte magic, no reply) before them and sends it first.
struct C10dCodes {
  uint8_t set, get, check;
};
constexpr C10dCodes kC10dWire1{0, 2, 4};
constexpr C10dCodes kC10dWire2{1, 3, 5};
constexpr uint8_t kC10dValidate = 0;
constexpr uint8_t kC10dAdd1 = 3, kC10dAdd2 = 4;  // ADD: key, an 8-byte amount; the sum back
constexpr absl::string_view kC10dInitKey = "init/";
constexpr uint32_t kC10dMagic = 0x3C85F7CE;
constexpr uint8_t kC10dGetNumKeys1 = 6;  // 1.x; the 2.x server reads it as WAIT
constexpr uint8_t kC10dReady = 0;
// PyTorch's client stores every user key under "/" (TCPStore's keyPrefix_).
constexpr absl::string_view kC10dKeyPrefix = "/";
// How long a c10d server may take to answer the generation probe: a 1.x server answers at
// once, a 2.x one never does.
constexpr absl::Duration kC10dProbeWait = absl::Seconds(2);

// A connected socket to `res` with keepalive, or why not before `deadline`; `retry` says
// whether the store may simply not be up yet (refused, reset, timed out).
absl::StatusOr<int> ConnectSocket(const addrinfo* res, const std::string& where,
                                  absl::Time deadline, bool& retry) {
  retry = false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  int r = connect(fd, res->ai_addr, res->ai_addrlen);
  if (r != 0 && errno == EINPROGRESS) {
    if (store_wire::WaitReady(fd, POLLOUT, deadline)) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      r = err == 0 ? 0 : -1;
    } else {
      errno = ETIMEDOUT;
    }
  }
  if (r != 0) {
    const int err = errno;
    close(fd);
    retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET;
    return absl::UnavailableError(
        absl::StrCat("cannot reach the store at ", where, ": ", std::strerror(err)));
  }
  // With nothing listening yet, a connection to a local port in the ephemeral range can be
  // given that very port as its source and open onto itself (TCP simultaneous open): it
  // would echo every request back. Taken for "not up yet".
  sockaddr_storage mine{}, peer{};
  socklen_t mine_len = sizeof(mine), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) == 0 &&
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 && mine_len == peer_len &&
      std::memcmp(&mine, &peer, mine_len) == 0) {
    close(fd);
    retry = true;
    return absl::UnavailableError(
        absl::StrCat("cannot reach the store at ", where, ": nothing listens there yet"));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Keepalive: a peer host that vanishes is noticed in about 10 + 3 x 5 s.
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int idle = 10, interval = 5, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  return fd;
}

// ConnectSocket, then overlap's HELLO with `secret` and `rank`. A store that says it is
// busy (store_server.h: too many connections) is tried again (`retry`).
absl::StatusOr<int> ConnectOnce(const addrinfo* res, const std::string& secret, int rank,
                                const std::string& where, absl::Time deadline, bool& retry) {
  OVERLAP_ASSIGN_OR_RETURN(const int fd, ConnectSocket(res, where, deadline, retry));
  const uint32_t len = static_cast<uint32_t>(secret.size());
  const int32_t claimed = rank;
  uint8_t reply = store_wire::kHelloRefused;
  const absl::Time hello_deadline = std::min(deadline, absl::Now() + store_wire::kHelloTimeout);
  const bool answered = store_wire::SendAll(fd, &store_wire::kHello, 1, hello_deadline) &&
                        store_wire::SendAll(fd, &len, 4, hello_deadline) &&
                        store_wire::SendAll(fd, secret.data(), len, hello_deadline) &&
                        store_wire::SendAll(fd, &claimed, 4, hello_deadline) &&
                        store_wire::RecvAll(fd, &reply, 1, hello_deadline);
  const int err = errno;
  if (answered && reply == store_wire::kHelloOk) return fd;
  close(fd);
  if (answered && reply == store_wire::kHelloBusy) {
    retry = true;
    return absl::UnavailableError(
        absl::StrCat("the store at ", where, " is busy (it serves too many connections)"));
  }
  if (!answered && err == ETIMEDOUT) {
    return absl::UnavailableError(
        absl::StrCat("the store at ", where, " accepted the connection but did not answer within ",
                     absl::FormatDuration(store_wire::kHelloTimeout), " (a stopped launcher?)"));
  }
  if (answered && reply == store_wire::kHelloRefused) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the store at ", where,
        " refused this process's secret: OVERLAP_STORE_SECRET / OVERLAP_STORE_SECRET_FILE must "
        "match the one the store was started with",
        secret.empty() ? " (this process has none)" : ""));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "the store at ", where,
      " closed the connection at the handshake: it is not overlap's store, or it wants a "
      "secret this process does not have (OVERLAP_STORE_SECRET / OVERLAP_STORE_SECRET_FILE "
      "must match the one the store was started with)"));
}

// The c10d server's generation, asked both ways at once on two connections of their own: a
// 1.x server answers GETNUMKEYS (1.x code 6) with 8 bytes; a 2.x one answers VALIDATE then
// GETNUMKEYS (2.x code 7) with 8 bytes. Each reads the other's probe as an unfinished
// request (2.x: WAIT; 1.x: SET) and drops it when the probe's connection closes. A server
// that answers neither (busy, stopped) is asked again, waiting twice as long each time,
// until `deadline`. Asked once per process, then kept.
absl::StatusOr<int> ProbeC10dWire(const addrinfo* res, const std::string& where,
                                  absl::Time deadline, absl::Duration timeout) {
  static std::mutex mu;
  static int known = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (known != 0) return known;
  absl::Duration wait = kC10dProbeWait;
  int tries = 0;
  while (known == 0) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the store at ", where, " answered neither PyTorch wire within ",
          absl::FormatDuration(timeout), " (", tries,
          " tries; 1.x: GETNUMKEYS, 2.x: VALIDATE then GETNUMKEYS): is torchrun's agent "
          "alive and is the address PyTorch's TCPStore? OVERLAP_C10D_WIRE=1 or 2 skips this "
          "probe; --timeout gives it longer"));
    }
    bool retry = false;
    absl::StatusOr<int> one = ConnectSocket(res, where, deadline, retry);
    absl::StatusOr<int> two = one.ok() ? ConnectSocket(res, where, deadline, retry) : one;
    if (!two.ok()) {
      if (one.ok()) close(*one);
      if (!retry) return two.status();
      // Not up yet: tried again, and not counted as a try.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    ++tries;
    const absl::Time until = std::min(deadline, absl::Now() + wait);
    const uint8_t numkeys2 = 7;
    const bool sent = store_wire::SendAll(*one, &kC10dGetNumKeys1, 1, until) &&
                      store_wire::SendAll(*two, &kC10dValidate, 1, until) &&
                      store_wire::SendAll(*two, &kC10dMagic, 4, until) &&
                      store_wire::SendAll(*two, &numkeys2, 1, until);
    // Whichever connection answers with its 8 bytes first names the generation.
    std::string got[2];
    bool open[2] = {sent, sent};
    while (known == 0 && (open[0] || open[1]) && absl::Now() < until) {
      pollfd p[2] = {{open[0] ? *one : -1, POLLIN, 0}, {open[1] ? *two : -1, POLLIN, 0}};
      const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(until - absl::Now()));
      if (poll(p, 2, static_cast<int>(std::min<int64_t>(ms, 1000))) < 0 && errno != EINTR) break;
      for (int k = 0; k < 2; ++k) {
        if (!open[k] || p[k].revents == 0) continue;
        char buf[16];
        const ssize_t r = recv(k == 0 ? *one : *two, buf, sizeof(buf), MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
          open[k] = false;
          continue;
        }
        got[k].append(buf, static_cast<size_t>(r));
        if (got[k].size() >= 8) known = k + 1;
      }
    }
    close(*one);
    close(*two);
    wait = std::min(wait * 2, absl::Seconds(30));
  }
  return known;
}

// A c10d connection ready for requests, as PyTorch's client makes one: the wire (given,
// or probed on connections of its own before this one opens, so that it never sits idle
// through the probe), VALIDATE on 2.x, and one more on "init/" (a raw key, outside the "/"
// prefix), which a server made with wait_for_workers counts before its constructor
// returns. A connection the server closes before the count comes back sets `retry`.
absl::StatusOr<int> ConnectC10d(const addrinfo* res, const RendezvousInfo& info,
                                const std::string& where, absl::Time deadline,
                                absl::Duration timeout, int& wire, bool& retry) {
  retry = false;
  if (wire == 0) {
    OVERLAP_ASSIGN_OR_RETURN(wire, info.c10d_wire != 0
                                       ? absl::StatusOr<int>(info.c10d_wire)
                                       : ProbeC10dWire(res, where, deadline, timeout));
  }
  OVERLAP_ASSIGN_OR_RETURN(const int fd, ConnectSocket(res, where, deadline, retry));
  const uint8_t add = wire == 2 ? kC10dAdd2 : kC10dAdd1;
  const uint64_t klen = kC10dInitKey.size();
  const int64_t one = 1;
  int64_t count = 0;
  const bool counted =
      (wire != 2 || (store_wire::SendAll(fd, &kC10dValidate, 1, deadline) &&
                     store_wire::SendAll(fd, &kC10dMagic, 4, deadline))) &&
      store_wire::SendAll(fd, &add, 1, deadline) && store_wire::SendAll(fd, &klen, 8, deadline) &&
      store_wire::SendAll(fd, kC10dInitKey.data(), klen, deadline) &&
      store_wire::SendAll(fd, &one, 8, deadline) && store_wire::RecvAll(fd, &count, 8, deadline);
  if (counted) return fd;
  const bool late = errno == ETIMEDOUT;
  close(fd);
  if (late) {
    return absl::DeadlineExceededError(
        absl::StrCat("the store at ", where,
                     " accepted the connection but did not answer its 'init/' count "
                     "(PyTorch wire ",
                     wire, ") within ", absl::FormatDuration(timeout),
                     ": a stopped launcher, or a server of the other wire (OVERLAP_C10D_WIRE)?"));
  }
  retry = true;
  return absl::UnavailableError(absl::StrCat("the store at ", where,
                                             " closed the connection before its 'init/' count "
                                             "(PyTorch wire ",
                                             wire, ")"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::Connect(const RendezvousInfo& info,
                                                            absl::Duration timeout) {
  std::shared_ptr<TcpStore> store(new TcpStore());
  store->timeout_ = timeout;
  store->reply_grace_ = std::max(kStoreReplyGrace, timeout);
  const std::string where = absl::StrCat(info.master_addr, ":", info.master_port);
  store->where_ = where;
  store->protocol_ = info.protocol;
  store->prefix_ = absl::StrCat(kC10dKeyPrefix, info.key_prefix);
  const bool c10d = info.protocol == StoreProtocol::kC10d;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(info.master_addr.c_str(), std::to_string(info.master_port).c_str(), &hints,
                  &res) != 0 ||
      res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve MASTER_ADDR ", where));
  }
  if (info.rank == 0 && !info.agent_store && !c10d) {
    StoreServerOptions so;
    so.secret = info.secret;
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
        TcpStoreServer::Serve(info.master_addr, info.master_port, so);
    if (!server.ok()) {
      freeaddrinfo(res);
      return server.status();
    }
    store->server_ = std::move(*server);
  }
  const absl::Time deadline = absl::Now() + timeout;
  int wire = 0;  // c10d: given or probed once, then kept across retries
  while (true) {
    bool retry = false;
    absl::StatusOr<int> fd = c10d
                                 ? ConnectC10d(res, info, where, deadline, timeout, wire, retry)
                                 : ConnectOnce(res, info.secret, info.rank, where, deadline, retry);
    if (fd.ok()) {
      store->fd_ = *fd;
      if (c10d) store->wire_ = wire;
      break;
    }
    if (!retry) {
      freeaddrinfo(res);
      return absl::Status(fd.status().code(),
                          absl::StrCat("rank ", info.rank, ": ", fd.status().message()));
    }
    if (absl::Now() > deadline) {
      freeaddrinfo(res);
      return absl::DeadlineExceededError(absl::StrCat("rank ", info.rank, ": no store at ", where,
                                                      " within ", absl::FormatDuration(timeout),
                                                      " (last: ", fd.status().message(), ")"));
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

absl::Status TcpStore::Broken(absl::Status why) {
  if (broken_.ok()) broken_ = why;
  return broken_;
}

absl::Status TcpStore::Lost(absl::string_view what, const std::string& key,
                            absl::Duration allowed) {
  const bool late = errno == ETIMEDOUT;
  return Broken(absl::UnavailableError(absl::StrCat(
      "store: cannot ", what, " '", Printable(key), "': ",
      late ? absl::StrCat("no answer from the store at ", where_, " within ",
                          absl::FormatDuration(allowed), " (a stopped or hung launcher?)")
           : absl::StrCat("lost the store at ", where_, " (the store is gone)"))));
}

absl::Status TcpStore::Set(const std::string& key, const std::string& value) {
  if (key.size() > store_wire::kMaxKeyBytes || value.size() > store_wire::kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: cannot set '", Printable(key.substr(0, 64)), "': keys hold at most ",
                     store_wire::kMaxKeyBytes, " bytes and values ", store_wire::kMaxValueBytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  return protocol_ == StoreProtocol::kC10d ? SetC10d(key, value) : SetOverlap(key, value);
}

absl::StatusOr<std::string> TcpStore::Get(const std::string& key, absl::Duration timeout) {
  if (key.size() > store_wire::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: cannot get '", Printable(key.substr(0, 64)), "': keys hold at most ",
                     store_wire::kMaxKeyBytes, " bytes"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  if (timeout < absl::ZeroDuration()) timeout = absl::ZeroDuration();
  return protocol_ == StoreProtocol::kC10d ? GetC10d(key, timeout) : GetOverlap(key, timeout);
}

absl::Status TcpStore::SetC10d(const std::string& key, const std::string& value) {
  // SET is not answered: a store that is gone shows at the next get.
  const absl::Duration allowed = reply_grace_ + absl::Seconds(value.size() >> 20);
  const absl::Time deadline = absl::Now() + allowed;
  const std::string full = prefix_ + key;
  const uint8_t op = wire_ == 2 ? kC10dWire2.set : kC10dWire1.set;
  const uint64_t klen = full.size(), vlen = value.size();
  if (!store_wire::SendAll(fd_, &op, 1, deadline) ||
      !store_wire::SendAll(fd_, &klen, 8, deadline) ||
      !store_wire::SendAll(fd_, full.data(), klen, deadline) ||
      !store_wire::SendAll(fd_, &vlen, 8, deadline) ||
      !store_wire::SendAll(fd_, value.data(), vlen, deadline)) {
    return Lost("set", key, allowed);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::GetC10d(const std::string& key, absl::Duration timeout) {
  // CHECK until the key is there (each answered at once), then GET: a get that times out
  // leaves nothing pending on the connection, which a c10d WAIT would (1.x cannot cancel one).
  const C10dCodes& codes = wire_ == 2 ? kC10dWire2 : kC10dWire1;
  const std::string full = prefix_ + key;
  const uint64_t one = 1, klen = full.size();
  const absl::Time until = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    const absl::Time deadline = absl::Now() + reply_grace_;
    uint8_t ready = 1;
    if (!store_wire::SendAll(fd_, &codes.check, 1, deadline) ||
        !store_wire::SendAll(fd_, &one, 8, deadline) ||
        !store_wire::SendAll(fd_, &klen, 8, deadline) ||
        !store_wire::SendAll(fd_, full.data(), klen, deadline) ||
        !store_wire::RecvAll(fd_, &ready, 1, deadline) || ready > 1) {
      return Lost("get", key, reply_grace_);
    }
    if (ready == kC10dReady) break;
    if (absl::Now() >= until) {
      return absl::DeadlineExceededError(
          absl::StrCat("store: no '", Printable(key), "' within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, until - absl::Now()));
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
  const absl::Time deadline = absl::Now() + reply_grace_;
  uint64_t vlen = 0;
  std::string value;
  bool ok = store_wire::SendAll(fd_, &codes.get, 1, deadline) &&
            store_wire::SendAll(fd_, &klen, 8, deadline) &&
            store_wire::SendAll(fd_, full.data(), klen, deadline) &&
            store_wire::RecvAll(fd_, &vlen, 8, deadline) && vlen <= store_wire::kMaxValueBytes;
  if (ok) {
    value.resize(vlen);
    ok = store_wire::RecvAll(fd_, value.data(), vlen, deadline);
  }
  if (!ok) return Lost("get", key, reply_grace_);
  return value;
}

absl::Status TcpStore::SetOverlap(const std::string& key, const std::string& value) {
  // A set is answered at once: the grace, and a second per MiB for a large value.
  const absl::Duration allowed = reply_grace_ + absl::Seconds(value.size() >> 20);
  const absl::Time deadline = absl::Now() + allowed;
  const uint32_t klen = static_cast<uint32_t>(key.size());
  const uint64_t vlen = value.size();
  uint8_t ok = 1;
  if (!store_wire::SendAll(fd_, &store_wire::kSet, 1, deadline) ||
      !store_wire::SendAll(fd_, &klen, 4, deadline) ||
      !store_wire::SendAll(fd_, key.data(), klen, deadline) ||
      !store_wire::SendAll(fd_, &vlen, 8, deadline) ||
      !store_wire::SendAll(fd_, value.data(), vlen, deadline) ||
      !store_wire::RecvAll(fd_, &ok, 1, deadline) || ok != 0) {
    return Lost("set", key, allowed);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::GetOverlap(const std::string& key, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout + reply_grace_;
  const uint32_t klen = static_cast<uint32_t>(key.size());
  const uint64_t ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(timeout));
  uint8_t status = 2;
  uint64_t vlen = 0;
  std::string value;
  bool ok = store_wire::SendAll(fd_, &store_wire::kGet, 1, deadline) &&
            store_wire::SendAll(fd_, &klen, 4, deadline) &&
            store_wire::SendAll(fd_, key.data(), klen, deadline) &&
            store_wire::SendAll(fd_, &ms, 8, deadline) &&
            store_wire::RecvAll(fd_, &status, 1, deadline) && status <= 1;
  if (ok && status == 0) {
    ok = store_wire::RecvAll(fd_, &vlen, 8, deadline) && vlen <= store_wire::kMaxValueBytes;
    if (ok) {
      value.resize(vlen);
      ok = store_wire::RecvAll(fd_, value.data(), vlen, deadline);
    }
  }
  if (!ok) return Lost("get", key, timeout + reply_grace_);
  if (status != 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("store: no '", Printable(key), "' within ", absl::FormatDuration(timeout)));
  }
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

absl::Status CheckJoin(TcpStore& store, int rank, int world_size, const std::string& fingerprint,
                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const auto left = [&] { return std::max(deadline - absl::Now(), absl::ZeroDuration()); };
  // "<world size> <fingerprint>"
  const auto parse = [](const std::string& v, int& world, std::string& print) {
    const size_t space = v.find(' ');
    print = space == std::string::npos ? "" : v.substr(space + 1);
    return absl::SimpleAtoi(v.substr(0, space), &world);
  };
  OVERLAP_RETURN_IF_ERROR(
      store.Set(absl::StrCat("join/", rank), absl::StrCat(world_size, " ", fingerprint)));
  if (rank != 0) {
    absl::StatusOr<std::string> first = store.Get("join/0", left());
    if (!first.ok()) {
      return absl::Status(first.status().code(),
                          absl::StrCat("rank 0 did not join within ", absl::FormatDuration(timeout),
                                       " (", first.status().message(), ")"));
    }
    int world0 = 0;
    std::string print0;
    if (parse(*first, world0, print0) && world0 != world_size) {
      store.Set(absl::StrCat("join/seen/", rank), "1").IgnoreError();  // it needs no verdict
      return absl::FailedPreconditionError(absl::StrCat("WORLD_SIZE differs: rank ", rank, " has ",
                                                        world_size, ", rank 0 has ", world0));
    }
    absl::StatusOr<std::string> verdict = store.Get("join/verdict", left());
    // Seen: rank 0 may now end (and with it a store it serves).
    if (verdict.ok()) store.Set(absl::StrCat("join/seen/", rank), "1").IgnoreError();
    if (!verdict.ok()) {
      return absl::Status(
          verdict.status().code(),
          absl::StrCat("rank 0 did not confirm the join within ", absl::FormatDuration(timeout),
                       " (", verdict.status().message(), ")"));
    }
    if (*verdict != "ok") {
      return absl::FailedPreconditionError(absl::StrCat("rank 0: ", Printable(*verdict)));
    }
    return absl::OkStatus();
  }
  absl::Status verdict;
  std::vector<std::string> missing;
  for (int r = 1; r < world_size && verdict.ok(); ++r) {
    absl::StatusOr<std::string> v = store.Get(absl::StrCat("join/", r), left());
    if (!v.ok()) {
      if (v.status().code() != absl::StatusCode::kDeadlineExceeded) return v.status();
      missing.push_back(absl::StrCat(r));
      continue;
    }
    int world = 0;
    std::string print;
    if (!parse(*v, world, print)) {
      verdict =
          absl::FailedPreconditionError(absl::StrCat("rank ", r, " sent a malformed join record"));
    } else if (world != world_size) {
      verdict = absl::FailedPreconditionError(absl::StrCat("WORLD_SIZE differs: rank ", r, " has ",
                                                           world, ", rank 0 has ", world_size));
    } else if (print != fingerprint) {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "rank ", r,
          " runs a different program from rank 0 (graphs, parameter table, flags or files "
          "differ): every rank must be given the same job"));
    }
  }
  if (verdict.ok() && !missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 8);
    verdict = absl::DeadlineExceededError(absl::StrCat(
        missing.size(), " of ", world_size, " ranks did not join within ",
        absl::FormatDuration(timeout), " (rank", missing.size() > 1 ? "s " : " ",
        absl::StrJoin(missing.begin(), missing.begin() + shown, ", "),
        missing.size() > shown ? ", ..." : "",
        "): is every rank started, with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT?"));
  }
  store.Set("join/verdict", verdict.ok() ? "ok" : std::string(verdict.message())).IgnoreError();
  if (!verdict.ok()) {
    // Rank 0 ending at once would take a store it serves with it before the others read
    // why: it waits (a few seconds at most) until every rank that joined has seen it.
    const absl::Time until = absl::Now() + kStoreReplyGrace;
    for (int r = 1; r < world_size; ++r) {
      if (std::find(missing.begin(), missing.end(), absl::StrCat(r)) != missing.end()) continue;
      if (!store.Get(absl::StrCat("join/seen/", r), until - absl::Now()).ok()) break;
    }
  }
  return verdict;
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
