// Argument reading shared by every backend's kernels of an operator (the CPU's, the CUDA
// backend's device kernels): one reader per op or op family reads the node's arguments by
// name, validates them as ATen does, and returns a plain struct; a backend only decides
// whether it can run what the struct describes (dtypes, layouts), never what the arguments
// mean. Errors name the node (KernelCall::Error). conv_args.h does the same for convolution,
// pooling and attention.
//
//   OVERLAP_ASSIGN_OR_RETURN(AddmmArgs a, ReadAddmmArgs(c));
//   // out = a.beta * a.self + a.alpha * a.mat1 @ a.mat2 (self not read when beta is 0)
#ifndef OVERLAP_RUNTIME_KERNELS_OP_ARGS_H_
#define OVERLAP_RUNTIME_KERNELS_OP_ARGS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/kernel.h"

namespace overlap {

// mm(self [m, k], mat2 [k, n]) -> [m, n].
struct MmArgs {
  Tensor self, mat2;
};
// Errors unless both are 2-D of one dtype with matching inner dimensions. O(1).
absl::StatusOr<MmArgs> ReadMmArgs(KernelCall& c);

// addmm(self, mat1 [m, k], mat2 [k, n], *, beta, alpha) -> [m, n]:
// beta * self + alpha * mat1 @ mat2, `self` broadcast to [m, n]; with beta 0 `self` is not
// read (its NaN and inf do not propagate), as ATen.
struct AddmmArgs {
  Tensor self, mat1, mat2;
  double beta = 1, alpha = 1;
};
// ReadMmArgs' errors for mat1 and mat2; errors unless self broadcasts to [m, n] with their
// dtype. O(1).
absl::StatusOr<AddmmArgs> ReadAddmmArgs(KernelCall& c);

// sum / mean (dim_IntList, dim and default overloads) over the dimensions `reduced`.
struct SumArgs {
  Tensor self;
  std::vector<bool> reduced;  // per dimension of self
  bool keepdim = false;
  DType dtype = DType::kFloat32;  // the result's: the dtype keyword, else ReductionResultType's
  int64_t count = 1;              // elements summed into each result element
  std::vector<int64_t> keep_shape, out_shape;  // with reduced dimensions as 1, and without
};
// `dim` None, missing or empty: every dimension. Errors for a dimension out of range or
// named twice, a dtype keyword type promotion refuses. O(dims).
absl::StatusOr<SumArgs> ReadSumArgs(KernelCall& c, bool mean);

// _softmax / _log_softmax (x = self) and their backwards (x = grad_output, output the
// forward's result); dim wrapped into [0, max(1, x.dim())).
struct SoftmaxArgs {
  Tensor x;
  Tensor output;  // undefined for a forward
  int64_t dim = 0;
  bool half_to_float = false;  // forward only; 16-bit inputs reach the kernels as float32
};
// Errors for a dimension out of range; in a backward, grad_output and output of different
// shapes or dtypes. O(1).
absl::StatusOr<SoftmaxArgs> ReadSoftmaxArgs(KernelCall& c, bool backward);

// native_layer_norm: input viewed as [rows, cols] with cols the product of
// normalized_shape (the input's last dimensions).
struct LayerNormArgs {
  Tensor input;
  std::vector<int64_t> normalized_shape;
  std::optional<Tensor> weight, bias;  // cols elements, input's dtype
  double eps = 0;
  int64_t rows = 0, cols = 0;
};
// Errors unless normalized_shape ends input and weight / bias match it. O(dims).
absl::StatusOr<LayerNormArgs> ReadLayerNormArgs(KernelCall& c);

// native_layer_norm_backward.
struct LayerNormBackwardArgs {
  Tensor grad_out, input, mean, rstd;  // mean / rstd: rows elements
  std::vector<int64_t> normalized_shape;
  std::optional<Tensor> weight;
  std::vector<bool> output_mask;  // three entries
  int64_t rows = 0, cols = 0;
};
// Errors for grad_out unlike input, a bad normalized_shape or mask, statistics or weight of
// another size or dtype. O(dims).
absl::StatusOr<LayerNormBackwardArgs> ReadLayerNormBackwardArgs(KernelCall& c);

// native_batch_norm: input [batch, channels, inner...], statistics per channel.
struct BatchNormForwardArgs {
  Tensor input;
  std::optional<Tensor> weight, bias, running_mean, running_var;  // channels, input's dtype
  bool training = false;
  double eps = 0;
  int64_t batch = 0, channels = 0, inner = 0;
};
// Errors for an input without channels, evaluation without running statistics, per-channel
// tensors of another size or dtype. O(dims).
absl::StatusOr<BatchNormForwardArgs> ReadBatchNormArgs(KernelCall& c);

// native_batch_norm_backward; mean / var are save_mean / save_invstd in training, else
// running_mean / running_var.
struct BatchNormBackwardArgs {
  Tensor grad_out, input, mean, var;
  std::optional<Tensor> weight;
  bool training = false;
  double eps = 0;
  std::vector<bool> output_mask;  // three entries
  int64_t batch = 0, channels = 0, inner = 0;
};
// Errors for grad_out unlike input, missing statistics, per-channel tensors of another size
// or dtype, a mask not of three. O(dims).
absl::StatusOr<BatchNormBackwardArgs> ReadBatchNormBackwardArgs(KernelCall& c);

// nll_loss_forward (self [rows, classes] or [classes]) and nll_loss_backward (grad_output
// and total_weight defined). reduction is ATen's enum (nn_ops.h); a target equal to
// ignore_index contributes nothing, whatever its value (in range or not), as ATen.
struct NllLossArgs {
  Tensor grad_output, self, target, total_weight;
  std::optional<Tensor> weight;  // classes elements, self's dtype
  int64_t reduction = 0, ignore_index = -100;
  int64_t rows = 0, classes = 0;
};
// Errors for a reduction outside 0..2, a non-index target, shapes or dtypes that do not fit.
// O(1).
absl::StatusOr<NllLossArgs> ReadNllLossArgs(KernelCall& c, bool backward);

// A loss's `reduction`: ATen's enum (nn_ops.h's kReductionNone, kReductionMean,
// kReductionSum); any other value is an error naming the node, as ATen refuses it. O(1).
absl::StatusOr<int64_t> ReadReductionArg(const KernelCall& c);

// mse_loss and mse_loss_backward (grad_output defined).
struct MseLossArgs {
  Tensor grad_output, self, target;
  int64_t reduction = 0;
};
// Errors for a reduction outside 0..2, self and target of different shapes or dtypes, a
// grad_output that does not fit the reduction. O(1).
absl::StatusOr<MseLossArgs> ReadMseLossArgs(KernelCall& c, bool backward);

// embedding(weight [rows, dim], indices).
struct EmbeddingArgs {
  Tensor weight, indices;
};
// Errors for a non-index indices tensor or a weight not 2-D. O(1); indices' values are the
// kernel's to check.
absl::StatusOr<EmbeddingArgs> ReadEmbeddingArgs(KernelCall& c);

// embedding_dense_backward -> [num_weights, dim].
struct EmbeddingBackwardArgs {
  Tensor grad_output, indices;
  int64_t num_weights = 0, padding_idx = -1, dim = 1;
};
// Errors for scale_grad_by_freq, a non-index indices tensor, a negative num_weights, a
// gradient that does not hold dim values per index. O(1).
absl::StatusOr<EmbeddingBackwardArgs> ReadEmbeddingBackwardArgs(KernelCall& c);

// index_select (source undefined) and index_add / index_add_ along dim (wrapped).
struct IndexAlongArgs {
  Tensor self, index, source;
  int64_t dim = 0;
  double alpha = 1;
};
// Errors for a non-index or multi-dimensional index, a dimension out of range, several
// indices of a scalar; for index_add a source of another dtype or not of self's shape with
// index.numel() at dim. O(dims).
absl::StatusOr<IndexAlongArgs> ReadIndexSelectArgs(KernelCall& c);
absl::StatusOr<IndexAlongArgs> ReadIndexAddArgs(KernelCall& c);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_OP_ARGS_H_
