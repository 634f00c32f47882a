// The local launcher (`overlap run`, like `torchrun --standalone`): serves the rendezvous
// store itself (so it outlives any rank), starts N copies of a worker command with the
// torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True), and supervises them: when one exits
// non-zero or is killed, the others get `grace` to end on their own (they report their
// errors, naming the lost rank) and are then killed (SIGKILL). When one exits 0, the
// others get `finish_grace` to exit too (a rank stopped by SIGSTOP or hung after the last
// step is killed and named, with the signal that stopped it). Never hangs: the whole job
// is bounded by `deadline` too.
//
// Workers die with their job: each child asks the kernel for SIGTERM when the launcher
// dies (a parent-death signal, so even a SIGKILLed launcher takes its ranks with it);
// SIGTERM, SIGINT and SIGHUP sent to the launcher alone are passed on to every rank, which
// then get `grace` before SIGKILL; the store's sockets are close-on-exec, so no rank holds
// the store open. The store is guarded by a fresh per-job secret (32 random bytes, hex),
// handed to the ranks as OVERLAP_STORE_SECRET (store_server.h); variables of the same
// names in the launcher's own environment are replaced, not duplicated.
//
//   LaunchOptions o; o.nproc = 4; o.argv = {"/proc/self/exe", "worker", "--model", "gpt2"};
//   absl::StatusOr<LaunchResult> r = Launch(o);   // r->exit_code: 0 when every rank succeeded
#ifndef OVERLAP_RUNTIME_JOB_LAUNCHER_H_
#define OVERLAP_RUNTIME_JOB_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace overlap {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> argv;             // the worker command; argv[0] is the executable's path
  absl::Duration grace = absl::Seconds(10);  // after the first failure
  // After the first rank that exits 0, how long the others may take to exit too (a stopped
  // or hung rank is killed then, and the job fails with exit code 124).
  absl::Duration finish_grace = absl::Seconds(60);
  absl::Duration deadline = absl::InfiniteDuration();
  // Extra environment for every rank ("NAME=value").
  std::vector<std::string> env;
};

struct LaunchResult {
  int exit_code = 0;  // 0, or the first failed rank's exit code (128 + signal when killed)
  int first_failed_rank = -1;
  std::vector<int> codes;  // per rank, as exit_code
  std::vector<bool> killed_by_launcher;
  std::string message;         // what happened, for the user ("rank 1 was killed by signal 9; ...")
  int signal = 0;              // the signal the launcher was sent and passed on, if any
  int64_t store_rejected = 0;  // store connections refused (no or a wrong secret)
};

// Whether `nproc` ranks on this machine can connect Gloo's full mesh (`streams` contexts
// each): every pair of ranks holds a TCP connection on loopback whose two ends take local
// ports from the kernel's ephemeral range, and every rank listens on a port per peer while
// connecting, so the mesh needs about 1.5 x streams x n(n-1) ports at its peak.
// FailedPrecondition naming the figures, the largest rank count that fits and the sysctl
// (net.ipv4.ip_local_port_range) when it exceeds 90% of the range; OK when the range cannot
// be read. Reads one /proc file.
absl::Status CheckLocalPorts(int nproc, int streams = 1);

// Starts and supervises the ranks. Errors: no store port, a fork failure; FailedPrecondition
// in a process that a launcher started (OVERLAP_LAUNCHER_PID, which each rank gets): a rank
// does not launch ranks, so a worker command that runs the launcher again cannot fork
// without end.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_JOB_LAUNCHER_H_
