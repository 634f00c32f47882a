#include "schedule/budget.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/cost_model.h"
#include "graph/size.h"
#include "graph/text.h"

namespace overlap {
namespace {

// a * b, saturating at INT64_MAX (shapes in hand-written tables may be absurd).
int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? INT64_MAX : out;
}
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? INT64_MAX : out;
}

int64_t Elements(const Param& p) {
  if (p.has_shape) {
    int64_t n = 1;
    for (int64_t d : p.shape) n = SaturatingMul(n, std::max<int64_t>(d, 0));
    return n;
  }
  return p.bytes / DtypeBytes(p.has_dtype ? p.dtype : "float32");
}

}  // namespace

absl::StatusOr<RankState> PerRankState(const Graph& g, const StateOptions& options) {
  if (options.world_size < 1) return absl::InvalidArgumentError("world size must be >= 1");
  const int64_t world = options.world_size;
  const int64_t states = OptimizerStateTensors(options.optimizer);
  RankState s;
  absl::flat_hash_set<std::string> seen;  // storages counted
  for (const Param& p : g.params()) {
    if (!seen.insert(p.storage_key()).second) continue;
    const std::string dtype = p.has_dtype ? p.dtype : "float32";
    const int64_t shard = Elements(p) / world + (Elements(p) % world != 0);
    const int64_t bytes = SaturatingMul(shard, DtypeBytes(dtype));
    s.params = SaturatingAdd(s.params, bytes);
    if (!p.requires_grad) continue;
    s.grads = SaturatingAdd(s.grads, bytes);
    s.optimizer = SaturatingAdd(s.optimizer, SaturatingMul(shard, 4 * states));
    if (dtype == "float16" || dtype == "bfloat16") {
      s.master = SaturatingAdd(s.master, SaturatingMul(shard, 4));
    }
  }
  return s;
}

int64_t DefaultReserveBytes(int64_t device_bytes) {
  return (int64_t{512} << 20) + std::max<int64_t>(device_bytes, 0) / 20;
}

absl::StatusOr<MemoryBudget> DeviceMemoryBudget(const Graph& g, int64_t device_bytes,
                                                const StateOptions& options,
                                                std::optional<int64_t> reserve_bytes) {
  if (device_bytes < 0) return absl::InvalidArgumentError("device memory must be >= 0");
  if (reserve_bytes && *reserve_bytes < 0) {
    return absl::InvalidArgumentError("the reserve must be >= 0");
  }
  absl::StatusOr<RankState> state = PerRankState(g, options);
  if (!state.ok()) return state.status();
  MemoryBudget b;
  b.state_bytes = state->total();
  b.device_bytes = device_bytes;
  b.reserve_bytes = reserve_bytes.value_or(DefaultReserveBytes(device_bytes));
  const int64_t taken = SaturatingAdd(b.state_bytes, b.reserve_bytes);
  if (taken >= device_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device memory of ", FormatBytes(device_bytes), " leaves nothing for the step: per-rank ",
        "state ", FormatBytes(b.state_bytes), " (", OptimizerLabel(options.optimizer), ", ",
        options.world_size, " ranks) + reserve ", FormatBytes(b.reserve_bytes)));
  }
  b.budget_bytes = device_bytes - taken;
  return b;
}

absl::StatusOr<MemoryBudget> DirectMemoryBudget(const Graph& g, std::optional<int64_t> limit,
                                                const StateOptions& options) {
  absl::StatusOr<RankState> state = PerRankState(g, options);
  if (!state.ok()) return state.status();
  MemoryBudget b;
  b.state_bytes = state->total();
  b.budget_bytes = limit;
  return b;
}

absl::StatusOr<MemoryBudget> ResolveBudget(const BudgetRequest& request, const Graph& g) {
  if (request.budget_bytes && request.device_memory_bytes) {
    return absl::InvalidArgumentError(
        "a budget given directly and a device's memory both set the budget: give one");
  }
  if (request.reserve_bytes && !request.device_memory_bytes) {
    return absl::InvalidArgumentError(
        "a reserve applies only to a budget from the device's memory");
  }
  if (request.device_memory_bytes) {
    return DeviceMemoryBudget(g, *request.device_memory_bytes, request.state,
                              request.reserve_bytes);
  }
  return DirectMemoryBudget(g, request.budget_bytes, request.state);
}

std::string MemoryBudgetJsonFields(const MemoryBudget& b, int64_t peak_memory_bytes) {
  std::string out = absl::StrCat(", \"state_bytes\": ", b.state_bytes);
  if (b.device_bytes) {
    absl::StrAppend(&out, ", \"device_memory_bytes\": ", *b.device_bytes,
                    ", \"reserve_bytes\": ", b.reserve_bytes);
  }
  if (b.budget_bytes) {
    absl::StrAppend(&out, ", \"budget_bytes\": ", *b.budget_bytes,
                    ", \"memory_limit_bytes\": ", *b.budget_bytes,
                    ", \"feasible\": ", peak_memory_bytes <= *b.budget_bytes ? "true" : "false");
  }
  return out;
}

}  // namespace overlap
