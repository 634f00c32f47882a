// The device interpreter through the fake seam: every tiny model's forward and backward on
// CudaKernels (cuBLAS products through the fake's column-major GEMM, the rest through host
// copies) against the CPU interpreter, with the device's memory equal to the host's, every
// buffer use ordered, and no device-wide synchronisation.
#include "runtime/cuda/cuda_kernels.h"

#include <cmath>
#include <string>

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
  EXPECT_EQ(CudaKernelKind("aten.relu.default"), "host");
  EXPECT_TRUE(api.violations().empty()) << absl::StrJoin(api.violations(), "\n");
}

}  // namespace
}  // namespace overlap
