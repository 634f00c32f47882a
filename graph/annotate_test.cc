// The annotator's formulas on hand-checked nodes (each figure recomputed here from the
// roofline), what it keeps and what it counts, and its coverage of the built-in models.
#include "graph/annotate.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/aot.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

// Round figures: 1 TFLOP/s at every precision, 1 GB/s.
AnnotateOptions Simple() {
  AnnotateOptions o;
  o.device.peak_flops_16bit = 1e12;
  o.device.peak_flops_32bit = 1e12;
  o.device.memory_bandwidth = 1e9;
  return o;
}

double Roofline(double flops, double bytes) { return std::max(flops / 1e12, bytes / 1e9); }

const Node& N(const Graph& g, const char* name) { return g.node(g.FindNode(name)); }

constexpr char kGraph[] = R"({"format": "overlap-graph", "version": 1, "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [64, 128], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [128, 256], "dtype": "float32"}},
  {"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%w"],
   "meta": {"shape": [64, 256], "dtype": "float32"}},
  {"name": "relu", "op": "call_function", "target": "aten.relu.default", "args": ["%mm"],
   "meta": {"shape": [64, 256], "dtype": "float32"}},
  {"name": "v", "op": "call_function", "target": "aten.view.default", "args": ["%relu", [16384]],
   "meta": {"shape": [16384], "dtype": "float32", "aliases_input": true}},
  {"name": "odd", "op": "call_function", "target": "aten.mystery_op.default", "args": ["%v"],
   "meta": {"shape": [16384], "dtype": "float16"}},
  {"name": "timed", "op": "call_function", "target": "aten.neg.default", "args": ["%odd"],
   "meta": {"shape": [16384], "dtype": "float16", "device_time": 0.5, "tensor_size": 7}},
  {"name": "img", "op": "placeholder", "target": "img", "args": [], "meta": {"shape": [2, 3, 8, 8], "dtype": "float32"}},
  {"name": "k", "op": "placeholder", "target": "k", "args": [], "meta": {"shape": [4, 3, 3, 3], "dtype": "float32"}},
  {"name": "conv", "op": "call_function", "target": "aten.convolution.default",
   "args": ["%img", "%k", null, [1, 1], [1, 1], [1, 1], false, [0, 0], 1],
   "meta": {"shape": [2, 4, 8, 8], "dtype": "float32"}},
  {"name": "gout", "op": "placeholder", "target": "gout", "args": [], "meta": {"shape": [2, 4, 8, 8], "dtype": "float32"}},
  {"name": "convb", "op": "call_function", "target": "aten.convolution_backward.default",
   "args": ["%gout", "%img", "%k", [4], [1, 1], [1, 1], [1, 1], false, [0, 0], 1, [false, true, false]],
   "meta": {"shapes": [null, [4, 3, 3, 3], null], "dtypes": [null, "float32", null]}},
  {"name": "output", "op": "output", "target": "output", "args": [["%timed", "%conv", "%convb"]]}
]})";

TEST(AnnotateTest, BaseOpNames) {
  EXPECT_EQ(BaseOpName("aten.native_layer_norm.default"), "native_layer_norm");
  EXPECT_EQ(BaseOpName("aten.add_.Tensor"), "add");
  EXPECT_EQ(BaseOpName("aten._softmax.default"), "_softmax");
  EXPECT_EQ(BaseOpName("torch.nn.functional.relu"), "relu");
  EXPECT_EQ(BaseOpName("operator.getitem"), "getitem");
  EXPECT_EQ(BaseOpName("view"), "view");
  EXPECT_EQ(BaseOpName("torch.nn.modules.linear.Linear"), "Linear");
  EXPECT_EQ(BaseOpName("torch.ops.aten.mm.default"), "mm");
}

TEST(AnnotateTest, FormulasOnHandCheckedNodes) {
  absl::StatusOr<Graph> g = ReadGraphJson(kGraph);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, Simple());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(Verify(*g).ok());

  // mm: 2 x 64 x 256 x 128 FLOPs; reads 32 KiB + 128 KiB, writes 64 KiB.
  const double mm_bytes = (64 * 128 + 128 * 256 + 64 * 256) * 4.0;
  EXPECT_DOUBLE_EQ(N(*g, "mm").meta().device_time, Roofline(2.0 * 64 * 256 * 128, mm_bytes));
  EXPECT_EQ(N(*g, "mm").meta().tensor_size, 64 * 256 * 4);
  // relu: memory-bound, one read and one write.
  EXPECT_DOUBLE_EQ(N(*g, "relu").meta().device_time, Roofline(64 * 256, 2 * 64 * 256 * 4.0));
  // A view moves nothing.
  EXPECT_EQ(N(*g, "v").meta().device_time, 0);
  EXPECT_TRUE(N(*g, "v").meta().has_device_time);
  // An unknown op: the memory-only fallback (a float32 read, a float16 write), counted.
  EXPECT_DOUBLE_EQ(N(*g, "odd").meta().device_time, Roofline(0, 16384 * 4.0 + 16384 * 2.0));
  EXPECT_EQ(r->fallback, 1);
  EXPECT_EQ(r->fallback_ops.at("aten.mystery_op.default"), 1);
  // Given figures are kept.
  EXPECT_EQ(N(*g, "timed").meta().device_time, 0.5);
  EXPECT_EQ(N(*g, "timed").meta().tensor_size, 7);
  EXPECT_EQ(r->kept, 1);
  // Convolution: 2 x output elements x (3 x 3 x 3) weights each.
  const double conv_bytes = (2 * 3 * 8 * 8 + 4 * 27 + 2 * 4 * 8 * 8) * 4.0;
  EXPECT_DOUBLE_EQ(N(*g, "conv").meta().device_time, Roofline(2.0 * 512 * 27, conv_bytes));
  // Its backward with output_mask [false, true, false]: the weight gradient only.
  const double convb_bytes = (512 + 384 + 108 + 108) * 4.0;
  EXPECT_DOUBLE_EQ(N(*g, "convb").meta().device_time, Roofline(2.0 * 512 * 27, convb_bytes));
  EXPECT_EQ(N(*g, "convb").meta().tensor_size, 108 * 4);
  // Placeholders get sizes, not times.
  EXPECT_EQ(N(*g, "x").meta().tensor_size, 64 * 128 * 4);
  EXPECT_FALSE(N(*g, "x").meta().has_device_time);
  EXPECT_EQ(r->device_times_filled, 6);
  EXPECT_EQ(r->by_formula, 5);
  EXPECT_EQ(r->untyped, 0);
  EXPECT_THAT(FormatAnnotateReport(*r), HasSubstr("aten.mystery_op.default: 1"));
}

// nn.MultiheadAttention as a torch.fx leaf (torchvision 0.29's ViT): its projections and the
// attention, the longer leading dimension taken as the sequence; torch._assert is free.
TEST(AnnotateTest, MultiheadAttentionModuleAndAsserts) {
  constexpr char kAttn[] = R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [2, 10, 2048], "dtype": "float32"}},
    {"name": "ok", "op": "call_function", "target": "torch._assert", "args": [true, "shape"]},
    {"name": "mha", "op": "call_module", "target": "attn", "args": ["%x", "%x", "%x"],
     "meta": {"shapes": [[2, 10, 2048], null], "dtypes": ["float32", null],
              "module": "torch.nn.modules.activation.MultiheadAttention"}},
    {"name": "output", "op": "output", "target": "output", "args": ["%mha"]}]})";
  absl::StatusOr<Graph> g = ReadGraphJson(kAttn);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, Simple());
  ASSERT_TRUE(r.ok()) << r.status();
  // Wide enough (E = 2048) that the FLOPs, not the bytes, set the time.
  const double n = 20, e = 2048, s = 10;
  const double flops = 4 * n * e * e + 4 * n * e * e + 4 * n * s * e;
  ASSERT_GT(flops / 1e12, 2 * n * e * 4.0 / 1e9);
  EXPECT_DOUBLE_EQ(N(*g, "mha").meta().device_time, Roofline(flops, 2 * n * e * 4.0));
  EXPECT_EQ(N(*g, "ok").meta().device_time, 0);
  EXPECT_EQ(r->fallback, 0);
}

// An ATen op declared pointwise (graph/op_schema.h) that no list of annotate.cc names is
// costed as elementwise: one FLOP per element, its operands read and its result written.
TEST(AnnotateTest, DeclaredPointwiseOpsAreElementwise) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
  {"name": "gy", "op": "placeholder", "target": "gy", "args": [], "meta": {"shape": [64, 256], "dtype": "float32"}},
  {"name": "y", "op": "placeholder", "target": "y", "args": [], "meta": {"shape": [64, 256], "dtype": "float32"}},
  {"name": "tb", "op": "call_function", "target": "aten.threshold_backward.default", "args": ["%gy", "%y", 0], "meta": {"shape": [64, 256], "dtype": "float32"}},
  {"name": "s", "op": "call_function", "target": "aten.sgn.default", "args": ["%tb"], "meta": {"shape": [64, 256], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%s"]]}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(BaseOpName("aten.threshold_backward.default"), "threshold_backward");
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, Simple());
  ASSERT_TRUE(r.ok()) << r.status();
  const double n = 64 * 256;
  EXPECT_DOUBLE_EQ(N(*g, "tb").meta().device_time, Roofline(n, 3 * n * 4));
  EXPECT_DOUBLE_EQ(N(*g, "s").meta().device_time, Roofline(n, 2 * n * 4));
  EXPECT_EQ(r->fallback, 0);
}

// The formulas that read particular arguments: attention's is_causal (by each schema's
// position or by keyword), addmm's mat1, F.embedding's indices (first, unlike aten's), a
// transposed convolution's backward, and the peak of a 16-bit tuple whose first element is
// undefined.
constexpr char kArgs[] = R"({"format": "overlap-graph", "version": 1, "nodes": [
  {"name": "q", "op": "placeholder", "target": "q", "args": [], "meta": {"shape": [2, 4, 64, 32], "dtype": "bfloat16"}},
  {"name": "k", "op": "placeholder", "target": "k", "args": [], "meta": {"shape": [2, 4, 128, 32], "dtype": "bfloat16"}},
  {"name": "flash", "op": "call_function", "target": "aten._scaled_dot_product_flash_attention.default",
   "args": ["%q", "%k", "%k", 0.0, true],
   "meta": {"shapes": [[2, 4, 64, 32], [2, 4, 64]], "dtypes": ["bfloat16", "float32"]}},
  {"name": "eff", "op": "call_function", "target": "aten._scaled_dot_product_efficient_attention.default",
   "args": ["%q", "%k", "%k", null, true, 0.0, false],
   "meta": {"shapes": [[2, 4, 64, 32], [2, 4, 64]], "dtypes": ["bfloat16", "float32"]}},
  {"name": "sdpa", "op": "call_function", "target": "torch.nn.functional.scaled_dot_product_attention",
   "args": ["%q", "%k", "%k"], "kwargs": {"is_causal": true},
   "meta": {"shape": [2, 4, 64, 32], "dtype": "bfloat16"}},
  {"name": "b", "op": "placeholder", "target": "b", "args": [], "meta": {"shape": [16], "dtype": "float32"}},
  {"name": "m1", "op": "placeholder", "target": "m1", "args": [], "meta": {"shape": [8, 1000], "dtype": "float32"}},
  {"name": "m2", "op": "placeholder", "target": "m2", "args": [], "meta": {"shape": [1000, 16], "dtype": "float32"}},
  {"name": "addmm", "op": "call_function", "target": "torch.ops.aten.addmm.default", "args": ["%b", "%m1", "%m2"],
   "meta": {"shape": [8, 16], "dtype": "float32"}},
  {"name": "ids", "op": "placeholder", "target": "ids", "args": [], "meta": {"shape": [2, 3], "dtype": "int64"}},
  {"name": "table", "op": "placeholder", "target": "table", "args": [], "meta": {"shape": [50000, 8], "dtype": "float32"}},
  {"name": "emb", "op": "call_function", "target": "torch.nn.functional.embedding", "args": ["%ids", "%table"],
   "meta": {"shape": [2, 3, 8], "dtype": "float32"}},
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [1, 8, 4, 4], "dtype": "bfloat16"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [8, 2, 3, 3], "dtype": "bfloat16"}},
  {"name": "gy", "op": "placeholder", "target": "gy", "args": [], "meta": {"shape": [1, 2, 8, 8], "dtype": "bfloat16"}},
  {"name": "convtb", "op": "call_function", "target": "aten.convolution_backward.default",
   "args": ["%gy", "%x", "%w", [2], [2, 2], [1, 1], [1, 1], true, [1, 1], 1, [false, true, false]],
   "meta": {"shapes": [null, [8, 2, 3, 3], null], "dtypes": [null, "bfloat16", null]}},
  {"name": "output", "op": "output", "target": "output", "args": [["%flash", "%eff", "%sdpa", "%addmm", "%emb", "%convtb"]]}
]})";

TEST(AnnotateTest, FormulasReadTheRightArguments) {
  absl::StatusOr<Graph> g = ReadGraphJson(kArgs);
  ASSERT_TRUE(g.ok()) << g.status();
  AnnotateOptions o = Simple();
  o.device.peak_flops_16bit = 2e12;  // tells the 16-bit peak from the 32-bit one
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->fallback, 0) << FormatAnnotateReport(*r);
  auto roofline16 = [](double flops, double bytes) { return std::max(flops / 2e12, bytes / 1e9); };
  // Attention: 4 x q elements x Sk, causal halves it. q and k: 16 Ki and 32 Ki bf16 elements.
  const double qn = 2 * 4 * 64 * 32, kn = 2 * 4 * 128 * 32;
  const double attn_bytes = (qn + kn) * 2 + qn * 2 + 2 * 4 * 64 * 4;  // k and v are one node
  EXPECT_DOUBLE_EQ(N(*g, "flash").meta().device_time, roofline16(4 * qn * 128 / 2, attn_bytes));
  // The 2.2 efficient schema: compute_log_sumexp (true) at 4 is not is_causal (false at 6).
  EXPECT_DOUBLE_EQ(N(*g, "eff").meta().device_time, roofline16(4 * qn * 128, attn_bytes));
  EXPECT_DOUBLE_EQ(N(*g, "sdpa").meta().device_time,
                   roofline16(4 * qn * 128 / 2, (qn + kn) * 2 + qn * 2));
  // addmm: K from mat1 (1000), not from the bias.
  EXPECT_DOUBLE_EQ(N(*g, "addmm").meta().device_time,
                   Roofline(2.0 * 8 * 16 * 1000, (16 + 8000 + 16000 + 128) * 4.0));
  // F.embedding(input, weight): the indices and the rows, not the 1.6 MB table.
  EXPECT_DOUBLE_EQ(N(*g, "emb").meta().device_time, Roofline(0, 6 * 8.0 + 2 * 48 * 4.0));
  // A transposed convolution's weight gradient: the input's elements x (2 x 3 x 3) each,
  // at the bf16 peak (the result's first element is undefined; its second is bf16).
  EXPECT_DOUBLE_EQ(N(*g, "convtb").meta().device_time,
                   roofline16(2.0 * 128 * 18, (128 + 144 + 128 + 144) * 2.0));
}

TEST(AnnotateTest, OverwriteReplacesGivenFigures) {
  absl::StatusOr<Graph> g = ReadGraphJson(kGraph);
  ASSERT_TRUE(g.ok()) << g.status();
  AnnotateOptions o = Simple();
  o.overwrite = true;
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kept, 0);
  EXPECT_DOUBLE_EQ(N(*g, "timed").meta().device_time, Roofline(16384, 2 * 16384 * 2.0));
  EXPECT_EQ(N(*g, "timed").meta().tensor_size, 16384 * 2);
}

// An ATen view whose meta leaves aliases_input out is marked one (the executor returns a
// view, so the simulator must count no buffer); a stated value and ops that may copy are
// left alone.
TEST(AnnotateTest, ViewsWithoutAliasesInputAreMarked) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [3, 1], "dtype": "float32"}},
  {"name": "e", "op": "call_function", "target": "aten.expand.default", "args": ["%x", [5, 3, 4]],
   "meta": {"shape": [5, 3, 4], "dtype": "float32"}},
  {"name": "t", "op": "call_function", "target": "aten.t.default", "args": ["%x"],
   "meta": {"shape": [1, 3], "dtype": "float32", "aliases_input": false}},
  {"name": "r", "op": "call_function", "target": "aten.reshape.default", "args": ["%x", [3]],
   "meta": {"shape": [3], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%e", "%t", "%r"]]}
]})");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, Simple());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->views_marked, 1);
  EXPECT_TRUE(IsView(N(*g, "e")));
  EXPECT_FALSE(IsView(N(*g, "t")));
  EXPECT_FALSE(N(*g, "r").meta().has_aliases_input);
  EXPECT_THAT(FormatAnnotateReport(*r), HasSubstr("aliases_input: 1 view nodes marked"));
  EXPECT_TRUE(Verify(*g).ok());
}

TEST(AnnotateTest, ModulesByTheirClass) {
  constexpr char kModules[] = R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [8, 32], "dtype": "float32"}},
    {"name": "fc", "op": "call_module", "target": "fc", "args": ["%x"],
     "meta": {"shape": [8, 16], "dtype": "float32", "module": "torch.nn.modules.linear.Linear"}},
    {"name": "mha", "op": "call_module", "target": "mha", "args": ["%fc"],
     "meta": {"shape": [8, 16], "dtype": "float32"}},
    {"name": "output", "op": "output", "target": "output", "args": ["%mha"]}],
   "params": [
    {"name": "fc.weight", "owner": "fc", "shape": [16, 32], "dtype": "float32", "bytes": 2048},
    {"name": "fc.bias", "owner": "fc", "shape": [16], "dtype": "float32", "bytes": 64}]})";
  absl::StatusOr<Graph> g = ReadGraphJson(kModules);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, Simple());
  ASSERT_TRUE(r.ok()) << r.status();
  // Linear: 2 x 8 x 16 x 32 FLOPs; reads x and its own parameters, writes the result.
  EXPECT_DOUBLE_EQ(N(*g, "fc").meta().device_time,
                   Roofline(2.0 * 8 * 16 * 32, 8 * 32 * 4.0 + 2048 + 64 + 8 * 16 * 4.0));
  // No meta.module: the fallback, counted under "call_module".
  EXPECT_DOUBLE_EQ(N(*g, "mha").meta().device_time, Roofline(0, 2 * 8 * 16 * 4.0));
  EXPECT_EQ(r->fallback_ops.at("call_module"), 1);
}

TEST(AnnotateTest, RefusesANonPositiveDevice) {
  absl::StatusOr<Graph> g = ReadGraphJson(kGraph);
  ASSERT_TRUE(g.ok());
  AnnotateOptions o;
  o.device.memory_bandwidth = 0;
  EXPECT_FALSE(AnnotateCosts(*g, o).ok());
}

// Shapes a file may state but no tensor can have: an error naming the node, the graph as it
// was (the verifier would refuse what a silent wrap-around wrote). Without tensor_size the
// reader refuses such a file itself (graph/value_bytes_test); with one, annotate's overwrite
// meets the shape.
TEST(AnnotateTest, ShapesBeyondSixtyFourBitsAreErrorsNamingTheNode) {
  constexpr char kHuge[] = R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [],
     "meta": {"shape": [4], "dtype": "float32"}},
    {"name": "big", "op": "call_function", "target": "aten.relu.default", "args": ["%x"],
     "meta": {"shape": [4294967296, 4294967296], "dtype": "float32", "tensor_size": 16}},
    {"name": "output", "op": "output", "target": "output", "args": ["%big"]}]})";
  absl::StatusOr<Graph> g = ReadGraphJson(kHuge);
  ASSERT_TRUE(g.ok()) << g.status();
  const Graph before = *g;
  AnnotateOptions overwrite;
  overwrite.overwrite = true;
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, overwrite);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("node \"big\""));
  EXPECT_TRUE(*g == before);

  // Each fits, their sum does not.
  constexpr char kSum[] = R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "a", "op": "placeholder", "target": "a", "args": [],
     "meta": {"shape": [1729382256910270464], "dtype": "float32", "tensor_size": 4}},
    {"name": "b", "op": "placeholder", "target": "b", "args": [],
     "meta": {"shape": [1729382256910270464], "dtype": "float32", "tensor_size": 4}},
    {"name": "output", "op": "output", "target": "output", "args": [["%a", "%b"]]}]})";
  g = ReadGraphJson(kSum);
  ASSERT_TRUE(g.ok()) << g.status();
  r = AnnotateCosts(*g, overwrite);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("node \"b\": the sum of tensor_size"));
}

// Every op of the built-in models' AOT graphs has a formula, and the annotator's times stay
// within a factor of a few of the models' own estimates (a second, independent use of the
// roofline: models.cc counts FLOPs per layer as it builds them).
TEST(AnnotateTest, BuiltInModelsHaveFormulasAndAgreeWithTheBuilders) {
  for (const char* name : {"gpt2", "resnet18", "llama-7b"}) {
    SCOPED_TRACE(name);
    ModelOptions mo;
    mo.style = ParamStyle::kLifted;
    absl::StatusOr<Graph> fwd = BuildModel(name, mo);
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    absl::StatusOr<AotPair> pair = BuildAotPair(*fwd);
    ASSERT_TRUE(pair.ok()) << pair.status();
    for (Graph* g : {&pair->forward, &pair->backward}) {
      double builder_total = 0;
      for (NodeId id : g->order()) builder_total += g->node(id).meta().device_time;
      AnnotateOptions o;
      o.overwrite = true;
      absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, o);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->fallback, 0) << FormatAnnotateReport(*r);
      EXPECT_TRUE(Verify(*g).ok());
      EXPECT_GT(r->total_device_time, builder_total / 3) << FormatAnnotateReport(*r);
      EXPECT_LT(r->total_device_time, builder_total * 3) << FormatAnnotateReport(*r);
    }
  }
}

}  // namespace
}  // namespace overlap
