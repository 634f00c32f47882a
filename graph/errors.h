// The project's error kinds. Errors are absl::Status values; code that must tell kinds apart
// (the CLI's exit codes, fuzzers deciding what is a finding) asks these predicates and never
// reads message text. Messages are for people: they name the node, field or flag.
//
//   kind            status code          meaning
//   bad input       InvalidArgument      the input is malformed (a file, a graph that fails
//                                        Verify, an order that is not a schedule of the graph)
//   unsupported     FailedPrecondition   the input is well formed, but this pass or algorithm
//                                        does not handle it (module-owned parameters for
//                                        ZeRO-3; a baseline that cannot see a kwargs
//                                        dependency)
//   unknown name    NotFound             a model, scheduler or file that does not exist
//   anything else   Internal, ...        an I/O failure or a bug
#ifndef OVERLAP_GRAPH_ERRORS_H_
#define OVERLAP_GRAPH_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace overlap {

// A well-formed input this pass or algorithm does not handle.
inline absl::Status UnsupportedError(absl::string_view message) {
  return absl::FailedPreconditionError(message);
}
inline bool IsUnsupported(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition;
}

// A malformed input.
inline bool IsBadInput(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument;
}

// A name (model, scheduler, file) that does not exist.
inline bool IsUnknownName(const absl::Status& s) { return s.code() == absl::StatusCode::kNotFound; }

}  // namespace overlap

#endif  // OVERLAP_GRAPH_ERRORS_H_
