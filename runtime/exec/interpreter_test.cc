// The interpreter on every tiny model: forward and backward run, and the measured peak of
// graph values equals the simulator's under every scheduler, ZeRO-3 ops included.
#include "runtime/exec/interpreter.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"
#include "runtime/train/synthetic.h"
#include "runtime/train/train.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

AotPair TinyPair(const std::string& model) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildModel(model, o, Preset::kTiny);
  EXPECT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AotPair> pair = BuildAotPair(*g);
  EXPECT_TRUE(pair.ok()) << pair.status();
  return *std::move(pair);
}

// Parameters by name and data by placeholder name, seeded.
void Seed(const AotPair& pair, Allocator& alloc, TensorMap& params, TensorMap& data) {
  absl::StatusOr<TensorMap> all = SeededInputs(pair.forward, 1, alloc);
  ASSERT_TRUE(all.ok()) << all.status();
  for (NodeId id : pair.forward.order()) {
    const Node& n = pair.forward.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    if (IsParameterPlaceholder(pair.forward, id)) {
      params[ParamNameOf(n)] = all->at(n.name());
    } else {
      data[n.name()] = all->at(n.name());
    }
  }
}

TEST(InterpreterTest, EveryTinyModelRunsForwardAndBackward) {
  for (const std::string& model : ModelNames()) {
    SCOPED_TRACE(model);
    const AotPair pair = TinyPair(model);
    Allocator alloc;
    TensorMap params, data;
    Seed(pair, alloc, params, data);
    absl::StatusOr<AotStepResult> r = RunAotStep(pair, params, data);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(std::isfinite(r->loss));
    EXPECT_GT(r->loss, 0);
    int64_t trainable = 0;
    for (const Param& p : pair.forward.params()) trainable += p.requires_grad;
    EXPECT_GT(r->grads.size(), 0u);
    EXPECT_LE(static_cast<int64_t>(r->grads.size()), trainable);
    for (const auto& [name, g] : r->grads) {
      ASSERT_EQ(g.shape(), params.at(name).shape()) << name;
    }
  }
}

TEST(InterpreterTest, MeasuredPeakEqualsTheSimulatorsOnEveryTinyModelUnderEveryScheduler) {
  InterpreterOptions o;
  o.simulate = true;
  for (const std::string& model : ModelNames()) {
    const AotPair plain = TinyPair(model);
    Allocator alloc;
    TensorMap params, data;
    Seed(plain, alloc, params, data);
    for (const SchedulerEntry& e : Schedulers()) {
      SCOPED_TRACE(model + " " + std::string(e.name));
      AotPair pair = plain;
      ASSERT_TRUE(Zero3Insertion(GraphKind::kForward).Run(&pair.forward).ok());
      ASSERT_TRUE(Zero3Insertion(GraphKind::kBackward).Run(&pair.backward).ok());
      ASSERT_TRUE(RunScheduler(e.name, &pair.forward).ok());
      ASSERT_TRUE(RunScheduler(e.name, &pair.backward).ok());
      // Saved tensors copied into the backward, or handed over: the same memory.
      for (bool hand_over : {false, true}) {
        SCOPED_TRACE(hand_over ? "handed over" : "copied");
        absl::StatusOr<AotStepResult> r =
            RunAotStep(pair, params, data, o, nullptr, AotStepOptions{hand_over});
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(r->forward.peak_bytes, r->forward.simulated_peak_bytes) << "forward";
        EXPECT_EQ(r->backward.peak_bytes, r->backward.simulated_peak_bytes) << "backward";
        EXPECT_EQ(r->forward.nodes_run, pair.forward.size());
        EXPECT_EQ(r->backward.inputs_taken > 0, hand_over);
      }
    }
  }
}

// Handing the saved tensors to the backward changes nothing but the copies: the loss and
// every gradient bit for bit, and the forward's saved outputs leave the result (the
// backward freed them at their last use).
TEST(InterpreterTest, HandedOverSavedTensorsGiveTheCopiedRunsResults) {
  for (const std::string& model : ModelNames()) {
    SCOPED_TRACE(model);
    const AotPair pair = TinyPair(model);
    Allocator alloc;
    TensorMap params, data;
    Seed(pair, alloc, params, data);
    absl::StatusOr<AotStepResult> copied = RunAotStep(pair, params, data);
    absl::StatusOr<AotStepResult> taken =
        RunAotStep(pair, params, data, {}, nullptr, AotStepOptions{/*hand_over_saved=*/true});
    ASSERT_TRUE(copied.ok()) << copied.status();
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_EQ(taken->loss, copied->loss);
    ASSERT_EQ(taken->grads.size(), copied->grads.size());
    for (const auto& [name, g] : copied->grads) {
      const Tensor& h = taken->grads.at(name);
      ASSERT_EQ(h.shape(), g.shape()) << name;
      for (int64_t i = 0; i < g.numel(); ++i) {
        ASSERT_EQ(GetElement(h, i), GetElement(g, i)) << name << " element " << i;
      }
    }
    EXPECT_EQ(copied->backward.inputs_taken, 0);
    EXPECT_GT(taken->backward.inputs_taken, 0);
    EXPECT_GT(taken->backward.inputs_taken_bytes, 0);
    EXPECT_TRUE(taken->forward.outputs[0].defined());  // the loss stays
    int64_t kept = 0;
    for (size_t i = 1; i < taken->forward.outputs.size(); ++i) {
      kept += taken->forward.outputs[i].defined();
    }
    EXPECT_EQ(kept, 0) << "saved outputs still held by the result";
  }
}

// bfloat16 graphs: values stored as bfloat16, kernels run on float32 copies, results rounded
// back; the loss is the float32 graph's within bfloat16's precision, and memory is still the
// simulator's (which counts 2 bytes an element).
TEST(InterpreterTest, BFloat16GraphsComputeInFloat32AndStoreBFloat16) {
  double loss[2];
  for (int k = 0; k < 2; ++k) {
    MlpConfig c = MlpPreset(Preset::kTiny);
    c.dtype = k == 0 ? "float32" : "bfloat16";
    ModelOptions o;
    o.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> g = BuildMlp(c, o);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<AotPair> pair = BuildAotPair(*g);
    ASSERT_TRUE(pair.ok()) << pair.status();
    Allocator alloc;
    TensorMap params, data;
    Seed(*pair, alloc, params, data);
    InterpreterOptions io;
    io.simulate = true;
    absl::StatusOr<AotStepResult> r = RunAotStep(*pair, params, data, io);
    ASSERT_TRUE(r.ok()) << r.status();
    loss[k] = r->loss;
    EXPECT_EQ(r->forward.peak_bytes, r->forward.simulated_peak_bytes);
    EXPECT_EQ(r->backward.peak_bytes, r->backward.simulated_peak_bytes);
    for (const auto& [name, grad] : r->grads) {
      EXPECT_EQ(grad.dtype(), k == 0 ? DType::kFloat32 : DType::kBFloat16) << name;
    }
  }
  EXPECT_NEAR(loss[1], loss[0], 2e-2 * std::fabs(loss[0]));
  EXPECT_NE(loss[1], loss[0]);  // the rounding is real
}

TEST(InterpreterTest, GraphsLargerThanTheLimitAreRefusedUpFront) {
  const AotPair pair = TinyPair("gpt2");
  Allocator alloc;
  TensorMap params, data;
  Seed(pair, alloc, params, data);
  TensorMap in = params;
  for (const auto& [k, v] : data) in[k] = v;
  InterpreterOptions o;
  o.guard_bytes = 64 * 1024;
  absl::StatusOr<RunResult> r = Interpret(pair.forward, in, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("more than the 64.00 KiB limit"));
}

TEST(InterpreterTest, ErrorsNameTheNode) {
  const AotPair pair = TinyPair("mlp");
  Allocator alloc;
  TensorMap params, data;
  Seed(pair, alloc, params, data);
  TensorMap in = params;
  for (const auto& [k, v] : data) in[k] = v;
  // A missing input.
  TensorMap missing = in;
  missing.erase("x");
  absl::StatusOr<RunResult> r = Interpret(pair.forward, missing);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("'x'"));
  EXPECT_THAT(r.status().message(), HasSubstr("missing input"));
  // A shape that differs from meta.
  TensorMap wrong = in;
  absl::StatusOr<Tensor> small = Tensor::Empty(alloc, DType::kFloat32, {3, 8});
  ASSERT_TRUE(small.ok());
  wrong["x"] = *small;
  r = Interpret(pair.forward, wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("node 'x'"));
  EXPECT_THAT(r.status().message(), HasSubstr("meta says [4, 8]"));
  // An unsupported op.
  Graph g = pair.forward;
  for (NodeId id : g.order()) {
    if (g.node(id).target() == "aten.relu.default") {
      g.set_target(id, "mylib.fancy_relu.default");
      break;
    }
  }
  r = Interpret(g, in);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no kernel for target 'mylib.fancy_relu.default'"));
  // ... unless registered.
  KernelRegistry kernels = CpuKernels();
  kernels.Register("mylib.fancy_relu.default", *CpuKernels().Find("aten.relu.default"),
                   FindOpSchema("aten.relu.default"));
  InterpreterOptions o;
  o.kernels = &kernels;
  EXPECT_TRUE(Interpret(g, in, o).ok());
  // Module-owned parameters.
  absl::StatusOr<Graph> module = BuildModel("mlp", ModelOptions{}, Preset::kTiny);
  ASSERT_TRUE(module.ok());
  r = Interpret(*module, in);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("module"));
}

// A kernel's view stays a view when meta does not say otherwise (an expand of 12 B takes
// 12 B, not its expanded 12 MB); meta stating aliases_input false gets its own buffer.
TEST(InterpreterTest, ViewResultsStayViewsUnlessMetaSaysOtherwise) {
  Allocator alloc;
  absl::StatusOr<Tensor> x = Tensor::Empty(alloc, DType::kFloat32, {3, 1});
  ASSERT_TRUE(x.ok());
  for (const std::string& alias : {std::string(""), std::string(", \"aliases_input\": false")}) {
    SCOPED_TRACE(alias);
    Graph g = ParseGraphParts(
        absl::StrCat(
            R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
                "meta": {"shape": [3, 1], "dtype": "float32"}},)",
            CallJson("e", "aten.expand.default", R"("%x", [1000, 3, 1000])",
                     absl::StrCat(R"({"shape": [1000, 3, 1000], "dtype": "float32")", alias, "}")),
            ",", OutputJson(R"("%e")")),
        "");
    absl::StatusOr<RunResult> r = Interpret(g, {{"x", *x}});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->outputs.size(), 1u);
    if (alias.empty()) {
      EXPECT_EQ(r->outputs[0].strides(), (std::vector<int64_t>{0, 1, 0}));
      EXPECT_EQ(r->peak_bytes, 12);
    } else {
      EXPECT_TRUE(r->outputs[0].IsContiguous());
      EXPECT_EQ(r->peak_bytes, 12 + 12'000'000);
    }
  }
}

// Python indexing of a tensor (x[0]) selects a row; the interpreter refuses it by name
// instead of returning the whole tensor, and still picks tuple elements.
TEST(InterpreterTest, GetItemOfATensorIsRefusedByName) {
  Allocator alloc;
  absl::StatusOr<Tensor> x = Tensor::Empty(alloc, DType::kFloat32, {2, 3});
  ASSERT_TRUE(x.ok());
  const std::string x_node =
      R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
          "meta": {"shape": [2, 3], "dtype": "float32"}})";
  const std::string add =
      CallJson("y", "aten.add.Tensor", R"("%x", "%x")", R"({"shape": [2, 3], "dtype": "float32"})");
  for (const std::string& of : {std::string("x"), std::string("y")}) {
    SCOPED_TRACE(of);
    Graph g = ParseGraphParts(
        absl::StrCat(x_node, ",", add, ",",
                     CallJson("row", "operator.getitem", absl::StrCat("\"%", of, "\", 0")), ",",
                     OutputJson(R"("%row")")),
        "");
    absl::StatusOr<RunResult> r = Interpret(g, {{"x", *x}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("node 'row'"));
    EXPECT_THAT(r.status().message(), HasSubstr("argument 'self' is node '" + of + "', a tensor"));
  }
  // A tuple's element is still picked.
  Graph g = ParseGraphParts(
      absl::StrCat(x_node, ",", CallJson("parts", "aten.split.Tensor", R"("%x", 1)"), ",",
                   CallJson("second", "operator.getitem", R"("%parts", 1)"), ",",
                   OutputJson(R"("%second")")),
      "");
  absl::StatusOr<RunResult> r = Interpret(g, {{"x", *x}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].shape(), (std::vector<int64_t>{1, 3}));
  // Python's negative index picks from the end; past either end is an error naming it.
  for (const auto& [index, ok] : {std::pair<int, bool>{-1, true}, {-3, false}, {2, false}}) {
    Graph h = ParseGraphParts(
        absl::StrCat(x_node, ",", CallJson("parts", "aten.split.Tensor", R"("%x", 1)"), ",",
                     CallJson("pick", "operator.getitem", absl::StrCat(R"("%parts", )", index)),
                     ",", OutputJson(R"("%pick")")),
        "");
    r = Interpret(h, {{"x", *x}});
    EXPECT_EQ(r.ok(), ok) << index << ": " << r.status();
    if (!ok) {
      EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("index ", index, " out of range")));
    }
  }
}

}  // namespace
}  // namespace overlap
