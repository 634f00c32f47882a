// Maximum reductions: max.dim (values and int64 indices along one dimension), amax (the
// values over any dimensions), and all.dim / any.dim (the logical reductions along one). Every
// dtype the runtime holds (16-bit floats reach kernels as float32), compared in its own type, as
// ATen's CPU kernels compare: NaN propagates, and max.dim's index is the first maximal element's,
// or the first NaN's.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

// fn(T{}) with T the element type of `d` (uint8_t for bool).
template <typename F>
Results DispatchOrdered(const KernelCall& c, DType d, F&& fn) {
  switch (d) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kInt64:
      return fn(int64_t{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kUInt8:
    case DType::kBool:
      return fn(uint8_t{});
    default:
      return c.Error(absl::StrCat("no kernel for dtype ", DTypeName(d)));
  }
}

// Whether `v` replaces the running maximum `m`: larger, or NaN (never true for integers).
template <typename T>
bool Replaces(T v, T m) {
  return !(v <= m);
}

// A one-dimension reduction's (self, dim, keepdim) result shape, its dimension wrapped into
// *dim: x's less `dim`, or with it 1 under keepdim (a 0-d x stays 0-d). `nonempty`: the
// reduced dimension must not be empty (ATen's rule for max.dim).
absl::StatusOr<std::vector<int64_t>> ReducedDimShape(KernelCall& c, const Tensor& x, bool nonempty,
                                                     int64_t* dim) {
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool keepdim, c.BoolArg("keepdim"));
  OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
  *dim = d;
  std::vector<int64_t> shape = x.shape();
  if (x.dim() == 0) return shape;
  if (nonempty && shape[d] == 0) return c.Error(absl::StrCat("reduction dim ", d, " has size 0"));
  if (keepdim) {
    shape[d] = 1;
  } else {
    shape.erase(shape.begin() + d);
  }
  return shape;
}

// max.dim(self, dim, keepdim=False) -> (values, indices). ATen refuses an empty reduced
// dimension ("Expected reduction dim to have non-zero size"); a 0-d self is its own maximum.
Results MaxDim(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  int64_t dim = 0;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                           ReducedDimShape(c, x0, /*nonempty=*/true, &dim));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const Around a = Split3(x.shape(), dim);
  return DispatchOrdered(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor values, c.NewUninitializedOutput(x.dtype(), shape));
    OVERLAP_ASSIGN_OR_RETURN(Tensor indices, c.NewUninitializedOutput(DType::kInt64, shape));
    const T* in = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    ParallelFor(
        a.outer * a.inner,
        [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            const T* col = in + (k / a.inner) * a.n * a.inner + k % a.inner;
            T m = col[0];
            int64_t at = 0;
            for (int64_t i = 0; i < a.n; ++i) {
              const T v = col[i * a.inner];
              if (Replaces(v, m)) {
                m = v;
                at = i;
                if (v != v) break;  // the first NaN is the answer
              }
            }
            pv[k] = m;
            pi[k] = at;
          }
        },
        kParallelGrain / std::max<int64_t>(a.n, 1) + 1);
    return std::vector<Tensor>{values, indices};
  });
}

// argmax / argmin(self, dim=None, keepdim=False): int64, the first maximal (minimal)
// element's index along `dim`, or the first NaN's; dim None: over the flattened self, its
// shape kept as ones under keepdim. The reduced elements must not be none (ATen's rule).
Results ArgMaxMin(KernelCall& c, bool larger) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  const Value* dim_v = c.Arg("dim");
  const bool flat = dim_v == nullptr || dim_v->is_none();
  int64_t dim = 0;
  std::vector<int64_t> shape;
  OVERLAP_ASSIGN_OR_RETURN(Tensor x1, Contiguous(c, x0));
  Tensor x = x1;
  if (flat) {
    OVERLAP_ASSIGN_OR_RETURN(bool keepdim, c.BoolArg("keepdim"));
    if (x1.numel() == 0) return c.Error("an empty self has no maximum or minimum (dim None)");
    if (keepdim) shape.assign(x1.dim(), 1);
    OVERLAP_ASSIGN_OR_RETURN(x, x1.View({x1.numel()}));
  } else {
    OVERLAP_ASSIGN_OR_RETURN(shape, ReducedDimShape(c, x1, /*nonempty=*/true, &dim));
  }
  const Around a = Split3(x.shape(), dim);
  return DispatchOrdered(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor indices, c.NewUninitializedOutput(DType::kInt64, shape));
    const T* in = x.data<T>();
    int64_t* pi = indices.data<int64_t>();
    for (int64_t k = 0; k < a.outer * a.inner; ++k) {
      const T* col = in + (k / a.inner) * a.n * a.inner + k % a.inner;
      T m = col[0];
      int64_t at = 0;
      for (int64_t i = 0; i < a.n && m == m; ++i) {  // stops at the first NaN
        const T v = col[i * a.inner];
        if (larger ? Replaces(v, m) : !(v >= m)) {
          m = v;
          at = i;
        }
      }
      pi[k] = at;
    }
    return std::vector<Tensor>{indices};
  });
}

// all.dim / any.dim(self, dim, keepdim=False): whether every (some) element along `dim` is
// non-zero (NaN is non-zero), bool. An empty reduced dimension gives true (false), as ATen.
Results AllAnyDim(KernelCall& c, bool all) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  int64_t dim = 0;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                           ReducedDimShape(c, x0, /*nonempty=*/false, &dim));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  const Around a = Split3(x.shape(), dim);
  return DispatchOrdered(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(DType::kBool, shape));
    const T* in = x.data<T>();
    uint8_t* po = out.data<uint8_t>();
    for (int64_t k = 0; k < a.outer * a.inner; ++k) {
      const T* col = in + (k / a.inner) * a.n * a.inner + k % a.inner;
      bool r = all;  // all: until a zero; any: until a non-zero
      for (int64_t i = 0; i < a.n; ++i) {
        if ((col[i * a.inner] != T{0}) != all) {
          r = !all;
          break;
        }
      }
      po[k] = r ? 1 : 0;
    }
    return std::vector<Tensor>{out};
  });
}

// amax(self, dim=[], keepdim=False): the maximum over `dim` (empty: every dimension). An
// empty self needs its reduced dimensions named and non-empty, as ATen's zero-numel check.
Results Amax(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.IntListArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool keepdim, c.BoolArg("keepdim"));
  std::vector<bool> reduced(x.dim(), dims.empty());
  for (int64_t d : dims) {
    const int64_t given = d;
    OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
    if (x.dim() > 0 && reduced[d]) {
      return c.Error(absl::StrCat("dim ", given, " appears more than once in the list of dims"));
    }
    if (x.dim() > 0) reduced[d] = true;
  }
  if (x.numel() == 0 && dims.empty()) {
    return c.Error("an empty self needs the dimensions to reduce named");
  }
  std::vector<int64_t> keep_shape, out_shape;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (reduced[i] && x.shape()[i] == 0) {
      return c.Error(absl::StrCat("reduction dim ", i, " has size 0"));
    }
    keep_shape.push_back(reduced[i] ? 1 : x.shape()[i]);
    if (!reduced[i]) out_shape.push_back(x.shape()[i]);
  }
  std::vector<int64_t> acc_strides = ContiguousStrides(keep_shape);
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (reduced[i]) acc_strides[i] = 0;
  }
  return DispatchOrdered(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewUninitializedOutput(x.dtype(), keepdim ? keep_shape : out_shape));
    const T* in = x.data<T>();
    T* o = out.data<T>();
    std::vector<char> seen(out.numel(), 0);
    ForEach2(x.shape(), x.strides(), acc_strides, [&](int64_t ix, int64_t io) {
      const T v = in[ix];
      if (!seen[io]) {
        o[io] = v;
        seen[io] = 1;
      } else if (o[io] == o[io] && Replaces(v, o[io])) {  // a NaN, once there, stays
        o[io] = v;
      }
    });
    return std::vector<Tensor>{out};
  });
}

}  // namespace
}  // namespace kernels

void RegisterMaxReductionKernels(KernelRegistry& r) {
  r.Register("aten.max.dim", kernels::MaxDim);
  r.Register("aten.amax.default", kernels::Amax);
  r.Register("aten.argmax.default", [](KernelCall& c) { return kernels::ArgMaxMin(c, true); });
  r.Register("aten.argmin.default", [](KernelCall& c) { return kernels::ArgMaxMin(c, false); });
  r.Register("aten.all.dim", [](KernelCall& c) { return kernels::AllAnyDim(c, true); });
  r.Register("aten.any.dim", [](KernelCall& c) { return kernels::AllAnyDim(c, false); });
}

}  // namespace overlap
