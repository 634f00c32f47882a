#include "graph/cost_model.h"

#include <algorithm>

namespace overlap {

int64_t DtypeBytes(absl::string_view dtype) {
  if (dtype == "float32" || dtype == "int32" || dtype == "float") return 4;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16" || dtype == "half") return 2;
  if (dtype == "float64" || dtype == "int64" || dtype == "double" || dtype == "long") return 8;
  if (dtype == "int8" || dtype == "uint8" || dtype == "bool" || dtype == "float8_e4m3fn" ||
      dtype == "float8_e5m2") {
    return 1;
  }
  return 4;
}

double CostModel::KernelTime(double flops, double bytes, absl::string_view dtype) const {
  const double peak = DtypeBytes(dtype) <= 2 ? spec_.peak_flops_16bit : spec_.peak_flops_32bit;
  return std::max(flops / peak, bytes / spec_.memory_bandwidth);
}

double CollectiveModel::Allgather(int64_t bytes) const {
  if (bytes <= 0 || world_size <= 1) return 0;
  const double p = world_size;
  return latency_s + (p - 1) / p * static_cast<double>(bytes) / bandwidth_bytes_per_s;
}

double CollectiveModel::Allreduce(int64_t bytes) const {
  if (bytes <= 0 || world_size <= 1) return 0;
  const double p = world_size;
  return latency_s + 2 * (p - 1) / p * static_cast<double>(bytes) / bandwidth_bytes_per_s;
}

bool CollectiveModel::Valid() const {
  return world_size >= 1 && latency_s >= 0 && bandwidth_bytes_per_s > 0;
}

}  // namespace overlap
