// Maximum reductions: max.dim (values and int64 indices along one dimension) and amax (the
// values over any dimensions). Every dtype the runtime holds (16-bit floats reach kernels as
// float32), compared in its own type, as ATen's CPU kernels compare: NaN propagates, and
// max.dim's index is the first maximal element's, or the first NaN's.
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

// max.dim(self, dim, keepdim=False) -> (values, indices). ATen refuses an empty reduced
// dimension ("Expected reduction dim to have non-zero size"); a 0-d self is its own maximum.
Results MaxDim(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t dim, c.IntArg("dim"));
  OVERLAP_ASSIGN_OR_RETURN(bool keepdim, c.BoolArg("keepdim"));
  OVERLAP_ASSIGN_OR_RETURN(dim, WrapDim(c, dim, x0.dim()));
  std::vector<int64_t> shape = x0.shape();
  if (x0.dim() > 0) {
    if (shape[dim] == 0) return c.Error(absl::StrCat("reduction dim ", dim, " has size 0"));
    if (keepdim) {
      shape[dim] = 1;
    } else {
      shape.erase(shape.begin() + dim);
    }
  }
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
}

}  // namespace overlap
