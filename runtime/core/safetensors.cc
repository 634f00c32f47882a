#include "runtime/core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/text.h"
#include "nlohmann/json.hpp"

namespace overlap {
namespace {

absl::StatusOr<DType> FromCode(absl::string_view code) {
  if (code == "F32") return DType::kFloat32;
  if (code == "F64") return DType::kFloat64;
  if (code == "F16") return DType::kFloat16;
  if (code == "BF16") return DType::kBFloat16;
  if (code == "I64") return DType::kInt64;
  if (code == "I32") return DType::kInt32;
  if (code == "U8") return DType::kUInt8;
  if (code == "BOOL") return DType::kBool;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype \"", code, "\""));
}

// Copies `t` element by element (any strides) into `out`, row-major.
void AppendContiguous(const Tensor& t, std::string* out) {
  const int64_t size = DTypeSize(t.dtype());
  const int64_t n = t.numel();
  if (n == 0) return;
  const std::byte* base = t.storage()->data();
  if (t.IsContiguous()) {
    out->append(reinterpret_cast<const char*>(base + t.offset() * size), n * size);
    return;
  }
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t k = 0; k < n; ++k) {
    out->append(reinterpret_cast<const char*>(base + t.IndexOf(index) * size), size);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++index[d] < t.shape()[d]) break;
      index[d] = 0;
    }
  }
}

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor \"", name, "\": ", what));
}

}  // namespace

absl::string_view SafetensorsDType(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kUInt8:
      return "U8";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

std::string WriteSafetensors(const TensorMap& tensors,
                             const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& [name, t] : tensors) {
    const int64_t begin = static_cast<int64_t>(data.size());
    AppendContiguous(t, &data);
    header[name] = {{"dtype", std::string(SafetensorsDType(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {begin, static_cast<int64_t>(data.size())}}};
  }
  std::string text = header.dump();
  // The data starts 8-aligned, as the reference writer pads its header with spaces.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out += data;
  return out;
}

bool IsReferenceTensor(absl::string_view name) {
  return absl::StartsWith(name, "ref/") || absl::StartsWith(name, "ref64/") ||
         absl::StartsWith(name, "ref64p/");
}

absl::StatusOr<TensorMap> ReadSafetensors(absl::string_view bytes, Allocator& alloc,
                                          const std::function<bool(absl::string_view)>& skip) {
  if (bytes.size() < 8) return absl::InvalidArgumentError("safetensors: shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > bytes.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: header length ", n,
                                                   " runs past the end of the ", bytes.size(),
                                                   "-byte file"));
  }
  if (n > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: header length ", n,
                                                   " is over the format's limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  const absl::string_view data = bytes.substr(8 + n);
  // The top-level names as they come: a JSON object keeps one of duplicate keys, and which
  // tensor a name means must not depend on that.
  absl::flat_hash_set<std::string> names;
  std::string duplicate;
  const nlohmann::json::parser_callback_t note_names =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
            !names.insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        return true;
      };
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n), note_names,
                                                /*allow_exceptions=*/false);
  if (!header.is_object()) {
    return absl::InvalidArgumentError("safetensors: the header is not a JSON object");
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: tensor \"", Printable(duplicate), "\" appears twice"));
  }
  TensorMap out;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const nlohmann::json& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return Bad(name, "needs \"dtype\", \"shape\" and two \"data_offsets\"");
    }
    absl::StatusOr<DType> dtype = FromCode(e["dtype"].get<std::string>());
    if (!dtype.ok()) return Bad(name, std::string(dtype.status().message()));
    std::vector<int64_t> shape;
    // The byte count from the shape, checked against the offsets before any allocation: a
    // 75-byte file may declare gigabytes.
    uint64_t need = static_cast<uint64_t>(DTypeSize(*dtype));
    bool overflow = false;
    for (const nlohmann::json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return Bad(name, "a dimension is not a non-negative integer");
      }
      shape.push_back(d.get<int64_t>());
      overflow = overflow || __builtin_mul_overflow(need, d.get<uint64_t>(), &need);
    }
    if (overflow || need > (uint64_t{1} << 62)) {
      return Bad(name, "the shape's byte count does not fit in 62 bits");
    }
    const nlohmann::json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return Bad(name, "data_offsets are not non-negative integers");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data.size()) {
      return Bad(name, absl::StrCat("data_offsets [", begin, ", ", end, "] outside the ",
                                    data.size(), " data bytes"));
    }
    if (need != end - begin) {
      return Bad(name, absl::StrCat("shape and dtype need ", need, " bytes, data_offsets give ",
                                    end - begin));
    }
    ranges.push_back({static_cast<int64_t>(begin), static_cast<int64_t>(end)});
    if (skip && skip(name)) continue;  // checked as the others, never allocated
    absl::StatusOr<Tensor> t = Tensor::Empty(alloc, *dtype, shape);
    if (!t.ok()) return Bad(name, std::string(t.status().message()));
    if (end > begin) std::memcpy(t->storage()->data(), data.data() + begin, end - begin);
    out.emplace(name, *std::move(t));
  }
  // The data is covered exactly: no overlaps, no holes (as the format requires).
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != at) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: the tensors' data ",
                                                     begin < at ? "overlaps" : "leaves a hole",
                                                     " at byte ", std::min(begin, at)));
    }
    at = end;
  }
  if (at != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: ", data.size() - at, " data bytes belong to no tensor"));
  }
  return out;
}

absl::StatusOr<TensorMap> ReadSafetensorsFile(const std::string& path, Allocator& alloc,
                                              const std::function<bool(absl::string_view)>& skip) {
  const std::string shown = Printable(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open \"", shown, "\": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat \"", shown, "\": ", std::strerror(err)));
  }
  // By type first: a folder opens, and a device (/dev/zero) never ends.
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("\"", shown, "\" is ",
                     S_ISDIR(st.st_mode) ? "a directory" : "not a regular file (nor a pipe)",
                     ": a safetensors file is expected"));
  }
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > kMaxSafetensorsFileBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        shown, ": ", st.st_size, " bytes: over the limit of ", kMaxSafetensorsFileBytes, " bytes"));
  }
  // A regular file is mapped, not read: only the tensors kept are copied out (a data file's
  // float64 reference is gigabytes a training never reads).
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    void* mapped = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped != MAP_FAILED) {
      ::close(fd);
      absl::StatusOr<TensorMap> m = ReadSafetensors(
          absl::string_view(static_cast<const char*>(mapped), static_cast<size_t>(st.st_size)),
          alloc, skip);
      ::munmap(mapped, static_cast<size_t>(st.st_size));
      if (!m.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(shown, ": ", m.status().message()));
      }
      return m;
    }
  }
  std::string bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("reading \"", shown, "\": ", std::strerror(err)));
    }
    if (n == 0) break;
    if (bytes.size() + static_cast<size_t>(n) > kMaxSafetensorsFileBytes) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": over the limit of ", kMaxSafetensorsFileBytes, " bytes"));
    }
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  absl::StatusOr<TensorMap> m = ReadSafetensors(bytes, alloc, skip);
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(shown, ": ", m.status().message()));
  return m;
}

}  // namespace overlap
