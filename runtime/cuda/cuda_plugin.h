// The CUDA backend's real device, opened at run time. liboverlap_cuda.so holds CudaGpuApi()
// (cuda_gpu_api.h) and is the only file that needs the CUDA runtime, cuBLAS, cuDNN and NCCL;
// programs link this loader instead, so a CPU command neither loads those libraries (about
// 220 MiB and 90 ms at start) nor needs them installed. Only `--device cuda` opens the plugin,
// once per process, and keeps it for the process's life.
//
//   OVERLAP_ASSIGN_OR_RETURN(std::unique_ptr<GpuApi> api, LoadCudaGpuApi());
//
// Where the plugin is looked for, first found wins: $OVERLAP_CUDA_PLUGIN (a path, relative to
// the working directory when it has no leading slash, never searched for on the library path;
// it must be a regular file; nothing else is tried when it is set); liboverlap_cuda.so beside the
// running executable (an installed layout); runtime/cuda/liboverlap_cuda.so in the Bazel runfiles
// of the executable ($RUNFILES_DIR, $TEST_SRCDIR, <executable>.runfiles), where `bazel build` puts
// it for every binary that links this loader.
#ifndef OVERLAP_RUNTIME_CUDA_CUDA_PLUGIN_H_
#define OVERLAP_RUNTIME_CUDA_CUDA_PLUGIN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/gpu_api.h"

namespace overlap {

// The plugin's file name and the C symbol it exports: a function taking the caller's
// GpuApiFingerprint() and returning a new GpuApi (the caller owns it), or nullptr when the
// fingerprints differ.
inline constexpr char kCudaPluginFile[] = "liboverlap_cuda.so";
inline constexpr char kCudaPluginEntry[] = "OverlapCudaGpuApi";

// The paths tried, in order (see above). Reads the environment and /proc/self/exe; O(1).
std::vector<std::string> CudaPluginCandidates();

// A new real GpuApi from the plugin. FailedPrecondition naming the paths tried when there is
// none, the loader's message when it or the CUDA libraries it needs cannot be loaded (a
// machine without CUDA 13 and NCCL 2.28), and the mismatch when the plugin was built from
// another GpuApi. The first call costs the libraries' load (tens of ms); later calls reuse it.
absl::StatusOr<std::unique_ptr<GpuApi>> LoadCudaGpuApi();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_CUDA_PLUGIN_H_
