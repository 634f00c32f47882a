#include "runtime/testing/ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"

namespace overlap {

std::string FreshStoreDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  static int run = 0;
  const std::string dir =
      absl::StrCat(tmp ? tmp : "/tmp", "/ranks_", name, "_", getpid(), "_", run++);
  const int rc = std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str());
  (void)rc;
  return dir;
}

std::vector<int> RunRanks(int size, const std::function<int(int)>& body,
                          std::chrono::seconds deadline,
                          const std::function<void(const std::vector<int>&)>& started) {
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 99;
      try {
        code = body(r);
      } catch (...) {
        code = 98;
      }
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  if (started) started(std::vector<int>(pids.begin(), pids.end()));
  std::vector<int> codes(size, -1);
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (int left = size; left > 0;) {
    for (int r = 0; r < size; ++r) {
      int status = 0;
      if (codes[r] == -1 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > end) {
      for (int r = 0; r < size; ++r) {
        if (codes[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 200;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

}  // namespace overlap
