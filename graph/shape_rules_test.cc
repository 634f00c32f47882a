#include "graph/shape_rules.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/errors.h"
#include "graph/models.h"
#include "graph/op_schema.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("(start 0, end -2)"));
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

// The types `target` gives for `args` (and `kwargs`, a JSON object) over the inputs below,
// formatted; the rule's error message when it refuses.
std::string Infer(const std::string& target, const std::string& args,
                  const std::string& kwargs = "") {
  const std::string inputs = R"(
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4, 8], "dtype": "float32"}},
      {"name": "d", "op": "placeholder", "target": "d", "args": [], "meta": {"shape": [8, 16], "dtype": "float64"}},
      {"name": "i", "op": "placeholder", "target": "i", "args": [], "meta": {"shape": [4, 8], "dtype": "int64"}},
      {"name": "k", "op": "placeholder", "target": "k", "args": [], "meta": {"shape": [4, 8], "dtype": "int32"}},
      {"name": "m", "op": "placeholder", "target": "m", "args": [], "meta": {"shape": [4, 8], "dtype": "bool"}},
      {"name": "s", "op": "placeholder", "target": "s", "args": [], "meta": {"shape": [], "dtype": "float64"}},
      {"name": "si", "op": "placeholder", "target": "si", "args": [], "meta": {"shape": [], "dtype": "int64"}},
      {"name": "c3", "op": "placeholder", "target": "c3", "args": [], "meta": {"shape": [3, 8, 8], "dtype": "float32"}},
      {"name": "v4", "op": "placeholder", "target": "v4", "args": [], "meta": {"shape": [2, 4, 6, 6], "dtype": "float64"}},
      {"name": "w4", "op": "placeholder", "target": "w4", "args": [], "meta": {"shape": [4], "dtype": "float64"}},
      {"name": "o3", "op": "placeholder", "target": "o3", "args": [], "meta": {"shape": [3], "dtype": "int32"}},)";
  const std::string call =
      absl::StrCat(R"({"name": "y", "op": "call_function", "target": ")", target, R"(", "args": [)",
                   args, "]", kwargs.empty() ? "" : ", \"kwargs\": " + kwargs, "}");
  absl::StatusOr<Graph> g =
      GraphFromParts(absl::StrCat(inputs, call, ",", OutputJson(R"("%y")")), "");
  if (!g.ok()) return std::string(g.status().message());
  absl::StatusOr<std::vector<TensorType>> t = InferTypes(*g, g->node(g->FindNode("y")));
  if (!t.ok()) return std::string(t.status().message());
  std::vector<std::string> got;
  for (const TensorType& x : *t) got.push_back(FormatType(x));
  return absl::StrJoin(got, ", ");
}

// Result dtypes are ATen's result_type (graph/type_promotion.h) with each family's contract:
// the mask multiply, bool and integer sums, integer subtraction, comparisons, true division.
TEST(ShapeRulesTest, ResultDtypesFollowATensPromotion) {
  const Case cases[] = {
      {"aten.mul.Tensor", R"("%x", "%m")", "[4, 8] float32"},  // x * mask
      {"aten.mul.Tensor", R"("%m", "%m")", "[4, 8] bool"},
      {"aten.add.Tensor", R"("%m", 1)", "[4, 8] int64"},
      {"aten.add.Tensor", R"("%k", "%i")", "[4, 8] int64"},
      {"aten.add.Tensor", R"("%k", "%si")", "[4, 8] int32"},   // a 0-d tensor of one category
      {"aten.add.Tensor", R"("%i", "%s")", "[4, 8] float64"},  // ... of a higher one
      {"aten.add.Tensor", R"("%x", "%s")", "[4, 8] float32"},
      {"aten.mul.Tensor", R"("%i", 2.5)", "[4, 8] float32"},
      {"aten.sub.Tensor", R"("%i", "%i")", "[4, 8] int64"},
      {"aten.sub.Tensor", R"("%i", 1)", "[4, 8] int64"},
      {"aten.div.Tensor", R"("%i", "%i")", "[4, 8] float32"},
      {"aten.div.Tensor", R"("%i", "%s")", "[4, 8] float64"},
      {"aten.div.Tensor_mode", R"("%i", 2)", "[4, 8] float32"},  // rounding_mode None
      {"aten.add.Scalar", R"("%i", 2)", "[4, 8] int64"},
      {"aten.mul.Scalar", R"("%m", 2.0)", "[4, 8] float32"},
      {"aten.div.Scalar", R"("%k", 2)", "[4, 8] float32"},
      {"aten.pow.Tensor_Scalar", R"("%i", 2)", "[4, 8] int64"},
      {"aten.pow.Tensor_Scalar", R"("%i", 0.5)", "[4, 8] float32"},
      {"aten.exp.default", R"("%i")", "[4, 8] float32"},
      {"aten.sigmoid.default", R"("%m")", "[4, 8] float32"},
      {"aten.clamp.default", R"("%i", 0.5)", "[4, 8] float32"},
      {"aten.clamp.default", R"("%i", 0, 3)", "[4, 8] int64"},
      {"aten.eq.Scalar", R"("%x", 1)", "[4, 8] bool"},
      {"aten.lt.Scalar", R"("%i", 0.5)", "[4, 8] bool"},
      {"aten.where.self", R"("%m", "%x", "%s")", "[4, 8] float32"},
      {"aten.where.self", R"("%m", "%i", "%s")", "[4, 8] float64"},
      {"aten.cat.default", R"(["%x", "%i"], 0)", "[8, 8] float32"},
      {"aten.stack.default", R"(["%s", "%si"])", "[2] float64"},
      {"aten.sum.default", R"("%m")", "[] int64"},
      {"aten.sum.default", R"("%k")", "[] int64"},
      {"aten.sum.default", R"("%x")", "[] float32"},
      {"aten.sum.dim_IntList", R"("%m", [1])", "[4] int64"},
      {"aten.mean.default", R"("%x")", "[] float32"},
      {"aten.arange.default", "2.5", "[3] float32"},
      {"aten.arange.default", "3", "[3] int64"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(Infer(c.target, c.args), c.gives) << c.target << " " << c.args;
  // Keywords: a rounding mode keeps integers; a dtype keyword decides.
  EXPECT_EQ(Infer("aten.div.Tensor_mode", R"("%i", 2)", R"({"rounding_mode": "floor"})"),
            "[4, 8] int64");
  EXPECT_EQ(Infer("aten.sum.default", R"("%m")", R"({"dtype": "torch.float32"})"), "[] float32");
  EXPECT_EQ(Infer("aten.mean.default", R"("%i")", R"({"dtype": "torch.float64"})"), "[] float64");
  // What ATen refuses.
  EXPECT_THAT(Infer("aten.sub.Tensor", R"("%m", "%m")"), HasSubstr("bool operand"));
  EXPECT_THAT(Infer("aten.add.Tensor", R"("%i", "%i")", R"({"alpha": 0.5})"),
              HasSubstr("float alpha"));
  EXPECT_THAT(Infer("aten.mean.default", R"("%i")"), HasSubstr("could not infer"));
  EXPECT_THAT(Infer("aten.mm.default", R"("%x", "%d")"), HasSubstr("float32, float64"));
  EXPECT_THAT(Infer("aten.neg.default", R"("%m")"), HasSubstr("bool"));
  EXPECT_THAT(Infer("aten.sum.dim_IntList", R"("%x", [0, -2])"), HasSubstr("more than once"));
}

// sum.default / mean.default have no dim and no keepdim (the exporter's default loss): every
// dimension, none kept.
TEST(ShapeRulesTest, OverloadsWithoutDimReduceEverything) {
  EXPECT_EQ(Infer("aten.sum.default", R"("%x")"), "[] float32");
  EXPECT_EQ(Infer("aten.mean.default", R"("%x")", R"({"dtype": "torch.float64"})"), "[] float64");
  EXPECT_THAT(Infer("aten.sum.default", R"("%x", [0])"), HasSubstr("keyword-only"));
}

// Every declared overload given only its required arguments: its rule takes the schema's
// defaults for the rest and never calls one of them missing (a rule reading an argument its
// overload does not declare, as sum.default's keepdim once was, fails here).
TEST(ShapeRulesTest, NoRuleCallsAnArgumentWithADefaultMissing) {
  for (const OpSchema& s : OpSchemas()) {
    std::vector<std::string> args;
    for (const ArgSchema& arg : s.args) {
      if (arg.default_value || arg.keyword_only) continue;  // defaults; keywords only
      if (arg.optional) {
        args.push_back("null");
        continue;
      }
      const std::string ones = absl::StrCat(
          "[", absl::StrJoin(std::vector<int>(std::max(arg.list_size, 2), 1), ", "), "]");
      switch (arg.type) {
        case ArgType::kTensor:
          args.push_back(R"("%x")");
          break;
        case ArgType::kTensorList:
          args.push_back(R"(["%x", "%x"])");
          break;
        case ArgType::kIntList:
          args.push_back(ones);
          break;
        case ArgType::kFloatList:
          args.push_back("[2.0, 2.0]");
          break;
        case ArgType::kBool:
          args.push_back("false");
          break;
        case ArgType::kBoolList:
          args.push_back("[true, true, true]");
          break;
        case ArgType::kFloat:
          args.push_back("0.5");
          break;
        case ArgType::kString:
          args.push_back(R"("none")");
          break;
        case ArgType::kDtype:
          args.push_back(R"("torch.float32")");
          break;
        default:  // int, Scalar, other
          args.push_back("1");
      }
    }
    const std::string got = Infer(s.target, absl::StrJoin(args, ", "));
    EXPECT_THAT(got, Not(HasSubstr("missing"))) << s.signature;
    EXPECT_THAT(got, Not(HasSubstr("arguments given"))) << s.signature;
  }
}

// aten.convolution (and its backward) in 1, 2 and 3 spatial dimensions, as torch's conv1d /
// conv2d / conv3d export them; a per-dimension argument as one value or one per dimension.
TEST(ShapeRulesTest, ConvolutionsOfOneTwoAndThreeSpatialDimensions) {
  const std::string inputs = R"(
      {"name": "x1", "op": "placeholder", "target": "x1", "args": [], "meta": {"shape": [2, 3, 10], "dtype": "float32"}},
      {"name": "w1", "op": "placeholder", "target": "w1", "args": [], "meta": {"shape": [4, 3, 3], "dtype": "float32"}},
      {"name": "b1", "op": "placeholder", "target": "b1", "args": [], "meta": {"shape": [4], "dtype": "float32"}},
      {"name": "g1", "op": "placeholder", "target": "g1", "args": [], "meta": {"shape": [2, 4, 4], "dtype": "float32"}},
      {"name": "x3", "op": "placeholder", "target": "x3", "args": [], "meta": {"shape": [1, 2, 4, 6, 6], "dtype": "float64"}},
      {"name": "w3", "op": "placeholder", "target": "w3", "args": [], "meta": {"shape": [6, 1, 3, 3, 3], "dtype": "float64"}},
      {"name": "x4", "op": "placeholder", "target": "x4", "args": [], "meta": {"shape": [2, 3, 8, 8], "dtype": "float32"}},)";
  struct Conv {
    std::string args, gives;
  } cases[] = {
      {R"("%x1", "%w1", "%b1", [1], [0], [1], false, [0], 1)", "[2, 4, 8] float32"},
      {R"("%x1", "%w1", null, [2], [1], [1], false, [0], 1)", "[2, 4, 5] float32"},
      {R"("%x1", "%w1", null, [1], [2], [2], false, [0], 1)", "[2, 4, 10] float32"},
      // transposed: weight [in, out / groups, k]
      {R"("%g1", "%w1", null, [2], [0], [1], true, [1], 1)", "[2, 3, 10] float32"},
      // 3-d, two groups, one stride for every dimension
      {R"("%x3", "%w3", null, [1], [0, 1, 1], [1, 1, 1], false, [0, 0, 0], 2)",
       "[1, 6, 2, 6, 6] float64"},
      {R"("%x3", "%w3", null, [2, 2, 2], [1], [1], false, [0], 2)", "[1, 6, 2, 3, 3] float64"},
  };
  for (const Conv& c : cases) {
    absl::StatusOr<Graph> g =
        GraphFromParts(absl::StrCat(inputs, CallJson("y", "aten.convolution.default", c.args), ",",
                                    OutputJson(R"("%y")")),
                       "");
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<std::vector<TensorType>> t = InferTypes(*g, g->node(g->FindNode("y")));
    ASSERT_TRUE(t.ok()) << c.args << ": " << t.status();
    EXPECT_EQ(FormatType((*t)[0]), c.gives) << c.args;
  }
  // The backward of the first: (d_input, d_weight, d_bias), 1-d too.
  absl::StatusOr<Graph> g = GraphFromParts(
      absl::StrCat(
          inputs,
          CallJson("y", "aten.convolution_backward.default",
                   R"("%g1", "%x1", "%w1", [4], [1], [0], [1], false, [0], 1, [true, true, true])"),
          ",",
          CallJson("bad", "aten.convolution.default",
                   R"("%x1", "%x4", null, [1], [0], [1], false, [0], 1)"),
          ",",
          CallJson("two", "aten.convolution.default",
                   R"("%x4", "%x4", null, [1, 1, 1], [0], [1], false, [0], 1)"),
          ",", OutputJson(R"(["%y", "%bad", "%two"])")),
      "");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::vector<TensorType>> back = InferTypes(*g, g->node(g->FindNode("y")));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatType((*back)[0]), "[2, 3, 10] float32");
  EXPECT_EQ(FormatType((*back)[1]), "[4, 3, 3] float32");
  EXPECT_EQ(FormatType((*back)[2]), "[4] float32");
  // Ranks that differ, and a per-dimension argument of the wrong length, are named.
  absl::StatusOr<std::vector<TensorType>> bad = InferTypes(*g, g->node(g->FindNode("bad")));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("3-, 4- or 5-d"));
  absl::StatusOr<std::vector<TensorType>> two = InferTypes(*g, g->node(g->FindNode("two")));
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()), HasSubstr("stride has 3 values for 2 spatial"));
}

// Pooling takes (N, C, H, W) and (C, H, W), as ATen's max_pool2d / avg_pool2d do, and
// kernel_size as one value or two.
TEST(ShapeRulesTest, PoolingTakesUnbatchedInputs) {
  EXPECT_EQ(Infer("aten.max_pool2d_with_indices.default", R"("%c3", [2])"),
            "[3, 4, 4] float32, [3, 4, 4] int64");
  EXPECT_EQ(Infer("aten.avg_pool2d.default", R"("%c3", 2, 1)"), "[3, 7, 7] float32");
}

// 3-D pooling takes (N, C, D, H, W) and (C, D, H, W), stride [] meaning the kernel, one value
// standing for every dimension; adaptive max pooling returns int64 indices beside the values.
TEST(ShapeRulesTest, VolumePoolingAndAdaptiveMaxPooling) {
  EXPECT_EQ(Infer("aten.max_pool3d_with_indices.default", R"("%v4", [2, 2, 2])"),
            "[2, 2, 3, 3] float64, [2, 2, 3, 3] int64");
  EXPECT_EQ(Infer("aten.max_pool3d_with_indices.default", R"("%v4", [3], [2], [1], [1], true)"),
            "[2, 3, 4, 4] float64, [2, 3, 4, 4] int64");
  EXPECT_EQ(Infer("aten.avg_pool3d.default", R"("%v4", [2], [])"), "[2, 2, 3, 3] float64");
  EXPECT_EQ(Infer("aten.avg_pool3d_backward.default",
                  R"("%v4", "%v4", [1, 1, 1], [1], [0], false, true, null)"),
            "[2, 4, 6, 6] float64");
  EXPECT_THAT(Infer("aten.max_pool3d_with_indices.default", R"("%c3", [2])"),
              HasSubstr("(C, D, H, W)"));
  EXPECT_THAT(Infer("aten.avg_pool3d_backward.default",
                    R"("%v4", "%v4", [2, 2, 2], [], [0], false, true, null)"),
              HasSubstr("grad_output and the pooled self differ"));
  EXPECT_EQ(Infer("aten.adaptive_max_pool2d.default", R"("%c3", [3, 5])"),
            "[3, 3, 5] float32, [3, 3, 5] int64");
  EXPECT_THAT(Infer("aten.adaptive_max_pool2d_backward.default", R"("%c3", "%c3", "%i")"),
              HasSubstr("grad_output and indices differ"));
  EXPECT_THAT(Infer("aten.adaptive_max_pool2d.default", R"("%x", [3, 5])"),
              HasSubstr("3-d or 4-d"));
  EXPECT_EQ(Infer("aten.adaptive_max_pool3d.default", R"("%v4", [1, 3, 5])"),
            "[2, 1, 3, 5] float64, [2, 1, 3, 5] int64");
  EXPECT_EQ(Infer("aten._adaptive_avg_pool3d.default", R"("%v4", [2])"), "[2, 2, 2, 2] float64");
  EXPECT_EQ(Infer("aten._adaptive_avg_pool3d_backward.default", R"("%v4", "%v4")"),
            "[2, 4, 6, 6] float64");
  EXPECT_THAT(Infer("aten._adaptive_avg_pool3d.default", R"("%c3", [2, 2, 2])"),
              HasSubstr("4-d or 5-d"));
  EXPECT_THAT(Infer("aten.adaptive_max_pool3d.default", R"("%v4", [2, 0, 2])"),
              HasSubstr("3 positive sizes"));
}

// A pointwise op's rule comes from its declaration (OpSchema::pointwise): operands broadcast
// (a backward's have one shape), the dtype by the declared DtypeRule over tensors and numbers.
TEST(ShapeRulesTest, PointwiseRulesFollowTheDeclaration) {
  for (const OpSchema& s : OpSchemas()) {
    if (s.pointwise) {
      EXPECT_TRUE(HasShapeRule(s.target)) << s.target;
    }
  }
  EXPECT_EQ(Infer("aten.sigmoid.default", R"("%i")"), "[4, 8] float32");  // promoted float
  EXPECT_EQ(Infer("aten.sin.default", R"("%d")"), "[8, 16] float64");
  EXPECT_EQ(Infer("aten.relu.default", R"("%k")"), "[4, 8] int32");  // first tensor's
  EXPECT_EQ(Infer("aten.hardtanh.default", R"("%x", -2, 2)"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.eq.Tensor", R"("%x", "%s")"), "[4, 8] bool");  // broadcast
  EXPECT_EQ(Infer("aten.gt.Scalar", R"("%i", 0.5)"), "[4, 8] bool");
  EXPECT_THAT(Infer("aten.lt.Tensor", R"("%x", "%d")"), HasSubstr("broadcast"));
  EXPECT_EQ(Infer("aten.sigmoid_backward.default", R"("%x", "%x")"), "[4, 8] float32");
  EXPECT_THAT(Infer("aten.threshold_backward.default", R"("%x", "%s", 0)"),
              HasSubstr("grad_output and self differ"));
  EXPECT_THAT(Infer("aten.tanh_backward.default", R"("%x")"), HasSubstr("output"));
  // An explicit rule wins: leaky_relu refuses integers as ATen does.
  EXPECT_THAT(Infer("aten.leaky_relu.default", R"("%i", 0.1)"), HasSubstr("floating"));
}

// The types `target` gives on the placeholders of `inputs` ("name": [shape], dtype), the node
// stating `meta` (an object's text, or nothing); a message when the rule refuses.
std::string InferOn(const std::vector<std::tuple<std::string, std::string, std::string>>& inputs,
                    const std::string& target, const std::string& args,
                    const std::string& kwargs = "", const std::string& meta = "") {
  std::string nodes;
  for (const auto& [name, shape, dtype] : inputs) {
    absl::StrAppend(&nodes, R"({"name": ")", name, R"(", "op": "placeholder", "target": ")", name,
                    R"(", "args": [], "meta": {"shape": )", shape, R"(, "dtype": ")", dtype,
                    R"("}},)");
  }
  absl::StrAppend(&nodes, R"({"name": "y", "op": "call_function", "target": ")", target,
                  R"(", "args": [)", args, "]", kwargs.empty() ? "" : ", \"kwargs\": " + kwargs,
                  meta.empty() ? "" : ", \"meta\": " + meta, "},", OutputJson(R"("%y")"));
  absl::StatusOr<Graph> g = GraphFromParts(nodes, "");
  if (!g.ok()) return std::string(g.status().message());
  absl::StatusOr<std::vector<TensorType>> t = InferTypes(*g, g->node(g->FindNode("y")));
  if (!t.ok()) return std::string(t.status().message());
  std::vector<std::string> got;
  for (const TensorType& x : *t) got.push_back(FormatType(x));
  return absl::StrJoin(got, ", ");
}

// gather / scatter / scatter_add / select_scatter, cumsum, flip, embedding bags,
// repeat_interleave and triu_indices, with the shapes and dtypes torch 1.13 exported.
TEST(ShapeRulesTest, GathersScattersAndIndexBuildersFollowATen) {
  EXPECT_EQ(Infer("aten.gather.default", R"("%x", 1, "%i")"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.scatter.value", R"("%x", -1, "%i", 0)"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.scatter.src", R"("%x", 0, "%i", "%x")"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.scatter_add.default", R"("%x", 0, "%i", "%x")"), "[4, 8] float32");
  // ATen's dtypes: an int64 index, src of self's dtype; an index larger than self (apart
  // from dim) or of another rank, and a dim out of range, are refused naming the node.
  EXPECT_THAT(Infer("aten.gather.default", R"("%x", 1, "%k")"), HasSubstr("not int64"));
  EXPECT_THAT(Infer("aten.scatter_add.default", R"("%x", 0, "%i", "%d")"),
              HasSubstr("src is float64 but self is float32"));
  EXPECT_THAT(Infer("aten.gather.default", R"("%c3", 0, "%i")"),
              HasSubstr("node \"y\" (aten.gather.default): index [4, 8] does not fit"));
  EXPECT_THAT(Infer("aten.gather.default", R"("%x", 2, "%i")"), HasSubstr("out of range"));
  const std::tuple<std::string, std::string, std::string> small = {"small", "[2, 3]", "int64"};
  EXPECT_EQ(
      InferOn({{"x", "[4, 8]", "float32"}, small}, "aten.gather.default", R"("%x", 1, "%small")"),
      "[2, 3] float32");
  EXPECT_THAT(
      InferOn({{"x", "[1, 8]", "float32"}, small}, "aten.gather.default", R"("%x", 1, "%small")"),
      HasSubstr("does not fit"));
  // select_scatter: src is self.select(dim, index); the index counts from the end.
  EXPECT_EQ(InferOn({{"a", "[2, 6, 8]", "float32"}, {"b", "[2, 8]", "float32"}},
                    "aten.select_scatter.default", R"("%a", "%b", 1, -2)"),
            "[2, 6, 8] float32");
  EXPECT_THAT(Infer("aten.select_scatter.default", R"("%c3", "%x", 0, 1)"),
              HasSubstr("is not the selected [8, 8]"));
  EXPECT_THAT(Infer("aten.select_scatter.default", R"("%c3", "%x", 0, 3)"),
              HasSubstr("out of range"));
  // cumsum: sum's dtypes (bool and integers to int64 unless dtype says otherwise).
  EXPECT_EQ(Infer("aten.cumsum.default", R"("%x", -1)"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.cumsum.default", R"("%m", 0)"), "[4, 8] int64");
  EXPECT_EQ(Infer("aten.cumsum.default", R"("%k", 1)"), "[4, 8] int64");
  EXPECT_EQ(Infer("aten.cumsum.default", R"("%k", 1)", R"({"dtype": "torch.int32"})"),
            "[4, 8] int32");
  EXPECT_THAT(Infer("aten.cumsum.default", R"("%x", 2)"), HasSubstr("out of range"));
  EXPECT_EQ(Infer("aten.flip.default", R"("%c3", [0, 2])"), "[3, 8, 8] float32");
  EXPECT_THAT(Infer("aten.flip.default", R"("%x", [1, -1])"), HasSubstr("more than once"));
  // triu_indices: [2, count], int64 by default.
  EXPECT_EQ(Infer("aten.triu_indices.default", "6, 6, 1"), "[2, 15] int64");
  EXPECT_EQ(Infer("aten.triu_indices.default", "3, 4"), "[2, 9] int64");
  EXPECT_EQ(Infer("aten.triu_indices.default", "4, 3, -1", R"({"dtype": "torch.int32"})"),
            "[2, 9] int32");
  EXPECT_THAT(Infer("aten.triu_indices.default", "-1, 3"), HasSubstr("non-negative"));
}

TEST(ShapeRulesTest, EmbeddingBagsAndRepeatInterleave) {
  const std::vector<std::tuple<std::string, std::string, std::string>> bag = {
      {"w", "[11, 8]", "float32"},
      {"w64", "[11, 8]", "float64"},
      {"ids", "[12]", "int64"},
      {"offsets", "[4]", "int64"},
      {"g", "[4, 8]", "float32"}};
  // torch 1.13's sum over a float32 weight: offset2bag left empty (the CPU fast path).
  EXPECT_EQ(InferOn(bag, "aten._embedding_bag.default", R"("%w", "%ids", "%offsets")"),
            "[4, 8] float32, [0] int64, [4] int64, [4] int64");
  EXPECT_EQ(InferOn(bag, "aten._embedding_bag.default", R"("%w64", "%ids", "%offsets")"),
            "[4, 8] float64, [12] int64, [4] int64, [4] int64");
  EXPECT_EQ(InferOn(bag, "aten._embedding_bag.default",
                    R"("%w", "%ids", "%offsets", false, 2, false, null, true)"),
            "[3, 8] float32, [12] int64, [3] int64, [3, 8] int64");
  EXPECT_EQ(InferOn(bag, "aten._embedding_bag.default", R"("%w", "%ids", "%offsets", false, 1)",
                    R"({"padding_idx": 0})"),
            "[4, 8] float32, [12] int64, [4] int64, [4] int64");
  EXPECT_THAT(InferOn(bag, "aten._embedding_bag.default", R"("%w", "%ids", "%offsets", false, 3)"),
              HasSubstr("mode 3"));
  EXPECT_EQ(InferOn(bag, "aten._embedding_bag_dense_backward.default",
                    R"("%g", "%ids", "%ids", "%offsets", "%offsets", 11, false, 0, null)"),
            "[11, 8] float32");
  // repeat_interleave: the length is output_size's, else the node's stated one.
  EXPECT_EQ(InferOn(bag, "aten.repeat_interleave.Tensor", R"("%offsets")", R"({"output_size": 7})"),
            "[7] int64");
  EXPECT_EQ(InferOn(bag, "aten.repeat_interleave.Tensor", R"("%offsets")", "",
                    R"({"shape": [5], "dtype": "int64"})"),
            "[5] int64");
  EXPECT_THAT(InferOn(bag, "aten.repeat_interleave.Tensor", R"("%offsets")"),
              HasSubstr("depends on the data"));
  EXPECT_THAT(InferOn(bag, "aten.repeat_interleave.Tensor", R"("%g")"), HasSubstr("1-D int64"));
}

// The ops transformers' and timm's models reach: bitwise masks (bool and integers only),
// minimum's promotion, argmax with and without a dimension, repeat's padding, new_ones /
// full_like's dtypes.
TEST(ShapeRulesTest, TransformerMaskAndTilingOps) {
  const std::tuple<std::string, std::string, std::string> mask = {"m", "[2, 1, 4]", "bool"};
  const std::tuple<std::string, std::string, std::string> causal = {"c", "[4, 4]", "bool"};
  const std::tuple<std::string, std::string, std::string> x = {"x", "[2, 3]", "float32"};
  const std::tuple<std::string, std::string, std::string> i = {"i", "[3]", "int64"};
  EXPECT_EQ(InferOn({mask, causal}, "aten.bitwise_and.Tensor", R"("%m", "%c")"), "[2, 4, 4] bool");
  EXPECT_EQ(InferOn({mask, {"k", "[4]", "int64"}}, "aten.bitwise_or.Tensor", R"("%m", "%k")"),
            "[2, 1, 4] int64");
  EXPECT_THAT(InferOn({x, mask}, "aten.bitwise_and.Tensor", R"("%x", "%x")"),
              HasSubstr("bool or integers"));
  EXPECT_EQ(InferOn({x, i}, "aten.logical_and.default", R"("%x", "%i")"), "[2, 3] bool");
  EXPECT_EQ(InferOn({x, i}, "aten.minimum.default", R"("%i", "%x")"), "[2, 3] float32");
  EXPECT_EQ(InferOn({x}, "aten.argmax.default", R"("%x", -1)"), "[2] int64");
  EXPECT_EQ(InferOn({x}, "aten.argmax.default", R"("%x", null, true)"), "[1, 1] int64");
  EXPECT_EQ(InferOn({x}, "aten.argmin.default", R"("%x")"), "[] int64");
  EXPECT_EQ(InferOn({x}, "aten.repeat.default", R"("%x", [2, 1, 3])"), "[2, 2, 9] float32");
  EXPECT_THAT(InferOn({x}, "aten.repeat.default", R"("%x", [2])"), HasSubstr("fewer than"));
  EXPECT_EQ(InferOn({i}, "aten.new_ones.default", R"("%i", [2, 2])"), "[2, 2] int64");
  EXPECT_EQ(
      InferOn({i}, "aten.new_full.default", R"("%i", [2], 0.5)", R"({"dtype": "torch.float32"})"),
      "[2] float32");
  EXPECT_EQ(InferOn({i}, "aten.full_like.default", R"("%i", 3)"), "[3] int64");
  EXPECT_EQ(InferOn({}, "aten.arange.start", "2, 9"), "[7] int64");
  // cat skips a 1-D empty tensor (an empty KV cache) for the shapes, as ATen's legacy rule.
  const std::tuple<std::string, std::string, std::string> none = {"e", "[0]", "float32"};
  const std::tuple<std::string, std::string, std::string> kv = {"k", "[2, 4, 3, 8]", "float32"};
  EXPECT_EQ(InferOn({none, kv}, "aten.cat.default", R"(["%e", "%k"], -2)"), "[2, 4, 3, 8] float32");
  EXPECT_EQ(InferOn({none}, "aten.cat.default", R"(["%e", "%e"])"), "[0] float32");
  EXPECT_THAT(InferOn({x, kv}, "aten.cat.default", R"(["%x", "%k"])"), HasSubstr("ranks"));
}

// max.dim's values and int64 indices, amax over named dimensions or all; leaky_relu and PReLU
// (one weight, or one per channel; 2.x's kernel broadcasting it) for floating dtypes; pixel
// (un)shuffle between channels and pixels. Each with what ATen refuses.
TEST(ShapeRulesTest, MaxReductionsActivationsAndPixelShuffleFollowATen) {
  const Case cases[] = {
      {"aten.max.dim", R"("%x", 1)", "[4] float32, [4] int64"},
      {"aten.max.dim", R"("%x", -1, true)", "[4, 1] float32, [4, 1] int64"},
      {"aten.max.dim", R"("%s", 0)", "[] float64, [] int64"},
      {"aten.max.dim", R"("%i", 0)", "[8] int64, [8] int64"},
      {"aten.amax.default", R"("%x", [0])", "[8] float32"},
      {"aten.amax.default", R"("%v4", [1, -1], true)", "[2, 1, 6, 1] float64"},
      {"aten.amax.default", R"("%x")", "[] float32"},
      {"aten.leaky_relu.default", R"("%x", 0.2)", "[4, 8] float32"},
      {"aten.leaky_relu_backward.default", R"("%x", "%x", 0.01, false)", "[4, 8] float32"},
      {"aten.prelu.default", R"("%v4", "%w4")", "[2, 4, 6, 6] float64"},
      {"aten.prelu.default", R"("%v4", "%s")", "[2, 4, 6, 6] float64"},
      {"aten.prelu_backward.default", R"("%v4", "%v4", "%w4")",
       "[2, 4, 6, 6] float64, [4] float64"},
      {"aten._prelu_kernel.default", R"("%v4", "%s")", "[2, 4, 6, 6] float64"},
      {"aten._prelu_kernel_backward.default", R"("%v4", "%v4", "%s")",
       "[2, 4, 6, 6] float64, [2, 4, 6, 6] float64"},
      {"aten.pixel_shuffle.default", R"("%v4", 2)", "[2, 1, 12, 12] float64"},
      {"aten.pixel_unshuffle.default", R"("%v4", 2)", "[2, 16, 3, 3] float64"},
      {"aten.pixel_unshuffle.default", R"("%c3", 4)", "[48, 2, 2] float32"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(Infer(c.target, c.args), c.gives) << c.target << " " << c.args;
  EXPECT_THAT(Infer("aten.max.dim", R"("%x", 2)"), HasSubstr("dim 2 is out of range for rank 2"));
  EXPECT_THAT(Infer("aten.amax.default", R"("%x", [1, -1])"), HasSubstr("more than once"));
  EXPECT_THAT(Infer("aten.leaky_relu.default", R"("%i")"), HasSubstr("a floating dtype"));
  EXPECT_THAT(Infer("aten.prelu.default", R"("%x", "%w4")"),
              HasSubstr("weight has 4 elements, self 8 channels"));
  EXPECT_THAT(Infer("aten.prelu.default", R"("%v4", "%d")"), HasSubstr("scalar or 1-d"));
  EXPECT_THAT(Infer("aten._prelu_kernel.default", R"("%x", "%s")"), HasSubstr("float32, float64"));
  EXPECT_THAT(Infer("aten._prelu_kernel_backward.default", R"("%s", "%s", "%w4")"),
              HasSubstr("does not broadcast to self"));
  EXPECT_THAT(Infer("aten.pixel_shuffle.default", R"("%c3", 2)"), HasSubstr("not divisible"));
  EXPECT_THAT(Infer("aten.pixel_shuffle.default", R"("%x", 2)"), HasSubstr("at least 3"));
  EXPECT_THAT(Infer("aten.pixel_unshuffle.default", R"("%v4", 4)"), HasSubstr("divisible by 4"));
  EXPECT_THAT(Infer("aten.pixel_shuffle.default", R"("%v4", 0)"), HasSubstr("positive"));
}

// Mixture-of-experts (transformers 5): the experts' grouped products, histc's counts, sort;
// and the other ops unseen families reached.
TEST(ShapeRulesTest, MixtureOfExpertsOps) {
  EXPECT_EQ(Infer("transformers.grouped_mm_fallback.default", R"("%x", "%c3", "%o3")"),
            "[4, 8] float32");
  EXPECT_EQ(
      Infer("transformers.grouped_mm_fallback_backward.default", R"("%x", "%c3", "%o3", "%x")"),
      "[4, 8] float32, [3, 8, 8] float32");
  EXPECT_THAT(Infer("transformers.grouped_mm_fallback.default", R"("%x", "%c3", "%i")"),
              HasSubstr("offs [4, 8] int64 is not [3] int32 or int64"));
  EXPECT_THAT(Infer("transformers.grouped_mm_fallback.default", R"("%d", "%c3", "%o3")"),
              HasSubstr("are not [S, K] and [E, K, N]"));
  EXPECT_EQ(Infer("aten.histc.default", R"("%x", 10)"), "[10] float32");
  EXPECT_THAT(Infer("aten.histc.default", R"("%i", 10)"), HasSubstr("is not floating"));
  EXPECT_EQ(Infer("aten.sort.default", R"("%x")"), "[4, 8] float32, [4, 8] int64");
  EXPECT_EQ(Infer("aten.floor_divide.default", R"("%i", 2)"), "[4, 8] int64");
  EXPECT_EQ(Infer("aten.pow.Tensor_Tensor", R"("%k", "%x")"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.sqrt.default", R"("%i")"), "[4, 8] float32");
  EXPECT_EQ(Infer("aten.rsub.Scalar", R"("%x", 1)"), "[4, 8] float32");
}

}  // namespace
}  // namespace overlap
