// RapidCheck properties of the partitioner on random graphs, both modes, random caps.
#include "graph/random_graph.h"
#include "graph/random_graph_rc.h"
#include "gtest/gtest.h"
#include "partition/ddp_partitioner.h"
#include "partition/invariants.h"
#include "rapidcheck/gtest.h"

namespace overlap {
namespace {

// Caps from 0 to a few MiB: small enough that random graphs split into many buckets.
rc::Gen<PartitionOptions> ArbitraryOptions() {
  return rc::gen::apply(
      [](bool reference, int64_t cap, int64_t first_fraction) {
        PartitionOptions o;
        o.buckets.mode = reference ? PartitionMode::kReference : PartitionMode::kDefault;
        o.buckets.bucket_cap_bytes = cap;
        o.buckets.first_bucket_cap_bytes = cap * first_fraction / 8;
        return o;
      },
      rc::gen::arbitrary<bool>(), rc::gen::inRange<int64_t>(0, 8 << 20),
      rc::gen::inRange<int64_t>(0, 9));
}

RC_GTEST_PROP(DdpPartitionerPropertyTest, prop_AllInvariantsHold, ()) {
  const Graph g = *ArbitraryGraph();
  const PartitionOptions o = *ArbitraryOptions();
  absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
  RC_ASSERT(r.ok());
  const absl::Status s = CheckPartitionInvariants(g, *r);
  if (!s.ok()) RC_FAIL(std::string(s.message()));
}

RC_GTEST_PROP(DdpPartitionerPropertyTest, prop_DeterministicAcrossRuns, ()) {
  const Graph g = *ArbitraryGraph();
  const PartitionOptions o = *ArbitraryOptions();
  absl::StatusOr<PartitionResult> a = DdpPartitioner(o).Run(g);
  absl::StatusOr<PartitionResult> b = DdpPartitioner(o).Run(Graph(g));
  RC_ASSERT(a.ok() && b.ok());
  RC_ASSERT(a->buckets.size() == b->buckets.size());
  for (size_t i = 0; i < a->buckets.size(); ++i) {
    RC_ASSERT(a->buckets[i].nodes == b->buckets[i].nodes);
    RC_ASSERT(a->buckets[i].params == b->buckets[i].params);
  }
  RC_ASSERT(a->pieces.call_order == b->pieces.call_order);
}

RC_GTEST_PROP(DdpPartitionerPropertyTest, prop_DefaultNeverLeavesAPieceWithoutOutputs, ()) {
  // Default mode only cuts once the bucket has a value used outside it, and merges an unread
  // first bucket forward, so every piece returns something.
  const Graph g = *ArbitraryGraph();
  PartitionOptions o = *ArbitraryOptions();
  o.buckets.mode = PartitionMode::kDefault;
  absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
  RC_ASSERT(r.ok());
  for (const Submodule& s : r->pieces.submodules) RC_ASSERT(!s.outputs.empty());
}

TEST(DdpPartitionerPropertyTest, LargeRandomGraphsHoldTheInvariants) {
  for (uint64_t seed : {1, 2, 3}) {
    for (bool lifted : {false, true}) {
      RandomGraphOptions ro;
      ro.nodes = 5000;
      ro.seed = seed;
      ro.lifted = lifted;
      const Graph g = RandomGraph(ro);
      for (PartitionMode mode :
           {PartitionMode::kReference, PartitionMode::kDefault, PartitionMode::kReference2x}) {
        PartitionOptions o;
        o.buckets.mode = mode;
        absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
        ASSERT_TRUE(r.ok()) << r.status();
        if (!lifted) {
          EXPECT_GT(r->buckets.size(), 1u);
        }
        EXPECT_TRUE(CheckPartitionInvariants(g, *r).ok()) << CheckPartitionInvariants(g, *r);
      }
    }
  }
}

}  // namespace
}  // namespace overlap
