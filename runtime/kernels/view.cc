// View kernels: results that share their input's storage and allocate nothing (docs/ops.md's
// "alias" ops), and clone, the copy that makes a view contiguous.
#include <algorithm>
#include <limits>
#include <optional>

#include "graph/status_macros.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

// `size` with one -1 resolved against `numel`.
absl::StatusOr<std::vector<int64_t>> InferSize(const KernelCall& c, std::vector<int64_t> size,
                                               int64_t numel) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1) {
      if (infer >= 0) return c.Error("only one dimension can be -1");
      infer = static_cast<int64_t>(i);
    } else if (size[i] < 0) {
      return c.Error(absl::StrCat("negative size ", size[i]));
    } else if (__builtin_mul_overflow(known, size[i], &known)) {
      return c.Error(absl::StrCat("shape [", absl::StrJoin(size, ", "), "] has too many elements"));
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return c.Error(absl::StrCat("cannot infer -1 for ", numel, " elements"));
    }
    size[infer] = numel / known;
  } else if (known != numel) {
    return c.Error(absl::StrCat("shape [", absl::StrJoin(size, ", "), "] is invalid for ", numel,
                                " elements"));
  }
  return size;
}

// The strides viewing `shape` / `strides` as `size` without a copy, when they exist
// (ATen's rule: each run of dimensions that is contiguous in memory may be re-split).
std::optional<std::vector<int64_t>> ViewStrides(const std::vector<int64_t>& shape,
                                                const std::vector<int64_t>& strides,
                                                const std::vector<int64_t>& size) {
  std::vector<int64_t> out(size.size(), 1);
  if (shape.empty()) return out;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel == 0) return ContiguousStrides(size);
  int64_t view_d = static_cast<int64_t>(size.size()) - 1;
  int64_t chunk_base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || size[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base;
        view_numel *= size[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// aten.view / _unsafe_view / reshape / _reshape_alias: the elements of self in row-major
// order as `size`; a view when self's layout allows one (as in PyTorch), else a contiguous
// copy. PyTorch refuses a view of a layout that allows none, but the layout an exported graph
// was traced with is torch's, not this executor's: torch keeps an elementwise result in its
// input's memory format (a channels-last or permuted result), where every value here is
// contiguous, so a view valid in torch may need a copy here. The interpreter counts such a
// copy (RunResult::view_copies). _reshape_alias's strides are torch's layout's and are not
// read.
absl::StatusOr<std::vector<Tensor>> ViewKernel(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  // reshape names its shape `shape`; the others `size`.
  OVERLAP_ASSIGN_OR_RETURN(
      std::vector<int64_t> size,
      c.IntListArg(c.node().target() == "aten.reshape.default" ? "shape" : "size"));
  if (c.node().target() == "aten._reshape_alias.default") {
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, c.IntListArg("stride"));
    if (size.size() != stride.size()) return c.Error("size and stride differ in length");
  }
  OVERLAP_ASSIGN_OR_RETURN(size, InferSize(c, std::move(size), x.numel()));
  if (!x.IsContiguous()) {
    if (std::optional<std::vector<int64_t>> s = ViewStrides(x.shape(), x.strides(), size)) {
      return One(x.AsStrided(size, *s, x.offset()));
    }
    OVERLAP_ASSIGN_OR_RETURN(x, CopyToOutput(c, x));
  }
  absl::StatusOr<Tensor> v = x.View(size);
  if (!v.ok()) return c.Error(v.status().message());
  return std::vector<Tensor>{*v};
}

absl::StatusOr<std::vector<Tensor>> T(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  if (x.dim() > 2) return c.Error(absl::StrCat("t() expects at most 2 dimensions, got ", x.dim()));
  if (x.dim() < 2) return std::vector<Tensor>{x};
  return One(x.Transpose(0, 1));
}

// as_strided: a window on self's storage (storage_offset None: self's own offset), as ATen
// addresses it; a window reaching outside the storage is refused.
absl::StatusOr<std::vector<Tensor>> AsStrided(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, c.IntListArg("stride"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t offset, c.IntArg("storage_offset", x.offset()));
  if (size.size() != stride.size()) return c.Error("size and stride differ in length");
  absl::StatusOr<Tensor> v = x.AsStrided(size, stride, offset);
  if (!v.ok()) return c.Error(v.status().message());
  return std::vector<Tensor>{*v};
}

absl::StatusOr<std::vector<Tensor>> Permute(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.IntListArg("dims"));
  if (static_cast<int64_t>(dims.size()) != x.dim())
    return c.Error("dims should name every dimension");
  std::vector<int64_t> shape, strides;
  std::vector<bool> seen(x.dim(), false);
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
    if (seen[d]) return c.Error("dims repeats a dimension");
    seen[d] = true;
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
  }
  return One(x.AsStrided(shape, strides, x.offset()));
}

// select(self, dim, index): the slice at `index` of `dim`, that dimension removed (a view).
absl::StatusOr<Tensor> SelectView(const KernelCall& c, const Tensor& x, int64_t dim,
                                  int64_t index) {
  if (x.dim() == 0) return c.Error("select of a 0-d tensor");
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, x.dim()));
  const int64_t n = x.shape()[dim];
  if (index < -n || index >= n) {
    return c.Error(absl::StrCat("select index ", index, " out of range for size ", n));
  }
  if (index < 0) index += n;
  std::vector<int64_t> shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return x.AsStrided(shape, strides, x.offset() + index * x.strides()[dim]);
}

absl::StatusOr<std::vector<Tensor>> Select(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t index, c.IntArg("index"));
  return One(SelectView(c, x, dim, index));
}

// select_backward(grad, input_sizes, dim, index): zeros of input_sizes, grad at the slice.
absl::StatusOr<std::vector<Tensor>> SelectBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, c.IntListArg("input_sizes"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t index, c.IntArg("index"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewOutput(g.dtype(), sizes));
  OVERLAP_ASSIGN_OR_RETURN(Tensor dst, SelectView(c, out, dim, index));
  if (dst.shape() != g.shape()) {
    return c.Error(absl::StrCat("grad ", g.DebugString(), " does not fit ", dst.DebugString()));
  }
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, g, dst));
  return std::vector<Tensor>{out};
}

// split_with_sizes: views of `self` along dim, of the given sizes (adding up to it).
absl::StatusOr<std::vector<Tensor>> SplitWithSizes(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, c.IntListArg("split_sizes"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, c.IntArg("dim"));
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, x, "self"));
  OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
  int64_t total = 0;
  for (int64_t n : sizes) {
    if (n < 0) return c.Error(absl::StrCat("split_sizes holds a negative size ", n));
    total += n;
  }
  if (total != x.shape()[d]) {
    return c.Error(
        absl::StrCat("split_sizes add up to ", total, ", not dimension ", d, "'s ", x.shape()[d]));
  }
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t n : sizes) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor piece, x.Slice(d, start, start + n));
    out.push_back(piece);
    start += n;
  }
  return out;
}

// aten.detach: the same tensor (no autograd here).
absl::StatusOr<std::vector<Tensor>> Detach(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  return std::vector<Tensor>{x};
}

absl::StatusOr<std::vector<Tensor>> Transpose(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t a, c.IntArg("dim0"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t b, c.IntArg("dim1"));
  OVERLAP_ASSIGN_OR_RETURN(a, WrapDim(c, a, x.dim()));
  OVERLAP_ASSIGN_OR_RETURN(b, WrapDim(c, b, x.dim()));
  if (x.dim() == 0) return std::vector<Tensor>{x};
  return One(x.Transpose(a, b));
}

absl::StatusOr<std::vector<Tensor>> Unsqueeze(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim() + 1));
  std::vector<int64_t> shape = x.shape(), strides = x.strides();
  const int64_t stride = d < x.dim() ? x.strides()[d] * x.shape()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return One(x.AsStrided(shape, strides, x.offset()));
}

absl::StatusOr<std::vector<Tensor>> SqueezeDim(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.IntListArg("dim"));
  std::vector<int64_t> shape, strides;
  std::vector<bool> drop(x.dim(), false);
  for (int64_t d : dims) {
    OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
    if (x.dim() > 0 && x.shape()[d] == 1) drop[d] = true;
  }
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (drop[i]) continue;
    shape.push_back(x.shape()[i]);
    strides.push_back(x.strides()[i]);
  }
  return One(x.AsStrided(shape, strides, x.offset()));
}

absl::StatusOr<std::vector<Tensor>> Expand(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  if (size.size() < x.shape().size()) {
    return c.Error(absl::StrCat("cannot expand ", x.DebugString(), " to fewer dimensions"));
  }
  const size_t lead = size.size() - x.shape().size();
  std::vector<int64_t> strides(size.size(), 0);
  for (size_t i = 0; i < size.size(); ++i) {
    if (i < lead) {
      if (size[i] < 0) return c.Error("expand: -1 for a new leading dimension");
      continue;
    }
    const int64_t have = x.shape()[i - lead];
    if (size[i] == -1) size[i] = have;
    if (size[i] == have) {
      strides[i] = x.strides()[i - lead];
    } else if (have != 1) {
      return c.Error(
          absl::StrCat("cannot expand ", x.DebugString(), " to [", absl::StrJoin(size, ", "), "]"));
    }
  }
  return One(x.AsStrided(size, strides, x.offset()));
}

absl::StatusOr<std::vector<Tensor>> Split(KernelCall& c) { return SplitViews(c); }

// unbind: one view per step along `dim`, each without it.
absl::StatusOr<std::vector<Tensor>> Unbind(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, c.IntArg("dim"));
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, x, "self"));
  OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.shape()[d]; ++i) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor step, x.Select(d, i));
    out.push_back(step);
  }
  return out;
}

absl::StatusOr<std::vector<Tensor>> SliceKernel(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, c.IntArg("dim"));
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, x, "self"));
  OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
  OVERLAP_ASSIGN_OR_RETURN(int64_t start, c.IntArg("start", 0));
  OVERLAP_ASSIGN_OR_RETURN(int64_t end, c.IntArg("end", std::numeric_limits<int64_t>::max()));
  OVERLAP_ASSIGN_OR_RETURN(int64_t step, c.IntArg("step"));
  const int64_t size = x.shape()[d];
  if (start < 0) start = std::max<int64_t>(start + size, 0);
  if (end < 0) end = std::max<int64_t>(end + size, 0);
  start = std::min(start, size);
  end = std::min(end, size);
  absl::StatusOr<Tensor> v = x.Slice(d, start, std::max(start, end), step);
  if (!v.ok()) return c.Error(v.status().message());
  return std::vector<Tensor>{*v};
}

absl::StatusOr<std::vector<Tensor>> Flatten(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t s, c.IntArg("start_dim"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t e, c.IntArg("end_dim"));
  OVERLAP_ASSIGN_OR_RETURN(s, WrapDim(c, s, x.dim()));
  OVERLAP_ASSIGN_OR_RETURN(e, WrapDim(c, e, x.dim()));
  if (x.dim() == 0) return One(x.View({1}));
  if (s > e) return c.Error("flatten: start_dim after end_dim");
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + s);
  shape.push_back(Prod(x.shape(), s, e + 1));
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  if (!x.IsContiguous()) {
    if (std::optional<std::vector<int64_t>> s = ViewStrides(x.shape(), x.strides(), shape)) {
      return One(x.AsStrided(shape, *s, x.offset()));
    }
    OVERLAP_ASSIGN_OR_RETURN(x, CopyToOutput(c, x));  // PyTorch's flatten copies here too
  }
  return One(x.View(shape));
}

absl::StatusOr<std::vector<Tensor>> Clone(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  return One(CopyToOutput(c, x));
}

}  // namespace
}  // namespace kernels

void RegisterViewKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.view.default", ViewKernel);
  r.Register("aten._unsafe_view.default", ViewKernel);
  r.Register("aten.reshape.default", ViewKernel);
  r.Register("aten.t.default", T);
  r.Register("aten._reshape_alias.default", ViewKernel);
  r.Register("aten.as_strided.default", AsStrided);
  r.Register("aten.detach.default", Detach);
  r.Register("aten.permute.default", Permute);
  r.Register("aten.select.int", Select);
  r.Register("aten.select_backward.default", SelectBackward);
  r.Register("aten.transpose.int", Transpose);
  r.Register("aten.unsqueeze.default", Unsqueeze);
  r.Register("aten.squeeze.dim", SqueezeDim);
  r.Register("aten.squeeze.dims", SqueezeDim);
  r.Register("aten.expand.default", Expand);
  r.Register("aten.split.Tensor", Split);
  r.Register("aten.split_with_sizes.default", SplitWithSizes);
  r.Register("aten.unbind.int", Unbind);
  r.Register("aten.slice.Tensor", SliceKernel);
  r.Register("aten.flatten.using_ints", Flatten);
  r.Register("aten.clone.default", Clone);
}

}  // namespace overlap
