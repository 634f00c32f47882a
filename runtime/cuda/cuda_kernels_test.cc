// The device interpreter through the fake seam: every tiny model's forward and backward on
// CudaKernels (cuBLAS products through the fake's column-major GEMM, the rest through host
// copies) against the CPU interpreter, with the device's memory equal to the host's, every
// buffer use ordered, and no device-wide synchronisation.
#include "runtime/cuda/cuda_kernels.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/cuda/fake_gpu_api.h"
#include "runtime/interpreter.h"
#include "runtime/synthetic.h"
#include "runtime/train.h"

namespace overlap {
namespace {

AotPair TinyPair(const std::string& model) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  absl::StatusOr<AotPair> pair = BuildAotPair(*BuildModel(model, o, Preset::kTiny));
  EXPECT_TRUE(pair.ok()) << pair.status();
  return *std::move(pair);
}

// Largest |a - b| / (1 + |b|) over the elements; the device tensor is copied to the host.
double Difference(CudaDevice& dev, const Tensor& device, const Tensor& host) {
  Allocator h;
  Tensor back = *Tensor::Uninitialized(h, host.dtype(), host.shape());
  EXPECT_TRUE(dev.Copy(device, back).ok());
  double worst = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    const double a = GetElement(back, i), b = GetElement(host, i);
    worst = std::max(worst, std::abs(a - b) / (1 + std::abs(b)));
  }
  return worst;
}

TEST(CudaKernelsTest, EveryTinyModelMatchesTheCpuInterpreter) {
  for (const std::string& model : ModelNames()) {
    SCOPED_TRACE(model);
    const AotPair pair = TinyPair(model);
    Allocator alloc;
    absl::StatusOr<TensorMap> inputs = SeededInputs(pair.forward, 1, alloc);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    absl::StatusOr<AotStepResult> cpu = RunAotStep(pair, *inputs, *inputs);
    ASSERT_TRUE(cpu.ok()) << cpu.status();

    FakeGpuApi api;
    auto dev = CudaDevice::Create(&api, 0);
    ASSERT_TRUE(dev.ok()) << dev.status();
    KernelRegistry kernels = CudaKernels(**dev);
    InterpreterOptions o;
    o.device = dev->get();
    o.kernels = &kernels;
    {
      absl::StatusOr<AotStepResult> gpu = RunAotStep(pair, *inputs, *inputs, o);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_NEAR(gpu->loss, cpu->loss, 1e-5 * (1 + std::abs(cpu->loss)));
      ASSERT_EQ(gpu->grads.size(), cpu->grads.size());
      for (const auto& [name, g] : cpu->grads) {
        ASSERT_EQ(gpu->grads.count(name), 1u) << name;
        EXPECT_EQ(gpu->grads.at(name).device(), Device::kCuda);
        EXPECT_LT(Difference(**dev, gpu->grads.at(name), g), 1e-4) << name;
      }
      // One memory plan: the device holds what the host held.
      EXPECT_EQ(gpu->forward.peak_bytes, cpu->forward.peak_bytes);
      EXPECT_EQ(gpu->backward.peak_bytes, cpu->backward.peak_bytes);
    }
    ASSERT_TRUE((*dev)->Synchronize().ok());
    EXPECT_TRUE(api.violations().empty()) << absl::StrJoin(api.violations(), "\n");
    EXPECT_EQ(api.device_synchronizations(), 0);
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
    if (addmm) {
      args.push_back(Value::Double(0.5));  // beta
      args.push_back(Value::Double(2.0));  // alpha
    }
    const NodeId id = *g.AddNode(Op::kCallFunction, addmm ? "addmm" : "mm",
                                 addmm ? "aten.addmm.default" : "aten.mm.default", args);
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
  EXPECT_EQ(CudaKernelKind("aten._softmax.default"), "host");
  EXPECT_TRUE(api.violations().empty()) << absl::StrJoin(api.violations(), "\n");
}

// The elementwise family on the device against the CPU kernels: the same formulas in the
// same type (elementwise_ops.h), and on the emulated device the same math library, so the
// results must be bit-identical, broadcasting, strided operands and scalar variants
// included.
TEST(CudaKernelsTest, ElementwiseFamilyIsBitIdenticalToTheCpuKernels) {
  FakeGpuApi api;
  auto dev = CudaDevice::Create(&api, 0);
  ASSERT_TRUE(dev.ok());
  Allocator host, on_device(dev->get());
  KernelRegistry kernels = CudaKernels(**dev);
  // Host operands and their device copies; `t` is a transposed view ([3, 2] of a [2, 3]).
  auto make = [&](std::vector<int64_t> shape, double scale, double shift) {
    Tensor h = *Tensor::Empty(host, DType::kFloat32, shape);
    for (int64_t i = 0; i < h.numel(); ++i)
      SetElement(h, i, scale * std::sin(1.3 * i + 0.2) + shift);
    return h;
  };
  std::map<std::string, Tensor> hosts = {{"a", make({2, 3}, 2.0, 0)},
                                         {"b", make({3}, 1.5, 0.1)},
                                         {"c", make({2, 1, 3}, 1.0, 0)},
                                         {"d", make({4, 1}, 3.0, 0)},
                                         {"p", make({2, 3}, 1.0, 2.5)}};  // positive
  hosts["t"] = *hosts["a"].Transpose(0, 1);
  std::map<std::string, Tensor> devs;
  for (const auto& [name, h] : hosts) {
    if (name == "t") continue;
    devs[name] = *Tensor::Empty(on_device, h.dtype(), h.shape());
    ASSERT_TRUE((*dev)->Copy(h, devs[name]).ok());
  }
  devs["t"] = *devs["a"].Transpose(0, 1);

  Graph g;
  std::map<NodeId, std::string> placeholder;
  std::map<std::string, NodeId> id;
  for (const auto& [name, h] : hosts) {
    id[name] = *g.AddNode(Op::kPlaceholder, name, name);
    placeholder[id[name]] = name;
  }
  auto ref = [&](const char* n) { return Value::Ref(id[n]); };
  struct Case {
    std::string target;
    std::vector<Value> args;
    ValueDict kwargs;
  };
  const std::vector<Case> cases = {
      {"aten.add.Tensor", {ref("a"), ref("b")}, {{"alpha", Value::Double(2.0)}}},
      {"aten.add.Tensor", {ref("t"), Value::Double(1.5)}, {{"alpha", Value::Double(0.5)}}},
      {"aten.mul.Tensor", {ref("c"), ref("d")}, {}},
      {"aten.mul.Tensor", {ref("t"), ref("t")}, {}},
      {"aten.add.Scalar", {ref("a"), Value::Double(2.0)}, {{"alpha", Value::Double(3.0)}}},
      {"aten.mul.Scalar", {ref("t"), Value::Double(-1.5)}, {}},
      {"aten.div.Scalar", {ref("a"), Value::Double(4.0)}, {}},
      {"aten.div.Tensor_mode", {ref("a"), ref("b")}, {{"rounding_mode", Value::String("floor")}}},
      {"aten.div.Tensor_mode", {ref("a"), ref("b")}, {{"rounding_mode", Value::String("trunc")}}},
      {"aten.div.Tensor_mode", {ref("a"), Value::Double(0.3)}, {}},
      {"aten.pow.Tensor_Scalar", {ref("a"), Value::Double(2)}, {}},
      {"aten.pow.Tensor_Scalar", {ref("t"), Value::Double(3)}, {}},
      {"aten.pow.Tensor_Scalar", {ref("p"), Value::Double(0.5)}, {}},
      {"aten.rsqrt.default", {ref("p")}, {}},
      {"aten.relu.default", {ref("t")}, {}},
      {"aten.silu.default", {ref("a")}, {}},
      {"aten.gelu.default", {ref("a")}, {}},
      {"aten.gelu.default", {ref("t")}, {{"approximate", Value::String("tanh")}}},
      {"aten.gelu_backward.default", {ref("a"), ref("p")}, {}},
      {"aten.gelu_backward.default",
       {ref("c"), ref("b")},
       {{"approximate", Value::String("tanh")}}},
      {"aten.silu_backward.default", {ref("t"), ref("t")}, {}},
      {"aten.threshold_backward.default", {ref("a"), ref("b"), Value::Double(0.2)}, {}},
      {"aten.zeros_like.default", {ref("t")}, {}},
  };
  int k = 0;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.target + " #" + std::to_string(k));
    const NodeId n =
        *g.AddNode(Op::kCallFunction, "op" + std::to_string(k++), cs.target, cs.args, cs.kwargs);
    KernelCall cpu_call(g.node(n), host,
                        [&](NodeId in) -> const Tensor* { return &hosts.at(placeholder.at(in)); });
    absl::StatusOr<std::vector<Tensor>> want = (*CpuKernels().Find(cs.target))(cpu_call);
    ASSERT_TRUE(want.ok()) << want.status();
    KernelCall dev_call(g.node(n), on_device,
                        [&](NodeId in) -> const Tensor* { return &devs.at(placeholder.at(in)); });
    absl::StatusOr<std::vector<Tensor>> got = (*kernels.Find(cs.target))(dev_call);
    ASSERT_TRUE(got.ok()) << got.status();
    const Tensor& w = (*want)[0];
    ASSERT_EQ((*got)[0].device(), Device::kCuda);
    Tensor back = *Tensor::Empty(host, w.dtype(), w.shape());
    ASSERT_TRUE((*dev)->Copy((*got)[0], back).ok());
    for (int64_t i = 0; i < w.numel(); ++i) {
      ASSERT_EQ(back.data<float>()[i], w.data<float>()[i]) << "element " << i;
    }
  }
  EXPECT_EQ(CudaKernelKind("aten.gelu.default"), "elementwise");
  EXPECT_EQ(CudaKernelKind("aten.zeros_like.default"), "allocation");
  EXPECT_TRUE(api.violations().empty()) << absl::StrJoin(api.violations(), "\n");
}

}  // namespace
}  // namespace overlap
