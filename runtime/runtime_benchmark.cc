// Kernel speed: sgemm through OpenBLAS in GFLOP/s (docs/runtime.md compares it with the
// machine's peak), the elementwise and reduction kernels in GB/s beside memcpy's, and one
// training step of tiny gpt2.
//   bazel run //runtime:runtime_benchmark
#include <cstring>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "graph/graph.h"
#include "runtime/core/blas.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/kernel.h"
#include "runtime/train/train.h"

namespace overlap {
namespace {

// Arguments: n, threads, library (0: oneDNN, 1: OpenBLAS).
void BM_Sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  SetBlasThreads(static_cast<int>(state.range(1)));
  const GemmLibrary before = Float32Gemm();
  SetFloat32Gemm(state.range(2) == 0 ? GemmLibrary::kOneDnn : GemmLibrary::kOpenBlas);
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  for (auto _ : state) {
    Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = static_cast<double>(GetBlasInfo().threads);
  state.SetLabel(GetBlasInfo().float32);
  SetFloat32Gemm(before);
}
BENCHMARK(BM_Sgemm)
    ->ArgsProduct({{64, 256, 1024}, {1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The bandwidth a kernel is measured against: copying n floats.
void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n * sizeof(float));
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Memcpy)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);

// One kernel on float32 tensors of n elements (rows of 1,024), timed with its output's
// allocation; bytes are the tensors it reads and writes.
void RunKernel(benchmark::State& state, const std::string& target, int inputs,
               std::vector<Value> extra, int64_t bytes_per_element) {
  const int64_t n = state.range(0);
  Allocator alloc;
  Graph g;
  std::vector<Value> args;
  std::vector<Tensor> tensors;
  absl::flat_hash_map<NodeId, Tensor> by_id;
  for (int i = 0; i < inputs; ++i) {
    const NodeId id = *g.AddNode(Op::kPlaceholder, "p" + std::to_string(i), "p", {}, {});
    Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {n / 1024, 1024});
    for (int64_t k = 0; k < n; ++k)
      t.data<float>()[k] = 0.001f * static_cast<float>((k * 7919) % 997) - 0.4f;
    by_id[id] = t;
    args.push_back(Value::Ref(id));
  }
  for (Value& v : extra) args.push_back(std::move(v));
  const NodeId call = *g.AddNode(Op::kCallFunction, "op", target, args, {});
  const Kernel& kernel = *CpuKernels().Find(target);
  for (auto _ : state) {
    KernelCall c(g.node(call), alloc, [&](NodeId id) { return &by_id.at(id); });
    absl::StatusOr<std::vector<Tensor>> out = kernel(c);
    if (!out.ok()) {
      state.SkipWithError(std::string(out.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(out->data());
  }
  state.SetBytesProcessed(state.iterations() * n * bytes_per_element);
}

void BM_AddTensor(benchmark::State& state) { RunKernel(state, "aten.add.Tensor", 2, {}, 12); }
BENCHMARK(BM_AddTensor)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_MulScalar(benchmark::State& state) {
  RunKernel(state, "aten.mul.Scalar", 1, {Value::Double(0.5)}, 8);
}
BENCHMARK(BM_MulScalar)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_GeluTanh(benchmark::State& state) {
  RunKernel(state, "aten.gelu.default", 1, {Value::String("tanh")}, 8);
}
BENCHMARK(BM_GeluTanh)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_Gelu(benchmark::State& state) { RunKernel(state, "aten.gelu.default", 1, {}, 8); }
BENCHMARK(BM_Gelu)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_GeluBackward(benchmark::State& state) {
  RunKernel(state, "aten.gelu_backward.default", 2, {}, 12);
}
BENCHMARK(BM_GeluBackward)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_HardtanhBackward(benchmark::State& state) {
  RunKernel(state, "aten.hardtanh_backward.default", 2, {Value::Double(0), Value::Double(6)}, 12);
}
BENCHMARK(BM_HardtanhBackward)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_LogSoftmax(benchmark::State& state) {
  RunKernel(state, "aten._log_softmax.default", 1, {Value::Int(-1), Value::Bool(false)}, 8);
}
BENCHMARK(BM_LogSoftmax)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_SumLastDim(benchmark::State& state) {
  RunKernel(state, "aten.sum.dim_IntList", 1, {Value::List({Value::Int(-1)}), Value::Bool(false)},
            4);
}
BENCHMARK(BM_SumLastDim)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_SumFirstDim(benchmark::State& state) {
  RunKernel(state, "aten.sum.dim_IntList", 1, {Value::List({Value::Int(0)}), Value::Bool(false)},
            4);
}
BENCHMARK(BM_SumFirstDim)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);
void BM_Softmax(benchmark::State& state) {
  RunKernel(state, "aten._softmax.default", 1, {Value::Int(-1), Value::Bool(false)}, 8);
}
BENCHMARK(BM_Softmax)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24);

// One optimizer step of tiny gpt2 (forward, backward, AdamW) on the interpreter.
void BM_TrainStepTinyGpt2(benchmark::State& state) {
  SetBlasThreads(1);
  absl::StatusOr<Trainer> t = Trainer::Create("gpt2", Preset::kTiny, TrainOptions{});
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<StepResult> s = t->Step();
    if (!s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return;
    }
  }
}
BENCHMARK(BM_TrainStepTinyGpt2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace overlap

BENCHMARK_MAIN();
