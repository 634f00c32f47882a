#include "runtime/job/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "runtime/comm/store_server.h"

extern char** environ;

namespace overlap {
namespace {

// The signal the launcher was sent (0: none yet), for the supervising loop to pass on.
std::atomic<int> g_received{0};

void RecordSignal(int sig) { g_received.store(sig); }

// 32 bytes from the kernel's random source, as 64 hex digits.
absl::StatusOr<std::string> NewSecret() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

// The variables the launcher sets for each rank: inherited ones of these names are dropped
// (getenv takes the first of duplicates).
bool SetByLauncher(const char* entry) {
  static constexpr const char* kNames[] = {"RANK=",
                                           "LOCAL_RANK=",
                                           "WORLD_SIZE=",
                                           "LOCAL_WORLD_SIZE=",
                                           "MASTER_ADDR=",
                                           "MASTER_PORT=",
                                           "TORCHELASTIC_USE_AGENT_STORE=",
                                           "OVERLAP_STORE_SECRET=",
                                           "OVERLAP_STORE_SECRET_FILE=",
                                           "OVERLAP_STORE_PROTOCOL=",
                                           "OVERLAP_C10D_WIRE=",
                                           "TORCHELASTIC_RESTART_COUNT=",
                                           "OVERLAP_LAUNCHER_PID="};
  for (const char* name : kNames) {
    if (std::strncmp(entry, name, std::strlen(name)) == 0) return true;
  }
  return false;
}

}  // namespace

namespace {

// The signals the launcher passes on to its ranks.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};

// Rank `rank`'s environment: the launcher's own, less the variables it sets (getenv takes
// the first of duplicates), then o.env, then the rendezvous variables of torchrun's agent
// store, which here is overlap's own with the job's secret.
std::vector<std::string> RankEnvironment(const LaunchOptions& o, int rank, int port,
                                         const std::string& secret) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!SetByLauncher(*e)) env.emplace_back(*e);
  }
  for (const std::string& e : o.env) env.push_back(e);
  env.push_back(absl::StrCat("RANK=", rank));
  env.push_back(absl::StrCat("LOCAL_RANK=", rank));
  env.push_back(absl::StrCat("WORLD_SIZE=", o.nproc));
  env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", o.nproc));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(absl::StrCat("MASTER_PORT=", port));
  env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
  env.push_back("OVERLAP_STORE_PROTOCOL=overlap");  // the agent's store is overlap's own
  env.push_back(absl::StrCat("OVERLAP_STORE_SECRET=", secret));
  env.push_back(absl::StrCat("OVERLAP_LAUNCHER_PID=", getpid()));
  return env;
}

// Starts one rank: `o.argv` with `env`, dying with the launcher (`launcher`'s pid).
absl::StatusOr<pid_t> StartRank(const LaunchOptions& o, std::vector<std::string> env,
                                pid_t launcher) {
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Die with the launcher, even a SIGKILLed one; and if it is already gone, now.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(128 + SIGTERM);
    // The launcher's own handlers are not the rank's.
    for (int sig : kForwarded) signal(sig, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "overlap: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

// Waits for every rank: records each exit, passes the signals the launcher got on to the
// ranks still running, and ends them `o.grace` after the first failure or signal (or at the
// deadline). What happened goes to r.message, in order.
void Supervise(const LaunchOptions& o, std::vector<pid_t>& pids, LaunchResult& r) {
  const absl::Time start = absl::Now();
  absl::Time kill_at =
      o.deadline == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + o.deadline;
  int running = o.nproc;
  std::vector<std::string> events;
  std::vector<int> stopped_by(o.nproc, 0);  // the signal that stopped a rank, while stopped
  bool straggling = false;                  // a rank exited 0: the rest are on finish_grace
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid > 0) {
      int rank = -1;
      for (int k = 0; k < o.nproc; ++k) {
        if (pids[k] == pid) rank = k;
      }
      if (rank < 0) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        stopped_by[rank] = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
        continue;
      }
      pids[rank] = -1;
      --running;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                         : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      r.codes[rank] = code;
      if (code != 0) {
        events.push_back(WIFSIGNALED(status)
                             ? absl::StrCat("rank ", rank, " was killed by signal ",
                                            WTERMSIG(status),
                                            r.killed_by_launcher[rank] ? " (by the launcher)" : "")
                             : absl::StrCat("rank ", rank, " exited with code ", code));
        if (r.first_failed_rank < 0) {
          r.first_failed_rank = rank;
          // A deadline's 124 (or a passed-on signal's code) set before this exit stays.
          if (r.exit_code == 0) r.exit_code = code;
          kill_at = std::min(kill_at, absl::Now() + o.grace);
        }
      } else if (!straggling && running > 0) {
        // A finished job's ranks end together; one that does not (stopped, hung) must not
        // keep the launcher waiting without end.
        straggling = true;
        kill_at = std::min(kill_at, absl::Now() + o.finish_grace);
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (const int sig = g_received.exchange(0); sig != 0) {
      // Passed on to every rank still running, which then get `grace` to end.
      for (int k = 0; k < o.nproc; ++k) {
        if (pids[k] > 0) kill(pids[k], sig);
      }
      if (r.signal == 0) {
        r.signal = sig;
        events.push_back(absl::StrCat("the launcher got signal ", sig, " (", strsignal(sig),
                                      ") and passed it to the ranks"));
        if (r.first_failed_rank < 0) r.exit_code = 128 + sig;
        kill_at = std::min(kill_at, absl::Now() + o.grace);
      }
    }
    if (absl::Now() > kill_at) {
      for (int k = 0; k < o.nproc; ++k) {
        if (pids[k] > 0 && !r.killed_by_launcher[k]) {
          kill(pids[k], SIGKILL);
          r.killed_by_launcher[k] = true;
        }
      }
      std::vector<std::string> left;
      for (int k = 0; k < o.nproc; ++k) {
        if (pids[k] <= 0) continue;
        left.push_back(stopped_by[k] != 0 ? absl::StrCat(k, " (stopped by signal ", stopped_by[k],
                                                         ", ", strsignal(stopped_by[k]), ")")
                                          : absl::StrCat(k));
      }
      if (r.signal != 0) {
        events.push_back(absl::StrCat("the launcher killed the ranks still running ",
                                      absl::FormatDuration(o.grace), " after passing signal ",
                                      r.signal, " on"));
      } else if (r.first_failed_rank < 0 && straggling) {
        r.exit_code = 124;
        events.push_back(absl::StrCat("rank", left.size() > 1 ? "s " : " ",
                                      absl::StrJoin(left, ", "), " did not exit within ",
                                      absl::FormatDuration(o.finish_grace),
                                      " of a rank that finished cleanly; the launcher killed ",
                                      left.size() > 1 ? "them" : "it"));
      } else if (r.first_failed_rank < 0) {
        r.exit_code = 124;
        events.push_back(
            absl::StrCat("the job passed its deadline of ", absl::FormatDuration(o.deadline)));
      } else {
        events.push_back(absl::StrCat("the launcher ended the ranks still running ",
                                      absl::FormatDuration(o.grace), " after the first failure"));
      }
      kill_at = absl::InfiniteFuture();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A large job's every rank failing alike would make one line of hundreds of entries: the
  // first ones, and how many more.
  constexpr size_t kShown = 12;
  if (events.size() > kShown + 1) {
    const size_t more = events.size() - kShown;
    events.resize(kShown);
    events.push_back(absl::StrCat("and ", more, " more"));
  }
  r.message = absl::StrJoin(events, "; ");
}

}  // namespace

absl::Status CheckLocalPorts(int nproc, int streams) {
  std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f == nullptr) return absl::OkStatus();
  long lo = 0, hi = 0;
  const bool read = std::fscanf(f, "%ld %ld", &lo, &hi) == 2;
  std::fclose(f);
  if (!read || hi < lo) return absl::OkStatus();
  const int64_t range = hi - lo + 1;
  const auto needed = [&](int64_t n) { return 3 * int64_t{streams} * n * (n - 1) / 2; };
  if (needed(nproc) <= range * 9 / 10) return absl::OkStatus();
  int64_t fits = 1;
  while (needed(fits + 1) <= range * 9 / 10) ++fits;
  return absl::FailedPreconditionError(absl::StrCat(
      nproc, " ranks on this machine need about ", needed(nproc),
      " local TCP ports for Gloo's full mesh (a connection per pair of ranks, and a listening "
      "port per peer while connecting), more than 90% of this machine's ephemeral range ",
      lo, "-", hi, " (", range, " ports): run at most ", fits,
      " ranks here, or widen net.ipv4.ip_local_port_range"));
}

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& o) {
  if (o.nproc < 1) return absl::InvalidArgumentError("--nproc must be >= 1");
  if (o.argv.empty()) return absl::InvalidArgumentError("no worker command");
  // A rank that launches ranks again is a program that starts itself: a worker command that
  // is not the worker (a test binary, say, that runs `run` again) would fork without end.
  if (const char* parent = std::getenv("OVERLAP_LAUNCHER_PID"); parent != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("this process is a rank that a launcher (pid ", parent,
                     ") started, and a rank does ", "not launch ranks: is the worker command (",
                     o.argv[0], ") the overlap CLI? ", "OVERLAP_WORKER_BINARY names it"));
  }
  absl::StatusOr<std::string> secret = NewSecret();
  if (!secret.ok()) return secret.status();
  StoreServerOptions so;
  so.secret = *secret;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Serve("127.0.0.1", 0, so);
  if (!server.ok()) return server.status();
  const int port = (*server)->port();
  const pid_t launcher = getpid();

  // Signals sent to the launcher alone reach every rank (installed before the first fork,
  // so none is missed; restored when the job ends).
  g_received.store(0);
  struct sigaction previous[3];
  for (int k = 0; k < 3; ++k) {
    struct sigaction sa {};
    sa.sa_handler = &RecordSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(kForwarded[k], &sa, &previous[k]);
  }
  absl::Cleanup restore = [&] {
    for (int k = 0; k < 3; ++k) sigaction(kForwarded[k], &previous[k], nullptr);
  };

  std::vector<pid_t> pids(o.nproc, -1);
  LaunchResult r;
  r.codes.assign(o.nproc, -1);
  r.killed_by_launcher.assign(o.nproc, false);
  for (int rank = 0; rank < o.nproc; ++rank) {
    absl::StatusOr<pid_t> pid = StartRank(o, RankEnvironment(o, rank, port, *secret), launcher);
    if (!pid.ok()) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      return pid.status();
    }
    pids[rank] = *pid;
  }
  Supervise(o, pids, r);
  r.store_rejected = (*server)->rejected();
  if (r.store_rejected > 0) {
    absl::StrAppend(&r.message, r.message.empty() ? "" : "; ", "the store refused ",
                    r.store_rejected, " connection(s) without the job's secret or past its bounds");
  }
  return r;
}

}  // namespace overlap
