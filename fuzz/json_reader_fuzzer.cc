// Fuzz target: arbitrary bytes into the JSON reader.
// Invariants checked on every input: the reader never crashes or hangs; whatever it accepts
// passes Verify(); writing an accepted graph and reading it back gives an equal graph and
// the same bytes (the writer is deterministic).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "graph/errors.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/verifier.h"

namespace {
void Fail(const char* what) {
  std::fprintf(stderr, "json_reader_fuzzer: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<overlap::Graph> g = overlap::ReadGraphJson(text);
  if (!g.ok()) {
    if (g.status().message().empty()) Fail("error without a message");
    // Malformed text is bad input (graph/errors.h), never an internal error.
    if (!overlap::IsBadInput(g.status())) Fail("a reader error that is not a bad-input error");
    return 0;
  }
  if (!overlap::Verify(*g).ok()) Fail("accepted graph fails Verify");
  const std::string once = overlap::WriteGraphJson(*g);
  absl::StatusOr<overlap::Graph> back = overlap::ReadGraphJson(once);
  if (!back.ok()) Fail("written graph does not read back");
  if (!(*back == *g)) Fail("round trip changed the graph");
  if (overlap::WriteGraphJson(*back) != once) Fail("writer is not deterministic");
  return 0;
}
