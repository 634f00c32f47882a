// The benchmark's arithmetic: size ranges, bus bandwidth factors and the least-squares fit
// (recovering a known latency and bandwidth from exact times), and one real run on a
// single-rank communicator, with and without a time budget per size.
#include "runtime/comm/bench_comm.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/testing/ranks.h"

namespace overlap {
namespace {

TEST(BenchCommTest, SizeRanges) {
  absl::StatusOr<std::vector<int64_t>> s = ParseSizeRange("4KiB..64KiB", 12);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, (std::vector<int64_t>{4104, 8196, 16392, 32772, 65544}));
  EXPECT_FALSE(ParseSizeRange("64KiB..4KiB", 4).ok());
  EXPECT_FALSE(ParseSizeRange("x..4KiB", 4).ok());
  EXPECT_EQ(ParseSizeRange("1MiB", 4)->size(), 1u);
}

TEST(BenchCommTest, FitRecoversLatencyAndBusBandwidth) {
  const int world = 4;
  std::vector<BenchRow> rows;
  for (CollectiveKind k :
       {CollectiveKind::kAllreduce, CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}) {
    const double latency = k == CollectiveKind::kAllreduce ? 2e-3 : 1e-3;
    const double busbw = k == CollectiveKind::kReduceScatter ? 0.5e9 : 1e9;
    const double factor = (k == CollectiveKind::kAllreduce ? 2.0 : 1.0) * 3 / 4;
    for (int64_t bytes : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24}) {
      BenchRow r;
      r.kind = k;
      r.bytes = bytes;
      r.seconds = latency + factor * bytes / busbw;
      rows.push_back(r);
    }
  }
  absl::StatusOr<CollectiveModel> m = FitCollectiveModel(rows, world);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(m->allreduce.latency_s, 2e-3, 1e-9);
  EXPECT_NEAR(m->allreduce.bandwidth_bytes_per_s, 1e9, 1e3);
  EXPECT_NEAR(m->reduce_scatter.bandwidth_bytes_per_s, 0.5e9, 1e3);
  EXPECT_NEAR(m->allgather.latency_s, 1e-3, 1e-9);
  EXPECT_EQ(m->world_size, world);
  // The model predicts what it was fitted on.
  EXPECT_NEAR(m->Allreduce(int64_t{1} << 20), rows[1].seconds, 1e-9);
  rows.resize(1);
  EXPECT_FALSE(FitCollectiveModel(rows, world).ok());
}

// A rate-limited link: kilobyte collectives take noisy milliseconds (bursts, scheduling),
// megabytes take their bytes over the link. The bandwidth is the megabytes' (a fit of
// relative errors over all sizes put it 19% high on such a link), the latency the typical
// small collective's.
TEST(BenchCommTest, NoisySmallSizesMoveNeitherBandwidthNorLatencyFar) {
  const int world = 2;
  const double latency = 0.5e-3, busbw = 47e6;
  std::vector<BenchRow> rows;
  const double noise[] = {1.6, 4.0, 0.7, 0.6, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
  int k = 0;
  for (int64_t bytes = 4096; bytes <= (int64_t{16} << 20); bytes *= 2, ++k) {
    BenchRow r;
    r.kind = CollectiveKind::kAllgather;
    r.bytes = bytes;
    r.seconds = latency * noise[k] + 0.5 * bytes / busbw;
    rows.push_back(r);
    r.kind = CollectiveKind::kAllreduce;
    rows.push_back(r);
    r.kind = CollectiveKind::kReduceScatter;
    rows.push_back(r);
  }
  absl::StatusOr<CollectiveModel> m = FitCollectiveModel(rows, world);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(m->allgather.bandwidth_bytes_per_s, busbw, 0.01 * busbw);
  EXPECT_NEAR(m->allgather.latency_s, latency, 0.1 * latency);
  // Every size from 1 MiB up within 2% of what was measured.
  for (const BenchRow& r : rows) {
    if (r.kind != CollectiveKind::kAllgather || r.bytes < (1 << 20)) continue;
    EXPECT_NEAR(m->Allgather(r.bytes), r.seconds, 0.02 * r.seconds) << r.bytes;
  }
}

// A Gloo communicator of one rank on a fresh store.
absl::StatusOr<std::unique_ptr<Communicator>> OneRank(const std::string& name) {
  GlooOptions o;
  o.store_path = FreshStoreDir(name);
  return CreateGlooCommunicator(o);
}

TEST(BenchCommTest, RunsOnOneRank) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = OneRank("bench");
  ASSERT_TRUE(comm.ok()) << comm.status();
  BenchOptions b;
  b.sizes = {4096, 65536};
  b.bytes_per_size = 1 << 20;
  absl::StatusOr<std::vector<BenchRow>> rows = BenchCollectives(**comm, b);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 6u);
  for (const BenchRow& r : *rows) {
    EXPECT_GT(r.seconds, 0);
    EXPECT_GE(r.iterations, 2);
    EXPECT_EQ(r.busbw, 0);  // one rank moves nothing over a bus
  }
}

TEST(BenchCommTest, TimeBudgetCapsIterations) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = OneRank("bench_budget");
  ASSERT_TRUE(comm.ok()) << comm.status();
  BenchOptions b;
  b.sizes = {4096};
  b.bytes_per_size = 1 << 20;  // 256 iterations' worth: 50
  absl::StatusOr<std::vector<BenchRow>> rows = BenchCollectives(**comm, b);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const BenchRow& r : *rows) EXPECT_EQ(r.iterations, 50);
  b.seconds_per_size = absl::Nanoseconds(1);  // less than any warm-up: the minimum, 2
  rows = BenchCollectives(**comm, b);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const BenchRow& r : *rows) EXPECT_EQ(r.iterations, 2);
}

}  // namespace
}  // namespace overlap
