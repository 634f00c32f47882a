// The commands that run kernels or communicate (exec, train, run, worker, bench-comm, demo)
// live in a second program, overlap_compute, so that the `overlap` binary links no kernel
// or communication library (OpenMP, oneDNN, OpenBLAS, SLEEF, Gloo) and its other commands
// start without loading them (ggml and PyTorch load backends when used, likewise). The
// `overlap` binary knows those commands by name, synopsis and summary (for `overlap help`)
// and hands their command lines to overlap_compute unchanged, with one exec: the same pid,
// arguments and standard streams. libgomp reads its settings when it is loaded, so the
// hand-off sets GOMP_SPINCOUNT=10000 first (docs/runtime.md, "Threads"; a user's own
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept).
//
// Where overlap_compute is looked for, first found wins: $OVERLAP_COMPUTE_BINARY (a path;
// nothing else is tried when it is set); overlap_compute beside the running executable (an
// installed layout, and bazel-bin/tools); tools/overlap_compute in the executable's Bazel
// runfiles ($RUNFILES_DIR, $TEST_SRCDIR, <executable>.runfiles).
#ifndef OVERLAP_TOOLS_COMPUTE_HAND_OFF_H_
#define OVERLAP_TOOLS_COMPUTE_HAND_OFF_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "tools/command.h"

namespace overlap {

// The compute commands as `overlap` lists them: name, synopsis and summary as their own
// specs have them (cli_test compares the two), and a hand_off that runs overlap_compute.
absl::Span<const CommandSpec* const> ComputeCommandStubs();

// The paths tried for overlap_compute, in order (see above).
std::vector<std::string> ComputeBinaryCandidates();

// Replaces this process with overlap_compute running `args` (argv without the program
// name). Returns only when it cannot: exit 1 with a message naming the paths tried.
int HandOffToCompute(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

}  // namespace overlap

#endif  // OVERLAP_TOOLS_COMPUTE_HAND_OFF_H_
