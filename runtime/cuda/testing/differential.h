// The CPU-vs-CUDA differential check (testonly), shared by the emulated-device tests and the
// GPU check: one tiny model's forward and backward on a device's kernels against the CPU
// interpreter, in float64 (both sides compute_in_double: loss and gradients within 1e-9
// relative) and in float32 (the loss within 1e-5; each gradient's error against the CPU's
// float64 result at most four times the CPU's own float32 error plus 1e-6, since tiny
// batches through batch norm amplify rounding), and the peaks of graph values equal.
#ifndef OVERLAP_RUNTIME_CUDA_TESTING_DIFFERENTIAL_H_
#define OVERLAP_RUNTIME_CUDA_TESTING_DIFFERENTIAL_H_

#include <string>

#include "runtime/cuda/cuda_device.h"
#include "runtime/kernels/kernel.h"

namespace overlap {

// "" when `model` (a built-in, tiny preset) passes on `device` with `kernels`; otherwise
// what differs, one line per finding.
std::string CompareModelWithCpu(const std::string& model, CudaDevice& device,
                                const KernelRegistry& kernels);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_TESTING_DIFFERENTIAL_H_
