// The fake is the oracle of the backend's seam tests: these check that it catches what it
// must (unordered uses across streams, frees before a use) and moves data as NCCL does.
#include "runtime/cuda/fake_gpu_api.h"

#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

struct Two {
  FakeGpuApi api;
  GpuStream* compute = *api.CreateStream(false);
  GpuStream* comm = *api.CreateStream(true);
  GpuEvent* event = *api.CreateEvent();
};

TEST(FakeGpuApiTest, AUseOnAnotherStreamNeedsAnEvent) {
  Two t;
  void* buf = *t.api.MallocAsync(64, t.compute);
  void* out = *t.api.MallocAsync(64, t.comm);
  void* const w[] = {buf};
  ASSERT_TRUE(t.api.Spin(t.compute, 0, {}, w).ok());
  // The copy on the communication stream reads what compute wrote, without an event.
  ASSERT_TRUE(t.api.MemcpyAsync(out, buf, 64, t.comm).ok());
  // Unordered after both the allocation and the write.
  const std::string v = absl::StrJoin(t.api.violations(), "\n");
  EXPECT_EQ(t.api.violations().size(), 2u) << v;
  EXPECT_NE(v.find("memcpy 64 (stream 1) is not ordered after the allocation malloc 64"),
            std::string::npos)
      << v;
  EXPECT_NE(v.find("is not ordered after spin (stream 0)"), std::string::npos) << v;

  Two u;
  buf = *u.api.MallocAsync(64, u.compute);
  out = *u.api.MallocAsync(64, u.comm);
  void* const w2[] = {buf};
  ASSERT_TRUE(u.api.Spin(u.compute, 0, {}, w2).ok());
  ASSERT_TRUE(u.api.RecordEvent(u.event, u.compute).ok());
  ASSERT_TRUE(u.api.StreamWaitEvent(u.comm, u.event).ok());
  ASSERT_TRUE(u.api.MemcpyAsync(out, buf, 64, u.comm).ok());
  EXPECT_TRUE(u.api.violations().empty()) << absl::StrJoin(u.api.violations(), "\n");
  const std::vector<FakeGpuApi::Op> ops = u.api.ops();
  EXPECT_TRUE(FakeGpuApi::HappensBefore(ops[2], ops[3]));   // spin before memcpy
  EXPECT_FALSE(FakeGpuApi::HappensBefore(ops[1], ops[2]));  // comm's malloc, compute's spin
}

TEST(FakeGpuApiTest, AFreeMustFollowEveryUse) {
  Two t;
  void* buf = *t.api.MallocAsync(64, t.compute);
  void* out = *t.api.MallocAsync(64, t.compute);
  ASSERT_TRUE(t.api.RecordEvent(t.event, t.compute).ok());
  ASSERT_TRUE(t.api.StreamWaitEvent(t.comm, t.event).ok());
  ASSERT_TRUE(t.api.MemcpyAsync(out, buf, 64, t.comm).ok());  // comm reads buf
  ASSERT_TRUE(t.api.FreeAsync(buf, t.compute).ok());          // compute frees it: unordered
  ASSERT_EQ(t.api.violations().size(), 1u);
  EXPECT_NE(t.api.violations()[0].find("not ordered after its use memcpy"), std::string::npos)
      << t.api.violations()[0];
  // Freed on its last-use stream instead: fine; the pool's counts follow.
  ASSERT_TRUE(t.api.FreeAsync(out, t.comm).ok());
  EXPECT_EQ(t.api.violations().size(), 1u);
  EXPECT_EQ(t.api.live_bytes(), 0);
  EXPECT_EQ(t.api.peak_bytes(), 128);
  EXPECT_EQ(t.api.MallocAsync(int64_t{1} << 40, t.compute).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(FakeGpuApiTest, CollectivesMoveDataAcrossRankThreads) {
  auto world = std::make_shared<FakeNcclWorld>();
  const std::string id = world->NewId();
  std::vector<std::vector<float>> gathered(2), scattered(2);
  std::vector<int32_t> counts(2);
  auto rank = [&](int r) {
    FakeGpuApi api({.nccl = world});
    GpuStream* s = *api.CreateStream(true);
    GpuComm* c = *api.NcclCommInit(2, r, id);
    while (!*api.NcclCommReady(c)) std::this_thread::yield();
    std::vector<float> host = {float(r + 1), float(10 * (r + 1))};
    auto* in = static_cast<float*>(*api.MallocAsync(8, s));
    auto* all = static_cast<float*>(*api.MallocAsync(16, s));
    auto* one = static_cast<float*>(*api.MallocAsync(4, s));
    ASSERT_TRUE(api.MemcpyAsync(in, host.data(), 8, s).ok());
    ASSERT_TRUE(
        api.NcclCollectiveAsync(NcclCollective::kAllGather, in, all, 2, DType::kFloat32, 0, c, s)
            .ok());
    ASSERT_TRUE(api.NcclCollectiveAsync(NcclCollective::kReduceScatter, in, one, 1, DType::kFloat32,
                                        0, c, s)
                    .ok());
    // Sums of other dtypes go through tensor.h's conversions: int32 here.
    auto* count = static_cast<int32_t*>(*api.MallocAsync(4, s));
    const int32_t mine = 7 * (r + 1);
    ASSERT_TRUE(api.MemcpyAsync(count, &mine, 4, s).ok());
    ASSERT_TRUE(
        api.NcclCollectiveAsync(NcclCollective::kAllReduce, count, count, 1, DType::kInt32, 0, c, s)
            .ok());
    ASSERT_TRUE(api.StreamSynchronize(s).ok());
    gathered[r].assign(all, all + 4);
    scattered[r].assign(one, one + 1);
    counts[r] = *count;
  };
  std::thread a(rank, 0), b(rank, 1);
  a.join();
  b.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<float>{1, 10, 2, 20}));
  }
  EXPECT_EQ(scattered[0], std::vector<float>{3});     // 1 + 2
  EXPECT_EQ(scattered[1], std::vector<float>{30});    // 10 + 20
  EXPECT_EQ(counts, (std::vector<int32_t>{21, 21}));  // 7 + 14
}

}  // namespace
}  // namespace overlap
