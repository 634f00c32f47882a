// Rendezvous as torchrun does it: a key-value store served over TCP by rank 0 at
// MASTER_ADDR:MASTER_PORT, implementing Gloo's store interface (set / get / wait), so a
// multi-host run needs only RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. (Gloo has no TCP
// store: c10d's TCPStore is PyTorch's own.) Plus the start-up check: before the first step
// every rank publishes a fingerprint of what it will run and all fail, naming the first
// rank that differs from rank 0, unless they agree.
//
//   absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
//   absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(*info, absl::Seconds(30));
#ifndef OVERLAP_RUNTIME_TCP_STORE_H_
#define OVERLAP_RUNTIME_TCP_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "runtime/store_server.h"

namespace overlap {

// What torchrun's environment says of this process.
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
};

// Reads RANK, WORLD_SIZE (required), LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (defaults as torchrun's), TORCHELASTIC_USE_AGENT_STORE. InvalidArgument naming the
// variable otherwise.
absl::StatusOr<RendezvousInfo> RendezvousFromEnv();

class TcpStore : public gloo::rendezvous::Store {
 public:
  // Rank 0 serves at master_addr:master_port (and connects to itself) unless
  // info.agent_store; the others connect, retrying until `timeout`. Unavailable /
  // DeadlineExceeded naming the address otherwise. Requests from several threads are
  // serialised (one connection).
  static absl::StatusOr<std::shared_ptr<TcpStore>> Connect(const RendezvousInfo& info,
                                                           absl::Duration timeout);
  ~TcpStore() override;

  // Gloo's interface; errors throw (as Gloo's stores do) with the key in the message.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The same as values: NotFound / DeadlineExceeded / Unavailable instead of exceptions.
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout);

 private:
  TcpStore() = default;
  int fd_ = -1;
  absl::Duration timeout_;
  std::mutex mu_;                           // one request at a time on fd_
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only, without an agent store
};

// Every rank publishes `fingerprint` (a hash of its graphs, order, parameter table and
// flags) and compares it with every other rank's; FailedPrecondition naming the first rank
// whose fingerprint differs from rank 0's. O(world size) store operations.
absl::Status CheckSameProgram(TcpStore& store, int rank, int world_size,
                              const std::string& fingerprint, absl::Duration timeout);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TCP_STORE_H_
