// Gathers and scatters along a dimension (gather, scatter.src / .value, scatter_add,
// select_scatter), cumulative sums and flips, embedding bags and their backward,
// repeat_interleave and triu_indices. Every index out of range is an error naming the node,
// checked before the element it would address is touched.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

std::string ShapeText(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// A shape with a 0-d tensor as [1]: ATen's gathers and scatters treat a scalar as a vector
// of one element (ensure_nonempty_size).
std::vector<int64_t> NonEmpty(const std::vector<int64_t>& s) {
  return s.empty() ? std::vector<int64_t>{1} : s;
}

// ---- gather / scatter: one indexing helper for the family ----------------------------------

// What a gather or scatter reads along `dim`: self's shape, the index (contiguous int64) and,
// for the scatters of a tensor, src (contiguous). Built by PlanDimIndex, which checks ATen's
// gather_shape_check / scatter_shape_check.
struct DimIndex {
  std::vector<int64_t> self_shape;  // NonEmpty
  int64_t dim = 0;
  Tensor index;
  std::optional<Tensor> src;
};

absl::StatusOr<DimIndex> PlanDimIndex(KernelCall& c, const Tensor& self, bool with_src) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor index, c.TensorArg("index"));
  DimIndex p;
  p.self_shape = NonEmpty(self.shape());
  OVERLAP_ASSIGN_OR_RETURN(p.dim, WrapDim(c, dim, self.dim()));
  const int64_t nd = static_cast<int64_t>(p.self_shape.size());
  const std::vector<int64_t> ishape = NonEmpty(index.shape());
  if (with_src) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor src, c.TensorArg("src"));
    if (src.dtype() != self.dtype()) {
      return c.Error(absl::StrCat("src is ", DTypeName(src.dtype()), " but self is ",
                                  DTypeName(self.dtype()), " (ATen needs one dtype)"));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor s, Contiguous(c, src));
    p.src = s;
  }
  OVERLAP_ASSIGN_OR_RETURN(p.index, Contiguous(c, index));
  if (index.numel() == 0) return p;  // ATen checks nothing more for an empty index
  if (index.dtype() != DType::kInt64) {
    return c.Error(absl::StrCat("index should be int64, got ", DTypeName(index.dtype())));
  }
  const std::vector<int64_t> sshape = with_src ? NonEmpty(p.src->shape()) : ishape;
  if (static_cast<int64_t>(ishape.size()) != nd || static_cast<int64_t>(sshape.size()) != nd) {
    return c.Error(absl::StrCat("index ", ShapeText(index.shape()),
                                with_src ? absl::StrCat(", src ", ShapeText(p.src->shape())) : "",
                                " and self ", ShapeText(self.shape()),
                                " should have the same number of dimensions"));
  }
  for (int64_t d = 0; d < nd; ++d) {
    if ((d != p.dim && ishape[d] > p.self_shape[d]) || ishape[d] > sshape[d]) {
      return c.Error(absl::StrCat("index ", ShapeText(index.shape()), " is larger than self ",
                                  ShapeText(self.shape()), " apart from dimension ", p.dim,
                                  with_src ? absl::StrCat(", or than src ", ShapeText(sshape)) : "",
                                  " (dimension ", d, ")"));
    }
  }
  return p;
}

// Calls fn(k, at, from) for each element k of the index in row-major order: `at` is the
// contiguous offset in self of the element it addresses (dimension `dim` replaced by the index
// value), `from` the contiguous offset in src of the same position. An index value outside
// [0, size of dim) is an error naming the node; ATen does not wrap negative ones here.
template <typename F>
absl::Status ForEachDimIndex(const KernelCall& c, const DimIndex& p, absl::string_view op, F&& fn) {
  const std::vector<int64_t> ishape = NonEmpty(p.index.shape());
  const int64_t nd = static_cast<int64_t>(ishape.size());
  const std::vector<int64_t> ss = ContiguousStrides(p.self_shape);
  const std::vector<int64_t> rs =
      ContiguousStrides(p.src ? NonEmpty(p.src->shape()) : std::vector<int64_t>(nd, 1));
  const int64_t n = p.self_shape[p.dim];
  std::vector<int64_t> pos(nd, 0);
  for (int64_t k = 0; k < p.index.numel(); ++k) {
    const int64_t target = p.index.data<int64_t>()[k];
    if (target < 0 || target >= n) {
      return c.Error(absl::StrCat(op, " index ", target, " out of range [0, ", n,
                                  ") along dimension ", p.dim));
    }
    int64_t at = 0, from = 0;
    for (int64_t d = 0; d < nd; ++d) {
      at += (d == p.dim ? target : pos[d]) * ss[d];
      from += pos[d] * rs[d];
    }
    fn(k, at, from);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++pos[d] < ishape[d]) break;
      pos[d] = 0;
    }
  }
  return absl::OkStatus();
}

Results Gather(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, Contiguous(c, self0));
  OVERLAP_ASSIGN_OR_RETURN(DimIndex p, PlanDimIndex(c, self, /*with_src=*/false));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(self.dtype(), p.index.shape()));
  const int64_t esz = DTypeSize(self.dtype());
  OVERLAP_RETURN_IF_ERROR(ForEachDimIndex(c, p, "gather", [&](int64_t k, int64_t at, int64_t) {
    std::memcpy(Bytes(out) + k * esz, Bytes(self) + at * esz, esz);
  }));
  return std::vector<Tensor>{out};
}

// scatter.src and scatter.value: a copy of self with src's element (or the value, converted
// to self's dtype) written at each indexed place; of repeated places the last write wins.
Results Scatter(KernelCall& c, bool with_src) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(DimIndex p, PlanDimIndex(c, self, with_src));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, CopyToOutput(c, self));
  const int64_t esz = DTypeSize(self.dtype());
  Tensor value;
  if (!with_src) {
    OVERLAP_ASSIGN_OR_RETURN(double v, c.DoubleArg("value"));
    OVERLAP_ASSIGN_OR_RETURN(value, c.NewScratch(self.dtype(), {1}));
    SetElement(value, 0, v);
  }
  const std::byte* from_base = with_src ? Bytes(*p.src) : Bytes(value);
  const int64_t from_step = with_src ? esz : 0;
  OVERLAP_RETURN_IF_ERROR(ForEachDimIndex(c, p, "scatter", [&](int64_t, int64_t at, int64_t from) {
    std::memcpy(Bytes(out) + at * esz, from_base + from * from_step, esz);
  }));
  return std::vector<Tensor>{out};
}

// scatter_add: a copy of self with src's elements added at the indexed places, in index order.
Results ScatterAdd(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(DimIndex p, PlanDimIndex(c, self, /*with_src=*/true));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, CopyToOutput(c, self));
  auto add = [&](auto tag) -> Results {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* s = p.src->data<T>();
    OVERLAP_RETURN_IF_ERROR(ForEachDimIndex(
        c, p, "scatter_add", [&](int64_t, int64_t at, int64_t from) { o[at] += s[from]; }));
    return std::vector<Tensor>{out};
  };
  if (self.dtype() == DType::kInt64) return add(int64_t{});
  if (self.dtype() == DType::kInt32) return add(int32_t{});
  return DispatchFloat(c, self.dtype(), add);
}

// select_scatter: a copy of self with src written over self.select(dim, index) (converted to
// self's dtype, as ATen's copy_ converts); index counts from the end when negative.
Results SelectScatter(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor src, c.TensorArg("src"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t index, c.IntArg("index"));
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, self, "self"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, self.dim()));
  const int64_t size = self.shape()[dim];
  if (index < -size || index >= size) {
    return c.Error(absl::StrCat("select_scatter index ", index, " out of range for dimension ", dim,
                                " of size ", size));
  }
  if (index < 0) index += size;
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, CopyToOutput(c, self));
  absl::StatusOr<Tensor> dst = out.Select(dim, index);
  if (!dst.ok()) return c.Error(dst.status().message());
  if (dst->shape() != src.shape()) {
    return c.Error(absl::StrCat("src ", ShapeText(src.shape()), " does not fit the selected ",
                                ShapeText(dst->shape())));
  }
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, src, *dst));
  return std::vector<Tensor>{out};
}

// ---- cumsum, flip --------------------------------------------------------------------------

// cumsum: self converted to the result dtype (sum's rule: bool and integers give int64 unless
// dtype says otherwise), then summed along dim; floats accumulate in double, as ATen's CPU
// kernel does (acc_type), integers in int64.
Results Cumsum(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, self.dim()));
  OVERLAP_ASSIGN_OR_RETURN(DType d, ReductionDType(c, ReductionOp::kSum, self.dtype()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor conv, Converted(c, self, d));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, conv));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, self.shape()));
  const Around a = Split3(x.shape(), dim);
  auto run = [&](auto tag, auto acc_tag) -> Results {
    using T = decltype(tag);
    using Acc = decltype(acc_tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t p = 0; p < a.outer; ++p) {
      for (int64_t q = 0; q < a.inner; ++q) {
        Acc sum = 0;
        for (int64_t i = 0; i < a.n; ++i) {
          const int64_t at = (p * a.n + i) * a.inner + q;
          sum += static_cast<Acc>(in[at]);
          o[at] = static_cast<T>(sum);
        }
      }
    }
    return std::vector<Tensor>{out};
  };
  switch (d) {
    case DType::kFloat32:
      return run(float{}, double{});
    case DType::kFloat64:
      return run(double{}, double{});
    case DType::kInt64:
      return run(int64_t{}, int64_t{});
    case DType::kInt32:
      return run(int32_t{}, int64_t{});
    default:
      return c.Error(absl::StrCat("no cumsum kernel for dtype ", DTypeName(d)));
  }
}

// histc: counts of self's elements in `bins` equal bins over [min, max] (the data's own
// range when min == max), in self's dtype, by ATen's arithmetic: x in bin
// int((x - lo) * bins / (hi - lo)) computed in self's dtype, hi in the last bin; NaN and
// elements outside are not counted. O(numel + bins).
Results Histc(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t bins, c.IntArg("bins"));
  OVERLAP_ASSIGN_OR_RETURN(double lo_arg, c.DoubleArg("min"));
  OVERLAP_ASSIGN_OR_RETURN(double hi_arg, c.DoubleArg("max"));
  if (bins <= 0) return c.Error(absl::StrCat("bins must be > 0, got ", bins));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, self));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    const T* in = x.data<T>();
    const int64_t n = x.numel();
    T lo = static_cast<T>(lo_arg), hi = static_cast<T>(hi_arg);
    if (lo == hi && n > 0) {
      lo = hi = in[0];
      bool nan = false;
      for (int64_t i = 0; i < n; ++i) {
        nan |= std::isnan(in[i]);
        lo = std::min(lo, in[i]);
        hi = std::max(hi, in[i]);
      }
      if (nan) return c.Error("range of [nan, nan] is not finite (self holds NaN)");
    }
    if (lo == hi) {
      lo -= 1;
      hi += 1;
    }
    if (!(lo < hi)) return c.Error(absl::StrCat("max ", hi, " must be larger than min ", lo));
    if (!std::isfinite(lo) || !std::isfinite(hi)) {
      return c.Error(absl::StrCat("range of [", lo, ", ", hi, "] is not finite"));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), {bins}));
    T* o = out.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const T v = in[i];
      if (!(v >= lo && v <= hi)) continue;
      // In T, as ATen; clamped first, so a range near the dtype's limits (an infinite
      // quotient) cannot make the cast undefined.
      T f = (v - lo) * static_cast<T>(bins) / (hi - lo);
      if (!(f >= 0)) f = 0;
      if (f > static_cast<T>(bins)) f = static_cast<T>(bins);
      int64_t pos = static_cast<int64_t>(f);
      if (pos == bins) pos -= 1;
      o[pos] += 1;
    }
    return std::vector<Tensor>{out};
  });
}

// flip: the elements in reverse order along each of dims (any dtype).
Results Flip(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.IntListArg("dims"));
  std::vector<bool> flipped(std::max<int64_t>(self.dim(), 1), false);
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t w, WrapDim(c, d, self.dim()));
    if (flipped[w]) return c.Error(absl::StrCat("dim ", w, " appears more than once in dims"));
    flipped[w] = true;
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, self));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  const std::vector<int64_t> shape = x.shape();
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  const int64_t nd = x.dim(), esz = DTypeSize(x.dtype());
  std::vector<int64_t> pos(nd, 0);
  for (int64_t k = 0; k < x.numel(); ++k) {
    int64_t from = 0;
    for (int64_t d = 0; d < nd; ++d) {
      from += (flipped[d] ? shape[d] - 1 - pos[d] : pos[d]) * strides[d];
    }
    std::memcpy(Bytes(out) + k * esz, Bytes(x) + from * esz, esz);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
  return std::vector<Tensor>{out};
}

// ---- repeat_interleave, triu_indices -------------------------------------------------------

// The dtype keyword ("torch.int64"), else `fallback`; an unknown name is an error.
absl::StatusOr<DType> DtypeKeyword(const KernelCall& c, DType fallback) {
  const Value* v = c.Arg("dtype");
  if (v == nullptr || v->kind() != Value::Kind::kString) return fallback;
  std::string name = v->as_string();
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  absl::StatusOr<DType> d = ParseDType(name);
  if (!d.ok()) return c.Error(d.status().message());
  return d;
}

// repeat_interleave.Tensor: i repeated repeats[i] times, for each i in order; the result has
// repeats' dtype. A negative repeat, or an output_size other than the sum, is refused.
Results RepeatInterleave(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor r0, c.TensorArg("repeats"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, r0, "repeats"));
  if (r0.dim() != 1) {
    return c.Error(absl::StrCat("repeats should be 1-D, got ", ShapeText(r0.shape())));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor r, Contiguous(c, r0));
  int64_t total = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const int64_t n = IndexAt(r, i);
    if (n < 0)
      return c.Error(absl::StrCat("repeats[", i, "] is ", n, ": repeats can not be negative"));
    total += n;
  }
  const Value* size = c.Arg("output_size");
  if (size != nullptr && !size->is_none()) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t want, c.IntArg("output_size"));
    if (want != total) {
      return c.Error(absl::StrCat("output_size ", want, " is not the sum of repeats, ", total));
    }
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(r.dtype(), {total}));
  int64_t k = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    for (int64_t j = IndexAt(r, i); j > 0; --j) SetInteger(out, k++, i);
  }
  return std::vector<Tensor>{out};
}

// triu_indices: the coordinates (row, then column) of the row x col matrix's elements on and
// above diagonal `offset`, in row-major order: a [2, count] tensor of `dtype` (int64).
Results TriuIndices(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t rows, c.IntArg("row"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t cols, c.IntArg("col"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t offset, c.IntArg("offset"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DtypeKeyword(c, DType::kInt64));
  if (rows < 0 || cols < 0) {
    return c.Error(absl::StrCat("row ", rows, " and col ", cols, " must be non-negative"));
  }
  auto first_col = [&](int64_t r) { return std::clamp<int64_t>(r + offset, 0, cols); };
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += cols - first_col(r);
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, {2, count}));
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = first_col(r); col < cols; ++col, ++k) {
      SetElement(out, k, static_cast<double>(r));
      SetElement(out, count + k, static_cast<double>(col));
    }
  }
  return std::vector<Tensor>{out};
}

// ---- embedding bags ------------------------------------------------------------------------

constexpr int64_t kBagSum = 0, kBagMean = 1, kBagMax = 2;

// _embedding_bag's arguments, checked as ATen's check_arguments does, and each bag's range
// [begin[b], begin[b + 1]) of the indices.
struct Bags {
  Tensor weight, indices, offsets;  // weight 2-D float; indices, offsets contiguous integers
  std::optional<Tensor> per_sample_weights;
  int64_t mode = kBagSum, padding_idx = -1, num_bags = 0;
  DType index_dtype = DType::kInt64;  // offset2bag's, bag_size's and max_indices'
  std::vector<int64_t> begin;         // num_bags + 1 entries, the last the indices' count
};

absl::Status CheckBagOffsets(const KernelCall& c, Bags& b, bool include_last) {
  const int64_t n = b.indices.numel(), m = b.offsets.numel();
  if (include_last && m < 1) return c.Error("include_last_offset needs at least one offset");
  b.num_bags = m - (include_last ? 1 : 0);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t o = IndexAt(b.offsets, i);
    if (i == 0 && o != 0) {
      return c.Error(absl::StrCat("offsets[0] is ", o, "; the first bag has to start at 0"));
    }
    // ATen does not check the order; a decreasing offset gives it negative bag sizes.
    if (i > 0 && o < b.begin.back()) {
      return c.Error(absl::StrCat("offsets[", i, "] is ", o, ", below offsets[", i - 1, "]"));
    }
    if (o > n) {
      return c.Error(absl::StrCat("offsets[", i, "] is ", o, ", past the ", n, " indices"));
    }
    if (i < b.num_bags) b.begin.push_back(o);
  }
  // With include_last_offset ATen's paths disagree on indices past the last offset (its
  // offset2bag gives them to the last bag, its float sum drops them): refused here.
  if (include_last && IndexAt(b.offsets, m - 1) != n) {
    return c.Error(absl::StrCat("with include_last_offset the last offset should be ", n,
                                " (the indices' count), got ", IndexAt(b.offsets, m - 1)));
  }
  b.begin.push_back(n);
  return absl::OkStatus();
}

absl::StatusOr<Bags> ReadBags(KernelCall& c) {
  Bags b;
  OVERLAP_ASSIGN_OR_RETURN(Tensor w, c.TensorArg("weight"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, c.TensorArg("indices"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor off, c.TensorArg("offsets"));
  OVERLAP_ASSIGN_OR_RETURN(b.mode, c.IntArg("mode"));
  OVERLAP_ASSIGN_OR_RETURN(bool include_last, c.BoolArg("include_last_offset"));
  OVERLAP_ASSIGN_OR_RETURN(b.padding_idx, c.IntArg("padding_idx"));
  OVERLAP_ASSIGN_OR_RETURN(b.per_sample_weights, c.OptionalTensorArg("per_sample_weights"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, idx, "indices"));
  OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, off, "offsets"));
  if (w.dim() != 2) return c.Error(absl::StrCat("weight should be 2-D, got ", w.DebugString()));
  if (idx.dim() != 1 || off.dim() != 1) return c.Error("indices and offsets should be 1-D");
  if (b.mode < kBagSum || b.mode > kBagMax) {
    return c.Error(absl::StrCat("mode ", b.mode, " is not 0 (sum), 1 (mean) or 2 (max)"));
  }
  b.index_dtype = idx.dtype() == off.dtype() ? idx.dtype() : DType::kInt64;  // ATen promotes
  OVERLAP_ASSIGN_OR_RETURN(b.weight, Contiguous(c, w));
  OVERLAP_ASSIGN_OR_RETURN(b.indices, Contiguous(c, idx));
  OVERLAP_ASSIGN_OR_RETURN(b.offsets, Contiguous(c, off));
  if (b.per_sample_weights) {
    const Tensor& p = *b.per_sample_weights;
    if (b.mode != kBagSum) return c.Error("per_sample_weights are only supported with mode sum");
    if (p.dtype() != w.dtype() || p.dim() != 1 || p.numel() != idx.numel()) {
      return c.Error(absl::StrCat("per_sample_weights ", p.DebugString(),
                                  " should be 1-D of the weight's dtype, one per index"));
    }
    OVERLAP_ASSIGN_OR_RETURN(b.per_sample_weights, Contiguous(c, p));
  }
  OVERLAP_RETURN_IF_ERROR(CheckBagOffsets(c, b, include_last));
  return b;
}

// _embedding_bag: (output, offset2bag, bag_size, max_indices) as ATen's CPU kernel gives them.
// Indices equal to padding_idx (>= 0) are left out and not counted in bag_size. sum: bag_size
// and max_indices are zeros, offset2bag empty for a float32 weight without padding_idx (ATen's
// fast path; the backward then rebuilds it from the offsets). mean: divided by the bag's size
// (at least 1); max_indices is bag_size. max: the element-wise maximum (the first on ties),
// max_indices the weight row each came from, [num_bags, dim] (0 for an empty bag).
Results EmbeddingBag(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Bags b, ReadBags(c));
  const int64_t dim = b.weight.shape()[1], rows = b.weight.shape()[0], n = b.indices.numel();
  const bool fast_sum =
      b.mode == kBagSum && b.weight.dtype() == DType::kFloat32 && b.padding_idx < 0;
  OVERLAP_ASSIGN_OR_RETURN(Tensor offset2bag, c.NewOutput(b.index_dtype, {fast_sum ? 0 : n}));
  OVERLAP_ASSIGN_OR_RETURN(Tensor bag_size, c.NewOutput(b.index_dtype, {b.num_bags}));
  std::vector<int64_t> max_shape = {b.num_bags};
  if (b.mode == kBagMax) max_shape.push_back(dim);
  OVERLAP_ASSIGN_OR_RETURN(Tensor max_indices, c.NewOutput(b.index_dtype, max_shape));
  return DispatchFloat(c, b.weight.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(b.weight.dtype(), {b.num_bags, dim}));
    const T* w = b.weight.data<T>();
    const T* psw = b.per_sample_weights ? b.per_sample_weights->data<T>() : nullptr;
    T* o = out.data<T>();
    for (int64_t bag = 0; bag < b.num_bags; ++bag) {
      int64_t size = 0;
      bool empty = true;
      T* row = o + bag * dim;
      for (int64_t i = b.begin[bag]; i < b.begin[bag + 1]; ++i) {
        const int64_t r = IndexAt(b.indices, i);
        if (r < 0 || r >= rows) {
          return c.Error(absl::StrCat("embedding_bag index ", r, " out of range [0, ", rows, ")"));
        }
        if (!fast_sum) SetInteger(offset2bag, i, bag);
        if (r == b.padding_idx) continue;
        ++size;
        const T* src = w + r * dim;
        if (b.mode == kBagMax) {
          for (int64_t d = 0; d < dim; ++d) {
            if (empty || src[d] > row[d]) {
              row[d] = src[d];
              SetInteger(max_indices, bag * dim + d, r);
            }
          }
          empty = false;
          continue;
        }
        const T scale = psw != nullptr ? psw[i] : T(1);
        for (int64_t d = 0; d < dim; ++d) row[d] += psw != nullptr ? src[d] * scale : src[d];
      }
      if (b.mode == kBagMean) {
        const T div = static_cast<T>(std::max<int64_t>(size, 1));
        for (int64_t d = 0; d < dim; ++d) row[d] /= div;
      }
      if (b.mode != kBagSum) SetInteger(bag_size, bag, size);
      if (b.mode == kBagMean) SetInteger(max_indices, bag, size);
    }
    return std::vector<Tensor>{out, offset2bag, bag_size, max_indices};
  });
}

// The max mode's backward: each non-empty bag's gradient to the rows its maxima came from.
template <typename T>
absl::Status BagMaxBackward(const KernelCall& c, const Tensor& g, const Tensor& bag_size,
                            const Tensor& max_indices, Tensor& out) {
  const int64_t bags = g.shape()[0], dim = g.shape()[1], rows = out.shape()[0];
  if (bag_size.numel() != bags || max_indices.numel() != bags * dim) {
    return c.Error(absl::StrCat("bag_size ", ShapeText(bag_size.shape()), " and maximum_indices ",
                                ShapeText(max_indices.shape()), " do not fit grad ",
                                ShapeText(g.shape())));
  }
  for (int64_t bag = 0; bag < bags; ++bag) {
    if (IndexAt(bag_size, bag) == 0) continue;  // an empty bag has no maxima
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t r = IndexAt(max_indices, bag * dim + d);
      if (r < 0 || r >= rows) {
        return c.Error(absl::StrCat("maximum_indices value ", r, " out of range [0, ", rows, ")"));
      }
      out.data<T>()[r * dim + d] += g.data<T>()[bag * dim + d];
    }
  }
  return absl::OkStatus();
}

// The sum and mean modes' backward, in ATen's order: the indices sorted (stably), each row
// of the weight gathering its indices' bags' gradients, scaled by the per-sample weight, by
// 1 / bag_size for mean (a bag of size 0 unscaled), and with scale_grad_by_freq by ATen's
// count (the count of the i-th smallest index for the i-th distinct one, as ATen reads it).
template <typename T>
absl::Status BagSumBackward(const KernelCall& c, const Tensor& g, const Tensor& indices,
                            const Tensor& offset2bag, const Tensor& bag_size,
                            const std::optional<Tensor>& psw, bool by_freq, int64_t mode,
                            int64_t padding_idx, Tensor& out) {
  const int64_t n = indices.numel(), bags = g.shape()[0], dim = g.shape()[1];
  const int64_t rows = out.shape()[0];
  if (offset2bag.numel() != n || (psw && psw->numel() != n)) {
    return c.Error(absl::StrCat("offset2bag ", ShapeText(offset2bag.shape()),
                                " should have one bag per index (", n, ")"));
  }
  std::vector<int64_t> order(n), counts(rows, 0), sorted(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = IndexAt(indices, i);
    if (r < 0 || r >= rows) {
      return c.Error(absl::StrCat("embedding_bag index ", r, " out of range [0, ", rows, ")"));
    }
    ++counts[r];
  }
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return IndexAt(indices, a) < IndexAt(indices, b); });
  for (int64_t j = 0; j < n; ++j) sorted[j] = IndexAt(indices, order[j]);
  int64_t group = 0;
  for (int64_t j = 0; j < n; ++group) {
    const int64_t r = sorted[j];
    const int64_t end = j + counts[r];
    for (; j < end; ++j) {
      if (r == padding_idx) continue;
      const int64_t bag = IndexAt(offset2bag, order[j]);
      if (bag < 0 || bag >= bags || bag >= bag_size.numel()) {
        return c.Error(absl::StrCat("offset2bag value ", bag, " out of range [0, ", bags, ")"));
      }
      double scale = psw ? static_cast<double>(psw->data<T>()[order[j]]) : 1.0;
      if (by_freq) scale /= static_cast<double>(counts[sorted[group]]);
      if (mode == kBagMean && IndexAt(bag_size, bag) != 0) {
        scale /= static_cast<double>(IndexAt(bag_size, bag));
      }
      const T s = static_cast<T>(scale);
      T* dst = out.data<T>() + r * dim;
      const T* src = g.data<T>() + bag * dim;
      for (int64_t d = 0; d < dim; ++d) dst[d] += s * src[d];
    }
  }
  return absl::OkStatus();
}

Results EmbeddingBagDenseBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx0, c.TensorArg("indices"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor o2b0, c.TensorArg("offset2bag"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor size0, c.TensorArg("bag_size"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor max0, c.TensorArg("maximum_indices"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t rows, c.IntArg("num_weights"));
  OVERLAP_ASSIGN_OR_RETURN(bool by_freq, c.BoolArg("scale_grad_by_freq"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t mode, c.IntArg("mode"));
  OVERLAP_ASSIGN_OR_RETURN(std::optional<Tensor> psw0, c.OptionalTensorArg("per_sample_weights"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t padding_idx, c.IntArg("padding_idx"));
  if (g0.dim() != 2) return c.Error(absl::StrCat("grad should be 2-D, got ", g0.DebugString()));
  if (rows < 0) return c.Error(absl::StrCat("num_weights ", rows, " is negative"));
  if (mode < kBagSum || mode > kBagMax) {
    return c.Error(absl::StrCat("mode ", mode, " is not 0 (sum), 1 (mean) or 2 (max)"));
  }
  for (const Tensor* t : {&idx0, &o2b0, &size0, &max0}) {
    OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, *t, "indices, offset2bag, bag_size"));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, idx0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor o2b, Contiguous(c, o2b0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor sizes, Contiguous(c, size0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor maxes, Contiguous(c, max0));
  std::optional<Tensor> psw;
  if (psw0) {
    if (mode != kBagSum) return c.Error("per_sample_weights are only supported with mode sum");
    OVERLAP_RETURN_IF_ERROR(CheckDType(c, *psw0, g.dtype(), "per_sample_weights"));
    OVERLAP_ASSIGN_OR_RETURN(psw, Contiguous(c, *psw0));
  }
  return DispatchFloat(c, g.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(g.dtype(), {rows, g.shape()[1]}));
    if (mode == kBagMax) {
      OVERLAP_RETURN_IF_ERROR(BagMaxBackward<T>(c, g, sizes, maxes, out));
    } else {
      OVERLAP_RETURN_IF_ERROR(
          BagSumBackward<T>(c, g, idx, o2b, sizes, psw, by_freq, mode, padding_idx, out));
    }
    return std::vector<Tensor>{out};
  });
}

// repeat(self, repeats): self tiled repeats[i] times along dimension i, self's shape padded
// with leading ones to len(repeats) (fewer repeats than dimensions is ATen's error). The
// copy of one view: self at shape [1, p0, 1, p1, ...] broadcast (stride 0) to
// [r0, p0, r1, p1, ...], then read as [r0 p0, r1 p1, ...].
absl::StatusOr<std::vector<Tensor>> Repeat(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, c.IntListArg("repeats"));
  const int64_t n = static_cast<int64_t>(repeats.size());
  if (n < x0.dim()) {
    return c.Error(absl::StrCat("repeats has ", n, " dimensions, fewer than self's ", x0.dim()));
  }
  for (int64_t r : repeats) {
    if (r < 0) return c.Error(absl::StrCat("repeat count ", r, " is negative"));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  std::vector<int64_t> padded(n - x.dim(), 1), strides_of_x(n - x.dim(), 0);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  strides_of_x.insert(strides_of_x.end(), x.strides().begin(), x.strides().end());
  std::vector<int64_t> wide_shape, wide_strides, out_shape;
  for (int64_t i = 0; i < n; ++i) {
    wide_shape.insert(wide_shape.end(), {repeats[i], padded[i]});
    wide_strides.insert(wide_strides.end(), {0, strides_of_x[i]});
    out_shape.push_back(repeats[i] * padded[i]);
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), out_shape));
  if (out.numel() == 0) return std::vector<Tensor>{out};
  OVERLAP_ASSIGN_OR_RETURN(Tensor wide, x.AsStrided(wide_shape, wide_strides, x.offset()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor target, out.View(wide_shape));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, wide, target));
  return std::vector<Tensor>{out};
}

}  // namespace
}  // namespace kernels

void RegisterScatterKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.gather.default", Gather);
  r.Register("aten.scatter.src", [](KernelCall& c) { return Scatter(c, /*with_src=*/true); });
  r.Register("aten.scatter.value", [](KernelCall& c) { return Scatter(c, /*with_src=*/false); });
  r.Register("aten.scatter_add.default", ScatterAdd);
  r.Register("aten.select_scatter.default", SelectScatter);
  r.Register("aten.cumsum.default", Cumsum);
  r.Register("aten.histc.default", Histc);
  r.Register("aten.flip.default", Flip);
  r.Register("aten.repeat_interleave.Tensor", RepeatInterleave);
  r.Register("aten.repeat.default", Repeat);
  r.Register("aten.triu_indices.default", TriuIndices);
  r.Register("aten._embedding_bag.default", EmbeddingBag);
  r.Register("aten._embedding_bag_dense_backward.default", EmbeddingBagDenseBackward);
}

}  // namespace overlap
