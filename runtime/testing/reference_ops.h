// Reference implementations of the ATen ops that docs/ops.md lists: plain loops in double
// precision, written straight from PyTorch's definitions, slow and meant to be obviously right.
// They are a test oracle for the executor's kernels, and nothing else uses them.
//
// Conventions for every function here:
// - A RefTensor is row-major and contiguous; integer values (indices, targets) are stored as
//   doubles and must be integral where an index is expected.
// - Dimensions may be negative and are wrapped as PyTorch wraps them (a 0-d tensor accepts
//   dim 0 and -1 and acts as a tensor of size 1 along it).
// - Optional tensors are pointers that may be nullptr; gradients that a mask leaves out are
//   std::nullopt.
// - Invalid arguments (shapes that do not fit, an index out of range, an unknown string) are
//   programming errors: the function prints what is wrong to stderr and aborts.
// Each function is O(number of elements it reads and writes) unless its comment says more.
#ifndef OVERLAP_RUNTIME_TESTING_REFERENCE_OPS_H_
#define OVERLAP_RUNTIME_TESTING_REFERENCE_OPS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace overlap::ref {

struct RefTensor {
  std::vector<int64_t> shape;  // row-major, contiguous; {} is a 0-d tensor of one element
  std::vector<double> data;    // Numel(shape) elements
};

// The product of shape's sizes (1 for {}); aborts on a negative size.
int64_t Numel(const std::vector<int64_t>& shape);
// A tensor of `shape` holding `data`; aborts unless data.size() == Numel(shape).
RefTensor Make(std::vector<int64_t> shape, std::vector<double> data);

// ---- Forward ops ------------------------------------------------------------------------

// aten.mm.default: a [n, k] times b [k, m] -> [n, m].
RefTensor Mm(const RefTensor& a, const RefTensor& b);
// aten.addmm.default with beta = alpha = 1: bias (broadcast to [n, m]) + mat1 [n, k] @ mat2.
RefTensor Addmm(const RefTensor& bias, const RefTensor& mat1, const RefTensor& mat2);
// aten.embedding.default: rows of weight [V, D] at indices (any shape, in [0, V)) -> idx + [D].
RefTensor Embedding(const RefTensor& weight, const RefTensor& indices);
// aten.arange.default: [end] holding 0, 1, ..., end - 1 (end >= 0).
RefTensor Arange(int64_t end);
// aten.native_layer_norm.default -> {out, mean, rstd}; rstd = 1 / sqrt(biased var + eps).
std::vector<RefTensor> NativeLayerNorm(const RefTensor& input,
                                       const std::vector<int64_t>& normalized_shape,
                                       const RefTensor* weight, const RefTensor* bias, double eps);
// aten.pow.Tensor_Scalar: std::pow(x, exponent) elementwise.
RefTensor PowTensorScalar(const RefTensor& x, double exponent);
// aten.mean.dim: mean over dims (empty dims = all dims, as PyTorch), keeping them if keepdim.
RefTensor MeanDim(const RefTensor& x, const std::vector<int64_t>& dims, bool keepdim);
// aten.add.Scalar: x + other elementwise.
RefTensor AddScalar(const RefTensor& x, double other);
// aten.rsqrt.default: 1 / sqrt(x) elementwise (inf at 0, NaN below 0).
RefTensor Rsqrt(const RefTensor& x);
// aten.mul.Tensor: a * b with NumPy broadcasting.
RefTensor MulTensor(const RefTensor& a, const RefTensor& b);
// aten.add.Tensor: a + alpha * b with NumPy broadcasting.
RefTensor AddTensor(const RefTensor& a, const RefTensor& b, double alpha = 1.0);
// aten.gelu.default: x * Phi(x) for "none", the tanh approximation for "tanh".
RefTensor Gelu(const RefTensor& x, const std::string& approximate = "none");
// aten.silu.default: x * sigmoid(x).
RefTensor Silu(const RefTensor& x);
// aten._softmax.default: exp(x - max) / sum(exp(x - max)) along dim.
RefTensor Softmax(const RefTensor& x, int64_t dim);
// aten._log_softmax.default: x - max - log(sum(exp(x - max))) along dim.
RefTensor LogSoftmax(const RefTensor& x, int64_t dim);
// aten.topk.default -> {values, indices}: k largest (smallest) along dim, ties by lower index.
std::vector<RefTensor> TopK(const RefTensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                            bool sorted = true);
// aten.argsort.default as a stable sort along dim; NaN sorts above every number.
RefTensor ArgSort(const RefTensor& x, int64_t dim = -1, bool descending = false);
// aten.index_select.default: slices of x at index (0-d or 1-D, in [0, size)) along dim.
RefTensor IndexSelect(const RefTensor& x, int64_t dim, const RefTensor& index);
// aten.index_add.default (functional): self with alpha * source[i] added at index[i] on dim.
RefTensor IndexAdd(const RefTensor& self, int64_t dim, const RefTensor& index,
                   const RefTensor& source, double alpha = 1.0);
// aten.convolution.default, 2-D, not transposed: [N,C,H,W] * [O,C/groups,kH,kW] (+ [O]).
RefTensor Convolution(const RefTensor& input, const RefTensor& weight, const RefTensor* bias,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                      const std::vector<int64_t>& dilation, int64_t groups);
// aten.native_batch_norm.default -> {out, save_mean, save_invstd} ([C]; [0] unless training).
std::vector<RefTensor> NativeBatchNorm(const RefTensor& input, const RefTensor* weight,
                                       const RefTensor* bias, bool training, double eps,
                                       const RefTensor* running_mean = nullptr,
                                       const RefTensor* running_var = nullptr);
// aten.sigmoid.default: 1 / (1 + e^-x); aten.sigmoid_backward.default: g y (1 - y).
RefTensor SigmoidOf(const RefTensor& x);
RefTensor SigmoidBackward(const RefTensor& g, const RefTensor& y);
// aten.tanh.default: tanh(x); aten.tanh_backward.default: g (1 - y^2).
RefTensor TanhOf(const RefTensor& x);
RefTensor TanhBackward(const RefTensor& g, const RefTensor& y);
// aten.neg.default: -x.
RefTensor Neg(const RefTensor& x);
// aten.relu.default: max(x, 0), NaN kept (as clamp_min).
RefTensor Relu(const RefTensor& x);
// aten.hardtanh.default: x clamped to [lo, hi] (ReLU6 is [0, 6]), NaN kept (as clamp).
RefTensor Hardtanh(const RefTensor& x, double lo, double hi);
// aten.hardtanh_backward.default: g where lo < x < hi, else 0 (a NaN x passes g).
RefTensor HardtanhBackward(const RefTensor& g, const RefTensor& x, double lo, double hi);
// aten.max_pool2d_with_indices.default on [C, H, W] or [N, C, H, W] -> {out, flat h*W+w}.
std::vector<RefTensor> MaxPool2dWithIndices(const RefTensor& x,
                                            const std::vector<int64_t>& kernel_size,
                                            const std::vector<int64_t>& stride,
                                            const std::vector<int64_t>& padding,
                                            const std::vector<int64_t>& dilation, bool ceil_mode);
// aten.nll_loss_forward.default, self [N, C] or [C] -> {loss, total_weight}; reduction 0/1/2.
std::vector<RefTensor> NllLossForward(const RefTensor& self, const RefTensor& target,
                                      const RefTensor* weight, int64_t reduction,
                                      int64_t ignore_index);
// aten.mse_loss.default: (self - target)^2, same shapes, reduced by reduction 0 / 1 / 2.
RefTensor MseLoss(const RefTensor& self, const RefTensor& target, int64_t reduction);
// aten._scaled_dot_product_flash_attention.default on [B, H, S, D] -> {out, logsumexp [B,H,Sq]}.
std::vector<RefTensor> ScaledDotProductFlashAttention(const RefTensor& query, const RefTensor& key,
                                                      const RefTensor& value, bool is_causal,
                                                      std::optional<double> scale = std::nullopt);

// ---- Ops of backward graphs -------------------------------------------------------------

// aten.squeeze.dim: x without dim if its size is 1, else x unchanged.
RefTensor SqueezeDim(const RefTensor& x, int64_t dim);
// aten.sum.dim_IntList: sum over dims (empty dims = all dims, as PyTorch), kept if keepdim.
RefTensor SumDimIntList(const RefTensor& x, const std::vector<int64_t>& dims, bool keepdim);
// aten.div.Scalar: x / other elementwise.
RefTensor DivScalar(const RefTensor& x, double other);
// aten.mul.Scalar: x * other elementwise.
RefTensor MulScalar(const RefTensor& x, double other);
// aten.cat.default: tensors joined along dim; 1-D empty tensors are skipped (legacy rule).
RefTensor Cat(const std::vector<RefTensor>& tensors, int64_t dim);
// aten.new_zeros.default: zeros of shape size.
RefTensor NewZeros(const std::vector<int64_t>& size);
// aten.scatter.src: self with out[..index[p]..] = src[p] along dim for every p of index.
RefTensor ScatterSrc(const RefTensor& self, int64_t dim, const RefTensor& index,
                     const RefTensor& src);
// aten.slice_backward.default: zeros of input_sizes with g written at [start:end:step] on dim.
RefTensor SliceBackward(const RefTensor& g, const std::vector<int64_t>& input_sizes, int64_t dim,
                        int64_t start, int64_t end, int64_t step);
// aten.threshold_backward.default: 0 where y <= threshold, else g (broadcasting).
RefTensor ThresholdBackward(const RefTensor& g, const RefTensor& y, double threshold);
// aten.gelu_backward.default: g * d gelu(x) / dx for approximate "none" or "tanh".
RefTensor GeluBackward(const RefTensor& g, const RefTensor& x,
                       const std::string& approximate = "none");
// aten.silu_backward.default: g * s * (1 + x * (1 - s)) with s = sigmoid(x).
RefTensor SiluBackward(const RefTensor& g, const RefTensor& x);
// aten._softmax_backward_data.default: y * (g - sum(g * y)) along dim, y the softmax.
RefTensor SoftmaxBackwardData(const RefTensor& g, const RefTensor& y, int64_t dim);
// aten._log_softmax_backward_data.default: g - exp(y) * sum(g) along dim, y the log-softmax.
RefTensor LogSoftmaxBackwardData(const RefTensor& g, const RefTensor& y, int64_t dim);
// aten.native_layer_norm_backward.default -> {d_input, d_weight, d_bias}, by output_mask.
std::vector<std::optional<RefTensor>> NativeLayerNormBackward(
    const RefTensor& g, const RefTensor& input, const std::vector<int64_t>& normalized_shape,
    const RefTensor& mean, const RefTensor& rstd, const RefTensor* weight, const RefTensor* bias,
    std::array<bool, 3> output_mask);
// aten.native_batch_norm_backward.default -> {d_input, d_weight, d_bias}, by output_mask.
std::vector<std::optional<RefTensor>> NativeBatchNormBackward(
    const RefTensor& g, const RefTensor& input, const RefTensor* weight, const RefTensor& save_mean,
    const RefTensor& save_invstd, bool training, double eps, std::array<bool, 3> output_mask,
    const RefTensor* running_mean = nullptr, const RefTensor* running_var = nullptr);
// aten.convolution_backward.default (2-D, not transposed) -> {d_input, d_weight, d_bias}.
std::vector<std::optional<RefTensor>> ConvolutionBackward(
    const RefTensor& g, const RefTensor& input, const RefTensor& weight, bool has_bias,
    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
    const std::vector<int64_t>& dilation, int64_t groups, std::array<bool, 3> output_mask);
// aten._scaled_dot_product_flash_attention_backward.default -> {d_query, d_key, d_value}.
std::vector<std::optional<RefTensor>> FlashAttentionBackward(
    const RefTensor& g, const RefTensor& query, const RefTensor& key, const RefTensor& value,
    const RefTensor& out, const RefTensor& logsumexp, bool is_causal,
    std::optional<double> scale = std::nullopt);
// aten.max_pool2d_with_indices_backward.default: g added into zeros of self's shape at indices.
RefTensor MaxPool2dWithIndicesBackward(const RefTensor& g, const RefTensor& self,
                                       const RefTensor& indices);
// aten.embedding_dense_backward.default: [num_weights, D], g summed by index, padding_idx 0'd.
RefTensor EmbeddingDenseBackward(const RefTensor& g, const RefTensor& indices, int64_t num_weights,
                                 int64_t padding_idx);
// aten.nll_loss_backward.default: d loss / d self, the shape of self.
RefTensor NllLossBackward(const RefTensor& g, const RefTensor& self, const RefTensor& target,
                          const RefTensor* weight, int64_t reduction, int64_t ignore_index,
                          const RefTensor& total_weight);
// aten.mse_loss_backward.default: (2 or 2 / numel) * (self - target) * g, the shape of self.
RefTensor MseLossBackward(const RefTensor& g, const RefTensor& self, const RefTensor& target,
                          int64_t reduction);

}  // namespace overlap::ref

#endif  // OVERLAP_RUNTIME_TESTING_REFERENCE_OPS_H_
