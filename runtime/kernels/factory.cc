// Factories (ones, empty, arange), dtype copies (_to_copy) and random draws (bernoulli):
// ops whose result is made, not computed from an input's values.
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/core/parallel.h"
#include "runtime/core/random.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

absl::StatusOr<std::vector<int64_t>> SizeArg(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  for (int64_t s : size) {
    if (s < 0) return c.Error(absl::StrCat("size ", s, " is negative"));
  }
  return size;
}

// ones(size, dtype=): float32 unless dtype says otherwise.
Results Ones(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, SizeArg(c));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, DType::kFloat32));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, size));
  FillContiguous(out, 1.0);
  return std::vector<Tensor>{out};
}

// empty(size, dtype=): zeroed, as empty_like is here, so no result holds stale memory.
Results Empty(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, SizeArg(c));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, DType::kFloat32));
  return One(c.NewOutput(d, size));
}

bool IsInt(const Value* v) {
  return v == nullptr || v->kind() == Value::Kind::kInt || v->kind() == Value::Kind::kBool;
}

// arange(end) and arange(start, end, step=1): ceil((end - start) / step) values start + i
// step, computed in double and rounded to the dtype; int64 when every bound is an integer,
// else float32, unless dtype says. ATen's errors: a zero step, bounds whose order disagrees
// with the step's sign, a non-finite bound.
Results Arange(KernelCall& c) {
  const Value* start_v = c.Arg("start");
  const Value* end_v = c.Arg("end");
  const Value* step_v = c.Arg("step");
  if (end_v == nullptr) return c.Error("arange needs an end");
  const bool ints = IsInt(start_v) && IsInt(end_v) && IsInt(step_v);
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, ints ? DType::kInt64 : DType::kFloat32));
  double start = 0, step = 1;
  if (start_v != nullptr) {
    OVERLAP_ASSIGN_OR_RETURN(start, c.DoubleArg("start"));
  }
  if (step_v != nullptr) {
    OVERLAP_ASSIGN_OR_RETURN(step, c.DoubleArg("step"));
  }
  OVERLAP_ASSIGN_OR_RETURN(double end, c.DoubleArg("end"));
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    return c.Error(absl::StrCat("arange's bounds must be finite: start ", start, ", end ", end,
                                ", step ", step));
  }
  if (step == 0) return c.Error("arange's step must be nonzero");
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    return c.Error(absl::StrCat("arange's bounds (start ", start, ", end ", end,
                                ") are inconsistent with the step's sign (", step, ")"));
  }
  const double count = std::ceil((end - start) / step);
  if (count > 0x1p40) return c.Error(absl::StrCat("arange of ", count, " elements"));
  const int64_t n = static_cast<int64_t>(count);
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, {n}));
  if (d == DType::kInt64 && ints) {  // exact, beyond 2^53 too
    int64_t s0 = 0, st = 1;
    if (start_v != nullptr) {
      OVERLAP_ASSIGN_OR_RETURN(s0, c.IntArg("start"));
    }
    if (step_v != nullptr) {
      OVERLAP_ASSIGN_OR_RETURN(st, c.IntArg("step"));
    }
    for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = s0 + i * st;
  } else {
    for (int64_t i = 0; i < n; ++i) SetElement(out, i, start + static_cast<double>(i) * step);
  }
  return std::vector<Tensor>{out};
}

// _to_copy(self, dtype=): a new tensor with self's values in dtype (self's when None),
// converted as ATen converts (floats to integers truncate, to bool: nonzero). Layout,
// device and memory format are read and ignored: every result here is a contiguous host or
// device tensor of the run.
Results ToCopy(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, x.dtype()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, x.shape()));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, x, out));
  return std::vector<Tensor>{out};
}

// Fills `out` (contiguous, floating or integer) with Bernoulli(p) draws: 1 where element i's
// uniform draw is below p, else 0; or with the given draw (torch's mask in a comparison).
absl::Status DrawBernoulli(KernelCall& c, double p, Tensor& out) {
  if (!(p >= 0 && p <= 1)) {
    return c.Error(absl::StrCat("bernoulli's p must be in [0, 1], got ", p));
  }
  if (const Tensor* given = c.random().given; given != nullptr) {
    if (given->shape() != out.shape()) {
      return c.Error(absl::StrCat("the given draw random/", c.node().name(), " is ",
                                  given->DebugString(), ", the node's result ", out.DebugString()));
    }
    return CopyInto(c, *given, out);
  }
  const uint64_t key = c.random().key;
  const float pf = static_cast<float>(p);
  const int64_t n = out.numel();
  // Element i's draw depends on i alone, so the loop splits across threads freely.
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      SetElement(out, i, RandomUniform01(key, static_cast<uint64_t>(i)) < pf ? 1.0 : 0.0);
    }
  });
  return absl::OkStatus();
}

// bernoulli_.float(self, p): self (contiguous) overwritten with draws, and returned.
Results BernoulliInPlace(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double p, c.DoubleArg("p"));
  if (!self.IsContiguous()) return c.Error("bernoulli_ into a non-contiguous tensor");
  if (self.dtype() == DType::kBool) return c.Error("bernoulli_ into a bool tensor");
  OVERLAP_RETURN_IF_ERROR(DrawBernoulli(c, p, self));
  return std::vector<Tensor>{self};
}

// bernoulli.p(self, p): a new tensor of self's shape and dtype holding the draws.
Results Bernoulli(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor self, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double p, c.DoubleArg("p"));
  if (!IsFloatingPoint(self.dtype())) return c.Error("bernoulli of a non-floating tensor");
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(self.dtype(), self.shape()));
  OVERLAP_RETURN_IF_ERROR(DrawBernoulli(c, p, out));
  return std::vector<Tensor>{out};
}

}  // namespace
}  // namespace kernels

void RegisterFactoryKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  r.Register("aten.ones.default", Ones);
  r.Register("aten.empty.memory_format", Empty);
  r.Register("aten.arange.default", Arange);
  r.Register("aten.arange.start_step", Arange);
  r.Register("aten.arange.start", Arange);
  r.Register("aten._to_copy.default", ToCopy);
  r.Register("aten.bernoulli_.float", BernoulliInPlace);
  r.Register("aten.bernoulli.p", Bernoulli);
}

}  // namespace overlap
