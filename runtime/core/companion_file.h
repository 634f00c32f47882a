// Where a program finds a file built and installed beside it (a plugin, a second program):
// a variable naming it, else beside the running executable (an installed layout, and
// bazel-bin), else in the executable's Bazel runfiles. The CUDA plugin loader
// (runtime/cuda/cuda_plugin.h) and the CLI's hand-off to overlap_compute
// (tools/compute_hand_off.h) look this way.
#ifndef OVERLAP_RUNTIME_CORE_COMPANION_FILE_H_
#define OVERLAP_RUNTIME_CORE_COMPANION_FILE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace overlap {

// The paths to try for `file`, first found wins: $`env_var` alone when it is set and not
// empty; <executable's folder>/<file>; $RUNFILES_DIR, $TEST_SRCDIR and
// <executable>.runfiles, each followed by "/overlap/<runfiles_folder>/<file>". Reads
// /proc/self/exe once; no file is opened.
std::vector<std::string> CompanionFileCandidates(const char* env_var, absl::string_view file,
                                                 absl::string_view runfiles_folder);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_COMPANION_FILE_H_
