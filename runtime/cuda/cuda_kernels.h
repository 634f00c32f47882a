// The CUDA backend's kernels: a KernelRegistry whose kernels take and return tensors on a
// CudaDevice, running on its compute stream.
//
//   - view ops: the CPU registry's own (they only describe views; a view that must copy
//     does so with the device's copy kernel);
//   - aten.mm and aten.addmm: cuBLAS (GpuApi::Gemm), transposed operands read in place;
//   - the elementwise family (add, mul, div, pow, rsqrt, relu, silu, gelu and their
//     backwards): one device kernel over elementwise_ops.h's formulas, the CPU kernels'
//     own, with broadcasting by strides; zeros_like / new_zeros: device allocations;
//   - the reduction family (sum, mean, softmax, log-softmax and their backwards): one
//     device kernel over reduction_ops.h's formulas (one thread per reduced column, double
//     accumulation);
//   - convolution and its backward: cuDNN (GpuApi::Convolution), the bias through the
//     elementwise kernel, its gradient through the reduction kernel; batch norm and its
//     backward: cuDNN (GpuApi::BatchNorm) with weight and bias in training, the nn kernel
//     otherwise (no weight, evaluation-mode backward);
//   - the nn family (layer norm, max pooling with indices, the NLL and MSE losses,
//     embedding and its backward, index_select, index_add, attention's softmax rows): one device
//     kernel over nn_ops.h's formulas, the CPU kernels' own, one thread per row / column / channel
//     / plane (no atomics: deterministic); a bad index is recorded on the device and reported at
//     the next host wait (CudaDevice::ErrorWord);
//   - attention and its backward: cuBLAS strided-batched products per run of heads sharing
//     a key / value head, the nn kernel's softmax rows between (exact: the score matrix is
//     materialised, as on the CPU);
//   - cat and slice_backward: the CPU kernels themselves, whose copies (CopyInto) are the
//     device's copy kernel;
//   - the rest (arange, topk, argsort, scatter) and the cases the device
//   kernels do not take (integer division, a 0-d
//     operand of another dtype, 16-bit or integer inputs, arguments the CPU kernel refuses):
//     the CPU kernel on host copies of its inputs, its results copied back (correct by
//     construction, and slow: the host waits for the compute stream at each such node).
// A device kernel reads its op's arguments with the CPU kernel's reader (runtime/kernels/
// op_args.h, conv_args.h): the same meaning, the same errors. Which kernel an op gets is
// stated once, at its registration, and visible: CudaKernelKind.
#ifndef OVERLAP_RUNTIME_CUDA_CUDA_KERNELS_H_
#define OVERLAP_RUNTIME_CUDA_CUDA_KERNELS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/kernels/kernel.h"

namespace overlap {

// The registry for `device` (which must outlive it). O(number of ops).
KernelRegistry CudaKernels(CudaDevice& device);

// The kind CudaKernels registers `target` with (KernelRegistry::KindOf): "view", "cublas",
// "cudnn", "elementwise", "reduction", "nn", "allocation", "copy" or "host" (the CPU kernel
// through host copies); "" for a target it has no kernel for. A device kind may still send
// a case its kernel does not take (a dtype, a layout) through the host. The registrations
// are built once without a device on the first call; O(1) expected after.
std::string CudaKernelKind(absl::string_view target);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_CUDA_KERNELS_H_
