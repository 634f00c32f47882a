// Training in one process learns: `overlap train --model M --preset tiny --steps 50 --seed 1`
// ends with a loss at most half of its first for gpt2, llama-7b and mlp (the issue's
// acceptance test), with AdamW (the default) and SGD.
#include "runtime/train.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
    absl::StatusOr<TrainStepResult> s = t->Step();
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
  missing.initial_params.erase(missing.initial_params.begin());
  absl::StatusOr<Trainer> v = Trainer::Create("mlp", Preset::kTiny, missing);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), ::testing::HasSubstr("no parameter"));
  EXPECT_FALSE(ParseOptimizerKind("lion").ok());
}

}  // namespace
}  // namespace overlap
