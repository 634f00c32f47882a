// liboverlap_cuda.so's one exported symbol (cuda_plugin.h; cuda_plugin.lds hides the rest,
// including the plugin's own copy of Abseil).
#include <cstdint>

#include "runtime/cuda/cuda_gpu_api.h"
#include "runtime/cuda/gpu_api.h"

extern "C" __attribute__((visibility("default"))) overlap::GpuApi* OverlapCudaGpuApi(
    uint64_t caller_fingerprint) {
  if (caller_fingerprint != overlap::GpuApiFingerprint()) return nullptr;
  return overlap::CudaGpuApi().release();
}
