#include "graph/value_bytes.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/cost_model.h"
#include "graph/shape_rules.h"
#include "graph/text.h"

namespace overlap {
namespace {

// What StatedTypes gives an element a tuple leaves out (a null in `shapes`).
constexpr absl::string_view kUndefinedElement = "none";

// `what`: the type (or "its stated types") whose bytes exceed int64.
absl::Status TooLarge(const Node& n, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("node \"", Printable(n.name()), "\": the bytes of ", Printable(what),
                   " overflow 64 bits (without meta.tensor_size a value's size is "
                   "its shape's element count x its dtype's bytes)"));
}

}  // namespace

absl::StatusOr<int64_t> ValueBytes(const Node& n) {
  if (n.meta().has_tensor_size) return n.meta().tensor_size;
  return StatedBytes(n);
}

absl::StatusOr<int64_t> StatedBytes(const Node& n) {
  if (n.op() == Op::kOutput) return 0;
  int64_t total = 0;
  for (const TensorType& t : StatedTypes(n)) {
    if (t.dtype == kUndefinedElement) continue;
    std::optional<int64_t> item = int64_t{4};
    if (!t.dtype.empty()) item = KnownDtypeBytes(t.dtype);
    if (!item.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node \"", Printable(n.name()), "\": unknown dtype \"", Printable(t.dtype),
                       "\" (docs/format.md lists the dtypes), so its size is unknown; give "
                       "meta.tensor_size"));
    }
    int64_t bytes = *item;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("node \"", Printable(n.name()),
                                                       "\": a stated shape has a negative "
                                                       "dimension (",
                                                       d, ")"));
      }
    }
    // An empty tensor takes nothing, whatever its other dimensions.
    if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) continue;
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(bytes, d, &bytes)) return TooLarge(n, FormatType(t));
    }
    if (__builtin_add_overflow(total, bytes, &total))
      return TooLarge(n, "its stated types together");
  }
  return total;
}

int64_t AddBytes(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

int64_t MulBytes(int64_t k, int64_t a) {
  int64_t product = 0;
  return __builtin_mul_overflow(k, a, &product) ? std::numeric_limits<int64_t>::max() : product;
}

int64_t VerifiedValueBytes(const Node& n) {
  absl::StatusOr<int64_t> bytes = ValueBytes(n);
  return bytes.ok() ? *bytes : 0;
}

}  // namespace overlap
