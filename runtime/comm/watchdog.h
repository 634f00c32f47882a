// The watchdog of a multi-process job, one per rank, on its own thread and its own store
// connection (so that a long store wait on the main thread never delays it):
//   - heartbeats: every `heartbeat` it writes hb/<rank> (a counter) to the store; Explain()
//     turns a collective's failure into an error naming the ranks whose heartbeat stopped
//     (a dead rank: SIGKILL, a crash) — Gloo itself names only a socket address;
//   - the abort key: a rank that fails writes `abort` (its reason) to the store; every
//     watchdog polls it and, seeing another rank's reason, aborts its communicator;
//   - deadlines: an operation still unfinished `timeout` after it was issued is reported
//     with the last operations issued (sequence number, op, bytes, state), the abort key
//     is set and the communicator aborted.
// Gloo cannot interrupt an operation already on the network, so after an abort (its own
// deadline or another rank's key) the watchdog gives the main thread `grace` to end with
// its own error and then ends the process (exit code 3) with the reason on stderr — as
// PyTorch's NCCL watchdog tears a process down rather than let it hang.
#ifndef OVERLAP_RUNTIME_COMM_WATCHDOG_H_
#define OVERLAP_RUNTIME_COMM_WATCHDOG_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/tcp_store.h"

namespace overlap {

struct WatchdogOptions {
  int rank = 0;
  int world_size = 1;
  absl::Duration heartbeat = absl::Milliseconds(200);
  absl::Duration timeout = absl::Seconds(60);  // an operation's deadline from its issue
  absl::Duration grace = absl::Seconds(3);     // after an abort, before ending the process
  // Ends the process after the grace period (tests of the watchdog itself turn it off).
  bool exit_process = true;
  // Who serves the store, for the message when it is lost.
  std::string store_server = "the launcher or rank 0";
  // This rank's host address (ListenAddress), published for the others' messages: a lost
  // rank on another host is named with its host. Empty or loopback: not named.
  std::string address;
};

class Watchdog {
 public:
  // `store` is the watchdog's own connection; `comm` must outlive the watchdog (or be
  // detached first). Starts the thread.
  Watchdog(std::shared_ptr<TcpStore> store, Communicator* comm, WatchdogOptions options);
  ~Watchdog();  // stops the thread (does not end the process)

  // `failure` (a collective's error) with the lost ranks named: "rank 2 is lost (no
  // heartbeat for 0.6 s): <failure>", "rank 2 is lost (on 10.0.0.3; no heartbeat ...)" for
  // a rank that published a host address other than loopback, or with "no rank is lost" when every
  // heartbeat advances (a silent rank, a timeout). A rank is lost when its heartbeat stopped and it
  // did not say it was ending on an error of its own (failed/<rank>, which this call writes
  // first for this rank). Also publishes the result as the abort key. Blocks up to three
  // heartbeats.
  absl::Status Explain(const absl::Status& failure);
  // Publishes `reason` as the abort key (first writer wins in effect: readers take the first
  // they see).
  void PublishAbort(const std::string& reason);
  // Whether the watchdog has aborted the communicator, and why.
  bool aborted() const { return aborted_.load(); }
  std::string reason() const;
  // The last operations issued, one line each ("allgather #12 (...): done in 3 ms").
  std::string RecentOperations() const;

 private:
  void Loop();
  void AbortAll(const std::string& reason);

  std::shared_ptr<TcpStore> store_;
  Communicator* comm_;
  WatchdogOptions options_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::string reason_;
  absl::Time abort_time_ = absl::InfiniteFuture();
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_COMM_WATCHDOG_H_
