#include "graph/shape_rules.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/errors.h"
#include "graph/models.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

ShapeCheckOptions Strict() {
  ShapeCheckOptions o;
  o.require_rules = true;
  return o;
}

// Every built-in model's forward graph, both parameter styles, states what the rules give.
TEST(ShapeRulesTest, EveryBuiltInModelStatesWhatTheRulesGive) {
  for (const std::string& name : ModelNames()) {
    for (ParamStyle style : {ParamStyle::kModule, ParamStyle::kLifted}) {
      for (Preset preset : {Preset::kDefault, Preset::kTiny}) {
        ModelOptions o;
        o.style = style;
        absl::StatusOr<Graph> g = BuildModel(name, o, preset);
        ASSERT_TRUE(g.ok()) << name;
        absl::StatusOr<ShapeCheckReport> r = CheckShapes(*g, Strict());
        ASSERT_TRUE(r.ok()) << name << ": " << r.status();
        // Module-style mlp is call_modules only; lifted graphs are all call_functions.
        if (style == ParamStyle::kLifted) {
          EXPECT_GT(r->checked, 0) << name;
        }
        EXPECT_EQ(r->unstated, 0) << name;
      }
    }
  }
}

// x [4, 8] and w [8, 16] feeding one op whose stated metadata the test chooses.
absl::StatusOr<ShapeCheckReport> CheckOne(const std::string& target, const std::string& args,
                                          const std::string& meta) {
  absl::StatusOr<Graph> g =
      GraphFromParts(absl::StrCat(
                         R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
              "meta": {"shape": [4, 8], "dtype": "float32"}},
             {"name": "w", "op": "placeholder", "target": "w", "args": [],
              "meta": {"shape": [8, 16], "dtype": "float32"}},)",
                         CallJson("y", target, args, meta), ",", OutputJson(R"("%y")")),
                     "");
  if (!g.ok()) return g.status();
  return CheckShapes(*g);
}

TEST(ShapeRulesTest, AWrongShapeIsNamedWithWhatTheRuleGives) {
  EXPECT_TRUE(
      CheckOne("aten.mm.default", R"("%x", "%w")", R"({"shape": [4, 16], "dtype": "float32"})")
          .ok());
  absl::StatusOr<ShapeCheckReport> r =
      CheckOne("aten.mm.default", R"("%x", "%w")", R"({"shape": [4, 8], "dtype": "float32"})");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsBadInput(r.status()));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("node \"y\": its metadata says [4, 8] float32 but aten.mm.default of "
                        "[4, 8] float32, [8, 16] float32 gives [4, 16] float32"));
  // The wrong dtype too.
  EXPECT_FALSE(
      CheckOne("aten.mm.default", R"("%x", "%w")", R"({"shape": [4, 16], "dtype": "bfloat16"})")
          .ok());
}

TEST(ShapeRulesTest, ArgumentsThatDoNotFitTheRuleAreErrorsNamingTheNode) {
  absl::StatusOr<ShapeCheckReport> r =
      CheckOne("aten.mm.default", R"("%w", "%x")", R"({"shape": [8, 8], "dtype": "float32"})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("node \"y\" (aten.mm.default): cannot multiply [8, 16] by [4, 8]"));
  r = CheckOne("aten.view.default", R"("%x", [5, -1])", R"({"shape": [5, 7], "dtype": "float32"})");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cannot infer the -1 dimension"));
  r = CheckOne("aten.transpose.int", R"("%x", 0, 2)", R"({"shape": [8, 4], "dtype": "float32"})");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("dim1 2 is out of range for rank 2"));
  r = CheckOne("aten.mse_loss.default", R"("%x", "%x", 3)", R"({"shape": [], "dtype": "float32"})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("argument 'reduction' is 3"));
  r = CheckOne("aten.arange.default", R"(-2)", R"({"shape": [0], "dtype": "int64"})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("end must be >= 0"));
}

TEST(ShapeRulesTest, TargetsWithoutARuleAreCountedOrRefused) {
  absl::StatusOr<ShapeCheckReport> r =
      CheckOne("mylib.fused.default", R"("%x")", R"({"shape": [4, 8], "dtype": "float32"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->no_rule, 1);
  EXPECT_THAT(r->targets_without_rule, ::testing::ElementsAre("mylib.fused.default"));
  absl::StatusOr<Graph> g = GraphFromParts(
      absl::StrCat(PlaceholderJson("x"), ",", CallJson("y", "mylib.fused.default", R"("%x")"), ",",
                   OutputJson(R"("%y")")),
      "");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(CheckShapes(*g, Strict()).ok());
}

// The rules one by one, on the cases the models do not reach.
struct Case {
  std::string target, args, gives;
};

TEST(ShapeRulesTest, RulesGiveWhatPyTorchGives) {
  const Case cases[] = {
      {"aten.addmm.default", R"("%b", "%x", "%w")", "[4, 16] float32"},
      {"aten.t.default", R"("%x")", "[8, 4] float32"},
      {"aten.view.default", R"("%x", [2, -1, 4])", "[2, 4, 4] float32"},
      {"aten.unsqueeze.default", R"("%x", -1)", "[4, 8, 1] float32"},
      {"aten.expand.default", R"("%b", [3, 4, -1])", "[3, 4, 16] float32"},
      {"aten.sum.dim_IntList", R"("%x", [0], true)", "[1, 8] float32"},
      {"aten.sum.dim_IntList", R"("%x", [-1])", "[4] float32"},
      {"aten.mean.dim", R"("%x", null)", "[] float32"},
      {"aten.mul.Tensor", R"("%x", "%i")", "[4, 8] float32"},
      {"aten.add.Tensor", R"("%b", "%c")", "[4, 16] float32"},
      {"aten.split.Tensor", R"("%w", 6, 1)", "[8, 6] float32, [8, 6] float32, [8, 4] float32"},
      {"aten.cat.default", R"(["%x", "%x"], 1)", "[4, 16] float32"},
      {"aten.slice.Tensor", R"("%w", 1, 2, 100)", "[8, 14] float32"},
      {"aten.slice.Tensor", R"("%w", 1, -4)", "[8, 4] float32"},
      {"aten.topk.default", R"("%x", 3)", "[4, 3] float32, [4, 3] int64"},
      {"aten.embedding.default", R"("%w", "%i")", "[4, 8, 16] float32"},
      {"aten.embedding_dense_backward.default", R"("%e", "%i", 100, -1, false)",
       "[100, 16] float32"},
      {"aten.nll_loss_forward.default", R"("%x", "%n", null, 1, -100)", "[] float32, [] float32"},
      {"aten.mse_loss.default", R"("%x", "%x")", "[] float32"},
      {"aten.flatten.using_ints", R"("%e", 1)", "[4, 128] float32"},
      {"aten.native_layer_norm.default", R"("%x", [8], null, null, 1e-5)",
       "[4, 8] float32, [4, 1] float32, [4, 1] float32"},
  };
  const std::string inputs = R"(
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4, 8], "dtype": "float32"}},
      {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [8, 16], "dtype": "float32"}},
      {"name": "b", "op": "placeholder", "target": "b", "args": [], "meta": {"shape": [16], "dtype": "float32"}},
      {"name": "c", "op": "placeholder", "target": "c", "args": [], "meta": {"shape": [4, 1], "dtype": "float32"}},
      {"name": "i", "op": "placeholder", "target": "i", "args": [], "meta": {"shape": [4, 8], "dtype": "int64"}},
      {"name": "n", "op": "placeholder", "target": "n", "args": [], "meta": {"shape": [4], "dtype": "int64"}},
      {"name": "e", "op": "placeholder", "target": "e", "args": [], "meta": {"shape": [4, 8, 16], "dtype": "float32"}},)";
  for (const Case& c : cases) {
    absl::StatusOr<Graph> g = GraphFromParts(
        absl::StrCat(inputs, CallJson("y", c.target, c.args), ",", OutputJson(R"("%y")")), "");
    ASSERT_TRUE(g.ok()) << c.target << ": " << g.status();
    absl::StatusOr<std::vector<TensorType>> t = InferTypes(*g, g->node(g->FindNode("y")));
    ASSERT_TRUE(t.ok()) << c.target << " " << c.args << ": " << t.status();
    std::vector<std::string> got;
    for (const TensorType& x : *t) got.push_back(FormatType(x));
    EXPECT_EQ(absl::StrJoin(got, ", "), c.gives) << c.target << " " << c.args;
  }
}

TEST(ShapeRulesTest, ConvolutionAndPoolingFollowPyTorchsArithmetic) {
  const std::string inputs = R"(
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [2, 3, 224, 224], "dtype": "float32"}},
      {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [64, 3, 7, 7], "dtype": "float32"}},)";
  absl::StatusOr<Graph> g = GraphFromParts(
      absl::StrCat(inputs,
                   CallJson("y", "aten.convolution.default",
                            R"("%x", "%w", null, [2, 2], [3, 3], [1, 1], false, [0, 0], 1)"),
                   ",",
                   CallJson("p", "aten.max_pool2d_with_indices.default",
                            R"("%x", [3, 3], [2, 2], [1, 1], [1, 1], true)"),
                   ",", OutputJson(R"(["%y", "%p"])")),
      "");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::vector<TensorType>> conv = InferTypes(*g, g->node(g->FindNode("y")));
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_EQ(FormatType((*conv)[0]), "[2, 64, 112, 112] float32");
  absl::StatusOr<std::vector<TensorType>> pool = InferTypes(*g, g->node(g->FindNode("p")));
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(FormatType((*pool)[1]), "[2, 3, 113, 113] int64");  // ceil_mode
}

// What exported (torch 1.13) graphs state: a backward's masked-out outputs as null in
// `shapes` / `dtypes`; evaluation-mode batch norm's empty statistics; getitem indexing a
// tensor (module style), which no rule covers.
TEST(ShapeRulesTest, ExportedGraphsMaskedOutputsEvalBatchNormAndTensorIndexing) {
  absl::StatusOr<Graph> g = GraphFromParts(
      R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
          "meta": {"shape": [2, 3, 8, 8], "dtype": "float32"}},
         {"name": "w", "op": "placeholder", "target": "w", "args": [],
          "meta": {"shape": [4, 3, 3, 3], "dtype": "float32"}},
         {"name": "gy", "op": "placeholder", "target": "gy", "args": [],
          "meta": {"shape": [2, 4, 6, 6], "dtype": "float32"}},
         {"name": "c", "op": "placeholder", "target": "c", "args": [],
          "meta": {"shape": [3], "dtype": "float32"}},
         {"name": "cb", "op": "call_function", "target": "aten.convolution_backward.default",
          "args": ["%gy", "%x", "%w", [0], [1, 1], [0, 0], [1, 1], false, [0, 0], 1,
                   [false, true, false]],
          "meta": {"shapes": [null, [4, 3, 3, 3], null], "dtypes": [null, "float32", null]}},
         {"name": "gw", "op": "call_function", "target": "operator.getitem",
          "args": ["%cb", 1], "meta": {"shape": [4, 3, 3, 3], "dtype": "float32"}},
         {"name": "bn", "op": "call_function", "target": "aten.native_batch_norm.default",
          "args": ["%x", "%c", "%c", "%c", "%c", false, 0.1, 1e-05],
          "meta": {"shapes": [[2, 3, 8, 8], [0], [0]],
                   "dtypes": ["float32", "float32", "float32"]}},
         {"name": "row", "op": "call_function", "target": "operator.getitem",
          "args": ["%x", 0], "meta": {"shape": [3, 8, 8], "dtype": "float32"}},)" +
          OutputJson(R"(["%gw", "%bn", "%row"])"),
      "");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<ShapeCheckReport> r = CheckShapes(*g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->checked, 3);
  EXPECT_EQ(r->no_rule, 1);  // x[0]
  // A masked-out output stated as defined is a mismatch; so is training-mode statistics
  // stated empty.
  absl::StatusOr<Graph> bad = GraphFromParts(
      R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
          "meta": {"shape": [2, 3, 8, 8], "dtype": "float32"}},
         {"name": "c", "op": "placeholder", "target": "c", "args": [],
          "meta": {"shape": [3], "dtype": "float32"}},
         {"name": "bn", "op": "call_function", "target": "aten.native_batch_norm.default",
          "args": ["%x", "%c", "%c", null, null, true, 0.1, 1e-05],
          "meta": {"shapes": [[2, 3, 8, 8], [0], [0]],
                   "dtypes": ["float32", "float32", "float32"]}},)" +
          OutputJson(R"("%bn")"),
      "");
  ASSERT_TRUE(bad.ok()) << bad.status();
  absl::StatusOr<ShapeCheckReport> rb = CheckShapes(*bad);
  ASSERT_FALSE(rb.ok());
  EXPECT_THAT(std::string(rb.status().message()), HasSubstr("gives [2, 3, 8, 8] float32, [3]"));
}

}  // namespace
}  // namespace overlap
