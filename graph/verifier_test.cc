// Verify's rules for the ZeRO-3 ops and lifted parameters (the reproducers of an
// adversarial campaign: each was accepted before and crashed or misled a later pass).
#include "graph/verifier.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/errors.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

// x, placeholder p (meta.param "w"), the given dc ops, then mm(x, <last>) and the output.
absl::Status VerifyWith(const std::string& ops, const std::string& last = "%wt",
                        const std::string& extra_params = "") {
  absl::StatusOr<Graph> g = GraphFromParts(
      absl::StrCat(PlaceholderJson("x"), ",", PlaceholderJson("p", "w"), ",", ops,
                   CallJson("y", "aten.mm.default", absl::StrCat(R"("%x", ")", last, R"(")")), ",",
                   OutputJson(R"("%y")")),
      absl::StrCat(R"({"name": "w", "owner": "p", "bytes": 64})", extra_params));
  return g.status();
}

TEST(VerifierTest, WellFormedZero3OpsPass) {
  EXPECT_TRUE(VerifyWith(absl::StrCat(CallJson("ag", "dc.allgather_param", R"("%p", 0, 0)"), ",",
                                      CallJson("wt", "dc.wait_allgather", R"("%ag", 0, 0)"), ","))
                  .ok());
}

TEST(VerifierTest, ADsIdOutsideTheParameterTableIsRejected) {
  // The reproducer: ds_id 1 with a one-entry table (scheduling it crashed with SIGSEGV).
  for (const std::string ds : {"1", "-1", "-5", "9223372036854775807", "\"zero\""}) {
    absl::Status s =
        VerifyWith(absl::StrCat(CallJson("ag", "dc.allgather_param", "\"%p\", 0, " + ds), ",",
                                CallJson("wt", "dc.wait_allgather", "\"%ag\", 0, " + ds), ","));
    EXPECT_TRUE(IsBadInput(s)) << ds << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("node \"ag\": ds_id (args[2])")) << ds;
  }
}

TEST(VerifierTest, ArityTypesAndCountsOfZero3OpsAreChecked) {
  const std::string ag = CallJson("ag", "dc.allgather_param", R"("%p", 0, 0)") + ",";
  const std::string wt = CallJson("wt", "dc.wait_allgather", R"("%ag", 0, 0)") + ",";
  struct Case {
    std::string ops, last, message;
  };
  const Case cases[] = {
      {CallJson("ag", "dc.allgather_param", "") + ",", "%ag", "dc.allgather_param takes 3"},
      {ag + CallJson("wt", "dc.wait_allgather", R"("%p", 0, 0)") + ",", "%wt",
       "a wait must read a dc.allgather_param"},
      {ag + wt + CallJson("wt2", "dc.wait_allgather", R"("%ag", 0, 0)") + ",", "%wt2",
       "a second wait on \"ag\""},
      {ag + CallJson("wt", "dc.wait_allgather", R"("%ag", -1, 0)") + ",", "%wt", "graph_id"},
      {ag + wt + CallJson("r", "dc.release_param", R"("%wt", 0, 0, 0)") + ",", "%r",
       "n_users (args[3]) must be an int >= 1"},
      {ag + wt + CallJson("r", "dc.release_param", R"("%wt", 0, 0, -1)") + ",", "%r", "n_users"},
      {ag + wt + CallJson("r", "dc.release_param", R"("%wt", 0, 0)") + ",", "%r",
       "dc.release_param takes 4"},
      {ag + wt + CallJson("red", "dc.reduce_grad", "") + ",", "%wt", "dc.reduce_grad takes 3"},
      {ag + wt + CallJson("red", "dc.reduce_grad", R"(1, 1, 0)") + ",", "%wt",
       "args[0] must be a node reference"},
  };
  for (const Case& c : cases) {
    absl::Status s = VerifyWith(c.ops, c.last);
    EXPECT_TRUE(IsBadInput(s)) << c.message << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

// The host-memory ops of one offloaded value %x (id 3), for VerifyWith: its copy to the host
// (h), the copy back (d) and the waits for each (v, o).
struct HostOps {
  std::string off = CallJson("h", "dc.offload_tensor", R"("%x", 0, 3)") + ",";
  std::string rl = CallJson("d", "dc.reload_tensor", R"("%h", 0, 3)") + ",";
  std::string wr = CallJson("v", "dc.wait_reload", R"("%d", 0, 3)") + ",";
  std::string wo = CallJson("o", "dc.wait_offload", R"("%h", 0, 3)") + ",";
};

// The host-memory ops (activation offloading) and the wait for a reduction.
TEST(VerifierTest, HostMemoryOpsAndReductionWaitsAreChecked) {
  const auto [off, rl, wr, wo] = HostOps();
  EXPECT_TRUE(VerifyWith(off + rl + wr + wo, "%v").ok());
  const std::string red = CallJson("red", "dc.reduce_grad", R"("%x", 1, 0)") + ",";
  EXPECT_TRUE(
      VerifyWith(red + CallJson("wred", "dc.wait_reduce", R"("%red", 1, 0)") + ",", "%x").ok());
  struct Case {
    std::string ops, last, message;
  };
  const Case cases[] = {
      {CallJson("h", "dc.offload_tensor", R"("%x", 0)") + ",", "%x", "takes 3 arguments"},
      {CallJson("h", "dc.offload_tensor", R"("%x", 0, -1)") + ",", "%x", "id (args[2])"},
      {CallJson("h", "dc.offload_tensor", R"("%x", -1, 0)") + ",", "%x", "graph_id"},
      {off + CallJson("d", "dc.reload_tensor", R"("%y0", 0, 3)") + ",", "%x", "y0"},
      {CallJson("a", "aten.relu.default", R"("%x")") + "," +
           CallJson("d", "dc.reload_tensor", R"("%a", 0, 3)") + ",",
       "%d", "a reload must read a placeholder"},
      {off + rl + CallJson("v", "dc.wait_reload", R"("%h", 0, 3)") + ",", "%v",
       "a dc.wait_reload must read a dc.reload_tensor"},
      {off + rl + CallJson("v", "dc.wait_reload", R"("%d", 0, 4)") + ",", "%v",
       "with a different id"},
      {off + rl + wr + CallJson("v2", "dc.wait_reload", R"("%d", 0, 3)") + ",", "%v2",
       "a second wait on \"d\""},
      {off + CallJson("o", "dc.wait_offload", R"("%x", 0, 3)") + ",", "%x",
       "a dc.wait_offload must read a dc.offload_tensor"},
      {red + CallJson("wred", "dc.wait_reduce", R"("%x", 1, 0)") + ",", "%x",
       "a wait_reduce must read a dc.reduce_grad"},
  };
  for (const Case& c : cases) {
    absl::Status s = VerifyWith(c.ops, c.last);
    EXPECT_TRUE(IsBadInput(s)) << c.message << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

// A host tensor read by compute would run on memory counted as the host's, outside the
// step's device peak: refused, naming the reader and the host tensor.
TEST(VerifierTest, ComputeNeverReadsAHostTensor) {
  const auto [off, rl, wr, wo] = HostOps();
  // The offloaded value itself stays on the device until its last reader: mm reads %x.
  EXPECT_TRUE(VerifyWith(off + rl + wr + wo, "%x").ok());
  struct Case {
    std::string ops, last, reader, host;
  };
  const Case cases[] = {
      // A backward's saved tensor (placeholder s) reloaded and also read by compute.
      {PlaceholderJson("s") + "," + CallJson("d", "dc.reload_tensor", R"("%s", 1, 3)") + "," +
           CallJson("v", "dc.wait_reload", R"("%d", 1, 3)") + ",",
       "%s", "y", "s"},
      // The same with the reload never waited on (an unused reload).
      {PlaceholderJson("s") + "," + CallJson("d", "dc.reload_tensor", R"("%s", 1, 3)") + "," +
           CallJson("r", "aten.relu.default", R"("%s")") + ",",
       "%r", "r", "s"},
      // The forward's host copy, or its wait, read by compute.
      {off + rl + wr, "%h", "y", "h"},
      {off + wo, "%o", "y", "o"},
      // A view of a host tensor is a read by compute too.
      {off + CallJson("t", "aten.t.default", R"("%h")", R"({"aliases_input": true})") + ",", "%t",
       "t", "h"},
  };
  for (const Case& c : cases) {
    absl::Status s = VerifyWith(c.ops, c.last);
    EXPECT_TRUE(IsBadInput(s)) << c.reader << ": " << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("node \"", c.reader, "\": reads host tensor \"", c.host,
                                       "\" directly")));
  }
}

TEST(VerifierTest, AnAllgatherOfAnotherParametersPlaceholderIsRejected) {
  absl::Status s =
      VerifyWith(absl::StrCat(PlaceholderJson("q", "v"), ",",
                              CallJson("ag", "dc.allgather_param", R"("%q", 0, 0)"), ",",
                              CallJson("wt", "dc.wait_allgather", R"("%ag", 0, 0)"), ","),
                 "%wt", R"(, {"name": "v", "owner": "q", "bytes": 64})");
  EXPECT_THAT(std::string(s.message()), HasSubstr("with the ds_id of \"w\""));
}

TEST(VerifierTest, MetaParamIsForOnePlaceholderPerParameter) {
  // Two placeholders naming one parameter counted it twice.
  absl::Status twice = VerifyWith(PlaceholderJson("p2", "w") + ",", "%p2");
  EXPECT_TRUE(IsBadInput(twice));
  EXPECT_THAT(std::string(twice.message()), HasSubstr("is already placeholder \"p\"'s"));
  absl::Status on_call = VerifyWith(
      R"({"name": "c", "op": "call_function", "target": "f", "args": ["%x"],
          "meta": {"param": "w"}},)",
      "%c");
  EXPECT_THAT(std::string(on_call.message()), HasSubstr("meta.param is only for placeholders"));
}

TEST(VerifierTest, DeviceTimesMustSumToAFiniteTotal) {
  absl::Status s = VerifyWith(
      R"({"name": "a", "op": "call_function", "target": "f", "args": ["%x"],
          "meta": {"device_time": 1e308}},
         {"name": "b", "op": "call_function", "target": "f", "args": ["%a"],
          "meta": {"device_time": 1e308}},)",
      "%b");
  EXPECT_TRUE(IsBadInput(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("sum of meta.device_time"));
}

TEST(VerifierTest, NegativeShapeDimensionsAreRejected) {
  absl::Status s = VerifyWith(
      R"({"name": "a", "op": "call_function", "target": "f", "args": ["%x"],
          "meta": {"shape": [2, -3]}},)",
      "%a");
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("node \"a\": meta.shape has a negative dimension"));
  absl::Status p =
      VerifyWith("", "%p", R"(, {"name": "v", "owner": "p", "bytes": 4, "shape": [-1]})");
  EXPECT_THAT(std::string(p.message()), HasSubstr("shape has a negative dimension"));
}

TEST(VerifierTest, OtherDeepCompileOpsAreAcceptedUnchecked) {
  EXPECT_TRUE(VerifyWith(CallJson("e", "dc.end_backward", R"("%p")") + ",", "%p").ok());
}

// Whole-model parameter tables: an AOT backward graph takes only the primals its formulas
// read, yet lists the model's whole table so that ds_ids agree with the forward graph.
TEST(VerifierTest, ALiftedGraphMayListParametersItDoesNotRead) {
  // The reproducer: "pos_emb" is owned by primals_1, which this backward graph does not take.
  const std::string nodes =
      absl::StrCat(PlaceholderJson("primals_2", "wte"), ",", PlaceholderJson("tangents_1"), ",",
                   CallJson("mm", "aten.mm.default", R"("%tangents_1", "%primals_2")"), ",",
                   OutputJson(R"("%mm")"));
  absl::StatusOr<Graph> g =
      GraphFromParts(nodes, R"({"name": "pos_emb", "owner": "primals_1", "bytes": 64},
                               {"name": "wte", "owner": "primals_2", "bytes": 64})");
  ASSERT_TRUE(g.ok()) << g.status();
  const ParamOwnership o = ClassifyParams(*g);
  EXPECT_TRUE(o.lifted);
  EXPECT_EQ(o.absent, 1);
  EXPECT_EQ(o.present, (std::vector<char>{0, 1}));
  // ds_ids stay table indices: wte is 1 even though pos_emb is absent.
  EXPECT_EQ(g->FindParam("wte"), 1);
}

TEST(VerifierTest, AGraphReadingNoPrimalAtAllIsLiftedToo) {
  absl::StatusOr<Graph> g = GraphFromParts(
      absl::StrCat(PlaceholderJson("tangents_1"), ",", OutputJson(R"("%tangents_1")")),
      R"({"name": "w", "owner": "primals_1", "bytes": 64})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ClassifyParams(*g).absent, 1);
}

TEST(VerifierTest, AMisspeltModuleOwnerIsStillAnError) {
  // A call_module node makes the graph module-style: every owner must exist.
  const std::string nodes =
      absl::StrCat(PlaceholderJson("x"), ",",
                   R"({"name": "fc", "op": "call_module", "target": "fc", "args": ["%x"]},)",
                   OutputJson(R"("%fc")"));
  EXPECT_TRUE(GraphFromParts(nodes, R"({"name": "fc.weight", "owner": "fc", "bytes": 64})").ok());
  absl::StatusOr<Graph> bad =
      GraphFromParts(nodes, R"({"name": "fc.weight", "owner": "fc", "bytes": 64},
                                                       {"name": "fc.bias", "owner": "fcc", "bytes": 4})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(IsBadInput(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("parameter \"fc.bias\" (owner \"fcc\"): owner is not"));
  EXPECT_FALSE(
      ClassifyParams(ParseGraphParts(nodes, R"({"name": "fc.weight", "owner": "fc", "bytes": 64})"))
          .lifted);
}

TEST(VerifierTest, AParameterOwnedByGetAttrMakesTheGraphModuleStyle) {
  const std::string nodes = absl::StrCat(
      R"({"name": "w", "op": "get_attr", "target": "w", "args": []},)", PlaceholderJson("x"), ",",
      CallJson("y", "aten.mm.default", R"("%x", "%w")"), ",", OutputJson(R"("%y")"));
  EXPECT_TRUE(GraphFromParts(nodes, R"({"name": "w", "owner": "w", "bytes": 64})").ok());
  absl::StatusOr<Graph> bad = GraphFromParts(nodes, R"({"name": "w", "owner": "w", "bytes": 64},
                                                       {"name": "v", "owner": "vv", "bytes": 4})");
  EXPECT_TRUE(IsBadInput(bad.status())) << bad.status();
}

}  // namespace
}  // namespace overlap
