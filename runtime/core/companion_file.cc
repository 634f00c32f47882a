#include "runtime/core/companion_file.h"

#include <limits.h>
#include <stdlib.h>

#include "absl/strings/str_cat.h"

namespace overlap {

std::vector<std::string> CompanionFileCandidates(const char* env_var, absl::string_view file,
                                                 absl::string_view runfiles_folder) {
  if (const char* set = std::getenv(env_var); set != nullptr && *set != '\0') return {set};
  std::vector<std::string> paths;
  char resolved[PATH_MAX];
  const std::string exe = realpath("/proc/self/exe", resolved) != nullptr ? resolved : "";
  if (!exe.empty()) paths.push_back(absl::StrCat(exe.substr(0, exe.rfind('/') + 1), file));
  const std::string in_runfiles = absl::StrCat("/overlap/", runfiles_folder, "/", file);
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(var); dir != nullptr && *dir != '\0') {
      paths.push_back(absl::StrCat(dir, in_runfiles));
    }
  }
  if (!exe.empty()) paths.push_back(absl::StrCat(exe, ".runfiles", in_runfiles));
  return paths;
}

}  // namespace overlap
