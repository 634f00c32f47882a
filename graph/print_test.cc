#include "graph/print.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/models.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(PrintTest, EveryValueKindAndMetaField) {
  Graph g = ParseGraphParts(
      absl::StrCat(
          PlaceholderJson("x"), ",", PlaceholderJson("p_w", "w"), ",",
          R"({"name": "t", "op": "call_function", "target": "aten.t.default", "args": ["%p_w"],
              "meta": {"aliases_input": true, "shape": [4, 2], "dtype": "float32"}},
             {"name": "mm", "op": "call_function", "target": "aten.mm.default",
              "args": ["%x", "%t"], "kwargs": {"out": null, "alpha": 1.5},
              "meta": {"shape": [3, 2], "dtype": "float32", "tensor_size": 24,
                       "device_time": 1.5e-5, "grad_of": "w"}},
             {"name": "f", "op": "call_function", "target": "g",
              "args": [[1, true, "s\"q"], {"$slice": ["%mm", null, 2]}, {"k": [false]}]},
             {"name": "m", "op": "call_method", "target": "view", "args": ["%mm", -1]},)",
          OutputJson(R"(["%mm", "%f", "%m"])")),
      R"({"name": "w", "owner": "p_w", "bytes": 32, "shape": [2, 4], "dtype": "float32"})");
  EXPECT_EQ(PrintGraph(g),
            "param #0 w (owner p_w) [2, 4] float32 32 B\n"
            "%x = placeholder[x]\n"
            "%p_w = placeholder[p_w]  # param w\n"
            "%t = aten.t.default(%p_w) : [4, 2] float32  # view\n"
            "%mm = aten.mm.default(%x, %t, out=None, alpha=1.5) : [3, 2] float32  # 15.000 us, "
            "24 B, grad of w\n"
            "%f = g([1, True, \"s\\\"q\"], slice(%mm, None, 2), {\"k\": [False]})\n"
            "%m = call_method[view](%mm, -1)\n"
            "output([%mm, %f, %m])\n");
}

TEST(PrintTest, ANodeIsOneLineWhateverItsStringsHold) {
  Graph g = ParseGraphParts(
      absl::StrCat(PlaceholderJson("x"), ",",
                   R"({"name": "y", "op": "call_function", "target": "odd\ntarget\\",
                       "args": ["%x"], "kwargs": {"k\u0001": 1}, "meta": {"dtype": "f\t32"}},)",
                   OutputJson(R"("%y")")),
      "");
  EXPECT_EQ(PrintNode(g, g.node(g.FindNode("y"))),
            "%y = odd\\x0atarget\\\\(%x, k\\x01=1) : f\\x0932");
}

// A whole built-in model against a checked-in golden file: any change to the printer or to
// the model shows up as a readable diff. Regenerate with
//   bazel run //:overlap -- gen mlp | bazel run //:overlap -- print - >
//   graph/testdata/mlp_print.golden
TEST(PrintTest, MlpMatchesTheGoldenFile) {
  std::ifstream in("graph/testdata/mlp_print.golden");
  ASSERT_TRUE(in) << "missing golden file";
  std::stringstream golden;
  golden << in.rdbuf();
  absl::StatusOr<Graph> g = BuildModel("mlp", {});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(PrintGraph(*g), golden.str());
}

}  // namespace
}  // namespace overlap
