// Tensors in and out in the safetensors layout (huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header {"name": {"dtype": "F32", "shape":
// [..], "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}}, then the
// raw little-endian data, offsets relative to its start. Read and written by our own code
// (the header with nlohmann/json). docs/runtime.md, "Tensor files".
#ifndef OVERLAP_RUNTIME_CORE_SAFETENSORS_H_
#define OVERLAP_RUNTIME_CORE_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/core/tensor.h"

namespace overlap {

// Named tensors in name order (the order safetensors writers use).
using TensorMap = std::map<std::string, Tensor>;

// The safetensors dtype code of `d` ("F32", "F64", "F16", "BF16", "I64", "I32", "U8",
// "BOOL"). O(1).
absl::string_view SafetensorsDType(DType d);

// The file's bytes: tensors laid out in name order, each copied contiguously (views are
// materialised), `metadata` under "__metadata__" when not empty. Assumes a little-endian
// host. O(total bytes).
std::string WriteSafetensors(const TensorMap& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// The reader's bounds (docs/limits.md): the header as the format caps it (100 MB), the whole
// file (the tensors are read into memory).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
inline constexpr uint64_t kMaxSafetensorsFileBytes = uint64_t{64} << 30;

// Parses a file's bytes into tensors allocated from `alloc` (Pool::kValues). InvalidArgument
// naming the tensor or field for: a header length past the end or over
// kMaxSafetensorsHeaderBytes, a header that is not a JSON object, a tensor name given
// twice, an unknown dtype, a negative dimension, offsets out of order, overlapping, past
// the data or not matching the shape's bytes (checked before anything is allocated), or
// data the offsets do not cover. Tensors whose names `skip` accepts are checked as the others
// and left out (nothing allocated). O(bytes).
absl::StatusOr<TensorMap> ReadSafetensors(absl::string_view bytes, Allocator& alloc,
                                          const std::function<bool(absl::string_view)>& skip = {});

// ReadSafetensors of a file's bytes; NotFound when it cannot be opened; InvalidArgument
// for a folder, a device or a socket (refused by type before reading: /dev/zero never
// ends), for a file over kMaxSafetensorsFileBytes (a regular file by its size, a pipe as
// it is read); errors prefixed with the path. A regular file is mapped rather than read, so
// its memory is the tensors kept. O(bytes).
absl::StatusOr<TensorMap> ReadSafetensorsFile(
    const std::string& path, Allocator& alloc,
    const std::function<bool(absl::string_view)>& skip = {});

// Whether `name` is one of torch's reference results in an exporter's file (ref/, ref64/,
// ref64p/: docs/interop.md), which only comparisons read: what a run loading weights or
// data skips. O(1).
bool IsReferenceTensor(absl::string_view name);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_SAFETENSORS_H_
