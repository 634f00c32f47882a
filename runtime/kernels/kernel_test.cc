// The CPU kernels against an independent oracle (runtime/testing/reference_ops.h, plain
// double loops written from PyTorch's definitions), float against double, and every
// backward kernel against central finite differences of its forward in double precision.
//
// Tolerances (docs/runtime.md):
//   - double kernels vs the reference: max|a - b| <= 1e-10 * max(1, max|b|);
//   - float kernels vs double kernels: max|a - b| <= 1e-4 * max|b| per tensor;
//   - finite differences (h = 1e-6, central, double): |fd - g| <= 1e-6 * max(|fd|, |g|)
//     + 1e-9, on up to 24 sampled coordinates per differentiated input.
// Inputs are also given as non-contiguous views (every element at twice its stride), and
// shapes include size-1 dimensions and empty batches where the op allows them.
#include "runtime/kernels/kernel.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/op_schema.h"
#include "graph/shape_rules.h"
#include "gtest/gtest.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/elementwise_table.h"
#include "runtime/testing/reference_ops.h"
#include "runtime/train/synthetic.h"

namespace overlap {
namespace {

using ref::RefTensor;

// ---- running one kernel --------------------------------------------------------------------

struct In {
  enum Kind { kFloat, kIndex, kConst } kind;
  RefTensor t;
  Value v;
};
In F(RefTensor t) { return {In::kFloat, std::move(t), Value()}; }
In I(RefTensor t) { return {In::kIndex, std::move(t), Value()}; }
In C(Value v) { return {In::kConst, {}, std::move(v)}; }
Value Ints(std::vector<int64_t> v) {
  std::vector<Value> items;
  for (int64_t x : v) items.push_back(Value::Int(x));
  return Value::List(std::move(items));
}
Value Bools(std::vector<bool> v) {
  std::vector<Value> items;
  for (bool x : v) items.push_back(Value::Bool(x));
  return Value::List(std::move(items));
}

// A tensor of `dtype` holding r; non-contiguous: every element at twice its stride.
Tensor Make(Allocator& alloc, const RefTensor& r, DType dtype, bool noncontiguous) {
  std::vector<int64_t> big = r.shape;
  if (noncontiguous && !big.empty()) big.back() *= 2;
  if (noncontiguous && big.empty()) big = {2};
  Tensor base = *Tensor::Empty(alloc, dtype, big);
  Tensor t = base;
  if (noncontiguous) {
    std::vector<int64_t> strides = ContiguousStrides(big);
    if (r.shape.empty()) strides.clear();
    if (!strides.empty()) strides.back() = 2;
    t = *base.AsStrided(r.shape, strides, 0);
  }
  for (size_t i = 0; i < r.data.size(); ++i) SetElement(t, static_cast<int64_t>(i), r.data[i]);
  return t;
}

RefTensor ToRef(const Tensor& t) {
  RefTensor r;
  r.shape = t.shape();
  for (int64_t i = 0; i < t.numel(); ++i) r.data.push_back(GetElement(t, i));
  return r;
}

bool IsFloat(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

struct Options {
  DType dtype = DType::kFloat64;
  bool noncontiguous = false;
};

// Runs `target` on the inputs; results as reference tensors (nullopt for None).
absl::StatusOr<std::vector<std::optional<RefTensor>>> RunKernel(const std::string& target,
                                                                const std::vector<In>& ins,
                                                                ValueDict kwargs = {},
                                                                Options o = {}) {
  Graph g;
  std::vector<Value> args;
  std::vector<Tensor> tensors;
  Allocator alloc;
  absl::flat_hash_map<NodeId, Tensor> by_id;
  int k = 0;
  for (const In& in : ins) {
    if (in.kind == In::kConst) {
      args.push_back(in.v);
      continue;
    }
    absl::StatusOr<NodeId> id = g.AddNode(Op::kPlaceholder, absl::StrCat("p", k++), "p", {}, {});
    if (!id.ok()) return id.status();
    by_id[*id] =
        Make(alloc, in.t, in.kind == In::kIndex ? DType::kInt64 : o.dtype, o.noncontiguous);
    args.push_back(Value::Ref(*id));
  }
  absl::StatusOr<NodeId> call = g.AddNode(Op::kCallFunction, "op", target, args, kwargs);
  if (!call.ok()) return call.status();
  const Kernel* kernel = CpuKernels().Find(target);
  if (kernel == nullptr) return absl::NotFoundError(target);
  KernelCall c(g.node(*call), alloc, [&](NodeId id) -> const Tensor* {
    auto it = by_id.find(id);
    return it == by_id.end() ? nullptr : &it->second;
  });
  absl::StatusOr<std::vector<Tensor>> out = (*kernel)(c);
  if (!out.ok()) return out.status();
  std::vector<std::optional<RefTensor>> r;
  for (const Tensor& t : *out) {
    if (t.defined()) {
      if (IsFloat(t.dtype()) && t.dtype() != o.dtype) {
        return absl::InternalError(absl::StrCat("result dtype ", DTypeName(t.dtype())));
      }
      r.push_back(ToRef(t));
    } else {
      r.push_back(std::nullopt);
    }
  }
  return r;
}

double MaxAbs(const RefTensor& t) {
  double m = 0;
  for (double v : t.data) m = std::max(m, std::fabs(v));
  return m;
}

void ExpectClose(const RefTensor& a, const RefTensor& b, double rel, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  const double scale = std::max(1e-30, MaxAbs(b));
  double worst = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::isnan(b.data[i])) {
      EXPECT_TRUE(std::isnan(a.data[i])) << what << " element " << i;
      continue;
    }
    worst = std::max(worst, std::fabs(a.data[i] - b.data[i]));
  }
  EXPECT_LE(worst, rel * scale) << what << ": max|a-b| " << worst << " vs max|b| " << scale;
}

// ---- forward and backward kernels against the reference -----------------------------------

Rng rng(7);
RefTensor Rand(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
  RefTensor r;
  r.shape = shape;
  for (int64_t i = 0; i < ref::Numel(shape); ++i) r.data.push_back(lo + (hi - lo) * rng.Uniform());
  return r;
}
RefTensor Idx(std::vector<int64_t> shape, int64_t bound) {
  RefTensor r;
  r.shape = shape;
  for (int64_t i = 0; i < ref::Numel(shape); ++i) {
    r.data.push_back(static_cast<double>(rng.Below(bound)));
  }
  return r;
}

// One case: the kernel on `ins` must give `want` (the reference's results, None allowed), in
// double contiguous and non-contiguous, and float within 1e-4 of double.
void Check(const std::string& target, const std::vector<In>& ins,
           const std::vector<std::optional<RefTensor>>& want, ValueDict kwargs = {}) {
  SCOPED_TRACE(target);
  for (bool nc : {false, true}) {
    Options o;
    o.noncontiguous = nc;
    absl::StatusOr<std::vector<std::optional<RefTensor>>> got = RunKernel(target, ins, kwargs, o);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_GE(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (!want[i]) continue;
      ASSERT_TRUE((*got)[i].has_value()) << "result " << i;
      ExpectClose(*(*got)[i], *want[i], 1e-10,
                  absl::StrCat(nc ? "non-contiguous " : "", "result ", i));
    }
  }
  Options f;
  f.dtype = DType::kFloat32;
  absl::StatusOr<std::vector<std::optional<RefTensor>>> single = RunKernel(target, ins, kwargs, f);
  ASSERT_TRUE(single.ok()) << single.status();
  absl::StatusOr<std::vector<std::optional<RefTensor>>> dbl = RunKernel(target, ins, kwargs);
  ASSERT_TRUE(dbl.ok()) << dbl.status();
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(*dbl)[i] || !(*single)[i]) continue;
    ExpectClose(*(*single)[i], *(*dbl)[i], 1e-4, absl::StrCat("float vs double, result ", i));
  }
}

TEST(KernelTest, ForwardOpsMatchTheReference) {
  const RefTensor a = Rand({3, 5}), b = Rand({5, 4}), bias = Rand({4});
  Check("aten.mm.default", {F(a), F(b)}, {ref::Mm(a, b)});
  Check("aten.mm.default", {F(Rand({0, 5})), F(b)}, {ref::Mm(Rand({0, 5}), b)});
  Check("aten.addmm.default", {F(bias), F(a), F(b)}, {ref::Addmm(bias, a, b)});
  const RefTensor w = Rand({7, 3});
  const RefTensor ids = Idx({2, 4}, 7);
  Check("aten.embedding.default", {F(w), I(ids)}, {ref::Embedding(w, ids)});
  const RefTensor x = Rand({2, 1, 6}), lw = Rand({6}), lb = Rand({6});
  {
    std::vector<RefTensor> r = ref::NativeLayerNorm(x, {6}, &lw, &lb, 1e-5);
    Check("aten.native_layer_norm.default",
          {F(x), C(Ints({6})), F(lw), F(lb), C(Value::Double(1e-5))}, {r[0], r[1], r[2]});
  }
  Check("aten.pow.Tensor_Scalar", {F(x), C(Value::Int(2))}, {ref::PowTensorScalar(x, 2)});
  const RefTensor pos = Rand({2, 3}, 0.5, 2);
  Check("aten.pow.Tensor_Scalar", {F(pos), C(Value::Double(1.5))},
        {ref::PowTensorScalar(pos, 1.5)});
  Check("aten.mean.dim", {F(x), C(Ints({-1})), C(Value::Bool(true))},
        {ref::MeanDim(x, {-1}, true)});
  Check("aten.mean.dim", {F(x), C(Ints({0, 2})), C(Value::Bool(false))},
        {ref::MeanDim(x, {0, 2}, false)});
  Check("aten.add.Scalar", {F(x), C(Value::Double(0.25))}, {ref::AddScalar(x, 0.25)});
  Check("aten.rsqrt.default", {F(pos)}, {ref::Rsqrt(pos)});
  const RefTensor m1 = Rand({2, 3, 4}), m2 = Rand({3, 1}), m3 = Rand({1, 1, 4});
  Check("aten.mul.Tensor", {F(m1), F(m2)}, {ref::MulTensor(m1, m2)});
  Check("aten.mul.Tensor", {F(m3), F(m1)}, {ref::MulTensor(m3, m1)});
  Check("aten.add.Tensor", {F(m1), F(m2)}, {ref::AddTensor(m1, m2)});
  Check("aten.add.Tensor", {F(m1), F(m3)}, {ref::AddTensor(m1, m3, 0.5)},
        {{"alpha", Value::Double(0.5)}});
  const RefTensor wide = Rand({3, 4}, -4, 4);
  Check("aten.gelu.default", {F(wide)}, {ref::Gelu(wide)});
  Check("aten.gelu.default", {F(wide)}, {ref::Gelu(wide, "tanh")},
        {{"approximate", Value::String("tanh")}});
  Check("aten.silu.default", {F(wide)}, {ref::Silu(wide)});
  Check("aten.relu.default", {F(wide)}, {ref::Relu(wide)});
  Check("aten.sigmoid.default", {F(wide)}, {ref::SigmoidOf(wide)});
  Check("aten.sigmoid_backward.default", {F(m1), F(ref::SigmoidOf(m1))},
        {ref::SigmoidBackward(m1, ref::SigmoidOf(m1))});
  Check("aten.tanh.default", {F(wide)}, {ref::TanhOf(wide)});
  Check("aten.tanh_backward.default", {F(m1), F(ref::TanhOf(m1))},
        {ref::TanhBackward(m1, ref::TanhOf(m1))});
  Check("aten.neg.default", {F(wide)}, {ref::Neg(wide)});
  Check("aten.sub.Tensor", {F(m1), F(m2)}, {ref::AddTensor(m1, m2, -1)});
  Check("aten.sub.Tensor", {F(m1), F(m3)}, {ref::AddTensor(m1, m3, -0.5)},
        {{"alpha", Value::Double(0.5)}});
  // ReLU6 (mobilenet_v2) and the default [-1, 1].
  Check("aten.hardtanh.default", {F(wide), C(Value::Double(0)), C(Value::Double(6))},
        {ref::Hardtanh(wide, 0, 6)});
  Check("aten.hardtanh.default", {F(wide)}, {ref::Hardtanh(wide, -1, 1)});
  Check("aten._softmax.default", {F(m1), C(Value::Int(1)), C(Value::Bool(false))},
        {ref::Softmax(m1, 1)});
  Check("aten._log_softmax.default", {F(m1), C(Value::Int(-1)), C(Value::Bool(false))},
        {ref::LogSoftmax(m1, -1)});
  {
    std::vector<RefTensor> r = ref::TopK(m1, 2);
    Check("aten.topk.default", {F(m1), C(Value::Int(2))}, {r[0], r[1]});
  }
  Check("aten.argsort.default", {F(m1)}, {ref::ArgSort(m1)});
  const RefTensor sel = Idx({5}, 3);
  Check("aten.index_select.default", {F(m1), C(Value::Int(1)), I(sel)},
        {ref::IndexSelect(m1, 1, sel)});
  const RefTensor src = Rand({2, 5, 4});
  Check("aten.index_add.default", {F(m1), C(Value::Int(1)), I(sel), F(src)},
        {ref::IndexAdd(m1, 1, sel, src)});
  const RefTensor img = Rand({2, 4, 7, 6}), kern = Rand({6, 2, 3, 3}), cb = Rand({6});
  Check("aten.convolution.default",
        {F(img), F(kern), F(cb), C(Ints({2, 1})), C(Ints({1, 1})), C(Ints({1, 2})),
         C(Value::Bool(false)), C(Ints({0, 0})), C(Value::Int(2))},
        {ref::Convolution(img, kern, &cb, {2, 1}, {1, 1}, {1, 2}, 2)});
  // Depthwise (groups = channels, as mobilenet_v2's 3 x 3 layers), without a bias.
  const RefTensor dw = Rand({4, 1, 3, 3});
  Check("aten.convolution.default",
        {F(img), F(dw), C(Value()), C(Ints({2, 2})), C(Ints({1, 1})), C(Ints({1, 1})),
         C(Value::Bool(false)), C(Ints({0, 0})), C(Value::Int(4))},
        {ref::Convolution(img, dw, nullptr, {2, 2}, {1, 1}, {1, 1}, 4)});
  const RefTensor bw = Rand({4}), bb = Rand({4});
  {
    std::vector<RefTensor> r = ref::NativeBatchNorm(img, &bw, &bb, true, 1e-5);
    Check("aten.native_batch_norm.default",
          {F(img), F(bw), F(bb), C(Value()), C(Value()), C(Value::Bool(true)),
           C(Value::Double(0.1)), C(Value::Double(1e-5))},
          {r[0], r[1], r[2]});
  }
  {
    std::vector<RefTensor> r = ref::MaxPool2dWithIndices(img, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
    Check("aten.max_pool2d_with_indices.default",
          {F(img), C(Ints({3, 3})), C(Ints({2, 2})), C(Ints({1, 1})), C(Ints({1, 1})),
           C(Value::Bool(true))},
          {r[0], r[1]});
  }
  RefTensor logp = ref::LogSoftmax(Rand({5, 4}), 1);
  RefTensor target = Idx({5}, 4);
  target.data[2] = -100;  // ignored
  for (int64_t reduction : {0, 1, 2}) {
    std::vector<RefTensor> r = ref::NllLossForward(logp, target, nullptr, reduction, -100);
    Check("aten.nll_loss_forward.default",
          {F(logp), I(target), C(Value()), C(Value::Int(reduction)), C(Value::Int(-100))},
          {r[0], reduction == 0 ? std::nullopt : std::optional<RefTensor>(r[1])});
    Check("aten.mse_loss.default", {F(m1), F(Rand({2, 3, 4})), C(Value::Int(reduction))},
          {std::nullopt});  // shape and float vs double only; values below
  }
  const RefTensor t2 = Rand({2, 3, 4});
  Check("aten.mse_loss.default", {F(m1), F(t2), C(Value::Int(1))}, {ref::MseLoss(m1, t2, 1)});
  const RefTensor q = Rand({2, 2, 5, 4}), k = Rand({2, 2, 6, 4}), v = Rand({2, 2, 6, 3});
  for (bool causal : {false, true}) {
    std::vector<RefTensor> r = ref::ScaledDotProductFlashAttention(q, k, v, causal);
    Check("aten._scaled_dot_product_flash_attention.default",
          {F(q), F(k), F(v), C(Value::Double(0.0)), C(Value::Bool(causal))}, {r[0], r[1]});
  }
  // Backward-graph ops with closed forms.
  Check("aten.sum.dim_IntList", {F(m1), C(Ints({0, 2})), C(Value::Bool(true))},
        {ref::SumDimIntList(m1, {0, 2}, true)});
  // The overloads without a dim reduce everything (the exporter's default `sum` loss).
  Check("aten.sum.default", {F(m1)}, {ref::SumDimIntList(m1, {}, false)});
  Check("aten.mean.default", {F(m1)}, {ref::MeanDim(m1, {}, false)});
  Check("aten.div.Scalar", {F(m1), C(Value::Int(3))}, {ref::DivScalar(m1, 3)});
  Check("aten.mul.Scalar", {F(m1), C(Value::Double(-0.5))}, {ref::MulScalar(m1, -0.5)});
  const RefTensor p1 = Rand({2, 1, 4});
  const RefTensor topi = ref::TopK(m1, 2)[1];
  const RefTensor g2 = Rand({2, 3, 2});
  Check("aten.scatter.src", {F(ref::NewZeros({2, 3, 4})), C(Value::Int(2)), I(topi), F(g2)},
        {ref::ScatterSrc(ref::NewZeros({2, 3, 4}), 2, topi, g2)});
  const RefTensor sg = Rand({2, 2, 4});
  Check("aten.slice_backward.default",
        {F(sg), C(Ints({2, 5, 4})), C(Value::Int(1)), C(Value::Int(1)), C(Value::Int(5)),
         C(Value::Int(2))},
        {ref::SliceBackward(sg, {2, 5, 4}, 1, 1, 5, 2)});
  Check("aten.threshold_backward.default", {F(wide), F(ref::Relu(Rand({3, 4}))), C(Value::Int(0))},
        {std::nullopt});
  {
    // On the bounds themselves the gradient is 0 (ATen's rule), inside it passes.
    RefTensor x = Rand({3, 4}, -2, 8);
    x.data[0] = 0;
    x.data[1] = 6;
    const RefTensor g = Rand({3, 4});
    Check("aten.hardtanh_backward.default", {F(g), F(x), C(Value::Double(0)), C(Value::Double(6))},
          {ref::HardtanhBackward(g, x, 0, 6)});
    // Masked by the forward's output instead (graph/aot.h's MaskActivationBackwardsByOutputs):
    // the same gradient, on the bounds, beyond them and at a NaN.
    x.data[2] = std::nan("");
    const RefTensor clamped = ref::Hardtanh(x, 0, 6);
    Check("aten.hardtanh_backward.default",
          {F(g), F(clamped), C(Value::Double(0)), C(Value::Double(6))},
          {ref::HardtanhBackward(g, x, 0, 6)});
  }
  const RefTensor gy = Rand({3, 4}), y = ref::Relu(Rand({3, 4}));
  Check("aten.threshold_backward.default", {F(gy), F(y), C(Value::Int(0))},
        {ref::ThresholdBackward(gy, y, 0)});
  Check("aten.squeeze.dim", {F(p1), C(Value::Int(1))}, {ref::SqueezeDim(p1, 1)});
}

// Empty batches where the op allows them: the right shapes, nothing read out of bounds.
TEST(KernelTest, EmptyBatchesGiveEmptyResults) {
  auto shape = [](const std::string& target, const std::vector<In>& ins, size_t k = 0) {
    absl::StatusOr<std::vector<std::optional<RefTensor>>> r = RunKernel(target, ins);
    EXPECT_TRUE(r.ok()) << target << ": " << r.status();
    return r.ok() && (*r)[k] ? (*r)[k]->shape : std::vector<int64_t>{-1};
  };
  const RefTensor e = Rand({0, 4});
  EXPECT_EQ(shape("aten.add.Tensor", {F(e), F(Rand({4}))}), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(shape("aten.sum.dim_IntList", {F(e), C(Ints({1})), C(Value::Bool(false))}),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(shape("aten._softmax.default", {F(e), C(Value::Int(-1)), C(Value::Bool(false))}),
            (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(shape("aten.native_layer_norm.default",
                  {F(e), C(Ints({4})), F(Rand({4})), F(Rand({4})), C(Value::Double(1e-5))}, 1),
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(shape("aten.embedding.default", {F(Rand({5, 3})), I(Idx({0}, 5))}),
            (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(
      shape("aten.convolution.default", {F(Rand({0, 2, 5, 5})), F(Rand({3, 2, 3, 3})), C(Value()),
                                         C(Ints({1, 1})), C(Ints({0, 0})), C(Ints({1, 1})),
                                         C(Value::Bool(false)), C(Ints({0, 0})), C(Value::Int(1))}),
      (std::vector<int64_t>{0, 3, 3, 3}));
  EXPECT_EQ(shape("aten._scaled_dot_product_flash_attention.default",
                  {F(Rand({0, 2, 3, 4})), F(Rand({0, 2, 3, 4})), F(Rand({0, 2, 3, 4}))}),
            (std::vector<int64_t>{0, 2, 3, 4}));
  EXPECT_EQ(shape("aten.mm.default", {F(Rand({2, 0})), F(Rand({0, 3}))}),
            (std::vector<int64_t>{2, 3}));  // an empty inner dimension: zeros
}

TEST(KernelTest, CatMatchesTheReference) {
  const RefTensor p1 = Rand({2, 1, 4}), p2 = Rand({2, 3, 4});
  // Cat's tensors come in a list: built by hand.
  Graph g;
  Allocator alloc;
  const NodeId a = *g.AddNode(Op::kPlaceholder, "a", "a", {}, {});
  const NodeId b = *g.AddNode(Op::kPlaceholder, "b", "b", {}, {});
  const NodeId c = *g.AddNode(Op::kCallFunction, "cat", "aten.cat.default",
                              {Value::List({Value::Ref(a), Value::Ref(b)}), Value::Int(1)}, {});
  for (bool nc : {false, true}) {
    absl::flat_hash_map<NodeId, Tensor> t = {{a, Make(alloc, p1, DType::kFloat64, nc)},
                                             {b, Make(alloc, p2, DType::kFloat64, nc)}};
    KernelCall call(g.node(c), alloc, [&](NodeId id) { return &t.at(id); });
    absl::StatusOr<std::vector<Tensor>> r = (*CpuKernels().Find("aten.cat.default"))(call);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectClose(ToRef((*r)[0]), ref::Cat({p1, p2}, 1), 1e-15, "cat");
  }
}

// The recurrent cells' operators (unsafe_split, unbind, stack) and the factories (zeros,
// fill, empty_like), against values written out by hand.
TEST(KernelTest, RecurrentAndFactoryOpsMatchTheirDefinitions) {
  const RefTensor x = Rand({3, 5});
  Graph g;
  Allocator alloc;
  const NodeId a = *g.AddNode(Op::kPlaceholder, "a", "a", {}, {});
  const NodeId b = *g.AddNode(Op::kPlaceholder, "b", "b", {}, {});
  auto run = [&](const std::string& target, std::vector<Value> args,
                 ValueDict kwargs = {}) -> std::vector<Tensor> {
    Graph h = g;
    const NodeId n = *h.AddNode(Op::kCallFunction, "op", target, std::move(args), kwargs);
    absl::flat_hash_map<NodeId, Tensor> t = {{a, Make(alloc, x, DType::kFloat64, true)},
                                             {b, Make(alloc, x, DType::kFloat32, false)}};
    KernelCall call(h.node(n), alloc, [&](NodeId id) { return &t.at(id); });
    absl::StatusOr<std::vector<Tensor>> r = (*CpuKernels().Find(target))(call);
    EXPECT_TRUE(r.ok()) << target << ": " << r.status();
    return r.ok() ? *r : std::vector<Tensor>{};
  };
  // unsafe_split: pieces of 2, 2, 1 columns, each its own storage.
  std::vector<Tensor> pieces =
      run("aten.unsafe_split.Tensor", {Value::Ref(a), Value::Int(2), Value::Int(1)});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shape(), (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(pieces[0].SharesStorageWith(pieces[1]));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(GetElement(pieces[j / 2], i * (j < 4 ? 2 : 1) + j % 2), x.data[i * 5 + j]);
    }
  }
  // unbind: rows, views of the input.
  std::vector<Tensor> rows = run("aten.unbind.int", {Value::Ref(a)});
  ASSERT_EQ(rows.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(rows[i].shape(), (std::vector<int64_t>{5}));
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(GetElement(rows[i], j), x.data[i * 5 + j]);
  }
  // stack along dim 1 of a float64 and a float32 tensor: float64 (PyTorch's promotion).
  std::vector<Tensor> st =
      run("aten.stack.default", {Value::List({Value::Ref(a), Value::Ref(b)}), Value::Int(1)});
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].shape(), (std::vector<int64_t>{3, 2, 5}));
  EXPECT_EQ(st[0].dtype(), DType::kFloat64);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(GetElement(st[0], i * 10 + j), x.data[i * 5 + j]);
      EXPECT_EQ(GetElement(st[0], i * 10 + 5 + j), static_cast<float>(x.data[i * 5 + j]));
    }
  }
  // zeros (float32 unless dtype), fill, empty_like (zeroed).
  std::vector<Tensor> z = run("aten.zeros.default", {Ints({2, 3})});
  ASSERT_EQ(z.size(), 1u);
  EXPECT_EQ(z[0].dtype(), DType::kFloat32);
  EXPECT_EQ(z[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(
      run("aten.zeros.default", {Ints({2})}, {{"dtype", Value::String("torch.int64")}})[0].dtype(),
      DType::kInt64);
  std::vector<Tensor> f = run("aten.fill.Scalar", {Value::Ref(a), Value::Double(2.5)});
  ASSERT_EQ(f.size(), 1u);
  for (int64_t i = 0; i < f[0].numel(); ++i) EXPECT_EQ(GetElement(f[0], i), 2.5);
  // eq / ne against a number: bool; lift_fresh_copy: a copy; zero, new_empty: zeroed.
  std::vector<Tensor> eq = run("aten.eq.Scalar", {Value::Ref(a), Value::Double(x.data[7])});
  ASSERT_EQ(eq.size(), 1u);
  EXPECT_EQ(eq[0].dtype(), DType::kBool);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(GetElement(eq[0], i), i == 7 ? 1.0 : 0.0);
  std::vector<Tensor> ne = run("aten.ne.Scalar", {Value::Ref(a), Value::Double(x.data[7])});
  ASSERT_EQ(ne.size(), 1u);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(GetElement(ne[0], i), i == 7 ? 0.0 : 1.0);
  std::vector<Tensor> fresh = run("aten.lift_fresh_copy.default", {Value::Ref(a)});
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_FALSE(fresh[0].SharesStorageWith(ne[0]));
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(GetElement(fresh[0], i), x.data[i]);
  std::vector<Tensor> zeroed = run("aten.zero.default", {Value::Ref(a)});
  ASSERT_EQ(zeroed.size(), 1u);
  for (int64_t i = 0; i < zeroed[0].numel(); ++i) EXPECT_EQ(GetElement(zeroed[0], i), 0.0);
  std::vector<Tensor> fresh_buffer = run("aten.new_empty.default", {Value::Ref(b), Ints({4})});
  ASSERT_EQ(fresh_buffer.size(), 1u);
  EXPECT_EQ(fresh_buffer[0].shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(fresh_buffer[0].dtype(), DType::kFloat32);
  // constant_pad_nd: one column cropped on the right, two rows of 9 added on top.
  std::vector<Tensor> padded =
      run("aten.constant_pad_nd.default", {Value::Ref(a), Ints({0, -1, 2, 0}), Value::Double(9)});
  ASSERT_EQ(padded.size(), 1u);
  ASSERT_EQ(padded[0].shape(), (std::vector<int64_t>{5, 4}));
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(GetElement(padded[0], i * 4 + j), i < 2 ? 9.0 : x.data[(i - 2) * 5 + j]);
    }
  }
  // roll: rows down one, columns left two; without dims, the flat sequence by 4.
  std::vector<Tensor> rolled =
      run("aten.roll.default", {Value::Ref(a), Ints({1, -2}), Ints({0, 1})});
  ASSERT_EQ(rolled.size(), 1u);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      EXPECT_EQ(GetElement(rolled[0], ((i + 1) % 3) * 5 + (j + 3) % 5), x.data[i * 5 + j]);
    }
  }
  std::vector<Tensor> flat = run("aten.roll.default", {Value::Ref(a), Ints({4})});
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(GetElement(flat[0], (i + 4) % 15), x.data[i]);
  std::vector<Tensor> e = run("aten.empty_like.default", {Value::Ref(a)});
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].shape(), (std::vector<int64_t>{3, 5}));
  for (int64_t i = 0; i < e[0].numel(); ++i) EXPECT_EQ(GetElement(e[0], i), 0.0);
}

// Advanced indexing (index.Tensor, index_put) and strided windows (as_strided,
// as_strided_scatter): Swin's and ConvNeXt's exported operators, against element formulas.
TEST(KernelTest, IndexingAndStridedWindowsMatchTheirDefinitions) {
  const RefTensor x = Rand({3, 5});
  Graph g;
  Allocator alloc;
  const NodeId a = *g.AddNode(Op::kPlaceholder, "a", "a", {}, {});
  const NodeId i = *g.AddNode(Op::kPlaceholder, "i", "i", {}, {});
  const NodeId j = *g.AddNode(Op::kPlaceholder, "j", "j", {}, {});
  const NodeId v = *g.AddNode(Op::kPlaceholder, "v", "v", {}, {});
  const NodeId d = *g.AddNode(Op::kPlaceholder, "d", "d", {}, {});
  const NodeId v2 = *g.AddNode(Op::kPlaceholder, "v2", "v2", {}, {});
  Tensor rows = *Tensor::Empty(alloc, DType::kInt64, {2, 2});  // rows 2, 0 / -1, 2
  const int64_t row_values[] = {2, 0, -1, 2};
  for (int k = 0; k < 4; ++k) rows.data<int64_t>()[k] = row_values[k];
  Tensor cols = *Tensor::Empty(alloc, DType::kInt32, {2});  // columns 4, 1
  cols.data<int32_t>()[0] = 4;
  cols.data<int32_t>()[1] = 1;
  Tensor values = *Tensor::Empty(alloc, DType::kFloat64, {2, 1});
  values.data<double>()[0] = 10;
  values.data<double>()[1] = 20;
  auto call = [&](const std::string& target, std::vector<Value> args) {
    Graph h = g;
    const NodeId n = *h.AddNode(Op::kCallFunction, "op", target, std::move(args), {});
    absl::flat_hash_map<NodeId, Tensor> t = {{a, Make(alloc, x, DType::kFloat64, true)},
                                             {i, rows},
                                             {j, cols},
                                             {v, values},
                                             {d, Make(alloc, x, DType::kFloat64, false)},
                                             {v2, *values.View({2})}};
    KernelCall kc(h.node(n), alloc, [&](NodeId id) { return &t.at(id); });
    return (*CpuKernels().Find(target))(kc);
  };
  auto run = [&](const std::string& target, std::vector<Value> args) {
    absl::StatusOr<std::vector<Tensor>> r = call(target, std::move(args));
    EXPECT_TRUE(r.ok()) << target << ": " << r.status();
    return r.ok() && r->size() == 1 ? (*r)[0] : Tensor();
  };
  const Value none;
  // a[rows]: [2, 2, 5]; a[:, cols]: [3, 2]; a[rows, cols] broadcasts to [2, 2].
  Tensor by_rows = run("aten.index.Tensor", {Value::Ref(a), Value::List({Value::Ref(i)})});
  ASSERT_EQ(by_rows.shape(), (std::vector<int64_t>{2, 2, 5}));
  for (int k = 0; k < 4; ++k) {
    const int64_t r = (row_values[k] + 3) % 3;
    for (int c = 0; c < 5; ++c) EXPECT_EQ(GetElement(by_rows, k * 5 + c), x.data[r * 5 + c]);
  }
  Tensor by_cols = run("aten.index.Tensor", {Value::Ref(a), Value::List({none, Value::Ref(j)})});
  ASSERT_EQ(by_cols.shape(), (std::vector<int64_t>{3, 2}));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(GetElement(by_cols, r * 2), x.data[r * 5 + 4]);
    EXPECT_EQ(GetElement(by_cols, r * 2 + 1), x.data[r * 5 + 1]);
  }
  Tensor both =
      run("aten.index.Tensor", {Value::Ref(a), Value::List({Value::Ref(i), Value::Ref(j)})});
  ASSERT_EQ(both.shape(), (std::vector<int64_t>{2, 2}));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(GetElement(both, k), x.data[((row_values[k] + 3) % 3) * 5 + (k % 2 == 0 ? 4 : 1)]);
  }
  // index_put with accumulate: values [2, 1] broadcast to the indexed [2, 2, 5] by the
  // second index dimension, so row 0 (rows[0][1]) gets 20 and row 2 (rows[0][0], rows[1][0]
  // as -1, rows[1][1]) gets 10 + 10 + 20; without accumulate, the values are written.
  Tensor added = run("aten.index_put.default", {Value::Ref(a), Value::List({Value::Ref(i)}),
                                                Value::Ref(v), Value::Bool(true)});
  ASSERT_EQ(added.shape(), (std::vector<int64_t>{3, 5}));
  for (int r = 0; r < 3; ++r) {
    const double add = r == 0 ? 20 : r == 2 ? 10 + 10 + 20 : 0;
    for (int c = 0; c < 5; ++c)
      EXPECT_DOUBLE_EQ(GetElement(added, r * 5 + c), x.data[r * 5 + c] + add);
  }
  Tensor written = run("aten.index_put.default", {Value::Ref(a), Value::List({none, Value::Ref(j)}),
                                                  Value::Ref(v2), Value::Bool(false)});
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) {
      EXPECT_EQ(GetElement(written, r * 5 + c), c == 4   ? 10.0
                                                : c == 1 ? 20.0
                                                         : x.data[r * 5 + c])
          << r << "," << c;
    }
  }
  // as_strided on contiguous storage: a 2x3 window of strides (1, 5) from element 1;
  // as_strided_scatter writes values [2, 1] through the window (5, 1) from element 1 of a
  // contiguous copy of (non-contiguous) a: elements 1 and 6.
  Tensor window =
      run("aten.as_strided.default", {Value::Ref(d), Ints({2, 3}), Ints({1, 5}), Value::Int(1)});
  ASSERT_EQ(window.shape(), (std::vector<int64_t>{2, 3}));
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(GetElement(window, r * 3 + c), x.data[1 + r + 5 * c]);
  }
  Tensor scattered = run("aten.as_strided_scatter.default",
                         {Value::Ref(a), Value::Ref(v), Ints({2, 1}), Ints({5, 1}), Value::Int(1)});
  ASSERT_EQ(scattered.shape(), (std::vector<int64_t>{3, 5}));
  for (int k = 0; k < 15; ++k) {
    EXPECT_EQ(GetElement(scattered, k), k == 1 ? 10.0 : k == 6 ? 20.0 : x.data[k]) << k;
  }
  // Out of range, a boolean mask, and a window past the storage are errors naming the node.
  Tensor big = *Tensor::Empty(alloc, DType::kInt64, {1});
  big.data<int64_t>()[0] = 3;
  {
    Graph h = g;
    const NodeId n = *h.AddNode(Op::kCallFunction, "op", "aten.index.Tensor",
                                {Value::Ref(a), Value::List({Value::Ref(i)})}, {});
    absl::flat_hash_map<NodeId, Tensor> t = {{a, Make(alloc, x, DType::kFloat64, false)}, {i, big}};
    KernelCall kc(h.node(n), alloc, [&](NodeId id) { return &t.at(id); });
    absl::StatusOr<std::vector<Tensor>> r = (*CpuKernels().Find("aten.index.Tensor"))(kc);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("index 3 out of range [0, 3)"));
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("node 'op'"));
  }
  absl::StatusOr<std::vector<Tensor>> past =
      call("aten.as_strided.default", {Value::Ref(d), Ints({4, 5}), Ints({5, 1})});
  ASSERT_FALSE(past.ok());
  EXPECT_THAT(past.status().message(), ::testing::HasSubstr("past the end"));
}

// ---- finite differences -------------------------------------------------------------------

// sum(g * forward(inputs)) for the op whose output `out` is differentiated.
using Forward = std::function<RefTensor(const std::vector<RefTensor>&)>;
// The analytic gradients wrt each input (nullopt: not differentiated), given the cotangent.
using Backward = std::function<std::vector<std::optional<RefTensor>>(const std::vector<RefTensor>&,
                                                                     const RefTensor& g)>;

double Dot(const RefTensor& a, const RefTensor& b) {
  double s = 0;
  for (size_t i = 0; i < a.data.size(); ++i) s += a.data[i] * b.data[i];
  return s;
}

void CheckFiniteDifferences(const std::string& what, const std::vector<RefTensor>& inputs,
                            const Forward& forward, const Backward& backward) {
  SCOPED_TRACE(what);
  const RefTensor y = forward(inputs);
  const RefTensor g = Rand(y.shape);
  const std::vector<std::optional<RefTensor>> grads = backward(inputs, g);
  ASSERT_EQ(grads.size(), inputs.size());
  int checked = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!grads[k]) continue;
    ASSERT_EQ(grads[k]->shape, inputs[k].shape) << "gradient " << k;
    const int64_t n = static_cast<int64_t>(inputs[k].data.size());
    for (int s = 0; s < std::min<int64_t>(n, 24); ++s) {
      const int64_t i = n <= 24 ? s : rng.Below(n);
      std::vector<RefTensor> plus = inputs, minus = inputs;
      const double h = 1e-6 * std::max(1.0, std::fabs(inputs[k].data[i]));
      plus[k].data[i] += h;
      minus[k].data[i] -= h;
      const double fd = (Dot(forward(plus), g) - Dot(forward(minus), g)) / (2 * h);
      const double an = grads[k]->data[i];
      EXPECT_LE(std::fabs(fd - an), 1e-6 * std::max(std::fabs(fd), std::fabs(an)) + 1e-9)
          << "input " << k << " element " << i << ": fd " << fd << " analytic " << an;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// The kernel's result `index` (double, contiguous), failing the test on an error.
RefTensor Out(const std::string& target, const std::vector<In>& ins, size_t index = 0,
              ValueDict kwargs = {}) {
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r =
      RunKernel(target, ins, std::move(kwargs));
  EXPECT_TRUE(r.ok()) << target << ": " << r.status();
  if (!r.ok() || r->size() <= index || !(*r)[index]) return RefTensor{};
  return *(*r)[index];
}
std::vector<std::optional<RefTensor>> Outs(const std::string& target, const std::vector<In>& ins,
                                           ValueDict kwargs = {}) {
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r =
      RunKernel(target, ins, std::move(kwargs));
  EXPECT_TRUE(r.ok()) << target << ": " << r.status();
  return r.ok() ? *r : std::vector<std::optional<RefTensor>>{};
}

Value Doubles(std::vector<double> v) {
  std::vector<Value> items;
  for (double x : v) items.push_back(Value::Double(x));
  return Value::List(std::move(items));
}

// The zoo's layers (GroupNorm, nn.Upsample / F.interpolate, nn.AdaptiveAvgPool2d,
// nn.ConvTranspose2d): forward against element formulas written here, backward by finite
// differences of the forward kernel.
TEST(KernelTest, ZooLayersMatchTheirDefinitionsAndFiniteDifferences) {
  // Group norm: 2 samples, 6 channels in 3 groups, 2x2 positions.
  const RefTensor x = Rand({2, 6, 2, 2}), w = Rand({6}), b = Rand({6});
  auto group_norm = [](const std::vector<RefTensor>& in) {
    return Outs("aten.native_group_norm.default",
                {F(in[0]), F(in[1]), F(in[2]), C(Value::Int(2)), C(Value::Int(6)), C(Value::Int(4)),
                 C(Value::Int(3)), C(Value::Double(1e-5))});
  };
  const std::vector<std::optional<RefTensor>> gn = group_norm({x, w, b});
  ASSERT_EQ(gn.size(), 3u);
  ASSERT_EQ(gn[1]->shape, (std::vector<int64_t>{2, 3}));
  for (int n = 0; n < 2; ++n) {
    for (int grp = 0; grp < 3; ++grp) {
      double s = 0, ss = 0;
      for (int k = 0; k < 8; ++k) s += x.data[n * 24 + grp * 8 + k];
      const double mu = s / 8;
      for (int k = 0; k < 8; ++k) ss += std::pow(x.data[n * 24 + grp * 8 + k] - mu, 2);
      const double r = 1 / std::sqrt(ss / 8 + 1e-5);
      EXPECT_NEAR(gn[1]->data[n * 3 + grp], mu, 1e-12);
      EXPECT_NEAR(gn[2]->data[n * 3 + grp], r, 1e-9);
      for (int k = 0; k < 8; ++k) {
        const int at = n * 24 + grp * 8 + k, ch = grp * 2 + k / 4;
        EXPECT_NEAR(gn[0]->data[at], (x.data[at] - mu) * r * w.data[ch] + b.data[ch], 1e-9);
      }
    }
  }
  CheckFiniteDifferences(
      "native_group_norm", {x, w, b},
      [&](const std::vector<RefTensor>& in) { return *group_norm(in)[0]; },
      [&](const std::vector<RefTensor>& in, const RefTensor& g) {
        const std::vector<std::optional<RefTensor>> f = group_norm(in);
        return Outs(
            "aten.native_group_norm_backward.default",
            {F(g), F(in[0]), F(*f[1]), F(*f[2]), F(in[1]), C(Value::Int(2)), C(Value::Int(6)),
             C(Value::Int(4)), C(Value::Int(3)), C(Bools({true, true, true}))});
      });
  // Upsampling [1, 1, 2, 2]: nearest by 2 repeats each pixel 2x2; bilinear to 3x3 with
  // align_corners keeps the corners and puts means between them.
  RefTensor small = Rand({1, 1, 2, 2});
  const RefTensor near =
      Out("aten.upsample_nearest2d.vec", {F(small), C(Value()), C(Doubles({2.0, 2.0}))});
  ASSERT_EQ(near.shape, (std::vector<int64_t>{1, 1, 4, 4}));
  for (int y = 0; y < 4; ++y) {
    for (int xx = 0; xx < 4; ++xx)
      EXPECT_EQ(near.data[y * 4 + xx], small.data[(y / 2) * 2 + xx / 2]);
  }
  const RefTensor lin = Out("aten.upsample_bilinear2d.vec",
                            {F(small), C(Ints({3, 3})), C(Value::Bool(true)), C(Value())});
  ASSERT_EQ(lin.shape, (std::vector<int64_t>{1, 1, 3, 3}));
  const std::vector<double>& v = small.data;
  EXPECT_NEAR(lin.data[0], v[0], 1e-12);
  EXPECT_NEAR(lin.data[8], v[3], 1e-12);
  EXPECT_NEAR(lin.data[1], (v[0] + v[1]) / 2, 1e-12);
  EXPECT_NEAR(lin.data[4], (v[0] + v[1] + v[2] + v[3]) / 4, 1e-12);
  // Every mode against finite differences, sizes up and down, by size and by scale.
  struct Resize {
    const char* name;
    bool bilinear;
    Value size, align, scales;
  };
  for (const Resize& r : std::vector<Resize>{
           {"nearest x2", false, Value(), Value(), Doubles({2.0, 2.0})},
           {"nearest to 5x3", false, Ints({5, 3}), Value(), Value()},
           {"bilinear x1.5", true, Value(), Value::Bool(false), Doubles({1.5, 1.5})},
           {"bilinear to 2x5", true, Ints({2, 5}), Value::Bool(false), Value()},
           {"bilinear to 5x7 aligned", true, Ints({5, 7}), Value::Bool(true), Value()}}) {
    const std::string fwd =
        r.bilinear ? "aten.upsample_bilinear2d.vec" : "aten.upsample_nearest2d.vec";
    const std::string bwd = r.bilinear ? "aten.upsample_bilinear2d_backward.vec"
                                       : "aten.upsample_nearest2d_backward.vec";
    auto args = [&](In first, std::optional<Value> input_size) {
      std::vector<In> a = {std::move(first), C(r.size)};
      if (input_size) a.push_back(C(*input_size));
      if (r.bilinear) a.push_back(C(r.align));
      a.push_back(C(r.scales));
      return a;
    };
    CheckFiniteDifferences(
        r.name, {Rand({2, 3, 3, 4})},
        [&](const std::vector<RefTensor>& in) { return Out(fwd, args(F(in[0]), std::nullopt)); },
        [&](const std::vector<RefTensor>&, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{Out(bwd, args(F(g), Ints({2, 3, 3, 4})))};
        });
  }
  // Adaptive average pooling 3x3 -> 2x2: rows and columns [0, 2) and [1, 3).
  const RefTensor p = Rand({1, 1, 3, 3});
  const RefTensor pooled = Out("aten._adaptive_avg_pool2d.default", {F(p), C(Ints({2, 2}))});
  ASSERT_EQ(pooled.shape, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_NEAR(pooled.data[3], (p.data[4] + p.data[5] + p.data[7] + p.data[8]) / 4, 1e-12);
  for (std::vector<int64_t> size : {std::vector<int64_t>{2, 2}, {5, 3}, {1, 1}}) {
    CheckFiniteDifferences(
        "adaptive_avg_pool2d", {Rand({2, 2, 3, 4})},
        [&](const std::vector<RefTensor>& in) {
          return Out("aten._adaptive_avg_pool2d.default", {F(in[0]), C(Ints(size))});
        },
        [&](const std::vector<RefTensor>& in, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{
              Out("aten._adaptive_avg_pool2d_backward.default", {F(g), F(in[0])})};
        });
  }
  // Transposed convolution (stride 2, padding 1, output_padding 1, 2 groups): the adjoint of
  // the convolution with the same weight, <conv_t(x), z> = <x, conv(z)>, and its backward by
  // finite differences.
  const RefTensor tx = Rand({2, 4, 3, 3}), tw = Rand({4, 3, 3, 3}), tb = Rand({6});
  auto conv_args = [](bool transposed) {
    return std::vector<In>{C(Ints({2, 2})), C(Ints({1, 1})),
                           C(Ints({1, 1})), C(Value::Bool(transposed)),
                           C(Ints({1, 1})), C(Value::Int(2))};
  };
  auto conv_t = [&](const std::vector<RefTensor>& in) {
    std::vector<In> a = {F(in[0]), F(in[1]), F(in[2])};
    for (In& i : conv_args(true)) a.push_back(std::move(i));
    return Out("aten.convolution.default", a);
  };
  const RefTensor y = conv_t({tx, tw, ref::NewZeros({6})});
  ASSERT_EQ(y.shape, (std::vector<int64_t>{2, 6, 6, 6}));
  const RefTensor z = Rand(y.shape);
  std::vector<In> forward_args = {F(z), F(tw), C(Value())};
  for (In& i : conv_args(false)) forward_args.push_back(i);
  forward_args[7] = C(Ints({0, 0}));  // a convolution has no output_padding
  const RefTensor cz = Out("aten.convolution.default", forward_args);
  ASSERT_EQ(cz.shape, tx.shape);
  EXPECT_NEAR(Dot(y, z), Dot(tx, cz), 1e-9 * std::max(1.0, std::fabs(Dot(y, z))));
  CheckFiniteDifferences("transposed convolution", {tx, tw, tb}, conv_t,
                         [&](const std::vector<RefTensor>& in, const RefTensor& g) {
                           std::vector<In> a = {F(g), F(in[0]), F(in[1]), C(Ints({6}))};
                           for (In& i : conv_args(true)) a.push_back(std::move(i));
                           a.push_back(C(Bools({true, true, true})));
                           return Outs("aten.convolution_backward.default", a);
                         });
  // baddbmm: beta self (broadcast) + alpha batch1 @ batch2, against bmm and the element sum.
  const RefTensor b1 = Rand({2, 3, 4}), b2 = Rand({2, 4, 5}), bias = Rand({3, 1});
  const RefTensor prod = Out("aten.bmm.default", {F(b1), F(b2)});
  const RefTensor fused = Out("aten.baddbmm.default", {F(bias), F(b1), F(b2)}, 0,
                              {{"beta", Value::Double(0.5)}, {"alpha", Value::Double(2.0)}});
  ASSERT_EQ(fused.shape, prod.shape);
  for (int64_t i = 0; i < 30; ++i) {
    EXPECT_NEAR(fused.data[i], 0.5 * bias.data[(i / 5) % 3] + 2 * prod.data[i], 1e-12) << i;
  }
  // NaN propagates: through the group it is in (group norm), to the positions that read it
  // (nearest upsampling, adaptive pooling); other groups and positions stay finite.
  RefTensor with_nan = Rand({1, 4, 2, 2});
  with_nan.data[0] = NAN;
  const RefTensor gn_nan =
      Out("aten.native_group_norm.default",
          {F(with_nan), C(Value()), C(Value()), C(Value::Int(1)), C(Value::Int(4)),
           C(Value::Int(4)), C(Value::Int(2)), C(Value::Double(1e-5))});
  EXPECT_TRUE(std::isnan(gn_nan.data[3]));   // group 0: channels 0 and 1
  EXPECT_FALSE(std::isnan(gn_nan.data[8]));  // group 1
  const RefTensor up_nan =
      Out("aten.upsample_nearest2d.vec", {F(with_nan), C(Value()), C(Doubles({2.0, 2.0}))});
  EXPECT_TRUE(std::isnan(up_nan.data[0]) && std::isnan(up_nan.data[5]));
  EXPECT_FALSE(std::isnan(up_nan.data[2]));
  const RefTensor pool_nan =
      Out("aten._adaptive_avg_pool2d.default", {F(with_nan), C(Ints({1, 1}))});
  EXPECT_TRUE(std::isnan(pool_nan.data[0]));
  EXPECT_FALSE(std::isnan(pool_nan.data[1]));
  // Empty: a split piece of 0 columns (below), an upsampling of an empty batch, and an empty
  // input to adaptive pooling, which ATen refuses as well.
  const RefTensor none_up = Out("aten.upsample_nearest2d.vec",
                                {F(Rand({0, 2, 3, 3})), C(Value()), C(Doubles({2.0, 2.0}))});
  EXPECT_EQ(none_up.shape, (std::vector<int64_t>{0, 2, 6, 6}));
  absl::StatusOr<std::vector<std::optional<RefTensor>>> empty_pool =
      RunKernel("aten._adaptive_avg_pool2d.default", {F(Rand({1, 2, 0, 3})), C(Ints({2, 2}))});
  ASSERT_FALSE(empty_pool.ok());
  EXPECT_THAT(empty_pool.status().message(), ::testing::HasSubstr("empty non-batch dimension"));
  // split_with_sizes: views of 1, 0 and 3 columns.
  const RefTensor sx = Rand({2, 4});
  const std::vector<std::optional<RefTensor>> parts =
      Outs("aten.split_with_sizes.default", {F(sx), C(Ints({1, 0, 3})), C(Value::Int(1))});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1]->shape, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(parts[2]->data[0], sx.data[1]);
  EXPECT_EQ(parts[2]->data[3], sx.data[5]);
}

TEST(KernelTest, ActivationBackwardsMatchFiniteDifferences) {
  for (const char* approx : {"none", "tanh"}) {
    ValueDict kw = {{"approximate", Value::String(approx)}};
    CheckFiniteDifferences(
        absl::StrCat("gelu ", approx), {Rand({3, 1, 4}, -3, 3)},
        [&](const std::vector<RefTensor>& x) { return Out("aten.gelu.default", {F(x[0])}, 0, kw); },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{
              Out("aten.gelu_backward.default", {F(g), F(x[0])}, 0, kw)};
        });
  }
  CheckFiniteDifferences(
      "silu", {Rand({5}, -3, 3)},
      [](const std::vector<RefTensor>& x) { return Out("aten.silu.default", {F(x[0])}); },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{
            Out("aten.silu_backward.default", {F(g), F(x[0])})};
      });
  // hardswish / hardsigmoid (MobileNetV3), away from their kinks at -3 and 3, and ATen's
  // values at and beyond them.
  for (const std::string op : {"hardswish", "hardsigmoid"}) {
    const std::string fwd = absl::StrCat("aten.", op, ".default");
    const std::string bwd = absl::StrCat("aten.", op, "_backward.default");
    RefTensor x = Rand({8}, -2.9, 2.9);
    x.data[0] = -5, x.data[1] = 4.5;
    CheckFiniteDifferences(
        op, {x}, [&](const std::vector<RefTensor>& in) { return Out(fwd, {F(in[0])}); },
        [&](const std::vector<RefTensor>& in, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{Out(bwd, {F(g), F(in[0])})};
        });
  }
  // exp; clamp / clamp_min away from their bounds; norm (p 2, 3, inf) over a dimension.
  CheckFiniteDifferences(
      "exp", {Rand({5}, -2, 2)},
      [](const std::vector<RefTensor>& in) { return Out("aten.exp.default", {F(in[0])}); },
      [](const std::vector<RefTensor>& in, const RefTensor& g) {
        const RefTensor y = Out("aten.exp.default", {F(in[0])});
        return std::vector<std::optional<RefTensor>>{Out("aten.mul.Tensor", {F(g), F(y)})};
      });
  RefTensor spread = Rand({6}, -2, 2);
  spread.data = {-1.7, -0.3, 0.2, 0.45, 1.2, 1.9};
  const RefTensor clamped =
      Out("aten.clamp.default", {F(spread), C(Value::Double(-0.5)), C(Value::Double(0.5))});
  EXPECT_EQ(clamped.data, (std::vector<double>{-0.5, -0.3, 0.2, 0.45, 0.5, 0.5}));
  const RefTensor floor = Out("aten.clamp_min.default", {F(spread), C(Value::Double(0.3))});
  EXPECT_EQ(floor.data, (std::vector<double>{0.3, 0.3, 0.3, 0.45, 1.2, 1.9}));
  const RefTensor le = Out("aten.le.Scalar", {F(spread), C(Value::Double(0.2))});
  EXPECT_EQ(le.data, (std::vector<double>{1, 1, 1, 0, 0, 0}));
  const RefTensor gt = Out("aten.gt.Scalar", {F(spread), C(Value::Double(0.2))});
  EXPECT_EQ(gt.data, (std::vector<double>{0, 0, 0, 1, 1, 1}));
  // ATen's clamp: max wins when min > max; a NaN bound gives NaN.
  const RefTensor crossed =
      Out("aten.clamp.default", {F(spread), C(Value::Double(0.5)), C(Value::Double(-0.5))});
  EXPECT_EQ(crossed.data, std::vector<double>(6, -0.5));
  const RefTensor nan_bound =
      Out("aten.clamp.default", {F(spread), C(Value::Double(NAN)), C(Value::Double(1))});
  EXPECT_TRUE(std::isnan(nan_bound.data[0]));
  for (const Value& p : {Value::Double(2), Value::Double(3), Value::Double(INFINITY), Value()}) {
    const RefTensor m = Rand({3, 4});
    const RefTensor n =
        Out("aten.norm.ScalarOpt_dim", {F(m), C(p), C(Ints({-1})), C(Value::Bool(true))});
    ASSERT_EQ(n.shape, (std::vector<int64_t>{3, 1}));
    for (int r = 0; r < 3; ++r) {
      const double pv = p.is_none() ? 2 : p.as_double();
      double want = 0;
      for (int k = 0; k < 4; ++k) {
        const double v = std::fabs(m.data[r * 4 + k]);
        want = std::isinf(pv) ? std::max(want, v) : want + std::pow(v, pv);
      }
      if (!std::isinf(pv)) want = std::pow(want, 1 / pv);
      EXPECT_NEAR(n.data[r], want, 1e-12);
    }
  }
  {
    Graph g;
    Allocator alloc;
    const NodeId m = *g.AddNode(Op::kPlaceholder, "m", "m", {}, {});
    const NodeId n =
        *g.AddNode(Op::kCallFunction, "op", "aten.bitwise_not.default", {Value::Ref(m)}, {});
    Tensor mask = *Tensor::Empty(alloc, DType::kBool, {3});
    SetElement(mask, 1, 1.0);
    KernelCall kc(g.node(n), alloc, [&](NodeId) { return &mask; });
    absl::StatusOr<std::vector<Tensor>> r = (*CpuKernels().Find("aten.bitwise_not.default"))(kc);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(GetElement((*r)[0], 0), 1.0);
    EXPECT_EQ(GetElement((*r)[0], 1), 0.0);
  }
  RefTensor edges = Rand({4});
  edges.data = {-3, 3, -4, 1.5};
  const RefTensor ones = Out("aten.ones_like.default", {F(edges)});
  const RefTensor hs = Out("aten.hardswish.default", {F(edges)});
  EXPECT_EQ(hs.data, (std::vector<double>{0, 3, 0, 1.5 * 4.5 / 6}));
  const RefTensor hsg = Out("aten.hardswish_backward.default", {F(ones), F(edges)});
  EXPECT_EQ(hsg.data, (std::vector<double>{-0.5, 1.5, 0, 1.0}));  // ATen's -1/2 at -3
  const RefTensor hg = Out("aten.hardsigmoid.default", {F(edges)});
  EXPECT_EQ(hg.data, (std::vector<double>{0, 1, 0, 0.75}));
  const RefTensor hgg = Out("aten.hardsigmoid_backward.default", {F(ones), F(edges)});
  EXPECT_EQ(hgg.data, (std::vector<double>{0, 0, 0, 1.0 / 6}));
  // sigmoid's and tanh's backwards read the forward's result, as the AOT pair saves it.
  for (const std::string op : {"sigmoid", "tanh"}) {
    const std::string fwd = absl::StrCat("aten.", op, ".default");
    const std::string bwd = absl::StrCat("aten.", op, "_backward.default");
    CheckFiniteDifferences(
        op, {Rand({5}, -4, 4)},
        [&](const std::vector<RefTensor>& x) { return Out(fwd, {F(x[0])}); },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{Out(bwd, {F(g), F(Out(fwd, {F(x[0])}))})};
        });
  }
  {
    RefTensor x = Rand({4, 3}, 0.2, 5.8);  // away from ReLU6's kinks at 0 and 6
    x.data[0] = -1;
    x.data[1] = 7;
    CheckFiniteDifferences(
        "hardtanh", {x},
        [](const std::vector<RefTensor>& x) {
          return Out("aten.hardtanh.default", {F(x[0]), C(Value::Double(0)), C(Value::Double(6))});
        },
        [](const std::vector<RefTensor>& x, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{
              Out("aten.hardtanh_backward.default",
                  {F(g), F(x[0]), C(Value::Double(0)), C(Value::Double(6))})};
        });
  }
  RefTensor away = Rand({4, 3}, 0.1, 1);  // away from relu's kink
  for (size_t i = 0; i < away.data.size(); i += 2) away.data[i] = -away.data[i];
  CheckFiniteDifferences(
      "relu", {away},
      [](const std::vector<RefTensor>& x) { return Out("aten.relu.default", {F(x[0])}); },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        const RefTensor y = Out("aten.relu.default", {F(x[0])});
        return std::vector<std::optional<RefTensor>>{
            Out("aten.threshold_backward.default", {F(g), F(y), C(Value::Int(0))})};
      });
  for (bool log : {false, true}) {
    const std::string fwd = log ? "aten._log_softmax.default" : "aten._softmax.default";
    const std::string bwd =
        log ? "aten._log_softmax_backward_data.default" : "aten._softmax_backward_data.default";
    CheckFiniteDifferences(
        fwd, {Rand({2, 1, 5})},
        [&](const std::vector<RefTensor>& x) {
          return Out(fwd, {F(x[0]), C(Value::Int(-1)), C(Value::Bool(false))});
        },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          const RefTensor y = Out(fwd, {F(x[0]), C(Value::Int(-1)), C(Value::Bool(false))});
          return std::vector<std::optional<RefTensor>>{
              Out(bwd, {F(g), F(y), C(Value::Int(-1)), C(Value::String("torch.float64"))})};
        });
  }
}

TEST(KernelTest, NormBackwardsMatchFiniteDifferences) {
  CheckFiniteDifferences(
      "layer norm", {Rand({2, 3, 4}), Rand({4}), Rand({4})},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.native_layer_norm.default",
                   {F(x[0]), C(Ints({4})), F(x[1]), F(x[2]), C(Value::Double(1e-5))});
      },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        std::vector<std::optional<RefTensor>> f =
            Outs("aten.native_layer_norm.default",
                 {F(x[0]), C(Ints({4})), F(x[1]), F(x[2]), C(Value::Double(1e-5))});
        return Outs("aten.native_layer_norm_backward.default",
                    {F(g), F(x[0]), C(Ints({4})), F(*f[1]), F(*f[2]), F(x[1]), F(x[2]),
                     C(Bools({true, true, true}))});
      });
  CheckFiniteDifferences(
      "batch norm", {Rand({3, 2, 2, 3}), Rand({2}), Rand({2})},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.native_batch_norm.default",
                   {F(x[0]), F(x[1]), F(x[2]), C(Value()), C(Value()), C(Value::Bool(true)),
                    C(Value::Double(0.1)), C(Value::Double(1e-5))});
      },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        std::vector<std::optional<RefTensor>> f =
            Outs("aten.native_batch_norm.default",
                 {F(x[0]), F(x[1]), F(x[2]), C(Value()), C(Value()), C(Value::Bool(true)),
                  C(Value::Double(0.1)), C(Value::Double(1e-5))});
        return Outs("aten.native_batch_norm_backward.default",
                    {F(g), F(x[0]), F(x[1]), C(Value()), C(Value()), F(*f[1]), F(*f[2]),
                     C(Value::Bool(true)), C(Value::Double(1e-5)), C(Bools({true, true, true}))});
      });
}

// A (non-transposed) convolution's geometry, and the arguments of aten.convolution and
// aten.convolution_backward over it.
struct ConvGeo {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};
std::vector<In> ConvForwardArgs(const RefTensor& x, const RefTensor& w, const RefTensor& b,
                                const ConvGeo& geo) {
  return {F(x),
          F(w),
          F(b),
          C(Ints(geo.stride)),
          C(Ints(geo.padding)),
          C(Ints(geo.dilation)),
          C(Value::Bool(false)),
          C(Ints({0, 0})),
          C(Value::Int(geo.groups))};
}
std::vector<In> ConvBackwardArgs(const RefTensor& gy, const RefTensor& x, const RefTensor& w,
                                 const ConvGeo& geo, std::vector<bool> mask = {true, true, true}) {
  return {F(gy),
          F(x),
          F(w),
          C(Ints({w.shape[0]})),
          C(Ints(geo.stride)),
          C(Ints(geo.padding)),
          C(Ints(geo.dilation)),
          C(Value::Bool(false)),
          C(Ints({0, 0})),
          C(Value::Int(geo.groups)),
          C(Bools(mask))};
}

// float32 convolutions run one of two paths by output size (nn.cc): few positions per image
// (<= 16) three GEMMs over the whole batch, more oneDNN's direct kernels; float64 runs the
// per-image loops. Each path, forward and both gradients, against float64, with stride,
// padding, dilation and bias.
TEST(KernelTest, Float32ConvolutionsOnBothPathsMatchFloat64) {
  struct Case {
    std::vector<int64_t> x, w;
    ConvGeo geo;
  };
  for (const Case& k :
       {Case{{3, 5, 4, 4}, {7, 5, 3, 3}, {{1, 1}, {1, 1}, {1, 1}}},    // 16 positions: GEMMs
        Case{{2, 4, 7, 6}, {6, 4, 3, 2}, {{2, 2}, {1, 0}, {1, 2}}},    // 8: GEMMs
        Case{{2, 3, 2, 2}, {8, 3, 1, 1}, {{1, 1}, {0, 0}, {1, 1}}},    // 4: GEMMs
        Case{{2, 4, 9, 8}, {6, 4, 3, 3}, {{1, 1}, {1, 1}, {1, 1}}},    // 72: oneDNN
        Case{{1, 3, 11, 10}, {5, 3, 3, 2}, {{2, 1}, {2, 1}, {2, 1}}},  // oneDNN
        // Depthwise: 5 x 5 on 2 x 2 images (oneDNN has only its GEMM fallback for the weight
        // gradient: the direct loop), a channel multiplier of 2 with stride and dilation.
        Case{{2, 6, 2, 2}, {6, 1, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 6}},
        Case{{2, 4, 9, 8}, {8, 1, 3, 3}, {{2, 1}, {1, 2}, {1, 2}, 4}},
        Case{{3, 4, 7, 7}, {4, 1, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 4}}}) {
    const RefTensor x = Rand(k.x), w = Rand(k.w), b = Rand({k.w[0]});
    const RefTensor y =
        ref::Convolution(x, w, &b, k.geo.stride, k.geo.padding, k.geo.dilation, k.geo.groups);
    SCOPED_TRACE(absl::StrCat("output ", absl::StrJoin(y.shape, "x")));
    Check("aten.convolution.default", ConvForwardArgs(x, w, b, k.geo), {y});
    const RefTensor gy = Rand(y.shape);
    const std::vector<In> bwd = ConvBackwardArgs(gy, x, w, k.geo);
    Options f;
    f.dtype = DType::kFloat32;
    absl::StatusOr<std::vector<std::optional<RefTensor>>> single =
        RunKernel("aten.convolution_backward.default", bwd, {}, f);
    absl::StatusOr<std::vector<std::optional<RefTensor>>> dbl =
        RunKernel("aten.convolution_backward.default", bwd, {});
    ASSERT_TRUE(single.ok()) << single.status();
    ASSERT_TRUE(dbl.ok()) << dbl.status();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE((*single)[i] && (*dbl)[i]) << i;
      ExpectClose(*(*single)[i], *(*dbl)[i], 1e-4, absl::StrCat("float vs double, gradient ", i));
    }
    // One gradient alone: the others stay undefined.
    for (int alone : {0, 1}) {
      absl::StatusOr<std::vector<std::optional<RefTensor>>> got =
          RunKernel("aten.convolution_backward.default",
                    ConvBackwardArgs(gy, x, w, k.geo, {alone == 0, alone == 1, false}), {}, f);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_FALSE((*got)[1 - alone].has_value());
      EXPECT_FALSE((*got)[2].has_value());
      ASSERT_TRUE((*got)[alone].has_value());
      ExpectClose(*(*got)[alone], *(*dbl)[alone], 1e-4, absl::StrCat("gradient ", alone, " alone"));
    }
  }
}

TEST(KernelTest, ConvolutionAndPoolingBackwardsMatchFiniteDifferences) {
  for (const ConvGeo& geo : {ConvGeo{{1, 1}, {0, 0}, {1, 1}, 1}, ConvGeo{{2, 1}, {1, 2}, {1, 2}, 2},
                             ConvGeo{{2, 2}, {1, 1}, {1, 1}, 4}}) {  // the last depthwise
    CheckFiniteDifferences(
        absl::StrCat("convolution, groups ", geo.groups),
        {Rand({2, 4, 5, 6}), Rand({4, 4 / geo.groups, 3, 2}), Rand({4})},
        [&](const std::vector<RefTensor>& x) {
          return Out("aten.convolution.default", ConvForwardArgs(x[0], x[1], x[2], geo));
        },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          return Outs("aten.convolution_backward.default", ConvBackwardArgs(g, x[0], x[1], geo));
        });
  }
  auto pool_args = [](const RefTensor& x) {
    return std::vector<In>{F(x),
                           C(Ints({3, 3})),
                           C(Ints({2, 2})),
                           C(Ints({1, 1})),
                           C(Ints({1, 1})),
                           C(Value::Bool(false))};
  };
  CheckFiniteDifferences(
      "max pool", {Rand({1, 2, 6, 5})},
      [&](const std::vector<RefTensor>& x) {
        return Out("aten.max_pool2d_with_indices.default", pool_args(x[0]));
      },
      [&](const std::vector<RefTensor>& x, const RefTensor& g) {
        const RefTensor idx = Out("aten.max_pool2d_with_indices.default", pool_args(x[0]), 1);
        return std::vector<std::optional<RefTensor>>{
            Out("aten.max_pool2d_with_indices_backward.default",
                {F(g), F(x[0]), C(Ints({3, 3})), C(Ints({2, 2})), C(Ints({1, 1})), C(Ints({1, 1})),
                 C(Value::Bool(false)), I(idx)})};
      });
}

// avg_pool2d: the means by hand, then the backward against finite differences of the
// forward over padding, ceil mode, count_include_pad and divisor_override.
TEST(KernelTest, AveragePoolingMatchesItsDefinitionAndFiniteDifferences) {
  RefTensor x;
  x.shape = {1, 1, 4, 4};
  for (int i = 0; i < 16; ++i) x.data.push_back(i);
  const RefTensor m = Out("aten.avg_pool2d.default", {F(x), C(Ints({2, 2}))});
  ASSERT_EQ(m.shape, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(m.data, (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
  // Padding 1, kernel 3, stride 2: the corner window holds 4 of 9 cells; with
  // count_include_pad it divides by 9, without by 4.
  const std::vector<In> padded = {F(x), C(Ints({3, 3})), C(Ints({2, 2})), C(Ints({1, 1}))};
  EXPECT_DOUBLE_EQ(Out("aten.avg_pool2d.default", padded).data[0], (0 + 1 + 4 + 5) / 9.0);
  std::vector<In> exclude = padded;
  exclude.push_back(C(Value::Bool(false)));
  exclude.push_back(C(Value::Bool(false)));
  EXPECT_DOUBLE_EQ(Out("aten.avg_pool2d.default", exclude).data[0], (0 + 1 + 4 + 5) / 4.0);
  for (bool ceil_mode : {false, true}) {
    for (bool include_pad : {true, false}) {
      for (int64_t divisor : {0, 5}) {
        auto args = [&](std::vector<In> head) {
          for (In i :
               {C(Ints({3, 2})), C(Ints({2, 2})), C(Ints({1, 1})), C(Value::Bool(ceil_mode)),
                C(Value::Bool(include_pad)), divisor > 0 ? C(Value::Int(divisor)) : C(Value())}) {
            head.push_back(i);
          }
          return head;
        };
        CheckFiniteDifferences(
            absl::StrCat("avg pool ceil ", ceil_mode, " pad ", include_pad, " div ", divisor),
            {Rand({1, 2, 6, 5})},
            [&](const std::vector<RefTensor>& in) {
              return Out("aten.avg_pool2d.default", args({F(in[0])}));
            },
            [&](const std::vector<RefTensor>& in, const RefTensor& g) {
              return std::vector<std::optional<RefTensor>>{
                  Out("aten.avg_pool2d_backward.default", args({F(g), F(in[0])}))};
            });
      }
    }
  }
}

TEST(KernelTest, AttentionBackwardMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    auto args = [&](const std::vector<RefTensor>& x) {
      return std::vector<In>{F(x[0]), F(x[1]), F(x[2]), C(Value::Double(0.0)),
                             C(Value::Bool(causal))};
    };
    CheckFiniteDifferences(
        absl::StrCat("attention, causal ", causal),
        {Rand({1, 2, 4, 3}), Rand({1, 2, 4, 3}), Rand({1, 2, 4, 2})},
        [&](const std::vector<RefTensor>& x) {
          return Out("aten._scaled_dot_product_flash_attention.default", args(x));
        },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          std::vector<std::optional<RefTensor>> f =
              Outs("aten._scaled_dot_product_flash_attention.default", args(x));
          return Outs(
              "aten._scaled_dot_product_flash_attention_backward.default",
              {F(g), F(x[0]), F(x[1]), F(x[2]), F(*f[0]), F(*f[1]), C(Value()), C(Value()),
               C(Value::Int(4)), C(Value::Int(4)), C(Value::Double(0.0)), C(Value::Bool(causal))});
        });
  }
}

TEST(KernelTest, LossBackwardsMatchFiniteDifferences) {
  RefTensor target = Idx({5}, 4);
  target.data[1] = -100;
  for (int64_t reduction : {0, 1, 2}) {
    auto args = [&](const RefTensor& x) {
      return std::vector<In>{F(x), I(target), C(Value()), C(Value::Int(reduction)),
                             C(Value::Int(-100))};
    };
    CheckFiniteDifferences(
        absl::StrCat("nll loss, reduction ", reduction), {Rand({5, 4})},
        [&](const std::vector<RefTensor>& x) {
          return Out("aten.nll_loss_forward.default", args(x[0]));
        },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          const RefTensor total = Out("aten.nll_loss_forward.default", args(x[0]), 1);
          return std::vector<std::optional<RefTensor>>{
              Out("aten.nll_loss_backward.default",
                  {F(g), F(x[0]), I(target), C(Value()), C(Value::Int(reduction)),
                   C(Value::Int(-100)), F(total)})};
        });
    CheckFiniteDifferences(
        absl::StrCat("mse loss, reduction ", reduction), {Rand({3, 1, 2}), Rand({3, 1, 2})},
        [&](const std::vector<RefTensor>& x) {
          return Out("aten.mse_loss.default", {F(x[0]), F(x[1]), C(Value::Int(reduction))});
        },
        [&](const std::vector<RefTensor>& x, const RefTensor& g) {
          return std::vector<std::optional<RefTensor>>{
              Out("aten.mse_loss_backward.default",
                  {F(g), F(x[0]), F(x[1]), C(Value::Int(reduction))}),
              std::nullopt};
        });
  }
}

// The backward-graph ops that are adjoints of forward ones: each checked as the gradient of
// its forward partner.
TEST(KernelTest, AdjointOpsMatchFiniteDifferences) {
  CheckFiniteDifferences(
      "mm", {Rand({3, 4}), Rand({4, 1})},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.mm.default", {F(x[0]), F(x[1])});
      },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        const RefTensor bt = Out("aten.t.default", {F(x[1])});
        const RefTensor at = Out("aten.t.default", {F(x[0])});
        return std::vector<std::optional<RefTensor>>{Out("aten.mm.default", {F(g), F(bt)}),
                                                     Out("aten.mm.default", {F(at), F(g)})};
      });
  const RefTensor w = Rand({6, 3});
  const RefTensor ids = Idx({2, 5}, 6);
  CheckFiniteDifferences(
      "embedding", {w},
      [&](const std::vector<RefTensor>& x) {
        return Out("aten.embedding.default", {F(x[0]), I(ids)});
      },
      [&](const std::vector<RefTensor>&, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{
            Out("aten.embedding_dense_backward.default",
                {F(g), I(ids), C(Value::Int(6)), C(Value::Int(-1)), C(Value::Bool(false))})};
      });
  CheckFiniteDifferences(
      "expand -> sum", {Rand({3, 1})},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.clone.default",
                   {F(Out("aten.expand.default", {F(x[0]), C(Ints({2, 3, 4}))}))});
      },
      [](const std::vector<RefTensor>&, const RefTensor& g) {
        const RefTensor s =
            Out("aten.sum.dim_IntList", {F(g), C(Ints({0, 2})), C(Value::Bool(true))});
        return std::vector<std::optional<RefTensor>>{
            Out("aten.view.default", {F(s), C(Ints({3, 1}))})};
      });
  const RefTensor sel = Idx({4}, 5);
  CheckFiniteDifferences(
      "index_select -> index_add", {Rand({5, 2})},
      [&](const std::vector<RefTensor>& x) {
        return Out("aten.index_select.default", {F(x[0]), C(Value::Int(0)), I(sel)});
      },
      [&](const std::vector<RefTensor>&, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{Out(
            "aten.index_add.default", {F(ref::NewZeros({5, 2})), C(Value::Int(0)), I(sel), F(g)})};
      });
  CheckFiniteDifferences(
      "topk -> scatter", {Rand({3, 5})},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.topk.default", {F(x[0]), C(Value::Int(2))});
      },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        const RefTensor idx = Out("aten.topk.default", {F(x[0]), C(Value::Int(2))}, 1);
        return std::vector<std::optional<RefTensor>>{
            Out("aten.scatter.src", {F(ref::NewZeros({3, 5})), C(Value::Int(-1)), I(idx), F(g)})};
      });
  CheckFiniteDifferences(
      "slice -> slice_backward", {Rand({2, 7})},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.clone.default",
                   {F(Out("aten.slice.Tensor", {F(x[0]), C(Value::Int(1)), C(Value::Int(1)),
                                                C(Value::Int(6)), C(Value::Int(2))}))});
      },
      [](const std::vector<RefTensor>&, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{Out(
            "aten.slice_backward.default", {F(g), C(Ints({2, 7})), C(Value::Int(1)),
                                            C(Value::Int(1)), C(Value::Int(6)), C(Value::Int(2))})};
      });
  CheckFiniteDifferences(
      "pow and rsqrt", {Rand({4}, 0.5, 2)},
      [](const std::vector<RefTensor>& x) {
        return Out("aten.rsqrt.default",
                   {F(Out("aten.pow.Tensor_Scalar", {F(x[0]), C(Value::Int(2))}))});
      },
      [](const std::vector<RefTensor>& x, const RefTensor& g) {
        // d rsqrt(u) = -0.5 u^-1.5; d x^2 = 2x (docs/ops.md's formulas, as graphs emit them).
        const RefTensor u = Out("aten.pow.Tensor_Scalar", {F(x[0]), C(Value::Int(2))});
        const RefTensor y = Out("aten.rsqrt.default", {F(u)});
        const RefTensor y3 = Out("aten.pow.Tensor_Scalar", {F(y), C(Value::Int(3))});
        const RefTensor du = Out(
            "aten.mul.Tensor", {F(g), F(Out("aten.mul.Scalar", {F(y3), C(Value::Double(-0.5))}))});
        return std::vector<std::optional<RefTensor>>{
            Out("aten.mul.Tensor",
                {F(du), F(Out("aten.mul.Scalar", {F(x[0]), C(Value::Double(2.0))}))})};
      });
}

TEST(KernelTest, ViewsShareStorageAndFollowPyTorchsStrideRules) {
  Graph g;
  Allocator alloc;
  const NodeId p = *g.AddNode(Op::kPlaceholder, "p", "p", {}, {});
  Tensor x = *Tensor::Empty(alloc, DType::kFloat32, {2, 3, 4});
  for (int64_t i = 0; i < 24; ++i) SetElement(x, i, static_cast<double>(i));
  Tensor xt = *x.Transpose(0, 1);  // [3, 2, 4], strides [4, 12, 1]
  auto run = [&](const Tensor& in, const std::string& target,
                 std::vector<Value> args) -> absl::StatusOr<std::vector<Tensor>> {
    Graph h = g;
    args.insert(args.begin(), Value::Ref(p));
    const NodeId c = *h.AddNode(Op::kCallFunction, "v", target, args, {});
    KernelCall call(h.node(c), alloc, [&](NodeId) { return &in; });
    return (*CpuKernels().Find(target))(call);
  };
  const int64_t before = alloc.live(Pool::kValues);
  for (const auto& [target, args] : std::vector<std::pair<std::string, std::vector<Value>>>{
           {"aten.view.default", {Ints({3, 2, 2, 2})}},  // splits the contiguous last dim
           {"aten.transpose.int", {Value::Int(0), Value::Int(2)}},
           {"aten.unsqueeze.default", {Value::Int(1)}},
           {"aten.expand.default", {Ints({5, 3, 2, 4})}},
           {"aten.slice.Tensor", {Value::Int(2), Value::Int(1), Value::Int(3)}},
           {"aten.split.Tensor", {Value::Int(2), Value::Int(2)}}}) {
    absl::StatusOr<std::vector<Tensor>> r = run(xt, target, args);
    ASSERT_TRUE(r.ok()) << target << ": " << r.status();
    for (const Tensor& t : *r) EXPECT_TRUE(t.SharesStorageWith(x)) << target;
  }
  EXPECT_EQ(alloc.live(Pool::kValues), before);
  // Where the layout allows no view, view, reshape and _reshape_alias copy (an exported
  // graph's view was valid in torch's layout, which may not be this executor's: view.cc),
  // and the copy holds the row-major elements.
  for (const char* target :
       {"aten.view.default", "aten.reshape.default", "aten._reshape_alias.default"}) {
    std::vector<Value> args = {Ints({24})};
    if (std::string(target) == "aten._reshape_alias.default") args.push_back(Ints({1}));
    absl::StatusOr<std::vector<Tensor>> copy = run(xt, target, args);
    ASSERT_TRUE(copy.ok()) << target << ": " << copy.status();
    EXPECT_FALSE((*copy)[0].SharesStorageWith(x)) << target;
    for (int64_t i = 0; i < 24; ++i) {  // xt[a][b][c] = x[b][a][c] = 12 b + 4 a + c
      EXPECT_EQ(GetElement((*copy)[0], i), 12 * ((i / 4) % 2) + 4 * (i / 8) + i % 4) << i;
    }
  }
}

TEST(KernelTest, BadArgumentsAreErrorsNamingTheNode) {
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r =
      RunKernel("aten.mm.default", {F(Rand({2, 3})), F(Rand({4, 2}))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("node 'op' (aten.mm.default)"));
  r = RunKernel("aten.embedding.default", {F(Rand({3, 2})), I(ref::Make({2}, {1, 7}))});
  ASSERT_FALSE(r.ok());
  r = RunKernel("aten.embedding.default", {F(Rand({3, 2})), I(ref::Make({1}, {5}))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("out of range"));
  r = RunKernel("aten.gelu.default", {F(Rand({2})), C(Value::String("exact"))});
  ASSERT_FALSE(r.ok());
  r = RunKernel("aten.relu.default", {I(Idx({2}, 3))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("int64"));
  // A dimension named twice (0 and -2 of a matrix): ATen refuses; it once summed once.
  r = RunKernel("aten.sum.dim_IntList", {F(Rand({2, 3})), C(Ints({0, -2})), C(Value::Bool(false))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("appears more than once"));
  // A reduction outside ATen's enum (0 none, 1 mean, 2 sum): ATen refuses; it once summed.
  for (int64_t reduction : {3, -1}) {
    r = RunKernel("aten.mse_loss.default",
                  {F(Rand({2, 3})), F(Rand({2, 3})), C(Value::Int(reduction))});
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("argument 'reduction' is"));
  }
  r = RunKernel("aten.nll_loss_forward.default", {F(Rand({2, 3})), I(Idx({2}, 3)), C(Value()),
                                                  C(Value::Int(7)), C(Value::Int(-100))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("argument 'reduction' is 7"));
  // arange with a negative end: ATen refuses; it once gave an empty tensor. End 0 is empty.
  r = RunKernel("aten.arange.default", {C(Value::Int(-3))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("(start 0, end -3)"));
  r = RunKernel("aten.arange.default", {C(Value::Int(0))});
  ASSERT_TRUE(r.ok()) << r.status();
}

// What a review found: inputs that read out of bounds or differ from PyTorch before.
TEST(KernelTest, EdgeCasesAreErrorsOrPyTorchsAnswer) {
  const RefTensor scalar = ref::Make({}, {1.5});
  EXPECT_FALSE(RunKernel("aten.index_select.default",
                         {F(scalar), C(Value::Int(0)), I(ref::Make({2}, {0, 0}))})
                   .ok());
  EXPECT_FALSE(RunKernel("aten.split.Tensor", {F(scalar), C(Value::Int(1))}).ok());
  EXPECT_FALSE(RunKernel("aten.slice.Tensor",
                         {F(scalar), C(Value::Int(0)), C(Value::Int(0)), C(Value::Int(1))})
                   .ok());
  EXPECT_FALSE(
      RunKernel("aten.view.default", {F(Rand({2})), C(Ints({3, 6148914691236517206}))}).ok());
  EXPECT_FALSE(RunKernel("aten.convolution.default",
                         {F(Rand({1, 1, 4, 4})), F(Rand({1, 1, 5, 5})), C(Value()), C(Ints({2, 2})),
                          C(Ints({0, 0})), C(Ints({1, 1})), C(Value::Bool(false)), C(Ints({0, 0})),
                          C(Value::Int(1))})
                   .ok());
  EXPECT_FALSE(RunKernel("aten.max_pool2d_with_indices.default",
                         {F(Rand({1, 1, 2, 2})), C(Ints({3, 3})), C(Ints({2, 2})), C(Ints({0, 0}))})
                   .ok());
  // relu keeps NaN; add.Scalar takes alpha; topk ranks NaN above every number.
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r =
      RunKernel("aten.relu.default", {F(ref::Make({2}, {NAN, -1}))});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan((*r)[0]->data[0]));
  r = RunKernel("aten.hardtanh.default",
                {F(ref::Make({2}, {NAN, 9})), C(Value::Double(0)), C(Value::Double(6))});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan((*r)[0]->data[0]));
  EXPECT_EQ((*r)[0]->data[1], 6);
  EXPECT_FALSE(RunKernel("aten.hardtanh.default",
                         {F(ref::Make({1}, {1})), C(Value::Double(6)), C(Value::Double(0))})
                   .ok());
  r = RunKernel("aten.add.Scalar", {F(ref::Make({1}, {1})), C(Value::Int(1)), C(Value::Int(2))});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0]->data[0], 3);
  r = RunKernel("aten.topk.default", {F(ref::Make({4}, {1, NAN, 3, 2})), C(Value::Int(2))});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[1]->data, (std::vector<double>{1, 2}));
}

// The ops exported graphs add (docs/interop.md): bmm against per-batch products, triu and
// tril, _reshape_alias as a strided view, div.Tensor with a broadcast divisor.
TEST(KernelTest, OpsOfExportedGraphs) {
  const RefTensor a = Rand({2, 3, 4}), b = Rand({2, 4, 5});
  RefTensor want;
  want.shape = {2, 3, 5};
  for (int64_t i = 0; i < 2; ++i) {
    RefTensor ai, bi;
    ai.shape = {3, 4};
    bi.shape = {4, 5};
    ai.data.assign(a.data.begin() + i * 12, a.data.begin() + (i + 1) * 12);
    bi.data.assign(b.data.begin() + i * 20, b.data.begin() + (i + 1) * 20);
    const RefTensor p = ref::Mm(ai, bi);
    want.data.insert(want.data.end(), p.data.begin(), p.data.end());
  }
  Check("aten.bmm.default", {F(a), F(b)}, {want});
  const RefTensor sq = Rand({2, 3, 3});
  RefTensor upper = sq;
  for (int64_t i = 0; i < upper.data.size(); ++i) {
    if ((i % 3) - (i / 3) % 3 < 1) upper.data[i] = 0;  // diagonal 1: strictly above
  }
  Check("aten.triu.default", {F(sq), C(Value::Int(1))}, {upper});
  // tril (transformers' causal masks under torch 2.x): on and below diagonal -1 of a 3 x 4,
  // and the sum of tril(d) and triu(d + 1) is the whole matrix.
  const RefTensor wide = Rand({3, 4});
  RefTensor lower = wide;
  for (int64_t i = 0; i < lower.data.size(); ++i) {
    if ((i % 4) - i / 4 > -1) lower.data[i] = 0;  // column - row > diagonal: zeroed
  }
  Check("aten.tril.default", {F(wide), C(Value::Int(-1))}, {lower});
  const RefTensor lo = Out("aten.tril.default", {F(wide), C(Value::Int(1))});
  const RefTensor hi = Out("aten.triu.default", {F(wide), C(Value::Int(2))});
  for (int64_t i = 0; i < wide.data.size(); ++i) {
    EXPECT_EQ(lo.data[i] + hi.data[i], wide.data[i]) << i;
  }
  RefTensor flat = a;
  flat.shape = {6, 4};
  // Its strides are absolute (as_strided's): exported graphs use it on contiguous inputs only.
  absl::StatusOr<std::vector<std::optional<RefTensor>>> viewed =
      RunKernel("aten._reshape_alias.default", {F(a), C(Ints({6, 4})), C(Ints({4, 1}))});
  ASSERT_TRUE(viewed.ok()) << viewed.status();
  ExpectClose(*(*viewed)[0], flat, 0, "_reshape_alias");
  const RefTensor s0 = ref::Make({}, {2.5});
  Check("aten.div.Tensor", {F(a), F(s0)}, {ref::DivScalar(a, 2.5)});
}

// ---- mixed dtypes: graph/type_promotion.h's rule, in the kernels and the shape rules ------

// One operand of a mixed-dtype case: a tensor of `dtype` holding `values` in `shape`, or a
// constant argument.
struct Operand {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
  std::optional<Value> constant;
};
Operand T(DType d, std::vector<int64_t> shape, std::vector<double> values) {
  return {d, std::move(shape), std::move(values), std::nullopt};
}
Operand K(Value v) { return {DType::kFloat32, {}, {}, std::move(v)}; }

struct Mixed {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// Runs `target` on the operands, checking first that the shape rule (which sees each
// tensor's shape and dtype as a graph's meta states them) gives the dtype and shape the
// kernel returns: both decide by graph/type_promotion.h. The kernel's result, or its error.
absl::StatusOr<Mixed> RunMixed(const std::string& target, const std::vector<Operand>& ops,
                               ValueDict kwargs = {}) {
  Graph g;
  Allocator alloc;
  std::vector<Value> args;
  absl::flat_hash_map<NodeId, Tensor> by_id;
  for (size_t k = 0; k < ops.size(); ++k) {
    const Operand& o = ops[k];
    if (o.constant) {
      args.push_back(*o.constant);
      continue;
    }
    const NodeId id = *g.AddNode(Op::kPlaceholder, absl::StrCat("p", k), "p", {}, {});
    g.mutable_node(id).mutable_meta().set_shape(Shape(o.shape.begin(), o.shape.end()));
    g.mutable_node(id).mutable_meta().set_dtype(std::string(DTypeName(o.dtype)));
    Tensor t = *Tensor::Empty(alloc, o.dtype, o.shape);
    for (size_t i = 0; i < o.values.size(); ++i)
      SetElement(t, static_cast<int64_t>(i), o.values[i]);
    by_id[id] = t;
    args.push_back(Value::Ref(id));
  }
  const NodeId call = *g.AddNode(Op::kCallFunction, "op", target, args, kwargs);
  KernelCall c(g.node(call), alloc, [&](NodeId id) -> const Tensor* { return &by_id.at(id); });
  absl::StatusOr<std::vector<Tensor>> out = (*CpuKernels().Find(target))(c);
  absl::StatusOr<std::vector<TensorType>> rule = InferTypes(g, g.node(call));
  if (!out.ok()) {
    // The rule refuses what the kernel refuses for its dtype (not for a value: a division
    // by zero is the kernel's alone).
    if (rule.ok() && !absl::StrContains(out.status().message(), "by zero")) {
      ADD_FAILURE() << target << ": the kernel refuses (" << out.status()
                    << ") what the rule types as " << FormatType((*rule)[0]);
    }
    return out.status();
  }
  Mixed m{(*out)[0].dtype(), (*out)[0].shape(), {}};
  for (int64_t i = 0; i < (*out)[0].numel(); ++i) m.values.push_back(GetElement((*out)[0], i));
  EXPECT_TRUE(rule.ok()) << target << ": " << rule.status();
  if (rule.ok()) {
    EXPECT_EQ((*rule)[0].dtype, DTypeName(m.dtype)) << target << ": rule and kernel differ";
    EXPECT_EQ(std::vector<int64_t>((*rule)[0].shape.begin(), (*rule)[0].shape.end()), m.shape)
        << target;
  }
  return m;
}

void ExpectMixed(const std::string& target, const std::vector<Operand>& ops, DType dtype,
                 std::vector<double> values, ValueDict kwargs = {}) {
  absl::StatusOr<Mixed> m = RunMixed(target, ops, std::move(kwargs));
  ASSERT_TRUE(m.ok()) << target << ": " << m.status();
  EXPECT_EQ(DTypeName(m->dtype), DTypeName(dtype)) << target;
  EXPECT_EQ(m->values, values) << target;
}

// Hand-computed results of mixed-dtype ops, each in the dtype torch gives it.
TEST(KernelTest, MixedDtypesComputeInATensResultType) {
  const DType f32 = DType::kFloat32, f64 = DType::kFloat64, i64 = DType::kInt64,
              i32 = DType::kInt32, b = DType::kBool;
  const Operand x = T(f32, {2, 3}, {1.5, -2, 3, 4, -5, 6.25});
  const Operand mask = T(b, {2, 3}, {1, 0, 1, 0, 0, 1});
  // The mask multiply, either way round and broadcast.
  ExpectMixed("aten.mul.Tensor", {x, mask}, f32, {1.5, 0, 3, 0, 0, 6.25});
  ExpectMixed("aten.mul.Tensor", {mask, x}, f32, {1.5, 0, 3, 0, 0, 6.25});
  ExpectMixed("aten.mul.Tensor", {x, T(b, {3}, {0, 1, 1})}, f32, {0, -2, 3, 0, -5, 6.25});
  ExpectMixed("aten.mul.Tensor", {mask, T(b, {3}, {1, 1, 0})}, b, {1, 0, 0, 0, 0, 0});
  ExpectMixed("aten.mul.Tensor", {mask, K(Value::Double(0.5))}, f32, {0.5, 0, 0.5, 0, 0, 0.5});
  ExpectMixed("aten.mul.Tensor", {x, K(Value::Bool(true))}, f32, {1.5, -2, 3, 4, -5, 6.25});
  // Integers stay integers, exactly: 2^60 - (2^60 - 1) is 1 in int64 (in double, 0).
  const Operand i = T(i64, {3}, {0, 7, -7});
  ExpectMixed("aten.sub.Tensor",
              {T(i64, {1}, {1152921504606846976.0}), K(Value::Int(1152921504606846975))}, i64, {1});
  ExpectMixed("aten.sub.Tensor", {i, T(i64, {3}, {1, 2, 3})}, i64, {-1, 5, -10});
  ExpectMixed("aten.sub.Tensor", {i, K(Value::Int(3))}, i64, {-3, 4, -10});
  ExpectMixed("aten.sub.Tensor", {i, T(i64, {3}, {1, 2, 3})}, i64, {-2, 3, -13},
              {{"alpha", Value::Int(2)}});
  ExpectMixed("aten.add.Tensor", {T(i32, {2}, {1, 2}), T(i64, {2}, {10, 20})}, i64, {11, 22});
  ExpectMixed("aten.add.Tensor", {T(i32, {2}, {1, 2}), T(i64, {}, {5})}, i32, {6, 7});
  ExpectMixed("aten.add.Tensor", {mask, mask}, b, {1, 0, 1, 0, 0, 1});  // or
  ExpectMixed("aten.add.Tensor", {mask, K(Value::Int(1))}, i64, {2, 1, 2, 1, 1, 2});
  ExpectMixed("aten.mul.Scalar", {i, K(Value::Int(3))}, i64, {0, 21, -21});
  ExpectMixed("aten.add.Scalar", {i, K(Value::Double(0.5))}, f32, {0.5, 7.5, -6.5});
  ExpectMixed("aten.neg.default", {i}, i64, {0, -7, 7});
  ExpectMixed("aten.pow.Tensor_Scalar", {i, K(Value::Int(3))}, i64, {0, 343, -343});
  ExpectMixed("aten.pow.Tensor_Scalar", {T(i64, {2}, {4, 9}), K(Value::Double(0.5))}, f32, {2, 3});
  // Zero-dim tensors count only from a higher category; numbers likewise.
  ExpectMixed("aten.add.Tensor", {i, T(f64, {}, {0.25})}, f64, {0.25, 7.25, -6.75});
  ExpectMixed("aten.add.Tensor", {T(f32, {2}, {1, 2}), T(f64, {}, {0.5})}, f32, {1.5, 2.5});
  ExpectMixed("aten.mul.Tensor", {i, K(Value::Double(2.5))}, f32, {0, 17.5, -17.5});
  // True division of integers is float32; rounding modes keep integers.
  ExpectMixed("aten.div.Tensor", {i, T(i64, {3}, {2, 2, 2})}, f32, {0, 3.5, -3.5});
  ExpectMixed("aten.div.Scalar", {i, K(Value::Int(2))}, f32, {0, 3.5, -3.5});
  ExpectMixed("aten.div.Tensor", {T(i32, {2}, {1, 3}), T(f64, {2}, {4, 4})}, f64, {0.25, 0.75});
  ExpectMixed("aten.div.Tensor_mode", {i, K(Value::Int(2))}, i64, {0, 3, -4},
              {{"rounding_mode", Value::String("floor")}});
  ExpectMixed("aten.div.Tensor_mode", {i, T(i64, {3}, {2, 2, 2})}, i64, {0, 3, -3},
              {{"rounding_mode", Value::String("trunc")}});
  // Sums of bool and integers are int64; a dtype keyword decides; mean of integers needs one.
  ExpectMixed("aten.sum.default", {mask}, i64, {3});
  ExpectMixed("aten.sum.dim_IntList", {mask, K(Ints({1}))}, i64, {2, 1});
  ExpectMixed("aten.sum.dim_IntList", {mask, K(Ints({0})), K(Value::Bool(true))}, i64, {1, 0, 2});
  ExpectMixed("aten.sum.default", {T(i32, {3}, {2147483647, 2147483647, 2})}, i64, {4294967296});
  ExpectMixed("aten.sum.default", {mask}, f32, {3}, {{"dtype", Value::String("torch.float32")}});
  ExpectMixed("aten.sum.default", {x}, f64, {7.75}, {{"dtype", Value::String("torch.float64")}});
  ExpectMixed("aten.mean.default", {i}, f64, {0}, {{"dtype", Value::String("torch.float64")}});
  ExpectMixed("aten.mean.dim", {T(i32, {2, 2}, {1, 2, 4, 4}), K(Ints({1}))}, f32, {1.5, 4},
              {{"dtype", Value::String("torch.float32")}});
  // Comparisons are bool; where and clamp promote; the floating unary ops make floats.
  ExpectMixed("aten.lt.Scalar", {i, K(Value::Double(0.5))}, b, {1, 0, 1});
  ExpectMixed("aten.where.self", {T(b, {3}, {1, 0, 1}), i, T(f32, {}, {0.5})}, f32, {0, 0.5, -7});
  ExpectMixed("aten.where.self", {T(b, {3}, {1, 0, 1}), i, T(i64, {3}, {1, 2, 3})}, i64,
              {0, 2, -7});
  ExpectMixed("aten.clamp.default", {i, K(Value::Double(-1.5)), K(Value::Double(2.5))}, f32,
              {0, 2.5, -1.5});
  ExpectMixed("aten.exp.default", {T(i64, {2}, {0, 0})}, f32, {1, 1});
  ExpectMixed("aten.sigmoid.default", {T(b, {1}, {0})}, f32, {0.5});
  // What ATen refuses, the kernels and the rules refuse alike.
  struct Refused {
    std::string target;
    std::vector<Operand> ops;
    ValueDict kwargs;
  };
  for (const Refused& r : std::vector<Refused>{
           {"aten.sub.Tensor", {mask, mask}, {}},
           {"aten.sub.Tensor", {x, mask}, {}},
           {"aten.neg.default", {mask}, {}},
           {"aten.mean.default", {i}, {}},
           {"aten.add.Tensor", {i, i}, {{"alpha", Value::Double(0.5)}}},  // integers
           {"aten.add.Tensor", {x, x}, {{"alpha", Value::Bool(true)}}},
       }) {
    EXPECT_FALSE(RunMixed(r.target, r.ops, r.kwargs).ok()) << r.target;
  }
  absl::StatusOr<Mixed> zero = RunMixed("aten.div.Tensor_mode", {i, K(Value::Int(0))},
                                        {{"rounding_mode", Value::String("floor")}});
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), ::testing::HasSubstr("integer division by zero"));
}

// The kernel refuses `ins` with an error naming the node.
void ExpectRefused(const std::string& target, const std::vector<In>& ins) {
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r = RunKernel(target, ins);
  ASSERT_FALSE(r.ok()) << target;
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("node 'op'")) << target;
}

// max.dim and amax against plain loops: ATen's first maximal index on ties, NaN propagated
// (max.dim's index the first NaN's), integers exact, a 0-d self its own maximum.
TEST(KernelTest, MaxReductionsMatchTheirDefinitions) {
  const RefTensor x = Rand({3, 4, 5});
  RefTensor values, indices;  // over dim 1, kept
  values.shape = indices.shape = {3, 1, 5};
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t q = 0; q < 5; ++q) {
      double m = x.data[p * 20 + q];
      int64_t at = 0;
      for (int64_t i = 1; i < 4; ++i) {
        if (x.data[p * 20 + i * 5 + q] > m) m = x.data[p * 20 + i * 5 + q], at = i;
      }
      values.data.push_back(m);
      indices.data.push_back(static_cast<double>(at));
    }
  }
  Check("aten.max.dim", {F(x), C(Value::Int(-2)), C(Value::Bool(true))}, {values, indices});
  RefTensor amax;  // over dims 0 and 2
  amax.shape = {4};
  for (int64_t i = 0; i < 4; ++i) {
    double m = -INFINITY;
    for (int64_t p = 0; p < 3; ++p) {
      for (int64_t q = 0; q < 5; ++q) m = std::max(m, x.data[p * 20 + i * 5 + q]);
    }
    amax.data.push_back(m);
  }
  Check("aten.amax.default", {F(x), C(Ints({0, -1}))}, {amax});
  EXPECT_EQ(Out("aten.amax.default", {F(x)}).data[0],
            *std::max_element(x.data.begin(), x.data.end()));
  const RefTensor ties = ref::Make({2, 4}, {1, 3, 3, 2, 2, NAN, 7, NAN});
  EXPECT_EQ(Out("aten.max.dim", {F(ties), C(Value::Int(1))}, 1).data, (std::vector<double>{1, 1}));
  const RefTensor tv = Out("aten.max.dim", {F(ties), C(Value::Int(1))});
  EXPECT_EQ(tv.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(tv.data[0], 3);
  EXPECT_TRUE(std::isnan(tv.data[1]));
  const RefTensor am = Out("aten.amax.default", {F(ties), C(Ints({1})), C(Value::Bool(true))});
  EXPECT_EQ(am.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(am.data[0], 3);
  EXPECT_TRUE(std::isnan(am.data[1]));
  const RefTensor ints = ref::Make({2, 3}, {4, 9, 9, -1, -5, -2});
  EXPECT_EQ(Out("aten.max.dim", {I(ints), C(Value::Int(1))}).data, (std::vector<double>{9, -1}));
  EXPECT_EQ(Out("aten.max.dim", {I(ints), C(Value::Int(1))}, 1).data, (std::vector<double>{1, 0}));
  EXPECT_EQ(Out("aten.amax.default", {I(ints), C(Ints({0}))}).data, (std::vector<double>{4, 9, 9}));
  const RefTensor scalar = ref::Make({}, {2.5});
  const RefTensor sv = Out("aten.max.dim", {F(scalar), C(Value::Int(-1))});
  EXPECT_TRUE(sv.shape.empty());
  EXPECT_EQ(sv.data, (std::vector<double>{2.5}));
  // What ATen refuses: a dimension out of range, an empty reduced dimension, a repeated one.
  const RefTensor empty = ref::Make({2, 0}, {});
  ExpectRefused("aten.max.dim", {F(x), C(Value::Int(3))});
  ExpectRefused("aten.max.dim", {F(empty), C(Value::Int(1))});
  ExpectRefused("aten.amax.default", {F(x), C(Ints({1, -2}))});
  ExpectRefused("aten.amax.default", {F(empty)});
  ExpectRefused("aten.amax.default", {F(empty), C(Ints({1}))});
  EXPECT_EQ(Out("aten.max.dim", {F(empty), C(Value::Int(0))}).shape, (std::vector<int64_t>{0}));
  EXPECT_EQ(Out("aten.amax.default", {F(empty), C(Ints({0}))}).shape, (std::vector<int64_t>{0}));
}

// softplus and its backward against ATen's formula (log1p(exp(beta x)) / beta; x past the
// threshold) and finite differences; floor, including negative halves.
TEST(KernelTest, SoftplusAndFloorMatchTheirDefinitions) {
  const RefTensor x = ref::Make({5}, {-3, -0.5, 0, 2, 30});
  const RefTensor sp = Out("aten.softplus.default", {F(x)});
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(sp.data[i], std::log1p(std::exp(x.data[i])), 1e-6) << i;
  }
  EXPECT_EQ(sp.data[4], 30);  // beta x > threshold: x itself
  const RefTensor sp2 =
      Out("aten.softplus.default", {F(x), C(Value::Double(2)), C(Value::Double(3))});
  EXPECT_NEAR(sp2.data[1], std::log1p(std::exp(-1.0)) / 2, 1e-6);
  EXPECT_EQ(sp2.data[3], 2);  // 2 x = 4 > 3
  CheckFiniteDifferences(
      "softplus", {Rand({3, 4}, -2, 2)},
      [](const std::vector<RefTensor>& in) {
        return Out("aten.softplus.default", {F(in[0]), C(Value::Double(1.5)), C(Value::Int(20))});
      },
      [](const std::vector<RefTensor>& in, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{
            Out("aten.softplus_backward.default",
                {F(g), F(in[0]), C(Value::Double(1.5)), C(Value::Int(20))})};
      });
  const RefTensor fl = Out("aten.floor.default", {F(ref::Make({4}, {-1.5, -0.5, 0.5, 2}))});
  EXPECT_EQ(fl.data, (std::vector<double>{-2, -1, 0, 2}));
  const RefTensor rc = Out("aten.reciprocal.default", {F(ref::Make({3}, {-4, 0.5, 2}))});
  EXPECT_EQ(rc.data, (std::vector<double>{-0.25, 2, 0.5}));
}

// leaky_relu and PReLU (1.13's prelu pair and 2.x's _prelu_kernel pair, one formula) against
// their definitions and finite differences away from the kink at 0.
TEST(KernelTest, LeakyReluAndPreluMatchTheirDefinitions) {
  const RefTensor edges = ref::Make({5}, {-2, -0.5, 0, 1.5, NAN});
  const RefTensor lr = Out("aten.leaky_relu.default", {F(edges)});
  EXPECT_EQ(std::vector<double>(lr.data.begin(), lr.data.begin() + 4),
            (std::vector<double>{-0.02, -0.005, 0, 1.5}));
  EXPECT_TRUE(std::isnan(lr.data[4]));
  const RefTensor ones = ref::Make({5}, {1, 1, 1, 1, 1});
  const RefTensor lrg = Out("aten.leaky_relu_backward.default",
                            {F(ones), F(edges), C(Value::Double(0.2)), C(Value::Bool(false))});
  EXPECT_EQ(std::vector<double>(lrg.data.begin(), lrg.data.begin() + 4),
            (std::vector<double>{0.2, 0.2, 0.2, 1}));
  absl::StatusOr<std::vector<std::optional<RefTensor>>> refused =
      RunKernel("aten.leaky_relu_backward.default",
                {F(ones), F(edges), C(Value::Double(-0.2)), C(Value::Bool(true))});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("self_is_result"));
  RefTensor away = Rand({3, 4}, 0.1, 1);
  for (size_t i = 0; i < away.data.size(); i += 2) away.data[i] = -away.data[i];
  CheckFiniteDifferences(
      "leaky_relu", {away},
      [](const std::vector<RefTensor>& in) {
        return Out("aten.leaky_relu.default", {F(in[0]), C(Value::Double(0.3))});
      },
      [](const std::vector<RefTensor>& in, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{
            Out("aten.leaky_relu_backward.default",
                {F(g), F(in[0]), C(Value::Double(0.3)), C(Value::Bool(false))})};
      });
  RefTensor x = Rand({2, 3, 4}, 0.1, 1);
  for (size_t i = 0; i < x.data.size(); i += 3) x.data[i] = -x.data[i];
  const RefTensor w = Rand({3});
  RefTensor want = x;
  for (size_t i = 0; i < x.data.size(); ++i) {
    if (x.data[i] <= 0) want.data[i] = w.data[(i / 4) % 3] * x.data[i];
  }
  Check("aten.prelu.default", {F(x), F(w)}, {want});
  RefTensor w3 = w;
  w3.shape = {1, 3, 1};
  Check("aten._prelu_kernel.default", {F(x), F(w3)}, {want});
  const RefTensor w1 = ref::Make({1}, {0.25});
  EXPECT_EQ(Out("aten.prelu.default", {F(edges), F(w1)}).data[0], -0.5);
  CheckFiniteDifferences(
      "prelu", {x, w},
      [](const std::vector<RefTensor>& in) {
        return Out("aten.prelu.default", {F(in[0]), F(in[1])});
      },
      [](const std::vector<RefTensor>& in, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{
            Out("aten.prelu_backward.default", {F(g), F(in[0]), F(in[1])}, 0),
            Out("aten.prelu_backward.default", {F(g), F(in[0]), F(in[1])}, 1)};
      });
  // 2.x's kernel leaves the weight's gradient unsummed: its sums are 1.13's.
  const RefTensor g = Rand({2, 3, 4});
  const RefTensor gw = Out("aten.prelu_backward.default", {F(g), F(x), F(w)}, 1);
  const RefTensor gw_full = Out("aten._prelu_kernel_backward.default", {F(g), F(x), F(w3)}, 1);
  ASSERT_EQ(gw_full.shape, x.shape);
  ExpectClose(ref::SumDimIntList(gw_full, {0, 2}, false), gw, 1e-12, "_prelu_kernel_backward");
  EXPECT_FALSE(RunKernel("aten.prelu.default", {F(x), F(Rand({2}))}).ok());
  EXPECT_FALSE(RunKernel("aten.prelu.default", {F(x), F(Rand({3, 1}))}).ok());
  EXPECT_FALSE(RunKernel("aten.prelu_backward.default", {F(Rand({2, 3})), F(x), F(w)}).ok());
  EXPECT_FALSE(
      RunKernel("aten._prelu_kernel_backward.default", {F(g), F(x), F(Rand({2, 1, 1, 1}))}).ok());
}

// pixel_shuffle moves channel c r^2 + i r + j to pixel (h r + i, w r + j); pixel_unshuffle
// undoes it; leading batch dimensions and integer dtypes pass through.
TEST(KernelTest, PixelShuffleMatchesItsDefinition) {
  const int64_t r = 2, ch = 2, H = 2, W = 3;
  const RefTensor x = Rand({2, ch * r * r, H, W});
  RefTensor want;
  want.shape = {2, ch, H * r, W * r};
  want.data.resize(x.data.size());
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t c = 0; c < ch * r * r; ++c) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) {
          const int64_t oc = c / (r * r), i = (c / r) % r, j = c % r;
          want.data[((n * ch + oc) * H * r + h * r + i) * W * r + w * r + j] =
              x.data[((n * ch * r * r + c) * H + h) * W + w];
        }
      }
    }
  }
  Check("aten.pixel_shuffle.default", {F(x), C(Value::Int(r))}, {want});
  Check("aten.pixel_unshuffle.default", {F(want), C(Value::Int(r))}, {x});
  RefTensor batched = x;  // [1, 2, 8, 2, 3]: one more leading dimension
  batched.shape.insert(batched.shape.begin(), 1);
  RefTensor want_batched = want;
  want_batched.shape.insert(want_batched.shape.begin(), 1);
  Check("aten.pixel_shuffle.default", {F(batched), C(Value::Int(r))}, {want_batched});
  const RefTensor ints = Idx({1, 4, 1, 1}, 100);
  EXPECT_EQ(Out("aten.pixel_shuffle.default", {I(ints), C(Value::Int(2))}).data, ints.data);
  ExpectRefused("aten.pixel_shuffle.default", {F(Rand({4, 2})), C(Value::Int(2))});
  ExpectRefused("aten.pixel_shuffle.default", {F(Rand({3, 2, 2})), C(Value::Int(2))});
  ExpectRefused("aten.pixel_shuffle.default", {F(x), C(Value::Int(0))});
  ExpectRefused("aten.pixel_unshuffle.default", {F(x), C(Value::Int(2))});
  ExpectRefused("aten.pixel_unshuffle.default", {F(x), C(Value::Int(-1))});
}

// gather / scatter / scatter_add / select_scatter, cumsum, flip, repeat_interleave and
// triu_indices against element formulas; index errors name the node.
TEST(KernelTest, GathersScattersAndIndexBuildersMatchTheirDefinitions) {
  const RefTensor x = Rand({3, 4});
  const RefTensor idx = ref::Make({2, 3}, {3, 0, 3, 1, 1, 2});
  RefTensor gathered{{2, 3}, {}};
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) gathered.data.push_back(x.data[r * 4 + idx.data[r * 3 + c]]);
  }
  Check("aten.gather.default", {F(x), C(Value::Int(1)), I(idx)}, {gathered});
  // scatter.value writes the value, scatter.src src's element, scatter_add adds (row 0 of
  // the index names column 3 twice: both add, the later write wins).
  const RefTensor src = Rand({2, 4});
  RefTensor filled = x, written = x, added = x;
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) {
      const int at = r * 4 + static_cast<int>(idx.data[r * 3 + c]);
      filled.data[at] = -2.5;
      written.data[at] = src.data[r * 4 + c];
      added.data[at] += src.data[r * 4 + c];
    }
  }
  Check("aten.scatter.value", {F(x), C(Value::Int(-1)), I(idx), C(Value::Double(-2.5))}, {filled});
  Check("aten.scatter.src", {F(x), C(Value::Int(1)), I(idx), F(src)}, {written});
  Check("aten.scatter_add.default", {F(x), C(Value::Int(1)), I(idx), F(src)}, {added});
  // select_scatter: row -1 of dimension 0 replaced.
  const RefTensor row = Rand({4});
  RefTensor selected = x;
  for (int c = 0; c < 4; ++c) selected.data[8 + c] = row.data[c];
  Check("aten.select_scatter.default", {F(x), F(row), C(Value::Int(0)), C(Value::Int(-1))},
        {selected});
  // cumsum along each dimension, and flip.
  RefTensor along0 = x, along1 = x, flipped = x;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) {
      if (r > 0) along0.data[r * 4 + c] += along0.data[(r - 1) * 4 + c];
      if (c > 0) along1.data[r * 4 + c] += along1.data[r * 4 + c - 1];
      flipped.data[r * 4 + c] = x.data[(2 - r) * 4 + (3 - c)];
    }
  }
  Check("aten.cumsum.default", {F(x), C(Value::Int(0))}, {along0});
  Check("aten.cumsum.default", {F(x), C(Value::Int(-1))}, {along1});
  Check("aten.flip.default", {F(x), C(Ints({-1, 0}))}, {flipped});
  Check("aten.flip.default", {F(x), C(Ints({}))}, {x});
  // An int64 cumsum stays int64; dtype converts first (1.5 -> 1), then sums.
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r =
      RunKernel("aten.cumsum.default", {I(ref::Make({3}, {4, -1, 2})), C(Value::Int(0))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0]->data, (std::vector<double>{4, 3, 5}));
  r = RunKernel("aten.cumsum.default", {F(ref::Make({3}, {1.5, 2.5, -0.5})), C(Value::Int(0))},
                {{"dtype", Value::String("torch.int64")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0]->data, (std::vector<double>{1, 3, 3}));
  // repeat_interleave: i repeated repeats[i] times; a negative repeat or a wrong
  // output_size is refused.
  r = RunKernel("aten.repeat_interleave.Tensor", {I(ref::Make({3}, {2, 0, 3}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0]->data, (std::vector<double>{0, 0, 2, 2, 2}));
  r = RunKernel("aten.repeat_interleave.Tensor", {I(ref::Make({2}, {1, -1}))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("repeats can not be negative"));
  r = RunKernel("aten.repeat_interleave.Tensor", {I(ref::Make({2}, {1, 2}))},
                {{"output_size", Value::Int(4)}});
  ASSERT_FALSE(r.ok());
  // index_add on integers (embedding_bag's backward counts its bags so): exact.
  r = RunKernel("aten.index_add.default",
                {I(ref::Make({4}, {0, 0, 5, 0})), C(Value::Int(0)), I(ref::Make({3}, {0, 2, 0})),
                 I(ref::Make({3}, {1, 1, 1}))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0]->data, (std::vector<double>{2, 0, 6, 0}));
  // triu_indices: rows then columns, row-major (torch.triu_indices(4, 3, -1)).
  r = RunKernel("aten.triu_indices.default",
                {C(Value::Int(4)), C(Value::Int(3)), C(Value::Int(-1))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0]->shape, (std::vector<int64_t>{2, 9}));
  EXPECT_EQ((*r)[0]->data, (std::vector<double>{0, 0, 0, 1, 1, 1, 2, 2, 3,  //
                                                0, 1, 2, 0, 1, 2, 1, 2, 2}));
  r = RunKernel("aten.triu_indices.default",
                {C(Value::Int(6)), C(Value::Int(6)), C(Value::Int(1))});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0]->shape, (std::vector<int64_t>{2, 15}));
  // Out of range indices (never wrapped, as in ATen) are errors naming the node.
  r = RunKernel("aten.gather.default", {F(x), C(Value::Int(1)), I(ref::Make({1, 1}, {4}))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr("node 'op' (aten.gather.default): gather index 4 out of "
                                   "range [0, 4)"));
  r = RunKernel("aten.scatter_add.default",
                {F(x), C(Value::Int(0)), I(ref::Make({1, 1}, {-1})), F(src)});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("scatter_add index -1 out of range"));
  r = RunKernel("aten.select_scatter.default", {F(x), F(row), C(Value::Int(0)), C(Value::Int(3))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("aten.select_scatter.default"));
  // An index larger than self apart from dim.
  r = RunKernel("aten.gather.default",
                {F(x), C(Value::Int(1)), I(ref::Make({4, 1}, {0, 0, 0, 0}))});
  ASSERT_FALSE(r.ok());
}

// _embedding_bag's four results as ATen's CPU kernel gives them, and its dense backward.
// Bags of indices {1, 4, 1, 0, 2, 3} at offsets {0, 2, 2, 5}: [1, 4], [], [1, 0, 2], [3].
TEST(KernelTest, EmbeddingBagsMatchATensResults) {
  const RefTensor w = Rand({5, 3});
  const RefTensor ids = ref::Make({6}, {1, 4, 1, 0, 2, 3});
  const RefTensor offsets = ref::Make({4}, {0, 2, 2, 5});
  const std::vector<std::vector<int>> bags = {{1, 4}, {}, {1, 0, 2}, {3}};
  auto bag = [&](int64_t mode, std::vector<In> extra, ValueDict kw, DType dtype) {
    std::vector<In> ins = {F(w), I(ids), I(offsets), C(Value::Bool(false)), C(Value::Int(mode))};
    for (In& e : extra) ins.push_back(std::move(e));
    Options o;
    o.dtype = dtype;
    return RunKernel("aten._embedding_bag.default", ins, kw, o);
  };
  auto row_sum = [&](const std::vector<int>& rows, int skip, bool mean) {
    std::vector<double> out(3, 0.0);
    int n = 0;
    for (int r : rows) {
      if (r == skip) continue;
      ++n;
      for (int d = 0; d < 3; ++d) out[d] += w.data[r * 3 + d];
    }
    for (double& v : out) v /= mean ? std::max(n, 1) : 1;
    return out;
  };
  // sum: offset2bag empty for float32 (ATen's fast path), one bag per index for float64;
  // bag_size and max_indices zeros.
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    auto r = bag(0, {}, {}, dtype);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<double> want;
    for (const auto& b : bags) {
      for (double v : row_sum(b, -1, false)) want.push_back(v);
    }
    ExpectClose(*(*r)[0], ref::Make({4, 3}, want), dtype == DType::kFloat64 ? 1e-12 : 1e-6, "sum");
    EXPECT_EQ((*r)[1]->data, dtype == DType::kFloat64 ? (std::vector<double>{0, 0, 2, 2, 2, 3})
                                                      : std::vector<double>{});
    EXPECT_EQ((*r)[2]->data, (std::vector<double>(4, 0)));
    EXPECT_EQ((*r)[3]->data, (std::vector<double>(4, 0)));
  }
  // mean with padding_idx 1: padded indices neither summed nor counted; max_indices is
  // bag_size; include_last_offset with the count as last offset gives the same bags.
  auto r = bag(1, {C(Value::Bool(false)), C(Value()), C(Value::Bool(true)), C(Value::Int(1))}, {},
               DType::kFloat64);
  ASSERT_FALSE(r.ok());  // offsets {0, 2, 2, 5} end before the 6 indices
  std::vector<In> ins = {F(w),
                         I(ids),
                         I(ref::Make({5}, {0, 2, 2, 5, 6})),
                         C(Value::Bool(false)),
                         C(Value::Int(1)),
                         C(Value::Bool(false)),
                         C(Value()),
                         C(Value::Bool(true)),
                         C(Value::Int(1))};
  r = RunKernel("aten._embedding_bag.default", ins);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> want;
  for (const auto& b : bags) {
    for (double v : row_sum(b, 1, true)) want.push_back(v);
  }
  ExpectClose(*(*r)[0], ref::Make({4, 3}, want), 1e-12, "mean");
  EXPECT_EQ((*r)[1]->data, (std::vector<double>{0, 0, 2, 2, 2, 3}));
  EXPECT_EQ((*r)[2]->data, (std::vector<double>{1, 0, 2, 1}));
  EXPECT_EQ((*r)[3]->data, (std::vector<double>{1, 0, 2, 1}));
  // max: the maxima's rows per column, [bags, dim]; an empty bag gives 0 and row 0.
  r = bag(2, {}, {}, DType::kFloat64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[2]->data, (std::vector<double>{2, 0, 3, 1}));
  ASSERT_EQ((*r)[3]->shape, (std::vector<int64_t>{4, 3}));
  for (int b = 0; b < 4; ++b) {
    for (int d = 0; d < 3; ++d) {
      int best = bags[b].empty() ? 0 : bags[b][0];
      for (int row : bags[b]) best = w.data[row * 3 + d] > w.data[best * 3 + d] ? row : best;
      EXPECT_EQ((*r)[3]->data[b * 3 + d], best) << b << "," << d;
      EXPECT_EQ((*r)[0]->data[b * 3 + d], bags[b].empty() ? 0.0 : w.data[best * 3 + d]);
    }
  }
  // per_sample_weights scale each row (sum mode only).
  const RefTensor psw = ref::Make({6}, {0.5, 2, -1, 1, 3, 4});
  r = bag(0, {C(Value::Bool(false)), F(psw)}, {}, DType::kFloat64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR((*r)[0]->data[0], 0.5 * w.data[3] + 2 * w.data[12], 1e-12);
  EXPECT_NEAR((*r)[0]->data[6 + 1], -w.data[4] + w.data[1] + 3 * w.data[7], 1e-12);
  EXPECT_FALSE(bag(1, {C(Value::Bool(false)), F(psw)}, {}, DType::kFloat64).ok());
  // Errors name the node: an index out of range, offsets not starting at 0.
  r = RunKernel("aten._embedding_bag.default", {F(w), I(ref::Make({2}, {1, 7})), I(offsets)});
  ASSERT_FALSE(r.ok());
  r = RunKernel("aten._embedding_bag.default",
                {F(w), I(ref::Make({6}, {1, 4, 1, 0, 2, 7})), I(offsets)});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr("node 'op' (aten._embedding_bag.default): embedding_bag "
                                   "index 7 out of range [0, 5)"));
  r = RunKernel("aten._embedding_bag.default", {F(w), I(ids), I(ref::Make({2}, {1, 3}))});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("offsets[0] is 1"));

  // The dense backward: sum adds each index's bag gradient to its row; mean divides by
  // bag_size; max sends each non-empty bag's gradient to its maxima's rows.
  const RefTensor g = Rand({4, 3});
  const RefTensor o2b = ref::Make({6}, {0, 0, 2, 2, 2, 3});
  const RefTensor sizes = ref::Make({4}, {2, 0, 3, 1});
  auto backward = [&](const RefTensor& maxes, int64_t mode, int64_t padding) {
    return RunKernel(
        "aten._embedding_bag_dense_backward.default",
        {F(g), I(ids), I(o2b), I(sizes), I(maxes), C(Value::Int(5)), C(Value::Bool(false)),
         C(Value::Int(mode)), C(Value()), C(Value::Int(padding))});
  };
  for (int64_t mode : {0, 1}) {
    r = backward(sizes, mode, mode == 1 ? 4 : -1);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<double> want_w(15, 0.0);
    for (int i = 0; i < 6; ++i) {
      const int row = static_cast<int>(ids.data[i]), b = static_cast<int>(o2b.data[i]);
      if (mode == 1 && row == 4) continue;  // padding_idx
      for (int d = 0; d < 3; ++d) {
        want_w[row * 3 + d] += g.data[b * 3 + d] / (mode == 1 ? sizes.data[b] : 1.0);
      }
    }
    ExpectClose(*(*r)[0], ref::Make({5, 3}, want_w), 1e-12, absl::StrCat("mode ", mode));
  }
  const RefTensor maxes = ref::Make({4, 3}, {4, 1, 4, 0, 0, 0, 2, 0, 1, 3, 3, 3});
  r = backward(maxes, 2, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> want_max(15, 0.0);
  for (int b = 0; b < 4; ++b) {
    if (sizes.data[b] == 0) continue;
    for (int d = 0; d < 3; ++d) want_max[maxes.data[b * 3 + d] * 3 + d] += g.data[b * 3 + d];
  }
  ExpectClose(*(*r)[0], ref::Make({5, 3}, want_max), 1e-12, "max");
  r = backward(ref::Make({4, 3}, {4, 1, 4, 0, 0, 0, 2, 9, 1, 3, 3, 3}), 2, -1);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              ::testing::HasSubstr("(aten._embedding_bag_dense_backward.default): "
                                   "maximum_indices value 9 out of range [0, 5)"));
}

TEST(KernelTest, EveryOpOfTheOpsTableHasAKernel) {
  // Every ATen target docs/ops.md names (its tables are the contract).
  std::ifstream in("docs/ops.md");
  ASSERT_TRUE(in) << "docs/ops.md is missing from the runfiles";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int found = 0;
  for (size_t at = doc.find("`aten."); at != std::string::npos; at = doc.find("`aten.", at + 1)) {
    size_t end = at + 1;
    while (end < doc.size() && (std::isalnum(static_cast<unsigned char>(doc[end])) ||
                                doc[end] == '_' || doc[end] == '.')) {
      ++end;
    }
    const std::string target = doc.substr(at + 1, end - at - 1);
    if (std::count(target.begin(), target.end(), '.') != 2) continue;  // prose, not a target
    EXPECT_NE(CpuKernels().Find(target), nullptr) << target;
    ++found;
  }
  EXPECT_GE(found, 59);
}

// The elementwise table's rows are ops declared pointwise, whose shape rule and cost kind
// come from that declaration: a row is an op's kernel, its schema line the rest.
TEST(KernelTest, ElementwiseTableRowsAreDeclaredPointwise) {
  for (const EwRow& row : ElementwiseRows()) {
    const OpSchema* schema = FindOpSchema(row.target);
    ASSERT_NE(schema, nullptr) << row.target;
    EXPECT_TRUE(schema->pointwise) << row.target;
    EXPECT_NE(CpuKernels().Find(row.target), nullptr) << row.target;
  }
}

TEST(KernelTest, SixteenBitFloatsRoundToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.00390625f)), 1.0f);       // a tie: to even
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.01171875f)), 1.015625f);  // a tie: to even (up)
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(HalfToFloat(FloatToHalf(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(65520.0f))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(5.960464477539063e-08f)), 5.960464477539063e-08f);  // subnormal
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 1.0f / 2048)), 1.0f);  // a tie: to even
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
}

// ---- convolutions and pooling of any dimensionality ----------------------------------------

// A 3-D convolution by its definition: x [n, c, d, h, w], w [o, c / groups, kd, kh, kw],
// strides / paddings / dilations one per dimension.
RefTensor NaiveConv3d(const RefTensor& x, const RefTensor& w, const RefTensor* b,
                      std::vector<int64_t> s, std::vector<int64_t> p, std::vector<int64_t> dl,
                      int64_t groups) {
  const int64_t n = x.shape[0], c = x.shape[1], o = w.shape[0], cg = c / groups, og = o / groups;
  std::vector<int64_t> in(x.shape.begin() + 2, x.shape.end()),
      k(w.shape.begin() + 2, w.shape.end());
  std::vector<int64_t> out(3);
  for (int a = 0; a < 3; ++a) out[a] = (in[a] + 2 * p[a] - dl[a] * (k[a] - 1) - 1) / s[a] + 1;
  RefTensor y = ref::NewZeros({n, o, out[0], out[1], out[2]});
  int64_t at = 0;
  for (int64_t bi = 0; bi < n; ++bi) {
    for (int64_t oc = 0; oc < o; ++oc) {
      for (int64_t z = 0; z < out[0]; ++z) {
        for (int64_t yy = 0; yy < out[1]; ++yy) {
          for (int64_t xx = 0; xx < out[2]; ++xx, ++at) {
            double sum = b != nullptr ? b->data[oc] : 0.0;
            for (int64_t ci = 0; ci < cg; ++ci) {
              const int64_t ic = (oc / og) * cg + ci;
              for (int64_t i = 0; i < k[0]; ++i) {
                for (int64_t j = 0; j < k[1]; ++j) {
                  for (int64_t l = 0; l < k[2]; ++l) {
                    const int64_t id = z * s[0] - p[0] + i * dl[0];
                    const int64_t ih = yy * s[1] - p[1] + j * dl[1];
                    const int64_t iw = xx * s[2] - p[2] + l * dl[2];
                    if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1] || iw < 0 || iw >= in[2]) {
                      continue;
                    }
                    sum += x.data[(((bi * c + ic) * in[0] + id) * in[1] + ih) * in[2] + iw] *
                           w.data[(((oc * cg + ci) * k[0] + i) * k[1] + j) * k[2] + l];
                  }
                }
              }
            }
            y.data[at] = sum;
          }
        }
      }
    }
  }
  return y;
}

// aten.convolution's arguments after input, weight, bias.
std::vector<In> ConvTail(std::vector<int64_t> s, std::vector<int64_t> p, std::vector<int64_t> d,
                         bool transposed, std::vector<int64_t> extra, int64_t groups) {
  return {C(Ints(s)),     C(Ints(p)),           C(Ints(d)), C(Value::Bool(transposed)),
          C(Ints(extra)), C(Value::Int(groups))};
}
std::vector<In> Cat(std::vector<In> head, const std::vector<In>& tail) {
  for (const In& i : tail) head.push_back(i);
  return head;
}
RefTensor Unsqueezed(RefTensor t, size_t dim) {
  t.shape.insert(t.shape.begin() + dim, 1);
  return t;
}

// A 1-D convolution is the 2-D one of unit height (one-element lists standing for every
// dimension); its gradients match finite differences, transposed ones too.
TEST(KernelTest, OneDimensionalConvolutionsAreUnitHeightTwoDimensionalOnes) {
  const RefTensor x = Rand({2, 4, 9}), w = Rand({6, 2, 3}), b = Rand({6});
  const RefTensor want =
      ref::Convolution(Unsqueezed(x, 2), Unsqueezed(w, 2), &b, {1, 2}, {0, 1}, {1, 2}, 2);
  RefTensor y = want;
  y.shape.erase(y.shape.begin() + 2);
  Check("aten.convolution.default", Cat({F(x), F(w), F(b)}, ConvTail({2}, {1}, {2}, false, {0}, 2)),
        {y});
  for (bool transposed : {false, true}) {
    const RefTensor wt = transposed ? Rand({4, 3, 3}) : w;
    const int64_t out_channels = transposed ? 6 : 6;
    auto tail = ConvTail({2}, {1}, {1}, transposed, {transposed ? 1 : 0}, 2);
    CheckFiniteDifferences(
        absl::StrCat("1-D convolution, transposed ", transposed), {x, wt, Rand({out_channels})},
        [&](const std::vector<RefTensor>& in) {
          return Out("aten.convolution.default", Cat({F(in[0]), F(in[1]), F(in[2])}, tail));
        },
        [&](const std::vector<RefTensor>& in, const RefTensor& g) {
          std::vector<In> a = Cat({F(g), F(in[0]), F(in[1]), C(Ints({out_channels}))}, tail);
          a.push_back(C(Bools({true, true, true})));
          return Outs("aten.convolution_backward.default", a);
        });
  }
}

// 3-D convolutions against their definition (float64 and float32), their gradients against
// finite differences, a transposed one as the adjoint of the plain one.
TEST(KernelTest, ThreeDimensionalConvolutionsMatchTheirDefinition) {
  const RefTensor x = Rand({2, 4, 4, 5, 6}), w = Rand({6, 2, 2, 3, 2}), b = Rand({6});
  const RefTensor y = NaiveConv3d(x, w, &b, {1, 2, 1}, {1, 1, 0}, {2, 1, 2}, 2);
  ASSERT_EQ(y.shape, (std::vector<int64_t>{2, 6, 4, 3, 4}));
  Check("aten.convolution.default",
        Cat({F(x), F(w), F(b)}, ConvTail({1, 2, 1}, {1, 1, 0}, {2, 1, 2}, false, {0, 0, 0}, 2)),
        {y});
  // One-element lists: that value for every dimension.
  Check("aten.convolution.default", Cat({F(x), F(w), F(b)}, ConvTail({2}, {1}, {1}, false, {0}, 2)),
        {NaiveConv3d(x, w, &b, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, 2)});
  for (bool transposed : {false, true}) {
    const RefTensor in = transposed ? Rand({2, 4, 3, 3, 3}) : Rand({2, 4, 4, 4, 3});
    const RefTensor wt = Rand({4, 2, 2, 2, 2});
    const int64_t out_channels = transposed ? 4 : 4;
    auto tail =
        ConvTail({2, 1, 1}, {1, 0, 1}, {1, 1, 2}, transposed, {transposed ? 1 : 0, 0, 0}, 2);
    CheckFiniteDifferences(
        absl::StrCat("3-D convolution, transposed ", transposed), {in, wt, Rand({out_channels})},
        [&](const std::vector<RefTensor>& a) {
          return Out("aten.convolution.default", Cat({F(a[0]), F(a[1]), F(a[2])}, tail));
        },
        [&](const std::vector<RefTensor>& a, const RefTensor& g) {
          std::vector<In> args = Cat({F(g), F(a[0]), F(a[1]), C(Ints({out_channels}))}, tail);
          args.push_back(C(Bools({true, true, true})));
          return Outs("aten.convolution_backward.default", args);
        });
  }
  // <conv_t(t), z> = <t, conv(z)> with the plain convolution by definition.
  const RefTensor t = Rand({1, 6, 4, 3, 4});
  const RefTensor ty = Out(
      "aten.convolution.default",
      Cat({F(t), F(w), C(Value())}, ConvTail({1, 2, 1}, {1, 1, 0}, {2, 1, 2}, true, {0, 1, 0}, 2)));
  ASSERT_EQ(ty.shape, (std::vector<int64_t>{1, 4, 4, 6, 6}));
  const RefTensor z = Rand(ty.shape);
  EXPECT_NEAR(Dot(ty, z), Dot(t, NaiveConv3d(z, w, nullptr, {1, 2, 1}, {1, 1, 0}, {2, 1, 2}, 2)),
              1e-9 * std::max(1.0, std::fabs(Dot(ty, z))));
  // Errors naming the node: a 6-D input, a stride list of two entries for three dimensions.
  absl::StatusOr<std::vector<std::optional<RefTensor>>> bad =
      RunKernel("aten.convolution.default",
                Cat({F(Rand({1, 4, 2, 2, 2, 2})), F(Rand({6, 2, 1, 1, 1, 1})), C(Value())},
                    ConvTail({1}, {0}, {1}, false, {0}, 2)));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'op'"), std::string::npos) << bad.status();
  bad = RunKernel("aten.convolution.default",
                  Cat({F(x), F(w), C(Value())}, ConvTail({1, 1}, {0}, {1}, false, {0}, 2)));
  EXPECT_FALSE(bad.ok());
}

// max_pool3d / avg_pool3d: values and indices by hand, backwards by finite differences over
// padding, dilation, ceil mode, count_include_pad and divisor_override.
TEST(KernelTest, ThreeDimensionalPoolingMatchesItsDefinitionAndFiniteDifferences) {
  RefTensor x;
  x.shape = {1, 1, 2, 4, 4};
  for (int i = 0; i < 32; ++i) x.data.push_back(i % 7 == 3 ? 100 + i : i);
  // kernel 2, stride [] (the kernel): windows of 8.
  const std::vector<std::optional<RefTensor>> mp =
      Outs("aten.max_pool3d_with_indices.default", {F(x), C(Ints({2, 2, 2}))});
  ASSERT_EQ(mp.size(), 2u);
  ASSERT_EQ(mp[0]->shape, (std::vector<int64_t>{1, 1, 1, 2, 2}));
  // Window (0, 0): cells {0, 1, 4, 5, 16, 17, 20, 21}: 17 is 100 + 17.
  EXPECT_EQ(mp[0]->data, (std::vector<double>{117, 103, 124, 131}));
  EXPECT_EQ(mp[1]->data, (std::vector<double>{17, 3, 24, 31}));
  const RefTensor ap = Out("aten.avg_pool3d.default", {F(x), C(Ints({2})), C(Ints({}))});
  ASSERT_EQ(ap.shape, (std::vector<int64_t>{1, 1, 1, 2, 2}));
  EXPECT_DOUBLE_EQ(ap.data[0], (0 + 1 + 4 + 5 + 16 + 117 + 20 + 21) / 8.0);
  // Padding 1, kernel 3, stride 2 on depth 2: the corner window holds 2 x 2 x 2 cells.
  const std::vector<In> padded = {F(x), C(Ints({3})), C(Ints({2})), C(Ints({1}))};
  const double corner = 0 + 1 + 4 + 5 + 16 + 117 + 20 + 21;
  EXPECT_DOUBLE_EQ(Out("aten.avg_pool3d.default", padded).data[0], corner / 27.0);
  EXPECT_DOUBLE_EQ(
      Out("aten.avg_pool3d.default", Cat(padded, {C(Value::Bool(false)), C(Value::Bool(false))}))
          .data[0],
      corner / 8.0);
  for (bool ceil_mode : {false, true}) {
    auto max_args = [&](std::vector<In> head) {
      return Cat(std::move(head), {C(Ints({3, 2, 2})), C(Ints({2, 1, 2})), C(Ints({1, 0, 1})),
                                   C(Ints({1, 2, 1})), C(Value::Bool(ceil_mode))});
    };
    CheckFiniteDifferences(
        absl::StrCat("max pool 3-D, ceil ", ceil_mode), {Rand({2, 2, 5, 5, 4})},
        [&](const std::vector<RefTensor>& in) {
          return Out("aten.max_pool3d_with_indices.default", max_args({F(in[0])}));
        },
        [&](const std::vector<RefTensor>& in, const RefTensor& g) {
          const RefTensor idx =
              Out("aten.max_pool3d_with_indices.default", max_args({F(in[0])}), 1);
          std::vector<In> a = max_args({F(g), F(in[0])});
          a.push_back(I(idx));
          return std::vector<std::optional<RefTensor>>{
              Out("aten.max_pool3d_with_indices_backward.default", a)};
        });
    for (bool include_pad : {true, false}) {
      for (int64_t divisor : {0, 5}) {
        auto args = [&](std::vector<In> head) {
          return Cat(std::move(head), {C(Ints({3, 2, 3})), C(Ints({2, 2, 1})), C(Ints({1, 1, 0})),
                                       C(Value::Bool(ceil_mode)), C(Value::Bool(include_pad)),
                                       divisor > 0 ? C(Value::Int(divisor)) : C(Value())});
        };
        CheckFiniteDifferences(
            absl::StrCat("avg pool 3-D ceil ", ceil_mode, " pad ", include_pad, " div ", divisor),
            {Rand({2, 5, 4, 5})},
            [&](const std::vector<RefTensor>& in) {
              return Out("aten.avg_pool3d.default", args({F(in[0])}));
            },
            [&](const std::vector<RefTensor>& in, const RefTensor& g) {
              return std::vector<std::optional<RefTensor>>{
                  Out("aten.avg_pool3d_backward.default", args({F(g), F(in[0])}))};
            });
      }
    }
  }
  // float32 as float64.
  Check(
      "aten.max_pool3d_with_indices.default", {F(x), C(Ints({2, 2, 2})), C(Ints({1, 2, 1}))},
      Outs("aten.max_pool3d_with_indices.default", {F(x), C(Ints({2, 2, 2})), C(Ints({1, 2, 1}))}));
  // Errors naming the node: a 3-D input, an index outside the plane.
  absl::StatusOr<std::vector<std::optional<RefTensor>>> bad =
      RunKernel("aten.max_pool3d_with_indices.default", {F(Rand({2, 4, 4})), C(Ints({2}))});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'op'"), std::string::npos) << bad.status();
  RefTensor far = *mp[1];
  far.data[2] = 32;
  bad = RunKernel("aten.max_pool3d_with_indices_backward.default",
                  {F(*mp[0]), F(x), C(Ints({2, 2, 2})), C(Ints({})), C(Ints({0})), C(Ints({1})),
                   C(Value::Bool(false)), I(far)});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("32"), std::string::npos) << bad.status();
}

// adaptive_max_pool2d: ATen's windows [floor(i in / out), ceil((i + 1) in / out)), the first
// maximum, int64 indices; the backward scatters by them (finite differences).
TEST(KernelTest, AdaptiveMaxPoolingMatchesItsDefinitionAndFiniteDifferences) {
  RefTensor x;
  x.shape = {1, 5, 3};
  for (int i = 0; i < 15; ++i) x.data.push_back((i * 7) % 11);
  // Output 3 x 2 of 5 x 3: rows [0, 2), [1, 4), [3, 5); columns [0, 2), [1, 3).
  const std::vector<std::optional<RefTensor>> r =
      Outs("aten.adaptive_max_pool2d.default", {F(x), C(Ints({3, 2}))});
  ASSERT_EQ(r.size(), 2u);
  ASSERT_EQ(r[0]->shape, (std::vector<int64_t>{1, 3, 2}));
  std::vector<double> want, want_idx;
  const int64_t rows[3][2] = {{0, 2}, {1, 4}, {3, 5}}, cols[2][2] = {{0, 2}, {1, 3}};
  for (const auto& rr : rows) {
    for (const auto& cc : cols) {
      double best = -1;
      int64_t at = -1;
      for (int64_t i = rr[0]; i < rr[1]; ++i) {
        for (int64_t j = cc[0]; j < cc[1]; ++j) {
          if (x.data[i * 3 + j] > best) best = x.data[i * 3 + j], at = i * 3 + j;
        }
      }
      want.push_back(best);
      want_idx.push_back(at);
    }
  }
  EXPECT_EQ(r[0]->data, want);
  EXPECT_EQ(r[1]->data, want_idx);
  Check("aten.adaptive_max_pool2d.default", {F(x), C(Ints({3, 2}))}, r);
  CheckFiniteDifferences(
      "adaptive max pool", {Rand({2, 3, 7, 5})},
      [&](const std::vector<RefTensor>& in) {
        return Out("aten.adaptive_max_pool2d.default", {F(in[0]), C(Ints({3, 4}))});
      },
      [&](const std::vector<RefTensor>& in, const RefTensor& g) {
        const RefTensor idx =
            Out("aten.adaptive_max_pool2d.default", {F(in[0]), C(Ints({3, 4}))}, 1);
        return std::vector<std::optional<RefTensor>>{
            Out("aten.adaptive_max_pool2d_backward.default", {F(g), F(in[0]), I(idx)})};
      });
  absl::StatusOr<std::vector<std::optional<RefTensor>>> bad =
      RunKernel("aten.adaptive_max_pool2d.default", {F(Rand({4, 4})), C(Ints({2, 2}))});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'op'"), std::string::npos) << bad.status();
  RefTensor far = *r[1];
  far.data[0] = -1;
  bad = RunKernel("aten.adaptive_max_pool2d_backward.default", {F(*r[0]), F(x), I(far)});
  EXPECT_FALSE(bad.ok());
}

// adaptive_max_pool3d / _adaptive_avg_pool3d: each output of a [1, 2, 3, 5, 4] volume pooled
// to [2, 3, 3] is its window's maximum (first one's offset) or mean, windows computed here
// from ATen's rule; a 2-D pooling is the 3-D one with unit depth; backwards by finite
// differences.
TEST(KernelTest, VolumeAdaptivePoolingMatchesItsDefinitionAndFiniteDifferences) {
  const RefTensor x = Rand({1, 2, 3, 5, 4});
  const std::vector<int64_t> in = {3, 5, 4}, out = {2, 3, 3};
  const std::vector<std::optional<RefTensor>> mx =
      Outs("aten.adaptive_max_pool3d.default", {F(x), C(Ints(out))});
  const RefTensor avg = Out("aten._adaptive_avg_pool3d.default", {F(x), C(Ints(out))});
  ASSERT_EQ(mx.size(), 2u);
  ASSERT_EQ(mx[0]->shape, (std::vector<int64_t>{1, 2, 2, 3, 3}));
  ASSERT_EQ(avg.shape, mx[0]->shape);
  auto lo = [](int64_t i, int64_t o, int64_t n) {
    return static_cast<int64_t>(std::floor(1.0 * i * n / o));
  };
  auto hi = [](int64_t i, int64_t o, int64_t n) {
    return static_cast<int64_t>(std::ceil(1.0 * (i + 1) * n / o));
  };
  size_t at = 0;
  for (int64_t plane = 0; plane < 2; ++plane) {
    for (int64_t z = 0; z < out[0]; ++z) {
      for (int64_t y = 0; y < out[1]; ++y) {
        for (int64_t w = 0; w < out[2]; ++w, ++at) {
          double best = -1e300, sum = 0;
          int64_t best_at = -1, count = 0;
          for (int64_t k = lo(z, out[0], in[0]); k < hi(z, out[0], in[0]); ++k) {
            for (int64_t i = lo(y, out[1], in[1]); i < hi(y, out[1], in[1]); ++i) {
              for (int64_t j = lo(w, out[2], in[2]); j < hi(w, out[2], in[2]); ++j) {
                const int64_t off = (k * in[1] + i) * in[2] + j;
                const double v = x.data[plane * 60 + off];
                if (v > best) best = v, best_at = off;
                sum += v, ++count;
              }
            }
          }
          EXPECT_EQ(mx[0]->data[at], best) << at;
          EXPECT_EQ(mx[1]->data[at], best_at) << at;
          EXPECT_NEAR(avg.data[at], sum / count, 1e-12) << at;
        }
      }
    }
  }
  // Unit depth: the 2-D pools of the [1, 2, 5, 4] planes.
  RefTensor flat = x;
  flat.shape = {1, 2, 3 * 5, 4};
  RefTensor unit = x;
  unit.shape = {1, 2, 1, 15, 4};
  EXPECT_EQ(Out("aten.adaptive_max_pool2d.default", {F(flat), C(Ints({4, 3}))}).data,
            Out("aten.adaptive_max_pool3d.default", {F(unit), C(Ints({1, 4, 3}))}).data);
  EXPECT_EQ(Out("aten._adaptive_avg_pool2d.default", {F(flat), C(Ints({4, 3}))}).data,
            Out("aten._adaptive_avg_pool3d.default", {F(unit), C(Ints({1, 4, 3}))}).data);
  CheckFiniteDifferences(
      "adaptive max pool 3d", {Rand({2, 3, 5, 4})},
      [&](const std::vector<RefTensor>& v) {
        return Out("aten.adaptive_max_pool3d.default", {F(v[0]), C(Ints({2, 3, 3}))});
      },
      [&](const std::vector<RefTensor>& v, const RefTensor& g) {
        const RefTensor idx =
            Out("aten.adaptive_max_pool3d.default", {F(v[0]), C(Ints({2, 3, 3}))}, 1);
        return std::vector<std::optional<RefTensor>>{
            Out("aten.adaptive_max_pool3d_backward.default", {F(g), F(v[0]), I(idx)})};
      });
  CheckFiniteDifferences(
      "adaptive avg pool 3d", {Rand({2, 3, 5, 4})},
      [&](const std::vector<RefTensor>& v) {
        return Out("aten._adaptive_avg_pool3d.default", {F(v[0]), C(Ints({4, 2, 6}))});
      },
      [&](const std::vector<RefTensor>& v, const RefTensor& g) {
        return std::vector<std::optional<RefTensor>>{
            Out("aten._adaptive_avg_pool3d_backward.default", {F(g), F(v[0])})};
      });
  absl::StatusOr<std::vector<std::optional<RefTensor>>> bad =
      RunKernel("aten.adaptive_max_pool3d.default", {F(Rand({4, 4, 4})), C(Ints({2, 2, 2}))});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("[C, D, H, W]"), std::string::npos) << bad.status();
  bad = RunKernel("aten._adaptive_avg_pool3d_backward.default",
                  {F(Rand({2, 2, 2, 2})), F(Rand({1, 3, 4, 4}))});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not fit"), std::string::npos) << bad.status();
}

// all.dim / any.dim along a dimension (NaN counts as non-zero; an empty dimension gives true /
// false) and clamp of an int64 tensor by integer bounds (one of them missing too).
TEST(KernelTest, LogicalReductionsAndIntegerClamp) {
  RefTensor x;
  x.shape = {2, 3};
  x.data = {1, 0, NAN, 2, 3, 4};
  EXPECT_EQ(Out("aten.all.dim", {F(x), C(Value::Int(1))}).data, (std::vector<double>{0, 1}));
  EXPECT_EQ(Out("aten.any.dim", {F(x), C(Value::Int(0))}).data, (std::vector<double>{1, 1, 1}));
  const RefTensor kept = Out("aten.all.dim", {F(x), C(Value::Int(-1)), C(Value::Bool(true))});
  EXPECT_EQ(kept.shape, (std::vector<int64_t>{2, 1}));
  RefTensor empty;
  empty.shape = {2, 0};
  EXPECT_EQ(Out("aten.all.dim", {F(empty), C(Value::Int(1))}).data, (std::vector<double>{1, 1}));
  EXPECT_EQ(Out("aten.any.dim", {F(empty), C(Value::Int(1))}).data, (std::vector<double>{0, 0}));
  ExpectRefused("aten.all.dim", {F(x), C(Value::Int(2))});
  RefTensor ints;
  ints.shape = {4};
  ints.data = {-5, 2, 9, 7};
  const RefTensor clamped =
      Out("aten.clamp.default", {I(ints), C(Value::Int(0)), C(Value::Int(7))});
  EXPECT_EQ(clamped.data, (std::vector<double>{0, 2, 7, 7}));
  absl::StatusOr<std::vector<std::optional<RefTensor>>> r =
      RunKernel("aten.clamp.default", {I(ints), C(Value::Int(0))});
  ASSERT_TRUE(r.ok()) << r.status();
}

// addmm as ATen: beta * self + alpha * mat1 @ mat2 with self broadcast (a row, a column),
// and with beta 0 self is not read: its NaN does not reach the result.
TEST(KernelTest, AddmmAppliesBetaAndAlpha) {
  const RefTensor a = Rand({3, 5}), b = Rand({5, 4});
  const RefTensor mm = ref::Mm(a, b);
  const ValueDict scaled = {{"beta", Value::Double(0.5)}, {"alpha", Value::Double(2.0)}};
  for (const RefTensor& bias : {Rand({4}), Rand({3, 1}), Rand({3, 4})}) {
    RefTensor want = mm;
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        const size_t at = bias.shape.size() == 1 ? j : bias.shape[1] == 1 ? i : i * 4 + j;
        want.data[i * 4 + j] = 0.5 * bias.data[at] + 2.0 * mm.data[i * 4 + j];
      }
    }
    Check("aten.addmm.default", {F(bias), F(a), F(b)}, {want}, scaled);
  }
  RefTensor nan_bias = Rand({4});
  nan_bias.data[1] = std::nan("");
  RefTensor want = mm;
  for (double& v : want.data) v *= 3.0;
  Check("aten.addmm.default", {F(nan_bias), F(a), F(b)}, {want},
        {{"beta", Value::Int(0)}, {"alpha", Value::Double(3.0)}});
  absl::StatusOr<std::vector<std::optional<RefTensor>>> bad =
      RunKernel("aten.addmm.default", {F(Rand({2, 4})), F(a), F(b)}, scaled);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("does not broadcast to [3, 4]"));
}

// The ops transformers 5's mixture-of-experts layers reach (Mixtral, Qwen2-MoE): the experts'
// grouped products against one product per expert written here and finite differences;
// histc, a stable sort, floor_divide; and the other ops unseen families reached (BLOOM's pow
// of a tensor exponent and rsub, DeBERTa's sqrt), in the dtypes torch gives.
TEST(KernelTest, MixtureOfExpertsOpsMatchTheirDefinitions) {
  const RefTensor x = Rand({7, 3}), w = Rand({3, 3, 4});
  RefTensor offs;  // expert 1 has no rows; row 6 lies past the last offset
  offs.shape = {3};
  offs.data = {2, 2, 6};
  RefTensor want;
  want.shape = {7, 4};
  want.data.assign(28, 0.0);
  int64_t start = 0;
  for (int64_t e = 0; e < 3; ++e) {
    for (int64_t r = start; r < static_cast<int64_t>(offs.data[e]); ++r) {
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t k = 0; k < 3; ++k) {
          want.data[r * 4 + j] += x.data[r * 3 + k] * w.data[(e * 3 + k) * 4 + j];
        }
      }
    }
    start = static_cast<int64_t>(offs.data[e]);
  }
  Check("transformers.grouped_mm_fallback.default", {F(x), F(w), I(offs)}, {want});
  CheckFiniteDifferences(
      "grouped_mm_fallback", {x, w},
      [&](const std::vector<RefTensor>& in) {
        return Out("transformers.grouped_mm_fallback.default", {F(in[0]), F(in[1]), I(offs)});
      },
      [&](const std::vector<RefTensor>& in, const RefTensor& g) {
        std::vector<std::optional<RefTensor>> r =
            Outs("transformers.grouped_mm_fallback_backward.default",
                 {F(in[0]), F(in[1]), I(offs), F(g)});
        return std::vector<std::optional<RefTensor>>{r.at(0), r.at(1)};
      });
  RefTensor falling = offs;
  falling.data = {4, 2, 6};
  absl::StatusOr<std::vector<std::optional<RefTensor>>> bad =
      RunKernel("transformers.grouped_mm_fallback.default", {F(x), F(w), I(falling)});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("offs[1] = 2"));

  const DType f32 = DType::kFloat32, i64 = DType::kInt64;
  // histc: x in bin int((x - min) * bins / (max - min)), max in the last; outside and NaN
  // not counted; min == max takes the data's range.
  const Operand ids = T(f32, {8}, {0, 1, 1, 3, 2, 3, -1, NAN});
  ExpectMixed("aten.histc.default", {ids, K(Value::Int(4)), K(Value::Int(0)), K(Value::Int(3))},
              f32, {1, 2, 1, 2});
  ExpectMixed("aten.histc.default", {T(f32, {4}, {2, 4, 4, 6}), K(Value::Int(2))}, f32, {1, 3});
  // A range at float32's limits: the quotient overflows; every element is still counted once.
  absl::StatusOr<Mixed> edge =
      RunMixed("aten.histc.default", {T(f32, {2}, {-3e38, 3e38}), K(Value::Int(3))});
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(edge->values[0] + edge->values[1] + edge->values[2], 2);
  // sort: stable (ties by position), values and int64 indices.
  RefTensor keys;
  keys.shape = {6};
  keys.data = {3, 1, 2, 1, 0, 3};
  std::vector<std::optional<RefTensor>> sorted = Outs("aten.sort.default", {I(keys)});
  ASSERT_EQ(sorted.size(), 2u);
  EXPECT_EQ(sorted[0]->data, (std::vector<double>{0, 1, 1, 2, 3, 3}));
  EXPECT_EQ(sorted[1]->data, (std::vector<double>{4, 1, 3, 2, 0, 5}));
  sorted = Outs("aten.sort.default", {I(keys), C(Value::Int(0)), C(Value::Bool(true))});
  EXPECT_EQ(sorted[1]->data, (std::vector<double>{0, 5, 2, 1, 3, 4}));
  ExpectMixed("aten.floor_divide.default", {T(i64, {3}, {-7, 7, 6}), K(Value::Int(2))}, i64,
              {-4, 3, 3});
  ExpectMixed("aten.floor_divide.default", {T(f32, {2}, {-7.5, 7.5}), K(Value::Int(2))}, f32,
              {-4, 3});
  ExpectMixed("aten.pow.Tensor_Tensor", {T(f32, {2}, {2, 9}), T(i64, {2}, {3, 0})}, f32, {8, 1});
  ExpectMixed("aten.pow.Tensor_Tensor", {T(i64, {2}, {2, 3}), T(i64, {2}, {10, 2})}, i64,
              {1024, 9});
  RefTensor two, minus_one;  // an integer to a negative integer power: ATen's error
  two.shape = minus_one.shape = {1};
  two.data = {2};
  minus_one.data = {-1};
  EXPECT_FALSE(RunKernel("aten.pow.Tensor_Tensor", {I(two), I(minus_one)}).ok());
  ExpectMixed("aten.rsub.Scalar", {T(f32, {2}, {1, 2.5}), K(Value::Int(1))}, f32, {0, -1.5});
  ExpectMixed("aten.rsub.Scalar", {T(i64, {2}, {1, 2}), K(Value::Int(10))}, i64, {8, 6},
              {{"alpha", Value::Int(2)}});
  ExpectMixed("aten.sqrt.default", {T(f32, {2}, {4, 2.25})}, f32, {2, 1.5});
  ExpectMixed("aten.sqrt.default", {T(i64, {1}, {9})}, f32, {3});
  ExpectMixed("aten.pow.Scalar", {K(Value::Int(10)), T(f32, {3}, {0, 1, 2})}, f32, {1, 10, 100});
  ExpectMixed("aten.pow.Scalar", {K(Value::Int(2)), T(i64, {2}, {3, 10})}, i64, {8, 1024});
}

}  // namespace
}  // namespace overlap
