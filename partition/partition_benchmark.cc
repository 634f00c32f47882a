// Scaling of the DDP partitioner on random graphs (module-owned parameters, 25 MiB cap):
// bucket assignment alone, and assignment + split into verified subgraphs (timed without
// freeing the result, which the caller does when it is done with the pieces).
//   bazel run //partition:partition_benchmark
#include <map>
#include <memory>

#include "benchmark/benchmark.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "partition/buckets.h"
#include "partition/ddp_partitioner.h"

namespace overlap {
namespace {

const Graph& Cached(int64_t nodes) {
  static auto* cache = new std::map<int64_t, Graph>();
  auto it = cache->find(nodes);
  if (it == cache->end()) {
    RandomGraphOptions o;
    o.nodes = nodes;
    it = cache->emplace(nodes, RandomGraph(o)).first;
  }
  return it->second;
}

void BM_AssignBuckets(benchmark::State& state) {
  const Graph& g = Cached(state.range(0));
  BucketOptions o;
  o.mode = state.range(1) ? PartitionMode::kReference : PartitionMode::kDefault;
  size_t buckets = 0;
  for (auto _ : state) {
    absl::StatusOr<std::vector<Bucket>> b = AssignBuckets(g, o);
    buckets = b->size();
    benchmark::DoNotOptimize(b);
  }
  state.counters["buckets"] = static_cast<double>(buckets);
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_AssignBuckets)
    ->ArgsProduct({{10000, 100000, 1000000}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// Times the whole pass on `g`, freeing each result outside the timed region.
void TimeSplit(benchmark::State& state, const Graph& g) {
  PartitionOptions o;
  o.buckets.mode = state.range(1) ? PartitionMode::kReference : PartitionMode::kDefault;
  size_t pieces = 0;
  for (auto _ : state) {
    auto r = std::make_unique<absl::StatusOr<PartitionResult>>(DdpPartitioner(o).Run(g));
    pieces = (*r)->pieces.submodules.size();
    benchmark::DoNotOptimize(r);
    // Freeing the result (1-2 million nodes at 1M) is the caller's business, not the pass's.
    state.PauseTiming();
    r.reset();
    state.ResumeTiming();
  }
  state.counters["nodes"] = static_cast<double>(g.size());
  state.counters["submodules"] = static_cast<double>(pieces);
  state.SetItemsProcessed(state.iterations() * g.size());
}

void BM_PartitionAndSplit(benchmark::State& state) { TimeSplit(state, Cached(state.range(0))); }
BENCHMARK(BM_PartitionAndSplit)
    ->ArgsProduct({{10000, 100000, 1000000}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// A realistic shape at the same sizes: GPT-2 blocks stacked until the graph has about
// 10k / 100k / 1M nodes (24 nodes per block, module-owned parameters).
const Graph& Transformer(int64_t nodes) {
  static auto* cache = new std::map<int64_t, Graph>();
  auto it = cache->find(nodes);
  if (it == cache->end()) {
    TransformerConfig c = Gpt2Config();
    c.layers = nodes / 24;
    c.batch = 1;
    c.seq = 128;
    it = cache->emplace(nodes, *BuildTransformer(c, ModelOptions())).first;
  }
  return it->second;
}

void BM_PartitionAndSplitTransformer(benchmark::State& state) {
  TimeSplit(state, Transformer(state.range(0)));
}
BENCHMARK(BM_PartitionAndSplitTransformer)
    ->ArgsProduct({{10000, 100000, 1000000}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace overlap

BENCHMARK_MAIN();
