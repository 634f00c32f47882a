// The Gloo communicator with ranks as processes on 127.0.0.1 (forked from the test, a
// FileStore in the test's temporary folder): every collective's result at world sizes 2, 3
// and 4 on two streams at once, and the faults: a dead peer and a silent peer end in errors
// naming the collective within the timeout, never a hang.
#include "runtime/comm/gloo_communicator.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/core/tensor.h"
#include "runtime/testing/ranks.h"

namespace overlap {
namespace {

// A fresh store folder per run.

#define CHILD_CHECK(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "rank %d: check failed: %s (line %d)\n", rank, #cond, __LINE__); \
      return 1;                                                                             \
    }                                                                                       \
  } while (false)

int Collectives(int rank, int size, const std::string& dir) {
  GlooOptions o;
  o.rank = rank;
  o.world_size = size;
  o.store_path = dir;
  o.streams = 2;
  o.timeout = absl::Seconds(20);
  // Loopback allgathers are one message by default; these run in the pieces ranks on
  // several hosts use, so both paths are checked.
  o.allgather_segment_bytes = int64_t{512} << 10;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(o);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(comm.status().message()).c_str());
    return 2;
  }
  Allocator alloc;
  const int64_t n = 1001;  // odd: Gloo's ring splits unevenly
  // allreduce on stream 0 and allgather on stream 1 at once.
  Tensor a = *Tensor::Empty(alloc, DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) a.data<float>()[i] = static_cast<float>(rank + 1) * (i % 7);
  Tensor g_in = *Tensor::Empty(alloc, DType::kFloat64, {3});
  Tensor g_out = *Tensor::Empty(alloc, DType::kFloat64, {3 * size});
  for (int i = 0; i < 3; ++i) g_in.data<double>()[i] = rank * 10 + i;
  CollectiveOptions s1;
  s1.stream = 1;
  std::shared_ptr<Work> w1 = (*comm)->AllReduce(a);
  std::shared_ptr<Work> w2 = (*comm)->AllGather(g_in, g_out, s1);
  CHILD_CHECK(w1->Wait(absl::Seconds(30)).ok());
  CHILD_CHECK(w2->Wait(absl::Seconds(30)).ok());
  const float ranks_sum = size * (size + 1) / 2.0f;
  for (int64_t i = 0; i < n; ++i) CHILD_CHECK(a.data<float>()[i] == ranks_sum * (i % 7));
  for (int r = 0; r < size; ++r) {
    for (int i = 0; i < 3; ++i) CHILD_CHECK(g_out.data<double>()[r * 3 + i] == r * 10 + i);
  }
  // An allgather of more than one segment per rank, the last one partial: each rank's part
  // lands whole at its place (the small one above is one message).
  const int64_t big = (int64_t{1300} << 10) / 4 + 3;
  Tensor big_in = *Tensor::Empty(alloc, DType::kFloat32, {big});
  Tensor big_out = *Tensor::Empty(alloc, DType::kFloat32, {big * size});
  for (int64_t i = 0; i < big; ++i) big_in.data<float>()[i] = rank * 1e6f + i;
  CHILD_CHECK((*comm)->AllGather(big_in, big_out, s1)->Wait(absl::Seconds(30)).ok());
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < big; ++i) {
      CHILD_CHECK(big_out.data<float>()[r * big + i] == r * 1e6f + i);
    }
  }
  // reduce-scatter: slice r of the sum lands on rank r.
  const int64_t chunk = 37;
  Tensor rs_in = *Tensor::Empty(alloc, DType::kFloat64, {chunk * size});
  Tensor rs_out = *Tensor::Empty(alloc, DType::kFloat64, {chunk});
  for (int64_t i = 0; i < chunk * size; ++i) rs_in.data<double>()[i] = (rank + 1) * 1000.0 + i;
  CHILD_CHECK((*comm)->ReduceScatter(rs_in, rs_out)->Wait(absl::Seconds(30)).ok());
  for (int64_t i = 0; i < chunk; ++i) {
    const double want = size * (rank * chunk + i) + 1000.0 * ranks_sum;
    CHILD_CHECK(rs_out.data<double>()[i] == want);
  }
  // broadcast from the last rank, then a barrier.
  Tensor b = *Tensor::Empty(alloc, DType::kFloat32, {5});
  for (int i = 0; i < 5; ++i) b.data<float>()[i] = rank == size - 1 ? 42.0f + i : -1.0f;
  CHILD_CHECK((*comm)->Broadcast(b, size - 1)->Wait(absl::Seconds(30)).ok());
  for (int i = 0; i < 5; ++i) CHILD_CHECK(b.data<float>()[i] == 42.0f + i);
  CHILD_CHECK((*comm)->Barrier(s1)->Wait(absl::Seconds(30)).ok());
  // A bad call is an error, not a crash.
  Tensor wrong = *Tensor::Empty(alloc, DType::kFloat64, {chunk * size + 1});
  CHILD_CHECK(!(*comm)->ReduceScatter(wrong, rs_out)->Wait(absl::Seconds(30)).ok());
  CollectiveOptions bad;
  bad.stream = 7;
  CHILD_CHECK(!(*comm)->Barrier(bad)->Wait(absl::Seconds(1)).ok());
  CHILD_CHECK((*comm)->Barrier()->Wait(absl::Seconds(30)).ok());
  return 0;
}

TEST(GlooCommunicatorTest, CollectivesAreRightAtWorldSizesTwoToFour) {
  for (int size : {2, 3, 4}) {
    const std::string dir = FreshStoreDir(absl::StrCat("collectives", size));
    const std::vector<int> codes =
        RunRanks(size, [&](int rank) { return Collectives(rank, size, dir); });
    for (int r = 0; r < size; ++r) EXPECT_EQ(codes[r], 0) << "world " << size << " rank " << r;
  }
}

// Rank 1 dies (or goes silent) after connecting; rank 0's allreduce must fail within the
// timeout, and so must everything after it.
int Fault(int rank, const std::string& dir, bool dies) {
  GlooOptions o;
  o.rank = rank;
  o.world_size = 2;
  o.store_path = dir;
  o.timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(o);
  if (!comm.ok()) return 2;
  // Both ends fully connected first (a peer leaving mid-connection is another failure).
  if (!(*comm)->Barrier()->Wait(absl::Seconds(20)).ok()) return 3;
  if (rank == 1) {
    if (dies) _exit(0);
    std::this_thread::sleep_for(std::chrono::seconds(4));  // silent past rank 0's timeout
    _exit(0);
  }
  Allocator alloc;
  Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {1 << 16});
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*comm)->AllReduce(t)->Wait(absl::Seconds(20));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "rank 0 (%s peer): %.2f s: %s\n", dies ? "dead" : "silent", seconds,
               std::string(s.message()).c_str());
  CHILD_CHECK(!s.ok());
  CHILD_CHECK(absl::StrContains(s.message(), "allreduce #1"));
  CHILD_CHECK(seconds < 10);
  absl::Status later = (*comm)->Barrier()->Wait(absl::Seconds(5));
  CHILD_CHECK(!later.ok());
  CHILD_CHECK(absl::StrContains(later.message(), "aborted"));
  return 0;
}

TEST(GlooCommunicatorTest, ADeadPeerEndsInAnErrorNamingTheCollective) {
  const std::string dir = FreshStoreDir("dead");
  const std::vector<int> codes = RunRanks(2, [&](int rank) { return Fault(rank, dir, true); });
  EXPECT_EQ(codes[0], 0);
}

TEST(GlooCommunicatorTest, ASilentPeerEndsInATimeoutErrorNamingTheCollective) {
  const std::string dir = FreshStoreDir("silent");
  const std::vector<int> codes = RunRanks(2, [&](int rank) { return Fault(rank, dir, false); });
  EXPECT_EQ(codes[0], 0);
}

// Deterministic mode: each element is x_0 + x_1 + ... in rank order, bit for bit, however
// the buffer is split (one allreduce or two halves), and reduce-scatter agrees.
int Ordered(int rank, int size, const std::string& dir) {
  GlooOptions o;
  o.rank = rank;
  o.world_size = size;
  o.store_path = dir;
  o.deterministic = true;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(o);
  if (!comm.ok()) return 2;
  const int64_t n = 30;  // not a multiple of 4: padded
  auto value = [](int r, int64_t i) {
    return static_cast<float>(std::sin(1.0 + r * 97 + i) * std::pow(10.0, (r + i) % 7 - 3));
  };
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) {
    float sum = value(0, i);
    for (int r = 1; r < size; ++r) sum += value(r, i);
    want[i] = sum;
  }
  Allocator alloc;
  Tensor whole = *Tensor::Empty(alloc, DType::kFloat32, {n});
  Tensor halves = *Tensor::Empty(alloc, DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) whole.data<float>()[i] = halves.data<float>()[i] = value(rank, i);
  CHILD_CHECK((*comm)->AllReduce(whole)->Wait(absl::Seconds(30)).ok());
  CHILD_CHECK((*comm)->AllReduce(*halves.Slice(0, 0, n / 2))->Wait(absl::Seconds(30)).ok());
  CHILD_CHECK((*comm)->AllReduce(*halves.Slice(0, n / 2, n))->Wait(absl::Seconds(30)).ok());
  for (int64_t i = 0; i < n; ++i) {
    CHILD_CHECK(whole.data<float>()[i] == want[i]);
    CHILD_CHECK(halves.data<float>()[i] == want[i]);
  }
  const int64_t chunk = 7;
  Tensor in = *Tensor::Empty(alloc, DType::kFloat32, {chunk * size});
  Tensor out = *Tensor::Empty(alloc, DType::kFloat32, {chunk});
  for (int64_t i = 0; i < chunk * size; ++i) in.data<float>()[i] = value(rank, i);
  CHILD_CHECK((*comm)->ReduceScatter(in, out)->Wait(absl::Seconds(30)).ok());
  for (int64_t i = 0; i < chunk; ++i) {
    float sum = value(0, rank * chunk + i);
    for (int r = 1; r < size; ++r) sum += value(r, rank * chunk + i);
    CHILD_CHECK(out.data<float>()[i] == sum);
  }
  CHILD_CHECK((*comm)->Barrier()->Wait(absl::Seconds(30)).ok());
  return 0;
}

TEST(GlooCommunicatorTest, DeterministicModeSumsInRankOrderWhateverTheSplit) {
  for (int size : {2, 4}) {
    const std::string dir = FreshStoreDir(absl::StrCat("ordered", size));
    const std::vector<int> codes =
        RunRanks(size, [&](int rank) { return Ordered(rank, size, dir); });
    for (int r = 0; r < size; ++r) EXPECT_EQ(codes[r], 0) << "world " << size << " rank " << r;
  }
}

TEST(GlooCommunicatorTest, BadOptionsAreErrors) {
  GlooOptions o;
  o.rank = 2;
  o.world_size = 2;
  o.store_path = "/tmp";
  EXPECT_FALSE(CreateGlooCommunicator(o).ok());
  o.rank = 0;
  o.store_path = "";
  EXPECT_FALSE(CreateGlooCommunicator(o).ok());
  o.store_path = "/tmp";
  o.allgather_segment_bytes = -2;
  absl::StatusOr<std::unique_ptr<Communicator>> bad = CreateGlooCommunicator(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "allgather_segment_bytes"));
}

}  // namespace
}  // namespace overlap
