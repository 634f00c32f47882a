#include "graph/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace overlap {

std::optional<int64_t> KnownDtypeBytes(absl::string_view dtype) {
  static const auto* const kSizes = new absl::flat_hash_map<absl::string_view, int64_t>{
      {"float64", 8},
      {"double", 8},
      {"float32", 4},
      {"float", 4},
      {"float16", 2},
      {"half", 2},
      {"bfloat16", 2},
      {"complex32", 4},
      {"chalf", 4},
      {"complex64", 8},
      {"cfloat", 8},
      {"complex128", 16},
      {"cdouble", 16},
      {"uint8", 1},
      {"int8", 1},
      {"int16", 2},
      {"short", 2},
      {"int32", 4},
      {"int", 4},
      {"int64", 8},
      {"long", 8},
      {"uint16", 2},
      {"uint32", 4},
      {"uint64", 8},
      {"bool", 1},
      {"qint8", 1},
      {"quint8", 1},
      {"qint32", 4},
      {"quint4x2", 1},
      {"quint2x4", 1},
      {"float8_e4m3fn", 1},
      {"float8_e5m2", 1},
      {"float8_e4m3fnuz", 1},
      {"float8_e5m2fnuz", 1},
      {"float8_e8m0fnu", 1},
      {"float4_e2m1fn_x2", 1},
      {"bits8", 1},
      {"bits16", 2},
      {"bits1x8", 1},
      {"bits2x4", 1},
      {"bits4x2", 1},
      {"int1", 1},
      {"int2", 1},
      {"int3", 1},
      {"int4", 1},
      {"int5", 1},
      {"int6", 1},
      {"int7", 1},
      {"uint1", 1},
      {"uint2", 1},
      {"uint3", 1},
      {"uint4", 1},
      {"uint5", 1},
      {"uint6", 1},
      {"uint7", 1},
  };
  absl::string_view name = dtype;
  absl::ConsumePrefix(&name, "torch.");
  auto it = kSizes->find(name);
  if (it == kSizes->end()) return std::nullopt;
  return it->second;
}

int64_t DtypeBytes(absl::string_view dtype) { return KnownDtypeBytes(dtype).value_or(4); }

double CostModel::KernelTime(double flops, double bytes, absl::string_view dtype) const {
  const double peak = DtypeBytes(dtype) <= 2 ? spec_.peak_flops_16bit : spec_.peak_flops_32bit;
  return std::max(flops / peak, bytes / spec_.memory_bandwidth);
}

namespace {

// A ring collective moving `factor` x (p - 1) / p x bytes over the bus.
double Ring(const CollectiveModel& m, const CollectiveModel::Fit& fit, double factor,
            int64_t bytes) {
  if (bytes <= 0 || m.world_size <= 1) return 0;
  const double p = m.world_size;
  const bool own = fit.bandwidth_bytes_per_s > 0;
  const double latency = own ? fit.latency_s : m.latency_s;
  const double bandwidth = own ? fit.bandwidth_bytes_per_s : m.bandwidth_bytes_per_s;
  return latency + factor * (p - 1) / p * static_cast<double>(bytes) / bandwidth;
}

}  // namespace

double CollectiveModel::Allgather(int64_t bytes) const { return Ring(*this, allgather, 1, bytes); }
double CollectiveModel::ReduceScatter(int64_t bytes) const {
  return Ring(*this, reduce_scatter, 1, bytes);
}
double CollectiveModel::Allreduce(int64_t bytes) const { return Ring(*this, allreduce, 2, bytes); }

double CollectiveModel::HostCopy(int64_t bytes) const {
  if (bytes <= 0) return 0;
  return host_latency_s + static_cast<double>(bytes) / host_bandwidth_bytes_per_s;
}

double CollectiveModel::ComputeEnd(double now, double seconds, double comm_busy_until) const {
  const double slow = 1 + compute_slowdown;
  const double overlap = comm_busy_until - now;
  if (!(compute_slowdown > 0) || !(overlap > 0) || seconds <= 0) return now + seconds;
  if (seconds * slow <= overlap) return now + seconds * slow;
  return comm_busy_until + (seconds - overlap / slow);  // the rest after the collectives
}

bool CollectiveModel::Valid() const {
  for (const Fit* f : {&allgather, &reduce_scatter, &allreduce}) {
    if (!(f->latency_s >= 0) || !(f->bandwidth_bytes_per_s >= 0)) return false;
  }
  return world_size >= 1 && latency_s >= 0 && bandwidth_bytes_per_s > 0 && host_latency_s >= 0 &&
         host_bandwidth_bytes_per_s > 0 && compute_slowdown >= 0 && busy_start_s >= 0;
}

std::string CollectiveModelJson(const CollectiveModel& m) {
  std::string out = absl::StrFormat(
      "{\"format\": \"overlap-collective-model\", \"version\": 1, \"world_size\": %d,\n"
      " \"latency_s\": %.9g, \"bandwidth_bytes_per_s\": %.9g",
      m.world_size, m.latency_s, m.bandwidth_bytes_per_s);
  for (auto [name, fit] :
       {std::pair{"allgather", &m.allgather}, std::pair{"reduce_scatter", &m.reduce_scatter},
        std::pair{"allreduce", &m.allreduce}}) {
    absl::StrAppendFormat(&out,
                          ",\n \"%s\": {\"latency_s\": %.9g, \"bandwidth_bytes_per_s\": %.9g}",
                          name, fit->latency_s, fit->bandwidth_bytes_per_s);
  }
  absl::StrAppendFormat(&out,
                        ",\n \"host_latency_s\": %.9g, \"host_bandwidth_bytes_per_s\": %.9g,\n"
                        " \"compute_slowdown\": %.9g, \"busy_start_s\": %.9g}\n",
                        m.host_latency_s, m.host_bandwidth_bytes_per_s, m.compute_slowdown,
                        m.busy_start_s);
  return out;
}

namespace {

// A strict little reader for the model file: objects of string keys whose values are
// numbers, strings or (one level down) objects of numbers.
class ModelReader {
 public:
  explicit ModelReader(absl::string_view text) : text_(text) {}

  absl::Status Read(CollectiveModel& m) {
    bool has_world = false, has_latency = false, has_bandwidth = false;
    auto top = [&](const std::string& key) -> absl::Status {
      CollectiveModel::Fit* fit = key == "allgather"        ? &m.allgather
                                  : key == "reduce_scatter" ? &m.reduce_scatter
                                  : key == "allreduce"      ? &m.allreduce
                                                            : nullptr;
      if (fit != nullptr) {
        return Object([&](const std::string& k) -> absl::Status {
          double v = 0;
          if (k == "latency_s") return Number(fit->latency_s);
          if (k == "bandwidth_bytes_per_s") return Number(fit->bandwidth_bytes_per_s);
          return Number(v);
        });
      }
      if (key == "world_size") {
        double v = 0;
        if (absl::Status s = Number(v); !s.ok()) return s;
        if (v != static_cast<int>(v)) return Error("world_size must be an integer");
        m.world_size = static_cast<int>(v);
        has_world = true;
        return absl::OkStatus();
      }
      if (key == "latency_s") {
        has_latency = true;
        return Number(m.latency_s);
      }
      if (key == "bandwidth_bytes_per_s") {
        has_bandwidth = true;
        return Number(m.bandwidth_bytes_per_s);
      }
      if (key == "host_latency_s") return Number(m.host_latency_s);
      if (key == "host_bandwidth_bytes_per_s") return Number(m.host_bandwidth_bytes_per_s);
      if (key == "compute_slowdown") return Number(m.compute_slowdown);
      if (key == "busy_start_s") return Number(m.busy_start_s);
      return Skip();
    };
    if (absl::Status s = Object(top); !s.ok()) return s;
    Space();
    if (pos_ != text_.size()) return Error("text after the object");
    if (!has_world || !has_latency || !has_bandwidth) {
      return absl::InvalidArgumentError(
          "a collective model needs world_size, latency_s and bandwidth_bytes_per_s");
    }
    if (!m.Valid())
      return absl::InvalidArgumentError("the collective model's figures are out of range");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("collective model, offset ", pos_, ": ", what));
  }
  void Space() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  bool Take(char c) {
    Space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status String(std::string& out) {
    if (!Take('"')) return Error("expected a string");
    const size_t end = text_.find('"', pos_);
    if (end == absl::string_view::npos) return Error("unterminated string");
    out = std::string(text_.substr(pos_, end - pos_));
    if (out.find('\\') != std::string::npos) return Error("escapes are not supported");
    pos_ = end + 1;
    return absl::OkStatus();
  }
  absl::Status Number(double& out) {
    Space();
    size_t end = pos_;
    while (end < text_.size() &&
           (absl::ascii_isdigit(static_cast<unsigned char>(text_[end])) || text_[end] == '-' ||
            text_[end] == '+' || text_[end] == '.' || text_[end] == 'e' || text_[end] == 'E')) {
      ++end;
    }
    if (end == pos_ || !absl::SimpleAtod(text_.substr(pos_, end - pos_), &out) ||
        !std::isfinite(out)) {
      return Error("expected a number");
    }
    pos_ = end;
    return absl::OkStatus();
  }
  absl::Status Skip() {  // a string or a number
    Space();
    if (pos_ < text_.size() && text_[pos_] == '"') {
      std::string ignored;
      return String(ignored);
    }
    double ignored = 0;
    return Number(ignored);
  }
  template <typename F>
  absl::Status Object(F&& value) {
    if (!Take('{')) return Error("expected '{'");
    if (Take('}')) return absl::OkStatus();
    while (true) {
      std::string key;
      if (absl::Status s = String(key); !s.ok()) return s;
      if (!Take(':')) return Error("expected ':'");
      if (absl::Status s = value(key); !s.ok()) return s;
      if (Take('}')) return absl::OkStatus();
      if (!Take(',')) return Error("expected ',' or '}'");
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<CollectiveModel> ParseCollectiveModel(absl::string_view json) {
  CollectiveModel m;
  ModelReader reader(json);
  if (absl::Status s = reader.Read(m); !s.ok()) return s;
  return m;
}

absl::StatusOr<CollectiveModel> ReadCollectiveModelFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<CollectiveModel> m = ParseCollectiveModel(ss.str());
  if (!m.ok())
    return absl::Status(m.status().code(), absl::StrCat(path, ": ", m.status().message()));
  return m;
}

}  // namespace overlap
