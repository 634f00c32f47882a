// The TCP store and torchrun's variables: ranks (forked, 127.0.0.1) meet through rank 0's
// store, connect Gloo through it and allreduce; the start-up check names a rank that runs a
// different program; a missing store is an error within the timeout.
#include "runtime/tcp_store.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/gloo_communicator.h"
#include "runtime/testing/ranks.h"

namespace overlap {
namespace {

// A port nobody listens on now (bound to 0, then released).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(TcpStoreTest, RanksMeetThroughTorchrunsVariablesAndAllreduce) {
  const int port = FreePort();
  const std::vector<int> codes = RunRanks(3, [&](int rank) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
    if (!info.ok() || info->rank != rank || info->local_world_size != 3) return 1;
    absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(*info, absl::Seconds(20));
    if (!store.ok()) return 2;
    if (!CheckSameProgram(**store, rank, 3, "graphs-v1", absl::Seconds(20)).ok()) return 3;
    GlooOptions o;
    o.rank = rank;
    o.size = 3;
    o.store = *store;
    absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(o);
    if (!comm.ok()) return 4;
    Allocator alloc;
    Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {3});
    for (int i = 0; i < 3; ++i) t.data<float>()[i] = rank + i;
    if (!(*comm)->AllReduce(t)->Wait(absl::Seconds(20)).ok()) return 5;
    for (int i = 0; i < 3; ++i) {
      if (t.data<float>()[i] != 3 + 3 * i) return 6;
    }
    // Rank 0 serves the store: it leaves last.
    if (!(*comm)->Barrier()->Wait(absl::Seconds(20)).ok()) return 7;
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpStoreTest, TheStartUpCheckNamesTheRankThatDiffers) {
  const int port = FreePort();
  const std::vector<int> codes = RunRanks(3, [&](int rank) {
    RendezvousInfo info;
    info.rank = rank;
    info.world_size = 3;
    info.master_port = port;
    absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(info, absl::Seconds(20));
    if (!store.ok()) return 2;
    absl::Status s =
        CheckSameProgram(**store, rank, 3, rank == 2 ? "other" : "same", absl::Seconds(20));
    if (s.ok() || !absl::StrContains(s.message(), "rank 2 runs a different program")) return 3;
    (*store)->Set(absl::StrCat("done/", rank), "1").IgnoreError();
    if (rank == 0) {  // the server leaves last
      for (int r = 1; r < 3; ++r) {
        if (!(*store)->Get(absl::StrCat("done/", r), absl::Seconds(20)).ok()) return 4;
      }
    }
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpStoreTest, MissingVariablesAndAbsentStoresAreErrors) {
  unsetenv("RANK");
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "RANK"));
  RendezvousInfo alone;
  alone.rank = 1;
  alone.world_size = 2;
  alone.master_port = FreePort();
  absl::StatusOr<std::shared_ptr<TcpStore>> store =
      TcpStore::Connect(alone, absl::Milliseconds(300));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace overlap
