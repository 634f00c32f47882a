// GPU timed replay through the fake seam: the fake's vector clocks check that every buffer
// use is ordered by the two streams' events as the schedule says, that the host never
// synchronises the device, and the executor's count of graph values is the simulator's.
#include "runtime/cuda/gpu_replay.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/comm/store_server.h"
#include "runtime/cuda/fake_gpu_api.h"
#include "schedule/scheduler_registry.h"
#include "schedule/testing/zero3_models.h"

namespace overlap {
namespace {

Graph Scheduled(const std::string& model, GraphKind kind, const std::string& scheduler) {
  Graph g = Zero3AotGraph(model, kind, Preset::kTiny);
  absl::StatusOr<ScheduleReport> s = RunScheduler(scheduler, &g);
  EXPECT_TRUE(s.ok()) << s.status();
  return g;
}

TEST(GpuReplayTest, OneDeviceMatchesTheSimulatorOnEveryTinyModel) {
  for (const std::string& model : ModelNames()) {
    if (model == "random") continue;
    for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
      const Graph g = Scheduled(model, kind, "lookahead");
      FakeGpuApi api;
      GpuStream* compute = *api.CreateStream(false);
      absl::StatusOr<GpuReplayResult> r =
          GpuReplay(g, {.api = &api, .compute = compute}, {.time_scale = 0, .steps = 2});
      ASSERT_TRUE(r.ok()) << model << ": " << r.status();
      EXPECT_EQ(r->replay.peak_bytes, r->replay.simulated_peak_bytes) << model;
      EXPECT_EQ(r->step_s.size(), 2u);
      EXPECT_GE(r->pool_peak_bytes, r->replay.peak_bytes) << model;  // padding only
      EXPECT_TRUE(api.violations().empty()) << model << ":\n"
                                            << absl::StrJoin(api.violations(), "\n");
      EXPECT_EQ(api.device_synchronizations(), 0);
      EXPECT_EQ(api.live_bytes(), 0) << model << ": the replay leaked device memory";
    }
  }
}

// Ranks as threads, each with its own fake device, sharing a fake NCCL world and a store.
struct Job {
  std::unique_ptr<TcpStoreServer> server = *TcpStoreServer::Serve("127.0.0.1", 0);
  std::shared_ptr<FakeNcclWorld> world = std::make_shared<FakeNcclWorld>();

  // Replays `g` on `n` ranks; returns each rank's result and checks its device's trace.
  std::vector<absl::StatusOr<GpuReplayResult>> Run(const Graph& g, int n, const GpuReplayOptions& o,
                                                   std::vector<std::string>* violations) {
    std::vector<absl::StatusOr<GpuReplayResult>> results(n, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        FakeGpuApi api({.nccl = world});
        GpuStream* compute = *api.CreateStream(false);
        GpuStream* comm_stream = *api.CreateStream(true);
        RendezvousInfo info;
        info.rank = r;
        info.world_size = n;
        info.master_port = server->port();
        info.agent_store = true;
        auto comm = CreateNcclCommunicator({.rank = r,
                                            .world_size = n,
                                            .timeout = absl::Seconds(10),
                                            .api = &api,
                                            .store = *TcpStore::Connect(info, absl::Seconds(5)),
                                            .stream = comm_stream});
        ASSERT_TRUE(comm.ok()) << comm.status();
        results[r] = GpuReplay(g, {.api = &api, .compute = compute, .comm = comm->get()}, o);
        (*comm)->Shutdown().IgnoreError();
        static std::mutex mu;
        std::lock_guard<std::mutex> lock(mu);
        for (auto& v : api.violations()) violations->push_back(absl::StrCat("rank ", r, ": ", v));
        EXPECT_EQ(api.device_synchronizations(), 0);
        // The host waits only at the end of each step (both streams, once each), after the
        // residents are set up and once more after the last step.
        EXPECT_EQ(api.stream_synchronizations(), 2 * o.steps + 2) << "rank " << r;
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }
};

TEST(GpuReplayTest, TwoRanksOrderCollectivesByEventsOnly) {
  for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
    for (const char* scheduler : {"lookahead", "simple_prefetch", "fast_free"}) {
      const Graph g = Scheduled("gpt2", kind, scheduler);
      Job job;
      std::vector<std::string> violations;
      auto results = job.Run(g, 2, {.time_scale = 0, .steps = 2}, &violations);
      for (auto& r : results) {
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_GT(r->collectives, 0);
        EXPECT_EQ(r->replay.peak_bytes, r->replay.simulated_peak_bytes);
        EXPECT_GT(r->resident_bytes, 0);
      }
      EXPECT_TRUE(violations.empty()) << scheduler << ":\n" << absl::StrJoin(violations, "\n");
    }
  }
}

// The check can fail: without dc.wait_allgather's event, compute reads gathered parameters
// that the communication stream writes, unordered.
TEST(GpuReplayTest, DroppingTheWaitEventsIsCaught) {
  const Graph g = Scheduled("gpt2", GraphKind::kForward, "lookahead");
  Job job;
  std::vector<std::string> violations;
  auto results = job.Run(g, 2, {.time_scale = 0, .debug_drop_waits = true}, &violations);
  for (auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(violations.empty());
  EXPECT_NE(violations[0].find("is not ordered after allgather"), std::string::npos)
      << violations[0];
}

}  // namespace
}  // namespace overlap
