#include "runtime/kernels/op_args.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "graph/type_promotion.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/nn_ops.h"

namespace overlap {

using kernels::CheckDType;
using kernels::CheckIndexTensor;
using kernels::CheckSame;
using kernels::Prod;
using kernels::WrapDim;

namespace {

absl::Status CheckMatrices(const KernelCall& c, const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0] || a.dtype() != b.dtype()) {
    return c.Error(absl::StrCat("cannot multiply ", a.DebugString(), " by ", b.DebugString()));
  }
  return absl::OkStatus();
}

// Each present tensor of `per_channel` has `n` elements and `dtype`.
absl::Status CheckPerChannel(const KernelCall& c,
                             std::initializer_list<const std::optional<Tensor>*> per_channel,
                             int64_t n, DType dtype, absl::string_view what) {
  for (const std::optional<Tensor>* t : per_channel) {
    if (*t && ((*t)->numel() != n || (*t)->dtype() != dtype)) {
      return c.Error(absl::StrCat((*t)->DebugString(), " does not match ", what));
    }
  }
  return absl::OkStatus();
}

// a.input viewed as [rows, cols]: cols the product of its dimensions from `axis` on.
template <typename Args>
void SplitRowsAt(Args& a, int64_t axis) {
  a.rows = Prod(a.input.shape(), 0, axis);
  a.cols = Prod(a.input.shape(), axis, a.input.dim());
}

// a.input [batch, channels, inner...] split into a.batch, a.channels and a.inner; errors for
// an input of fewer than 2 dimensions.
template <typename Args>
absl::Status SplitChannels(const KernelCall& c, Args& a) {
  const Tensor& x = a.input;
  if (x.dim() < 2) {
    return c.Error(absl::StrCat("batch norm input ", x.DebugString(), " has no channels"));
  }
  a.batch = x.shape()[0];
  a.channels = x.shape()[1];
  a.inner = Prod(x.shape(), 2, x.dim());
  return absl::OkStatus();
}

// A loss's tensors: grad_output (a backward's only), self and target, in that order.
template <typename Args>
absl::Status ReadLossTensors(KernelCall& c, bool backward, Args& a) {
  if (backward) {
    OVERLAP_ASSIGN_OR_RETURN(a.grad_output, c.TensorArg("grad_output"));
  }
  OVERLAP_ASSIGN_OR_RETURN(a.self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(a.target, c.TensorArg("target"));
  return absl::OkStatus();
}

// A loss backward's grad_output against the reduction: one element for mean and sum; for
// none, `fits_none` (the caller's per-element check).
absl::Status CheckLossGrad(const KernelCall& c, const Tensor& grad_output, int64_t reduction,
                           bool fits_none) {
  if (reduction == kReductionNone ? !fits_none : grad_output.numel() != 1) {
    return c.Error("grad_output does not match the reduction");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ReadReductionArg(const KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t reduction, c.IntArg("reduction"));
  if (!IsAtenReduction(reduction)) {
    return c.Error(absl::StrCat("argument 'reduction' is ", reduction,
                                "; ATen's reductions are 0 (none), 1 (mean) and 2 (sum)"));
  }
  return reduction;
}

absl::StatusOr<MmArgs> ReadMmArgs(KernelCall& c) {
  MmArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(a.mat2, c.TensorArg("mat2"));
  OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a.self, a.mat2));
  return a;
}

absl::StatusOr<AddmmArgs> ReadAddmmArgs(KernelCall& c) {
  AddmmArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(a.mat1, c.TensorArg("mat1"));
  OVERLAP_ASSIGN_OR_RETURN(a.mat2, c.TensorArg("mat2"));
  OVERLAP_ASSIGN_OR_RETURN(a.beta, c.DoubleArg("beta"));
  OVERLAP_ASSIGN_OR_RETURN(a.alpha, c.DoubleArg("alpha"));
  OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a.mat1, a.mat2));
  const std::vector<int64_t> shape = {a.mat1.shape()[0], a.mat2.shape()[1]};
  absl::StatusOr<std::vector<int64_t>> bs = kernels::BroadcastShape(c, a.self.shape(), shape);
  if (!bs.ok() || *bs != shape || a.self.dtype() != a.mat1.dtype()) {
    return c.Error(absl::StrCat("self ", a.self.DebugString(), " does not broadcast to [",
                                absl::StrJoin(shape, ", "), "] of ", DTypeName(a.mat1.dtype())));
  }
  return a;
}

absl::StatusOr<SumArgs> ReadSumArgs(KernelCall& c, bool mean) {
  SumArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(
      a.dtype,
      kernels::ReductionDType(c, mean ? ReductionOp::kMean : ReductionOp::kSum, a.self.dtype()));
  const Value* dv = c.Arg("dim");
  std::vector<int64_t> dims;
  if (dv != nullptr && !dv->is_none()) {
    OVERLAP_ASSIGN_OR_RETURN(dims, c.IntListArg("dim"));
  }
  // sum.default and mean.default declare no keepdim: they keep no dimension.
  OVERLAP_ASSIGN_OR_RETURN(a.keepdim, c.BoolArg("keepdim", false));
  const int64_t rank = a.self.dim();
  a.reduced.assign(rank, dims.empty());
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(const int64_t w, WrapDim(c, d, rank));
    // As ATen: a dimension named twice (0 and -2 of a matrix alike) is refused.
    if (rank > 0 && a.reduced[w]) {
      return c.Error(absl::StrCat("argument 'dim': dimension ", d,
                                  " appears more than once in the list of dims"));
    }
    if (rank > 0) a.reduced[w] = true;
  }
  for (int64_t i = 0; i < rank; ++i) {
    a.keep_shape.push_back(a.reduced[i] ? 1 : a.self.shape()[i]);
    if (a.reduced[i]) {
      a.count *= a.self.shape()[i];
    } else {
      a.out_shape.push_back(a.self.shape()[i]);
    }
  }
  return a;
}

absl::StatusOr<SoftmaxArgs> ReadSoftmaxArgs(KernelCall& c, bool backward) {
  SoftmaxArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.x, c.TensorArg(backward ? "grad_output" : "self"));
  if (backward) {
    OVERLAP_ASSIGN_OR_RETURN(a.output, c.TensorArg("output"));
    OVERLAP_RETURN_IF_ERROR(CheckSame(c, a.x, a.output, "grad_output and output"));
  } else {
    OVERLAP_ASSIGN_OR_RETURN(a.half_to_float, c.BoolArg("half_to_float", false));
  }
  OVERLAP_ASSIGN_OR_RETURN(const int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(a.dim, WrapDim(c, dim, a.x.dim()));
  return a;
}

absl::StatusOr<LayerNormArgs> ReadLayerNormArgs(KernelCall& c) {
  LayerNormArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.input, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(a.normalized_shape, c.IntListArg("normalized_shape"));
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(a.bias, c.OptionalTensorArg("bias"));
  OVERLAP_ASSIGN_OR_RETURN(a.eps, c.DoubleArg("eps"));
  const std::vector<int64_t>& ns = a.normalized_shape;
  const int64_t axis = a.input.dim() - static_cast<int64_t>(ns.size());
  if (axis < 0 || !std::equal(ns.begin(), ns.end(), a.input.shape().begin() + axis)) {
    return c.Error(absl::StrCat("normalized_shape [", absl::StrJoin(ns, ", "),
                                "] is not the end of ", a.input.DebugString()));
  }
  SplitRowsAt(a, axis);
  OVERLAP_RETURN_IF_ERROR(
      CheckPerChannel(c, {&a.weight, &a.bias}, a.cols, a.input.dtype(), "normalized_shape"));
  return a;
}

absl::StatusOr<LayerNormBackwardArgs> ReadLayerNormBackwardArgs(KernelCall& c) {
  LayerNormBackwardArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.grad_out, c.TensorArg("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(a.input, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(a.normalized_shape, c.IntListArg("normalized_shape"));
  OVERLAP_ASSIGN_OR_RETURN(a.mean, c.TensorArg("mean"));
  OVERLAP_ASSIGN_OR_RETURN(a.rstd, c.TensorArg("rstd"));
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(a.output_mask, c.BoolListArg("output_mask", {true, true, true}));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, a.grad_out, a.input, "grad_out and input"));
  const int64_t axis = a.input.dim() - static_cast<int64_t>(a.normalized_shape.size());
  if (axis < 0 || a.output_mask.size() != 3) {
    return c.Error("bad normalized_shape or output_mask");
  }
  SplitRowsAt(a, axis);
  if (a.mean.numel() != a.rows || a.rstd.numel() != a.rows) {
    return c.Error("mean / rstd do not match input");
  }
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, a.mean, a.input.dtype(), "mean"));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, a.rstd, a.input.dtype(), "rstd"));
  OVERLAP_RETURN_IF_ERROR(
      CheckPerChannel(c, {&a.weight}, a.cols, a.input.dtype(), "normalized_shape"));
  return a;
}

absl::StatusOr<BatchNormForwardArgs> ReadBatchNormArgs(KernelCall& c) {
  BatchNormForwardArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.input, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(a.bias, c.OptionalTensorArg("bias"));
  OVERLAP_ASSIGN_OR_RETURN(a.running_mean, c.OptionalTensorArg("running_mean"));
  OVERLAP_ASSIGN_OR_RETURN(a.running_var, c.OptionalTensorArg("running_var"));
  OVERLAP_ASSIGN_OR_RETURN(a.training, c.BoolArg("training"));
  OVERLAP_ASSIGN_OR_RETURN(a.eps, c.DoubleArg("eps"));
  OVERLAP_RETURN_IF_ERROR(SplitChannels(c, a));
  const Tensor& x = a.input;
  if (!a.training && (!a.running_mean || !a.running_var)) {
    return c.Error("evaluation mode needs running statistics");
  }
  OVERLAP_RETURN_IF_ERROR(CheckPerChannel(c, {&a.weight, &a.bias, &a.running_mean, &a.running_var},
                                          a.channels, x.dtype(),
                                          absl::StrCat(a.channels, " channels")));
  return a;
}

absl::StatusOr<BatchNormBackwardArgs> ReadBatchNormBackwardArgs(KernelCall& c) {
  BatchNormBackwardArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.grad_out, c.TensorArg("grad_out"));
  OVERLAP_ASSIGN_OR_RETURN(a.input, c.TensorArg("input"));
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rm, c.OptionalTensorArg("running_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> rv, c.OptionalTensorArg("running_var"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> sm, c.OptionalTensorArg("save_mean"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> si, c.OptionalTensorArg("save_invstd"));
  OVERLAP_ASSIGN_OR_RETURN(a.training, c.BoolArg("train"));
  OVERLAP_ASSIGN_OR_RETURN(a.eps, c.DoubleArg("eps"));
  OVERLAP_ASSIGN_OR_RETURN(a.output_mask, c.BoolListArg("output_mask", {true, true, true}));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, a.grad_out, a.input, "grad_out and input"));
  OVERLAP_RETURN_IF_ERROR(SplitChannels(c, a));
  const Tensor& x = a.input;
  if (a.output_mask.size() != 3) return c.Error("output_mask should have 3 entries");
  const std::optional<Tensor>& mean = a.training ? sm : rm;
  const std::optional<Tensor>& var = a.training ? si : rv;
  if (!mean || !var || mean->numel() != a.channels || var->numel() != a.channels) {
    return c.Error(a.training ? "training needs save_mean and save_invstd per channel"
                              : "evaluation needs running_mean and running_var per channel");
  }
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, *mean, x.dtype(), "saved mean"));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, *var, x.dtype(), "saved invstd / variance"));
  OVERLAP_RETURN_IF_ERROR(CheckPerChannel(c, {&a.weight}, a.channels, x.dtype(), "the channels"));
  a.mean = *mean;
  a.var = *var;
  return a;
}

absl::StatusOr<NllLossArgs> ReadNllLossArgs(KernelCall& c, bool backward) {
  NllLossArgs a;
  OVERLAP_RETURN_IF_ERROR(ReadLossTensors(c, backward, a));
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.OptionalTensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(a.reduction, ReadReductionArg(c));
  OVERLAP_ASSIGN_OR_RETURN(a.ignore_index, c.IntArg("ignore_index"));
  if (backward) {
    OVERLAP_ASSIGN_OR_RETURN(a.total_weight, c.TensorArg("total_weight"));
  }
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, a.target, "target"));
  const Tensor& x = a.self;
  if (x.dim() < 1 || x.dim() > 2) return c.Error("self should be [N, C] or [C]");
  a.rows = x.dim() == 2 ? x.shape()[0] : 1;
  a.classes = x.shape().back();
  if (a.target.numel() != a.rows) return c.Error("target should have one class per row");
  OVERLAP_RETURN_IF_ERROR(
      CheckPerChannel(c, {&a.weight}, a.classes, x.dtype(), "one entry per class"));
  if (!backward) return a;
  OVERLAP_RETURN_IF_ERROR(
      CheckLossGrad(c, a.grad_output, a.reduction, a.grad_output.numel() == a.rows));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, a.grad_output, x.dtype(), "grad_output"));
  if (a.total_weight.numel() != 1) return c.Error("total_weight should have one element");
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, a.total_weight, x.dtype(), "total_weight"));
  return a;
}

absl::StatusOr<MseLossArgs> ReadMseLossArgs(KernelCall& c, bool backward) {
  MseLossArgs a;
  OVERLAP_RETURN_IF_ERROR(ReadLossTensors(c, backward, a));
  OVERLAP_ASSIGN_OR_RETURN(a.reduction, ReadReductionArg(c));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, a.self, a.target, "self and target"));
  if (!backward) return a;
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, a.grad_output, a.self.dtype(), "grad_output"));
  OVERLAP_RETURN_IF_ERROR(
      CheckLossGrad(c, a.grad_output, a.reduction, a.grad_output.shape() == a.self.shape()));
  return a;
}

absl::StatusOr<EmbeddingArgs> ReadEmbeddingArgs(KernelCall& c) {
  EmbeddingArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.weight, c.TensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(a.indices, c.TensorArg("indices"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, a.indices, "indices"));
  if (a.weight.dim() != 2) {
    return c.Error(absl::StrCat("weight should be 2-D, got ", a.weight.DebugString()));
  }
  return a;
}

absl::StatusOr<EmbeddingBackwardArgs> ReadEmbeddingBackwardArgs(KernelCall& c) {
  EmbeddingBackwardArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.grad_output, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(a.indices, c.TensorArg("indices"));
  OVERLAP_ASSIGN_OR_RETURN(a.num_weights, c.IntArg("num_weights"));
  OVERLAP_ASSIGN_OR_RETURN(a.padding_idx, c.IntArg("padding_idx"));
  OVERLAP_ASSIGN_OR_RETURN(bool by_freq, c.BoolArg("scale_grad_by_freq"));
  if (by_freq) return c.Error("scale_grad_by_freq is not supported");
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, a.indices, "indices"));
  if (a.num_weights < 0) return c.Error(absl::StrCat("num_weights ", a.num_weights, " < 0"));
  const Tensor& g = a.grad_output;
  a.dim = g.dim() == 0 ? 1 : g.shape().back();
  if (g.numel() != a.indices.numel() * a.dim) {
    return c.Error(absl::StrCat("grad ", g.DebugString(), " does not match indices ",
                                a.indices.DebugString()));
  }
  return a;
}

absl::StatusOr<IndexAlongArgs> ReadIndexSelectArgs(KernelCall& c) {
  IndexAlongArgs a;
  OVERLAP_ASSIGN_OR_RETURN(a.self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(const int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(a.index, c.TensorArg("index"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, a.index, "index"));
  if (a.index.dim() > 1) return c.Error("index should be 0-D or 1-D");
  if (a.self.dim() == 0 && a.index.numel() > 1) {
    return c.Error("index of a scalar has more than one value");
  }
  OVERLAP_ASSIGN_OR_RETURN(a.dim, WrapDim(c, dim, a.self.dim()));
  return a;
}

absl::StatusOr<IndexAlongArgs> ReadIndexAddArgs(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(IndexAlongArgs a, ReadIndexSelectArgs(c));
  OVERLAP_ASSIGN_OR_RETURN(a.source, c.TensorArg("source"));
  OVERLAP_ASSIGN_OR_RETURN(a.alpha, c.DoubleArg("alpha"));
  if (a.source.dtype() != a.self.dtype()) return c.Error("source and self differ in dtype");
  std::vector<int64_t> want = a.self.shape();
  if (!want.empty()) want[a.dim] = a.index.numel();
  if (a.source.shape() != want) {
    return c.Error(absl::StrCat("source ", a.source.DebugString(), " should have shape [",
                                absl::StrJoin(want, ", "), "]"));
  }
  return a;
}

}  // namespace overlap
