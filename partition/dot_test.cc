#include "partition/dot.h"

#include <string>

#include "gmock/gmock.h"
#include "graph/models.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(PartitionDotTest, OneClusterPerBucketAndEveryEdge) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ModelOptions{}, Preset::kTiny);
  ASSERT_TRUE(g.ok());
  PartitionOptions o;
  o.buckets.bucket_cap_bytes = 200;
  o.buckets.first_bucket_cap_bytes = 200;
  absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(*g);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->buckets.size(), 1u);
  absl::StatusOr<std::string> dot = PartitionDot(*g, *r);
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_THAT(*dot, HasSubstr("digraph "));
  EXPECT_EQ(Count(*dot, "subgraph cluster_"), static_cast<int>(r->buckets.size()));
  EXPECT_THAT(*dot, HasSubstr("label=\"submod_0: bucket 0, "));
  int edges = 0;
  for (NodeId id : g->order()) {
    absl::flat_hash_set<NodeId> distinct(g->node(id).inputs().begin(), g->node(id).inputs().end());
    edges += static_cast<int>(distinct.size());
  }
  EXPECT_EQ(Count(*dot, " -> "), edges);
}

TEST(PartitionDotTest, LargeGraphsAreRefusedWithTheLimit) {
  absl::StatusOr<Graph> g = BuildModel("mlp", ModelOptions{}, Preset::kTiny);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<PartitionResult> r = DdpPartitioner(PartitionOptions{}).Run(*g);
  ASSERT_TRUE(r.ok());
  PartitionDotOptions o;
  o.max_nodes = 3;
  absl::StatusOr<std::string> dot = PartitionDot(*g, *r, o);
  ASSERT_FALSE(dot.ok());
  EXPECT_THAT(std::string(dot.status().message()), HasSubstr("over the DOT limit of 3"));
}

}  // namespace
}  // namespace overlap
