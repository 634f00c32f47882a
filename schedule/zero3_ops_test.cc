#include "schedule/zero3_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/test_graphs.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;

TEST(ReduceBucketerTest, ABucketClosesOnceItsBytesReachTheCap) {
  ReduceBucketer b(100);
  std::vector<int> got;
  for (int64_t bytes : {40, 60, 10, 200, 99, 1, 5}) got.push_back(b.Add(bytes));
  // 40+60 reaches 100; 10+200 passes it; 99+1 reaches it; 5 opens a fourth.
  EXPECT_THAT(got, ElementsAre(0, 0, 1, 1, 2, 2, 3));
  EXPECT_EQ(b.count(), 4);
}

// x -> ag -> wait -> mm(x, wait) -> release -> output, plus a reduce of mm's result.
Graph Zero3Chain(const std::string& ag_kwargs) {
  return ParseGraphParts(
      absl::StrCat(PlaceholderJson("p_a", "a"), ",", PlaceholderJson("x"), ",",
                   R"({"name": "ag", "op": "call_function", "target": "dc.allgather_param",
                       "args": ["%p_a", 1, 0], "kwargs": )",
                   ag_kwargs, R"(, "meta": {"tensor_size": 64}},)",
                   CallJson("w", "dc.wait_allgather", R"("%ag", 1, 0)"), ",",
                   CallJson("mm", "aten.mm.default", R"("%x", "%w")",
                            R"({"grad_of": "a", "tensor_size": 64})"),
                   ",", CallJson("r", "dc.release_param", R"("%mm", 1, 0, 1)"), ",",
                   CallJson("red", "dc.reduce_grad", R"("%r", 1, 0)", R"({"tensor_size": 64})"),
                   ",", OutputJson(R"(["%r", "%red"])")),
      ParamJson("a", 64));
}

TEST(Zero3OpsTest, ReadersSeeTheOpsArguments) {
  Graph g = Zero3Chain("{}");
  const Node& r = g.node(g.FindNode("r"));
  EXPECT_TRUE(IsRelease(r));
  EXPECT_TRUE(IsZero3Op(r));
  EXPECT_EQ(DsId(r), 0);
  EXPECT_EQ(NUsers(r), 1);
  EXPECT_TRUE(HasDsId(r));
  EXPECT_FALSE(IsZero3Op(g.node(g.FindNode("mm"))));
  EXPECT_EQ(NUsers(g.node(g.FindNode("mm"))), -1);
  EXPECT_EQ(SizeOf(g.node(g.FindNode("ag"))), 64);
  EXPECT_TRUE(HasZero3Ops(g));
}

TEST(Zero3OpsTest, MakeResidentReplacesAnyPersistentKwargAndErasesReleases) {
  Graph g = Zero3Chain(R"({"persistent": false})");
  EXPECT_FALSE(IsPersistentAllgather(g.node(g.FindNode("ag"))));
  std::vector<NodeId> order = g.OrderVector();
  ASSERT_TRUE(MakeResident(&g, {0}, &order).ok());
  const Node& ag = g.node(g.FindNode("ag"));
  EXPECT_TRUE(IsPersistentAllgather(ag));
  ASSERT_EQ(ag.kwargs().size(), 1u);  // one "persistent" key, not two
  EXPECT_EQ(g.FindNode("r"), kNoNode);
  EXPECT_EQ(order.size(), static_cast<size_t>(g.size()));
  EXPECT_TRUE(Verify(g).ok()) << Verify(g);
}

TEST(Zero3OpsTest, BucketReducesWritesOneBucketKwarg) {
  Graph g = Zero3Chain("{}");
  ASSERT_TRUE(BucketReduces(&g, g.OrderVector(), 1000).ok());
  ASSERT_TRUE(BucketReduces(&g, g.OrderVector(), 1000).ok());  // replaces, not appends
  const Node& red = g.node(g.FindNode("red"));
  EXPECT_EQ(ReduceBucket(red), 0);
  EXPECT_EQ(red.kwargs().size(), 1u);
  EXPECT_EQ(ReduceBucket(g.node(g.FindNode("mm"))), -1);
}

}  // namespace
}  // namespace overlap
