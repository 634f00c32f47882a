// The `overlap` command-line tool; see tools/cli.h.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tools/cli.h"

int main(int argc, char** argv) {
  // GNU OpenMP's pool (oneDNN's convolutions and the kernels' loops) spins after each
  // parallel region by default, on the cores OpenBLAS's threads want next: at 2 threads a
  // step ran up to twice as long as at 1 (the GPT of docs/benchmarks.md: 863 ms, against
  // 419 ms with passive waiting, 2026-12-02). libgomp reads OMP_WAIT_POLICY once, when it
  // is loaded, before main can set it: so the tool sets it and runs itself again (same pid,
  // same arguments). A user's own setting is kept; if the exec fails, the run goes on.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  return overlap::RunCli(args, stdout, stderr);
}
