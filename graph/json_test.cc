// Reader and writer of the interchange format: exact round trips, and one test per class of
// bad input, each checking that the message names the fault.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

// A small valid file; tests break one thing in it at a time.
constexpr char kGood[] = R"({
  "format": "overlap-graph", "version": 1, "name": "tiny",
  "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "fc", "op": "call_module", "target": "fc", "args": ["%x"],
     "meta": {"shape": [2, 4], "dtype": "float32", "tensor_size": 32, "device_time": 1e-06}},
    {"name": "relu", "op": "call_function", "target": "aten.relu.default", "args": ["%fc"],
     "kwargs": {"inplace": false}},
    {"name": "output", "op": "output", "target": "output", "args": [["%relu"]]}
  ],
  "params": [
    {"name": "fc.weight", "owner": "fc", "shape": [4, 4], "dtype": "float32", "bytes": 64},
    {"name": "fc.bias", "owner": "fc", "bytes": 16, "requires_grad": false}
  ]
})";

std::string Replace(absl::string_view from, absl::string_view to) {
  std::string s = kGood;
  size_t at = s.find(std::string(from));
  EXPECT_NE(at, std::string::npos) << "test bug: " << from;
  if (at != std::string::npos) s.replace(at, from.size(), std::string(to));
  return s;
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<Graph> g = ReadGraphJson(text);
  EXPECT_FALSE(g.ok()) << "accepted:\n" << text;
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

TEST(GraphJsonTest, ReadsTheSpecShapes) {
  absl::StatusOr<Graph> g = ReadGraphJson(kGood);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name(), "tiny");
  EXPECT_EQ(g->size(), 4);
  const Node& fc = g->node(g->FindNode("fc"));
  EXPECT_EQ(fc.op(), Op::kCallModule);
  EXPECT_EQ(fc.meta().tensor_size, 32);
  EXPECT_DOUBLE_EQ(fc.meta().device_time, 1e-6);
  EXPECT_FALSE(g->params()[1].requires_grad);
  EXPECT_TRUE(g->params()[0].requires_grad);             // default
  EXPECT_EQ(g->params()[0].storage_key(), "fc.weight");  // default storage = name
}

TEST(GraphJsonTest, RoundTripIsExactAndDeterministic) {
  absl::StatusOr<Graph> g = ReadGraphJson(kGood);
  ASSERT_TRUE(g.ok());
  const std::string once = WriteGraphJson(*g);
  absl::StatusOr<Graph> back = ReadGraphJson(once);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *g);
  EXPECT_EQ(WriteGraphJson(*back), once);
}

TEST(GraphJsonTest, UnknownKeysAtEveryLevelSurvive) {
  std::string s = absl::StrReplaceAll(
      kGood, {{"\"name\": \"tiny\"",
               "\"name\": \"tiny\", \"exporter\": {\"torch\": \"2.5\", \"n\": [1, 2.5e3, null, "
               "true, 123456789012345678901234567890]}"},
              {"\"device_time\": 1e-06}", "\"device_time\": 1e-06, \"stack_trace\": \"a\\nb\"}"},
              {"\"bytes\": 64}", "\"bytes\": 64, \"note\": \"\\u00e9\"}"}});
  s = Replace("\"args\": [\"%x\"]", "\"args\": [\"%x\"], \"custom\": [[]]");
  absl::StatusOr<Graph> g = ReadGraphJson(s);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->extra().size(), 0u);  // Replace() started from kGood: check the node key
  EXPECT_EQ(g->node(g->FindNode("fc")).extra().at(0).first, "custom");
  std::string all = absl::StrReplaceAll(kGood, {{"\"name\": \"tiny\"",
                                                 "\"name\": \"tiny\", \"exporter\": {\"n\": [1, "
                                                 "2.5e3, null, 123456789012345678901234567890]}"}});
  absl::StatusOr<Graph> h = ReadGraphJson(all);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->extra().size(), 1u);
  const std::string out = WriteGraphJson(*h);
  EXPECT_THAT(out, HasSubstr("123456789012345678901234567890"));  // big integers kept exact
  absl::StatusOr<Graph> back = ReadGraphJson(out);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == *h);
}

TEST(GraphJsonTest, StringsStartingWithPercentAreEscaped) {
  Graph g;
  NodeId x = *g.AddNode(Op::kPlaceholder, "x", "x");
  NodeId f = *g.AddNode(Op::kCallFunction, "f", "f",
                        {Value::Ref(x), Value::String("%x"), Value::String("%%"),
                         Value::Slice(Value::Int(0), Value(), Value::Ref(x)),
                         Value::Dict({{"$slice", Value::Int(1)}, {"k", Value::Double(2)}})});
  *g.AddNode(Op::kOutput, "output", "output", {Value::Ref(f)});
  const std::string s = WriteGraphJson(g);
  EXPECT_THAT(s, HasSubstr("\"%%x\""));
  EXPECT_THAT(s, HasSubstr("{\"$slice\": [0, null, \"%x\"]}"));
  absl::StatusOr<Graph> back = ReadGraphJson(s);
  // A dict whose first key is "$slice" is not a slice: the reader rejects the ambiguity.
  EXPECT_FALSE(back.ok());
  ASSERT_TRUE(g.SetArgs(f,
                        {Value::Ref(x), Value::String("%x"), Value::String("%%"),
                         Value::Slice(Value::Int(0), Value(), Value::Ref(x)), Value::Double(2)},
                        {})
                  .ok());
  back = ReadGraphJson(WriteGraphJson(g));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == g);
  EXPECT_EQ(back->node(back->FindNode("f")).args()[1].as_string(), "%x");
  EXPECT_EQ(back->node(back->FindNode("f")).args()[2].as_string(), "%%");
}

TEST(GraphJsonTest, EveryBuiltInModelRoundTrips) {
  for (const std::string& name : ModelNames()) {
    for (ParamStyle style : {ParamStyle::kModule, ParamStyle::kLifted}) {
      ModelOptions o;
      o.style = style;
      absl::StatusOr<Graph> g = BuildModel(name, o);
      ASSERT_TRUE(g.ok()) << name << ": " << g.status();
      ASSERT_TRUE(Verify(*g).ok()) << name;
      const std::string s = WriteGraphJson(*g);
      absl::StatusOr<Graph> back = ReadGraphJson(s);
      ASSERT_TRUE(back.ok()) << name << ": " << back.status();
      EXPECT_TRUE(*back == *g) << name;
      EXPECT_EQ(WriteGraphJson(*back), s) << name;
    }
  }
}

TEST(GraphJsonTest, FilesRoundTrip) {
  RandomGraphOptions o;
  o.nodes = 3000;
  Graph g = RandomGraph(o);
  const std::string path = absl::StrCat(testing::TempDir(), "/g.json");
  ASSERT_TRUE(WriteGraphJsonFile(g, path).ok());
  absl::StatusOr<Graph> back = ReadGraphJsonFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == g);
  EXPECT_THAT(ReadGraphJsonFile("/nonexistent/g.json").status().message(),
              HasSubstr("cannot open \"/nonexistent/g.json\""));
}

// ---- one test per class of bad input --------------------------------------------------------

TEST(GraphJsonErrorTest, MalformedJson) {
  EXPECT_THAT(ErrorOf(Replace("\"args\": [\"%x\"]", "\"args\": [\"%x\",]")), HasSubstr("line 5"));
  EXPECT_THAT(ErrorOf("{\"format\": \"overlap-graph\", "), HasSubstr("the end of the input"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("expected a JSON object"));
  EXPECT_THAT(ErrorOf(Replace("\"tiny\"", "\"ti\nny\"")), HasSubstr("control character"));
  EXPECT_THAT(ErrorOf(std::string(kGood) + "x"), HasSubstr("after the end"));
  EXPECT_THAT(ErrorOf(Replace("1e-06", "1e")), HasSubstr("exponent"));
  EXPECT_THAT(ErrorOf(Replace("false", "fals")), HasSubstr("literal"));
  EXPECT_THAT(ErrorOf(Replace("\"tiny\"", "\"\\ud800\"")), HasSubstr("surrogate"));
}

TEST(GraphJsonErrorTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ErrorOf(Replace("[\"%fc\"]", deep)), HasSubstr("nested too deeply"));
  EXPECT_THAT(ErrorOf(Replace("\"name\": \"tiny\"", "\"x\": " + deep)),
              HasSubstr("nested too deeply"));
}

TEST(GraphJsonErrorTest, WrongTypes) {
  EXPECT_THAT(ErrorOf(Replace("\"tensor_size\": 32", "\"tensor_size\": \"32\"")),
              HasSubstr("node \"fc\": field \"meta.tensor_size\" must be a non-negative integer"));
  EXPECT_THAT(ErrorOf(Replace("\"args\": [\"%x\"]", "\"args\": \"%x\"")),
              HasSubstr("node \"fc\": field \"args\" must be an array"));
  EXPECT_THAT(ErrorOf(Replace("\"requires_grad\": false", "\"requires_grad\": 0")),
              HasSubstr("parameter \"fc.bias\": field \"requires_grad\" must be a boolean"));
  EXPECT_THAT(ErrorOf(Replace("\"shape\": [2, 4]", "\"shape\": [2.5]")), HasSubstr("integers"));
  EXPECT_THAT(ErrorOf(Replace("\"nodes\": [", "\"nodes\": {\"a\": [")),
              HasSubstr("field \"nodes\" must be an array"));
  EXPECT_THAT(ErrorOf(Replace("\"tensor_size\": 32", "\"tensor_size\": 32.0")),
              HasSubstr("must be an integer"));
}

TEST(GraphJsonErrorTest, UnknownOp) {
  EXPECT_THAT(ErrorOf(Replace("\"op\": \"call_module\"", "\"op\": \"call_modul\"")),
              HasSubstr("node \"fc\": unknown op \"call_modul\""));
}

TEST(GraphJsonErrorTest, DuplicateOrMalformedNames) {
  EXPECT_THAT(ErrorOf(Replace("{\"name\": \"relu\"", "{\"name\": \"fc\"")),
              HasSubstr("duplicate node name \"fc\""));
  EXPECT_THAT(ErrorOf(Replace("{\"name\": \"relu\"", "{\"name\": \"re-lu\"")),
              HasSubstr("node name \"re-lu\" is malformed"));
  EXPECT_THAT(ErrorOf(Replace("{\"name\": \"relu\"", "{\"name\": \"\"")), HasSubstr("malformed"));
  EXPECT_THAT(ErrorOf(Replace("\"op\": \"placeholder\",",
                              "\"op\": \"placeholder\", \"op\": \"placeholder\",")),
              HasSubstr("duplicate key \"op\""));
}

TEST(GraphJsonErrorTest, ReferencesToLaterMissingOrSelfAreCycles) {
  EXPECT_THAT(ErrorOf(Replace("\"args\": [\"%x\"]", "\"args\": [\"%relu\"]")),
              HasSubstr("node \"fc\": argument \"%relu\" is not a node defined earlier"));
  EXPECT_THAT(ErrorOf(Replace("\"args\": [\"%x\"]", "\"args\": [\"%ghost\"]")),
              HasSubstr("\"%ghost\" is not a node defined earlier"));
  EXPECT_THAT(ErrorOf(Replace("\"args\": [\"%x\"]", "\"args\": [\"%fc\"]")),
              HasSubstr("\"%fc\" is not a node defined earlier"));
  EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}", "{\"inplace\": \"%output\"}")),
              HasSubstr("node \"relu\""));
}

TEST(GraphJsonErrorTest, MissingOrExtraOutputNode) {
  std::string no_output = Replace(
      ",\n    {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": "
      "[[\"%relu\"]]}",
      "");
  EXPECT_THAT(ErrorOf(no_output), HasSubstr("no output node"));
  std::string two = Replace("[[\"%relu\"]]}",
                            "[[\"%relu\"]]},\n {\"name\": \"output2\", \"op\": \"output\", "
                            "\"target\": \"output\", \"args\": []}");
  EXPECT_THAT(ErrorOf(two), HasSubstr("a second output node follows the output node \"output\""));
  std::string after = Replace("[[\"%relu\"]]}",
                              "[[\"%relu\"]]},\n {\"name\": \"late\", \"op\": \"placeholder\", "
                              "\"target\": \"late\", \"args\": []}");
  EXPECT_THAT(ErrorOf(after), HasSubstr("node \"late\": a node follows the output node"));
}

TEST(GraphJsonErrorTest, MissingRequiredFields) {
  EXPECT_THAT(ErrorOf(Replace("\"target\": \"fc\", ", "")),
              HasSubstr("node \"fc\": missing required field \"target\""));
  EXPECT_THAT(ErrorOf(Replace("\"format\": \"overlap-graph\", ", "")),
              HasSubstr("missing required top-level field \"format\""));
  EXPECT_THAT(ErrorOf(Replace("\"owner\": \"fc\", \"shape\"", "\"shape\"")),
              HasSubstr("parameter \"fc.weight\": missing required field \"owner\""));
  EXPECT_THAT(ErrorOf(Replace("\"version\": 1", "\"version\": 2")), HasSubstr("version"));
  EXPECT_THAT(ErrorOf(Replace("\"overlap-graph\"", "\"onnx\"")), HasSubstr("\"format\""));
}

TEST(GraphJsonErrorTest, NegativeSizes) {
  EXPECT_THAT(ErrorOf(Replace("\"tensor_size\": 32", "\"tensor_size\": -32")),
              HasSubstr("node \"fc\": field \"meta.tensor_size\" must be >= 0, got -32"));
  EXPECT_THAT(ErrorOf(Replace("\"bytes\": 64", "\"bytes\": -64")),
              HasSubstr("parameter \"fc.weight\": field \"bytes\" must be >= 0"));
  EXPECT_THAT(ErrorOf(Replace("\"device_time\": 1e-06", "\"device_time\": -1e-06")),
              HasSubstr("node \"fc\": field \"meta.device_time\" must be >= 0"));
}

TEST(GraphJsonErrorTest, OverflowingSizes) {
  EXPECT_THAT(ErrorOf(Replace("\"tensor_size\": 32", "\"tensor_size\": 9223372036854775808")),
              HasSubstr("node \"fc\": field \"meta.tensor_size\" overflows"));
  EXPECT_THAT(ErrorOf(Replace("\"device_time\": 1e-06", "\"device_time\": 1e999")),
              HasSubstr("out of the range"));
  // Each size fits, their sum does not: still an error, never a silent wrap.
  EXPECT_THAT(
      ErrorOf(Replace("\"bytes\": 16", "\"bytes\": 9223372036854775800")),
      HasSubstr("parameter \"fc.bias\" (owner \"fc\"): the sum of parameter bytes overflows"));
  std::string two =
      Replace("\"kwargs\": {\"inplace\": false}",
              "\"kwargs\": {\"inplace\": false}, \"meta\": {\"tensor_size\": 9223372036854775800}");
  EXPECT_THAT(ErrorOf(two), HasSubstr("node \"relu\": the sum of meta.tensor_size"));
}

TEST(GraphJsonErrorTest, UnknownParameterOwner) {
  EXPECT_THAT(
      ErrorOf(Replace("\"owner\": \"fc\", \"bytes\": 16", "\"owner\": \"fc2\", \"bytes\": 16")),
      HasSubstr("parameter \"fc.bias\" (owner \"fc2\"): owner is not"));
}

TEST(GraphJsonErrorTest, TiedParametersWithDifferentSizes) {
  EXPECT_THAT(ErrorOf(Replace("\"bytes\": 16, \"requires_grad\": false",
                              "\"bytes\": 16, \"storage\": \"fc.weight\"")),
              HasSubstr("parameter \"fc.bias\" (owner \"fc\"): shares storage \"fc.weight\" with "
                        "\"fc.weight\" but has 16 bytes, not 64"));
  EXPECT_TRUE(ReadGraphJson(Replace("\"bytes\": 16, \"requires_grad\": false",
                                    "\"bytes\": 64, \"storage\": \"fc.weight\""))
                  .ok());
  // One tensor has one requires_grad.
  EXPECT_THAT(ErrorOf(Replace("\"bytes\": 16", "\"bytes\": 64, \"storage\": \"fc.weight\"")),
              HasSubstr("disagrees on requires_grad"));
  EXPECT_THAT(ErrorOf(Replace("\"bytes\": 16, \"requires_grad\": false",
                              "\"bytes\": 64, \"storage\": \"fc.weight\", \"ddp_ignored\": true")),
              HasSubstr("disagrees on ddp_ignored"));
}

TEST(GraphJsonErrorTest, DuplicateParameterEntry) {
  EXPECT_THAT(ErrorOf(Replace("{\"name\": \"fc.bias\"", "{\"name\": \"fc.weight\"")),
              HasSubstr("parameter \"fc.weight\" with owner \"fc\" is listed twice"));
}

TEST(GraphJsonErrorTest, MetaParamMustNameAParameter) {
  EXPECT_THAT(ErrorOf(Replace("\"args\": []}", "\"args\": [], \"meta\": {\"param\": \"nope\"}}")),
              HasSubstr("node \"x\": meta.param names unknown parameter \"nope\""));
}

TEST(GraphJsonErrorTest, MalformedSlice) {
  EXPECT_THAT(ErrorOf(Replace("[\"%fc\"]", "[\"%fc\", {\"$slice\": [1, 2]}]")),
              HasSubstr("malformed slice"));
}

}  // namespace
}  // namespace overlap
