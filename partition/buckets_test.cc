// One test per rule of docs/ddp-optimizer.md (rules B1-B10), on small hand-written graphs in
// the interchange format, plus the reference's own test shapes.
#include "partition/buckets.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

// DDPOptimizer's test model is the bare MLP: its compiled graph ends at the last layer.
ModelOptions ReferenceTestModel() {
  ModelOptions o;
  o.loss = LossKind::kNone;
  return o;
}

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Graph Parse(const std::string& nodes, const std::string& params) {
  return ParseGraphParts(nodes, params);
}

std::string Node(const std::string& name, const std::string& op, const std::string& target,
                 const std::string& args) {
  return absl::StrCat(R"({"name": ")", name, R"(", "op": ")", op, R"(", "target": ")", target,
                      R"(", "args": [)", args, "]}");
}

std::string ParamJson(const std::string& name, const std::string& owner, int64_t bytes,
                      const std::string& extra = "") {
  return absl::StrCat(R"({"name": ")", name, R"(", "owner": ")", owner, R"(", "bytes": )", bytes,
                      extra.empty() ? "" : ", ", extra, "}");
}

std::vector<Bucket> Assign(const Graph& g, PartitionMode mode, int64_t cap, int64_t first) {
  BucketOptions o;
  o.mode = mode;
  o.bucket_cap_bytes = cap;
  o.first_bucket_cap_bytes = first;
  absl::StatusOr<std::vector<Bucket>> b = AssignBuckets(g, o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : std::vector<Bucket>();
}

std::vector<std::string> NodeNames(const Graph& g, const Bucket& b) {
  std::vector<std::string> out;
  for (NodeId id : b.nodes) out.push_back(g.node(id).name());
  return out;
}

// A chain x -> m0 -> m1 -> ... -> output of call_modules with the given parameter bytes.
Graph Chain(const std::vector<int64_t>& bytes) {
  std::string nodes = Node("x", "placeholder", "x", "");
  std::string params;
  std::string prev = "x";
  for (size_t i = 0; i < bytes.size(); ++i) {
    const std::string m = absl::StrCat("m", i);
    absl::StrAppend(&nodes, ",", Node(m, "call_module", m, "\"%" + prev + "\""));
    if (bytes[i] > 0) {
      absl::StrAppend(&params, params.empty() ? "" : ",", ParamJson(m + ".weight", m, bytes[i]));
    }
    prev = m;
  }
  absl::StrAppend(&nodes, ",", Node("output", "output", "output", "\"%" + prev + "\""));
  return Parse(nodes, params);
}

constexpr PartitionMode kRef = PartitionMode::kReference;
constexpr PartitionMode kDef = PartitionMode::kDefault;
constexpr int64_t kMiB = 1 << 20;

TEST(DdpBucketsTest, ReferenceMlp10x5000x5000x5000x5At25MiB) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ReferenceTestModel());
  ASSERT_TRUE(g.ok());
  std::vector<Bucket> b = Assign(*g, kRef, 25 * kMiB, kMiB);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_THAT(NodeNames(*g, b[0]), ElementsAre("net_0", "net_1"));
  EXPECT_THAT(NodeNames(*g, b[1]), ElementsAre("net_2", "net_3"));
  EXPECT_THAT(NodeNames(*g, b[2]), ElementsAre("net_4", "net_5", "net_6"));
  EXPECT_EQ(b[0].size_bytes, (10 * 5000 + 5000) * 4);
  EXPECT_EQ(b[1].size_bytes, (5000 * 5000 + 5000) * 4);
  EXPECT_EQ(b[2].size_bytes, (5000 * 5000 + 5000 + 5000 * 5 + 5) * 4);
  // Counted in walk order: the last layer first; within a module, its parameter order.
  EXPECT_THAT(b[2].params, ElementsAre("net.6_weight", "net.6_bias", "net.4_weight", "net.4_bias"));
}

TEST(DdpBucketsTest, ParameterFreeGraphIsOneBucket) {
  Graph g = Chain({0, 0, 0});
  for (PartitionMode mode : {kRef, kDef}) {
    std::vector<Bucket> b = Assign(g, mode, 0, 0);
    // Caps of 0 open a bucket before every node, but every bucket is empty: the empty
    // preamble merge leaves... one merge only, so count nodes instead of buckets.
    int64_t nodes = 0;
    for (const Bucket& x : b) nodes += x.nodes.size();
    EXPECT_EQ(nodes, 3);
    std::vector<Bucket> one = Assign(g, mode, 25 * kMiB, kMiB);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].size_bytes, 0);
    EXPECT_TRUE(one[0].params.empty());
  }
}

TEST(DdpBucketsTest, NewBucketOpensBeforeTheNodeOnceTheCapIsReached) {
  // Walk: m3 (4), m2 (4): size 8 >= first cap 8 -> new bucket before m1.
  Graph g = Chain({4, 4, 4, 4});
  std::vector<Bucket> b = Assign(g, kRef, 8, 8);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_THAT(NodeNames(g, b[0]), ElementsAre("m0", "m1"));
  EXPECT_THAT(NodeNames(g, b[1]), ElementsAre("m2", "m3"));
}

TEST(DdpBucketsTest, FirstBucketCapAppliesWhileThereIsOneBucket) {
  Graph g = Chain({4, 4, 4, 4, 4, 4});
  std::vector<Bucket> b = Assign(g, kRef, 12, 4);
  // m5 alone (4 >= first cap 4), then buckets of 12.
  ASSERT_EQ(b.size(), 3u);
  EXPECT_THAT(NodeNames(g, b[2]), ElementsAre("m5"));
  EXPECT_THAT(NodeNames(g, b[1]), ElementsAre("m2", "m3", "m4"));
  EXPECT_THAT(NodeNames(g, b[0]), ElementsAre("m0", "m1"));
}

TEST(DdpBucketsTest, NodeLargerThanTheCapSharesItsBucketWithNodesWalkedBefore) {
  Graph g = Chain({4, 100, 4});
  std::vector<Bucket> b = Assign(g, kRef, 10, 10);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_THAT(NodeNames(g, b[1]), ElementsAre("m1", "m2"));  // m1 alone exceeds the cap
  EXPECT_EQ(b[1].size_bytes, 104);
  EXPECT_THAT(NodeNames(g, b[0]), ElementsAre("m0"));
}

TEST(DdpBucketsTest, EmptyPreambleMergesIntoNextBucket) {
  // m0, m1 have no parameters: the bucket they would form is merged forward.
  Graph g = Chain({0, 0, 8, 8});
  std::vector<Bucket> b = Assign(g, kRef, 8, 8);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_THAT(NodeNames(g, b[0]), ElementsAre("m0", "m1", "m2"));
  EXPECT_EQ(b[0].size_bytes, 8);
}

TEST(DdpBucketsTest, TrailingEmptyBucketIsKeptWhenFirstCapIsZero) {
  Graph g = Chain({8, 8});
  std::vector<Bucket> b = Assign(g, kRef, 100, 0);
  // Before m1 the only bucket has size 0 >= first cap 0: a new bucket opens, leaving an
  // empty bucket at the end (forward order) that is kept.
  ASSERT_EQ(b.size(), 2u);
  EXPECT_THAT(NodeNames(g, b[0]), ElementsAre("m0", "m1"));
  EXPECT_TRUE(b[1].nodes.empty());
}

TEST(DdpBucketsTest, IgnoredAndFrozenParametersNeverCount) {
  Graph g =
      Parse(Node("x", "placeholder", "x", "") + "," + Node("m", "call_module", "m", "\"%x\"") +
                "," + Node("output", "output", "output", "\"%m\""),
            ParamJson("m.weight", "m", 64) + "," +
                ParamJson("m.bias", "m", 16, R"("requires_grad": false)") + "," +
                ParamJson("m.scale", "m", 8, R"("ddp_ignored": true)"));
  for (PartitionMode mode : {kRef, kDef}) {
    std::vector<Bucket> b = Assign(g, mode, 25 * kMiB, kMiB);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].size_bytes, 64);
    EXPECT_THAT(b[0].params, ElementsAre("m_weight"));
  }
}

TEST(DdpBucketsTest, GetAttrParameterWithWeightTCallMethod) {
  // y = x @ fc.weight.t(): get_attr + call_method "t" + call_function mm.
  Graph g = Parse(Node("x", "placeholder", "x", "") + "," +
                      Node("fc_weight", "get_attr", "fc.weight", "") + "," +
                      Node("t", "call_method", "t", "\"%fc_weight\"") + "," +
                      Node("mm", "call_function", "aten.mm.default", "\"%x\", \"%t\"") + "," +
                      Node("output", "output", "output", "\"%mm\""),
                  ParamJson("fc.weight", "fc.weight", 400));
  for (PartitionMode mode : {kRef, kDef}) {
    std::vector<Bucket> b = Assign(g, mode, 25 * kMiB, kMiB);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].size_bytes, 400);
    EXPECT_THAT(b[0].params, ElementsAre("fc.weight"));  // named by the get_attr target
    EXPECT_THAT(NodeNames(g, b[0]), ElementsAre("fc_weight", "t", "mm"));
  }
}

TEST(DdpBucketsTest, GetAttrOfABufferCountsNothing) {
  Graph g =
      Parse(Node("x", "placeholder", "x", "") + "," + Node("buf", "get_attr", "running_mean", "") +
                "," + Node("add", "call_function", "aten.add.Tensor", "\"%x\", \"%buf\"") + "," +
                Node("output", "output", "output", "\"%add\""),
            "");
  EXPECT_EQ(Assign(g, kRef, 25 * kMiB, kMiB)[0].size_bytes, 0);
}

// A module called twice: m then m again.
Graph CalledTwice() {
  return Parse(Node("x", "placeholder", "x", "") + "," + Node("m", "call_module", "m", "\"%x\"") +
                   "," + Node("m_1", "call_module", "m", "\"%m\"") + "," +
                   Node("output", "output", "output", "\"%m_1\""),
               ParamJson("m.weight", "m", 100));
}

TEST(DdpBucketsTest, ReferenceCountsAModuleCalledTwiceTwice) {
  std::vector<Bucket> b = Assign(CalledTwice(), kRef, 25 * kMiB, kMiB);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].size_bytes, 200);
  EXPECT_THAT(b[0].params, ElementsAre("m_weight", "m_weight"));
}

TEST(DdpBucketsTest, DefaultCountsAModuleCalledTwiceOnceAtItsFirstUse) {
  Graph g = CalledTwice();
  std::vector<Bucket> b = Assign(g, kDef, 100, 100);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].size_bytes, 100);
  EXPECT_THAT(b[0].params, ElementsAre("m_weight"));
}

// Two modules whose weights share one storage (tied embeddings).
Graph Tied() {
  return Parse(Node("x", "placeholder", "x", "") + "," +
                   Node("emb", "call_module", "emb", "\"%x\"") + "," +
                   Node("mid", "call_module", "mid", "\"%emb\"") + "," +
                   Node("head", "call_module", "head", "\"%mid\"") + "," +
                   Node("output", "output", "output", "\"%head\""),
               ParamJson("emb.weight", "emb", 1000) + "," + ParamJson("mid.weight", "mid", 10) +
                   "," + ParamJson("head.weight", "head", 1000, R"("storage": "emb.weight")"));
}

TEST(DdpBucketsTest, ReferenceCountsTiedWeightsAtEveryUse) {
  std::vector<Bucket> b = Assign(Tied(), kRef, 1000, 1000);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_THAT(b[1].params, ElementsAre("head_weight"));
  EXPECT_THAT(b[0].params, ElementsAre("mid_weight", "emb_weight"));
  EXPECT_EQ(b[0].size_bytes + b[1].size_bytes, 2010);
}

TEST(DdpBucketsTest, DefaultCountsEachStorageOnceAtItsFirstForwardUse) {
  Graph g = Tied();
  std::vector<Bucket> b = Assign(g, kDef, 1000, 1000);
  int64_t total = 0;
  std::vector<std::string> all;
  for (const Bucket& x : b) {
    total += x.size_bytes;
    all.insert(all.end(), x.params.begin(), x.params.end());
  }
  EXPECT_EQ(total, 1010);
  EXPECT_THAT(all, ::testing::UnorderedElementsAre("mid_weight", "emb_weight"));
  // emb is the first use, so its bucket holds the storage.
  EXPECT_THAT(b[0].params, ::testing::Contains("emb_weight"));
}

TEST(DdpBucketsTest, ModuleHoldingOneTensorTwiceCountsItOnce) {
  // named_parameters() lists a tensor held twice inside one module once.
  Graph g =
      Parse(Node("x", "placeholder", "x", "") + "," + Node("m", "call_module", "m", "\"%x\"") +
                "," + Node("output", "output", "output", "\"%m\""),
            ParamJson("m.a.weight", "m", 40) + "," +
                ParamJson("m.b.weight", "m", 40, R"("storage": "m.a.weight")"));
  std::vector<Bucket> b = Assign(g, kRef, 25 * kMiB, kMiB);
  EXPECT_EQ(b[0].size_bytes, 40);
  EXPECT_THAT(b[0].params, ElementsAre("m_a.weight"));
}

TEST(DdpBucketsTest, LiftedParametersCountInDefaultModeOnly) {
  Graph g = Parse(
      R"({"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "fc.weight"}},)" +
          Node("x", "placeholder", "x", "") + "," +
          Node("t", "call_function", "aten.t.default", "\"%p_w\"") + "," +
          Node("mm", "call_function", "aten.mm.default", "\"%x\", \"%t\"") + "," +
          Node("output", "output", "output", "\"%mm\""),
      ParamJson("fc.weight", "p_w", 64, R"("dtype": "bfloat16")"));
  EXPECT_EQ(Assign(g, kRef, 25 * kMiB, kMiB)[0].size_bytes, 0);
  std::vector<Bucket> b = Assign(g, kDef, 25 * kMiB, kMiB);
  EXPECT_EQ(b[0].size_bytes, 64);
  EXPECT_THAT(b[0].params, ElementsAre("fc.weight"));  // named by the parameter's name
  EXPECT_THAT(b[0].bytes_by_dtype,
              ElementsAre(std::pair<const std::string, int64_t>("bfloat16", 64)));
}

constexpr PartitionMode kRef2x = PartitionMode::kReference2x;

// torch.compile's graphs lift parameters to placeholders: PyTorch 2.x's DDPOptimizer counts
// one at each call_function taking it as a top-level positional argument, every time, named
// here by the parameter's name (torch's by the input's).
TEST(DdpBucketsTest, Reference2xCountsLiftedParametersAtEachPositionalUse) {
  Graph g = Parse(
      R"({"name": "p_w", "op": "placeholder", "target": "p_w", "args": [], "meta": {"param": "fc.weight"}},)"
      R"({"name": "p_b", "op": "placeholder", "target": "p_b", "args": [], "meta": {"param": "fc.bias"}},)" +
          Node("x", "placeholder", "x", "") + "," +
          Node("lin", "call_function", "torch.nn.functional.linear", R"("%x", "%p_w", "%p_b")") +
          "," + Node("again", "call_function", "torch.mul", R"("%lin", "%p_w")") + "," +
          // A parameter inside a list, or as a keyword, is not counted (torch's rule).
          R"({"name": "cat", "op": "call_function", "target": "torch.cat", "args": [["%again", "%p_b"]]},)" +
          R"({"name": "kw", "op": "call_function", "target": "torch.add", "args": ["%cat"], "kwargs": {"other": "%p_b"}},)" +
          Node("output", "output", "output", "\"%kw\""),
      ParamJson("fc.weight", "p_w", 64) + "," + ParamJson("fc.bias", "p_b", 8));
  std::vector<Bucket> b = Assign(g, kRef2x, 25 * kMiB, kMiB);
  ASSERT_EQ(b.size(), 1u);
  // Walked from the end: mul counts the weight, then linear the weight and the bias.
  EXPECT_THAT(b[0].params, ElementsAre("fc.weight", "fc.weight", "fc.bias"));
  EXPECT_EQ(b[0].size_bytes, 136);
  EXPECT_EQ(Assign(g, kRef, 25 * kMiB, kMiB)[0].size_bytes, 0);  // 2.0 counts none
}

TEST(DdpBucketsTest, Reference2xCountsAModuleOnceAndWaitsForAnOutsideUse) {
  std::vector<Bucket> once = Assign(CalledTwice(), kRef2x, 25 * kMiB, kMiB);
  ASSERT_EQ(once.size(), 1u);
  EXPECT_THAT(once[0].params, ElementsAre("m_weight"));
  // x -> a -> dead (no users) ... -> b -> output: at the cap after `b`, the open bucket
  // {b} feeds the output, so a bucket opens; 2.0 opens one whatever the bucket holds.
  Graph g =
      Parse(Node("x", "placeholder", "x", "") + "," + Node("a", "call_module", "a", "\"%x\"") +
                "," + Node("dead", "call_module", "dead", "\"%a\"") + "," +
                Node("b", "call_module", "b", "\"%a\"") + "," +
                Node("output", "output", "output", "\"%b\""),
            ParamJson("a.weight", "a", 8) + "," + ParamJson("dead.weight", "dead", 8) + "," +
                ParamJson("b.weight", "b", 8));
  std::vector<Bucket> ref = Assign(g, kRef, 8, 8);
  std::vector<Bucket> v2 = Assign(g, kRef2x, 8, 8);
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_THAT(NodeNames(g, ref[1]), ElementsAre("dead"));  // a bucket that feeds nobody
  ASSERT_EQ(v2.size(), 2u);
  EXPECT_THAT(NodeNames(g, v2[1]), ElementsAre("b"));
  // {dead} has no value read outside it, so 2.x keeps filling it with `a`.
  EXPECT_THAT(NodeNames(g, v2[0]), ElementsAre("a", "dead"));
}

TEST(DdpBucketsTest, DefaultOpensABucketOnlyAfterAnOutsideUse) {
  // a -> b -> c where b's result is read only by c. Reference would cut between b and c;
  // default may not, because the bucket {c} has no value used outside... c feeds the output,
  // so it may cut there; b's bucket then must include a value read by c.
  Graph g =
      Parse(Node("x", "placeholder", "x", "") + "," + Node("a", "call_module", "a", "\"%x\"") +
                "," + Node("side", "call_module", "side", "\"%a\"") + "," +
                Node("b", "call_module", "b", "\"%a\"") + "," +
                Node("c", "call_function", "f", "\"%b\", \"%side\"") + "," +
                Node("output", "output", "output", "\"%c\""),
            ParamJson("a.weight", "a", 8) + "," + ParamJson("side.weight", "side", 8) + "," +
                ParamJson("b.weight", "b", 8));
  std::vector<Bucket> ref = Assign(g, kRef, 8, 8);
  std::vector<Bucket> def = Assign(g, kDef, 8, 8);
  // Every default bucket but the last has a node whose result is read outside it.
  for (size_t i = 0; i < def.size(); ++i) {
    bool external = false;
    for (NodeId id : def[i].nodes) {
      for (NodeId u : g.node(id).users()) {
        external |= std::find(def[i].nodes.begin(), def[i].nodes.end(), u) == def[i].nodes.end();
      }
    }
    EXPECT_TRUE(external) << "bucket " << i;
  }
  EXPECT_GE(ref.size(), def.size());
}

TEST(DdpBucketsTest, FirstCapAboveCapIsAnError) {
  BucketOptions o;
  o.bucket_cap_bytes = 10;
  o.first_bucket_cap_bytes = 11;
  EXPECT_THAT(AssignBuckets(Chain({4}), o).status().message(),
              HasSubstr("first bucket cap (11 bytes) exceeds the bucket cap (10 bytes)"));
  o.first_bucket_cap_bytes = -1;
  EXPECT_FALSE(AssignBuckets(Chain({4}), o).ok());
}

TEST(DdpBucketsTest, BytesPerDtypeInDefaultMode) {
  Graph g = Parse(
      Node("x", "placeholder", "x", "") + "," + Node("m", "call_module", "m", "\"%x\"") + "," +
          Node("output", "output", "output", "\"%m\""),
      ParamJson("m.w", "m", 64, R"("dtype": "bfloat16")") + "," +
          ParamJson("m.b", "m", 16, R"("dtype": "float32")") + "," + ParamJson("m.c", "m", 4));
  std::vector<Bucket> b = Assign(g, kDef, 25 * kMiB, kMiB);
  EXPECT_EQ(b[0].bytes_by_dtype.at("bfloat16"), 64);
  EXPECT_EQ(b[0].bytes_by_dtype.at("float32"), 16);
  EXPECT_EQ(b[0].bytes_by_dtype.at("unknown"), 4);
}

TEST(DdpBucketsTest, BuiltInModelsCountEveryTrainableStorageOnceInDefaultMode) {
  for (const std::string& name : ModelNames()) {
    for (ParamStyle style : {ParamStyle::kModule, ParamStyle::kLifted}) {
      ModelOptions mo;
      mo.style = style;
      absl::StatusOr<Graph> g = BuildModel(name, mo);
      ASSERT_TRUE(g.ok());
      int64_t expected = 0;
      absl::flat_hash_set<std::string> seen;
      for (const Param& p : g->params()) {
        if (seen.insert(p.storage_key()).second) expected += p.bytes;
      }
      int64_t total = 0;
      for (const Bucket& b : Assign(*g, kDef, 25 * kMiB, kMiB)) total += b.size_bytes;
      EXPECT_EQ(total, expected) << name;
    }
  }
}

}  // namespace
}  // namespace overlap
