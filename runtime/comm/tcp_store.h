// Rendezvous as torchrun does it: a key-value store served over TCP by rank 0 at
// MASTER_ADDR:MASTER_PORT, implementing Gloo's store interface (set / get / wait), so a
// multi-host run needs only RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. (Gloo has no TCP
// store: c10d's TCPStore is PyTorch's own.) Plus the start-up check: before the first step
// every rank publishes a fingerprint of what it will run and all fail, naming the first
// rank that differs from rank 0, unless they agree.
//
//   absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
//   absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(*info, absl::Seconds(30));
#ifndef OVERLAP_RUNTIME_COMM_TCP_STORE_H_
#define OVERLAP_RUNTIME_COMM_TCP_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "runtime/comm/store_server.h"

namespace overlap {

// Whose store MASTER_ADDR:MASTER_PORT is: overlap's own (store_server.h: `overlap run`'s
// launcher, or rank 0), or PyTorch's c10d TCPStore (torchrun's agent store).
enum class StoreProtocol { kOverlap, kC10d };

// What torchrun's (or Slurm's) environment says of this process.
struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // TORCHELASTIC_USE_AGENT_STORE=True: the launcher serves the store (so it outlives any
  // rank), and rank 0 connects like the others.
  bool agent_store = false;
  // The job's store secret (store_server.h): every connection presents it, and rank 0's
  // server requires it. Empty: an open store. Overlap's store only.
  std::string secret;
  StoreProtocol protocol = StoreProtocol::kOverlap;
  // kC10d: what every key is stored under, as torch.distributed's env:// rendezvous names
  // them under torchrun ("/worker/attempt_<TORCHELASTIC_RESTART_COUNT>/"), so that a
  // restarted attempt never reads the keys of the one before.
  std::string key_prefix;
  // kC10d: the server's generation, PyTorch 1.x (1) or 2.x (2: a VALIDATE message first and
  // the request codes after it); 0 asks the server (one probe per process, kept).
  int c10d_wire = 0;
  // Where the variables came from, for messages: "torchrun" or "Slurm".
  std::string launcher = "torchrun";
};

// The bounds RendezvousFromEnv enforces (docs/limits.md): a world of at most kMaxWorldSize
// ranks (Gloo's full mesh opens world - 1 connections per rank and stream).
inline constexpr int kMaxWorldSize = 1024;
// The least time a store reply may take beyond the wait it was asked for (a get's timeout;
// a set waits for nothing) before the store counts as gone: a stopped launcher or a server
// that accepts and never answers. A connection's grace is the larger of this and its
// connect timeout (the job's --timeout), so that a store slowed by a large job on few cores
// is not taken for gone while the job's own deadline allows it.
inline constexpr absl::Duration kStoreReplyGrace = absl::Seconds(5);

// Reads RANK, WORLD_SIZE (required; 1 <= WORLD_SIZE <= kMaxWorldSize, RANK < WORLD_SIZE),
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (defaults as torchrun's),
// TORCHELASTIC_USE_AGENT_STORE, and the store secret: OVERLAP_STORE_SECRET, or the first
// line of the file OVERLAP_STORE_SECRET_FILE names (at most 1 KiB; a regular file of mode
// 0600 or stricter owned by this user or root, else PermissionDenied naming its mode).
//
// Without RANK, Slurm's variables (srun sets them in every task): SLURM_PROCID is the rank,
// SLURM_NTASKS the world size, SLURM_LOCALID the local rank, this node's entry of
// SLURM_TASKS_PER_NODE ("4(x2),2", by SLURM_NODEID) the local world size, and the first
// host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST / SLURM_NODELIST ("node[07-09],gpu1" ->
// node07) the store's address unless MASTER_ADDR is set; rank 0 serves overlap's store.
//
// The store's protocol: OVERLAP_STORE_PROTOCOL ("overlap" or "c10d"), by default c10d
// under TORCHELASTIC_USE_AGENT_STORE (torchrun's agent serves PyTorch's TCPStore), else
// overlap; OVERLAP_C10D_WIRE ("1" or "2") skips the probe of the server's generation. A
// secret with the c10d protocol is refused: PyTorch's store takes none.
// InvalidArgument naming the variable and its range or values otherwise.
absl::StatusOr<RendezvousInfo> RendezvousFromEnv();

// The address this rank's Gloo connections listen on, for the peers to reach: 127.0.0.1
// when the master is this machine's loopback; else the local address this host's packets
// to the master leave from (a UDP socket connected to it, nothing sent), or the hostname
// where there is no route (inside a network namespace, or where /etc/hosts maps the
// name to 127.0.1.1, the hostname resolves to loopback and the peers' connects are
// refused). OVERLAP_HOSTNAME overrides all. One getaddrinfo and one socket.
std::string ListenAddress(const RendezvousInfo& info);

// The first host of a Slurm host list: "node[07-09,12],gpu1" -> "node07",
// "rack[1-2]-n[01-04]" -> "rack1-n01", "a,b" -> "a". InvalidArgument when malformed.
absl::StatusOr<std::string> FirstSlurmHost(absl::string_view list);

class TcpStore : public gloo::rendezvous::Store {
 public:
  // Rank 0 serves at master_addr:master_port (and connects to itself) unless
  // info.agent_store; the others connect, retrying until `timeout`, and present
  // info.secret. With StoreProtocol::kC10d every rank is a client of PyTorch's TCPStore
  // (its wire: a set is not answered; a get polls CHECK until the key is there, then GETs,
  // so a get that times out leaves the connection in step), keys under info.key_prefix. Unavailable
  // / DeadlineExceeded naming the address otherwise (PermissionDenied when the store refuses the
  // secret). Requests from several threads are serialised (one connection). Every request has a
  // deadline: a set the grace (the larger of kStoreReplyGrace and `timeout`, plus a second per
  // MiB of value), a get its wait plus the grace; past it the store is taken for gone and every
  // later request on this connection fails at once. TCP keepalive notices a peer host that
  // vanished.
  static absl::StatusOr<std::shared_ptr<TcpStore>> Connect(const RendezvousInfo& info,
                                                           absl::Duration timeout);
  ~TcpStore() override;

  // Gloo's interface; errors throw (as Gloo's stores do) with the key in the message.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The same as values: DeadlineExceeded (a get's key did not appear in time),
  // Unavailable (the store is gone or did not answer in time), InvalidArgument (a key or
  // value past the store's bounds) instead of exceptions.
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);

  // "127.0.0.1:29500": where the store is, for messages.
  const std::string& address() const { return where_; }

 private:
  TcpStore() = default;
  // Marks the connection broken with `why` (the first reason wins) and returns it.
  absl::Status Broken(absl::Status why);
  absl::Status SetOverlap(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> GetOverlap(const std::string& key, absl::Duration timeout);
  absl::Status SetC10d(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> GetC10d(const std::string& key, absl::Duration timeout);
  // Unavailable "store: cannot <what> '<key>': ..." for a request that failed mid-way.
  absl::Status Lost(absl::string_view what, const std::string& key, absl::Duration allowed);
  int fd_ = -1;
  StoreProtocol protocol_ = StoreProtocol::kOverlap;
  std::string prefix_;  // kC10d: PyTorch's "/" then RendezvousInfo::key_prefix
  int wire_ = 1;        // kC10d: the server's generation
  absl::Duration timeout_;
  absl::Duration reply_grace_ = kStoreReplyGrace;  // the larger of it and timeout_
  std::string where_;
  absl::Status broken_;  // set once a request failed mid-way: the protocol is out of step
  std::mutex mu_;        // one request at a time on fd_
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only, without an agent store
};

// The join check, before any communicator connects: every rank publishes its world size
// and `fingerprint` (of what it was given to run); rank 0 reads every rank's and publishes
// the verdict, which the others wait for, so that every rank fails alike (a failing rank 0
// waits up to kStoreReplyGrace for the others to have seen it: the store it may serve ends
// with it). Errors:
// FailedPrecondition "WORLD_SIZE differs: rank 1 has 4, rank 0 has 2" or "rank 2 runs a
// different program from rank 0 ...", DeadlineExceeded naming the ranks that did not join
// within `timeout`. O(world size) store operations; no sockets beyond the store's.
absl::Status CheckJoin(TcpStore& store, int rank, int world_size, const std::string& fingerprint,
                       absl::Duration timeout);

// Every rank publishes `fingerprint` (a hash of its graphs, order, parameter table and
// flags) and compares it with every other rank's; FailedPrecondition naming the first rank
// whose fingerprint differs from rank 0's. O(world size) store operations.
absl::Status CheckSameProgram(TcpStore& store, int rank, int world_size,
                              const std::string& fingerprint, absl::Duration timeout);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_COMM_TCP_STORE_H_
