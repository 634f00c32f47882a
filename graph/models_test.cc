#include "graph/models.h"

#include "gmock/gmock.h"
#include "graph/shape_rules.h"
#include "graph/summary.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

int64_t Count(absl::string_view model, ParamStyle style) {
  ModelOptions o;
  o.style = style;
  absl::StatusOr<Graph> g = BuildModel(model, o);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return -1;
  EXPECT_TRUE(Verify(*g).ok()) << model << ": " << Verify(*g);
  return CountParameters(*g);
}

class ModelsTest : public ::testing::TestWithParam<ParamStyle> {};

// ModelOptions' layers and width resize a preset (what `overlap run --layers --width` use).
TEST(BuildModelTest, LayersAndWidthResizeThePreset) {
  ModelOptions o;
  o.layers = 3;
  o.width = 32;
  absl::StatusOr<Graph> mlp = BuildModel("mlp", o, Preset::kTiny);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  // 8 -> 32 -> 32 -> 4, weights and biases.
  EXPECT_EQ(CountParameters(*mlp), 8 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4);
  ModelOptions deep;
  deep.layers = 3;
  absl::StatusOr<Graph> gpt2 = BuildModel("gpt2", deep, Preset::kTiny);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  TransformerConfig c = Gpt2Config(Preset::kTiny);
  c.layers = 3;
  EXPECT_EQ(CountParameters(*gpt2), TransformerParamCount(c));
  EXPECT_THAT(BuildModel("gpt2", o, Preset::kTiny).status().message(), HasSubstr("mlp only"));
  ModelOptions layers_only;
  layers_only.layers = 2;
  EXPECT_THAT(BuildModel("resnet18", layers_only, Preset::kTiny).status().message(),
              HasSubstr("not resnet18"));
}

TEST_P(ModelsTest, Gpt2HasExactly124439808Parameters) {
  EXPECT_EQ(Count("gpt2", GetParam()), 124439808);
  EXPECT_EQ(TransformerParamCount(Gpt2Config()), 124439808);
}
TEST_P(ModelsTest, Llama7bHasExactly6738415616Parameters) {
  EXPECT_EQ(Count("llama-7b", GetParam()), 6738415616);
  EXPECT_EQ(TransformerParamCount(Llama7bConfig()), 6738415616);
}
TEST_P(ModelsTest, Llama70bHasExactly68976648192Parameters) {
  EXPECT_EQ(Count("llama-70b", GetParam()), 68976648192);
  EXPECT_EQ(TransformerParamCount(Llama70bConfig()), 68976648192);
}
TEST_P(ModelsTest, Resnet18HasExactly11689512Parameters) {
  EXPECT_EQ(Count("resnet18", GetParam()), 11689512);
}
TEST_P(ModelsTest, MoeCountMatchesItsFormula) {
  // 8 layers x (attention 4*2048^2 + 16 experts x 3*2048*1408 + router 2048*16 + 2 norms
  // 2*2048) + final norm + untied embeddings 2 * 32000*2048.
  const int64_t layer = 4LL * 2048 * 2048 + 16LL * 3 * 2048 * 1408 + 2048LL * 16 + 2 * 2048;
  const int64_t expected = 8 * layer + 2048 + 2LL * 32000 * 2048;
  EXPECT_EQ(Count("moe", GetParam()), expected);
  EXPECT_EQ(TransformerParamCount(MoeConfig()), expected);
}
TEST_P(ModelsTest, MlpIsTheDdpOptimizerTestModel) {
  EXPECT_EQ(Count("mlp", GetParam()), 10 * 5000 + 5000 + 2 * (5000 * 5000 + 5000) + 5000 * 5 + 5);
}

TEST_P(ModelsTest, EveryNodeHasMetadata) {
  for (const std::string& name : ModelNames()) {
    ModelOptions o;
    o.style = GetParam();
    absl::StatusOr<Graph> g = BuildModel(name, o);
    ASSERT_TRUE(g.ok());
    for (NodeId id : g->order()) {
      const Node& n = g->node(id);
      if (n.op() == Op::kOutput) continue;
      // A tensor states meta.shape and meta.dtype; a tuple the `shapes` and `dtypes` arrays.
      EXPECT_TRUE(n.meta().has_tensor_size && n.meta().has_device_time && !StatedTypes(n).empty() &&
                  StatedTypes(n)[0].dtype != "")
          << name << ": " << n.name();
    }
    GraphSummary s = Summarize(*g);
    EXPECT_GT(s.device_time, 0) << name;
    EXPECT_LE(s.critical_path_time, s.device_time * (1 + 1e-12)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(BothStyles, ModelsTest,
                         ::testing::Values(ParamStyle::kModule, ParamStyle::kLifted));

TEST(ModelsTest, Gpt2TiesLmHeadToTheTokenEmbedding) {
  absl::StatusOr<Graph> g = BuildModel("gpt2", {});
  ASSERT_TRUE(g.ok());
  GraphSummary s = Summarize(*g);
  ASSERT_EQ(s.tied_groups.size(), 1u);
  EXPECT_THAT(s.tied_groups[0], ::testing::ElementsAre("transformer.wte.weight", "lm_head.weight"));
}

TEST(ModelsTest, LiftedGraphsListPlaceholdersFirstWithMetaParam) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildModel("llama-7b", o);
  ASSERT_TRUE(g.ok());
  bool in_head = true;
  int params = 0;
  for (NodeId id : g->order()) {
    const Node& n = g->node(id);
    if (n.op() != Op::kPlaceholder) in_head = false;
    EXPECT_TRUE(in_head || n.op() != Op::kPlaceholder) << n.name();
    if (n.meta().has_param) ++params;
    EXPECT_NE(n.op(), Op::kCallModule);
  }
  EXPECT_EQ(params, 291);  // 32 layers x 9 + embedding + norm + lm_head
}

TEST(ModelsTest, ModuleGraphsOwnParametersThroughCallModule) {
  absl::StatusOr<Graph> g = BuildModel("resnet18", {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ParamsOwnedBy("layer1.0.conv1").size(), 1u);
  EXPECT_EQ(g->ParamsOwnedBy("layer1.0.bn1").size(), 2u);
  EXPECT_EQ(g->ParamsOwnedBy("fc").size(), 2u);
}

TEST(ModelsTest, DeviceTimeFollowsTheRoofline) {
  // A compute-bound matmul scales with the peak; a memory-bound op with the bandwidth.
  ModelOptions fast;
  fast.device.peak_flops_32bit *= 2;
  absl::StatusOr<Graph> a = BuildModel("mlp", {});
  absl::StatusOr<Graph> b = BuildModel("mlp", fast);
  ASSERT_TRUE(a.ok() && b.ok());
  const NodeId fc = a->FindNode("net_2");
  ASSERT_NE(fc, kNoNode);
  const double ta = a->node(fc).meta().device_time, tb = b->node(fc).meta().device_time;
  // 20 x 5000 x 5000 is memory-bound (the weight dominates): the peak does not matter.
  EXPECT_DOUBLE_EQ(ta, tb);
  CostModel cost;
  EXPECT_DOUBLE_EQ(cost.KernelTime(989e12, 0, "bfloat16"), 1.0);
  EXPECT_DOUBLE_EQ(cost.KernelTime(0, 3.35e12, "float32"), 1.0);
  EXPECT_DOUBLE_EQ(cost.KernelTime(494e12, 1, "float32"), 1.0);
}

TEST(ModelsTest, InvalidConfigsAreErrors) {
  TransformerConfig c = Gpt2Config();
  c.heads = 7;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(), HasSubstr("heads (7) must divide"));
  c = Llama70bConfig();
  c.kv_heads = 3;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(), HasSubstr("kv_heads"));
  c = Gpt2Config();
  c.seq = 4096;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(), HasSubstr("max_positions"));
  c = Gpt2Config();
  c.batch = -1;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(), HasSubstr("batch must be > 0"));
  c = Gpt2Config();
  c.batch = int64_t{1} << 40;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(), HasSubstr("overflow"));
  c = MoeConfig();
  c.top_k = 17;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(), HasSubstr("top_k"));
  // Found by //fuzz:aot_fuzzer: GPT-2's fused QKV cannot have grouped KV heads (the builder
  // viewed a [B, S, hidden] key as kv_heads heads).
  c = Gpt2Config(Preset::kTiny);
  c.kv_heads = 2;
  EXPECT_THAT(BuildTransformer(c, {}).status().message(),
              HasSubstr("kv_heads (2) must equal heads (4) with learned positions"));
  ResNetConfig r;
  r.width = 0;
  EXPECT_THAT(BuildResNet(r, {}).status().message(), HasSubstr("width must be > 0"));
  EXPECT_EQ(BuildModel("gpt5", {}).status().code(), absl::StatusCode::kNotFound);
  MlpConfig m;
  m.widths = {10};
  EXPECT_FALSE(BuildMlp(m, {}).ok());
}

TEST(ModelsTest, ConfigsScale) {
  TransformerConfig c = Llama7bConfig();
  c.layers = 2;
  c.seq = 128;
  absl::StatusOr<Graph> g = BuildTransformer(c, {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(CountParameters(*g), TransformerParamCount(c));
}

}  // namespace
}  // namespace overlap
