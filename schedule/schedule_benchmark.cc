// Run time of the ZeRO-3 passes on the built-in models (lifted, forward): insertion,
// fast_free and its reference implementation, ours and the simulator; and ours on random
// graphs of 10k / 100k / 1M nodes.
//   bazel run //schedule:schedule_benchmark
#include <map>
#include <string>

#include "benchmark/benchmark.h"
#include "graph/adversarial_graphs.h"
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
    benchmark::DoNotOptimize(LookaheadPrefetchSchedule(g, WithMemoryLimit(std::nullopt)));
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
    const int64_t least = LookaheadPrefetchSchedule(g, WithMemoryLimit(1))->min_feasible_bytes;
    budget = least + least / 1000;
  }
  int lookahead = 0;
  for (auto _ : state) {
    absl::StatusOr<LookaheadResult> r = LookaheadPrefetchSchedule(g, WithMemoryLimit(budget));
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

}  // namespace
}  // namespace overlap

BENCHMARK_MAIN();
