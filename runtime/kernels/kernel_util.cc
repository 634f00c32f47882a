#include "runtime/kernels/kernel_util.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "graph/status_macros.h"

namespace overlap {
namespace kernels {

absl::StatusOr<DType> DecidedDType(const KernelCall& c, absl::StatusOr<std::string> dtype) {
  if (!dtype.ok()) return c.Error(dtype.status().message());
  absl::StatusOr<DType> d = ParseDType(*dtype);
  if (!d.ok())
    return c.Error(absl::StrCat("a result of dtype ", *dtype, ": ", d.status().message()));
  return *d;
}

absl::StatusOr<DType> ReductionDType(const KernelCall& c, ReductionOp op, DType self) {
  const Value* v = c.Arg("dtype");
  const std::string keyword =
      v != nullptr && v->kind() == Value::Kind::kString ? v->as_string() : std::string();
  OVERLAP_ASSIGN_OR_RETURN(DType d,
                           DecidedDType(c, ReductionResultType(op, DTypeName(self), keyword)));
  // A float64 run computes what asks for float32 in float64, a dtype keyword included
  // (timm's EdgeNeXt sums its positional mask with cumsum(dtype=torch.float32)), as
  // DTypeKwarg does for factories and conversions.
  return c.in_double() && d == DType::kFloat32 ? DType::kFloat64 : d;
}

absl::StatusOr<Tensor> Converted(KernelCall& c, const Tensor& t, DType d) {
  if (t.dtype() == d) return t;
  absl::StatusOr<Tensor> out = c.NewScratch(d, t.shape());
  if (!out.ok()) return out.status();
  absl::Status s = CopyConvert(t, *out);
  if (!s.ok()) return c.Error(s.message());
  return out;
}

absl::StatusOr<int64_t> WrapDim(const KernelCall& c, int64_t d, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a scalar accepts 0 and -1
  if (d < -n || d >= n) {
    return c.Error(absl::StrCat("dimension ", d, " out of range for ", ndim, " dimensions"));
  }
  return d < 0 ? d + n : d;
}

namespace {

// n elements of E from s (every step_s-th) to d (every step_d-th).
template <typename E>
void CopyRow(const std::byte* s, int64_t step_s, std::byte* d, int64_t step_d, int64_t n) {
  const E* from = reinterpret_cast<const E*>(s);
  E* to = reinterpret_cast<E*>(d);
  for (int64_t i = 0; i < n; ++i) to[i * step_d] = from[i * step_s];
}

}  // namespace

void FillContiguous(Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  switch (out.dtype()) {
    case DType::kFloat32:
      std::fill_n(out.data<float>(), n, static_cast<float>(value));
      return;
    case DType::kFloat64:
      std::fill_n(out.data<double>(), n, value);
      return;
    case DType::kInt64:
      std::fill_n(out.data<int64_t>(), n, static_cast<int64_t>(value));
      return;
    case DType::kBool:
      std::memset(out.data<uint8_t>(), value != 0 ? 1 : 0, n);
      return;
    default: {  // one element converted by SetElement, then its bytes repeated
      SetElement(out, 0, value);
      const int64_t size = DTypeSize(out.dtype());
      std::byte* p = out.storage()->data() + out.offset() * size;
      for (int64_t i = 1; i < n; ++i) std::memcpy(p + i * size, p, size);
    }
  }
}

void CopyElements(const Tensor& src, Tensor& dst) {
  const int64_t size = DTypeSize(src.dtype());
  if (src.numel() == 0) return;
  const std::byte* s = src.storage()->data() + src.offset() * size;
  std::byte* d = dst.storage()->data() + dst.offset() * size;
  if (src.IsContiguous() && dst.IsContiguous()) {
    std::memcpy(d, s, src.nbytes());
    return;
  }
  // Row by row (the dimensions merged where both layouts allow): a memcpy per contiguous
  // row, else a loop of whole elements the compiler can vectorize.
  ForEachRow2(src.shape(), src.strides(), dst.strides(),
              [&](int64_t os, int64_t od, int64_t n, int64_t step_s, int64_t step_d) {
                if (step_s == 1 && step_d == 1) {
                  std::memcpy(d + od * size, s + os * size, n * size);
                } else if (size == 4) {
                  CopyRow<uint32_t>(s + os * size, step_s, d + od * size, step_d, n);
                } else if (size == 8) {
                  CopyRow<uint64_t>(s + os * size, step_s, d + od * size, step_d, n);
                } else {
                  for (int64_t i = 0; i < n; ++i) {
                    std::memcpy(d + (od + i * step_d) * size, s + (os + i * step_s) * size, size);
                  }
                }
              });
}

absl::StatusOr<Tensor> Contiguous(KernelCall& c, const Tensor& t) {
  if (t.IsContiguous()) return t;
  absl::StatusOr<Tensor> out = c.NewScratch(t.dtype(), t.shape());
  if (!out.ok()) return out.status();
  CopyElements(t, *out);
  return out;
}

absl::StatusOr<Tensor> CopyToOutput(KernelCall& c, const Tensor& t) {
  absl::StatusOr<Tensor> out = c.NewUninitializedOutput(t.dtype(), t.shape());
  if (!out.ok()) return out.status();
  if (DeviceMemory* d = c.allocator().device(); d != nullptr) {
    absl::Status s = d->Copy(t, *out);  // on a device: its copy kernel
    if (!s.ok()) return s;
    return out;
  }
  CopyElements(t, *out);
  return out;
}

absl::StatusOr<std::vector<int64_t>> BroadcastShape(const KernelCall& c,
                                                    const std::vector<int64_t>& a,
                                                    const std::vector<int64_t>& b) {
  std::optional<std::vector<int64_t>> out = BroadcastShapes(a, b);
  if (!out) {
    return c.Error(absl::StrCat("shapes [", absl::StrJoin(a, ", "), "] and [",
                                absl::StrJoin(b, ", "), "] do not broadcast"));
  }
  return *std::move(out);
}

std::vector<int64_t> BroadcastStrides(const Tensor& t, const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 0);
  const size_t lead = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i) {
    s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  return s;
}

int64_t Prod(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  int64_t p = 1;
  for (int64_t i = begin; i < end; ++i) p *= shape[i];
  return p;
}

Around Split3(const std::vector<int64_t>& shape, int64_t dim) {
  if (shape.empty()) return {1, 1, 1};
  return {Prod(shape, 0, dim), shape[dim],
          Prod(shape, dim + 1, static_cast<int64_t>(shape.size()))};
}

absl::Status CheckIndexTensor(const KernelCall& c, const Tensor& t, absl::string_view what) {
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) {
    return c.Error(absl::StrCat(what, " should be an int64 tensor, got ", t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckNotScalar(const KernelCall& c, const Tensor& t, absl::string_view what) {
  if (t.dim() == 0) return c.Error(absl::StrCat(what, " should have a dimension, got a scalar"));
  return absl::OkStatus();
}

absl::Status CheckDType(const KernelCall& c, const Tensor& t, DType d, absl::string_view what) {
  if (t.dtype() != d) {
    return c.Error(absl::StrCat(what, " is ", t.DebugString(), ", expected ", DTypeName(d)));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmSize(const KernelCall& c, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d > 2147483647) return c.Error("a matrix dimension exceeds BLAS's 32-bit integers");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> SplitViews(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t split, c.IntArg("split_size"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t d, c.IntArg("dim"));
  OVERLAP_RETURN_IF_ERROR(CheckNotScalar(c, x, "self"));
  OVERLAP_ASSIGN_OR_RETURN(d, WrapDim(c, d, x.dim()));
  if (split <= 0 && x.shape()[d] > 0) return c.Error("split_size must be positive");
  std::vector<Tensor> out;
  for (int64_t start = 0; start < x.shape()[d]; start += split) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor piece,
                             x.Slice(d, start, std::min(start + split, x.shape()[d])));
    out.push_back(piece);
  }
  if (out.empty()) out.push_back(x);
  return out;
}

absl::Status CopyInto(KernelCall& c, const Tensor& src, Tensor& dst) {
  DeviceMemory* device = c.allocator().device();
  if (device != nullptr && (src.device() != Device::kCpu || dst.device() != Device::kCpu)) {
    return device->Copy(src, dst);
  }
  if (src.dtype() != dst.dtype()) return CopyConvert(src, dst);
  CopyElements(src, dst);
  return absl::OkStatus();
}

absl::Status RunNn(const KernelCall& c, NnArgs a, absl::string_view what) {
  int64_t error[3] = {0, 0, 0};
  a.error = error;
  a.tag = 1;
  NnRunOnHost(a);
  if (error[0] != 0) {
    return c.Error(absl::StrCat(what, " ", error[1], " out of range [0, ", error[2], ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckSame(const KernelCall& c, const Tensor& a, const Tensor& b,
                       absl::string_view what) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    return c.Error(absl::StrCat(what, ": ", a.DebugString(), " and ", b.DebugString(),
                                " should have one shape and dtype"));
  }
  return absl::OkStatus();
}

void NnRun(const NnArgs& a) {
  if (a.error != nullptr) return NnRunOnHost(a);
  ParallelFor(
      NnUnits(a),
      [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          if (a.is_double) {
            NnUnit<double>(a, u);
          } else {
            NnUnit<float>(a, u);
          }
        }
      },
      16);
}

absl::StatusOr<DType> DTypeKwarg(const KernelCall& c, DType fallback) {
  const auto widened = [&](DType d) {
    return c.in_double() && d == DType::kFloat32 ? DType::kFloat64 : d;
  };
  const Value* v = c.Arg("dtype");
  if (v == nullptr || v->is_none()) return widened(fallback);
  if (v->kind() == Value::Kind::kString) {
    std::string name = v->as_string();
    if (absl::StartsWith(name, "torch.")) name = name.substr(6);
    absl::StatusOr<DType> d = ParseDType(name);
    if (!d.ok()) return c.Error(d.status().message());
    return widened(*d);
  }
  return c.Error("dtype should be a dtype name");
}

}  // namespace kernels
}  // namespace overlap
