// Kernel speed: sgemm through OpenBLAS in GFLOP/s (docs/runtime.md compares it with the
// machine's peak), at 1 and at all BLAS threads.
//   bazel run //runtime:runtime_benchmark
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/blas.h"

namespace overlap {
namespace {

void BM_Sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  SetBlasThreads(static_cast<int>(state.range(1)));
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  for (auto _ : state) {
    Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = static_cast<double>(GetBlasInfo().threads);
  state.SetLabel(GetBlasInfo().corename);
}
BENCHMARK(BM_Sgemm)
    ->ArgsProduct({{64, 256, 1024}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace overlap

BENCHMARK_MAIN();
