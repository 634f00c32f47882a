// Training in one process learns: `overlap train --model M --preset tiny --steps 50 --seed 1`
// ends with a loss at most half of its first for gpt2, llama-7b and mlp, with AdamW (the
// default) and SGD.
#include "runtime/train/train.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "gtest/gtest.h"
#include "runtime/train/synthetic.h"

namespace overlap {
namespace {

struct Losses {
  double first = 0, last = 0;
};

Losses Train(const std::string& model, OptimizerKind kind, int steps) {
  TrainOptions o;
  o.seed = 1;
  o.optimizer.kind = kind;
  if (kind == OptimizerKind::kSgd) o.optimizer.lr = 0.1;
  absl::StatusOr<Trainer> t = Trainer::Create(model, Preset::kTiny, o);
  EXPECT_TRUE(t.ok()) << t.status();
  Losses r;
  if (!t.ok()) return r;
  for (int k = 1; k <= steps; ++k) {
    absl::StatusOr<StepResult> s = t->Step();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return r;
    EXPECT_TRUE(std::isfinite(s->loss));
    if (k == 1) r.first = s->loss;
    r.last = s->loss;
  }
  std::printf("%s: step 1 loss %.4f, step %d loss %.4f\n", model.c_str(), r.first, steps, r.last);
  return r;
}

class TrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainTest, FiftyAdamWStepsHalveTheLoss) {
  const Losses r = Train(GetParam(), OptimizerKind::kAdamW, 50);
  EXPECT_GT(r.first, 0);
  EXPECT_LE(r.last, 0.5 * r.first);
}

INSTANTIATE_TEST_SUITE_P(Models, TrainTest, ::testing::Values("gpt2", "llama-7b", "mlp"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "llama-7b" ? std::string("llama_7b") : info.param;
                         });

// Exported batch-norm statistics start where PyTorch starts them: a variance drawn from a
// normal would be negative half the time, and evaluation-mode batch norm's square root of
// it NaN.
TEST(SeededInputsTest, BatchNormStatisticsStartAtPyTorchsValues) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "var", "op": "placeholder", "target": "var", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16, "buffer": "bn1.running_var"}},
    {"name": "mean", "op": "placeholder", "target": "mean", "args": [], "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16, "buffer": "bn1.running_mean"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [64], "dtype": "float32", "tensor_size": 256}},
    {"name": "output", "op": "output", "target": "output", "args": [["%var", "%mean", "%x"]]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  Allocator alloc;
  absl::StatusOr<TensorMap> in = SeededInputs(*g, 3, alloc);
  ASSERT_TRUE(in.ok()) << in.status();
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(GetElement(in->at("var"), i), 1.0);
    EXPECT_EQ(GetElement(in->at("mean"), i), 0.0);
  }
  int negative = 0;  // other float inputs are still drawn
  for (int64_t i = 0; i < 64; ++i) negative += GetElement(in->at("x"), i) < 0;
  EXPECT_GT(negative, 0);
}

TEST(TrainTest, SgdLearnsTooAndTheSameSeedRepeats) {
  const Losses a = Train("mlp", OptimizerKind::kSgd, 30);
  EXPECT_LT(a.last, a.first);
  const Losses b = Train("mlp", OptimizerKind::kSgd, 30);
  EXPECT_EQ(a.last, b.last);
}

TEST(TrainTest, StartsFromGivenWeightsAndRefusesWrongOnes) {
  absl::StatusOr<Trainer> t = Trainer::Create("mlp", Preset::kTiny, TrainOptions{});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->Step().ok());
  TrainOptions from;
  from.initial_params = t->params();
  absl::StatusOr<Trainer> u = Trainer::Create("mlp", Preset::kTiny, from);
  ASSERT_TRUE(u.ok()) << u.status();
  for (const auto& [name, p] : t->params()) {
    const Tensor& q = u->params().at(name);
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(GetElement(p, i), GetElement(q, i)) << name;
  }
  TrainOptions missing;
  missing.initial_params = t->params();
  const std::string first = missing.initial_params->begin()->first;
  missing.initial_params->erase(missing.initial_params->begin());
  absl::StatusOr<Trainer> v = Trainer::Create("mlp", Preset::kTiny, missing);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(),
              ::testing::HasSubstr(absl::StrCat("the weights lack 1 of the graph's ",
                                                t->params().size(), " parameters: '", first, "'")));
  EXPECT_FALSE(ParseOptimizerKind("lion").ok());
}

// A weights file with no tensors, or with only some parameters, is refused naming the
// missing ones (it was taken for no file: training started from the seeded parameters).
TEST(TrainTest, EmptyOrPartialWeightsAreRefusedNamingTheMissingParameters) {
  absl::StatusOr<Trainer> t = Trainer::Create("gpt2", Preset::kTiny, TrainOptions{});
  ASSERT_TRUE(t.ok()) << t.status();
  const int64_t all = static_cast<int64_t>(t->params().size());
  ASSERT_GT(all, 6);
  TrainOptions empty;
  empty.initial_params = TensorMap{};
  absl::StatusOr<Trainer> u = Trainer::Create("gpt2", Preset::kTiny, empty);
  ASSERT_FALSE(u.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(u.status()));
  const std::string message(u.status().message());
  EXPECT_THAT(message,
              ::testing::HasSubstr(absl::StrCat("the weights lack ", all, " of the graph's ", all,
                                                " parameters: 'transformer.wte.weight', '")));
  EXPECT_THAT(message, ::testing::HasSubstr(absl::StrCat(" and ", all - 5, " more")));
  EXPECT_THAT(message, ::testing::HasSubstr("holds no tensors"));
  // Every parameter by "param/" + its name, as the exporter writes them, is a whole file.
  TrainOptions prefixed;
  prefixed.initial_params = TensorMap{};
  for (const auto& [name, p] : t->params()) (*prefixed.initial_params)["param/" + name] = p;
  EXPECT_TRUE(Trainer::Create("gpt2", Preset::kTiny, prefixed).ok());
}

// A tensor that binds nothing is an error naming its key, unless the exporter's files keep
// it there (torch's references, batches, buffers) or it names a parameter the graph lists.
TEST(TrainTest, WeightsThatAreNoParameterOrInputAreRefusedNamingTheKey) {
  absl::StatusOr<Trainer> t = Trainer::Create("mlp", Preset::kTiny, TrainOptions{});
  ASSERT_TRUE(t.ok()) << t.status();
  const Tensor& any = t->params().begin()->second;
  for (const std::string aside : {"ref/loss", "ref64/grad/x", "ref64p/grad/x", "batch/0/input/0",
                                  "target", "input/3", "buffer/bn.running_mean", "constant/c0"}) {
    TrainOptions o;
    o.initial_params = t->params();
    (*o.initial_params)[aside] = any;
    EXPECT_TRUE(Trainer::Create("mlp", Preset::kTiny, o).ok()) << aside;
  }
  for (const std::string stray : {"fc1.wieght", "param/fc9.bias", "optimizer/momentum"}) {
    TrainOptions o;
    o.initial_params = t->params();
    (*o.initial_params)[stray] = any;
    absl::StatusOr<Trainer> u = Trainer::Create("mlp", Preset::kTiny, o);
    ASSERT_FALSE(u.ok()) << stray;
    EXPECT_THAT(u.status().message(),
                ::testing::HasSubstr(absl::StrCat("the weights hold tensor '", stray,
                                                  "', which is no parameter or input")));
  }
}

// A random/<node> tensor (torch's draw, for exec's comparison) is accepted for a random op of
// the forward only: another name is an error naming the key.
TEST(TrainTest, RandomDrawsMustNameARandomOp) {
  absl::StatusOr<Trainer> t = Trainer::Create("mlp", Preset::kTiny, TrainOptions{});
  ASSERT_TRUE(t.ok()) << t.status();
  const Graph& forward = t->pair().forward;
  TensorMap weights = t->params();
  weights["random/no_such_node"] = weights.begin()->second;
  absl::Status s = CheckWeights(forward, weights);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("no random op named 'no_such_node'"));
  // A node that exists but draws nothing is refused too.
  Graph g = forward;
  NodeId call = kNoNode;
  for (NodeId id : g.order()) {
    if (g.node(id).op() == Op::kCallFunction) call = id;
  }
  ASSERT_NE(call, kNoNode);
  weights.erase("random/no_such_node");
  weights["random/" + g.node(call).name()] = weights.begin()->second;
  EXPECT_FALSE(CheckWeights(g, weights).ok());
  // A bernoulli_ node's draw is accepted.
  absl::StatusOr<NodeId> drop = g.AddNode(Op::kCallFunction, "bernoulli_", "aten.bernoulli_.float",
                                          {Value::Ref(call), Value::Double(0.5)});
  ASSERT_TRUE(drop.ok()) << drop.status();
  weights["random/bernoulli_"] = weights.begin()->second;
  weights.erase("random/" + g.node(call).name());
  EXPECT_TRUE(CheckWeights(g, weights).ok()) << CheckWeights(g, weights);
}

// compute_in_double: parameters held (and given ones widened) in float64, every step in
// float64; the losses follow float32 training's to float32 round-off, not bit for bit.
TEST(TrainTest, TrainsInFloat64WhenAsked) {
  absl::StatusOr<Trainer> narrow = Trainer::Create("gpt2", Preset::kTiny, TrainOptions{});
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  TrainOptions o;
  o.initial_params = narrow->params();
  o.compute_in_double = true;
  absl::StatusOr<Trainer> wide = Trainer::Create("gpt2", Preset::kTiny, o);
  ASSERT_TRUE(wide.ok()) << wide.status();
  for (const auto& [name, p] : wide->params()) {
    ASSERT_EQ(p.dtype(), DType::kFloat64) << name;
    const Tensor& q = narrow->params().at(name);
    ASSERT_EQ(q.dtype(), DType::kFloat32) << name;
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(GetElement(p, i), GetElement(q, i)) << name;
  }
  bool differs = false;
  for (int k = 1; k <= 10; ++k) {
    absl::StatusOr<StepResult> a = narrow->Step();
    absl::StatusOr<StepResult> b = wide->Step();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_NEAR(a->loss, b->loss, 1e-4 * std::abs(b->loss)) << "step " << k;
    differs = differs || a->loss != b->loss;
  }
  EXPECT_TRUE(differs);  // float64 is not float32 rounded: the option took effect
  for (const auto& [name, p] : wide->params()) EXPECT_EQ(p.dtype(), DType::kFloat64) << name;
}

// Data files: "batch/<k>/<input>" keys make batch k (other keys ignored); a file without
// them is one batch; a malformed key or a missing index is refused, naming it. An index has
// one spelling: "batch/00/x" beside "batch/0/x" would otherwise replace it.
TEST(TrainTest, SplitBatchesByKey) {
  Allocator alloc;
  auto scalar = [&](double v) {
    Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {1});
    SetElement(t, 0, v);
    return t;
  };
  TensorMap file = {{"batch/1/x", scalar(1)},
                    {"batch/0/x", scalar(0)},
                    {"batch/0/y", scalar(2)},
                    {"param/w", scalar(3)}};
  absl::StatusOr<std::vector<TensorMap>> b = SplitBatches(file);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ(GetElement((*b)[0].at("x"), 0), 0);
  EXPECT_EQ(GetElement((*b)[0].at("y"), 0), 2);
  EXPECT_EQ(GetElement((*b)[1].at("x"), 0), 1);
  EXPECT_FALSE((*b)[0].count("param/w"));
  absl::StatusOr<std::vector<TensorMap>> whole = SplitBatches({{"x", scalar(5)}});
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ(GetElement(whole->front().at("x"), 0), 5);
  const std::pair<const char*, const char*> bad[] = {
      {"batch/one/x", "'batch/one/x' is not batch/<index>/<input>"},
      {"batch/0", "'batch/0' is not"},
      {"batch/2/x", "batch 2 but no batch 1"},
      {"batch/00/x", "'batch/00/x' is not batch/<index>/<input>"},
      {"batch/01/x", "'batch/01/x' is not"},
      {"batch/+1/x", "'batch/+1/x' is not"},
      {"batch/-0/x", "'batch/-0/x' is not"},
      {"batch/ 1/x", "'batch/ 1/x' is not"},
      {"batch/1 /x", "'batch/1 /x' is not"},
      {"batch/0x1/x", "'batch/0x1/x' is not"},
      {"batch/99999999999999999999/x", "'batch/99999999999999999999/x' is not"}};
  for (const auto& [key, want] : bad) {
    TensorMap f = {{"batch/0/x", scalar(0)}, {key, scalar(1)}};
    absl::StatusOr<std::vector<TensorMap>> r = SplitBatches(f);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr(want)) << key;
  }
}

// Step k trains on batches[(k - 1) mod K]: three steps on {A, B} are three steps on
// {A, B, A}, and not on {A, B, B}.
TEST(TrainTest, StepsCycleThroughTheGivenBatches) {
  absl::StatusOr<Trainer> probe = Trainer::Create("mlp", Preset::kTiny, TrainOptions{});
  ASSERT_TRUE(probe.ok()) << probe.status();
  Allocator alloc;
  SeededInputsOptions only_data;
  only_data.parameters = false;
  absl::StatusOr<TensorMap> a = SeededInputs(probe->pair().forward, 7, alloc, only_data);
  absl::StatusOr<TensorMap> b = SeededInputs(probe->pair().forward, 8, alloc, only_data);
  ASSERT_TRUE(a.ok() && b.ok());
  auto losses = [&](std::vector<TensorMap> batches) {
    TrainOptions o;
    o.optimizer.kind = OptimizerKind::kSgd;
    o.optimizer.lr = 0.1;
    o.batches = std::move(batches);
    std::vector<double> out;
    absl::StatusOr<Trainer> t = Trainer::Create("mlp", Preset::kTiny, o);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return out;
    for (int k = 0; k < 3; ++k) {
      absl::StatusOr<StepResult> s = t->Step();
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) out.push_back(s->loss);
    }
    return out;
  };
  const std::vector<double> ab = losses({*a, *b}), aba = losses({*a, *b, *a}),
                            abb = losses({*a, *b, *b});
  ASSERT_EQ(ab.size(), 3u);
  EXPECT_EQ(ab, aba);
  EXPECT_NE(ab[2], abb[2]);
  EXPECT_NE(ab[0], ab[1]);
}

}  // namespace
}  // namespace overlap
