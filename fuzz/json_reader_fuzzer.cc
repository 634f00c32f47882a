// Fuzz target: arbitrary bytes into the JSON reader.
// Invariants checked on every input: the reader never crashes or hangs; whatever it accepts
// passes Verify(); writing an accepted graph and reading it back gives an equal graph and
// the same bytes (the writer is deterministic); annotating it (graph/annotate.h) either
// fails with a bad-input error, leaving it unchanged, or gives a graph that passes Verify()
// and round-trips.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "graph/annotate.h"
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
  for (bool overwrite : {false, true}) {
    overlap::Graph annotated = *g;
    overlap::AnnotateOptions options;
    options.overwrite = overwrite;
    absl::StatusOr<overlap::AnnotateReport> r = overlap::AnnotateCosts(annotated, options);
    if (!r.ok()) {
      if (!overlap::IsBadInput(r.status())) Fail("an annotate error that is not bad input");
      if (!(annotated == *g)) Fail("a failed annotate changed the graph");
      continue;
    }
    if (!overlap::Verify(annotated).ok()) Fail("annotated graph fails Verify");
    absl::StatusOr<overlap::Graph> again =
        overlap::ReadGraphJson(overlap::WriteGraphJson(annotated));
    if (!again.ok() || !(*again == annotated)) Fail("annotated graph does not round-trip");
  }
  return 0;
}
