// Differential test: the fast reference-mode partitioner (buckets + split) against the slow
// one written straight from docs/ddp-optimizer.md, on every built-in model and on random graphs,
// over a range of caps. Any difference names the bucket or piece and both answers.
#include "partition/testing/slow_reference.h"

#include <cstdint>
#include <string>

#include "graph/models.h"
#include "graph/random_graph.h"
#include "gtest/gtest.h"
#include "partition/ddp_partitioner.h"

namespace overlap {
namespace {

absl::Status PartitionAndCompare(const Graph& g, int64_t cap, int64_t first_cap) {
  PartitionOptions o;
  o.buckets.mode = PartitionMode::kReference;
  o.buckets.bucket_cap_bytes = cap;
  o.buckets.first_bucket_cap_bytes = first_cap;
  absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
  if (!r.ok()) return r.status();
  return slow::CompareReferenceMode(g, *r);
}

TEST(SlowReferenceTest, ModelsMatchTheFastPartitionerAtSeveralCaps) {
  for (const std::string& model : ModelNames()) {
    for (ParamStyle style : {ParamStyle::kModule, ParamStyle::kLifted}) {
      ModelOptions mo;
      mo.style = style;
      absl::StatusOr<Graph> g = BuildModel(model, mo);
      ASSERT_TRUE(g.ok()) << g.status();
      for (int64_t cap : {int64_t{0}, int64_t{1} << 20, int64_t{25} << 20, int64_t{1} << 30}) {
        for (int64_t first : {int64_t{0}, cap / 2, cap}) {
          absl::Status s = PartitionAndCompare(*g, cap, first);
          EXPECT_TRUE(s.ok()) << model << " cap " << cap << " first " << first << ": " << s;
        }
      }
    }
  }
}

TEST(SlowReferenceTest, RandomGraphsMatchTheFastPartitioner) {
  int split = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    RandomGraphOptions ro;
    ro.seed = seed;
    ro.nodes = 20 + static_cast<int64_t>(seed % 180);
    ro.lifted = seed % 3 == 0;
    ro.full_meta = seed % 2 == 0;
    const Graph g = RandomGraph(ro);
    const int64_t cap = static_cast<int64_t>((seed * 2654435761u) % (4 << 20));
    const int64_t first = cap * static_cast<int64_t>(seed % 5) / 4;
    absl::Status s = PartitionAndCompare(g, cap, first);
    EXPECT_TRUE(s.ok()) << "seed " << seed << ": " << s;
    split += s.ok();
  }
  EXPECT_EQ(split, 300);
}

// The comparison itself must be able to fail: a tampered result is caught.
TEST(SlowReferenceTest, DetectsATamperedBucket) {
  RandomGraphOptions ro;
  ro.seed = 7;
  ro.nodes = 150;
  const Graph g = RandomGraph(ro);
  PartitionOptions o;
  o.buckets.mode = PartitionMode::kReference;
  o.buckets.bucket_cap_bytes = 1 << 16;
  o.buckets.first_bucket_cap_bytes = 1 << 14;
  absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(slow::CompareReferenceMode(g, *r).ok());
  ASSERT_GT(r->buckets.size(), 1u);
  PartitionResult moved = *r;
  moved.buckets[0].size_bytes += 1;
  EXPECT_FALSE(slow::CompareReferenceMode(g, moved).ok());
  PartitionResult renamed = *r;
  renamed.buckets.back().params.push_back("extra");
  EXPECT_FALSE(slow::CompareReferenceMode(g, renamed).ok());
}

}  // namespace
}  // namespace overlap
