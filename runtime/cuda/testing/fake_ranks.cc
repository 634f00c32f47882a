#include "runtime/cuda/testing/fake_ranks.h"

#include <memory>
#include <thread>

#include "runtime/comm/store_server.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/testing/parallel.h"
#include "runtime/testing/ranks.h"

namespace overlap {

std::vector<std::string> RunFakeNcclRanks(int size, const FakeRankBody& body) {
  std::vector<std::string> result(size);
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Serve("127.0.0.1", 0);
  if (!server.ok()) return std::vector<std::string>(size, std::string(server.status().message()));
  auto world = std::make_shared<FakeNcclWorld>();
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      FakeGpuApi api({.nccl = world});
      absl::StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::Create(&api, 0);
      RendezvousInfo info;
      info.rank = r;
      info.world_size = size;
      info.master_port = (*server)->port();
      info.agent_store = true;
      absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(info, absl::Seconds(5));
      if (!dev.ok() || !store.ok()) {
        result[r] = "no device or no store";
        return;
      }
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
          CreateNcclCommunicator({.rank = r,
                                  .world_size = size,
                                  .timeout = absl::Seconds(20),
                                  .api = &api,
                                  .store = *store,
                                  .stream = (*dev)->comm(),
                                  .after = (*dev)->compute()});
      if (!comm.ok()) {
        result[r] = std::string(comm.status().message());
        return;
      }
      result[r] = body(r, api, **dev, **comm);
      (*comm)->Shutdown().IgnoreError();
    });
  }
  for (auto& t : ranks) t.join();
  return result;
}

std::vector<int> RunFakeGlooRanks(int size, const std::string& name, const FakeRankBody& body) {
  const std::string dir = FreshStoreDir(name);
  return RunRanks(size, [&](int rank) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        TestCommunicator(rank, size, dir, /*deterministic=*/false, /*race=*/false);
    if (!comm.ok()) return Fail(rank, std::string(comm.status().message()), 3);
    FakeGpuApi api;
    absl::StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::Create(&api, 0);
    if (!dev.ok()) return Fail(rank, std::string(dev.status().message()), 3);
    const std::string diff = body(rank, api, **dev, **comm);
    return diff.empty() ? 0 : Fail(rank, diff, 4);
  });
}

}  // namespace overlap
