// The collectives' model: the ring formulas, per-collective fits overriding the shared
// figures, and the model file (bench-comm's output) read back exactly or refused with a
// message saying where.
#include "graph/cost_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

TEST(CollectiveModelTest, RingFormulas) {
  CollectiveModel m;
  m.world_size = 4;
  m.latency_s = 1e-5;
  m.bandwidth_bytes_per_s = 1e9;
  EXPECT_DOUBLE_EQ(m.Allgather(1000000), 1e-5 + 0.75 * 1e-3);
  EXPECT_DOUBLE_EQ(m.ReduceScatter(1000000), 1e-5 + 0.75 * 1e-3);
  EXPECT_DOUBLE_EQ(m.Allreduce(1000000), 1e-5 + 1.5 * 1e-3);
  EXPECT_DOUBLE_EQ(m.Allgather(0), 0);
  m.world_size = 1;
  EXPECT_DOUBLE_EQ(m.Allreduce(1000000), 0);
}

TEST(CollectiveModelTest, FitsOverrideTheSharedFigures) {
  CollectiveModel m;
  m.world_size = 2;
  m.latency_s = 1e-5;
  m.bandwidth_bytes_per_s = 1e9;
  m.reduce_scatter = {1e-3, 2e9};
  EXPECT_DOUBLE_EQ(m.ReduceScatter(2000000), 1e-3 + 0.5 * 1e-3);
  EXPECT_DOUBLE_EQ(m.Allgather(2000000), 1e-5 + 0.5 * 2e-3);  // no fit: shared figures
  m.allgather = {-1, 1e9};
  EXPECT_FALSE(m.Valid());
}

TEST(CollectiveModelTest, FileRoundTrip) {
  CollectiveModel m;
  m.world_size = 3;
  m.latency_s = 1.5e-3;
  m.bandwidth_bytes_per_s = 1.25e9;
  m.allgather = {8.5e-4, 1.383e9};
  m.reduce_scatter = {7.3e-4, 1.02e9};
  m.allreduce = {1.2e-3, 1.04e9};
  m.compute_slowdown = 0.25;
  m.busy_start_s = 1.75e-3;
  absl::StatusOr<CollectiveModel> back = ParseCollectiveModel(CollectiveModelJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->world_size, 3);
  EXPECT_DOUBLE_EQ(back->compute_slowdown, 0.25);
  EXPECT_DOUBLE_EQ(back->busy_start_s, 1.75e-3);
  EXPECT_DOUBLE_EQ(back->latency_s, m.latency_s);
  EXPECT_DOUBLE_EQ(back->allgather.bandwidth_bytes_per_s, m.allgather.bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(back->reduce_scatter.latency_s, m.reduce_scatter.latency_s);
  EXPECT_DOUBLE_EQ(back->allreduce.bandwidth_bytes_per_s, m.allreduce.bandwidth_bytes_per_s);
}

// Compute overlapping a collective runs slower by the slowdown, the rest at full speed.
TEST(CollectiveModelTest, ComputeSlowsWhileCollectivesRun) {
  CollectiveModel m;
  EXPECT_DOUBLE_EQ(m.ComputeEnd(1.0, 2.0, 10.0), 3.0);  // no contention by default
  m.compute_slowdown = 1.0;                             // half speed beside a collective
  EXPECT_DOUBLE_EQ(m.ComputeEnd(1.0, 2.0, 10.0), 5.0);  // wholly inside: twice as long
  EXPECT_DOUBLE_EQ(m.ComputeEnd(1.0, 2.0, 3.0), 4.0);   // 1 s of work by 3, 1 s after
  EXPECT_DOUBLE_EQ(m.ComputeEnd(4.0, 2.0, 3.0), 6.0);   // the collectives were done
  EXPECT_DOUBLE_EQ(m.ComputeEnd(1.0, 0.0, 3.0), 1.0);
  m.compute_slowdown = -0.5;
  EXPECT_FALSE(m.Valid());
  m.compute_slowdown = 0;
  m.busy_start_s = -1e-3;
  EXPECT_FALSE(m.Valid());
}

TEST(CollectiveModelTest, BadFilesAreRefused) {
  EXPECT_THAT(std::string(ParseCollectiveModel("{\"world_size\": 2}").status().message()),
              HasSubstr("needs world_size, latency_s and bandwidth_bytes_per_s"));
  EXPECT_THAT(std::string(ParseCollectiveModel("{\"world_size\": 2, \"latency_s\": 1e-5, "
                                               "\"bandwidth_bytes_per_s\": 0}")
                              .status()
                              .message()),
              HasSubstr("out of range"));
  EXPECT_THAT(std::string(ParseCollectiveModel("{\"world_size\": x}").status().message()),
              HasSubstr("offset"));
  EXPECT_THAT(std::string(ParseCollectiveModel("{} trailing").status().message()),
              HasSubstr("text after the object"));
  EXPECT_FALSE(ReadCollectiveModelFile("/nonexistent/model.json").ok());
  // Unknown keys are ignored.
  EXPECT_TRUE(ParseCollectiveModel("{\"format\": \"overlap-collective-model\", \"world_size\": "
                                   "2, \"latency_s\": 1e-5, \"bandwidth_bytes_per_s\": 1e9, "
                                   "\"measured\": \"2026-12-01\"}")
                  .ok());
}

}  // namespace
}  // namespace overlap
