// gpu_benchmark: the device checks of tools/gpu_check.sh, one stage per command.
//
//   gpu_benchmark probe     CUDA runtime, driver and NCCL versions, device 0; exit 0 when
//                           the device is usable, 3 (saying why) when not
//   gpu_benchmark nccl      NCCL sweep at world size 1 (one GPU): allreduce, allgather,
//                           reduce-scatter from 1 MiB to 256 MiB, algorithm bandwidth
//   gpu_benchmark overlap   timed replay of gpt2's ZeRO-3 graphs (default preset, lookahead
//                           schedule) on the GPU: step time with compute and collectives,
//                           compute only, collectives only, and the hidden fraction
//                           (compute + comm - both) / comm
// Every line of results starts with the stage's name, so a partial run still parses.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "graph/status_macros.h"
#include "runtime/cuda/cuda_gpu_api.h"
#include "runtime/cuda/gpu_replay.h"
#include "runtime/cuda/nccl_communicator.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

constexpr int kUnusable = 3;

int Probe(GpuApi& api) {
  absl::StatusOr<GpuInfo> info = api.Probe();
  if (!info.ok()) {
    std::printf("probe error %s\n", std::string(info.status().message()).c_str());
    return 1;
  }
  std::printf("probe cuda_runtime %s\n", CudaVersionString(info->runtime_version).c_str());
  std::printf("probe driver %s\n",
              info->driver_version > 0 ? CudaVersionString(info->driver_version).c_str() : "none");
  std::printf("probe nccl %s\n", NcclVersionString(info->nccl_version).c_str());
  std::printf("probe devices %d\n", info->device_count);
  if (info->device_count > 0) {
    std::printf("probe device0 %s, %.1f GiB, compute capability %d.%d\n", info->device_name.c_str(),
                info->device_memory_bytes / 1073741824.0, info->compute_major, info->compute_minor);
  }
  absl::Status usable = api.CheckUsable(0);
  if (!usable.ok()) {
    std::printf("probe unusable %s\n", std::string(usable.message()).c_str());
    return kUnusable;
  }
  std::printf("probe usable yes\n");
  return 0;
}

// One device, its two streams and a world-size-1 NCCL communicator.
struct OpenDevice {
  static absl::StatusOr<OpenDevice> Open(GpuApi& api) {
    OpenDevice d;
    d.api = &api;
    OVERLAP_RETURN_IF_ERROR(api.CheckUsable(0));
    OVERLAP_RETURN_IF_ERROR(api.SetDevice(0));
    OVERLAP_ASSIGN_OR_RETURN(d.compute, api.CreateStream(false));
    OVERLAP_ASSIGN_OR_RETURN(d.comm_stream, api.CreateStream(true));
    NcclOptions o;
    o.api = &api;
    o.stream = d.comm_stream;
    OVERLAP_ASSIGN_OR_RETURN(d.comm, CreateNcclCommunicator(o));
    return d;
  }
  GpuApi* api = nullptr;
  GpuStream* compute = nullptr;
  GpuStream* comm_stream = nullptr;
  std::shared_ptr<NcclCommunicator> comm;
};

absl::Status Nccl(GpuApi& api) {
  OVERLAP_ASSIGN_OR_RETURN(OpenDevice d, OpenDevice::Open(api));
  std::printf("nccl world_size 1 (one GPU: NCCL copies on the device; bus bandwidth needs >= 2)\n");
  std::printf("nccl %-15s %12s %10s %12s\n", "op", "bytes", "time_us", "algbw_GB/s");
  for (int64_t bytes = int64_t{1} << 20; bytes <= int64_t{256} << 20; bytes *= 4) {
    OVERLAP_ASSIGN_OR_RETURN(void* a, api.MallocAsync(bytes, d.comm_stream));
    OVERLAP_ASSIGN_OR_RETURN(void* b, api.MallocAsync(bytes, d.comm_stream));
    auto tensor = [&](void* p) {
      return *Tensor::FromStorage(
          Storage::Wrap(static_cast<std::byte*>(p), bytes, Device::kCuda, nullptr), DType::kFloat32,
          {bytes / 4});
    };
    for (const char* op : {"allreduce", "allgather", "reduce_scatter"}) {
      constexpr int kIters = 20;
      absl::Time start;
      for (int i = -2; i < kIters; ++i) {  // two warm-up iterations
        if (i == 0) start = absl::Now();
        std::shared_ptr<Work> w;
        if (std::strcmp(op, "allreduce") == 0) {
          w = d.comm->AllReduce(tensor(a));
        } else if (std::strcmp(op, "allgather") == 0) {
          w = d.comm->AllGather(tensor(a), tensor(b));
        } else {
          w = d.comm->ReduceScatter(tensor(a), tensor(b));
        }
        OVERLAP_RETURN_IF_ERROR(w->Wait(absl::Seconds(30)));
      }
      const double s = absl::ToDoubleSeconds(absl::Now() - start) / kIters;
      std::printf("nccl %-15s %12lld %10.1f %12.2f\n", op, static_cast<long long>(bytes), s * 1e6,
                  bytes / s / 1e9);
      std::fflush(stdout);
    }
    OVERLAP_RETURN_IF_ERROR(api.FreeAsync(a, d.comm_stream));
    OVERLAP_RETURN_IF_ERROR(api.FreeAsync(b, d.comm_stream));
  }
  return d.comm->Shutdown();
}

absl::Status Overlap(GpuApi& api) {
  OVERLAP_ASSIGN_OR_RETURN(OpenDevice d, OpenDevice::Open(api));
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  OVERLAP_ASSIGN_OR_RETURN(Graph model, BuildModel("gpt2", mo, Preset::kDefault));
  OVERLAP_ASSIGN_OR_RETURN(AotPair pair, BuildAotPair(model));
  std::printf("overlap %-9s %10s %10s %10s %8s %12s %12s %12s\n", "graph", "both_ms", "compute_ms",
              "comm_ms", "hidden", "peak", "simulated", "pool_peak");
  for (GraphKind kind : {GraphKind::kForward, GraphKind::kBackward}) {
    Graph g = kind == GraphKind::kForward ? pair.forward : pair.backward;
    OVERLAP_RETURN_IF_ERROR(Zero3Insertion(kind).Run(&g).status());
    OVERLAP_RETURN_IF_ERROR(RunScheduler("lookahead", &g).status());
    GpuTarget t{&api, d.compute, d.comm.get()};
    auto median = [&](GpuReplayOptions o) -> absl::StatusOr<GpuReplayResult> {
      o.steps = 5;
      OVERLAP_ASSIGN_OR_RETURN(GpuReplayResult r, GpuReplay(g, t, o));
      std::vector<double> s(r.step_s.begin() + 1, r.step_s.end());  // the first warms up
      std::sort(s.begin(), s.end());
      r.step_s = {s[s.size() / 2]};
      return r;
    };
    OVERLAP_ASSIGN_OR_RETURN(GpuReplayResult both, median({}));
    OVERLAP_ASSIGN_OR_RETURN(GpuReplayResult compute, median({.communicate = false}));
    OVERLAP_ASSIGN_OR_RETURN(GpuReplayResult comm, median({.compute = false}));
    const double b = both.step_s[0], c = compute.step_s[0], m = comm.step_s[0];
    const double hidden = m > 0 ? std::clamp((c + m - b) / m, 0.0, 1.0) : 1.0;
    std::printf("overlap %-9s %10.3f %10.3f %10.3f %7.1f%% %12lld %12lld %12lld\n",
                kind == GraphKind::kForward ? "forward" : "backward", b * 1e3, c * 1e3, m * 1e3,
                100 * hidden, static_cast<long long>(both.replay.peak_bytes),
                static_cast<long long>(both.replay.simulated_peak_bytes),
                static_cast<long long>(both.pool_peak_bytes));
    std::fflush(stdout);
  }
  return d.comm->Shutdown();
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  const std::string stage = argc > 1 ? argv[1] : "";
  std::unique_ptr<overlap::GpuApi> api = overlap::CudaGpuApi();
  if (stage == "probe") return overlap::Probe(*api);
  absl::Status s;
  if (stage == "nccl") {
    s = overlap::Nccl(*api);
  } else if (stage == "overlap") {
    s = overlap::Overlap(*api);
  } else {
    std::fprintf(stderr, "usage: gpu_benchmark probe|nccl|overlap\n");
    return 2;
  }
  if (!s.ok()) {
    std::printf("%s error %s\n", stage.c_str(), std::string(s.message()).c_str());
    return absl::IsFailedPrecondition(s) ? overlap::kUnusable : 1;
  }
  return 0;
}
