// Shape rules: for each op of docs/ops.md, the shapes and dtypes its results have given its
// arguments, and a check that every node's metadata says what its target's rule gives.
//
// A rule reads a node's arguments (positional or keyword, as the ATen schema names them) and
// the types of the nodes they reference, as those nodes' metadata states them: `meta.shape`
// and `meta.dtype` for a tensor, the `shapes` / `dtypes` meta arrays for a node returning a
// tuple (docs/format.md). Checking each node against its inputs' stated types is local, so
// the first mismatch names the node that is wrong, not a distant consequence.
//
//   absl::StatusOr<ShapeCheckReport> r = CheckShapes(graph);   // every built-in model passes
//
// Result dtypes are ATen's: promotion by result_type (bool < integral < floating; zero-dim
// tensors and Python numbers count only from a higher category), true division and the
// floating unary ops giving float32 for integers, sum giving int64 for bool and integers,
// comparisons bool; all decided by graph/type_promotion.h, the function the kernels call
// too. Matrix products and convolutions take one dtype, as ATen does. Optional arguments
// take the schema's defaults (graph/op_schema.h); an overload without them (sum.default has
// no dim / keepdim) reduces every dimension, as ATen's does.
#ifndef OVERLAP_GRAPH_SHAPE_RULES_H_
#define OVERLAP_GRAPH_SHAPE_RULES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace overlap {

// One tensor's type. A scalar tensor has an empty shape.
struct TensorType {
  Shape shape;
  std::string dtype;
  friend bool operator==(const TensorType& a, const TensorType& b) {
    return a.shape == b.shape && a.dtype == b.dtype;
  }
};

// "[2, 3] float32", for messages.
std::string FormatType(const TensorType& t);

// What a node's metadata says it returns: one type (meta.shape and meta.dtype), several (the
// `shapes` meta array, with `dtypes` or else meta.dtype for every element), or none when the
// metadata does not say (no shape, or a malformed array). O(size of the metadata).
std::vector<TensorType> StatedTypes(const Node& n);

// Whether `target` has a rule. O(1) expected.
bool HasShapeRule(absl::string_view target);
// Every target with a rule, sorted. O(R log R).
std::vector<std::string> ShapeRuleTargets();

// The types node `n` of `g` returns by its target's rule, from its arguments and the stated
// types of the nodes it references. NotFound when the target has no rule (graph/errors.h: an
// unknown name); InvalidArgument naming the node and argument when the arguments do not fit
// the rule (a missing argument, an input without a stated type, mismatched dimensions).
// O(arguments + rank).
absl::StatusOr<std::vector<TensorType>> InferTypes(const Graph& g, const Node& n);

struct ShapeCheckOptions {
  // Every call_function target must have a rule (the built-in models' graphs); otherwise
  // nodes whose target has none are counted and skipped (graphs from other exporters).
  bool require_rules = false;
};

struct ShapeCheckReport {
  int64_t checked = 0;   // nodes whose stated types equal their rule's
  int64_t no_rule = 0;   // call_function nodes whose target has no rule (skipped)
  int64_t unstated = 0;  // nodes with a rule but no stated type of their own (skipped)
  std::vector<std::string> targets_without_rule;  // distinct, in first-seen order
};

// Checks every call_function node: its stated types must equal its rule's. The first
// mismatch is an InvalidArgument naming the node, what its metadata says and what the rule
// gives for which inputs. placeholder, get_attr, call_module, call_method and output nodes
// have no rule (their types come from outside the graph). O(N + E).
absl::StatusOr<ShapeCheckReport> CheckShapes(const Graph& g, const ShapeCheckOptions& options = {});

}  // namespace overlap

#endif  // OVERLAP_GRAPH_SHAPE_RULES_H_
