// Tensors in and out in the safetensors layout (huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header {"name": {"dtype": "F32", "shape":
// [..], "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}}, then the
// raw little-endian data, offsets relative to its start. Read and written by our own code
// (the header with nlohmann/json). docs/runtime.md, "Tensor files".
#ifndef OVERLAP_RUNTIME_SAFETENSORS_H_
#define OVERLAP_RUNTIME_SAFETENSORS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/tensor.h"

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

// Parses a file's bytes into tensors allocated from `alloc` (Pool::kValues). InvalidArgument
// naming the tensor or field for: a header length past the end, a header that is not a JSON
// object, an unknown dtype, a negative dimension, offsets out of order, overlapping, past
// the data or not matching the shape's bytes, or data the offsets do not cover. O(bytes).
absl::StatusOr<TensorMap> ReadSafetensors(absl::string_view bytes, Allocator& alloc);

// ReadSafetensors of a file's bytes; NotFound when it cannot be opened, errors prefixed
// with the path. O(bytes).
absl::StatusOr<TensorMap> ReadSafetensorsFile(const std::string& path, Allocator& alloc);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_SAFETENSORS_H_
