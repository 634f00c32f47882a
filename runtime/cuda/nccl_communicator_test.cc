// NcclCommunicator through the fake seam: ranks are threads sharing a FakeNcclWorld and a
// real TCP store, so the unique-id exchange, the poller, the abort key and NCCL's
// nonblocking calls run as they would on GPUs.
#include "runtime/cuda/nccl_communicator.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/comm/store_server.h"
#include "runtime/cuda/fake_gpu_api.h"

namespace overlap {
namespace {

// One rank's device: a fake api, its communication stream, device tensors.
struct Rank {
  explicit Rank(std::shared_ptr<FakeNcclWorld> world) : api({.nccl = std::move(world)}) {
    stream = *api.CreateStream(true);
  }
  Tensor Device(const std::vector<float>& values) {
    const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(float));
    void* p = *api.MallocAsync(bytes, stream);
    EXPECT_TRUE(api.MemcpyAsync(p, values.data(), bytes, stream).ok());
    auto s = Storage::Wrap(static_cast<std::byte*>(p), bytes, Device::kCuda,
                           [this, p] { api.FreeAsync(p, stream).IgnoreError(); });
    return *Tensor::FromStorage(s, DType::kFloat32, {static_cast<int64_t>(values.size())});
  }
  std::vector<float> Host(Tensor t) {
    std::vector<float> v(t.numel());
    EXPECT_TRUE(api.MemcpyAsync(v.data(), t.data<float>(), t.nbytes(), stream).ok());
    EXPECT_TRUE(api.StreamSynchronize(stream).ok());
    return v;
  }
  FakeGpuApi api;
  GpuStream* stream;
};

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *TcpStoreServer::Serve("127.0.0.1", 0);
    world_ = std::make_shared<FakeNcclWorld>();
  }
  std::shared_ptr<TcpStore> Connect(int rank, int n) {
    RendezvousInfo info;
    info.rank = rank;
    info.world_size = n;
    info.master_port = server_->port();
    info.agent_store = true;
    return *TcpStore::Connect(info, absl::Seconds(10));
  }
  // Runs body(rank, its device, its communicator) on n threads.
  void RunRanks(int n, absl::Duration timeout,
                std::function<void(int, Rank&, NcclCommunicator&)> body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        Rank dev(world_);
        NcclOptions o{.rank = r,
                      .world_size = n,
                      .timeout = timeout,
                      .api = &dev.api,
                      .store = Connect(r, n),
                      .stream = dev.stream};
        absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = CreateNcclCommunicator(o);
        ASSERT_TRUE(comm.ok()) << comm.status();
        body(r, dev, **comm);
        (*comm)->Shutdown().IgnoreError();
        EXPECT_TRUE(dev.api.violations().empty()) << absl::StrJoin(dev.api.violations(), "\n");
        EXPECT_EQ(dev.api.device_synchronizations(), 0);
      });
    }
    for (auto& t : threads) t.join();
  }
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<FakeNcclWorld> world_;
};

TEST_F(NcclCommunicatorTest, CollectivesAndGroups) {
  RunRanks(3, absl::Seconds(10), [](int r, Rank& dev, NcclCommunicator& comm) {
    Tensor x = dev.Device({float(r), float(r + 10)});
    Tensor all = dev.Device(std::vector<float>(6));
    Tensor mine = dev.Device({0});
    Tensor six = dev.Device({1, 2, 3, 4, 5, 6});
    ASSERT_TRUE(comm.AllGather(x, all)->Wait(absl::Seconds(5)).ok());
    EXPECT_EQ(dev.Host(all), (std::vector<float>{0, 10, 1, 11, 2, 12}));
    // A bucket of two reduce-scatters in one group: both complete.
    Tensor six2 = dev.Device({1, 1, 1, 1, 1, 1});
    Tensor a = dev.Device({0, 0}), b = dev.Device({0, 0});
    ASSERT_TRUE(comm.GroupStart().ok());
    auto w1 = comm.ReduceScatter(six, a);
    auto w2 = comm.ReduceScatter(six2, b);
    ASSERT_TRUE(comm.GroupEnd().ok());
    ASSERT_TRUE(w1->Wait(absl::Seconds(5)).ok());
    ASSERT_TRUE(w2->Wait(absl::Seconds(5)).ok());
    EXPECT_NE(NcclWorkEvent(*w1), nullptr);
    EXPECT_EQ(dev.Host(a), (std::vector<float>{float(3 * (2 * r + 1)), float(3 * (2 * r + 2))}));
    EXPECT_EQ(dev.Host(b), (std::vector<float>{3, 3}));
    Tensor v = dev.Device({float(r + 1)});
    ASSERT_TRUE(comm.AllReduce(v)->Wait(absl::Seconds(5)).ok());
    EXPECT_EQ(dev.Host(v), std::vector<float>{6});
    Tensor root = dev.Device({float(r * 7)});
    ASSERT_TRUE(comm.Broadcast(root, 2)->Wait(absl::Seconds(5)).ok());
    EXPECT_EQ(dev.Host(root), std::vector<float>{14});
    ASSERT_TRUE(comm.Barrier()->Wait(absl::Seconds(5)).ok());
    EXPECT_TRUE(comm.status().ok());
    // Host memory is refused with a clear error, before NCCL sees it.
    Allocator host;
    Tensor h = *Tensor::Empty(host, DType::kFloat32, {2});
    absl::Status s = comm.AllReduce(h)->Wait(absl::Seconds(1));
    EXPECT_NE(s.message().find("NCCL needs device tensors"), std::string::npos) << s;
    (void)mine;
  });
}

// An asynchronous NCCL error on one rank aborts its communicator and, through the store,
// every other rank's, long before their deadline.
TEST_F(NcclCommunicatorTest, AnInjectedErrorAbortsEveryRank) {
  world_->InjectError(1, /*seq=*/1, "injected: NET/IB link down");
  std::vector<absl::Status> got(3);
  std::vector<double> seconds(3);
  RunRanks(3, absl::Seconds(30), [&](int r, Rank& dev, NcclCommunicator& comm) {
    Tensor x = dev.Device({1, 2});
    ASSERT_TRUE(comm.AllReduce(x)->Wait(absl::Seconds(5)).ok());
    const absl::Time start = absl::Now();
    got[r] = comm.AllReduce(x)->Wait(absl::Seconds(25));
    // Later operations fail at once with the same reason.
    EXPECT_FALSE(comm.AllReduce(x)->Wait(absl::Seconds(1)).ok());
    seconds[r] = absl::ToDoubleSeconds(absl::Now() - start);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(got[r].ok()) << "rank " << r;
    EXPECT_NE(got[r].message().find("injected: NET/IB link down"), std::string::npos)
        << "rank " << r << ": " << got[r];
    EXPECT_LT(seconds[r], 5) << "rank " << r;
  }
  EXPECT_NE(got[1].message().find("ncclCommGetAsyncError"), std::string::npos) << got[1];
  EXPECT_NE(got[0].message().find("aborted by rank 1"), std::string::npos) << got[0];
}

// A collective that never completes (a stuck network) misses its deadline on every rank;
// the first to notice aborts and tells the others.
TEST_F(NcclCommunicatorTest, AHungCollectiveEndsAtTheDeadline) {
  world_->InjectHang(/*seq=*/0);
  std::vector<absl::Status> got(2);
  std::vector<double> seconds(2);
  RunRanks(2, absl::Seconds(1), [&](int r, Rank& dev, NcclCommunicator& comm) {
    Tensor x = dev.Device({1});
    const absl::Time start = absl::Now();
    got[r] = comm.AllReduce(x)->Wait(absl::Seconds(20));
    seconds[r] = absl::ToDoubleSeconds(absl::Now() - start);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(got[r].message().find("did not complete within 1s"), std::string::npos)
        << "rank " << r << ": " << got[r];
    EXPECT_LT(seconds[r], 3) << "rank " << r;
    EXPECT_GE(seconds[r], 0.9) << "rank " << r;
  }
}

TEST_F(NcclCommunicatorTest, ARankThatNeverJoinsIsNamedByTheDeadline) {
  Rank dev(world_);
  NcclOptions o{.rank = 1,
                .world_size = 2,
                .timeout = absl::Milliseconds(300),
                .api = &dev.api,
                .store = Connect(1, 2),
                .stream = dev.stream};
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = CreateNcclCommunicator(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find("no unique id from rank 0"), std::string::npos)
      << comm.status();
}

}  // namespace
}  // namespace overlap
