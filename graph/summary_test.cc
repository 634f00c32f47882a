#include "graph/summary.h"

#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(SummaryTest, CriticalPathIsTheLongestChainByDeviceTime) {
  // a (1) -> b (5) -> d (1);  a -> c (2) -> d: the path through b is longer.
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "a", "op": "call_function", "target": "f", "args": ["%x"], "meta": {"device_time": 1.0}},
    {"name": "b", "op": "call_function", "target": "f", "args": ["%a"], "meta": {"device_time": 5.0}},
    {"name": "c", "op": "call_function", "target": "f", "args": ["%a"], "meta": {"device_time": 2.0}},
    {"name": "d", "op": "call_function", "target": "f", "args": ["%c", "%b"], "meta": {"device_time": 1.0}},
    {"name": "output", "op": "output", "target": "output", "args": ["%d"]}],
   "params": [{"name": "w", "owner": "x", "bytes": 8, "dtype": "float32"},
              {"name": "w2", "owner": "x", "bytes": 8, "storage": "w"},
              {"name": "v", "owner": "x", "bytes": 4, "requires_grad": false, "ddp_ignored": true}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  GraphSummary s = Summarize(*g);
  EXPECT_DOUBLE_EQ(s.device_time, 9.0);
  EXPECT_DOUBLE_EQ(s.critical_path_time, 7.0);
  std::vector<std::string> path;
  for (NodeId id : s.critical_path) path.push_back(g->node(id).name());
  // Zero-time links (the placeholder, the output) add nothing and are left out.
  EXPECT_THAT(path, ::testing::ElementsAre("a", "b", "d"));
  EXPECT_EQ(s.nodes, 6);
  EXPECT_EQ(s.nodes_by_op[static_cast<int>(Op::kCallFunction)], 4);
  EXPECT_EQ(s.param_entries, 3);
  EXPECT_EQ(s.unique_storages, 2);
  EXPECT_EQ(s.param_bytes, 12);
  EXPECT_EQ(s.trainable_bytes, 8);
  EXPECT_EQ(s.frozen, 1);
  EXPECT_EQ(s.ignored, 1);
  ASSERT_EQ(s.tied_groups.size(), 1u);
  EXPECT_THAT(s.tied_groups[0], ::testing::ElementsAre("w", "w2"));
  EXPECT_EQ(CountParameters(*g), 2 + 1);  // 8 bytes of float32, 4 bytes assumed float32
  EXPECT_THAT(FormatSummary(*g, s),
              ::testing::HasSubstr("critical path: 7.000 s over 3 nodes (a -> d)"));
}

TEST(SummaryTest, AbsentRowsOfAWholeModelTableAreCountedAndShown) {
  // A lifted graph taking primals_2 only; the table lists primals_1's parameter too.
  absl::StatusOr<Graph> g = ReadGraphJson(R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "primals_2", "op": "placeholder", "target": "primals_2", "args": [], "meta": {"param": "b"}},
    {"name": "output", "op": "output", "target": "output", "args": ["%primals_2"]}],
   "params": [{"name": "a", "owner": "primals_1", "bytes": 8},
              {"name": "b", "owner": "primals_2", "bytes": 4}]})");
  ASSERT_TRUE(g.ok()) << g.status();
  const GraphSummary s = Summarize(*g);
  EXPECT_EQ(s.absent, 1);
  EXPECT_EQ(s.param_entries, 2);
  EXPECT_EQ(s.param_bytes, 12);  // the table is the model's: its size counts every row
  EXPECT_THAT(FormatSummary(*g, s), ::testing::HasSubstr("absent from this graph: 1 entries"));
}

}  // namespace
}  // namespace overlap
