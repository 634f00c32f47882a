// Fuzz target: raw bytes as a safetensors file (runtime/core/safetensors.h), what `--weights`,
// `--inputs` and `--data` read. Every rejection carries a message; nothing is allocated
// beyond what the bytes themselves hold (a shape declaring gigabytes is refused before any
// allocation, so the allocator's total never exceeds the input's size); whatever is
// accepted writes back to bytes that read as the same tensors. Any violation aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/core/safetensors.h"
#include "runtime/core/tensor.h"

namespace overlap {
namespace {

void Fail(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzzer: %s\n", what.c_str());
  std::abort();
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.nbytes() != b.nbytes()) return false;
  return a.nbytes() == 0 || std::memcmp(a.storage()->data(), b.storage()->data(),
                                        static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace
}  // namespace overlap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Allocator alloc;
  absl::StatusOr<TensorMap> read = ReadSafetensors(bytes, alloc);
  if (!read.ok()) {
    if (read.status().message().empty()) Fail("a rejection without a message");
    return 0;
  }
  int64_t held = 0;
  for (const auto& [name, t] : *read) held += t.nbytes();
  if (held > static_cast<int64_t>(size)) {
    Fail("accepted tensors hold more bytes than the file: " + std::to_string(held));
  }
  const std::string written = WriteSafetensors(*read, {});
  Allocator again_alloc;
  absl::StatusOr<TensorMap> again = ReadSafetensors(written, again_alloc);
  if (!again.ok()) Fail("what was written does not read: " + std::string(again.status().message()));
  if (again->size() != read->size()) Fail("the round trip changed the number of tensors");
  for (const auto& [name, t] : *read) {
    auto it = again->find(name);
    if (it == again->end() || !SameTensor(t, it->second)) Fail("the round trip changed " + name);
  }
  return 0;
}
