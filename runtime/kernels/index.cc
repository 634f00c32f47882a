// Indexing kernels: embedding, index_select / index_add, advanced indexing, concatenation,
// sorting and top-k, arange (gather and the scatters along a dimension: scatter.cc).
// Indices out of range are errors naming the node.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/op_args.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

absl::Status CheckIndex(const KernelCall& c, int64_t i, int64_t n, absl::string_view what) {
  if (i < 0 || i >= n) {
    return c.Error(absl::StrCat(what, " index ", i, " out of range [0, ", n, ")"));
  }
  return absl::OkStatus();
}

Results Embedding(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(EmbeddingArgs args, ReadEmbeddingArgs(c));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w, Contiguous(c, args.weight));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, args.indices));
  std::vector<int64_t> shape = idx.shape();
  const int64_t d = w.shape()[1], rows = w.shape()[0], esz = DTypeSize(w.dtype());
  shape.push_back(d);
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(w.dtype(), shape));
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const int64_t r = IndexAt(idx, i);
    OVERLAP_RETURN_IF_ERROR(CheckIndex(c, r, rows, "embedding"));
    std::memcpy(Bytes(out) + i * d * esz, Bytes(w) + r * d * esz, d * esz);
  }
  return std::vector<Tensor>{out};
}

Results EmbeddingDenseBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(EmbeddingBackwardArgs args, ReadEmbeddingBackwardArgs(c));
  const int64_t rows = args.num_weights, padding = args.padding_idx, d = args.dim;
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, args.grad_output));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, args.indices));
  return DispatchFloat(c, g.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(g.dtype(), {rows, d}));  // zeroed
    // nn_ops.h's EmbeddingBackwardUnit (one unit per column, for the CUDA backend) a row of
    // the gradient at a time: each element adds the same terms in the same order, and
    // the rows are read and written whole instead of a column at a stride.
    const T* pg = g.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < idx.numel(); ++i) {
      const int64_t r =
          idx.dtype() == DType::kInt32 ? idx.data<int32_t>()[i] : idx.data<int64_t>()[i];
      if (r < 0 || r >= rows) {
        return c.Error(absl::StrCat("embedding index ", r, " out of range [0, ", rows, ")"));
      }
      if (r == padding) continue;
      T* dst = o + r * d;
      const T* src = pg + i * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
    }
    return std::vector<Tensor>{out};
  });
}

// The order of the n values along `dim` for each (outer, inner) line: stable, ascending or
// descending. Returns, per line, the sorted positions.
template <typename T>
void SortLine(const T* x, int64_t base, int64_t stride, int64_t n, bool descending,
              std::vector<int64_t>& order) {
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  // NaN orders above every number, as in PyTorch (a strict weak order with NaNs).
  auto less = [](T a, T b) {
    if (a != a) return false;  // NaN is never less
    if (b != b) return true;   // a number is less than NaN
    return a < b;
  };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const T va = x[base + a * stride], vb = x[base + b * stride];
    return descending ? less(vb, va) : less(va, vb);
  });
}

Results TopK(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t k, c.IntArg("k"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool largest, c.BoolArg("largest"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, x0.dim()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const Around a = Split3(x.shape(), dim);
  if (k < 0 || k > a.n) return c.Error(absl::StrCat("k ", k, " out of range for ", a.n));
  std::vector<int64_t> shape = x.shape();
  if (!shape.empty()) shape[dim] = k;
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor values, c.NewOutput(x.dtype(), shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor indices, c.NewOutput(DType::kInt64, shape));
    const T* in = x.data<T>();
    std::vector<int64_t> order;
    for (int64_t p = 0; p < a.outer; ++p) {
      for (int64_t q = 0; q < a.inner; ++q) {
        SortLine(in, p * a.n * a.inner + q, a.inner, a.n, largest, order);
        for (int64_t i = 0; i < k; ++i) {
          const int64_t at = p * k * a.inner + i * a.inner + q;
          values.data<T>()[at] = in[p * a.n * a.inner + order[i] * a.inner + q];
          indices.data<int64_t>()[at] = order[i];
        }
      }
    }
    return std::vector<Tensor>{values, indices};
  });
}

// argsort and sort: each line along dim ordered stably (ties by position, NaN above every
// number); {indices} or, with `values`, {values, indices}. torch's CPU sort is not stable,
// so the indices of equal elements may differ from its; the values do not.
Results SortAlong(KernelCall& c, bool values) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool descending, c.BoolArg("descending"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, x0.dim()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const Around a = Split3(x.shape(), dim);
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(DType::kInt64, x.shape()));
  Tensor sorted;
  if (values) {
    OVERLAP_ASSIGN_OR_RETURN(sorted, c.NewUninitializedOutput(x.dtype(), x.shape()));
  }
  auto sort = [&](auto tag) -> absl::Status {
    using T = decltype(tag);
    std::vector<int64_t> order;
    for (int64_t p = 0; p < a.outer; ++p) {
      for (int64_t q = 0; q < a.inner; ++q) {
        const int64_t base = p * a.n * a.inner + q;
        SortLine(x.data<T>(), base, a.inner, a.n, descending, order);
        for (int64_t i = 0; i < a.n; ++i) {
          out.data<int64_t>()[base + i * a.inner] = order[i];
          if (values) sorted.data<T>()[base + i * a.inner] = x.data<T>()[base + order[i] * a.inner];
        }
      }
    }
    return absl::OkStatus();
  };
  if (x.dtype() == DType::kInt64) {
    OVERLAP_RETURN_IF_ERROR(sort(int64_t{}));
  } else if (x.dtype() == DType::kInt32) {
    OVERLAP_RETURN_IF_ERROR(sort(int32_t{}));
  } else {
    OVERLAP_RETURN_IF_ERROR(DispatchFloat(c, x.dtype(), sort));
  }
  if (values) return std::vector<Tensor>{sorted, out};
  return std::vector<Tensor>{out};
}

Results ArgSort(KernelCall& c) { return SortAlong(c, /*values=*/false); }

Results IndexSelect(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(IndexAlongArgs args, ReadIndexSelectArgs(c));
  const int64_t dim = args.dim;
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, args.self));
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, args.index));
  const Around a = Split3(x.shape(), dim);
  const int64_t m = idx.numel(), esz = DTypeSize(x.dtype());
  std::vector<int64_t> shape = x.shape();
  if (!shape.empty()) shape[dim] = m;
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(x.dtype(), shape));
  for (int64_t j = 0; j < m; ++j) {
    OVERLAP_RETURN_IF_ERROR(CheckIndex(c, IndexAt(idx, j), a.n, "index_select"));
  }
  for (int64_t p = 0; p < a.outer; ++p) {
    for (int64_t j = 0; j < m; ++j) {
      std::memcpy(Bytes(out) + ((p * m + j) * a.inner) * esz,
                  Bytes(x) + ((p * a.n + IndexAt(idx, j)) * a.inner) * esz, a.inner * esz);
    }
  }
  return std::vector<Tensor>{out};
}

// index_add (functional: into a copy of self) and index_add_ (into self, returned).
Results IndexAdd(KernelCall& c, bool in_place) {
  OVERLAP_ASSIGN_OR_RETURN(IndexAlongArgs args, ReadIndexAddArgs(c));
  const Tensor& self = args.self;
  const int64_t dim = args.dim;
  const double alpha = args.alpha;
  OVERLAP_ASSIGN_OR_RETURN(Tensor idx, Contiguous(c, args.index));
  OVERLAP_ASSIGN_OR_RETURN(Tensor src, Contiguous(c, args.source));
  Tensor out = self;
  if (!in_place) {
    OVERLAP_ASSIGN_OR_RETURN(out, CopyToOutput(c, self));
  } else if (!self.IsContiguous()) {
    return c.Error("index_add_ into a non-contiguous tensor");
  }
  const Around a = Split3(out.shape(), dim);
  const int64_t m = idx.numel();
  for (int64_t j = 0; j < m; ++j) {
    OVERLAP_RETURN_IF_ERROR(CheckIndex(c, IndexAt(idx, j), a.n, "index_add"));
  }
  if ((out.dtype() == DType::kInt64 || out.dtype() == DType::kInt32) &&
      src.dtype() == out.dtype()) {
    // Integers, added exactly on the host (embedding_bag's backward counts bags this way).
    const int64_t scale = static_cast<int64_t>(alpha);
    for (int64_t p = 0; p < a.outer; ++p) {
      for (int64_t j = 0; j < m; ++j) {
        const int64_t dst = (p * a.n + IndexAt(idx, j)) * a.inner, from = (p * m + j) * a.inner;
        for (int64_t q = 0; q < a.inner; ++q) {
          SetInteger(out, dst + q, IndexAt(out, dst + q) + scale * IndexAt(src, from + q));
        }
      }
    }
    return std::vector<Tensor>{out};
  }
  return DispatchFloat(c, out.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    NnArgs n;
    n.op = NnOp::kIndexAdd;
    n.is_double = std::is_same_v<T, double>;
    n.batch = a.outer;
    n.rows = m;
    n.cols = a.inner;
    n.cols2 = a.n;
    n.b = src.data<T>();
    n.index = Bytes(idx);
    n.index32 = idx.dtype() == DType::kInt32;
    n.scale = alpha;
    n.out = out.data<T>();
    OVERLAP_RETURN_IF_ERROR(RunNn(c, n, "index_add index"));
    return std::vector<Tensor>{out};
  });
}

Results Cat(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> parts, c.TensorListArg("tensors"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  if (parts.empty()) return c.Error("cat of no tensors");
  // 1-D empty tensors are skipped, as PyTorch does.
  std::vector<Tensor> used;
  for (const Tensor& t : parts) {
    if (!(t.dim() == 1 && t.numel() == 0)) used.push_back(t);
  }
  if (used.empty()) return One(c.NewOutput(parts[0].dtype(), {0}));
  const Tensor& first = used[0];
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, first, "a tensor to concatenate"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, first.dim()));
  std::vector<int64_t> shape = first.shape();
  shape[dim] = 0;
  for (const Tensor& t : used) {
    if (t.dtype() != first.dtype() || t.dim() != first.dim()) {
      return c.Error("cat of tensors with different dtypes or ranks");
    }
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d != dim && t.shape()[d] != first.shape()[d]) {
        return c.Error(
            absl::StrCat("cat: ", t.DebugString(), " does not match ", first.DebugString()));
      }
    }
    shape[dim] += t.shape()[dim];
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(first.dtype(), shape));
  int64_t at = 0;
  for (const Tensor& t : used) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor dst, out.Slice(dim, at, at + t.shape()[dim]));
    OVERLAP_RETURN_IF_ERROR(CopyInto(c, t, dst));
    at += t.shape()[dim];
  }
  return std::vector<Tensor>{out};
}

// PyTorch's promotion for stack: equal dtypes stay; else the widest floating dtype present,
// else int64.
DType StackDType(const std::vector<Tensor>& parts) {
  DType best = parts[0].dtype();
  for (const Tensor& t : parts) {
    if (t.dtype() == best) continue;
    const bool tf = IsFloatingPoint(t.dtype()), bf = IsFloatingPoint(best);
    if (tf && (!bf || DTypeSize(t.dtype()) > DTypeSize(best))) {
      best = t.dtype();
    } else if (!tf && !bf) {
      best = DType::kInt64;
    }
  }
  return best;
}

// stack: each tensor copied (converted to the promoted dtype) into its slot of a new
// dimension `dim` (0..rank).
Results Stack(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> parts, c.TensorListArg("tensors"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  if (parts.empty()) return c.Error("stack of no tensors");
  const Tensor& first = parts[0];
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, first.dim() + 1));
  for (const Tensor& t : parts) {
    if (t.shape() != first.shape()) {
      return c.Error(
          absl::StrCat("stack: ", t.DebugString(), " does not match ", first.DebugString()));
    }
  }
  std::vector<int64_t> shape = first.shape();
  shape.insert(shape.begin() + dim, static_cast<int64_t>(parts.size()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(StackDType(parts), shape));
  for (size_t i = 0; i < parts.size(); ++i) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor dst, out.Select(dim, static_cast<int64_t>(i)));
    OVERLAP_RETURN_IF_ERROR(CopyInto(c, parts[i], dst));
  }
  return std::vector<Tensor>{out};
}

// constant_pad_nd: `value` everywhere, then the part of self the padding keeps copied in.
Results ConstantPadNd(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad, c.IntListArg("pad"));
  OVERLAP_ASSIGN_OR_RETURN(double value, c.DoubleArg("value"));
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size() / 2) > x.dim()) {
    return c.Error(absl::StrCat("pad has ", pad.size(), " entries for ", x.DebugString()));
  }
  std::vector<int64_t> shape = x.shape();
  Tensor src = x;
  std::vector<std::pair<int64_t, int64_t>> keep(x.dim());  // dst range per dimension
  for (int64_t d = 0; d < x.dim(); ++d) keep[d] = {0, x.shape()[d]};
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i);
    const int64_t left = pad[2 * i], right = pad[2 * i + 1];
    shape[d] += left + right;
    if (shape[d] < 0) return c.Error("the padding crops a dimension below zero");
    const int64_t lo = std::max<int64_t>(0, -left);
    const int64_t hi = std::max<int64_t>(lo, x.shape()[d] - std::max<int64_t>(0, -right));
    OVERLAP_ASSIGN_OR_RETURN(src, src.Slice(d, lo, hi));
    keep[d] = {std::max<int64_t>(0, left), std::max<int64_t>(0, left) + (hi - lo)};
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), shape));
  FillContiguous(out, value);
  Tensor dst = out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    OVERLAP_ASSIGN_OR_RETURN(dst, dst.Slice(d, keep[d].first, keep[d].second));
  }
  if (src.numel() > 0) OVERLAP_RETURN_IF_ERROR(CopyInto(c, src, dst));
  return std::vector<Tensor>{out};
}

// slice_scatter: a copy of self with src written over self[dim, start:end:step].
Results SliceScatter(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor src, c.TensorArg("src"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, x, "self"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, x.dim()));
  const int64_t size = x.shape()[dim];
  OVERLAP_ASSIGN_OR_RETURN(int64_t start, c.IntArg("start", 0));
  OVERLAP_ASSIGN_OR_RETURN(int64_t end, c.IntArg("end", size));
  OVERLAP_ASSIGN_OR_RETURN(int64_t step, c.IntArg("step"));
  if (step <= 0) return c.Error("step must be positive");
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, x, out));
  OVERLAP_ASSIGN_OR_RETURN(Tensor dst, out.Slice(dim, start, end, step));
  if (dst.shape() != src.shape()) {
    return c.Error(
        absl::StrCat("src ", src.DebugString(), " does not fit the slice ", dst.DebugString()));
  }
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, src, dst));
  return std::vector<Tensor>{out};
}

// self[indices] for a contiguous self of `self_shape` (NumPy advanced indexing, as ATen's
// index.Tensor): the result's shape and, per result element in row-major order, the
// contiguous offset of the element of self it reads. Index tensors broadcast together; their
// shape replaces the indexed dimensions where those are adjacent, else leads. Negative
// indices count from the end; one out of range is an error naming the node. O(result).
struct AdvancedIndex {
  std::vector<int64_t> shape;
  std::vector<int64_t> source;
};

absl::StatusOr<AdvancedIndex> PlanAdvancedIndex(KernelCall& c,
                                                const std::vector<int64_t>& self_shape) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<std::optional<Tensor>> given,
                           c.OptionalTensorListArg("indices"));
  const int64_t nd = static_cast<int64_t>(self_shape.size());
  if (static_cast<int64_t>(given.size()) > nd) {
    return c.Error(
        absl::StrCat("too many indices (", given.size(), ") for a rank-", nd, " tensor"));
  }
  std::vector<int64_t> positions;
  std::vector<Tensor> tensors;
  std::vector<int64_t> bshape;
  for (size_t i = 0; i < given.size(); ++i) {
    if (!given[i].has_value()) continue;
    if (given[i]->dtype() == DType::kBool || given[i]->dtype() == DType::kUInt8) {
      return c.Error(absl::StrCat("index ", i, " is a boolean mask (a data-dependent shape)"));
    }
    OVERLAP_RETURN_IF_ERROR(CheckIndexTensor(c, *given[i], "indices"));
    if (tensors.empty()) {
      bshape = given[i]->shape();
    } else {
      OVERLAP_ASSIGN_OR_RETURN(bshape, BroadcastShape(c, bshape, given[i]->shape()));
    }
    positions.push_back(static_cast<int64_t>(i));
    tensors.push_back(*given[i]);
  }
  std::vector<int64_t> cs(nd, 1);  // self's contiguous strides
  for (int64_t d = nd - 2; d >= 0; --d) cs[d] = cs[d + 1] * self_shape[d + 1];
  // Each result dimension: a dimension of self (>= 0) or of the index shape (-1 - j).
  const bool adjacent = positions.empty() || positions.back() - positions.front() + 1 ==
                                                 static_cast<int64_t>(positions.size());
  std::vector<int64_t> dims;
  auto add_index_dims = [&] {
    for (size_t j = 0; j < bshape.size(); ++j) dims.push_back(-1 - static_cast<int64_t>(j));
  };
  if (!adjacent) add_index_dims();
  for (int64_t d = 0; d < nd; ++d) {
    if (adjacent && !positions.empty() && d == positions.front()) add_index_dims();
    if (std::find(positions.begin(), positions.end(), d) == positions.end()) dims.push_back(d);
  }
  AdvancedIndex plan;
  for (int64_t d : dims) plan.shape.push_back(d >= 0 ? self_shape[d] : bshape[-1 - d]);
  std::vector<std::vector<int64_t>> bstrides;
  for (const Tensor& t : tensors) bstrides.push_back(BroadcastStrides(t, bshape));
  const int64_t total = Prod(plan.shape, 0, static_cast<int64_t>(plan.shape.size()));
  plan.source.reserve(total);
  std::vector<int64_t> at(dims.size(), 0), bat(bshape.size(), 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] >= 0) {
        off += at[k] * cs[dims[k]];
      } else {
        bat[-1 - dims[k]] = at[k];
      }
    }
    for (size_t k = 0; k < tensors.size(); ++k) {
      int64_t where = 0;
      for (size_t j = 0; j < bshape.size(); ++j) where += bat[j] * bstrides[k][j];
      const Tensor& t = tensors[k];
      int64_t i = t.dtype() == DType::kInt64 ? t.data<int64_t>()[where]
                                             : static_cast<int64_t>(t.data<int32_t>()[where]);
      const int64_t size = self_shape[positions[k]];
      if (i < 0) i += size;
      OVERLAP_RETURN_IF_ERROR(CheckIndex(c, i < 0 ? i - size : i, size, "index"));
      off += i * cs[positions[k]];
    }
    plan.source.push_back(off);
    for (int64_t k = static_cast<int64_t>(at.size()) - 1; k >= 0; --k) {
      if (++at[k] < plan.shape[k]) break;
      at[k] = 0;
    }
  }
  return plan;
}

// index.Tensor: self's elements gathered at the indices.
Results IndexTensor(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(AdvancedIndex plan, PlanAdvancedIndex(c, x.shape()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), plan.shape));
  const int64_t esz = DTypeSize(x.dtype());
  for (size_t e = 0; e < plan.source.size(); ++e) {
    std::memcpy(Bytes(out) + e * esz, Bytes(x) + plan.source[e] * esz, esz);
  }
  return std::vector<Tensor>{out};
}

// index_put: a copy of self with values (broadcast to self[indices]'s shape) written at the
// indices, or added there with accumulate (repeated indices add up; without accumulate the
// last write wins, where ATen leaves the order undefined).
Results IndexPut(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor values, c.TensorArg("values"));
  OVERLAP_ASSIGN_OR_RETURN(bool accumulate, c.BoolArg("accumulate"));
  OVERLAP_RETURN_IF_ERROR(CheckDType(c, values, x.dtype(), "values"));
  OVERLAP_ASSIGN_OR_RETURN(AdvancedIndex plan, PlanAdvancedIndex(c, x.shape()));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> b, BroadcastShape(c, plan.shape, values.shape()));
  if (b != plan.shape) {
    return c.Error(absl::StrCat("values ", values.DebugString(),
                                " do not broadcast to the indexed shape [",
                                absl::StrJoin(plan.shape, ", "), "]"));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, x, out));
  std::vector<int64_t> dense(plan.shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(dense.size()) - 2; d >= 0; --d) {
    dense[d] = dense[d + 1] * plan.shape[d + 1];
  }
  const std::vector<int64_t> vs = BroadcastStrides(values, plan.shape);
  if (!accumulate) {
    const int64_t esz = DTypeSize(x.dtype());
    ForEach2(plan.shape, vs, dense, [&](int64_t v, int64_t e) {
      std::memcpy(Bytes(out) + plan.source[e] * esz, Bytes(values) + v * esz, esz);
    });
    return std::vector<Tensor>{out};
  }
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* src = values.data<T>();
    ForEach2(plan.shape, vs, dense, [&](int64_t v, int64_t e) { o[plan.source[e]] += src[v]; });
    return std::vector<Tensor>{out};
  });
}

// as_strided_scatter: a contiguous copy of self (storage offset 0) with src written through
// the window (size, stride, storage_offset) of that copy's storage.
Results AsStridedScatter(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor src, c.TensorArg("src"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, c.IntListArg("stride"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t offset, c.IntArg("storage_offset", 0));
  if (size.size() != stride.size()) return c.Error("size and stride differ in length");
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, x, out));
  absl::StatusOr<Tensor> window = out.AsStrided(size, stride, out.offset() + offset);
  if (!window.ok()) return c.Error(window.status().message());
  if (window->shape() != src.shape()) {
    return c.Error(absl::StrCat("src ", src.DebugString(), " does not fit the window ",
                                window->DebugString()));
  }
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, src, *window));
  return std::vector<Tensor>{out};
}

// unsafe_split: split's pieces, each copied into new storage (the schema declares no alias).
Results UnsafeSplit(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> views, SplitViews(c));
  std::vector<Tensor> out;
  for (const Tensor& piece : views) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy, c.NewUninitializedOutput(piece.dtype(), piece.shape()));
    OVERLAP_RETURN_IF_ERROR(CopyInto(c, piece, copy));
    out.push_back(copy);
  }
  return out;
}

Results SliceBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, c.IntListArg("input_sizes"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t start, c.IntArg("start"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t end, c.IntArg("end"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t step, c.IntArg("step"));
  if (sizes.empty()) return c.Error("input_sizes should have a dimension");
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, static_cast<int64_t>(sizes.size())));
  const int64_t size = sizes[dim];
  if (start < 0) start = std::max<int64_t>(start + size, 0);
  if (end < 0) end = std::max<int64_t>(end + size, 0);
  start = std::min(start, size);
  end = std::min(end, size);
  end = std::max(start, end);
  if (step == 1 && g.IsContiguous() && g.dim() == static_cast<int64_t>(sizes.size())) {
    // A contiguous block per outer index: zeros before and after it, the gradient in it,
    // each byte written once (no zero-fill of the whole output first).
    bool same = true;
    for (size_t d = 0; d < sizes.size(); ++d) {
      same = same && g.shape()[d] == (static_cast<int64_t>(d) == dim ? end - start : sizes[d]);
    }
    if (same) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(g.dtype(), sizes));
      const int64_t es = DTypeSize(g.dtype());
      int64_t outer = 1, inner = es;
      for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
      for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
      const int64_t before = start * inner, part = (end - start) * inner;
      const int64_t after = (size - end) * inner, row = size * inner;
      const std::byte* src = g.storage()->data() + g.offset() * es;
      std::byte* dst = out.storage()->data() + out.offset() * es;
      ParallelFor(
          outer,
          [&](int64_t b, int64_t e) {
            for (int64_t o = b; o < e; ++o) {
              std::byte* r = dst + o * row;
              std::memset(r, 0, before);
              std::memcpy(r + before, src + o * part, part);
              std::memset(r + before + part, 0, after);
            }
          },
          std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(1, row)));
      return std::vector<Tensor>{out};
    }
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(g.dtype(), sizes));
  absl::StatusOr<Tensor> dst = out.Slice(dim, start, end, step);
  if (!dst.ok()) return c.Error(dst.status().message());
  if (dst->shape() != g.shape()) {
    return c.Error(
        absl::StrCat("grad ", g.DebugString(), " does not match the slice ", dst->DebugString()));
  }
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, g, *dst));
  return std::vector<Tensor>{out};
}

}  // namespace
}  // namespace kernels

void RegisterIndexKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.embedding.default", Embedding);
  r.Register("aten.embedding_dense_backward.default", EmbeddingDenseBackward);
  r.Register("aten.topk.default", TopK);
  r.Register("aten.argsort.default", ArgSort);
  r.Register("aten.sort.default", [](KernelCall& c) { return SortAlong(c, /*values=*/true); });
  r.Register("aten.index_select.default", IndexSelect);
  r.Register("aten.index_add.default", [](KernelCall& c) { return IndexAdd(c, false); });
  r.Register("aten.index_add_.default", [](KernelCall& c) { return IndexAdd(c, true); });
  r.Register("aten.cat.default", Cat);
  r.Register("aten.stack.default", Stack);
  r.Register("aten.constant_pad_nd.default", ConstantPadNd);
  r.Register("aten.slice_scatter.default", SliceScatter);
  r.Register("aten.as_strided_scatter.default", AsStridedScatter);
  r.Register("aten.index.Tensor", IndexTensor);
  r.Register("aten.index_put.default", IndexPut);
  r.Register("aten.unsafe_split.Tensor", UnsafeSplit);
  r.Register("aten.slice_backward.default", SliceBackward);
}

}  // namespace overlap
