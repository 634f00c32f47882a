// overlap bench-comm: collective bandwidths across local ranks (Gloo over loopback TCP), as
// nccl-tests prints them, and the fitted per-collective model the schedulers accept
// (--collective-model). runtime/comm/bench_comm.h defines the figures.
#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/cost_model.h"
#include "graph/output_file.h"
#include "graph/size.h"
#include "runtime/comm/bench_comm.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/core/tensor.h"
#include "runtime/job/launcher.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"nproc", 0, "N", "ranks on this machine (default 2)"},
    {"sizes", 0, "LO..HI", "tensor sizes, doubling (default 4KiB..64MiB)"},
    {"save", 0, "FILE", "write the fitted model (for --collective-model)"},
    {"timeout", 0, "SECONDS", "per collective (default 120)"},
    {"deterministic", 0, "", "time the deterministic mode (sums in rank order)"},
    {"as-rank", 0, "",
     "run as one rank, from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (what --nproc "
     "starts; across hosts: one per host, tools/cluster.sh)"},
};

int AsRank(Invocation& in, const std::string& range, absl::Duration timeout) {
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  if (!info.ok()) {
    in.AddUsageError(std::string(info.status().message()));
    return in.UsageError();
  }
  absl::StatusOr<std::vector<int64_t>> sizes = ParseSizeRange(range, 4 * info->world_size);
  if (!sizes.ok()) return in.BadInput(sizes.status());
  absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(*info, timeout);
  if (!store.ok()) return in.BadInput(store.status());
  GlooOptions go;
  go.rank = info->rank;
  go.world_size = info->world_size;
  go.store = *store;
  go.hostname = ListenAddress(*info);  // ranks on other hosts (tools/cluster.sh)
  go.key_prefix = "bench";
  go.timeout = timeout;
  go.deterministic = in.Switch("deterministic");
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(go);
  if (!comm.ok()) return in.BadInput(comm.status());
  BenchOptions bo;
  bo.sizes = *sizes;
  bo.timeout = timeout;
  absl::StatusOr<std::vector<BenchRow>> rows = BenchCollectives(**comm, bo);
  if (!rows.ok()) return in.BadInput(rows.status());
  if (info->rank != 0) return kExitOk;
  const int world = info->world_size;
  std::fprintf(in.out(), "# %d ranks, Gloo over TCP (%s), float32; times are the slowest rank's\n",
               world, go.hostname == "127.0.0.1" ? "loopback" : "across hosts");
  std::fprintf(in.out(), "#%14s %15s %6s %11s %11s %11s %11s\n", "size", "collective", "iters",
               "time(us)", "algbw(GB/s)", "busbw(GB/s)", "memcpy(GB/s)");
  for (const BenchRow& r : *rows) {
    std::fprintf(in.out(), " %14lld %15s %6lld %11.1f %11.3f %11.3f %11.3f\n",
                 static_cast<long long>(r.bytes), std::string(CollectiveName(r.kind)).c_str(),
                 static_cast<long long>(r.iterations), r.seconds * 1e6, r.algbw / 1e9,
                 r.busbw / 1e9, MemcpyBandwidth(r.bytes) / 1e9);
  }
  if (bo.sizes.size() < 2) {  // measured and printed: a fit needs two sizes
    std::fprintf(in.out(), "(one size: no latency / bandwidth fit; give a range for one)\n");
    return kExitOk;
  }
  absl::StatusOr<CollectiveModel> m = FitCollectiveModel(*rows, world);
  if (!m.ok()) return in.BadInput(m.status());
  for (auto [name, fit] :
       {std::pair{"allreduce", m->allreduce}, std::pair{"allgather", m->allgather},
        std::pair{"reduce_scatter", m->reduce_scatter}}) {
    std::fprintf(in.out(), "fit %-15s latency %8.1f us, bus bandwidth %.3f GB/s\n", name,
                 fit.latency_s * 1e6, fit.bandwidth_bytes_per_s / 1e9);
  }
  if (std::optional<std::string> path = in.Path("save")) {
    absl::Status w = WriteTextFile(in, *path, CollectiveModelJson(*m));
    if (!w.ok()) return in.BadInput(w);
    std::fprintf(in.out(), "wrote the model to %s (--collective-model %s)\n", path->c_str(),
                 path->c_str());
  }
  return kExitOk;
}

int Run(Invocation& in) {
  const int64_t nproc = in.Int("nproc", 2, 64, 2);
  const absl::Duration timeout = absl::Seconds(in.Positive("timeout", 86400, 120));
  const std::string range = in.String("sizes").value_or("4KiB..64MiB");
  if (in.has_usage_error()) return in.UsageError();
  if (in.Switch("as-rank")) return AsRank(in, range, timeout);
  const int world = static_cast<int>(nproc);
  absl::StatusOr<std::vector<int64_t>> sizes = ParseSizeRange(range, 4 * world);
  if (!sizes.ok()) {
    in.AddUsageError(std::string(sizes.status().message()));
    return in.UsageError();
  }
  const std::optional<std::string> save = in.Path("save");
  if (save && sizes->size() < 2) {
    in.AddUsageError(absl::StrCat("--save writes the fit, which needs two sizes or more; --sizes ",
                                  range, " is one"));
    return in.UsageError();
  }
  if (save) {
    if (absl::Status s = CheckOutputPath(*save); !s.ok()) return in.BadInput(s);
  }
  // Each rank holds a size's full tensor and its 1/N part (rank 0 also memcpy's two
  // buffers), plus the process and Gloo's own buffers: refused before any rank starts.
  const int64_t largest = *std::max_element(sizes->begin(), sizes->end());
  const int64_t per_rank = 4 * largest + (int64_t{64} << 20);
  const int64_t available = AvailableMemoryBytes();
  if (per_rank > available / world) {
    return in.BadInput(absl::ResourceExhaustedError(absl::StrCat(
        "the largest size, ", FormatBytes(largest), ", needs about ", FormatBytes(per_rank),
        " per rank, ", FormatBytes(per_rank * world), " for ", world, " ranks: more than the ",
        FormatBytes(available), " available (a smaller --sizes range)")));
  }
  LaunchOptions lo;
  lo.nproc = world;
  lo.argv = {WorkerExecutable(),
             "bench-comm",
             "--as-rank",
             "--sizes",
             range,
             "--timeout",
             absl::StrCat(absl::ToDoubleSeconds(timeout))};
  if (in.Switch("deterministic")) lo.argv.push_back("--deterministic");
  if (save) {
    lo.argv.push_back("--save");
    lo.argv.push_back(*save);
  }
  lo.grace = absl::Seconds(10);
  std::fflush(in.out());
  absl::StatusOr<LaunchResult> r = Launch(lo);
  if (!r.ok()) return in.BadInput(r.status());
  if (r->exit_code != 0) {
    return in.BadInput(absl::UnavailableError(absl::StrCat("the benchmark failed: ", r->message)));
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& BenchCommCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "bench-comm";
    s.synopsis = "[--nproc N] [--sizes 4KiB..256MiB] [--save FILE]";
    s.summary = "measure allreduce, allgather and reduce-scatter; fit the cost model";
    s.description =
        "Starts N local ranks (Gloo over loopback TCP) and times allreduce, allgather and\n"
        "reduce-scatter of float32 tensors at each size, printing time, algorithm and bus\n"
        "bandwidth per size as nccl-tests does (busbw = algbw x (N-1)/N, x 2(N-1)/N for\n"
        "allreduce), memcpy's bandwidth beside them, and a least-squares latency and bus\n"
        "bandwidth per collective. --save writes that model for --collective-model.\n"
        "Sizes are rounded up to a multiple of 4 x N bytes (float32, split N ways).\n";
    s.flags = {kFlags};
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
