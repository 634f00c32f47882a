#include "runtime/train/data.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "graph/text.h"
#include "runtime/train/synthetic.h"

namespace overlap {

namespace {

NodeId FindPlaceholder(const Graph& g, absl::string_view name) {
  const NodeId id = g.FindNode(name);
  return id != kNoNode && g.node(id).op() == Op::kPlaceholder ? id : kNoNode;
}

// The index `s` spells in canonical decimal (digits only; no sign, space or leading zero
// but in "0" itself), or -1: one index has one spelling, so "batch/0/x" and "batch/00/x"
// can never both be batch 0's x, one silently replacing the other.
int64_t CanonicalIndex(absl::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return -1;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int64_t k = -1;
  return absl::SimpleAtoi(s, &k) ? k : -1;  // false past int64's range
}

}  // namespace

absl::StatusOr<std::vector<TensorMap>> SplitBatches(const TensorMap& tensors) {
  std::map<int64_t, TensorMap> by_index;
  for (const auto& [key, t] : tensors) {
    if (!absl::StartsWith(key, "batch/")) continue;
    const absl::string_view rest = absl::string_view(key).substr(6);
    const size_t slash = rest.find('/');
    const int64_t k = slash == absl::string_view::npos || slash + 1 == rest.size()
                          ? -1
                          : CanonicalIndex(rest.substr(0, slash));
    if (k < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data key '", Printable(key),
                       "' is not batch/<index>/<input> (<index> in plain decimal: 0, 1, 2, ...; "
                       "no sign, space or leading zero)"));
    }
    by_index[k][std::string(rest.substr(slash + 1))] = t;
  }
  std::vector<TensorMap> out;
  if (by_index.empty()) {
    if (!tensors.empty()) out.push_back(tensors);
    return out;
  }
  for (auto& [k, batch] : by_index) {
    if (k != static_cast<int64_t>(out.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the data has batch ", k, " but no batch ", out.size()));
    }
    out.push_back(std::move(batch));
  }
  return out;
}

absl::StatusOr<TensorMap> SyntheticTask::Batch(int64_t step) {
  const Graph& fwd = *forward_;
  SeededInputsOptions only_data;
  only_data.parameters = false;
  const NodeId ids = FindPlaceholder(fwd, "input_ids"), labels = FindPlaceholder(fwd, "labels");
  const NodeId x = FindPlaceholder(fwd, "x"), targets = FindPlaceholder(fwd, "targets");
  if (ids != kNoNode && labels != kNoNode) {  // the copy task
    OVERLAP_ASSIGN_OR_RETURN(TensorMap batch,
                             SeededInputs(fwd, seed_ * 7919 + step, *alloc_, only_data));
    Tensor& l = batch.at("labels");
    OVERLAP_RETURN_IF_ERROR(CopyConvert(batch.at("input_ids"), l));
    return batch;
  }
  if (x != kNoNode && targets != kNoNode) {  // regression onto a linear teacher
    OVERLAP_ASSIGN_OR_RETURN(TensorMap batch,
                             SeededInputs(fwd, seed_ * 7919 + step, *alloc_, only_data));
    const Tensor& in = batch.at("x");
    Tensor& out = batch.at("targets");
    if (in.dim() != 2 || out.dim() != 2) return batch;
    const int64_t rows = in.shape()[0], k = in.shape()[1], m = out.shape()[1];
    if (!teacher_.defined()) {
      OVERLAP_ASSIGN_OR_RETURN(teacher_, Tensor::Empty(*alloc_, DType::kFloat64, {k, m}));
      Rng rng(seed_ ^ 0x7eac4e5ull);
      for (int64_t i = 0; i < k * m; ++i) SetElement(teacher_, i, rng.Normal() / std::sqrt(k));
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) {
          s += GetElement(in, r * k + i) * teacher_.data<double>()[i * m + j];
        }
        SetElement(out, r * m + j, s);
      }
    }
    return batch;
  }
  if (fixed_.empty()) {
    OVERLAP_ASSIGN_OR_RETURN(fixed_, SeededInputs(fwd, seed_ * 7919, *alloc_, only_data));
  }
  return fixed_;
}

absl::StatusOr<TensorMap> ShardRows(const TensorMap& batch, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in a world of ", world));
  }
  TensorMap out;
  for (const auto& [name, t] : batch) {
    if (t.dim() == 0 || t.shape()[0] % world != 0) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' (", t.DebugString(),
                                                     ") does not split into ", world,
                                                     " equal row blocks"));
    }
    const int64_t rows = t.shape()[0] / world;
    OVERLAP_ASSIGN_OR_RETURN(out[name], t.Slice(0, rank * rows, (rank + 1) * rows));
  }
  return out;
}

}  // namespace overlap
