// overlap_compute: the whole `overlap` CLI (tools/cli.h), every command; what the `overlap`
// binary hands the commands that run kernels or communicate to (tools/compute_hand_off.h).
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tools/cli.h"

int main(int argc, char** argv) {
  // GNU OpenMP's workers (oneDNN's convolutions and the kernels' loops) spin for 300,000
  // rounds after each parallel region by default, on the cores OpenBLAS's threads want next;
  // sleeping at once (OMP_WAIT_POLICY=passive) makes the next short region wait for them.
  // 10,000 rounds serves both (2 threads, forward + backward, 2026-12-02: the GPT of
  // docs/benchmarks.md 836 ms by default, 389 ms at 10,000, 432 ms passive; mobilenet_v2
  // 33, 31 and 83 ms). libgomp reads its settings once, when it is loaded, before main can
  // set them: so the tool sets the spin count and runs itself again (same pid, same
  // arguments). A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept; if the exec fails,
  // the run goes on with libgomp's defaults.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv);
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  return overlap::RunCli(args, stdout, stderr);
}
