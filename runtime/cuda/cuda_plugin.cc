#include "runtime/cuda/cuda_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/core/companion_file.h"

namespace overlap {
namespace {

using Entry = GpuApi* (*)(uint64_t);

// `path` resolved once to an absolute one (a bare or relative name against the working
// directory, never the library search path dlopen would use for a name without a slash),
// if it names a readable regular file (a FIFO or a device would block or mislead dlopen).
// NotFound when nothing is there; FailedPrecondition naming the path otherwise.
absl::StatusOr<std::string> ResolvePlugin(const std::string& path, struct stat& st) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (stat(resolved, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA plugin ", path, " is not a regular file"));
  }
  if (access(resolved, R_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA plugin ", path, " is not readable: ", std::strerror(errno)));
  }
  return std::string(resolved);
}

// The entry of the first plugin found, loaded once; or why there is none.
absl::StatusOr<Entry> OpenPlugin() {
  std::vector<std::string> tried;
  for (const std::string& candidate : CudaPluginCandidates()) {
    struct stat checked {};
    absl::StatusOr<std::string> path = ResolvePlugin(candidate, checked);
    if (absl::IsNotFound(path.status())) {
      tried.push_back(candidate);
      continue;
    }
    if (!path.ok()) return path.status();
    // RTLD_LOCAL: the plugin's symbols (its own copy of Abseil among them) stay its own. The
    // absolute path loads exactly the file checked; a file swapped in between is refused.
    void* handle = dlopen(path->c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device cuda needs CUDA 13 and NCCL 2.28 (docs/runtime.md); loading ",
                       *path, " failed: ", dlerror()));
    }
    struct stat now {};
    if (stat(path->c_str(), &now) != 0 || now.st_dev != checked.st_dev ||
        now.st_ino != checked.st_ino) {
      dlclose(handle);
      return absl::FailedPreconditionError(
          absl::StrCat("the CUDA plugin ", *path, " changed while it was being loaded"));
    }
    void* entry = dlsym(handle, kCudaPluginEntry);
    if (entry == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(*path, " is not overlap's CUDA plugin: it has no ", kCudaPluginEntry));
    }
    return reinterpret_cast<Entry>(entry);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--device cuda needs the CUDA plugin ", kCudaPluginFile,
      " (built with the overlap binary; set OVERLAP_CUDA_PLUGIN to its path); not found at ",
      absl::StrJoin(tried, ", ")));
}

}  // namespace

std::vector<std::string> CudaPluginCandidates() {
  return CompanionFileCandidates("OVERLAP_CUDA_PLUGIN", kCudaPluginFile, "runtime/cuda");
}

absl::StatusOr<std::unique_ptr<GpuApi>> LoadCudaGpuApi() {
  // Opened once: dlopen is reference-counted, but the first error is the answer for the
  // process (the files do not change under it).
  static std::once_flag once;
  static absl::StatusOr<Entry>* entry = nullptr;
  std::call_once(once, [] { entry = new absl::StatusOr<Entry>(OpenPlugin()); });
  if (!entry->ok()) return entry->status();
  GpuApi* api = (**entry)(GpuApiFingerprint());
  if (api == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA plugin was built from another version of overlap (its GpuApi differs); "
        "use the ",
        kCudaPluginFile, " built with this binary"));
  }
  return std::unique_ptr<GpuApi>(api);
}

}  // namespace overlap
