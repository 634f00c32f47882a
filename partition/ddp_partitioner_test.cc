// The pass end to end: split_module semantics, the compile hook's fallback, inlining back,
// the cap model, and the result JSON.
#include "partition/ddp_partitioner.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/aot.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "partition/bucket_cap.h"
#include "partition/invariants.h"
#include "partition/report.h"

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

constexpr int64_t kMiB = 1 << 20;

PartitionResult PartitionOf(const Graph& g, PartitionMode mode, int64_t cap, int64_t first,
                            CompileFn compile = nullptr) {
  PartitionOptions o;
  o.buckets.mode = mode;
  o.buckets.bucket_cap_bytes = cap;
  o.buckets.first_bucket_cap_bytes = first;
  o.compile = std::move(compile);
  absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : PartitionResult();
}

std::vector<std::string> Names(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<std::string> out;
  for (NodeId id : ids) out.push_back(g.node(id).name());
  return out;
}

void ExpectValidSplit(const Graph& g, const PartitionResult& r) {
  ASSERT_TRUE(r.split);
  EXPECT_TRUE(Verify(r.pieces.outer).ok()) << Verify(r.pieces.outer);
  for (const Submodule& s : r.pieces.submodules) {
    EXPECT_TRUE(Verify(s.graph).ok()) << s.name << ": " << Verify(s.graph);
  }
  absl::StatusOr<Graph> inlined = InlineSubmodules(r.pieces);
  ASSERT_TRUE(inlined.ok()) << inlined.status();
  std::string why;
  EXPECT_TRUE(SameNodesAndEdges(g, *inlined, &why)) << why;
  EXPECT_TRUE(Verify(*inlined).ok()) << Verify(*inlined);
}

TEST(DdpPartitionerTest, MlpSplitsIntoThreeChainedSubmodules) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ReferenceTestModel());
  ASSERT_TRUE(g.ok());
  PartitionResult r = PartitionOf(*g, PartitionMode::kReference, 25 * kMiB, kMiB);
  ExpectValidSplit(*g, r);
  ASSERT_EQ(r.pieces.submodules.size(), 3u);
  const Submodule& s1 = r.pieces.submodules[1];
  EXPECT_EQ(s1.name, "submod_1");
  EXPECT_THAT(Names(*g, s1.inputs), ElementsAre("net_1"));
  EXPECT_THAT(Names(*g, s1.outputs), ElementsAre("net_3"));
  EXPECT_THAT(r.pieces.call_order, ElementsAre(0, 1, 2));
  // One output: returned bare; the outer graph calls the pieces in order.
  const Node& out = s1.graph.node(s1.graph.last());
  EXPECT_TRUE(out.args()[0].is_ref());
  std::vector<std::string> outer_targets;
  for (NodeId id : r.pieces.outer.order())
    outer_targets.push_back(r.pieces.outer.node(id).target());
  EXPECT_THAT(outer_targets, ElementsAre("x", "submod_0", "submod_1", "submod_2", "output"));
  // Parameters travel with their modules.
  EXPECT_EQ(s1.graph.ParamsOwnedBy("net.2").size(), 2u);
}

TEST(DdpPartitionerTest, SeveralOutputsAreATupleUnpackedByGetitem) {
  // x -> a; b(a); c(a, b): the cut between {a} and {b, c} gives a, and {a} -> {b, c} reads a
  // twice; a second output appears when the later piece reads two values.
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "a", "op": "call_module", "target": "a", "args": ["%x"]},
    {"name": "b", "op": "call_module", "target": "b", "args": ["%a"]},
    {"name": "c", "op": "call_module", "target": "c", "args": ["%a", "%b"]},
    {"name": "d", "op": "call_function", "target": "f", "args": ["%b", "%c"], "kwargs": {"k": "%a"}},
    {"name": "output", "op": "output", "target": "output", "args": [["%d", "%b"]]}],
   "params": [{"name": "a.w", "owner": "a", "bytes": 8}, {"name": "b.w", "owner": "b", "bytes": 8},
              {"name": "c.w", "owner": "c", "bytes": 8}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  PartitionResult r = PartitionOf(*g, PartitionMode::kReference, 8, 8);
  ExpectValidSplit(*g, r);
  ASSERT_EQ(r.buckets.size(), 3u);
  // Bucket 1 = {b}: read by c, d and the output; bucket 0 = {a}: read by b, c, d (kwargs).
  const Submodule& s0 = r.pieces.submodules[0];
  EXPECT_THAT(Names(*g, s0.outputs), ElementsAre("a"));
  const Submodule& s2 = r.pieces.submodules[2];
  EXPECT_THAT(Names(*g, s2.inputs), ElementsAre("a", "b"));  // first use: c's args
  EXPECT_THAT(Names(*g, s2.outputs), ElementsAre("d"));
  int getitems = 0;
  for (NodeId id : r.pieces.outer.order()) {
    getitems += r.pieces.outer.node(id).target() == "operator.getitem";
  }
  EXPECT_EQ(getitems, 0);  // every piece here has one output
  // Now a cap that puts {b, c} together: its outputs are c's reader d? No: d joins them.
  PartitionResult wide = PartitionOf(*g, PartitionMode::kReference, 16, 16);
  ExpectValidSplit(*g, wide);
}

TEST(DdpPartitionerTest, PieceWithoutOutsideReadersReturnsEmptyTuple) {
  // Reference mode may cut off a node nobody reads ("dead"): its piece returns ().
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "a", "op": "call_module", "target": "a", "args": ["%x"]},
    {"name": "dead", "op": "call_module", "target": "dead", "args": ["%x"]},
    {"name": "output", "op": "output", "target": "output", "args": ["%a"]}],
   "params": [{"name": "a.w", "owner": "a", "bytes": 8}, {"name": "dead.w", "owner": "dead", "bytes": 8}]})");
  ASSERT_TRUE(g.ok());
  PartitionResult r = PartitionOf(*g, PartitionMode::kReference, 8, 8);
  ExpectValidSplit(*g, r);
  ASSERT_EQ(r.pieces.submodules.size(), 2u);
  const Submodule& dead = r.pieces.submodules[1];
  EXPECT_TRUE(dead.outputs.empty());
  const Value& ret = dead.graph.node(dead.graph.last()).args()[0];
  EXPECT_EQ(ret.kind(), Value::Kind::kList);
  EXPECT_TRUE(ret.items().empty());
  // Default mode never makes such a piece.
  PartitionResult d = PartitionOf(*g, PartitionMode::kDefault, 8, 8);
  for (const Submodule& s : d.pieces.submodules) EXPECT_FALSE(s.outputs.empty()) << s.name;
}

TEST(DdpPartitionerTest, OneBucketIsNotSplit) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ReferenceTestModel());
  ASSERT_TRUE(g.ok());
  PartitionResult r =
      PartitionOf(*g, PartitionMode::kReference, int64_t{1} << 40, int64_t{1} << 40);
  EXPECT_FALSE(r.split);
  EXPECT_EQ(r.buckets.size(), 1u);
  const std::string json = PartitionResultJson(*g, r);
  EXPECT_THAT(json, HasSubstr("\"submodules\": []"));
  EXPECT_THAT(json, HasSubstr("\"call_order\": []"));
}

TEST(DdpPartitionerTest, FailedCompileFallsBackForThatPieceOnly) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ReferenceTestModel());
  ASSERT_TRUE(g.ok());
  std::vector<std::string> seen;
  PartitionResult r = PartitionOf(
      *g, PartitionMode::kReference, 25 * kMiB, kMiB, [&](const Submodule& s) -> absl::Status {
        seen.push_back(s.name);
        if (s.name == "submod_1") {
          return absl::UnimplementedError("backend has no kernel for relu");
        }
        return absl::OkStatus();
      });
  EXPECT_THAT(seen, ElementsAre("submod_0", "submod_1", "submod_2"));
  ASSERT_EQ(r.compiled.size(), 3u);
  EXPECT_TRUE(r.compiled[0].compiled);
  EXPECT_FALSE(r.compiled[1].compiled);
  EXPECT_EQ(r.compiled[1].error, "backend has no kernel for relu");
  EXPECT_TRUE(r.compiled[2].compiled);
  const std::string json = PartitionResultJson(*g, r);
  EXPECT_THAT(
      json,
      HasSubstr("\"compiled\": false, \"compile_error\": \"backend has no kernel for relu\""));
  EXPECT_THAT(FormatBucketTable(*g, r),
              HasSubstr("submod_1: 2 nodes, 1 inputs, 1 outputs, NOT compiled"));
}

TEST(DdpPartitionerTest, EveryBuiltInModelSplitsAndInlinesBack) {
  for (const std::string& name : ModelNames()) {
    for (ParamStyle style : {ParamStyle::kModule, ParamStyle::kLifted}) {
      ModelOptions mo;
      mo.style = style;
      absl::StatusOr<Graph> g = BuildModel(name, mo);
      ASSERT_TRUE(g.ok());
      for (PartitionMode mode : {PartitionMode::kReference, PartitionMode::kDefault}) {
        PartitionResult r = PartitionOf(*g, mode, 25 * kMiB, kMiB);
        if (r.split) ExpectValidSplit(*g, r);
      }
    }
  }
}

TEST(DdpPartitionerTest, ResultJsonHasTheSpecShape) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ReferenceTestModel());
  ASSERT_TRUE(g.ok());
  PartitionResult r = PartitionOf(*g, PartitionMode::kReference, 25 * kMiB, kMiB);
  const std::string json = PartitionResultJson(*g, r);
  absl::StatusOr<Graph> not_a_graph = ReadGraphJson(json);
  EXPECT_FALSE(not_a_graph.ok());  // it is a result, not a graph
  EXPECT_THAT(json,
              HasSubstr("\"format\": \"overlap-result\", \"version\": 1, \"mode\": \"reference\", "
                        "\"bucket_cap_bytes\": 26214400, \"first_bucket_cap_bytes\": 1048576"));
  EXPECT_THAT(json,
              HasSubstr("{\"index\": 0, \"size_bytes\": 220000, \"params\": [\"net.0_weight\", "
                        "\"net.0_bias\"], \"nodes\": [\"net_0\", \"net_1\"]}"));
  EXPECT_THAT(json, HasSubstr("{\"name\": \"submod_0\", \"nodes\": [\"net_0\", \"net_1\"], "
                              "\"inputs\": [\"x\"], \"outputs\": [\"net_1\"]}"));
  EXPECT_THAT(json, HasSubstr("\"call_order\": [\"submod_0\", \"submod_1\", \"submod_2\"]"));
  EXPECT_EQ(json,
            PartitionResultJson(*g, PartitionOf(*g, PartitionMode::kReference, 25 * kMiB, kMiB)));
}

TEST(BucketCapTest, RingAllreduceCost) {
  CollectiveModel m;
  m.world_size = 4;
  m.latency_s = 1e-5;
  m.bandwidth_bytes_per_s = 1e9;
  EXPECT_DOUBLE_EQ(m.Allreduce(0), 0);
  EXPECT_DOUBLE_EQ(m.Allreduce(1000000), 1e-5 + 2.0 * 3 / 4 * 1e-3);
  m.world_size = 1;
  EXPECT_DOUBLE_EQ(m.Allreduce(1000000), 0);
}

TEST(BucketCapTest, ExposedTimeFollowsTheTwoStreamTimeline) {
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "a", "op": "call_module", "target": "a", "args": ["%x"], "meta": {"device_time": 1.0}},
    {"name": "b", "op": "call_module", "target": "b", "args": ["%a"], "meta": {"device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": ["%b"]}],
   "params": [{"name": "a.w", "owner": "a", "bytes": 1000}, {"name": "b.w", "owner": "b", "bytes": 1000}]})");
  ASSERT_TRUE(g.ok());
  BucketOptions o;
  o.bucket_cap_bytes = 1000;
  o.first_bucket_cap_bytes = 1000;
  absl::StatusOr<std::vector<Bucket>> b = AssignBuckets(*g, o);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 2u);
  CollectiveModel m;
  m.world_size = 2;
  m.latency_s = 0;
  m.bandwidth_bytes_per_s = 1000;  // 1000 bytes: 1 s each
  // Backward: b's bucket 0..2 s, allreduce 2..3; a's bucket 2..4, allreduce 4..5: 1 s exposed.
  CapCandidate c = PredictExposed(*g, *b, m);
  EXPECT_DOUBLE_EQ(c.backward_s, 4.0);
  EXPECT_DOUBLE_EQ(c.comm_s, 2.0);
  EXPECT_DOUBLE_EQ(c.exposed_s, 1.0);
  // Contention: b's allreduce starts beside a's backward (woken: 2..3.5), a's backward runs
  // at half speed until 3.5 and then at full (2..4.75), a's allreduce 4.75..5.75.
  m.compute_slowdown = 1.0;
  m.busy_start_s = 0.5;
  c = PredictExposed(*g, *b, m);
  EXPECT_DOUBLE_EQ(c.backward_s, 4.75);
  EXPECT_DOUBLE_EQ(c.comm_s, 2.5);
  EXPECT_DOUBLE_EQ(c.exposed_s, 1.0);
}

TEST(BucketCapTest, AutoChoosesTheLeastExposedCandidate) {
  absl::StatusOr<Graph> g = BuildModel("gpt2", {});
  ASSERT_TRUE(g.ok());
  absl::StatusOr<CapChoice> c = ChooseBucketCap(*g, PartitionMode::kDefault, CollectiveModel());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_GE(c->candidates.size(), 3u);
  double best = 1e300;
  for (const CapCandidate& k : c->candidates) best = std::min(best, k.exposed_s);
  for (const CapCandidate& k : c->candidates) {
    if (k.cap_bytes == c->cap_bytes) {
      EXPECT_DOUBLE_EQ(k.exposed_s, best);
    }
  }
  EXPECT_FALSE(ChooseBucketCap(*g, PartitionMode::kDefault, CollectiveModel{0, 0, 1}).ok());
}

// With contention a smaller cap hides more of its allreduces and slows the backward more:
// the choice is the earliest end of backward plus exposed time, which here is not the
// least exposed candidate (the rule that ignores the slowed backward would pick another).
TEST(BucketCapTest, AutoUnderContentionTakesTheEarliestEnd) {
  absl::StatusOr<Graph> g = BuildModel("gpt2", {});
  ASSERT_TRUE(g.ok());
  CollectiveModel m;
  m.world_size = 2;
  m.latency_s = 20e-6;
  m.bandwidth_bytes_per_s = 50e9;
  m.compute_slowdown = 1.0;
  m.busy_start_s = 1e-3;
  absl::StatusOr<CapChoice> c = ChooseBucketCap(*g, PartitionMode::kDefault, m);
  ASSERT_TRUE(c.ok()) << c.status();
  double best_end = 1e300, least_exposed = 1e300;
  for (const CapCandidate& k : c->candidates) {
    best_end = std::min(best_end, k.backward_s + k.exposed_s);
    least_exposed = std::min(least_exposed, k.exposed_s);
  }
  const CapCandidate* chosen = nullptr;
  for (const CapCandidate& k : c->candidates) {
    if (k.cap_bytes == c->cap_bytes) chosen = &k;
  }
  ASSERT_NE(chosen, nullptr);
  EXPECT_DOUBLE_EQ(chosen->backward_s + chosen->exposed_s, best_end);
  EXPECT_GT(chosen->exposed_s, least_exposed);
}

// The partitioner on AOT graphs (lifted parameters, loss, saved outputs; the backward with
// absent rows): both modes satisfy every invariant, at both sizes.
TEST(DdpPartitionerTest, AotPairsPartitionInBothModes) {
  for (const std::string& name : ModelNames()) {
    for (Preset preset : {Preset::kDefault, Preset::kTiny}) {
      ModelOptions o;
      o.style = ParamStyle::kLifted;
      absl::StatusOr<AotPair> pair = BuildAotPair(*BuildModel(name, o, preset));
      ASSERT_TRUE(pair.ok()) << name << ": " << pair.status();
      for (const Graph* g : {&pair->forward, &pair->backward}) {
        for (PartitionMode mode : {PartitionMode::kReference, PartitionMode::kDefault}) {
          PartitionOptions po;
          po.buckets.mode = mode;
          absl::StatusOr<PartitionResult> r = DdpPartitioner(po).Run(*g);
          ASSERT_TRUE(r.ok()) << name << ": " << r.status();
          absl::Status inv = CheckPartitionInvariants(*g, *r);
          EXPECT_TRUE(inv.ok()) << name << " " << g->name() << ": " << inv;
        }
      }
    }
  }
}

}  // namespace
}  // namespace overlap
