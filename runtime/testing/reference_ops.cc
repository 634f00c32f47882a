#include "runtime/testing/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

// Semantic choices the header leaves to this file (each follows PyTorch's CPU kernels):
// - Reductions (mean.dim, sum.dim_IntList) over an empty dim list reduce every dimension.
// - topk and argsort order NaN above every number; ties keep the lower index first (stable
//   sorts); topk with sorted = false returns the same (sorted) order.
// - max_pool2d_with_indices scans each window row-major from its first in-bounds element
//   with max = -inf and takes an element when `value > max || isnan(value)`: the first of
//   equal maxima wins, the last NaN wins, and an all -inf window gives its first in-bounds
//   element. Output sizes follow ATen's pooling_output_shape, ceil_mode included (the last
//   window must start inside the input or the left padding). Padding above half the kernel
//   is refused, as ATen refuses it.
// - nll_loss_forward: a target equal to ignore_index adds 0 to the loss and 0 to
//   total_weight; reduction none on [N, C] returns total_weight 0; mean divides by
//   total_weight, so all-ignored targets give NaN (PyTorch 2.x).
// - native_batch_norm: with training the batch statistics are used and the running
//   statistics (optional) are neither read nor updated (this reference is functional);
//   without training the running statistics are required, and save_mean / save_invstd are
//   empty ([0]) as ATen's CPU kernel returns them.
// - The fused backwards compute a gradient whenever its mask entry is set, and the masked-out
//   ones are std::nullopt; a layer norm without weight / bias still gets d_weight / d_bias of
//   normalized_shape when asked (the gradient at an all-ones weight, an all-zeros bias).
// - convolution_backward's d_bias needs has_bias (a bias gradient without a bias is refused).
// - Flash attention: is_causal lets query i see keys j <= i (top-left aligned, as PyTorch's
//   is_causal); key and value have the query's batch and heads; value's head dim may differ.
//   The backward recomputes P = exp(scale * q.k - logsumexp) from the given logsumexp and
//   takes rowsum(g * out) from the given out, as the flash backward does.
// - mse_loss and its backward need self and target of one shape.
// - scatter.src writes in index's row-major order, so of duplicate targets the last wins
//   (PyTorch leaves that unspecified).

namespace overlap::ref {
namespace {

constexpr double kPi = 3.14159265358979323846;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "reference_ops: %s\n", what.c_str());
  std::abort();
}

void Require(bool ok, const char* what) {
  if (!ok) Fail(what);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t Rank(const RefTensor& t) { return static_cast<int64_t>(t.shape.size()); }

void CheckTensor(const RefTensor& t, const char* name) {
  if (static_cast<int64_t>(t.data.size()) != Numel(t.shape)) {
    Fail(std::string(name) + ": " + std::to_string(t.data.size()) + " values for shape " +
         ShapeString(t.shape));
  }
}

void CheckShape(const RefTensor& t, const std::vector<int64_t>& shape, const char* name) {
  CheckTensor(t, name);
  if (t.shape != shape) {
    Fail(std::string(name) + ": shape " + ShapeString(t.shape) + ", expected " +
         ShapeString(shape));
  }
}

// PyTorch's maybe_wrap_dim: a 0-d tensor takes dims -1 and 0.
int64_t WrapDim(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) {
    Fail("dim " + std::to_string(dim) + " out of range for rank " + std::to_string(rank));
  }
  return dim < 0 ? dim + r : dim;
}

// An index stored as a double: it must be integral.
int64_t ToIndex(double v) {
  Require(std::isfinite(v) && v == std::floor(v), "an index is not an integer");
  return static_cast<int64_t>(v);
}

// The sizes before, at and after a (wrapped) dim: element (o, j, i) is at
// (o * size + j) * inner + i. A 0-d tensor is one element along dim 0.
struct Split3 {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;
};

Split3 SplitAt(const std::vector<int64_t>& shape, int64_t dim) {
  Split3 s;
  if (shape.empty()) return s;
  for (int64_t i = 0; i < dim; ++i) s.outer *= shape[i];
  s.size = shape[dim];
  for (int64_t i = dim + 1; i < static_cast<int64_t>(shape.size()); ++i) s.inner *= shape[i];
  return s;
}

std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

int64_t Ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + idx[i];
  return flat;
}

RefTensor Zeros(const std::vector<int64_t>& shape) {
  return RefTensor{shape, std::vector<double>(Numel(shape), 0.0)};
}

template <typename F>
RefTensor Map(const RefTensor& x, F f, const char* name) {
  CheckTensor(x, name);
  RefTensor out = x;
  for (double& v : out.data) v = f(v);
  return out;
}

std::vector<int64_t> BroadcastShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                    const char* name) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    int64_t s = sa;
    if (sa == 1) {
      s = sb;
    } else if (sb != 1 && sb != sa) {
      Fail(std::string(name) + ": shapes " + ShapeString(a) + " and " + ShapeString(b) +
           " do not broadcast");
    }
    out[rank - 1 - i] = s;
  }
  return out;
}

// The flat position in a tensor of `shape` that broadcasting maps out_idx to (shape aligned
// to the right; a size-1 dimension reads its only element).
int64_t BroadcastSource(const std::vector<int64_t>& out_idx, const std::vector<int64_t>& shape) {
  const size_t offset = out_idx.size() - shape.size();
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    flat = flat * shape[i] + (shape[i] == 1 ? 0 : out_idx[offset + i]);
  }
  return flat;
}

// f(a, b) elementwise with NumPy broadcasting.
template <typename F>
RefTensor Broadcast2(const RefTensor& a, const RefTensor& b, F f, const char* name) {
  CheckTensor(a, name);
  CheckTensor(b, name);
  RefTensor out = Zeros(BroadcastShape(a.shape, b.shape, name));
  for (int64_t flat = 0; flat < Numel(out.shape); ++flat) {
    const std::vector<int64_t> idx = Unravel(flat, out.shape);
    out.data[flat] =
        f(a.data[BroadcastSource(idx, a.shape)], b.data[BroadcastSource(idx, b.shape)]);
  }
  return out;
}

// Which dimensions a reduction over `dims` covers; an empty list covers all of them.
std::vector<bool> ReducedDims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t dim : dims) {
    const int64_t d = WrapDim(dim, rank);
    if (rank == 0) continue;
    Require(!reduced[d] || dims.empty(), "a reduction dim appears twice");
    reduced[d] = true;
  }
  return reduced;
}

// The sum over dims, and in *count how many elements each output sums.
RefTensor SumOver(const RefTensor& x, const std::vector<int64_t>& dims, bool keepdim,
                  int64_t* count) {
  CheckTensor(x, "sum: x");
  const std::vector<bool> reduced = ReducedDims(dims, Rank(x));
  std::vector<int64_t> kept_shape = x.shape;
  std::vector<int64_t> out_shape;
  *count = 1;
  for (int64_t d = 0; d < Rank(x); ++d) {
    if (reduced[d]) {
      *count *= x.shape[d];
      kept_shape[d] = 1;
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.shape[d]);
    }
  }
  RefTensor out = Zeros(kept_shape);
  for (int64_t flat = 0; flat < Numel(x.shape); ++flat) {
    std::vector<int64_t> idx = Unravel(flat, x.shape);
    for (int64_t d = 0; d < Rank(x); ++d) {
      if (reduced[d]) idx[d] = 0;
    }
    out.data[Ravel(idx, kept_shape)] += x.data[flat];
  }
  out.shape = out_shape;
  return out;
}

// "none" -> false, "tanh" -> true.
bool TanhApproximation(const std::string& approximate) {
  if (approximate == "none") return false;
  if (approximate == "tanh") return true;
  Fail("gelu: approximate must be \"none\" or \"tanh\", not \"" + approximate + "\"");
}

double GeluValue(double x, bool tanh_approximation) {
  if (tanh_approximation) {
    const double k = std::sqrt(2.0 / kPi);
    const double u = k * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(u));
  }
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// d GeluValue / dx.
double GeluDerivative(double x, bool tanh_approximation) {
  if (tanh_approximation) {
    const double k = std::sqrt(2.0 / kPi);
    const double u = k * (x + 0.044715 * x * x * x);
    const double t = std::tanh(u);
    const double du_dx = k * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx;
  }
  const double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
  return cdf + x * pdf;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// a < b with NaN above every number (NaNs equal to each other), as PyTorch's sort orders.
bool LessNanLargest(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

// A 2-D op's int list of 1 or 2 entries as 2 entries.
std::pair<int64_t, int64_t> Expand2(const std::vector<int64_t>& v, const char* name) {
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return {v[0], v[1]};
  Fail(std::string(name) + " must have 1 or 2 entries, not " + std::to_string(v.size()));
}

// Rounds toward negative infinity (b > 0).
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

// The sizes of a 2-D convolution.
struct ConvGeometry {
  int64_t n, c, h, w;      // input
  int64_t o, cg, og;       // output channels, input / output channels per group
  int64_t kh, kw;          // kernel
  int64_t sh, sw, ph, pw;  // stride, padding
  int64_t dh, dw;          // dilation
  int64_t ho, wo;          // output
};

ConvGeometry ConvShape(const RefTensor& input, const RefTensor& weight,
                       const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                       const std::vector<int64_t>& dilation, int64_t groups) {
  CheckTensor(input, "convolution: input");
  CheckTensor(weight, "convolution: weight");
  Require(Rank(input) == 4, "convolution: input must be [N, C, H, W]");
  Require(Rank(weight) == 4, "convolution: weight must be [O, C / groups, kH, kW]");
  Require(groups >= 1, "convolution: groups must be >= 1");
  ConvGeometry g;
  g.n = input.shape[0];
  g.c = input.shape[1];
  g.h = input.shape[2];
  g.w = input.shape[3];
  g.o = weight.shape[0];
  g.kh = weight.shape[2];
  g.kw = weight.shape[3];
  Require(g.c % groups == 0 && g.o % groups == 0,
          "convolution: channels must be divisible by groups");
  g.cg = g.c / groups;
  g.og = g.o / groups;
  Require(weight.shape[1] == g.cg, "convolution: weight.shape[1] must be C / groups");
  std::tie(g.sh, g.sw) = Expand2(stride, "convolution: stride");
  std::tie(g.ph, g.pw) = Expand2(padding, "convolution: padding");
  std::tie(g.dh, g.dw) = Expand2(dilation, "convolution: dilation");
  Require(g.sh > 0 && g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0,
          "convolution: stride and dilation must be > 0, padding >= 0");
  const int64_t span_h = g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1;
  const int64_t span_w = g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1;
  Require(span_h >= 0 && span_w >= 0, "convolution: kernel larger than the padded input");
  g.ho = span_h / g.sh + 1;
  g.wo = span_w / g.sw + 1;
  return g;
}

// Flat offsets of [N, C, H, W]-shaped tensors.
int64_t At4(const std::vector<int64_t>& s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

// ATen's pooling_output_shape with equal padding on both sides.
int64_t PoolOutputSize(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                       bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = FloorDiv(span, stride) + 1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The sizes that batch norm works with: element (n, c, p) of input is at (n * C + c) * HW + p.
struct BatchNormGeometry {
  int64_t n, c, hw;
};

BatchNormGeometry BatchNormShape(const RefTensor& input, const RefTensor* weight,
                                 const RefTensor* bias) {
  CheckTensor(input, "batch_norm: input");
  Require(Rank(input) >= 2, "batch_norm: input must be [N, C, ...]");
  BatchNormGeometry b{input.shape[0], input.shape[1], 1};
  for (int64_t d = 2; d < Rank(input); ++d) b.hw *= input.shape[d];
  if (weight != nullptr) CheckShape(*weight, {b.c}, "batch_norm: weight");
  if (bias != nullptr) CheckShape(*bias, {b.c}, "batch_norm: bias");
  return b;
}

// The sizes that layer norm works with: m rows of n normalized elements.
struct LayerNormGeometry {
  int64_t axis, m, n;
};

LayerNormGeometry LayerNormShape(const RefTensor& input,
                                 const std::vector<int64_t>& normalized_shape,
                                 const RefTensor* weight, const RefTensor* bias) {
  CheckTensor(input, "layer_norm: input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  Require(k >= 1 && k <= Rank(input), "layer_norm: normalized_shape must have 1..rank entries");
  LayerNormGeometry l{Rank(input) - k, 1, Numel(normalized_shape)};
  for (int64_t d = 0; d < Rank(input); ++d) {
    if (d < l.axis) {
      l.m *= input.shape[d];
    } else if (input.shape[d] != normalized_shape[d - l.axis]) {
      Fail("layer_norm: normalized_shape " + ShapeString(normalized_shape) +
           " is not the end of the input's shape " + ShapeString(input.shape));
    }
  }
  if (weight != nullptr) CheckShape(*weight, normalized_shape, "layer_norm: weight");
  if (bias != nullptr) CheckShape(*bias, normalized_shape, "layer_norm: bias");
  return l;
}

// Geometry of attention: query [B, H, Sq, D], key [B, H, Sk, D], value [B, H, Sk, Dv].
struct AttentionGeometry {
  int64_t b, h, sq, sk, d, dv;
  double scale;
};

AttentionGeometry AttentionShape(const RefTensor& q, const RefTensor& k, const RefTensor& v,
                                 std::optional<double> scale) {
  CheckTensor(q, "attention: query");
  CheckTensor(k, "attention: key");
  CheckTensor(v, "attention: value");
  Require(Rank(q) == 4 && Rank(k) == 4 && Rank(v) == 4, "attention: tensors must be 4-D");
  AttentionGeometry a{q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3], 0};
  Require(k.shape[0] == a.b && v.shape[0] == a.b, "attention: batch sizes differ");
  Require(k.shape[1] == a.h && v.shape[1] == a.h, "attention: head counts differ");
  Require(v.shape[2] == a.sk, "attention: key and value lengths differ");
  Require(k.shape[3] == a.d, "attention: query and key head dims differ");
  a.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(a.d));
  return a;
}

// Reduction codes of ATen's losses.
void CheckReduction(int64_t reduction) {
  Require(reduction >= 0 && reduction <= 2, "reduction must be 0 (none), 1 (mean) or 2 (sum)");
}

// Shapes of nll_loss: self [N, C] with target [N], or self [C] with a 0-d target.
struct NllGeometry {
  int64_t n, c;
  bool batched;
};

NllGeometry NllShape(const RefTensor& self, const RefTensor& target, const RefTensor* weight,
                     int64_t reduction) {
  CheckTensor(self, "nll_loss: self");
  CheckReduction(reduction);
  Require(Rank(self) == 1 || Rank(self) == 2, "nll_loss: self must be [N, C] or [C]");
  NllGeometry n{Rank(self) == 2 ? self.shape[0] : 1, self.shape.back(), Rank(self) == 2};
  if (n.batched) {
    CheckShape(target, {n.n}, "nll_loss: target");
  } else {
    CheckShape(target, {}, "nll_loss: target");
  }
  if (weight != nullptr) CheckShape(*weight, {n.c}, "nll_loss: weight");
  return n;
}

}  // namespace

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) Fail("negative size in shape " + ShapeString(shape));
    n *= s;
  }
  return n;
}

RefTensor Make(std::vector<int64_t> shape, std::vector<double> data) {
  RefTensor t{std::move(shape), std::move(data)};
  CheckTensor(t, "Make");
  return t;
}

// ---- Forward ops ------------------------------------------------------------------------

RefTensor Mm(const RefTensor& a, const RefTensor& b) {
  CheckTensor(a, "mm: self");
  CheckTensor(b, "mm: mat2");
  Require(Rank(a) == 2 && Rank(b) == 2 && a.shape[1] == b.shape[0],
          "mm: needs self [n, k] and mat2 [k, m]");
  const int64_t n = a.shape[0];
  const int64_t k = a.shape[1];
  const int64_t m = b.shape[1];
  RefTensor out = Zeros({n, m});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) acc += a.data[i * k + p] * b.data[p * m + j];
      out.data[i * m + j] = acc;
    }
  }
  return out;
}

RefTensor Addmm(const RefTensor& bias, const RefTensor& mat1, const RefTensor& mat2) {
  const RefTensor product = Mm(mat1, mat2);
  CheckTensor(bias, "addmm: self");
  Require(BroadcastShape(bias.shape, product.shape, "addmm") == product.shape,
          "addmm: self does not broadcast to [n, m]");
  return Broadcast2(
      bias, product, [](double b, double p) { return b + p; }, "addmm");
}

RefTensor Embedding(const RefTensor& weight, const RefTensor& indices) {
  CheckTensor(weight, "embedding: weight");
  CheckTensor(indices, "embedding: indices");
  Require(Rank(weight) == 2, "embedding: weight must be [num_weights, D]");
  const int64_t v = weight.shape[0];
  const int64_t d = weight.shape[1];
  std::vector<int64_t> shape = indices.shape;
  shape.push_back(d);
  RefTensor out = Zeros(shape);
  for (int64_t i = 0; i < Numel(indices.shape); ++i) {
    const int64_t row = ToIndex(indices.data[i]);
    Require(row >= 0 && row < v, "embedding: index out of range");
    for (int64_t j = 0; j < d; ++j) out.data[i * d + j] = weight.data[row * d + j];
  }
  return out;
}

RefTensor Arange(int64_t end) {
  Require(end >= 0, "arange: end must be >= 0");
  RefTensor out = Zeros({end});
  for (int64_t i = 0; i < end; ++i) out.data[i] = static_cast<double>(i);
  return out;
}

std::vector<RefTensor> NativeLayerNorm(const RefTensor& input,
                                       const std::vector<int64_t>& normalized_shape,
                                       const RefTensor* weight, const RefTensor* bias, double eps) {
  const LayerNormGeometry l = LayerNormShape(input, normalized_shape, weight, bias);
  std::vector<int64_t> stats_shape(input.shape.begin(), input.shape.begin() + l.axis);
  stats_shape.resize(input.shape.size(), 1);
  RefTensor out = Zeros(input.shape);
  RefTensor mean = Zeros(stats_shape);
  RefTensor rstd = Zeros(stats_shape);
  for (int64_t r = 0; r < l.m; ++r) {
    const double* x = input.data.data() + r * l.n;
    double sum = 0.0;
    for (int64_t j = 0; j < l.n; ++j) sum += x[j];
    const double mu = sum / static_cast<double>(l.n);
    double sq = 0.0;
    for (int64_t j = 0; j < l.n; ++j) sq += (x[j] - mu) * (x[j] - mu);
    const double var = sq / static_cast<double>(l.n);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < l.n; ++j) {
      const double w = weight != nullptr ? weight->data[j] : 1.0;
      const double b = bias != nullptr ? bias->data[j] : 0.0;
      out.data[r * l.n + j] = (x[j] - mu) * rs * w + b;
    }
    mean.data[r] = mu;
    rstd.data[r] = rs;
  }
  return {out, mean, rstd};
}

RefTensor PowTensorScalar(const RefTensor& x, double exponent) {
  return Map(
      x, [exponent](double v) { return std::pow(v, exponent); }, "pow: self");
}

RefTensor MeanDim(const RefTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 0;
  RefTensor out = SumOver(x, dims, keepdim, &count);
  for (double& v : out.data) v /= static_cast<double>(count);
  return out;
}

RefTensor AddScalar(const RefTensor& x, double other) {
  return Map(
      x, [other](double v) { return v + other; }, "add.Scalar: self");
}

RefTensor Rsqrt(const RefTensor& x) {
  return Map(
      x, [](double v) { return 1.0 / std::sqrt(v); }, "rsqrt: self");
}

RefTensor MulTensor(const RefTensor& a, const RefTensor& b) {
  return Broadcast2(
      a, b, [](double u, double v) { return u * v; }, "mul.Tensor");
}

RefTensor AddTensor(const RefTensor& a, const RefTensor& b, double alpha) {
  return Broadcast2(
      a, b, [alpha](double u, double v) { return u + alpha * v; }, "add.Tensor");
}

RefTensor Gelu(const RefTensor& x, const std::string& approximate) {
  const bool tanh_approximation = TanhApproximation(approximate);
  return Map(
      x, [tanh_approximation](double v) { return GeluValue(v, tanh_approximation); }, "gelu: self");
}

RefTensor Silu(const RefTensor& x) {
  return Map(
      x, [](double v) { return v * Sigmoid(v); }, "silu: self");
}

RefTensor Softmax(const RefTensor& x, int64_t dim) {
  CheckTensor(x, "softmax: self");
  const Split3 s = SplitAt(x.shape, WrapDim(dim, Rank(x)));
  RefTensor out = x;
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t j) { return (o * s.size + j) * s.inner + i; };
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s.size; ++j) max = std::max(max, x.data[at(j)]);
      double sum = 0.0;
      for (int64_t j = 0; j < s.size; ++j) sum += std::exp(x.data[at(j)] - max);
      for (int64_t j = 0; j < s.size; ++j) out.data[at(j)] = std::exp(x.data[at(j)] - max) / sum;
    }
  }
  return out;
}

RefTensor LogSoftmax(const RefTensor& x, int64_t dim) {
  CheckTensor(x, "log_softmax: self");
  const Split3 s = SplitAt(x.shape, WrapDim(dim, Rank(x)));
  RefTensor out = x;
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t j) { return (o * s.size + j) * s.inner + i; };
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s.size; ++j) max = std::max(max, x.data[at(j)]);
      double sum = 0.0;
      for (int64_t j = 0; j < s.size; ++j) sum += std::exp(x.data[at(j)] - max);
      const double log_sum = std::log(sum);
      for (int64_t j = 0; j < s.size; ++j) out.data[at(j)] = x.data[at(j)] - max - log_sum;
    }
  }
  return out;
}

std::vector<RefTensor> TopK(const RefTensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  (void)sorted;  // Unsorted results come in the sorted order too.
  CheckTensor(x, "topk: self");
  const int64_t d = WrapDim(dim, Rank(x));
  const Split3 s = SplitAt(x.shape, d);
  Require(k >= 0 && k <= s.size, "topk: k out of range");
  Require(Rank(x) >= 1 || k == 1, "topk: k must be 1 for a 0-d tensor");
  std::vector<int64_t> shape = x.shape;
  if (!shape.empty()) shape[d] = k;
  RefTensor values = Zeros(shape);
  RefTensor indices = Zeros(shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t j) { return (o * s.size + j) * s.inner + i; };
      std::vector<int64_t> order(s.size);
      for (int64_t j = 0; j < s.size; ++j) order[j] = j;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return largest ? LessNanLargest(x.data[at(b)], x.data[at(a)])
                       : LessNanLargest(x.data[at(a)], x.data[at(b)]);
      });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t flat = (o * k + j) * s.inner + i;
        values.data[flat] = x.data[at(order[j])];
        indices.data[flat] = static_cast<double>(order[j]);
      }
    }
  }
  return {values, indices};
}

RefTensor ArgSort(const RefTensor& x, int64_t dim, bool descending) {
  CheckTensor(x, "argsort: self");
  const Split3 s = SplitAt(x.shape, WrapDim(dim, Rank(x)));
  RefTensor out = Zeros(x.shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t j) { return (o * s.size + j) * s.inner + i; };
      std::vector<int64_t> order(s.size);
      for (int64_t j = 0; j < s.size; ++j) order[j] = j;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return descending ? LessNanLargest(x.data[at(b)], x.data[at(a)])
                          : LessNanLargest(x.data[at(a)], x.data[at(b)]);
      });
      for (int64_t j = 0; j < s.size; ++j) out.data[at(j)] = static_cast<double>(order[j]);
    }
  }
  return out;
}

RefTensor IndexSelect(const RefTensor& x, int64_t dim, const RefTensor& index) {
  CheckTensor(x, "index_select: self");
  CheckTensor(index, "index_select: index");
  Require(Rank(index) <= 1, "index_select: index must be 0-d or 1-D");
  const int64_t d = WrapDim(dim, Rank(x));
  const Split3 s = SplitAt(x.shape, d);
  const int64_t len = Numel(index.shape);
  std::vector<int64_t> shape = x.shape;
  if (shape.empty()) {
    Require(len == 1, "index_select: a 0-d self takes one index");
  } else {
    shape[d] = len;
  }
  RefTensor out = Zeros(shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t src = ToIndex(index.data[j]);
      Require(src >= 0 && src < s.size, "index_select: index out of range");
      for (int64_t i = 0; i < s.inner; ++i) {
        out.data[(o * len + j) * s.inner + i] = x.data[(o * s.size + src) * s.inner + i];
      }
    }
  }
  return out;
}

RefTensor IndexAdd(const RefTensor& self, int64_t dim, const RefTensor& index,
                   const RefTensor& source, double alpha) {
  CheckTensor(self, "index_add: self");
  CheckTensor(index, "index_add: index");
  Require(Rank(index) <= 1, "index_add: index must be 0-d or 1-D");
  const int64_t d = WrapDim(dim, Rank(self));
  const Split3 s = SplitAt(self.shape, d);
  const int64_t len = Numel(index.shape);
  std::vector<int64_t> source_shape = self.shape;
  if (source_shape.empty()) {
    Require(len == 1, "index_add: a 0-d self takes one index");
  } else {
    source_shape[d] = len;
  }
  CheckShape(source, source_shape, "index_add: source");
  RefTensor out = self;
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t dst = ToIndex(index.data[j]);
      Require(dst >= 0 && dst < s.size, "index_add: index out of range");
      for (int64_t i = 0; i < s.inner; ++i) {
        out.data[(o * s.size + dst) * s.inner + i] +=
            alpha * source.data[(o * len + j) * s.inner + i];
      }
    }
  }
  return out;
}

RefTensor Convolution(const RefTensor& input, const RefTensor& weight, const RefTensor* bias,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                      const std::vector<int64_t>& dilation, int64_t groups) {
  const ConvGeometry g = ConvShape(input, weight, stride, padding, dilation, groups);
  if (bias != nullptr) CheckShape(*bias, {g.o}, "convolution: bias");
  RefTensor out = Zeros({g.n, g.o, g.ho, g.wo});
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t oc = 0; oc < g.o; ++oc) {
      const int64_t group = oc / g.og;
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          double acc = bias != nullptr ? bias->data[oc] : 0.0;
          for (int64_t ic = 0; ic < g.cg; ++ic) {
            const int64_t c = group * g.cg + ic;
            for (int64_t kh = 0; kh < g.kh; ++kh) {
              for (int64_t kw = 0; kw < g.kw; ++kw) {
                const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
                const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                acc += input.data[At4(input.shape, n, c, ih, iw)] *
                       weight.data[At4(weight.shape, oc, ic, kh, kw)];
              }
            }
          }
          out.data[At4(out.shape, n, oc, oh, ow)] = acc;
        }
      }
    }
  }
  return out;
}

std::vector<RefTensor> NativeBatchNorm(const RefTensor& input, const RefTensor* weight,
                                       const RefTensor* bias, bool training, double eps,
                                       const RefTensor* running_mean,
                                       const RefTensor* running_var) {
  const BatchNormGeometry b = BatchNormShape(input, weight, bias);
  const int64_t count = b.n * b.hw;
  RefTensor out = Zeros(input.shape);
  RefTensor save_mean = Zeros({training ? b.c : 0});
  RefTensor save_invstd = Zeros({training ? b.c : 0});
  if (!training) {
    Require(running_mean != nullptr && running_var != nullptr,
            "batch_norm: evaluation needs the running statistics");
    CheckShape(*running_mean, {b.c}, "batch_norm: running_mean");
    CheckShape(*running_var, {b.c}, "batch_norm: running_var");
  }
  for (int64_t c = 0; c < b.c; ++c) {
    auto at = [&](int64_t n, int64_t p) { return (n * b.c + c) * b.hw + p; };
    double mean = 0.0;
    double invstd = 0.0;
    if (training) {
      double sum = 0.0;
      for (int64_t n = 0; n < b.n; ++n) {
        for (int64_t p = 0; p < b.hw; ++p) sum += input.data[at(n, p)];
      }
      mean = sum / static_cast<double>(count);
      double sq = 0.0;
      for (int64_t n = 0; n < b.n; ++n) {
        for (int64_t p = 0; p < b.hw; ++p) {
          sq += (input.data[at(n, p)] - mean) * (input.data[at(n, p)] - mean);
        }
      }
      invstd = 1.0 / std::sqrt(sq / static_cast<double>(count) + eps);
      save_mean.data[c] = mean;
      save_invstd.data[c] = invstd;
    } else {
      mean = running_mean->data[c];
      invstd = 1.0 / std::sqrt(running_var->data[c] + eps);
    }
    const double w = weight != nullptr ? weight->data[c] : 1.0;
    const double bb = bias != nullptr ? bias->data[c] : 0.0;
    for (int64_t n = 0; n < b.n; ++n) {
      for (int64_t p = 0; p < b.hw; ++p) {
        out.data[at(n, p)] = (input.data[at(n, p)] - mean) * invstd * w + bb;
      }
    }
  }
  return {out, save_mean, save_invstd};
}

RefTensor SigmoidOf(const RefTensor& x) {
  return Map(
      x, [](double v) { return Sigmoid(v); }, "sigmoid: self");
}

RefTensor SigmoidBackward(const RefTensor& g, const RefTensor& y) {
  RefTensor out = g;
  for (size_t i = 0; i < out.data.size(); ++i) {
    out.data[i] = g.data[i] * y.data[i] * (1.0 - y.data[i]);
  }
  return out;
}

RefTensor TanhOf(const RefTensor& x) {
  return Map(
      x, [](double v) { return std::tanh(v); }, "tanh: self");
}

RefTensor TanhBackward(const RefTensor& g, const RefTensor& y) {
  RefTensor out = g;
  for (size_t i = 0; i < out.data.size(); ++i)
    out.data[i] = g.data[i] * (1.0 - y.data[i] * y.data[i]);
  return out;
}

RefTensor Neg(const RefTensor& x) {
  return Map(
      x, [](double v) { return -v; }, "neg: self");
}

RefTensor Relu(const RefTensor& x) {
  return Map(
      x, [](double v) { return std::isnan(v) || v > 0.0 ? v : 0.0; }, "relu: self");
}

RefTensor Hardtanh(const RefTensor& x, double lo, double hi) {
  return Map(
      x, [lo, hi](double v) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); },
      "hardtanh: self");
}

RefTensor HardtanhBackward(const RefTensor& g, const RefTensor& x, double lo, double hi) {
  return Broadcast2(
      g, x, [lo, hi](double gv, double xv) { return xv <= lo || xv >= hi ? 0.0 : gv; },
      "hardtanh_backward");
}

std::vector<RefTensor> MaxPool2dWithIndices(const RefTensor& x,
                                            const std::vector<int64_t>& kernel_size,
                                            const std::vector<int64_t>& stride,
                                            const std::vector<int64_t>& padding,
                                            const std::vector<int64_t>& dilation, bool ceil_mode) {
  CheckTensor(x, "max_pool2d: self");
  const int64_t r = Rank(x);
  Require(r == 3 || r == 4, "max_pool2d: self must be [C, H, W] or [N, C, H, W]");
  const int64_t h = x.shape[r - 2];
  const int64_t w = x.shape[r - 1];
  const int64_t planes = Numel(std::vector<int64_t>(x.shape.begin(), x.shape.end() - 2));
  const auto [kh, kw] = Expand2(kernel_size, "max_pool2d: kernel_size");
  const auto [sh, sw] =
      stride.empty() ? std::make_pair(kh, kw) : Expand2(stride, "max_pool2d: stride");
  const auto [ph, pw] = Expand2(padding, "max_pool2d: padding");
  const auto [dh, dw] = Expand2(dilation, "max_pool2d: dilation");
  Require(kh > 0 && kw > 0 && sh > 0 && sw > 0 && dh > 0 && dw > 0,
          "max_pool2d: kernel, stride and dilation must be > 0");
  Require(ph >= 0 && pw >= 0 && ph <= kh / 2 && pw <= kw / 2,
          "max_pool2d: padding must be in [0, kernel_size / 2]");
  const int64_t ho = PoolOutputSize(h, kh, ph, sh, dh, ceil_mode);
  const int64_t wo = PoolOutputSize(w, kw, pw, sw, dw, ceil_mode);
  Require(ho >= 1 && wo >= 1, "max_pool2d: output size is too small");
  std::vector<int64_t> shape = x.shape;
  shape[r - 2] = ho;
  shape[r - 1] = wo;
  RefTensor out = Zeros(shape);
  RefTensor indices = Zeros(shape);
  for (int64_t p = 0; p < planes; ++p) {
    const double* plane = x.data.data() + p * h * w;
    for (int64_t oh = 0; oh < ho; ++oh) {
      for (int64_t ow = 0; ow < wo; ++ow) {
        double max = -std::numeric_limits<double>::infinity();
        int64_t max_index = -1;
        for (int64_t i = 0; i < kh; ++i) {
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ih = oh * sh - ph + i * dh;
            const int64_t iw = ow * sw - pw + j * dw;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const double v = plane[ih * w + iw];
            // ATen starts maxindex at the first in-bounds element, with max = -inf.
            if (max_index < 0) max_index = ih * w + iw;
            if (v > max || std::isnan(v)) {
              max = v;
              max_index = ih * w + iw;
            }
          }
        }
        Require(max_index >= 0, "max_pool2d: a window holds no input element");
        out.data[(p * ho + oh) * wo + ow] = max;
        indices.data[(p * ho + oh) * wo + ow] = static_cast<double>(max_index);
      }
    }
  }
  return {out, indices};
}

std::vector<RefTensor> NllLossForward(const RefTensor& self, const RefTensor& target,
                                      const RefTensor* weight, int64_t reduction,
                                      int64_t ignore_index) {
  const NllGeometry g = NllShape(self, target, weight, reduction);
  std::vector<double> losses(g.n, 0.0);
  double total_weight = 0.0;
  for (int64_t i = 0; i < g.n; ++i) {
    const int64_t t = ToIndex(target.data[i]);
    if (t == ignore_index) continue;
    Require(t >= 0 && t < g.c, "nll_loss: target out of range");
    const double w = weight != nullptr ? weight->data[t] : 1.0;
    losses[i] = -w * self.data[i * g.c + t];
    total_weight += w;
  }
  if (reduction == 0 && g.batched) {
    return {Make({g.n}, losses), Make({}, {0.0})};
  }
  double loss = 0.0;
  for (double l : losses) loss += l;
  if (reduction == 1) loss /= total_weight;
  return {Make({}, {loss}), Make({}, {total_weight})};
}

RefTensor MseLoss(const RefTensor& self, const RefTensor& target, int64_t reduction) {
  CheckTensor(self, "mse_loss: self");
  CheckShape(target, self.shape, "mse_loss: target");
  CheckReduction(reduction);
  RefTensor out = Zeros(self.shape);
  for (size_t i = 0; i < self.data.size(); ++i) {
    out.data[i] = (self.data[i] - target.data[i]) * (self.data[i] - target.data[i]);
  }
  if (reduction == 0) return out;
  double sum = 0.0;
  for (double v : out.data) sum += v;
  if (reduction == 1) sum /= static_cast<double>(out.data.size());
  return Make({}, {sum});
}

std::vector<RefTensor> ScaledDotProductFlashAttention(const RefTensor& query, const RefTensor& key,
                                                      const RefTensor& value, bool is_causal,
                                                      std::optional<double> scale) {
  const AttentionGeometry a = AttentionShape(query, key, value, scale);
  RefTensor out = Zeros({a.b, a.h, a.sq, a.dv});
  RefTensor lse = Zeros({a.b, a.h, a.sq});
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int64_t bh = 0; bh < a.b * a.h; ++bh) {
    const double* q = query.data.data() + bh * a.sq * a.d;
    const double* k = key.data.data() + bh * a.sk * a.d;
    const double* v = value.data.data() + bh * a.sk * a.dv;
    double* o = out.data.data() + bh * a.sq * a.dv;
    for (int64_t i = 0; i < a.sq; ++i) {
      std::vector<double> scores(a.sk, neg_inf);
      double max = neg_inf;
      for (int64_t j = 0; j < a.sk; ++j) {
        if (is_causal && j > i) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < a.d; ++d) dot += q[i * a.d + d] * k[j * a.d + d];
        scores[j] = a.scale * dot;
        max = std::max(max, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < a.sk; ++j) {
        if (scores[j] != neg_inf) sum += std::exp(scores[j] - max);
      }
      const double row_lse = max == neg_inf ? neg_inf : max + std::log(sum);
      lse.data[bh * a.sq + i] = row_lse;
      for (int64_t j = 0; j < a.sk; ++j) {
        if (scores[j] == neg_inf) continue;
        const double p = std::exp(scores[j] - row_lse);
        for (int64_t d = 0; d < a.dv; ++d) o[i * a.dv + d] += p * v[j * a.dv + d];
      }
    }
  }
  return {out, lse};
}

// ---- Ops of backward graphs -------------------------------------------------------------

RefTensor SqueezeDim(const RefTensor& x, int64_t dim) {
  CheckTensor(x, "squeeze: self");
  const int64_t d = WrapDim(dim, Rank(x));
  RefTensor out = x;
  if (!out.shape.empty() && out.shape[d] == 1) out.shape.erase(out.shape.begin() + d);
  return out;
}

RefTensor SumDimIntList(const RefTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 0;
  return SumOver(x, dims, keepdim, &count);
}

RefTensor DivScalar(const RefTensor& x, double other) {
  return Map(
      x, [other](double v) { return v / other; }, "div.Scalar: self");
}

RefTensor MulScalar(const RefTensor& x, double other) {
  return Map(
      x, [other](double v) { return v * other; }, "mul.Scalar: self");
}

RefTensor Cat(const std::vector<RefTensor>& tensors, int64_t dim) {
  Require(!tensors.empty(), "cat: needs at least one tensor");
  std::vector<const RefTensor*> kept;
  for (const RefTensor& t : tensors) {
    CheckTensor(t, "cat: tensor");
    if (t.shape != std::vector<int64_t>{0}) kept.push_back(&t);  // legacy: skip 1-D empty
  }
  if (kept.empty()) return Zeros({0});
  const std::vector<int64_t>& first = kept[0]->shape;
  Require(!first.empty(), "cat: a 0-d tensor cannot be concatenated");
  const int64_t d = WrapDim(dim, static_cast<int64_t>(first.size()));
  std::vector<int64_t> shape = first;
  shape[d] = 0;
  for (const RefTensor* t : kept) {
    Require(t->shape.size() == first.size(), "cat: tensors have different ranks");
    for (size_t i = 0; i < first.size(); ++i) {
      if (static_cast<int64_t>(i) != d && t->shape[i] != first[i]) {
        Fail("cat: shapes " + ShapeString(first) + " and " + ShapeString(t->shape) +
             " differ outside dim " + std::to_string(d));
      }
    }
    shape[d] += t->shape[d];
  }
  RefTensor out = Zeros(shape);
  const Split3 s = SplitAt(shape, d);
  for (int64_t o = 0; o < s.outer; ++o) {
    int64_t offset = 0;  // position along dim
    for (const RefTensor* t : kept) {
      const int64_t len = t->shape[d];
      for (int64_t j = 0; j < len; ++j) {
        for (int64_t i = 0; i < s.inner; ++i) {
          out.data[(o * s.size + offset + j) * s.inner + i] = t->data[(o * len + j) * s.inner + i];
        }
      }
      offset += len;
    }
  }
  return out;
}

RefTensor NewZeros(const std::vector<int64_t>& size) { return Zeros(size); }

RefTensor ScatterSrc(const RefTensor& self, int64_t dim, const RefTensor& index,
                     const RefTensor& src) {
  CheckTensor(self, "scatter: self");
  CheckTensor(index, "scatter: index");
  CheckTensor(src, "scatter: src");
  const int64_t r = Rank(self);
  Require(Rank(index) == r && Rank(src) == r, "scatter: self, index and src need one rank");
  const int64_t d = WrapDim(dim, r);
  for (int64_t i = 0; i < r; ++i) {
    Require(index.shape[i] <= src.shape[i], "scatter: index larger than src");
    Require(i == d || index.shape[i] <= self.shape[i], "scatter: index larger than self");
  }
  const int64_t size = r == 0 ? 1 : self.shape[d];
  RefTensor out = self;
  for (int64_t flat = 0; flat < Numel(index.shape); ++flat) {
    std::vector<int64_t> idx = Unravel(flat, index.shape);
    const double value = src.data[Ravel(idx, src.shape)];
    const int64_t to = ToIndex(index.data[flat]);
    Require(to >= 0 && to < size, "scatter: index out of range");
    if (r > 0) idx[d] = to;
    out.data[Ravel(idx, self.shape)] = value;
  }
  return out;
}

RefTensor SliceBackward(const RefTensor& g, const std::vector<int64_t>& input_sizes, int64_t dim,
                        int64_t start, int64_t end, int64_t step) {
  Require(!input_sizes.empty(), "slice: a 0-d tensor cannot be sliced");
  Require(step >= 1, "slice: step must be >= 1");
  const int64_t d = WrapDim(dim, static_cast<int64_t>(input_sizes.size()));
  const int64_t size = input_sizes[d];
  // ATen's slice: wrap negative bounds once, then clamp to [0, size] with end >= start.
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  const int64_t len = (end - start + step - 1) / step;
  std::vector<int64_t> g_shape = input_sizes;
  g_shape[d] = len;
  CheckShape(g, g_shape, "slice_backward: grad_output");
  RefTensor out = Zeros(input_sizes);
  const Split3 s = SplitAt(input_sizes, d);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < len; ++j) {
      for (int64_t i = 0; i < s.inner; ++i) {
        out.data[(o * s.size + start + j * step) * s.inner + i] =
            g.data[(o * len + j) * s.inner + i];
      }
    }
  }
  return out;
}

RefTensor ThresholdBackward(const RefTensor& g, const RefTensor& y, double threshold) {
  return Broadcast2(
      g, y, [threshold](double gv, double yv) { return yv <= threshold ? 0.0 : gv; },
      "threshold_backward");
}

RefTensor GeluBackward(const RefTensor& g, const RefTensor& x, const std::string& approximate) {
  const bool tanh_approximation = TanhApproximation(approximate);
  return Broadcast2(
      g, x,
      [tanh_approximation](double gv, double xv) {
        return gv * GeluDerivative(xv, tanh_approximation);
      },
      "gelu_backward");
}

RefTensor SiluBackward(const RefTensor& g, const RefTensor& x) {
  return Broadcast2(
      g, x,
      [](double gv, double xv) {
        const double s = Sigmoid(xv);
        return gv * s * (1.0 + xv * (1.0 - s));
      },
      "silu_backward");
}

RefTensor SoftmaxBackwardData(const RefTensor& g, const RefTensor& y, int64_t dim) {
  CheckTensor(y, "softmax_backward: output");
  CheckShape(g, y.shape, "softmax_backward: grad_output");
  const Split3 s = SplitAt(y.shape, WrapDim(dim, Rank(y)));
  RefTensor out = Zeros(y.shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t j) { return (o * s.size + j) * s.inner + i; };
      double dot = 0.0;
      for (int64_t j = 0; j < s.size; ++j) dot += g.data[at(j)] * y.data[at(j)];
      for (int64_t j = 0; j < s.size; ++j) out.data[at(j)] = y.data[at(j)] * (g.data[at(j)] - dot);
    }
  }
  return out;
}

RefTensor LogSoftmaxBackwardData(const RefTensor& g, const RefTensor& y, int64_t dim) {
  CheckTensor(y, "log_softmax_backward: output");
  CheckShape(g, y.shape, "log_softmax_backward: grad_output");
  const Split3 s = SplitAt(y.shape, WrapDim(dim, Rank(y)));
  RefTensor out = Zeros(y.shape);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t j) { return (o * s.size + j) * s.inner + i; };
      double sum = 0.0;
      for (int64_t j = 0; j < s.size; ++j) sum += g.data[at(j)];
      for (int64_t j = 0; j < s.size; ++j) {
        out.data[at(j)] = g.data[at(j)] - std::exp(y.data[at(j)]) * sum;
      }
    }
  }
  return out;
}

std::vector<std::optional<RefTensor>> NativeLayerNormBackward(
    const RefTensor& g, const RefTensor& input, const std::vector<int64_t>& normalized_shape,
    const RefTensor& mean, const RefTensor& rstd, const RefTensor* weight, const RefTensor* bias,
    std::array<bool, 3> output_mask) {
  const LayerNormGeometry l = LayerNormShape(input, normalized_shape, weight, bias);
  CheckShape(g, input.shape, "layer_norm_backward: grad_out");
  CheckTensor(mean, "layer_norm_backward: mean");
  CheckTensor(rstd, "layer_norm_backward: rstd");
  Require(Numel(mean.shape) == l.m && Numel(rstd.shape) == l.m,
          "layer_norm_backward: mean and rstd need one value per normalized row");
  RefTensor d_input = Zeros(input.shape);
  RefTensor d_weight = Zeros(normalized_shape);
  RefTensor d_bias = Zeros(normalized_shape);
  const double n = static_cast<double>(l.n);
  for (int64_t r = 0; r < l.m; ++r) {
    const double mu = mean.data[r];
    const double rs = rstd.data[r];
    auto x_hat = [&](int64_t j) { return (input.data[r * l.n + j] - mu) * rs; };
    auto dy_hat = [&](int64_t j) {  // d loss / d x_hat
      return g.data[r * l.n + j] * (weight != nullptr ? weight->data[j] : 1.0);
    };
    double sum_dy_hat = 0.0;
    double sum_dy_hat_x_hat = 0.0;
    for (int64_t j = 0; j < l.n; ++j) {
      sum_dy_hat += dy_hat(j);
      sum_dy_hat_x_hat += dy_hat(j) * x_hat(j);
    }
    for (int64_t j = 0; j < l.n; ++j) {
      d_input.data[r * l.n + j] =
          rs * (dy_hat(j) - sum_dy_hat / n - x_hat(j) * sum_dy_hat_x_hat / n);
      d_weight.data[j] += g.data[r * l.n + j] * x_hat(j);
      d_bias.data[j] += g.data[r * l.n + j];
    }
  }
  std::vector<std::optional<RefTensor>> result(3);
  if (output_mask[0]) result[0] = d_input;
  if (output_mask[1]) result[1] = d_weight;
  if (output_mask[2]) result[2] = d_bias;
  return result;
}

std::vector<std::optional<RefTensor>> NativeBatchNormBackward(
    const RefTensor& g, const RefTensor& input, const RefTensor* weight, const RefTensor& save_mean,
    const RefTensor& save_invstd, bool training, double eps, std::array<bool, 3> output_mask,
    const RefTensor* running_mean, const RefTensor* running_var) {
  const BatchNormGeometry b = BatchNormShape(input, weight, nullptr);
  CheckShape(g, input.shape, "batch_norm_backward: grad_out");
  if (training) {
    CheckShape(save_mean, {b.c}, "batch_norm_backward: save_mean");
    CheckShape(save_invstd, {b.c}, "batch_norm_backward: save_invstd");
  } else {
    Require(running_mean != nullptr && running_var != nullptr,
            "batch_norm_backward: evaluation needs the running statistics");
    CheckShape(*running_mean, {b.c}, "batch_norm_backward: running_mean");
    CheckShape(*running_var, {b.c}, "batch_norm_backward: running_var");
  }
  const double count = static_cast<double>(b.n * b.hw);
  RefTensor d_input = Zeros(input.shape);
  RefTensor d_weight = Zeros({b.c});
  RefTensor d_bias = Zeros({b.c});
  for (int64_t c = 0; c < b.c; ++c) {
    auto at = [&](int64_t n, int64_t p) { return (n * b.c + c) * b.hw + p; };
    const double mean = training ? save_mean.data[c] : running_mean->data[c];
    const double invstd =
        training ? save_invstd.data[c] : 1.0 / std::sqrt(running_var->data[c] + eps);
    const double w = weight != nullptr ? weight->data[c] : 1.0;
    double sum_g = 0.0;     // sum of g
    double sum_g_xc = 0.0;  // sum of g * (x - mean)
    for (int64_t n = 0; n < b.n; ++n) {
      for (int64_t p = 0; p < b.hw; ++p) {
        sum_g += g.data[at(n, p)];
        sum_g_xc += g.data[at(n, p)] * (input.data[at(n, p)] - mean);
      }
    }
    for (int64_t n = 0; n < b.n; ++n) {
      for (int64_t p = 0; p < b.hw; ++p) {
        const double gv = g.data[at(n, p)];
        if (training) {
          // x_hat = (x - mean) * invstd; d x_hat = w g; the batch statistics depend on x.
          const double x_hat = (input.data[at(n, p)] - mean) * invstd;
          d_input.data[at(n, p)] =
              w * invstd * (gv - sum_g / count - x_hat * sum_g_xc * invstd / count);
        } else {
          d_input.data[at(n, p)] = w * invstd * gv;
        }
      }
    }
    d_weight.data[c] = sum_g_xc * invstd;
    d_bias.data[c] = sum_g;
  }
  std::vector<std::optional<RefTensor>> result(3);
  if (output_mask[0]) result[0] = d_input;
  if (output_mask[1]) result[1] = d_weight;
  if (output_mask[2]) result[2] = d_bias;
  return result;
}

std::vector<std::optional<RefTensor>> ConvolutionBackward(
    const RefTensor& g, const RefTensor& input, const RefTensor& weight, bool has_bias,
    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
    const std::vector<int64_t>& dilation, int64_t groups, std::array<bool, 3> output_mask) {
  const ConvGeometry c = ConvShape(input, weight, stride, padding, dilation, groups);
  CheckShape(g, {c.n, c.o, c.ho, c.wo}, "convolution_backward: grad_output");
  Require(has_bias || !output_mask[2], "convolution_backward: d_bias asked without a bias");
  RefTensor d_input = Zeros(input.shape);
  RefTensor d_weight = Zeros(weight.shape);
  RefTensor d_bias = Zeros({c.o});
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t oc = 0; oc < c.o; ++oc) {
      const int64_t group = oc / c.og;
      for (int64_t oh = 0; oh < c.ho; ++oh) {
        for (int64_t ow = 0; ow < c.wo; ++ow) {
          const double gv = g.data[At4(g.shape, n, oc, oh, ow)];
          d_bias.data[oc] += gv;
          for (int64_t ic = 0; ic < c.cg; ++ic) {
            const int64_t ch = group * c.cg + ic;
            for (int64_t kh = 0; kh < c.kh; ++kh) {
              for (int64_t kw = 0; kw < c.kw; ++kw) {
                const int64_t ih = oh * c.sh - c.ph + kh * c.dh;
                const int64_t iw = ow * c.sw - c.pw + kw * c.dw;
                if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
                const int64_t x_at = At4(input.shape, n, ch, ih, iw);
                const int64_t w_at = At4(weight.shape, oc, ic, kh, kw);
                d_input.data[x_at] += gv * weight.data[w_at];
                d_weight.data[w_at] += gv * input.data[x_at];
              }
            }
          }
        }
      }
    }
  }
  std::vector<std::optional<RefTensor>> result(3);
  if (output_mask[0]) result[0] = d_input;
  if (output_mask[1]) result[1] = d_weight;
  if (output_mask[2]) result[2] = d_bias;
  return result;
}

std::vector<std::optional<RefTensor>> FlashAttentionBackward(
    const RefTensor& g, const RefTensor& query, const RefTensor& key, const RefTensor& value,
    const RefTensor& out, const RefTensor& logsumexp, bool is_causal, std::optional<double> scale) {
  const AttentionGeometry a = AttentionShape(query, key, value, scale);
  CheckShape(g, {a.b, a.h, a.sq, a.dv}, "attention_backward: grad_out");
  CheckShape(out, {a.b, a.h, a.sq, a.dv}, "attention_backward: out");
  CheckShape(logsumexp, {a.b, a.h, a.sq}, "attention_backward: logsumexp");
  RefTensor d_query = Zeros(query.shape);
  RefTensor d_key = Zeros(key.shape);
  RefTensor d_value = Zeros(value.shape);
  for (int64_t bh = 0; bh < a.b * a.h; ++bh) {
    const double* q = query.data.data() + bh * a.sq * a.d;
    const double* k = key.data.data() + bh * a.sk * a.d;
    const double* v = value.data.data() + bh * a.sk * a.dv;
    const double* o = out.data.data() + bh * a.sq * a.dv;
    const double* go = g.data.data() + bh * a.sq * a.dv;
    const double* lse = logsumexp.data.data() + bh * a.sq;
    double* dq = d_query.data.data() + bh * a.sq * a.d;
    double* dk = d_key.data.data() + bh * a.sk * a.d;
    double* dv = d_value.data.data() + bh * a.sk * a.dv;
    for (int64_t i = 0; i < a.sq; ++i) {
      double row_dot = 0.0;  // sum_j P_ij dP_ij = g_i . out_i
      for (int64_t d = 0; d < a.dv; ++d) row_dot += go[i * a.dv + d] * o[i * a.dv + d];
      for (int64_t j = 0; j < a.sk; ++j) {
        if (is_causal && j > i) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < a.d; ++d) dot += q[i * a.d + d] * k[j * a.d + d];
        const double p = std::exp(a.scale * dot - lse[i]);
        double dp = 0.0;  // d loss / d P_ij = g_i . v_j
        for (int64_t d = 0; d < a.dv; ++d) {
          dv[j * a.dv + d] += p * go[i * a.dv + d];
          dp += go[i * a.dv + d] * v[j * a.dv + d];
        }
        const double ds = p * (dp - row_dot);  // d loss / d score_ij
        for (int64_t d = 0; d < a.d; ++d) {
          dq[i * a.d + d] += a.scale * ds * k[j * a.d + d];
          dk[j * a.d + d] += a.scale * ds * q[i * a.d + d];
        }
      }
    }
  }
  return {d_query, d_key, d_value};
}

RefTensor MaxPool2dWithIndicesBackward(const RefTensor& g, const RefTensor& self,
                                       const RefTensor& indices) {
  CheckTensor(self, "max_pool2d_backward: self");
  CheckTensor(g, "max_pool2d_backward: grad_output");
  CheckShape(indices, g.shape, "max_pool2d_backward: indices");
  const int64_t r = Rank(self);
  Require(r == 3 || r == 4, "max_pool2d_backward: self must be [C, H, W] or [N, C, H, W]");
  Require(Rank(g) == r && std::equal(self.shape.begin(), self.shape.end() - 2, g.shape.begin()),
          "max_pool2d_backward: grad_output's planes differ from self's");
  const int64_t hw = self.shape[r - 2] * self.shape[r - 1];
  const int64_t out_hw = g.shape[r - 2] * g.shape[r - 1];
  const int64_t planes = Numel(std::vector<int64_t>(self.shape.begin(), self.shape.end() - 2));
  RefTensor out = Zeros(self.shape);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t o = 0; o < out_hw; ++o) {
      const int64_t at = ToIndex(indices.data[p * out_hw + o]);
      Require(at >= 0 && at < hw, "max_pool2d_backward: index out of range");
      out.data[p * hw + at] += g.data[p * out_hw + o];
    }
  }
  return out;
}

RefTensor EmbeddingDenseBackward(const RefTensor& g, const RefTensor& indices, int64_t num_weights,
                                 int64_t padding_idx) {
  CheckTensor(g, "embedding_backward: grad_output");
  CheckTensor(indices, "embedding_backward: indices");
  Require(num_weights >= 0, "embedding_backward: num_weights must be >= 0");
  Require(Rank(g) == Rank(indices) + 1 &&
              std::equal(indices.shape.begin(), indices.shape.end(), g.shape.begin()),
          "embedding_backward: grad_output must be indices.shape + [D]");
  const int64_t d = g.shape.back();
  RefTensor out = Zeros({num_weights, d});
  for (int64_t i = 0; i < Numel(indices.shape); ++i) {
    const int64_t row = ToIndex(indices.data[i]);
    if (row == padding_idx) continue;
    Require(row >= 0 && row < num_weights, "embedding_backward: index out of range");
    for (int64_t j = 0; j < d; ++j) out.data[row * d + j] += g.data[i * d + j];
  }
  return out;
}

RefTensor NllLossBackward(const RefTensor& g, const RefTensor& self, const RefTensor& target,
                          const RefTensor* weight, int64_t reduction, int64_t ignore_index,
                          const RefTensor& total_weight) {
  const NllGeometry n = NllShape(self, target, weight, reduction);
  const bool per_sample = reduction == 0 && n.batched;
  if (per_sample) {
    CheckShape(g, {n.n}, "nll_loss_backward: grad_output");
  } else {
    CheckTensor(g, "nll_loss_backward: grad_output");
    Require(g.data.size() == 1, "nll_loss_backward: grad_output must be a scalar");
  }
  CheckTensor(total_weight, "nll_loss_backward: total_weight");
  Require(total_weight.data.size() == 1, "nll_loss_backward: total_weight must be a scalar");
  RefTensor out = Zeros(self.shape);
  for (int64_t i = 0; i < n.n; ++i) {
    const int64_t t = ToIndex(target.data[i]);
    if (t == ignore_index) continue;
    Require(t >= 0 && t < n.c, "nll_loss_backward: target out of range");
    const double w = weight != nullptr ? weight->data[t] : 1.0;
    double gv = per_sample ? g.data[i] : g.data[0];
    if (reduction == 1) gv /= total_weight.data[0];
    out.data[i * n.c + t] = -w * gv;
  }
  return out;
}

RefTensor MseLossBackward(const RefTensor& g, const RefTensor& self, const RefTensor& target,
                          int64_t reduction) {
  CheckTensor(self, "mse_loss_backward: self");
  CheckShape(target, self.shape, "mse_loss_backward: target");
  CheckReduction(reduction);
  if (reduction == 0) {
    CheckShape(g, self.shape, "mse_loss_backward: grad_output");
  } else {
    CheckTensor(g, "mse_loss_backward: grad_output");
    Require(g.data.size() == 1, "mse_loss_backward: grad_output must be a scalar");
  }
  const double norm = reduction == 1 ? 2.0 / static_cast<double>(self.data.size()) : 2.0;
  RefTensor out = Zeros(self.shape);
  for (size_t i = 0; i < self.data.size(); ++i) {
    const double gv = reduction == 0 ? g.data[i] : g.data[0];
    out.data[i] = norm * (self.data[i] - target.data[i]) * gv;
  }
  return out;
}

}  // namespace overlap::ref
