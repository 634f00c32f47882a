// Reader and writer of the interchange format: exact round trips, and one test per class of
// bad input, each checking that the message names the fault.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "graph/errors.h"
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

// Non-finite floats in arguments (a causal mask's -inf) have a spelling of their own and
// read back as the same values; a malformed one is an error.
TEST(GraphJsonTest, NonFiniteArgumentsRoundTrip) {
  Graph g;
  NodeId x = *g.AddNode(Op::kPlaceholder, "x", "x");
  NodeId f = *g.AddNode(Op::kCallFunction, "f", "f",
                        {Value::Ref(x), Value::Double(-std::numeric_limits<double>::infinity()),
                         Value::List({Value::Double(std::numeric_limits<double>::infinity()),
                                      Value::Double(std::numeric_limits<double>::quiet_NaN())})});
  *g.AddNode(Op::kOutput, "output", "output", {Value::Ref(f)});
  const std::string s = WriteGraphJson(g);
  EXPECT_THAT(s,
              HasSubstr("{\"$float\": \"-inf\"}, [{\"$float\": \"inf\"}, {\"$float\": \"nan\"}]"));
  absl::StatusOr<Graph> back = ReadGraphJson(s);
  ASSERT_TRUE(back.ok()) << back.status();
  const std::vector<Value>& args = back->node(back->FindNode("f")).args();
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args[1].as_double(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(args[2].items()[0].as_double(), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(args[2].items()[1].as_double()));
  EXPECT_EQ(WriteGraphJson(*back), s);
  for (const char* bad :
       {"{\"$float\": \"infinity\"}", "{\"$float\": 1.0}", "{\"$float\": \"nan\", \"k\": 1}"}) {
    std::string t = s;
    const size_t at = t.find("{\"$float\": \"-inf\"}");
    t.replace(at, std::string("{\"$float\": \"-inf\"}").size(), bad);
    absl::StatusOr<Graph> r = ReadGraphJson(t);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("malformed float")) << bad;
  }
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

TEST(GraphJsonErrorTest, DuplicateKeysAtAnyDepth) {
  // Known keys of a node, meta and the top level.
  EXPECT_THAT(ErrorOf(Replace("\"dtype\": \"float32\", \"tensor_size\"",
                              "\"dtype\": \"float32\", \"dtype\": \"f\", \"tensor_size\"")),
              HasSubstr("node \"fc\": duplicate key \"meta.dtype\""));
  EXPECT_THAT(ErrorOf(Replace("\"name\": \"tiny\"", "\"name\": \"tiny\", \"name\": \"t\"")),
              HasSubstr("duplicate top-level key \"name\""));
  // Unknown keys, and keys inside the values kept verbatim for them, at any depth.
  EXPECT_THAT(ErrorOf(Replace("\"args\": [\"%x\"]", "\"args\": [\"%x\"], \"c\": 1, \"c\": 2")),
              HasSubstr("node \"fc\": duplicate key \"c\""));
  EXPECT_THAT(ErrorOf(Replace("\"device_time\": 1e-06}",
                              "\"device_time\": 1e-06, \"x\": {\"a\": 1, \"a\": 2}}")),
              HasSubstr("node \"fc\": duplicate key \"a\" in the value of \"x\""));
  EXPECT_THAT(ErrorOf(Replace("\"name\": \"tiny\"",
                              "\"name\": \"tiny\", \"exporter\": {\"n\": [1, [{\"k\": {}, "
                              "\"j\": 0, \"k\": []}]]}")),
              HasSubstr("duplicate key \"k\" in the value of \"n\""));
  EXPECT_THAT(ErrorOf(Replace("\"bytes\": 64}", "\"bytes\": 64, \"note\": {\"q\": 1, \"q\": 1}}")),
              HasSubstr("parameter \"fc.weight\": duplicate key \"q\" in the value of \"note\""));
  // Arguments: kwargs and dicts nested in args or kwargs.
  EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}", "{\"inplace\": false, \"inplace\": true}")),
              HasSubstr("node \"relu\": duplicate key \"inplace\" in the value of \"kwargs\""));
  EXPECT_THAT(ErrorOf(Replace("[\"%fc\"]", "[\"%fc\", {\"a\": [{\"b\": 1, \"b\": 2}]}]")),
              HasSubstr("node \"relu\": duplicate key \"b\" in the value of \"a\""));
  EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}", "{\"inplace\": {\"d\": 1, \"d\": 2}}")),
              HasSubstr("duplicate key \"d\" in the value of \"inplace\""));
  // Keys are compared as unescaped text; keys that differ only after a NUL are different.
  EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}", "{\"a\": 1, \"\\u0061\": 2}")),
              HasSubstr("duplicate key \"a\" in the value of \"kwargs\""));
  EXPECT_TRUE(
      ReadGraphJson(Replace("{\"inplace\": false}", "{\"a\\u0000b\": false, \"a\\u0000c\": 1}"))
          .ok());
}

// A graph whose top level, an unknown key's value, a meta, a dict argument, kwargs and a
// parameter each have `keys` keys, and whose module "m" owns `params` more parameters.
std::string ManyKeys(int keys, int params) {
  auto object = [keys](absl::string_view prefix) {
    std::string s;
    for (int i = 0; i < keys; ++i) absl::StrAppend(&s, i ? ", " : "", "\"", prefix, i, "\": ", i);
    return s;
  };
  std::string s = absl::StrCat(
      R"({"format": "overlap-graph", "version": 1, )", object("top"), R"(, "raw": {)", object("r"),
      R"(}, "nodes": [{"name": "m", "op": "placeholder", "target": "m", "args": [], "meta": {)",
      object("meta"), R"(}},
       {"name": "c", "op": "call_module", "target": "m", "args": ["%m", {)",
      object("d"), R"(}], "kwargs": {)", object("kw"), R"(}},
       {"name": "output", "op": "output", "target": "output", "args": [["%c"]]}],
       "params": [{"name": "big", "owner": "m", "bytes": 1, )",
      object("p"), "}");
  for (int i = 0; i < params; ++i) {
    absl::StrAppend(&s, R"(, {"name": "m.p)", i, R"(", "owner": "m", "bytes": 4})");
  }
  return s + "]}";
}

// 300,000 keys in each object that may have any keys, and 200,000 parameters of one owner.
// A duplicate check that scans what it has seen makes this take many minutes (the old reader
// took 19.6 s on one object of 100,000 keys and 34 s on 100,000 parameters: about 10 minutes
// here), so the test's timeout (medium, 300 s) catches a quadratic reader; the hash sets
// read it all in a second or two. (No assertion on time: the machine is shared.)
TEST(GraphJsonTest, ManyKeysAndManyParametersAreReadInLinearTime) {
  constexpr int kKeys = 300000;
  constexpr int kParams = 200000;
  absl::StatusOr<Graph> g = ReadGraphJson(ManyKeys(kKeys, kParams));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->extra().size(), kKeys + 1u);
  const Node& m = g->node(g->FindNode("m"));
  EXPECT_EQ(m.meta().extra.size(), static_cast<size_t>(kKeys));
  const Node& c = g->node(g->FindNode("c"));
  EXPECT_EQ(c.kwargs().size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(c.args()[1].dict().size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(g->params().size(), kParams + 1u);
  EXPECT_EQ(g->params()[0].extra.size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(g->ParamsOwnedBy("m").size(), kParams + 1u);
}

// Duplicates in objects past the handful of keys the reader compares directly (it hashes
// from 16 on), and a parameter listed twice for an owner with many.
TEST(GraphJsonErrorTest, DuplicatesInLargeObjects) {
  constexpr int kKeys = 1000;
  constexpr int kParams = 100;
  const std::string s = ManyKeys(kKeys, kParams);
  ASSERT_TRUE(ReadGraphJson(s).ok());
  auto repeat_last = [&](absl::string_view prefix, absl::string_view where) {
    const std::string last = absl::StrCat("\"", prefix, kKeys - 1, "\": ", kKeys - 1);
    std::string t = s;
    t.replace(t.find(last), last.size(), absl::StrCat(last, ", \"", prefix, "7\": 0"));
    EXPECT_THAT(ErrorOf(t), HasSubstr(absl::StrCat("duplicate ", where, prefix, "7\""))) << prefix;
  };
  repeat_last("top", "top-level key \"");
  repeat_last("r", "key \"");
  repeat_last("meta", "key \"meta.");
  repeat_last("d", "key \"");
  repeat_last("kw", "key \"");
  repeat_last("p", "key \"");
  std::string t = s;
  const std::string last = absl::StrCat("\"m.p", kParams - 1, "\"");
  t.replace(t.find(last), last.size(), "\"m.p17\"");
  EXPECT_THAT(ErrorOf(t), HasSubstr("parameter \"m.p17\" with owner \"m\" is listed twice"));
}

TEST(GraphJsonErrorTest, InvalidUtf8IsAnError) {
  const std::string bad[] = {
      "\x80",              // a continuation byte alone
      "\xC3",              // a sequence cut short (by the closing quote)
      "\xE2\x82",          // the same, 3 bytes
      "\xC3(",             // a lead byte followed by a non-continuation
      "\xC0\x80",          // overlong NUL
      "\xC1\xBF",          // overlong
      "\xE0\x80\xAF",      // overlong '/'
      "\xF0\x8F\xBF\xBF",  // overlong U+FFFF
      "\xED\xA0\x80",      // U+D800, a surrogate
      "\xED\xBF\xBF",      // U+DFFF
      "\xF4\x90\x80\x80",  // U+110000
      "\xF5\x80\x80\x80",  // beyond any code point
      "\xF8\x88\x80\x80\x80",
      "\xFE",
      "\xFF",
  };
  for (const std::string& b : bad) {
    SCOPED_TRACE(absl::CEscape(b));
    // Names, targets, string arguments, keys, known and unknown values.
    EXPECT_THAT(
        ErrorOf(Replace("\"target\": \"aten.relu.default\"", "\"target\": \"aten.relu" + b + "\"")),
        HasSubstr("node \"relu\": invalid UTF-8 in string, in the value of \"target\""));
    EXPECT_THAT(ErrorOf(Replace("\"name\": \"tiny\"", "\"name\": \"t" + b + "\"")),
                HasSubstr("invalid UTF-8 in string"));
    EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}", "{\"inplace\": \"" + b + "\"}")),
                HasSubstr("invalid UTF-8 in string, in the value of \"inplace\""));
    EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}", "{\"in" + b + "\": false}")),
                HasSubstr("invalid UTF-8 in string, in an object key"));
    EXPECT_THAT(ErrorOf(Replace("\"dtype\": \"float32\", \"tensor_size\"",
                                "\"dtype\": \"float32\", \"x\": [\"" + b + "\"], \"tensor_size\"")),
                HasSubstr("invalid UTF-8 in string, in the value of \"x\""));
    EXPECT_THAT(ErrorOf(Replace("\"name\": \"tiny\"", "\"name\": \"tiny\", \"" + b + "\": 1")),
                HasSubstr("invalid UTF-8 in string, in an object key"));
    EXPECT_THAT(ErrorOf(Replace("{\"name\": \"fc.bias\"", "{\"name\": \"fc." + b + "\"")),
                HasSubstr("invalid UTF-8 in string"));
  }
  // Well-formed UTF-8 of every length, and escapes, read and round trip.
  const std::string good =
      "\"\xC3\xA9 \xE2\x82\xAC \xEF\xBF\xBD \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF \\u00e9\"";
  absl::StatusOr<Graph> g =
      ReadGraphJson(Replace("{\"inplace\": false}", "{\"inplace\": " + good + "}"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->node(g->FindNode("relu")).kwargs()[0].second.as_string(),
            "\xC3\xA9 \xE2\x82\xAC \xEF\xBF\xBD \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF \xC3\xA9");
  absl::StatusOr<Graph> back = ReadGraphJson(WriteGraphJson(*g));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *g);
}

TEST(GraphJsonErrorTest, SurrogateEscapesMustPair) {
  for (const char* bad : {"\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud800x", "\\ud800\\n",
                          "\\ud800\\u0041", "\\ud800\\ud800", "\\udc00\\ud800"}) {
    EXPECT_THAT(ErrorOf(Replace("\"tiny\"", absl::StrCat("\"", bad, "\""))),
                HasSubstr("unpaired surrogate in \\u escape, in the value of \"name\""))
        << bad;
  }
  absl::StatusOr<Graph> g = ReadGraphJson(Replace("\"tiny\"", "\"\\ud83d\\ude00\\uDBFF\\uDFFF\""));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name(), "\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF");  // U+1F600 U+10FFFF
}

// The file reader takes its input in 1 MiB chunks: a multi-byte character may straddle two.
TEST(GraphJsonTest, Utf8SplitAcrossChunksInAFile) {
  const std::string path = absl::StrCat(testing::TempDir(), "/split.json");
  const std::string head = R"({"format": "overlap-graph", "version": 1, "pad": ")";
  const std::string tail =
      R"(", "nodes": [{"name": "x", "op": "placeholder", "target": "x", "args": []},
      {"name": "output", "op": "output", "target": "output", "args": [["%x"]]}]})";
  auto write = [&](const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
    ASSERT_EQ(std::fclose(f), 0);
  };
  const std::string emoji = "\xF0\x9F\x98\x80";
  for (int before_boundary = 1; before_boundary <= 3; ++before_boundary) {
    const std::string pad((1 << 20) - head.size() - before_boundary, 'a');
    write(head + pad + emoji + tail);
    absl::StatusOr<Graph> g = ReadGraphJsonFile(path);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->extra().at(0).second, "\"" + pad + emoji + "\"");
    // The same place, malformed: the sequence is cut by an ASCII byte in the next chunk.
    write(head + pad + emoji.substr(0, before_boundary) + "b" + tail);
    EXPECT_THAT(ReadGraphJsonFile(path).status().message(),
                HasSubstr("invalid UTF-8 in string, in the value of \"pad\""));
  }
}

TEST(GraphJsonErrorTest, NonPrintableInputIsEscapedInMessages) {
  // A NUL in a node name: the name is malformed, and the message shows it escaped, whole.
  std::string m = ErrorOf(Replace("{\"name\": \"relu\"", "{\"name\": \"a\\u0000b\""));
  EXPECT_THAT(m, HasSubstr("node name \"a\\x00b\" is malformed"));
  EXPECT_EQ(m.find('\0'), std::string::npos);
  m = ErrorOf(Replace("{\"name\": \"relu\"", "{\"name\": \"a\\u0000b\", \"name\": \"c\""));
  EXPECT_THAT(m, HasSubstr("node \"a\\x00b\": duplicate key \"name\""));
  m = ErrorOf(Replace("{\"name\": \"relu\", \"op\": \"call_function\"",
                      "{\"name\": \"a\\u0000b\", \"op\": \"call_functio\""));
  EXPECT_THAT(m, HasSubstr("node \"a\\x00b\": unknown op"));
  EXPECT_EQ(m.find('\0'), std::string::npos);
  // Keys, values, and what Verify quotes.
  EXPECT_THAT(ErrorOf(Replace("{\"inplace\": false}",
                              "{\"k\\u0000\\u001b\\u007f\": 1, "
                              "\"k\\u0000\\u001b\\u007f\": 2}")),
              HasSubstr("duplicate key \"k\\x00\\x1b\\x7f\" in the value of \"kwargs\""));
  EXPECT_THAT(ErrorOf(Replace("\"args\": []}",
                              "\"args\": [], \"meta\": {\"param\": \"n\\u0000\\u0085\"}}")),
              HasSubstr("meta.param names unknown parameter \"n\\x00\\xc2\\x85\""));
  EXPECT_THAT(ErrorOf(Replace("\"op\": \"call_module\"", "\"op\": \"\\u0000\"")),
              HasSubstr("node \"fc\": unknown op \"\\x00\""));
  // Raw bytes where JSON expects something else; well-formed non-ASCII stays as it is.
  EXPECT_THAT(ErrorOf("\xFF"), HasSubstr("got '\\xff'"));
  EXPECT_THAT(ErrorOf(std::string(1, '\0')), HasSubstr("got '\\x00'"));
  EXPECT_THAT(ErrorOf(Replace("\"op\": \"call_module\"", "\"op\": \"caf\xC3\xA9\"")),
              HasSubstr("unknown op \"caf\xC3\xA9\""));
  // Paths are quoted the same way.
  EXPECT_THAT(ReadGraphJsonFile("/nonexistent/a\nb").status().message(),
              HasSubstr("cannot open \"/nonexistent/a\\x0ab\""));
}

TEST(GraphJsonErrorTest, StringAndInputLimits) {
  ReadOptions o;
  o.max_string_bytes = 1000;
  const std::string ok_name(1000, 'n');
  EXPECT_TRUE(ReadGraphJson(Replace("\"tiny\"", "\"" + ok_name + "\""), o).ok());
  absl::StatusOr<Graph> g = ReadGraphJson(Replace("\"tiny\"", "\"" + ok_name + "n\""), o);
  EXPECT_TRUE(IsBadInput(g.status()));
  EXPECT_THAT(g.status().message(),
              HasSubstr("string longer than the limit of 1000 bytes (docs/format.md, \"Limits\"), "
                        "in the value of \"name\""));
  // Escapes count as what they stand for.
  std::string escaped;
  for (int i = 0; i < 1001; ++i) escaped += "\\n";
  EXPECT_THAT(ReadGraphJson(Replace("\"tiny\"", "\"" + escaped + "\""), o).status().message(),
              HasSubstr("string longer than the limit"));
  // An unknown key's value, kept as written, is bounded the same way.
  std::string items = "1";
  for (int i = 0; i < 600; ++i) items += ",1";
  EXPECT_THAT(
      ReadGraphJson(Replace("\"tiny\"", "\"tiny\", \"x\": [" + items + "]"), o).status().message(),
      HasSubstr("an unknown key's value is longer than the limit of 1000 bytes"));
  // ... as kept, escapes included: 200 control characters are 1,200 bytes written back.
  std::string controls;
  for (int i = 0; i < 200; ++i) controls += "\\u0001";
  EXPECT_THAT(ReadGraphJson(Replace("\"tiny\"", "\"tiny\", \"x\": \"" + controls + "\""), o)
                  .status()
                  .message(),
              HasSubstr("an unknown key's value is longer than the limit of 1000 bytes"));
  // A string longer than a file chunk (1 MiB), read from a file.
  const std::string path = absl::StrCat(testing::TempDir(), "/long_string.json");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string text = Replace("\"tiny\"", "\"" + std::string(3 << 20, 'n') + "\"");
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  ASSERT_EQ(std::fclose(f), 0);
  o.max_string_bytes = 2 << 20;
  EXPECT_THAT(ReadGraphJsonFile(path, o).status().message(),
              HasSubstr("string longer than the limit of 2097152 bytes"));
  o.max_string_bytes = 4 << 20;
  EXPECT_TRUE(ReadGraphJsonFile(path, o).ok());
  // The whole input.
  o.max_input_bytes = 100;
  EXPECT_THAT(ReadGraphJson(kGood, o).status().message(),
              HasSubstr("the input is larger than the limit of 100 bytes"));
  EXPECT_THAT(ReadGraphJsonFile(path, o).status().message(),
              HasSubstr("bytes: the input is larger than the limit of 100 bytes"));
  EXPECT_TRUE(IsBadInput(ReadGraphJsonFile(path, o).status()));
}

// A stream (a pipe here) has no size to check up front: the limit stops the reading.
TEST(GraphJsonErrorTest, InputLimitOnAStream) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // Whitespace forever (well, 8 MiB): the parser would wait for the graph until the end.
  std::thread writer([fd = fds[1]] {
    const std::string spaces(1 << 16, ' ');
    for (int i = 0; i < 128; ++i) {
      if (write(fd, spaces.data(), spaces.size()) < 0) break;
    }
    close(fd);
  });
  ReadOptions o;
  o.max_input_bytes = 3 << 20;
  absl::StatusOr<Graph> g = ReadGraphJsonFile(absl::StrCat("/proc/self/fd/", fds[0]), o);
  char buf[1 << 16];
  while (read(fds[0], buf, sizeof buf) > 0) {
  }  // let the writer finish
  writer.join();
  close(fds[0]);
  EXPECT_TRUE(IsBadInput(g.status())) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("the input is larger than the limit of 3145728"));
}

TEST(GraphJsonErrorTest, DirectoriesAndHugeSparseFiles) {
  // A directory opens, and ext4 reports its size as 2^63-1: refused by its type.
  absl::StatusOr<Graph> g = ReadGraphJsonFile(testing::TempDir());
  EXPECT_TRUE(IsBadInput(g.status())) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("\" is a directory"));
  const std::string sparse = absl::StrCat(testing::TempDir(), "/sparse.json");
  int fd = open(sparse.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  // 1 TB of NUL bytes that take no disk: over the input limit, refused before any reading.
  ASSERT_EQ(ftruncate(fd, int64_t{1} << 40), 0);
  g = ReadGraphJsonFile(sparse);
  EXPECT_TRUE(IsBadInput(g.status())) << g.status();
  EXPECT_THAT(g.status().message(),
              HasSubstr("1099511627776 bytes: the input is larger than the limit of"));
  // 3 GiB, under the limit: the parser stops at the first byte, having reserved nothing for
  // the size the file claims (the message shows the NUL escaped).
  ASSERT_EQ(ftruncate(fd, int64_t{3} << 30), 0);
  close(fd);
  g = ReadGraphJsonFile(sparse);
  EXPECT_TRUE(IsBadInput(g.status())) << g.status();
  EXPECT_THAT(g.status().message(),
              HasSubstr("line 1, column 1: expected a JSON object (the graph), got '\\x00'"));
  unlink(sparse.c_str());
}

}  // namespace
}  // namespace overlap
