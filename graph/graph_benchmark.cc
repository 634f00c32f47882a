// Scaling of the graph IR: generation in memory, JSON write, JSON read + Verify, Verify
// alone, on random graphs with full metadata (the graphs `overlap gen random` writes).
//
// Peak RSS (getrusage ru_maxrss) is a process-wide high-water mark, so each benchmark's
// `peak_rss_mib` counter is only meaningful when it runs alone:
//   bazel run -c opt //graph:graph_benchmark -- --benchmark_filter='BM_ReadAndVerify/1000000'
// The file a read benchmark needs is written by a forked child, so writing it does not
// count against the reader's peak.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "graph/aot.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "graph/shape_rules.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

double PeakRssMib() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // KiB on Linux
}

std::string GraphFile(int64_t nodes) {
  const std::string path = absl::StrCat("/tmp/overlap_bench_random_", nodes, ".json");
  pid_t pid = fork();
  if (pid == 0) {
    RandomGraphOptions o;
    o.nodes = nodes;
    o.seed = 1;
    _exit(WriteGraphJsonFile(RandomGraph(o), path).ok() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return path;
}

void BM_ReadAndVerify(benchmark::State& state) {
  const std::string path = GraphFile(state.range(0));
  for (auto _ : state) {
    auto g = std::make_unique<absl::StatusOr<Graph>>(ReadGraphJsonFile(path));  // verifies
    if (!g->ok()) state.SkipWithError(std::string(g->status().message()).c_str());
    benchmark::DoNotOptimize(g);
    // Loading ends when the verified graph is in hand; freeing it is not part of it.
    state.PauseTiming();
    g.reset();
    state.ResumeTiming();
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  const long bytes = std::ftell(f);
  std::fclose(f);
  std::remove(path.c_str());
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["file_mib"] = bytes / 1048576.0;
  state.counters["peak_rss_mib"] = PeakRssMib();
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_ReadAndVerify)
    ->RangeMultiplier(10)
    ->Range(10000, 1000000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

void BM_Generate(benchmark::State& state) {
  RandomGraphOptions o;
  o.nodes = state.range(0);
  for (auto _ : state) benchmark::DoNotOptimize(RandomGraph(o));
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["peak_rss_mib"] = PeakRssMib();
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_Generate)
    ->RangeMultiplier(10)
    ->Range(10000, 1000000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

void BM_Verify(benchmark::State& state) {
  RandomGraphOptions o;
  o.nodes = state.range(0);
  Graph g = RandomGraph(o);
  for (auto _ : state) benchmark::DoNotOptimize(Verify(g));
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_Verify)
    ->RangeMultiplier(10)
    ->Range(10000, 1000000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

void BM_WriteJson(benchmark::State& state) {
  RandomGraphOptions o;
  o.nodes = state.range(0);
  Graph g = RandomGraph(o);
  int64_t bytes = 0;
  for (auto _ : state) {
    std::string s = WriteGraphJson(g);
    bytes = static_cast<int64_t>(s.size());
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_WriteJson)
    ->RangeMultiplier(10)
    ->Range(10000, 1000000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

// Objects with many keys, and many parameters of one owner: once quadratic in the reader
// (duplicate detection by scans), now hash-based. Read + Verify of an in-memory text.
std::string ManyKeysText(int64_t keys, bool params) {
  std::string text = R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "f", "op": "call_function", "target": "f", "args": ["%x"], "kwargs": {)";
  for (int64_t i = 0; !params && i < keys; ++i)
    absl::StrAppend(&text, i ? ", " : "", "\"k", i, "\": ", i);
  text.append(R"(}},
    {"name": "output", "op": "output", "target": "output", "args": ["%f"]}], "params": [)");
  for (int64_t i = 0; params && i < keys; ++i) {
    absl::StrAppend(&text, i ? ", " : "", R"({"name": "w)", i, R"(", "owner": "x", "bytes": 4})");
  }
  text.append("]}");
  return text;
}

void BM_ReadManyKeys(benchmark::State& state) {
  const std::string text = ManyKeysText(state.range(1), state.range(0) == 1);
  for (auto _ : state) {
    absl::StatusOr<Graph> g = ReadGraphJson(text);
    if (!g.ok()) state.SkipWithError(std::string(g.status().message()).c_str());
    benchmark::DoNotOptimize(g);
  }
  state.SetLabel(state.range(0) == 1 ? "params of one owner" : "kwargs keys");
  state.SetComplexityN(state.range(1));
}
BENCHMARK(BM_ReadManyKeys)
    ->ArgsProduct({{0, 1}, {10000, 40000, 160000, 640000}})
    ->Unit(benchmark::kMillisecond);

// The AOT pair of a llama-style transformer of N layers (llama-7b's sizes otherwise), and the
// strict shape check of both graphs: both O(N).
void BM_AotPair(benchmark::State& state) {
  TransformerConfig c = Llama7bConfig();
  c.layers = state.range(0);
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  const Graph f = *BuildTransformer(c, o);
  int64_t nodes = 0;
  for (auto _ : state) {
    absl::StatusOr<AotPair> pair = BuildAotPair(f);
    if (!pair.ok()) state.SkipWithError(std::string(pair.status().message()).c_str());
    nodes = pair->forward.size() + pair->backward.size();
    benchmark::DoNotOptimize(pair);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_AotPair)->Arg(8)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond);

void BM_CheckShapes(benchmark::State& state) {
  TransformerConfig c = Llama7bConfig();
  c.layers = state.range(0);
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  const AotPair pair = *BuildAotPair(*BuildTransformer(c, o));
  ShapeCheckOptions strict;
  strict.require_rules = true;
  for (auto _ : state) {
    absl::StatusOr<ShapeCheckReport> f = CheckShapes(pair.forward, strict);
    absl::StatusOr<ShapeCheckReport> b = CheckShapes(pair.backward, strict);
    if (!f.ok() || !b.ok()) state.SkipWithError("shape check failed");
    benchmark::DoNotOptimize(b);
  }
  state.counters["nodes"] = static_cast<double>(pair.forward.size() + pair.backward.size());
}
BENCHMARK(BM_CheckShapes)->Arg(8)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace overlap

BENCHMARK_MAIN();
