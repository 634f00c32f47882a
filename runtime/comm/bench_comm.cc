#include "runtime/comm/bench_comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/size.h"
#include "graph/status_macros.h"

namespace overlap {

absl::string_view CollectiveName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

namespace {

double BusFactor(CollectiveKind k, int world) {
  const double p = world;
  return (k == CollectiveKind::kAllreduce ? 2.0 : 1.0) * (p - 1) / p;
}

}  // namespace

absl::StatusOr<std::vector<BenchRow>> BenchCollectives(Communicator& comm,
                                                       const BenchOptions& options) {
  const int world = comm.size();
  std::vector<BenchRow> rows;
  Allocator alloc;
  Tensor slowest;
  OVERLAP_ASSIGN_OR_RETURN(slowest, Tensor::Empty(alloc, DType::kFloat64, {1}));
  for (CollectiveKind kind :
       {CollectiveKind::kAllreduce, CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}) {
    for (int64_t bytes : options.sizes) {
      const int64_t n = bytes / 4;
      if (n <= 0 || n % world != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("size ", bytes, " is not a multiple of 4 x ", world, " bytes"));
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty(alloc, DType::kFloat32, {n}));
      OVERLAP_ASSIGN_OR_RETURN(Tensor part, Tensor::Empty(alloc, DType::kFloat32, {n / world}));
      auto issue = [&]() -> std::shared_ptr<Work> {
        switch (kind) {
          case CollectiveKind::kAllreduce:
            return comm.AllReduce(full);
          case CollectiveKind::kAllgather:
            return comm.AllGather(part, full);
          case CollectiveKind::kReduceScatter:
            return comm.ReduceScatter(full, part);
        }
        return nullptr;
      };
      int64_t iters =
          std::clamp<int64_t>(options.bytes_per_size / std::max<int64_t>(bytes, 1), 2, 50);
      const auto warm_start = std::chrono::steady_clock::now();
      OVERLAP_RETURN_IF_ERROR(issue()->Wait(options.timeout));  // warm-up
      if (options.seconds_per_size != absl::InfiniteDuration()) {
        OVERLAP_ASSIGN_OR_RETURN(Tensor warm, Tensor::Empty(alloc, DType::kFloat64, {world}));
        slowest.data<double>()[0] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count();
        OVERLAP_RETURN_IF_ERROR(comm.AllGather(slowest, warm)->Wait(options.timeout));
        double w = 0;
        for (int r = 0; r < world; ++r) w = std::max(w, warm.data<double>()[r]);
        const double budget = absl::ToDoubleSeconds(options.seconds_per_size);
        if (w > 0) iters = std::clamp<int64_t>(std::min<double>(iters, budget / w), 2, iters);
      }
      OVERLAP_RETURN_IF_ERROR(comm.Barrier()->Wait(options.timeout));
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < iters; ++i) OVERLAP_RETURN_IF_ERROR(issue()->Wait(options.timeout));
      const double mine =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
      // The slowest rank's time (every rank's, gathered).
      OVERLAP_ASSIGN_OR_RETURN(Tensor times, Tensor::Empty(alloc, DType::kFloat64, {world}));
      slowest.data<double>()[0] = mine;
      OVERLAP_RETURN_IF_ERROR(comm.AllGather(slowest, times)->Wait(options.timeout));
      double t = 0;
      for (int r = 0; r < world; ++r) t = std::max(t, times.data<double>()[r]);
      BenchRow row;
      row.kind = kind;
      row.bytes = bytes;
      row.iterations = iters;
      row.seconds = t;
      row.algbw = t > 0 ? bytes / t : 0;
      row.busbw = row.algbw * BusFactor(kind, world);
      rows.push_back(row);
    }
  }
  return rows;
}

absl::StatusOr<CollectiveModel> FitCollectiveModel(const std::vector<BenchRow>& rows, int world) {
  CollectiveModel m;
  m.world_size = world;
  for (CollectiveKind kind :
       {CollectiveKind::kAllreduce, CollectiveKind::kAllgather, CollectiveKind::kReduceScatter}) {
    // t = a + b x, x = factor * bytes; busbw = 1 / b. The bandwidth from the large sizes
    // (x at least 1/64 of the largest, and at least the two largest), by least squares:
    // there the bytes decide the time. The latency is the median over every size of what
    // the bandwidth leaves (t - b x): a small collective's few noisy milliseconds set it,
    // and cannot pull the bandwidth. A least squares of the relative error over all sizes
    // let two noisy kilobyte sizes overstate a 400 Mbit/s link's bandwidth by 19% (the
    // megabytes' time the model exists for); a plain one over all sizes let the largest
    // decide the latency, 0 where a small collective took milliseconds.
    std::vector<std::pair<double, double>> points;  // (x, t), ascending x
    for (const BenchRow& r : rows) {
      if (r.kind == kind) points.emplace_back(BusFactor(kind, world) * r.bytes, r.seconds);
    }
    const int n = static_cast<int>(points.size());
    if (n < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("fitting ", CollectiveName(kind), " needs at least two sizes"));
    }
    std::sort(points.begin(), points.end());
    double s0 = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; ++i) {
      const auto [x, t] = points[i];
      if (i < n - 2 && x < points.back().first / 64) continue;
      s0 += 1;
      sx += x;
      sy += t;
      sxx += x * x;
      sxy += x * t;
    }
    const double det = s0 * sxx - sx * sx;
    double b = det > 0 ? (s0 * sxy - sx * sy) / det : 0;
    if (!(b > 0)) b = 1e-12;  // flat times: bandwidth effectively unbounded
    std::vector<double> left;
    for (const auto& [x, t] : points) left.push_back(t - b * x);
    std::sort(left.begin(), left.end());
    double a = n % 2 == 1 ? left[n / 2] : (left[n / 2 - 1] + left[n / 2]) / 2;
    if (a < 0) a = 0;
    CollectiveModel::Fit fit{a, 1.0 / b};
    if (kind == CollectiveKind::kAllreduce) {
      m.allreduce = fit;
      m.latency_s = fit.latency_s;
      m.bandwidth_bytes_per_s = fit.bandwidth_bytes_per_s;
    } else if (kind == CollectiveKind::kAllgather) {
      m.allgather = fit;
    } else {
      m.reduce_scatter = fit;
    }
  }
  return m;
}

absl::StatusOr<std::vector<int64_t>> ParseSizeRange(absl::string_view range, int64_t multiple) {
  std::vector<std::string> ends = absl::StrSplit(range, "..");
  if (ends.size() > 2 || ends.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sizes '", range, "': expected LO..HI"));
  }
  OVERLAP_ASSIGN_OR_RETURN(const int64_t lo, ParseSize(ends[0]));
  OVERLAP_ASSIGN_OR_RETURN(const int64_t hi, ParseSize(ends.size() == 2 ? ends[1] : ends[0]));
  if (lo <= 0 || hi < lo || hi > (int64_t{1} << 34)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sizes '", range, "': need 0 < LO <= HI <= 16 GiB"));
  }
  std::vector<int64_t> sizes;
  for (int64_t s = lo; s <= hi; s *= 2) {
    sizes.push_back((s + multiple - 1) / multiple * multiple);
  }
  return sizes;
}

double MemcpyBandwidth(int64_t bytes) {
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 2, 1000));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    std::memcpy(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes);
  }
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return t > 0 ? bytes / t : 0;
}

}  // namespace overlap
