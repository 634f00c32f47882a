// The waiting kernels and the times they wait: compute nodes wait their scaled device time
// (at least 1 ms) and return results of their stated types, views run, and ReplayTimes
// writes into the graph exactly what the kernels wait.
#include "runtime/exec/replay_kernels.h"

#include <chrono>
#include <memory>
#include <string>

#include "graph/json_reader.h"
#include "gtest/gtest.h"
#include "runtime/exec/interpreter.h"
#include "runtime/exec/replay.h"

namespace overlap {
namespace {

// x -> mm (20 ms) -> view -> tiny (0.1 ms) -> sum (no device time).
constexpr char kTimed[] = R"({"format": "overlap-graph", "version": 1, "name": "timed",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4, 4], "dtype": "float32"}},
  {"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%x"], "meta": {"shape": [4, 4], "dtype": "float32", "device_time": 0.02}},
  {"name": "v", "op": "call_function", "target": "aten.view.default", "args": ["%mm", [16]], "meta": {"shape": [16], "dtype": "float32", "aliases_input": true, "device_time": 0.5}},
  {"name": "tiny", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%v", "%v"], "meta": {"shape": [16], "dtype": "float32", "device_time": 0.0001}},
  {"name": "s", "op": "call_function", "target": "aten.sum.default", "args": ["%tiny"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%s"]]}
 ]})";

Graph Timed() {
  absl::StatusOr<Graph> g = ReadGraphJson(kTimed);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : Graph();
}

const Node& Named(const Graph& g, const std::string& name) { return g.node(g.FindNode(name)); }

TEST(ReplayKernelsTest, EachNodeWaitsItsScaledTimeAtLeastOneMillisecond) {
  const Graph g = Timed();
  EXPECT_DOUBLE_EQ(ReplayWaitSeconds(Named(g, "mm"), 2), 0.04);
  EXPECT_DOUBLE_EQ(ReplayKernelSeconds(Named(g, "mm"), 2), 0.04);
  EXPECT_DOUBLE_EQ(ReplayKernelSeconds(Named(g, "tiny"), 2), kMinReplayKernelWaitSeconds);
  EXPECT_EQ(ReplayKernelSeconds(Named(g, "v"), 2), 0);  // a view runs
  EXPECT_EQ(ReplayKernelSeconds(Named(g, "s"), 2), 0);  // no device time
}

TEST(ReplayKernelsTest, ReplayTimesWritesWhatTheKernelsWait) {
  const Graph g = Timed();
  const Graph timed = ReplayTimes(g, 2);
  for (const char* name : {"mm", "tiny"}) {
    EXPECT_DOUBLE_EQ(Named(timed, name).meta().device_time, ReplayKernelSeconds(Named(g, name), 2))
        << name;
  }
  EXPECT_DOUBLE_EQ(Named(timed, "v").meta().device_time, 0.5);  // views keep theirs
  EXPECT_FALSE(Named(timed, "s").meta().has_device_time);
}

TEST(ReplayKernelsTest, KernelsWaitAndReturnTheStatedTypes) {
  const Graph g = Timed();
  std::unique_ptr<KernelRegistry> kernels = ReplayKernels(1);
  Allocator alloc;
  absl::StatusOr<Tensor> x = Tensor::Empty(alloc, DType::kFloat32, {4, 4});
  ASSERT_TRUE(x.ok()) << x.status();
  InterpreterOptions o;
  o.kernels = kernels.get();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<RunResult> r = Interpret(g, {{"x", *x}}, o);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(waited, 0.02 + kMinReplayKernelWaitSeconds);
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].dtype(), DType::kFloat32);
  EXPECT_EQ(r->outputs[0].numel(), 1);
}

TEST(ReplayKernelsTest, AWaitPastTheBoundIsRefusedNamingTheNode) {
  const Graph g = Timed();
  std::unique_ptr<KernelRegistry> kernels = ReplayKernels(1e6);  // mm: 20000 s
  Allocator alloc;
  absl::StatusOr<Tensor> x = Tensor::Empty(alloc, DType::kFloat32, {4, 4});
  ASSERT_TRUE(x.ok()) << x.status();
  InterpreterOptions o;
  o.kernels = kernels.get();
  absl::StatusOr<RunResult> r = Interpret(g, {{"x", *x}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mm"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("more than the bound"), absl::string_view::npos)
      << r.status();
}

}  // namespace
}  // namespace overlap
