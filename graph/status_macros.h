// Status propagation macros for absl::Status / absl::StatusOr.
//
// Debian's Abseil (20220623) ships no RETURN_IF_ERROR / ASSIGN_OR_RETURN, so the project
// defines its own, once, here. Both evaluate their argument exactly once.
//
//   OVERLAP_RETURN_IF_ERROR(Verify(graph));
//   OVERLAP_ASSIGN_OR_RETURN(Graph g, ReadGraphJsonFile(path));
#ifndef OVERLAP_GRAPH_STATUS_MACROS_H_
#define OVERLAP_GRAPH_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status from the enclosing function when `expr` (an absl::Status) is not OK.
#define OVERLAP_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status overlap_status_ = (expr);           \
    if (!overlap_status_.ok()) return overlap_status_; \
  } while (false)

#define OVERLAP_STATUS_CONCAT_INNER_(a, b) a##b
#define OVERLAP_STATUS_CONCAT_(a, b) OVERLAP_STATUS_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise moves the
// value into `lhs`, which may be a declaration (`Graph g`) or an existing lvalue.
#define OVERLAP_ASSIGN_OR_RETURN(lhs, rexpr) \
  OVERLAP_ASSIGN_OR_RETURN_IMPL_(OVERLAP_STATUS_CONCAT_(overlap_statusor_, __LINE__), lhs, rexpr)

#define OVERLAP_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()

#endif  // OVERLAP_GRAPH_STATUS_MACROS_H_
