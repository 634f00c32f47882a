// Helpers shared by the CPU kernel files (internal): dtype dispatch, contiguous copies,
// broadcasting and strided loops.
#ifndef OVERLAP_RUNTIME_KERNELS_KERNEL_UTIL_H_
#define OVERLAP_RUNTIME_KERNELS_KERNEL_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/type_promotion.h"
#include "runtime/core/parallel.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/nn_ops.h"

namespace overlap {
namespace kernels {

// Calls fn(T{}) with T = float or double for `d`; an error naming the node otherwise
// (16-bit floats reach kernels as float32: the interpreter converts them).
template <typename F>
auto DispatchFloat(const KernelCall& c, DType d, F&& fn) -> decltype(fn(float{})) {
  if (d == DType::kFloat32) return fn(float{});
  if (d == DType::kFloat64) return fn(double{});
  return c.Error(absl::StrCat("no kernel for dtype ", DTypeName(d), " (float32 and float64 only)"));
}

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kFloat64;
}

// A max pooling's kernel body: allocates its two outputs of `shape`, the maxima in x's dtype
// and their int64 indices within each input plane (both uninitialized), then calls
// fill(xs, os, is) with x's, the maxima's and the indices' data (T* for T = float or double)
// to write every element; returns {maxima, indices}. Errors for another dtype or a failed
// allocation. O(numel(shape)) for the outputs, plus fill's cost.
template <typename F>
absl::StatusOr<std::vector<Tensor>> MaxPoolWithIndices(KernelCall& c, const Tensor& x,
                                                       const std::vector<int64_t>& shape,
                                                       F&& fill) {
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> absl::StatusOr<std::vector<Tensor>> {
    using T = decltype(tag);
    absl::StatusOr<Tensor> out = c.NewUninitializedOutput(x.dtype(), shape);
    if (!out.ok()) return out.status();
    absl::StatusOr<Tensor> idx = c.NewUninitializedOutput(DType::kInt64, shape);
    if (!idx.ok()) return idx.status();
    fill(x.data<T>(), out->data<T>(), idx->data<int64_t>());
    return std::vector<Tensor>{*std::move(out), *std::move(idx)};
  });
}

// Result dtypes are graph/type_promotion.h's (ATen's result_type and each family's contract),
// the rule the shape rules follow too.
// A tensor as an operand of type promotion: dimensioned or zero-dim, its dtype.
inline PromotionOperand OperandOf(const Tensor& t) {
  return PromotionOperand::Tensor(DTypeName(t.dtype()), t.dim());
}
// The dtype graph/type_promotion.h decided, as a DType; its refusal (bool subtraction, mean of
// integers) or a dtype the runtime has no tensors of (int8, int16) an error naming the node.
absl::StatusOr<DType> DecidedDType(const KernelCall& c, absl::StatusOr<std::string> dtype);
// sum's / mean's result dtype for a `self` of dtype `self` and the call's dtype keyword
// (ReductionResultType), float32 as float64 in a float64 run (in_double); errors name the
// node.
absl::StatusOr<DType> ReductionDType(const KernelCall& c, ReductionOp op, DType self);
// `t` with dtype `d`: itself when it has it, else a contiguous copy converted (as SetElement
// converts) in scratch. O(numel) for a copy.
absl::StatusOr<Tensor> Converted(KernelCall& c, const Tensor& t, DType d);

// A dimension index wrapped into [0, ndim); an error naming the node when out of range.
absl::StatusOr<int64_t> WrapDim(const KernelCall& c, int64_t d, int64_t ndim);

// Copies src's elements into dst (same shape and dtype, any strides). O(numel).
void CopyElements(const Tensor& src, Tensor& dst);

// Sets every element of the contiguous `out` to `value`, converted as SetElement converts it
// (a kernel's new result: full, fill, ones_like, constant_pad_nd's border). One dtype
// dispatch, then a fill loop. O(numel).
void FillContiguous(Tensor& out, double value);

// dst's elements become src's (equal shapes; another dtype is converted), on the call's device when
// its tensors live on one (the device's copy kernel), else on the host: what lets a kernel that
// only moves elements (cat, slice_backward) run on every backend as it is. O(numel).
absl::Status CopyInto(KernelCall& c, const Tensor& src, Tensor& dst);

// split.Tensor's pieces of `self` (split_size along dim), as views; one piece, `self`
// itself, for an empty dimension. Errors name the node. O(pieces).
absl::StatusOr<std::vector<Tensor>> SplitViews(KernelCall& c);

// `t` itself when contiguous, else a contiguous copy in scratch.
absl::StatusOr<Tensor> Contiguous(KernelCall& c, const Tensor& t);
// A new contiguous result holding `t`'s elements.
absl::StatusOr<Tensor> CopyToOutput(KernelCall& c, const Tensor& t);

// Visits every index of `shape` in row-major order, calling fn(offset_a, offset_b) with the
// storage offsets (relative to each tensor's first element) under strides `sa` and `sb`.
template <typename F>
void ForEach2(const std::vector<int64_t>& shape, const std::vector<int64_t>& sa,
              const std::vector<int64_t>& sb, F&& fn) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  std::vector<int64_t> idx(nd, 0);
  int64_t oa = 0, ob = 0;
  while (true) {
    fn(oa, ob);
    int64_t d = nd - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        oa += sa[d];
        ob += sb[d];
        break;
      }
      oa -= sa[d] * (shape[d] - 1);
      ob -= sb[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// ForEach2 by rows: the dimensions merged where both stride sets allow (so a per-channel
// operand's rows span a whole plane), then fn(offset_a, offset_b, n, step_a, step_b) once per
// row of the last merged dimension: n elements at offset + i * step. The caller's inner loop
// is then a plain loop the compiler vectorizes (steps 1 or 0 in the common cases).
template <typename F>
void ForEachRow2(const std::vector<int64_t>& shape, const std::vector<int64_t>& sa,
                 const std::vector<int64_t>& sb, F&& fn) {
  std::vector<int64_t> m, ma, mb;  // merged, outermost first
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (!m.empty() && ma.back() == sa[d] * shape[d] && mb.back() == sb[d] * shape[d]) {
      m.back() *= shape[d];
      ma.back() = sa[d];
      mb.back() = sb[d];
      continue;
    }
    m.push_back(shape[d]);
    ma.push_back(sa[d]);
    mb.push_back(sb[d]);
  }
  if (m.empty()) return fn(int64_t{0}, int64_t{0}, int64_t{1}, int64_t{1}, int64_t{1});
  const int64_t n = m.back(), step_a = ma.back(), step_b = mb.back();
  m.pop_back();
  ma.pop_back();
  mb.pop_back();
  if (m.empty()) return fn(int64_t{0}, int64_t{0}, n, step_a, step_b);
  ForEach2(m, ma, mb, [&](int64_t oa, int64_t ob) { fn(oa, ob, n, step_a, step_b); });
}

// The broadcast shape of two shapes (NumPy rules); an error naming the node otherwise.
absl::StatusOr<std::vector<int64_t>> BroadcastShape(const KernelCall& c,
                                                    const std::vector<int64_t>& a,
                                                    const std::vector<int64_t>& b);
// Strides that read `t` broadcast to `shape` (zero strides on broadcast dimensions).
std::vector<int64_t> BroadcastStrides(const Tensor& t, const std::vector<int64_t>& shape);

// The product of shape[begin, end).
int64_t Prod(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

// A contiguous tensor of `shape` seen as [outer, n, inner] around dimension `dim` (already
// wrapped); a scalar is [1, 1, 1].
struct Around {
  int64_t outer, n, inner;
};
Around Split3(const std::vector<int64_t>& shape, int64_t dim);

// One result as a kernel's return value.
inline absl::StatusOr<std::vector<Tensor>> One(absl::StatusOr<Tensor> t) {
  if (!t.ok()) return t.status();
  return std::vector<Tensor>{*std::move(t)};
}

// Reads an integer tensor's element (int64 or int32) at flat contiguous index i.
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}
// Writes `v` as element k of the contiguous integer or bool tensor `out`: wrapped to an
// integer dtype's width, nonzero for bool (an integer result of type promotion).
inline void SetInteger(Tensor& out, int64_t k, int64_t v) {
  switch (out.dtype()) {
    case DType::kInt32:
      out.data<int32_t>()[k] = static_cast<int32_t>(static_cast<uint32_t>(v));
      return;
    case DType::kUInt8:
      out.data<uint8_t>()[k] = static_cast<uint8_t>(v);
      return;
    case DType::kBool:
      out.data<uint8_t>()[k] = v != 0;
      return;
    default:
      out.data<int64_t>()[k] = v;
  }
}
// The address of `t`'s first element (any dtype; NnArgs::index, raw row copies).
inline std::byte* Bytes(const Tensor& t) {
  return t.storage()->data() + t.offset() * DTypeSize(t.dtype());
}
// The `dtype` keyword ("torch.int64" or "int64"), else `fallback` when missing or None;
// float32 reads as float64 in a run computing in float64 (KernelCall::in_double); an error
// naming the node for another value. O(1).
absl::StatusOr<DType> DTypeKwarg(const KernelCall& c, DType fallback);
// Fails unless `t` is an int64 or int32 tensor.
absl::Status CheckIndexTensor(const KernelCall& c, const Tensor& t, absl::string_view what);
// Fails unless `t` has at least one dimension (ops PyTorch refuses on scalars).
absl::Status CheckNotScalar(const KernelCall& c, const Tensor& t, absl::string_view what);
// Fails unless `t` has dtype `d`.
absl::Status CheckDType(const KernelCall& c, const Tensor& t, DType d, absl::string_view what);
// Fails when a GEMM dimension exceeds what BLAS's 32-bit integers hold.
absl::Status CheckGemmSize(const KernelCall& c, std::initializer_list<int64_t> dims);
// Fails unless a and b have the same dtype and shape.
absl::Status CheckSame(const KernelCall& c, const Tensor& a, const Tensor& b,
                       absl::string_view what);

// Runs every unit of `a` (nn_ops.h) on the host; a bad index it met is an error naming the
// node: "<what> <index> out of range [0, <bound>)". O(the op's work).
absl::Status RunNn(const KernelCall& c, NnArgs a, absl::string_view what);

// NnRunOnHost's units (nn_ops.h), split over the OpenMP pool (ParallelFor) from 16 units
// on: units are independent by construction (the CUDA backend runs them as threads). An op
// that records a bad index (a.error) runs in order, so the first bad index is the one
// reported.
void NnRun(const NnArgs& a);

}  // namespace kernels
}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_KERNEL_UTIL_H_
