// The device's kernels on the emulated device against the CPU kernels: kernel by kind
// (cuBLAS products, the elementwise and reduction families, cuDNN convolutions), then every
// tiny model through the interpreter, with the device's memory equal to the host's, every
// buffer use ordered, and no device-wide synchronisation.
#include "runtime/cuda/cuda_kernels.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/cuda/fake_gpu_api.h"
#include "runtime/cuda/testing/differential.h"
#include "runtime/exec/interpreter.h"
#include "runtime/kernels/elementwise_table.h"

namespace overlap {
namespace {

// List arguments.
Value ints(const std::vector<int64_t>& d) {
  std::vector<Value> v;
  for (int64_t x : d) v.push_back(Value::Int(x));
  return Value::List(v);
}
Value bools(const std::vector<bool>& d) {
  std::vector<Value> v;
  for (bool x : d) v.push_back(Value::Bool(x));
  return Value::List(v);
}

// Every tiny model on the emulated device against the CPU interpreter (differential.h's
// criteria), every buffer use ordered, no device synchronisation, no leak.
TEST(CudaKernelsTest, EveryTinyModelMatchesTheCpuInterpreter) {
  for (const std::string& model : ModelNames()) {
    SCOPED_TRACE(model);
    FakeGpuApi api;
    auto dev = CudaDevice::Create(&api, 0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    {
      KernelRegistry kernels = CudaKernels(**dev);
      EXPECT_EQ(CompareModelWithCpu(model, **dev, kernels), "");
    }
    ASSERT_TRUE((*dev)->Synchronize().ok());
    EXPECT_EQ(api.device_synchronizations(), 0);
    dev->reset();  // its error word goes with it
    EXPECT_TRUE(api.violations().empty()) << absl::StrJoin(api.violations(), "\n");
    EXPECT_EQ(api.live_bytes(), 0) << "device memory leaked";
  }
}

// cuBLAS's column-major view of row-major products: plain, transposed operands read in
// place, and a strided one copied first; addmm's broadcast bias, alpha and beta.
TEST(CudaKernelsTest, MatrixProductsReadOperandsInPlace) {
  FakeGpuApi api;
  auto dev = CudaDevice::Create(&api, 0);
  ASSERT_TRUE(dev.ok());
  Allocator host;
  Allocator on_device(dev->get());
  Tensor a = *Tensor::Empty(host, DType::kFloat32, {3, 4});
  Tensor b = *Tensor::Empty(host, DType::kFloat32, {4, 5});
  Tensor bias = *Tensor::Empty(host, DType::kFloat32, {5});
  for (int64_t i = 0; i < a.numel(); ++i) SetElement(a, i, 0.5 * i - 1);
  for (int64_t i = 0; i < b.numel(); ++i) SetElement(b, i, 0.25 * (i % 7) - 0.5);
  for (int64_t i = 0; i < bias.numel(); ++i) SetElement(bias, i, i);
  auto expect = [&](int64_t i, int64_t j, double alpha, double beta) {
    double s = 0;
    for (int64_t l = 0; l < 4; ++l) s += GetElement(a, i * 4 + l) * GetElement(b, l * 5 + j);
    return alpha * s + beta * GetElement(bias, j);
  };
  // Device copies: a as is, b stored transposed ([5, 4] then viewed as [4, 5]).
  Tensor da = *Tensor::Empty(on_device, DType::kFloat32, {3, 4});
  ASSERT_TRUE((*dev)->Copy(a, da).ok());
  Tensor bt = *Tensor::Empty(on_device, DType::kFloat32, {5, 4});
  Tensor db = *bt.Transpose(0, 1);
  ASSERT_TRUE((*dev)->Copy(b, db).ok());
  Tensor dbias = *Tensor::Empty(on_device, DType::kFloat32, {5});
  ASSERT_TRUE((*dev)->Copy(bias, dbias).ok());

  Graph g;
  const NodeId pb = *g.AddNode(Op::kPlaceholder, "bias", "bias");
  const NodeId pa = *g.AddNode(Op::kPlaceholder, "a", "a");
  const NodeId pbm = *g.AddNode(Op::kPlaceholder, "b", "b");
  KernelRegistry kernels = CudaKernels(**dev);
  for (const bool addmm : {false, true}) {
    std::vector<Value> args;
    if (addmm) args.push_back(Value::Ref(pb));
    args.push_back(Value::Ref(pa));
    args.push_back(Value::Ref(pbm));
    ValueDict kwargs;  // beta and alpha are keyword-only, as ATen declares them
    if (addmm) kwargs = {{"beta", Value::Double(0.5)}, {"alpha", Value::Double(2.0)}};
    const NodeId id = *g.AddNode(Op::kCallFunction, addmm ? "addmm" : "mm",
                                 addmm ? "aten.addmm.default" : "aten.mm.default", args, kwargs);
    const Node& n = g.node(id);
    KernelCall c(n, on_device, [&](NodeId in) -> const Tensor* {
      return in == pb ? &dbias : in == pa ? &da : &db;
    });
    absl::StatusOr<std::vector<Tensor>> r = (*kernels.Find(n.target()))(c);
    ASSERT_TRUE(r.ok()) << r.status();
    Tensor back = *Tensor::Empty(host, DType::kFloat32, {3, 5});
    ASSERT_TRUE((*dev)->Copy((*r)[0], back).ok());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 5; ++j) {
        EXPECT_NEAR(GetElement(back, i * 5 + j),
                    addmm ? expect(i, j, 2.0, 0.5) : expect(i, j, 1, 0), 1e-5)
            << (addmm ? "addmm " : "mm ") << i << "," << j;
      }
    }
  }
  EXPECT_EQ(CudaKernelKind("aten.mm.default"), "cublas");
  EXPECT_EQ(CudaKernelKind("aten.view.default"), "view");
  EXPECT_EQ(CudaKernelKind("aten.relu.default"), "elementwise");
  EXPECT_EQ(CudaKernelKind("aten._softmax.default"), "reduction");
  EXPECT_EQ(CudaKernelKind("aten.native_layer_norm.default"), "nn");
  EXPECT_EQ(CudaKernelKind("aten.native_batch_norm.default"), "cudnn");
  EXPECT_EQ(CudaKernelKind("aten._scaled_dot_product_flash_attention.default"), "cublas");
  EXPECT_EQ(CudaKernelKind("aten.topk.default"), "host");
  EXPECT_TRUE(api.violations().empty()) << absl::StrJoin(api.violations(), "\n");
}

// Kernels on the emulated device against the CPU kernels, case by case: operands built on
// the host and copied to the device ("t" a transposed view), every result compared.
class DeviceVersusCpu {
 public:
  struct Case {
    std::string target;
    std::vector<Value> args;
    ValueDict kwargs;
  };
  DeviceVersusCpu() : dev_(*CudaDevice::Create(&api_, 0)), on_device_(dev_.get()) {
    kernels_ = CudaKernels(*dev_);
    auto make = [&](std::vector<int64_t> shape, double scale, double shift) {
      Tensor h = *Tensor::Empty(host_, DType::kFloat32, shape);
      for (int64_t i = 0; i < h.numel(); ++i) {
        SetElement(h, i, scale * std::sin(1.3 * i + 0.2) + shift);
      }
      return h;
    };
    hosts_ = {{"a", make({2, 3}, 2.0, 0)},
              {"b", make({3}, 1.5, 0.1)},
              {"b2", make({2}, 1.0, 0.2)},
              {"c21", make({2, 1}, 1.0, -0.3)},
              {"c", make({2, 1, 3}, 1.0, 0)},
              {"d", make({4, 1}, 3.0, 0)},
              {"p", make({2, 3}, 1.0, 2.5)},
              {"x", make({2, 3, 4}, 2.0, 0)},
              {"g", make({2, 3, 4}, 1.0, 0.3)},
              {"img", make({2, 4, 5, 5}, 1.0, 0)},
              {"wt", make({6, 2, 3, 3}, 0.5, 0)},
              {"wt1", make({3, 4, 3, 3}, 0.5, 0)},
              {"bias6", make({6}, 1.0, 0)},
              {"gy", make({2, 6, 5, 5}, 1.0, 0)},
              {"gy1", make({2, 3, 2, 2}, 1.0, 0)},
              {"w4", make({4}, 0.5, 1.0)},
              {"b4", make({4}, 0.3, 0)},
              {"m231", make({2, 3, 1}, 0.3, 0)},
              {"r231", make({2, 3, 1}, 0.2, 1.0)},
              {"var4", make({4}, 0.2, 1.0)},
              {"gimg", make({2, 4, 5, 5}, 1.0, 0.3)},
              {"gpool", make({2, 4, 3, 3}, 1.0, 0)},
              {"lp", make({4, 5}, 1.0, -2.0)},
              {"w5", make({5}, 0.3, 1.0)},
              {"g0", make({}, 0.0, 0.7)},
              {"tw", make({}, 0.0, 2.5)},
              {"emb", make({6, 3}, 1.0, 0)},
              {"gemb", make({2, 3, 3}, 1.0, 0)},
              {"q", make({1, 4, 3, 4}, 1.0, 0)},
              {"k", make({1, 2, 3, 4}, 1.0, 0.1)},
              {"v", make({1, 2, 3, 4}, 1.0, -0.1)},
              {"q2", make({1, 2, 3, 4}, 1.0, 0.2)},
              {"go", make({1, 4, 3, 4}, 1.0, 0)},
              {"o", make({1, 4, 3, 4}, 0.5, 0)},
              {"go2", make({1, 2, 3, 4}, 1.0, 0)},
              {"o2", make({1, 2, 3, 4}, 0.5, 0)}};
    auto index = [&](std::vector<int64_t> shape, std::vector<int64_t> values) {
      Tensor h = *Tensor::Empty(host_, DType::kInt64, shape);
      for (int64_t i = 0; i < h.numel(); ++i) SetElement(h, i, values[i]);
      return h;
    };
    hosts_["tgt"] = index({4}, {1, 4, -100, 0});
    hosts_["eidx"] = index({2, 3}, {0, 5, 2, 2, 1, 5});
    hosts_["bad"] = index({2}, {3, 9});
    hosts_["sel"] = index({4}, {2, 0, 2, 1});
    hosts_["sel2"] = index({3}, {1, 1, 0});
    hosts_["src"] = make({2, 4, 4}, 1.0, 0.5);
    // 1-D and 3-D convolutions: a signal, a volume, their weights and output gradients.
    hosts_["sig"] = make({2, 4, 9}, 1.0, 0);
    hosts_["wsig"] = make({6, 2, 3}, 0.5, 0);
    hosts_["gsig"] = make({2, 6, 5}, 1.0, 0.2);
    hosts_["vol"] = make({1, 2, 3, 4, 4}, 1.0, 0);
    hosts_["wvol"] = make({4, 2, 2, 2, 2}, 0.5, 0);
    hosts_["gvol"] = make({1, 4, 2, 5, 3}, 1.0, 0.1);
    std::vector<int64_t> pidx(2 * 4 * 9);
    for (size_t i = 0; i < pidx.size(); ++i) pidx[i] = (i * 7) % 25;
    hosts_["pidx"] = index({2, 4, 3, 3}, pidx);
    hosts_["t"] = *hosts_["a"].Transpose(0, 1);
    hosts_["xt"] = *hosts_["x"].Transpose(0, 2);
    for (const auto& [name, h] : hosts_) {
      if (name == "t" || name == "xt") continue;
      devs_[name] = *Tensor::Empty(on_device_, h.dtype(), h.shape());
      EXPECT_TRUE(dev_->Copy(h, devs_[name]).ok());
    }
    devs_["t"] = *devs_["a"].Transpose(0, 1);
    devs_["xt"] = *devs_["x"].Transpose(0, 2);
    for (const auto& [name, h] : hosts_) {
      id_[name] = *g_.AddNode(Op::kPlaceholder, name, name);
      placeholder_[id_[name]] = name;
    }
  }
  Value Ref(const char* name) { return Value::Ref(id_.at(name)); }
  CudaDevice& dev() { return *dev_; }
  // Runs `target` on the device only; its results.
  absl::StatusOr<std::vector<Tensor>> RunOnDevice(const std::string& target,
                                                  std::vector<Value> args) {
    const NodeId n =
        *g_.AddNode(Op::kCallFunction, "op" + std::to_string(next_++), target, std::move(args));
    KernelCall call(g_.node(n), on_device_,
                    [&](NodeId in) -> const Tensor* { return &devs_.at(placeholder_.at(in)); });
    return (*kernels_.Find(target))(call);
  }
  // Host waits for the compute stream so far: the host path takes at least one.
  int Syncs() const { return api_.stream_synchronizations(); }
  // Device kernels of one kind run so far (the fake's trace): proof the host path was not
  // taken.
  int64_t Ran(const std::string& what) const {
    int64_t n = 0;
    for (const FakeGpuApi::Op& op : api_.ops()) n += op.what == what;
    return n;
  }

  // Each case's device result against the CPU kernel's: |a - b| <= tolerance (1 + |b|)
  // (0: bit-identical).
  void Check(const std::vector<Case>& cases, double tolerance) {
    for (const Case& cs : cases) {
      SCOPED_TRACE(cs.target + " #" + std::to_string(next_));
      const NodeId n = *g_.AddNode(Op::kCallFunction, "op" + std::to_string(next_++), cs.target,
                                   cs.args, cs.kwargs);
      KernelCall cpu_call(g_.node(n), host_, [&](NodeId in) -> const Tensor* {
        return &hosts_.at(placeholder_.at(in));
      });
      absl::StatusOr<std::vector<Tensor>> want = (*CpuKernels().Find(cs.target))(cpu_call);
      ASSERT_TRUE(want.ok()) << want.status();
      KernelCall dev_call(g_.node(n), on_device_, [&](NodeId in) -> const Tensor* {
        return &devs_.at(placeholder_.at(in));
      });
      absl::StatusOr<std::vector<Tensor>> got = (*kernels_.Find(cs.target))(dev_call);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want->size());
      for (size_t k = 0; k < want->size(); ++k) {
        const Tensor& w = (*want)[k];
        ASSERT_EQ((*got)[k].defined(), w.defined()) << "result " << k;
        if (!w.defined()) continue;
        ASSERT_EQ((*got)[k].device(), Device::kCuda);
        ASSERT_EQ((*got)[k].shape(), w.shape());
        Tensor back = *Tensor::Empty(host_, w.dtype(), w.shape());
        ASSERT_TRUE(dev_->Copy((*got)[k], back).ok());
        for (int64_t i = 0; i < w.numel(); ++i) {
          const double x = GetElement(back, i), y = GetElement(w, i);
          if (tolerance == 0) {
            ASSERT_EQ(x, y) << "result " << k << ", element " << i;
          } else {
            ASSERT_NEAR(x, y, tolerance * (1 + std::abs(y))) << "result " << k << ", element " << i;
          }
        }
      }
    }
    EXPECT_TRUE(api_.violations().empty()) << absl::StrJoin(api_.violations(), "\n");
  }

 private:
  FakeGpuApi api_;
  std::unique_ptr<CudaDevice> dev_;
  Allocator host_, on_device_;
  KernelRegistry kernels_;
  std::map<std::string, Tensor> hosts_, devs_;
  Graph g_;
  std::map<NodeId, std::string> placeholder_;
  std::map<std::string, NodeId> id_;
  int next_ = 0;
};

// The elementwise family: the same formulas in the same type (elementwise_ops.h), so the
// results are bit-identical where no exp, erf or tanh is involved, broadcasting, strided
// operands and scalar variants included; within a few ULP where one is.
TEST(CudaKernelsTest, ElementwiseFamilyMatchesTheCpuKernels) {
  DeviceVersusCpu t;
  auto r = [&](const char* n) { return t.Ref(n); };
  t.Check(
      {
          {"aten.add.Tensor", {r("a"), r("b")}, {{"alpha", Value::Double(2.0)}}},
          {"aten.add.Tensor", {r("t"), Value::Double(1.5)}, {{"alpha", Value::Double(0.5)}}},
          {"aten.mul.Tensor", {r("c"), r("d")}, {}},
          {"aten.mul.Tensor", {r("t"), r("t")}, {}},
          {"aten.add.Scalar", {r("a"), Value::Double(2.0)}, {{"alpha", Value::Double(3.0)}}},
          {"aten.mul.Scalar", {r("t"), Value::Double(-1.5)}, {}},
          {"aten.div.Scalar", {r("a"), Value::Double(4.0)}, {}},
          {"aten.div.Tensor_mode", {r("a"), r("b")}, {{"rounding_mode", Value::String("floor")}}},
          {"aten.div.Tensor_mode", {r("a"), r("b")}, {{"rounding_mode", Value::String("trunc")}}},
          {"aten.div.Tensor_mode", {r("a"), Value::Double(0.3)}, {}},
          {"aten.pow.Tensor_Scalar", {r("a"), Value::Double(2)}, {}},
          {"aten.pow.Tensor_Scalar", {r("t"), Value::Double(3)}, {}},
          {"aten.pow.Tensor_Scalar", {r("p"), Value::Double(0.5)}, {}},
          {"aten.rsqrt.default", {r("p")}, {}},
          {"aten.relu.default", {r("t")}, {}},
          {"aten.hardswish.default", {r("a")}, {}},
          {"aten.hardswish_backward.default", {r("c"), r("a")}, {}},
          {"aten.hardsigmoid.default", {r("a")}, {}},
          {"aten.hardsigmoid_backward.default", {r("c"), r("a")}, {}},
          {"aten.neg.default", {r("t")}, {}},
          {"aten.sub.Tensor", {r("a"), r("b")}, {{"alpha", Value::Double(2.0)}}},
          {"aten.threshold_backward.default", {r("a"), r("b"), Value::Double(0.2)}, {}},
          {"aten.leaky_relu.default", {r("a")}, {}},
          {"aten.leaky_relu.default", {r("t"), Value::Double(0.2)}, {}},
          {"aten.leaky_relu_backward.default",
           {r("c"), r("a"), Value::Double(0.1), Value::Bool(false)},
           {}},
          {"aten.zeros_like.default", {r("t")}, {}},
      },
      0);
  // Formulas with exp, erf or tanh: the CPU kernels evaluate those on SLEEF
  // (runtime/core/vmath.h, within 1 ULP), the device with its own math library; the rest of
  // each formula is the same (elementwise_ops.h's EwCombine), so they agree to a few ULP.
  t.Check(
      {
          {"aten.silu.default", {r("a")}, {}},
          {"aten.gelu.default", {r("a")}, {}},
          {"aten.gelu.default", {r("t")}, {{"approximate", Value::String("tanh")}}},
          {"aten.gelu_backward.default", {r("a"), r("p")}, {}},
          {"aten.gelu_backward.default",
           {r("c"), r("b")},
           {{"approximate", Value::String("tanh")}}},
          {"aten.silu_backward.default", {r("t"), r("t")}, {}},
          {"aten.sigmoid.default", {r("a")}, {}},
          {"aten.sigmoid_backward.default", {r("c"), r("p")}, {}},
          {"aten.tanh.default", {r("a")}, {}},
          {"aten.tanh_backward.default", {r("c"), r("p")}, {}},
          {"aten.exp.default", {r("a")}, {}},
          {"aten.sin.default", {r("a")}, {}},
          {"aten.cos.default", {r("t")}, {}},
          {"aten.log.default", {r("p")}, {}},
      },
      1e-6);
  EXPECT_EQ(t.Ran("elementwise"), 39);  // every case but zeros_like, on the device
  // Every row of the elementwise table has a CPU kernel and runs on the device kernel.
  for (const EwRow& row : ElementwiseRows()) {
    EXPECT_NE(CpuKernels().Find(row.target), nullptr) << row.target;
    EXPECT_EQ(CudaKernelKind(row.target), "elementwise") << row.target;
  }
  EXPECT_EQ(CudaKernelKind("aten.gelu.default"), "elementwise");
  EXPECT_EQ(CudaKernelKind("aten.zeros_like.default"), "allocation");
}

// The reduction family: one formula (reduction_ops.h), but the CPU evaluates exp on SLEEF
// (runtime/core/vmath.h) and sums in eight lanes, so within 1e-6.
TEST(CudaKernelsTest, ReductionFamilyMatchesTheCpuKernels) {
  DeviceVersusCpu t;
  auto r = [&](const char* n) { return t.Ref(n); };
  auto dims = [](std::vector<int64_t> d) {
    std::vector<Value> v;
    for (int64_t x : d) v.push_back(Value::Int(x));
    return Value::List(v);
  };
  t.Check(
      {
          {"aten._softmax.default", {r("x"), Value::Int(1), Value::Bool(false)}, {}},
          {"aten._softmax.default", {r("xt"), Value::Int(-1), Value::Bool(false)}, {}},
          {"aten._log_softmax.default", {r("x"), Value::Int(0), Value::Bool(false)}, {}},
          {"aten._softmax_backward_data.default",
           {r("g"), r("x"), Value::Int(2), Value::String("torch.float32")},
           {}},
          {"aten._log_softmax_backward_data.default",
           {r("g"), r("x"), Value::Int(1), Value::String("torch.float32")},
           {}},
      },
      1e-6);
  t.Check(
      {
          {"aten.sum.dim_IntList", {r("x"), dims({1})}, {}},
          {"aten.sum.dim_IntList", {r("x"), dims({0, 2})}, {}},
          {"aten.sum.dim_IntList", {r("x"), dims({-1}), Value::Bool(true)}, {}},
          {"aten.sum.dim_IntList", {r("xt"), dims({1, 2})}, {}},
          {"aten.sum.dim_IntList", {r("x"), Value()}, {}},
          {"aten.mean.dim", {r("x"), dims({-1})}, {}},
          {"aten.mean.dim", {r("xt"), dims({0})}, {{"keepdim", Value::Bool(true)}}},
          {"aten.sum.default", {r("x")}, {}},
          {"aten.mean.default", {r("xt")}, {}},
      },
      1e-6);
  EXPECT_EQ(t.Ran("reduce"), 14);  // every case on the device
  EXPECT_EQ(CudaKernelKind("aten.mean.dim"), "reduction");
}

// Convolutions on cuDNN (the emulated device's are the definition, in double) against the
// CPU's im2col + GEMM: grouped with a bias, strided without; the backward's three results.
TEST(CudaKernelsTest, ConvolutionsMatchTheCpuKernels) {
  DeviceVersusCpu t;
  auto r = [&](const char* n) { return t.Ref(n); };
  t.Check(
      {
          {"aten.convolution.default",
           {r("img"), r("wt"), r("bias6"), ints({1, 1}), ints({1, 1}), ints({1, 1}),
            Value::Bool(false), ints({0, 0}), Value::Int(2)},
           {}},
          {"aten.convolution.default",
           {r("img"), r("wt1"), Value(), ints({2, 2}), ints({0, 0}), ints({1, 1}),
            Value::Bool(false), ints({0, 0}), Value::Int(1)},
           {}},
          {"aten.convolution_backward.default",
           {r("gy"), r("img"), r("wt"), ints({6}), ints({1, 1}), ints({1, 1}), ints({1, 1}),
            Value::Bool(false), ints({0, 0}), Value::Int(2), bools({true, true, true})},
           {}},
          {"aten.convolution_backward.default",
           {r("gy1"), r("img"), r("wt1"), Value(), ints({2, 2}), ints({0, 0}), ints({1, 1}),
            Value::Bool(false), ints({0, 0}), Value::Int(1), bools({true, false, false})},
           {}},
      },
      1e-5);
  EXPECT_EQ(t.Ran("convolution"), 5);  // two forward, three backward passes
  EXPECT_EQ(CudaKernelKind("aten.convolution.default"), "cudnn");
}

// A 1-D convolution runs on cuDNN as a 2-D one of unit height; a 3-D one takes the host path.
// Both give the CPU kernels' answer, forward and backward.
TEST(CudaKernelsTest, OneAndThreeDimensionalConvolutionsMatchTheCpuKernels) {
  DeviceVersusCpu t;
  auto r = [&](const char* n) { return t.Ref(n); };
  t.Check(
      {
          {"aten.convolution.default",
           {r("sig"), r("wsig"), r("bias6"), ints({2}), ints({1}), ints({1}), Value::Bool(false),
            ints({0}), Value::Int(2)},
           {}},
          {"aten.convolution_backward.default",
           {r("gsig"), r("sig"), r("wsig"), ints({6}), ints({2}), ints({1}), ints({1}),
            Value::Bool(false), ints({0}), Value::Int(2), bools({true, true, true})},
           {}},
      },
      1e-5);
  EXPECT_EQ(t.Ran("convolution"), 3);  // one forward, two backward passes
  t.Check(
      {
          {"aten.convolution.default",
           {r("vol"), r("wvol"), Value(), ints({1, 1, 1}), ints({0, 1, 0}), ints({1}),
            Value::Bool(false), ints({0, 0, 0}), Value::Int(1)},
           {}},
          {"aten.convolution_backward.default",
           {r("gvol"), r("vol"), r("wvol"), ints({4}), ints({1}), ints({0, 1, 0}), ints({1}),
            Value::Bool(false), ints({0}), Value::Int(1), bools({true, true, true})},
           {}},
      },
      1e-5);
  EXPECT_EQ(t.Ran("convolution"), 3);  // the 3-D ones on the host
}

// The nn family (nn_ops.h's formulas, the CPU kernels' own: bit-identical on the emulated
// device), batch norm through the cuDNN seam (the emulated device's is the same formula),
// and attention on cuBLAS products (the emulated GEMM sums in double, OpenBLAS in float:
// within 1e-5). Every case runs on the device (the trace's counts), none on the host.
TEST(CudaKernelsTest, NnFamilyMatchesTheCpuKernels) {
  DeviceVersusCpu t;
  auto r = [&](const char* n) { return t.Ref(n); };
  const Value eps = Value::Double(1e-5), none;
  const Value all = bools({true, true, true});
  t.Check(
      {
          {"aten.native_layer_norm.default", {r("x"), ints({4}), r("w4"), r("b4"), eps}, {}},
          {"aten.native_layer_norm.default", {r("xt"), ints({2}), none, none, eps}, {}},
          {"aten.native_layer_norm_backward.default",
           {r("g"), r("x"), ints({4}), r("m231"), r("r231"), r("w4"), r("b4"), all},
           {}},
          {"aten.native_layer_norm_backward.default",
           {r("g"), r("x"), ints({4}), r("m231"), r("r231"), none, none,
            bools({false, true, true})},
           {}},
          {"aten.native_batch_norm.default",
           {r("img"), r("w4"), r("b4"), none, none, Value::Bool(true), Value::Double(0.1), eps},
           {}},
          {"aten.native_batch_norm.default",
           {r("img"), r("w4"), r("b4"), r("b4"), r("var4"), Value::Bool(false), Value::Double(0.1),
            eps},
           {}},
          {"aten.native_batch_norm.default",
           {r("img"), none, none, none, none, Value::Bool(true), Value::Double(0.1), eps},
           {}},
          {"aten.native_batch_norm_backward.default",
           {r("gimg"), r("img"), r("w4"), none, none, r("b4"), r("var4"), Value::Bool(true), eps,
            all},
           {}},
          {"aten.native_batch_norm_backward.default",
           {r("gimg"), r("img"), r("w4"), r("b4"), r("var4"), none, none, Value::Bool(false), eps,
            bools({true, false, true})},
           {}},
          {"aten.max_pool2d_with_indices.default",
           {r("img"), ints({3, 3}), ints({2, 2}), ints({1, 1}), ints({1, 1}), Value::Bool(false)},
           {}},
          {"aten.max_pool2d_with_indices_backward.default",
           {r("gpool"), r("img"), ints({3, 3}), ints({2, 2}), ints({1, 1}), ints({1, 1}),
            Value::Bool(false), r("pidx")},
           {}},
          {"aten.nll_loss_forward.default",
           {r("lp"), r("tgt"), r("w5"), Value::Int(1), Value::Int(-100)},
           {}},
          {"aten.nll_loss_forward.default",
           {r("lp"), r("tgt"), none, Value::Int(0), Value::Int(-100)},
           {}},
          {"aten.nll_loss_forward.default",
           {r("lp"), r("tgt"), none, Value::Int(2), Value::Int(-100)},
           {}},
          {"aten.nll_loss_backward.default",
           {r("g0"), r("lp"), r("tgt"), r("w5"), Value::Int(1), Value::Int(-100), r("tw")},
           {}},
          {"aten.mse_loss.default", {r("a"), r("p"), Value::Int(1)}, {}},
          {"aten.mse_loss.default", {r("t"), r("t"), Value::Int(0)}, {}},
          {"aten.mse_loss_backward.default", {r("g0"), r("a"), r("p"), Value::Int(2)}, {}},
          {"aten.mse_loss_backward.default", {r("a"), r("p"), r("a"), Value::Int(0)}, {}},
          {"aten.embedding.default", {r("emb"), r("eidx")}, {}},
          {"aten.embedding_dense_backward.default",
           {r("gemb"), r("eidx"), Value::Int(6), Value::Int(2), Value::Bool(false)},
           {}},
          {"aten.index_select.default", {r("x"), Value::Int(1), r("sel")}, {}},
          {"aten.index_select.default", {r("xt"), Value::Int(-1), r("sel2")}, {}},
          {"aten.index_add.default",
           {r("x"), Value::Int(1), r("sel"), r("src")},
           {{"alpha", Value::Double(0.5)}}},
          // Copies only: the device's copy kernel (a transposed operand included).
          {"aten.cat.default", {Value::List({r("a"), r("p")}), Value::Int(0)}, {}},
          {"aten.cat.default", {Value::List({r("t"), r("t")}), Value::Int(-1)}, {}},
          {"aten.slice_backward.default",
           {r("t"), ints({3, 5}), Value::Int(1), Value::Int(1), Value::Int(-1), Value::Int(2)},
           {}},
      },
      0);
  EXPECT_EQ(CudaKernelKind("aten.cat.default"), "copy");
  // 27 cases: three through cuDNN, three copying, layer norm's full backward in two launches.
  EXPECT_EQ(t.Ran("nn"), 22);
  EXPECT_EQ(t.Ran("batch norm"), 3);
  t.Check(
      {
          // Grouped-query (4 query heads on 2 key / value heads) and causal; plain.
          {"aten._scaled_dot_product_flash_attention.default",
           {r("q"), r("k"), r("v"), Value::Double(0.0), Value::Bool(true)},
           {}},
          {"aten._scaled_dot_product_flash_attention.default",
           {r("q2"), r("k"), r("v"), Value::Double(0.0), Value::Bool(false)},
           {}},
          {"aten._scaled_dot_product_flash_attention_backward.default",
           {r("go"), r("q"), r("k"), r("v"), r("o"), none, none, none, Value::Int(3), Value::Int(3),
            Value::Double(0.0), Value::Bool(true)},
           {}},
          {"aten._scaled_dot_product_flash_attention_backward.default",
           {r("go2"), r("q2"), r("k"), r("v"), r("o2"), none, none, none, Value::Int(3),
            Value::Int(3), Value::Double(0.0), Value::Bool(false)},
           {}},
      },
      1e-5);
  EXPECT_GT(t.Ran("gemm"), 0);
  EXPECT_EQ(t.Ran("nn"), 22 + 6);  // softmax rows: one per forward, two per backward
}

// A bad index on the device cannot fail its kernel: it is recorded and reported at the next
// host wait, naming the node, and the device is usable afterwards.
TEST(CudaKernelsTest, BadIndexOnTheDeviceFailsTheNextHostWait) {
  DeviceVersusCpu t;
  absl::StatusOr<std::vector<Tensor>> rows =
      t.RunOnDevice("aten.embedding.default", {t.Ref("emb"), t.Ref("bad")});
  ASSERT_TRUE(rows.ok()) << rows.status();
  Allocator host;
  Tensor back = *Tensor::Empty(host, DType::kFloat32, (*rows)[0].shape());
  absl::Status s = t.dev().Copy((*rows)[0], back);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("(aten.embedding.default): embedding index 9 out of range "
                                   "[0, 6)"));
  EXPECT_TRUE(t.dev().Copy((*rows)[0], back).ok()) << "the record is cleared once reported";
  EXPECT_TRUE(t.dev().Synchronize().ok());
  // The row the good index named was copied all the same.
  for (int64_t j = 0; j < 3; ++j) EXPECT_NE(GetElement(back, j), 0.0);
}

// Arguments ATen refuses are refused on the device too (the host kernel names them), never
// read as something else: a loss reduction outside 0..2, a dimension summed twice.
TEST(CudaKernelsTest, WhatATenRefusesIsRefusedOnTheDevice) {
  DeviceVersusCpu t;
  absl::StatusOr<std::vector<Tensor>> r =
      t.RunOnDevice("aten.mse_loss.default", {t.Ref("x"), t.Ref("x"), Value::Int(3)});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("argument 'reduction'"));
  r = t.RunOnDevice("aten.sum.dim_IntList",
                    {t.Ref("x"), Value::List({Value::Int(0), Value::Int(-3)}), Value::Bool(false)});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("appears more than once"));
}

// One reader per op (runtime/kernels/op_args.h) for both backends: the same results, ATen's
// addmm included (beta and alpha applied, self broadcast as a row or a column, not read when
// beta is 0), over a sweep of the device kernels' ops with keywords.
TEST(CudaKernelsTest, DeviceAndCpuReadArgumentsAlike) {
  DeviceVersusCpu t;
  auto r = [&](const char* n) { return t.Ref(n); };
  const ValueDict scaled = {{"beta", Value::Double(0.5)}, {"alpha", Value::Double(2.0)}};
  t.Check(
      {
          {"aten.addmm.default", {r("b2"), r("a"), r("t")}, scaled},
          {"aten.addmm.default", {r("c21"), r("a"), r("t")}, scaled},
          {"aten.addmm.default", {r("b"), r("t"), r("a")}, scaled},
          {"aten.addmm.default",
           {r("b"), r("t"), r("a")},
           {{"beta", Value::Int(0)}, {"alpha", Value::Double(-1.5)}}},
          {"aten.addmm.default", {r("b2"), r("a"), r("t")}, {}},
          {"aten.mm.default", {r("t"), r("a")}, {}},
          {"aten.sum.dim_IntList",
           {r("x"), ints({1, -1}), Value::Bool(true)},
           {{"dtype", Value::String("float64")}}},
          {"aten.mean.dim", {r("xt"), ints({0}), Value::Bool(false)}, {}},
          {"aten.sum.default", {r("x")}, {}},
          {"aten._softmax.default", {r("x"), Value::Int(1), Value::Bool(false)}, {}},
          {"aten._log_softmax.default", {r("xt"), Value::Int(-1), Value::Bool(false)}, {}},
          {"aten.nll_loss_forward.default",
           {r("lp"), r("sel"), r("w5"), Value::Int(2), Value::Int(2)},
           {}},
          {"aten.mse_loss.default", {r("a"), r("p")}, {}},
          {"aten.index_add.default", {r("x"), Value::Int(-2), r("sel2"), r("x")}, {}},
      },
      1e-5);
  absl::StatusOr<std::vector<Tensor>> bad =
      t.RunOnDevice("aten.addmm.default", {r("a"), r("a"), r("t")});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("does not broadcast to [2, 2]"));
}

// The registration is the one statement of device support: every CPU op has a kind, the
// registry CudaKernels builds records the kind CudaKernelKind reports, and an op runs as its
// kind says (a "host" op makes the host wait for the device; a device kind runs its kernel
// without a host wait).
TEST(CudaKernelsTest, EveryOpRunsAsItsRegisteredKind) {
  DeviceVersusCpu t;
  FakeGpuApi api;
  auto dev = CudaDevice::Create(&api, 0);
  ASSERT_TRUE(dev.ok());
  const KernelRegistry kernels = CudaKernels(**dev);
  const std::set<std::string> kinds = {"view", "cublas",     "cudnn", "elementwise", "reduction",
                                       "nn",   "allocation", "copy",  "host"};
  for (const std::string& target : CpuKernels().Targets()) {
    EXPECT_TRUE(kinds.count(CudaKernelKind(target))) << target << ": " << CudaKernelKind(target);
    EXPECT_EQ(kernels.KindOf(target), CudaKernelKind(target)) << target;
  }
  EXPECT_EQ(CudaKernelKind("mylib.no_such_op.default"), "");
  auto r = [&](const char* n) { return t.Ref(n); };
  struct Run {
    std::string target;
    std::vector<Value> args;
    std::string trace;  // the fake's name for the kernel it runs ("" for none)
  };
  const std::vector<Run> runs = {
      {"aten.topk.default", {r("x"), Value::Int(2)}, ""},
      {"aten.relu.default", {r("a")}, "elementwise"},
      {"aten.sum.dim_IntList", {r("x"), ints({1}), Value::Bool(false)}, "reduce"},
      {"aten.embedding.default", {r("emb"), r("eidx")}, "nn"},
      {"aten.mm.default", {r("a"), r("t")}, "gemm"},
      {"aten.cat.default", {Value::List({r("a"), r("p")}), Value::Int(0)}, "copy"},
      {"aten.view.default", {r("x"), ints({6, 4})}, ""},
  };
  for (const Run& run : runs) {
    SCOPED_TRACE(run.target);
    const int syncs = t.Syncs();
    const int64_t ran = run.trace.empty() ? 0 : t.Ran(run.trace);
    absl::StatusOr<std::vector<Tensor>> got = t.RunOnDevice(run.target, run.args);
    ASSERT_TRUE(got.ok()) << got.status();
    const bool host = CudaKernelKind(run.target) == "host";
    EXPECT_EQ(t.Syncs() > syncs, host);
    if (!run.trace.empty()) {
      EXPECT_GT(t.Ran(run.trace), ran);
    }
  }
}

}  // namespace
}  // namespace overlap
