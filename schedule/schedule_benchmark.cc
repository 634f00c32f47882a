// Run time of the ZeRO-3 passes on the built-in models (lifted, forward): insertion,
// fast_free and its reference implementation, ours and the simulator; and ours on random
// graphs of 10k / 100k / 1M nodes.
//   bazel run //schedule:schedule_benchmark
#include <map>
#include <string>

#include "benchmark/benchmark.h"
#include "graph/adversarial_graphs.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "schedule/fast_free.h"
#include "schedule/list_schedule.h"
#include "schedule/lookahead_prefetch.h"
#include "schedule/simple_prefetch.h"
#include "schedule/simulator.h"
#include "schedule/testing/fast_free_reference.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

const char* const kModels[] = {"gpt2", "llama-7b", "llama-70b", "moe"};

const Graph& Lifted(int index, bool inserted) {
  static auto* cache = new std::map<std::pair<int, bool>, Graph>();
  auto key = std::make_pair(index, inserted);
  auto it = cache->find(key);
  if (it == cache->end()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    Graph g = *BuildModel(kModels[index], o);
    if (inserted) (void)Zero3Insertion(GraphKind::kForward).Run(&g);
    it = cache->emplace(key, std::move(g)).first;
  }
  return it->second;
}

void Label(benchmark::State& state, const Graph& g) {
  int64_t gathers = 0;
  for (NodeId id : g.order()) gathers += g.node(id).target() == kAllgatherTarget;
  state.SetLabel(kModels[state.range(0)]);
  state.counters["nodes"] = static_cast<double>(g.size());
  state.counters["allgathers"] = static_cast<double>(gathers);
}

void BM_Zero3Insertion(benchmark::State& state) {
  const Graph& g = Lifted(state.range(0), false);
  for (auto _ : state) {
    Graph copy = g;
    benchmark::DoNotOptimize(Zero3Insertion(GraphKind::kForward).Run(&copy));
  }
  Label(state, Lifted(state.range(0), true));
}
BENCHMARK(BM_Zero3Insertion)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void BM_FastFreeReference(benchmark::State& state) {
  const Graph& g = Lifted(state.range(0), true);
  for (auto _ : state) benchmark::DoNotOptimize(FastFreeScheduleReference(g));
  Label(state, g);
}
BENCHMARK(BM_FastFreeReference)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void BM_FastFree(benchmark::State& state) {
  const Graph& g = Lifted(state.range(0), true);
  for (auto _ : state) benchmark::DoNotOptimize(FastFreeSchedule(g));
  Label(state, g);
}
BENCHMARK(BM_FastFree)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void BM_LookaheadPrefetch(benchmark::State& state) {
  const Graph& g = Lifted(state.range(0), true);
  for (auto _ : state)
    benchmark::DoNotOptimize(LookaheadPrefetchSchedule(g, WithBudget(std::nullopt)));
  Label(state, g);
}
BENCHMARK(BM_LookaheadPrefetch)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void BM_Simulate(benchmark::State& state) {
  const Graph& g = Lifted(state.range(0), true);
  const std::vector<NodeId> order = g.OrderVector();
  for (auto _ : state) benchmark::DoNotOptimize(Simulate(g, order));
  Label(state, g);
}
BENCHMARK(BM_Simulate)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

// Ours on random lifted graphs of 10k / 100k / 1M nodes (forward insertion), with no
// limit (range 1 = 0) and just above the smallest feasible budget (range 1 = 1: S_0's peak
// + 0.1%, the slowest band: several candidates fit and none reaches the compute bound).
const Graph& RandomInserted(int64_t nodes) {
  static auto* cache = new std::map<int64_t, Graph>();
  auto it = cache->find(nodes);
  if (it == cache->end()) {
    RandomGraphOptions o;
    o.nodes = nodes;
    o.lifted = true;
    Graph g = RandomGraph(o);
    (void)Zero3Insertion(GraphKind::kForward).Run(&g);
    it = cache->emplace(nodes, std::move(g)).first;
  }
  return it->second;
}

void BM_LookaheadRandom(benchmark::State& state) {
  const Graph& g = RandomInserted(state.range(0));
  std::optional<int64_t> budget;
  if (state.range(1) == 1) {
    const int64_t least = LookaheadPrefetchSchedule(g, WithBudget(1))->min_feasible_bytes;
    budget = least + least / 1000;
  }
  int lookahead = 0;
  for (auto _ : state) {
    absl::StatusOr<LookaheadResult> r = LookaheadPrefetchSchedule(g, WithBudget(budget));
    lookahead = r->lookahead;
    benchmark::DoNotOptimize(r);
  }
  state.counters["nodes"] = static_cast<double>(g.size());
  state.counters["k"] = lookahead;
}
BENCHMARK(BM_LookaheadRandom)
    ->ArgsProduct({{10000, 100000, 1000000}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// Shapes an adversarial campaign found quadratic (graph/adversarial_graphs.h): insertion
// with many uses feeding the output, and the baselines on a plain matmul chain.
void BM_InsertionWideOutput(benchmark::State& state) {
  const Graph g =
      state.range(0) == 0 ? WideOutputGraph(1, state.range(1)) : WideOutputGraph(state.range(1), 1);
  for (auto _ : state) {
    Graph copy = g;
    benchmark::DoNotOptimize(Zero3Insertion(GraphKind::kForward).Run(&copy));
  }
  state.counters["nodes"] = static_cast<double>(g.size());
  state.SetComplexityN(state.range(1));
}
BENCHMARK(BM_InsertionWideOutput)
    ->ArgsProduct({{0, 1}, {2500, 10000, 40000, 160000}})
    ->Unit(benchmark::kMillisecond);

template <absl::StatusOr<std::vector<NodeId>> (*Schedule)(const Graph&)>
void BM_BaselineOnChain(benchmark::State& state) {
  Graph g = MatmulChainGraph(state.range(0));
  (void)Zero3Insertion(GraphKind::kForward).Run(&g);
  for (auto _ : state) benchmark::DoNotOptimize(Schedule(g));
  state.counters["nodes"] = static_cast<double>(g.size());
}
BENCHMARK(BM_BaselineOnChain<&FastFreeSchedule>)
    ->Name("BM_FastFreeOnChain")
    ->RangeMultiplier(4)
    ->Range(1000, 64000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BaselineOnChain<&SimplePrefetchSchedule>)
    ->Name("BM_SimplePrefetchOnChain")
    ->RangeMultiplier(4)
    ->Range(1000, 64000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BaselineOnChain<&ListSchedule>)
    ->Name("BM_ListOnChain")
    ->RangeMultiplier(4)
    ->Range(1000, 64000)
    ->Unit(benchmark::kMillisecond);

// The growth families of docs/benchmarks.md, "Scheduler growth": `gen mlp --layers L --width
// 64 --lifted` (range 0 = 0) and `gen gpt2 --layers L --lifted` (range 0 = 1), each the AOT
// forward with ZeRO-3 ops, L = range 1. Cached: each family is built once per L.
const Graph& Family(int64_t family, int64_t layers) {
  static auto* cache = new std::map<std::pair<int64_t, int64_t>, Graph>();
  auto key = std::make_pair(family, layers);
  auto it = cache->find(key);
  if (it == cache->end()) {
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> model;
    if (family == 0) {
      model = BuildMlp(ResizeMlp(MlpConfig(), layers, 64), o);
    } else {
      TransformerConfig c = Gpt2Config();
      c.layers = layers;
      model = BuildTransformer(c, o);
    }
    Graph g = std::move(BuildAotPair(*model)->forward);
    (void)Zero3Insertion(GraphKind::kForward).Run(&g);
    it = cache->emplace(key, std::move(g)).first;
  }
  return it->second;
}

template <absl::StatusOr<std::vector<NodeId>> (*Schedule)(const Graph&)>
void BM_OnFamily(benchmark::State& state) {
  const Graph& g = Family(state.range(0), state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(Schedule(g));
  state.SetLabel(state.range(0) == 0 ? "mlp" : "gpt2");
  state.counters["nodes"] = static_cast<double>(g.size());
}
constexpr int64_t kLayers[] = {128, 256, 512, 1024, 2048};
void FamilyArgs(benchmark::internal::Benchmark* b, int64_t max_mlp, int64_t max_gpt2) {
  for (int64_t l : kLayers) {
    if (l <= max_mlp) b->Args({0, l});
  }
  for (int64_t l : kLayers) {
    if (l <= max_gpt2) b->Args({1, l});
  }
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_OnFamily<&FastFreeSchedule>)->Name("BM_FastFreeFamily")->Apply([](auto* b) {
  FamilyArgs(b, 2048, 2048);
});
BENCHMARK(BM_OnFamily<&ListSchedule>)->Name("BM_ListFamily")->Apply([](auto* b) {
  FamilyArgs(b, 2048, 2048);
});
// simple_prefetch grows about K^2.6 (docs/benchmarks.md): the largest sizes take minutes.
BENCHMARK(BM_OnFamily<&SimplePrefetchSchedule>)
    ->Name("BM_SimplePrefetchFamily")
    ->Apply([](auto* b) { FamilyArgs(b, 2048, 512); });

}  // namespace
}  // namespace overlap

BENCHMARK_MAIN();
