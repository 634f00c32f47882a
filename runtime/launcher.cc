#include "runtime/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "runtime/store_server.h"

extern char** environ;

namespace overlap {

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& o) {
  if (o.nproc < 1) return absl::InvalidArgumentError("--nproc must be >= 1");
  if (o.argv.empty()) return absl::InvalidArgumentError("no worker command");
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Serve("127.0.0.1", 0);
  if (!server.ok()) return server.status();
  const int port = (*server)->port();

  std::vector<pid_t> pids(o.nproc, -1);
  LaunchResult r;
  r.codes.assign(o.nproc, -1);
  r.killed_by_launcher.assign(o.nproc, false);
  for (int rank = 0; rank < o.nproc; ++rank) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    for (const std::string& e : o.env) env.push_back(e);
    env.push_back(absl::StrCat("RANK=", rank));
    env.push_back(absl::StrCat("LOCAL_RANK=", rank));
    env.push_back(absl::StrCat("WORLD_SIZE=", o.nproc));
    env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", o.nproc));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back(absl::StrCat("MASTER_PORT=", port));
    env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
    std::vector<char*> envp, argv;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o.argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    if (pid == 0) {
      execve(argv[0], argv.data(), envp.data());
      std::fprintf(stderr, "overlap: cannot run %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    pids[rank] = pid;
  }

  const absl::Time start = absl::Now();
  absl::Time kill_at =
      o.deadline == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + o.deadline;
  int running = o.nproc;
  std::vector<std::string> events;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int rank = -1;
      for (int k = 0; k < o.nproc; ++k) {
        if (pids[k] == pid) rank = k;
      }
      if (rank < 0) continue;
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
          r.exit_code = code;
          kill_at = std::min(kill_at, absl::Now() + o.grace);
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (absl::Now() > kill_at) {
      for (int k = 0; k < o.nproc; ++k) {
        if (pids[k] > 0 && !r.killed_by_launcher[k]) {
          kill(pids[k], SIGKILL);
          r.killed_by_launcher[k] = true;
        }
      }
      if (r.first_failed_rank < 0) {
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
  r.message = absl::StrJoin(events, "; ");
  return r;
}

}  // namespace overlap
