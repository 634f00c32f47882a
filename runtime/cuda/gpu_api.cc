#include "runtime/cuda/gpu_api.h"

#include "absl/strings/str_cat.h"

namespace overlap {

std::string CudaVersionString(int version) {
  return absl::StrCat("CUDA ", version / 1000, ".", (version % 1000) / 10);
}

std::string NcclVersionString(int version) {
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return absl::StrCat(version / 10000, ".", (version / 100) % 100, ".", version % 100);
}

}  // namespace overlap
