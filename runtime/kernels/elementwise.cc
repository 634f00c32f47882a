// Elementwise kernels: arithmetic with broadcasting, activations and their backwards, and
// the zero constructors. Inputs of any strides; results contiguous. The formulas are
// elementwise_ops.h's, shared with the CUDA backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "graph/status_macros.h"
#include "runtime/core/vmath.h"
#include "runtime/kernels/elementwise_ops.h"
#include "runtime/kernels/elementwise_table.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

// An elementwise_ops.h formula with its fixed numbers: f(a, b) = Ew(op, a, b, s), and
// f(a) = Ew(op, a, b, s) with b fixed too. The loops below dispatch on op once per call
// (WithOp), so each runs one formula the compiler inlines and vectorizes, not a switch per
// element.
struct EwFormula {
  EwOp op;
  double b = 0, s = 0;
};
EwFormula EwFn(EwOp op, double s = 0) { return EwFormula{op, 0, s}; }
EwFormula EwFn1(EwOp op, double b = 0, double s = 0) { return EwFormula{op, b, s}; }

// A number converted once to each float type: a kernel's lambda reads it as its T with no
// conversion in the loop. (A double -> float conversion may raise a floating-point
// exception, so GCC neither hoists one out of a conditional nor vectorizes the loop around
// it: hardtanh's backward ran scalar and branchy, 15 ms of a 50 ms mobilenet_v2 step.)
struct Number {
  explicit Number(double v) : f(static_cast<float>(v)), d(v) {}
  template <typename T>
  T as() const {
    if constexpr (std::is_same_v<T, float>) {
      return f;
    } else {
      return static_cast<T>(d);
    }
  }
  float f;
  double d;
};

// g(std::integral_constant<EwOp, op>{}): op as a compile-time constant.
template <typename G>
void WithOp(EwOp op, G&& g) {
#define OVERLAP_EW_CASE(X)                      \
  case EwOp::X:                                 \
    g(std::integral_constant<EwOp, EwOp::X>{}); \
    return;
  switch (op) {
    OVERLAP_EW_CASE(kAdd)
    OVERLAP_EW_CASE(kMul)
    OVERLAP_EW_CASE(kDiv)
    OVERLAP_EW_CASE(kDivFloor)
    OVERLAP_EW_CASE(kDivTrunc)
    OVERLAP_EW_CASE(kSquare)
    OVERLAP_EW_CASE(kCube)
    OVERLAP_EW_CASE(kPow)
    OVERLAP_EW_CASE(kRsqrt)
    OVERLAP_EW_CASE(kSqrt)
    OVERLAP_EW_CASE(kFloor)
    OVERLAP_EW_CASE(kReciprocal)
    OVERLAP_EW_CASE(kRelu)
    OVERLAP_EW_CASE(kSilu)
    OVERLAP_EW_CASE(kGelu)
    OVERLAP_EW_CASE(kGeluTanh)
    OVERLAP_EW_CASE(kGeluBackward)
    OVERLAP_EW_CASE(kGeluTanhBackward)
    OVERLAP_EW_CASE(kSiluBackward)
    OVERLAP_EW_CASE(kSigmoid)
    OVERLAP_EW_CASE(kSigmoidBackward)
    OVERLAP_EW_CASE(kTanh)
    OVERLAP_EW_CASE(kTanhBackward)
    OVERLAP_EW_CASE(kThresholdBackward)
    OVERLAP_EW_CASE(kExp)
    OVERLAP_EW_CASE(kHardswish)
    OVERLAP_EW_CASE(kHardswishBackward)
    OVERLAP_EW_CASE(kHardsigmoid)
    OVERLAP_EW_CASE(kHardsigmoidBackward)
    OVERLAP_EW_CASE(kLeakyRelu)
    OVERLAP_EW_CASE(kLeakyReluBackward)
    OVERLAP_EW_CASE(kSin)
    OVERLAP_EW_CASE(kCos)
    OVERLAP_EW_CASE(kLog)
    OVERLAP_EW_CASE(kAbs)
    OVERLAP_EW_CASE(kSgn)
  }
#undef OVERLAP_EW_CASE
}

// The contiguous loops of Map1 and Map2, compiled on their own (noinline) with restrict
// pointers and a local copy of f: inlined into a kernel, GCC left the loop scalar and
// branchy (hardtanh's backward: a mispredicted branch on half the elements, 3.8 ns each),
// where on its own it vectorizes.
template <typename T, typename F>
__attribute__((noinline)) void Loop1(const T* __restrict x, T* __restrict o, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(x[i]));
}

template <typename T, typename F>
__attribute__((noinline)) void Loop2(const T* __restrict a, const T* __restrict b, T* __restrict o,
                                     int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(a[i], b[i]));
}

// out[i] = f(x[i]) over any strides, in x's float dtype (f called with T); every element
// written.
template <typename F>
Results Map1(KernelCall& c, const Tensor& x, F&& f) {
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
    const T* in = x.data<T>();
    T* o = out.data<T>();
    if (x.IsContiguous()) {
      ParallelFor(x.numel(), [&](int64_t begin, int64_t end) {
        Loop1<T>(in + begin, o + begin, end - begin, f);
      });
    } else {
      int64_t j = 0;
      ForEach2(x.shape(), x.strides(), x.strides(),
               [&](int64_t a, int64_t) { o[j++] = static_cast<T>(f(in[a])); });
    }
    return std::vector<Tensor>{out};
  });
}

// out = f(a, b) broadcast (NumPy rules); a and b of one float dtype; every element written.
template <typename F>
Results Map2(KernelCall& c, const Tensor& a, const Tensor& b, F&& f) {
  if (a.dtype() != b.dtype()) {
    return c.Error(absl::StrCat("operands ", a.DebugString(), " and ", b.DebugString(),
                                " have different dtypes"));
  }
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShape(c, a.shape(), b.shape()));
  return DispatchFloat(c, a.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a.dtype(), shape));
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* o = out.data<T>();
    if (a.shape() == shape && b.shape() == shape && a.IsContiguous() && b.IsContiguous()) {
      ParallelFor(out.numel(), [&](int64_t begin, int64_t end) {
        Loop2<T>(pa + begin, pb + begin, o + begin, end - begin, f);
      });
      return std::vector<Tensor>{out};
    }
    // Broadcast (a bias per channel or per row) and strided operands, a row at a time.
    T* row = o;
    const auto fn = f;  // as in Map1
    ForEachRow2(shape, BroadcastStrides(a, shape), BroadcastStrides(b, shape),
                [&](int64_t oa, int64_t ob, int64_t n, int64_t step_a, int64_t step_b) {
                  T* __restrict r = row;  // locals, restrict: as in Map1
                  const T* __restrict ra = pa + oa;
                  const T* __restrict rb = pb + ob;
                  if (step_a == 1 && step_b == 1) {
                    Loop2<T>(ra, rb, r, n, fn);
                  } else if (step_a == 1 && step_b == 0) {
                    const T v = *rb;
                    for (int64_t i = 0; i < n; ++i) r[i] = static_cast<T>(fn(ra[i], v));
                  } else if (step_a == 0 && step_b == 1) {
                    const T v = *ra;
                    for (int64_t i = 0; i < n; ++i) r[i] = static_cast<T>(fn(v, rb[i]));
                  } else {
                    for (int64_t i = 0; i < n; ++i) {
                      r[i] = static_cast<T>(fn(ra[i * step_a], rb[i * step_b]));
                    }
                  }
                  row += n;
                });
    return std::vector<Tensor>{out};
  });
}

// A formula with a transcendental part (elementwise_ops.h's EwMath1) over n contiguous
// float elements: f1 and f2 by VecApply a block at a time, the arguments and the rest by
// loops the compiler vectorizes. b null: the second operand is the number bv.
template <EwOp op>
void EwBlocks(const float* a, const float* b, float bv, float s, float* o, int64_t n) {
  // erf as PyTorch's vectorized CPU kernels compute it (vmath.h's kErfFast): SLEEF's
  // 1-ULP erf took most of the GPT's gelu time.
  constexpr VecFn f1 = EwMath1(op) == EwMath::kExp   ? VecFn::kExp
                       : EwMath1(op) == EwMath::kErf ? VecFn::kErfFast
                                                     : VecFn::kTanh;
  constexpr bool two = EwMath2(op) != EwMath::kNone;  // f2 is exp where present
  constexpr int64_t kBlock = 512;
  float t1[kBlock], t2[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t m = std::min(kBlock, n - at);
    const float* pa = a + at;
    const float* pb = b != nullptr ? b + at : nullptr;
    float* po = o + at;
    if (pb != nullptr) {
      for (int64_t i = 0; i < m; ++i) t1[i] = EwArg1<float>(op, pa[i], pb[i]);
      if constexpr (two) {
        for (int64_t i = 0; i < m; ++i) t2[i] = EwArg2<float>(op, pa[i], pb[i]);
      }
    } else {
      for (int64_t i = 0; i < m; ++i) t1[i] = EwArg1<float>(op, pa[i], bv);
      if constexpr (two) {
        for (int64_t i = 0; i < m; ++i) t2[i] = EwArg2<float>(op, pa[i], bv);
      }
    }
    VecApply(f1, t1, m);
    if constexpr (two) VecApply(VecFn::kExp, t2, m);
    if (pb != nullptr) {
      for (int64_t i = 0; i < m; ++i) {
        po[i] = EwCombine<float>(op, pa[i], pb[i], s, t1[i], two ? t2[i] : 0.0f);
      }
    } else {
      for (int64_t i = 0; i < m; ++i) {
        po[i] = EwCombine<float>(op, pa[i], bv, s, t1[i], two ? t2[i] : 0.0f);
      }
    }
  }
}

// Map1 / Map2 of a formula, specialised to its op; float32 formulas with a transcendental
// part run EwBlocks on contiguous operands.
Results Unary(KernelCall& c, const Tensor& x, const EwFormula& f) {
  Results r = std::vector<Tensor>{};
  WithOp(f.op, [&](auto k) {
    [[maybe_unused]] constexpr EwOp op = decltype(k)::value;
    if constexpr (EwMath1(op) != EwMath::kNone) {
      if (x.dtype() == DType::kFloat32 && x.IsContiguous()) {
        r = [&]() -> Results {
          OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
          const float* in = x.data<float>();
          float* o = out.data<float>();
          const float bv = static_cast<float>(f.b), sv = static_cast<float>(f.s);
          ParallelFor(x.numel(), [&](int64_t begin, int64_t end) {
            EwBlocks<op>(in + begin, nullptr, bv, sv, o + begin, end - begin);
          });
          return std::vector<Tensor>{out};
        }();
        return;
      }
    }
    r = Map1(c, x, [b = Number(f.b), s = Number(f.s)](auto v) {
      using T = decltype(v);
      return Ew<T>(op, v, b.as<T>(), s.as<T>());
    });
  });
  return r;
}

Results Binary(KernelCall& c, const Tensor& a, const Tensor& b, const EwFormula& f) {
  Results r = std::vector<Tensor>{};
  WithOp(f.op, [&](auto k) {
    [[maybe_unused]] constexpr EwOp op = decltype(k)::value;
    if constexpr (EwMath1(op) != EwMath::kNone) {
      if (a.dtype() == DType::kFloat32 && b.dtype() == DType::kFloat32 && a.shape() == b.shape() &&
          a.IsContiguous() && b.IsContiguous()) {
        r = [&]() -> Results {
          OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a.dtype(), a.shape()));
          const float* pa = a.data<float>();
          const float* pb = b.data<float>();
          float* o = out.data<float>();
          const float sv = static_cast<float>(f.s);
          ParallelFor(a.numel(), [&](int64_t begin, int64_t end) {
            EwBlocks<op>(pa + begin, pb + begin, 0.0f, sv, o + begin, end - begin);
          });
          return std::vector<Tensor>{out};
        }();
        return;
      }
    }
    r = Map2(c, a, b, [s = Number(f.s)](auto u, auto v) {
      using T = decltype(u);
      return Ew<T>(op, u, v, s.as<T>());
    });
  });
  return r;
}

// ---- arithmetic: add, sub, mul, div, neg, pow --------------------------------------------
// Each decides its result's dtype by graph/type_promotion.h (ATen's result_type and the op
// family's contract: the rule the shape rules follow), converts its tensor operands to it
// and computes there: floating dtypes by the formulas above, bool and integers exactly in
// int64, wrapping as ATen's integer kernels do.

// op(x, y) on integers (add: x + alpha y); nullopt where ATen refuses, with `what` saying why.
std::optional<int64_t> IntegerEw(EwOp op, int64_t x, int64_t y, int64_t alpha, const char** what) {
  const uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  switch (op) {
    case EwOp::kAdd:
      return static_cast<int64_t>(ux + static_cast<uint64_t>(alpha) * uy);
    case EwOp::kMul:
      return static_cast<int64_t>(ux * uy);
    case EwOp::kDivFloor:
    case EwOp::kDivTrunc: {
      if (y == 0) {
        *what = "integer division by zero";
        return std::nullopt;
      }
      if (y == -1 && x == std::numeric_limits<int64_t>::min()) {
        *what = "integer overflow";
        return std::nullopt;
      }
      int64_t q = x / y;
      if (op == EwOp::kDivFloor && x % y != 0 && ((x < 0) != (y < 0))) --q;
      return q;
    }
    case EwOp::kPow: {
      if (y < 0) {
        *what = "integers to negative integer powers are not allowed";
        return std::nullopt;
      }
      uint64_t r = 1, b = ux;
      for (uint64_t e = uy; e != 0; e >>= 1) {
        if (e & 1) r *= b;
        b *= b;
      }
      return static_cast<int64_t>(r);
    }
    default:
      *what = "no integer formula for this op";
      return std::nullopt;
  }
}

// op(a, b) elementwise on integers: b broadcast, or the number `number` without b; the result
// in `d` (an integer dtype, or bool: nonzero). a and b of any integer or bool dtype.
Results IntegerArithmetic(KernelCall& c, EwOp op, const Tensor& a0, const std::optional<Tensor>& b0,
                          int64_t number, int64_t alpha, DType d) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, Converted(c, a0, DType::kInt64));
  std::optional<Tensor> b;
  std::vector<int64_t> shape = a.shape();
  if (b0) {
    OVERLAP_ASSIGN_OR_RETURN(b, Converted(c, *b0, DType::kInt64));
    OVERLAP_ASSIGN_OR_RETURN(shape, BroadcastShape(c, a.shape(), b->shape()));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, shape));
  const int64_t* pa = a.data<int64_t>();
  const int64_t* pb = b ? b->data<int64_t>() : &number;
  const std::vector<int64_t> sb =
      b ? BroadcastStrides(*b, shape) : std::vector<int64_t>(shape.size(), 0);
  const char* what = nullptr;
  int64_t k = 0;
  ForEach2(shape, BroadcastStrides(a, shape), sb, [&](int64_t ia, int64_t ib) {
    if (what != nullptr) return;
    const std::optional<int64_t> r = IntegerEw(op, pa[ia], pb[ib], alpha, &what);
    if (r) SetInteger(out, k++, *r);
  });
  if (what != nullptr) return c.Error(what);
  return std::vector<Tensor>{out};
}

// self op other (a tensor, or a number) for add / sub / mul / div: the dtype by
// ArithmeticResultType(family, ...), the formula `ew` (add and sub: a + s b, s = alpha, or
// -alpha for sub).
Results Arithmetic(KernelCall& c, ArithmeticOp family, EwOp ew) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg("self"));
  const Value* other = c.Arg("other");
  if (other == nullptr) return c.Error("argument 'other' is missing");
  std::optional<Tensor> b;
  std::optional<PromotionOperand> y;
  if (other->is_ref()) {
    OVERLAP_ASSIGN_OR_RETURN(b, c.TensorArg("other"));
    y = OperandOf(*b);
  } else {
    y = PromotionOperand::Number(*other);
    if (!y) return c.Error("argument 'other' should be a tensor or a number");
  }
  OVERLAP_ASSIGN_OR_RETURN(DType d,
                           DecidedDType(c, ArithmeticResultType(family, {OperandOf(a), *y})));
  const bool additive = family == ArithmeticOp::kAdd || family == ArithmeticOp::kSub;
  const int sign = family == ArithmeticOp::kSub ? -1 : 1;
  if (const Value* alpha = c.Arg("alpha"); additive && alpha != nullptr) {
    const absl::Status s = CheckAlpha(DTypeName(d), *alpha);
    if (!s.ok()) return c.Error(s.message());
  }
  if (!IsFloatingPoint(d)) {
    int64_t alpha = 1, number = 0;
    if (additive) {  // integral (CheckAlpha)
      OVERLAP_ASSIGN_OR_RETURN(alpha, c.IntArg("alpha"));
    }
    if (!b) {
      OVERLAP_ASSIGN_OR_RETURN(number, c.IntArg("other"));
    }
    return IntegerArithmetic(c, ew, a, b, number, sign * alpha, d);
  }
  double s = 0;
  if (additive) {
    OVERLAP_ASSIGN_OR_RETURN(s, c.DoubleArg("alpha"));
    s *= sign;
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, a, d));
  if (!b || b->dim() == 0) {  // a number, or a 0-d tensor taking part as one
    double v = 0;
    if (b) {
      v = GetElement(*b, 0);
    } else {
      OVERLAP_ASSIGN_OR_RETURN(v, c.DoubleArg("other"));
    }
    return Unary(c, x, EwFormula{ew, v, s});
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor z, Converted(c, *b, d));
  return Binary(c, x, z, EwFormula{ew, 0, s});
}

// pow(self, exponent) with a number: result_type of the two; integers to integer powers
// exactly.
Results PowTensorScalar(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  const Value* ev = c.Arg("exponent");
  const std::optional<PromotionOperand> e =
      ev != nullptr ? PromotionOperand::Number(*ev) : std::nullopt;
  if (!e) return c.Error("argument 'exponent' should be a number");
  OVERLAP_ASSIGN_OR_RETURN(DType d, DecidedDType(c, ResultType({OperandOf(x0), *e})));
  if (!IsFloatingPoint(d)) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t n, c.IntArg("exponent"));
    return IntegerArithmetic(c, EwOp::kPow, x0, std::nullopt, n, 1, d);
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, x0, d));
  OVERLAP_ASSIGN_OR_RETURN(double p, c.DoubleArg("exponent"));
  if (p == 2) return Unary(c, x, EwFn1(EwOp::kSquare));
  if (p == 3) return Unary(c, x, EwFn1(EwOp::kCube));
  return Unary(c, x, EwFn1(EwOp::kPow, p));
}

// `name`'s value as a number operand of result_type; an error naming it otherwise.
absl::StatusOr<PromotionOperand> NumberOperand(KernelCall& c, absl::string_view name) {
  const Value* v = c.Arg(name);
  std::optional<PromotionOperand> n = v != nullptr ? PromotionOperand::Number(*v) : std::nullopt;
  if (!n) return c.Error(absl::StrCat("argument '", name, "' should be a number"));
  return *n;
}

// base ** exponent elementwise (broadcast) in d: integers to integer powers exactly.
Results PowIn(KernelCall& c, const Tensor& base, const Tensor& exponent, DType d) {
  if (!IsFloatingPoint(d)) return IntegerArithmetic(c, EwOp::kPow, base, exponent, 0, 1, d);
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, base, d));
  OVERLAP_ASSIGN_OR_RETURN(Tensor e, Converted(c, exponent, d));
  return Binary(c, x, e, EwFormula{EwOp::kPow, 0, 0});
}

// pow(self, exponent) with a tensor exponent: result_type of the two.
Results PowTensorTensor(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor e, c.TensorArg("exponent"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DecidedDType(c, ResultType({OperandOf(x), OperandOf(e)})));
  return PowIn(c, x, e, d);
}

// pow(self, exponent) with a number base and a tensor exponent (a positional table's
// 10000 ** (2 i / d)): result_type of the two, the base as a 0-d tensor broadcast.
Results PowScalarTensor(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor e, c.TensorArg("exponent"));
  OVERLAP_ASSIGN_OR_RETURN(PromotionOperand base, NumberOperand(c, "self"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DecidedDType(c, ResultType({base, OperandOf(e)})));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.NewScratch(d, {}));
  OVERLAP_ASSIGN_OR_RETURN(double v, c.DoubleArg("self"));
  SetElement(b, 0, v);
  return PowIn(c, b, e, d);
}

// rsub(self, other, alpha): other - alpha self, in result_type(self, other); two passes
// (-alpha self, then + other). An integral alpha for integral results, as sub's.
Results RsubScalar(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(PromotionOperand y, NumberOperand(c, "other"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DecidedDType(c, ResultType({OperandOf(x0), y})));
  if (const Value* alpha = c.Arg("alpha"); alpha != nullptr) {
    const absl::Status s = CheckAlpha(DTypeName(d), *alpha);
    if (!s.ok()) return c.Error(s.message());
  }
  if (!IsFloatingPoint(d)) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t alpha, c.IntArg("alpha"));
    OVERLAP_ASSIGN_OR_RETURN(int64_t number, c.IntArg("other"));
    OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> scaled,
                             IntegerArithmetic(c, EwOp::kMul, x0, std::nullopt, -alpha, 1, d));
    return IntegerArithmetic(c, EwOp::kAdd, scaled[0], std::nullopt, number, 1, d);
  }
  OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg("alpha"));
  OVERLAP_ASSIGN_OR_RETURN(double number, c.DoubleArg("other"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, x0, d));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> scaled, Unary(c, x, EwFn1(EwOp::kMul, -alpha)));
  return Unary(c, scaled[0], EwFn1(EwOp::kAdd, number, 1));
}

// The kernel of a row of the elementwise table (elementwise_table.h). kUnaryFloat: bool and
// integer inputs are computed in the default float dtype (IntegralToFloat), as ATen's
// floating unary ops (exp, sigmoid) compute them.
Kernel FromRow(const EwRow& row) {
  return [row](KernelCall& c) -> Results {
    double s = 0;
    if (row.scalar != nullptr) {
      OVERLAP_ASSIGN_OR_RETURN(s, c.DoubleArg(row.scalar));
    }
    if (row.form == EwForm::kGradInput || row.form == EwForm::kGradResult) {
      OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
      OVERLAP_ASSIGN_OR_RETURN(Tensor x,
                               c.TensorArg(row.form == EwForm::kGradInput ? "self" : "output"));
      return Binary(c, g, x, EwFn(row.op, s));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
    Tensor x = x0;
    if (row.form == EwForm::kUnaryFloat) {
      OVERLAP_ASSIGN_OR_RETURN(DType d, DecidedDType(c, IntegralToFloat(DTypeName(x0.dtype()))));
      OVERLAP_ASSIGN_OR_RETURN(x, Converted(c, x0, d));
    }
    return Unary(c, x, EwFn1(row.op, 0, s));
  };
}

// hardtanh(x, min_val=-1, max_val=1): clamp, NaN kept as ATen's clamp keeps it. mobilenet_v2's
// ReLU6 is hardtanh(x, 0, 6).
absl::StatusOr<std::pair<double, double>> HardtanhBounds(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(double lo, c.DoubleArg("min_val"));
  OVERLAP_ASSIGN_OR_RETURN(double hi, c.DoubleArg("max_val"));
  if (!(lo <= hi)) {
    return c.Error(absl::StrCat("min_val (", lo, ") must not exceed max_val (", hi, ")"));
  }
  return std::make_pair(lo, hi);
}

Results Hardtanh(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(auto bounds, HardtanhBounds(c));
  return Map1(c, x, [lo_n = Number(bounds.first), hi_n = Number(bounds.second)](auto v) {
    using T = decltype(v);
    const T lo = lo_n.as<T>(), hi = hi_n.as<T>();
    return v != v ? v : (v < lo ? lo : (v > hi ? hi : v));
  });
}

// ATen's rule: the gradient passes strictly inside (min_val, max_val), 0 on and outside.
Results HardtanhBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(auto bounds, HardtanhBounds(c));
  return Map2(c, g, x, [lo = Number(bounds.first), hi = Number(bounds.second)](auto gv, auto xv) {
    using T = decltype(gv);
    // A NaN x passes g, as in ATen. Two selects, not ||: GCC kept the short-circuit as a
    // branch in a scalar loop (mispredicted on half the elements).
    const T below = xv <= lo.as<T>() ? T(0) : gv;
    return xv >= hi.as<T>() ? T(0) : below;
  });
}

// softplus(x, beta, threshold) = log1p(exp(beta x)) / beta, x itself where beta x exceeds
// threshold (ATen's CPU formula: exp would overflow there and the two agree to rounding).
Results Softplus(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg("beta"));
  OVERLAP_ASSIGN_OR_RETURN(double threshold, c.DoubleArg("threshold"));
  return Map1(c, x, [beta, threshold](auto v) {
    using T = decltype(v);
    const T b = static_cast<T>(beta), bx = v * b;
    return bx > static_cast<T>(threshold) ? v : static_cast<T>(std::log1p(std::exp(bx))) / b;
  });
}

// ATen's: g e^(beta x) / (e^(beta x) + 1), g itself where beta x exceeds threshold.
Results SoftplusBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg("beta"));
  OVERLAP_ASSIGN_OR_RETURN(double threshold, c.DoubleArg("threshold"));
  return Map2(c, g, x, [beta, threshold](auto gv, auto xv) {
    using T = decltype(gv);
    const T bx = xv * static_cast<T>(beta);
    const T z = std::exp(bx);
    return bx > static_cast<T>(threshold) ? gv : gv * z / (z + T(1));
  });
}

// GELU, exact (erf) or PyTorch's tanh approximation.

absl::StatusOr<bool> GeluTanh(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::string approximate, c.StringArg("approximate"));
  if (approximate != "none" && approximate != "tanh") {
    return c.Error(absl::StrCat("approximate must be 'none' or 'tanh', got '", approximate, "'"));
  }
  return approximate == "tanh";
}

Results Gelu(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(bool tanh_approx, GeluTanh(c));
  return Unary(c, x, EwFn1(tanh_approx ? EwOp::kGeluTanh : EwOp::kGelu));
}

Results GeluBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(bool tanh_approx, GeluTanh(c));
  return Binary(c, g, x, EwFn(tanh_approx ? EwOp::kGeluTanhBackward : EwOp::kGeluBackward));
}

// abs and sgn keep self's dtype: floats by the formula, integers exactly (abs wraps the
// most negative value, as ATen does); bool: sgn is the identity, abs is refused (ATen
// refuses it).
Kernel AbsOrSgn(EwOp op) {
  return [op](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
    if (IsFloatingPoint(x.dtype())) return Unary(c, x, EwFn1(op));
    if (x.dtype() == DType::kBool && op == EwOp::kAbs) {
      return c.Error("abs of a bool tensor is not supported (ATen refuses it)");
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor wide, Converted(c, x, DType::kInt64));
    OVERLAP_ASSIGN_OR_RETURN(Tensor in, Contiguous(c, wide));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
    const int64_t* v = in.data<int64_t>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const uint64_t magnitude = v[i] < 0 ? 0 - static_cast<uint64_t>(v[i]) : v[i];
      SetInteger(out, i,
                 op == EwOp::kAbs ? static_cast<int64_t>(magnitude) : (v[i] > 0) - (v[i] < 0));
    }
    return std::vector<Tensor>{out};
  };
}

// neg: self's dtype; integers exactly; bool refused, as ATen refuses it.
Results Neg(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  if (x.dtype() == DType::kBool) {
    return c.Error("negation of a bool tensor is not supported (ATen refuses it: use bitwise_not)");
  }
  if (!IsFloatingPoint(x.dtype())) {
    return IntegerArithmetic(c, EwOp::kMul, x, std::nullopt, -1, 1, x.dtype());
  }
  return Unary(c, x, EwFn1(EwOp::kMul, -1));
}

// g where self > 0, else negative_slope g. With self_is_result (an in-place forward saved
// its result), a negative slope flips the sign test: ATen refuses it, and so do we.
Results LeakyReluBackward(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, c.TensorArg("grad_output"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double slope, c.DoubleArg("negative_slope"));
  OVERLAP_ASSIGN_OR_RETURN(bool self_is_result, c.BoolArg("self_is_result"));
  if (self_is_result && slope < 0) {
    return c.Error(absl::StrCat("self_is_result with a negative negative_slope (", slope,
                                ") is not supported, as in ATen"));
  }
  return Binary(c, g, x, EwFn(EwOp::kLeakyReluBackward, slope));
}

// div with rounding_mode None (true division: integers give float32), "trunc" or "floor"
// (integers stay integers, exactly), by a tensor or a number.
Results DivMode(KernelCall& c) {
  const Value* mode_v = c.Arg("rounding_mode");
  std::string mode = "none";
  if (mode_v != nullptr && mode_v->kind() == Value::Kind::kString) mode = mode_v->as_string();
  if (mode != "none" && mode != "floor" && mode != "trunc") {
    return c.Error(
        absl::StrCat("rounding_mode must be None, 'trunc' or 'floor', got '", mode, "'"));
  }
  if (mode == "none") return Arithmetic(c, ArithmeticOp::kTrueDivide, EwOp::kDiv);
  return Arithmetic(c, ArithmeticOp::kRoundingDivide,
                    mode == "floor" ? EwOp::kDivFloor : EwOp::kDivTrunc);
}

Results ZerosLike(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, x.dtype()));
  return One(c.NewOutput(d, x.shape()));
}

// zeros(size, dtype=): float32 unless dtype says otherwise.
Results Zeros(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  for (int64_t s : size) {
    if (s < 0) return c.Error(absl::StrCat("size ", s, " is negative"));
  }
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, DType::kFloat32));
  return One(c.NewOutput(d, size));
}

// full(size, fill_value, dtype=): every element fill_value; the dtype given, else the
// value's (float32 for a float, int64 for an int, bool for a bool), as torch infers it.
Results Full(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  for (int64_t s : size) {
    if (s < 0) return c.Error(absl::StrCat("size ", s, " is negative"));
  }
  const Value* v = c.Arg("fill_value");
  const DType inferred = v != nullptr && v->kind() == Value::Kind::kBool  ? DType::kBool
                         : v != nullptr && v->kind() == Value::Kind::kInt ? DType::kInt64
                                                                          : DType::kFloat32;
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, inferred));
  double value = 0;
  if (v != nullptr && v->kind() == Value::Kind::kBool) {
    value = v->as_bool() ? 1 : 0;
  } else {
    OVERLAP_ASSIGN_OR_RETURN(value, c.DoubleArg("fill_value"));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, size));
  FillContiguous(out, value);
  return std::vector<Tensor>{out};
}

// fill.Scalar(self, value): self's shape and dtype, every element `value`.
Results Fill(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(double value, c.DoubleArg("value"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  FillContiguous(out, value);
  return std::vector<Tensor>{out};
}

// fill.Tensor(self, value): fill.Scalar with a 0-d tensor's number.
Results FillTensor(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor v, c.TensorArg("value"));
  if (v.numel() != 1 || v.dim() != 0) {
    return c.Error(absl::StrCat("value should be a 0-d tensor, got ", v.DebugString()));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  const double value = GetElement(v, 0);
  FillContiguous(out, value);
  return std::vector<Tensor>{out};
}

// roll(self, shifts, dims): element i of each rolled dimension moves to i + shift (mod its
// size); without dims, the flattened tensor rolls.
Results Roll(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> shifts, c.IntListArg("shifts"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.IntListArg("dims"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  const int64_t n = x.numel();
  if (dims.empty()) {
    if (shifts.size() != 1) return c.Error("roll without dims takes one shift");
    for (int64_t i = 0; i < n; ++i) {
      SetElement(out, ((i + shifts[0]) % n + n) % n, GetElement(x, i));
    }
    return std::vector<Tensor>{out};
  }
  if (shifts.size() != dims.size()) return c.Error("roll: shifts and dims differ in length");
  std::vector<int64_t> shift(x.dim(), 0);
  for (size_t k = 0; k < dims.size(); ++k) {
    OVERLAP_ASSIGN_OR_RETURN(int64_t d, WrapDim(c, dims[k], x.dim()));
    shift[d] += shifts[k];
  }
  std::vector<int64_t> at(x.dim(), 0);  // the element's index, dimension by dimension
  for (int64_t i = 0; i < n; ++i) {
    int64_t to = 0;
    for (int64_t d = 0; d < x.dim(); ++d) {
      const int64_t size = x.shape()[d];
      to = to * size + ((at[d] + shift[d]) % size + size) % size;
    }
    SetElement(out, to, GetElement(x, i));
    for (int64_t d = x.dim() - 1; d >= 0; --d) {  // next index, row-major
      if (++at[d] < x.shape()[d]) break;
      at[d] = 0;
    }
  }
  return std::vector<Tensor>{out};
}

// eq / ne against a number, element by element: bool.
enum class Compare { kEq, kNe, kLe, kGe, kLt, kGt };

// self against a number, elementwise: bool; NaN compares false (ne: true), as in IEEE.
Kernel CompareScalar(Compare op) {
  return [op](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
    OVERLAP_ASSIGN_OR_RETURN(double other, c.DoubleArg("other"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(DType::kBool, x.shape()));
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double v = GetElement(x, i);
      const bool r = op == Compare::kEq   ? v == other
                     : op == Compare::kNe ? v != other
                     : op == Compare::kLe ? v <= other
                     : op == Compare::kGe ? v >= other
                     : op == Compare::kLt ? v < other
                                          : v > other;
      SetElement(out, i, r ? 1.0 : 0.0);
    }
    return std::vector<Tensor>{out};
  };
}

// A binary op's tensor operands `self` and `other` in ATen's promoted dtype `d` (rounded to
// it: an int64 meets a float32 as float32), then held exactly in `wide` (float64 for
// floating d, else int64), and their broadcast shape.
struct WideOperands {
  Tensor a, b;
  std::vector<int64_t> shape;
  DType d, wide;
};
absl::StatusOr<WideOperands> Widened(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor a0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b0, c.TensorArg("other"));
  WideOperands w;
  OVERLAP_ASSIGN_OR_RETURN(w.d, DecidedDType(c, ResultType({OperandOf(a0), OperandOf(b0)})));
  OVERLAP_ASSIGN_OR_RETURN(w.shape, BroadcastShape(c, a0.shape(), b0.shape()));
  w.wide = IsFloatingPoint(w.d) ? DType::kFloat64 : DType::kInt64;
  OVERLAP_ASSIGN_OR_RETURN(Tensor a1, Converted(c, a0, w.d));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b1, Converted(c, b0, w.d));
  OVERLAP_ASSIGN_OR_RETURN(w.a, Converted(c, a1, w.wide));
  OVERLAP_ASSIGN_OR_RETURN(w.b, Converted(c, b1, w.wide));
  return w;
}

// self against other, broadcast: bool. Both are converted to their promoted dtype first
// (ATen's rule: an int64 compared with a float32 compares as float32), then compared
// exactly, floats as doubles (NaN compares false, ne true) and integers as int64.
Kernel CompareTensor(Compare op) {
  return [op](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(WideOperands w, Widened(c));
    const Tensor &a = w.a, &b = w.b;
    const std::vector<int64_t>& shape = w.shape;
    const DType wide = w.wide;
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(DType::kBool, shape));
    uint8_t* o = out.data<uint8_t>();
    int64_t k = 0;
    const auto compare = [&](auto va, auto vb) {
      return op == Compare::kEq   ? va == vb
             : op == Compare::kNe ? va != vb
             : op == Compare::kLe ? va <= vb
             : op == Compare::kGe ? va >= vb
             : op == Compare::kLt ? va < vb
                                  : va > vb;
    };
    ForEach2(
        shape, BroadcastStrides(a, shape), BroadcastStrides(b, shape), [&](int64_t ia, int64_t ib) {
          o[k++] = wide == DType::kFloat64 ? compare(a.data<double>()[ia], b.data<double>()[ib])
                                           : compare(a.data<int64_t>()[ia], b.data<int64_t>()[ib]);
        });
    return std::vector<Tensor>{out};
  };
}

enum class Logic { kAnd, kOr, kXor };

// bitwise_and / or / xor.Tensor: broadcast, in the operands' result_type, which must be bool
// or an integer (ATen refuses floating operands); computed on int64 and narrowed, so bool
// stays 0 / 1. logical_and / or / xor: bool, each operand read as "is nonzero" (NaN is).
Kernel LogicTensor(Logic op, bool logical) {
  return [op, logical](KernelCall& c) -> Results {
    Tensor a, b;
    std::vector<int64_t> shape;
    DType d = DType::kBool;
    if (logical) {  // each operand in its own dtype, held as float64
      OVERLAP_ASSIGN_OR_RETURN(Tensor a0, c.TensorArg("self"));
      OVERLAP_ASSIGN_OR_RETURN(Tensor b0, c.TensorArg("other"));
      OVERLAP_ASSIGN_OR_RETURN(shape, BroadcastShape(c, a0.shape(), b0.shape()));
      OVERLAP_ASSIGN_OR_RETURN(a, Converted(c, a0, DType::kFloat64));
      OVERLAP_ASSIGN_OR_RETURN(b, Converted(c, b0, DType::kFloat64));
    } else {
      OVERLAP_ASSIGN_OR_RETURN(WideOperands w, Widened(c));
      if (IsFloatingPoint(w.d)) {
        return c.Error(absl::StrCat("bitwise operations take bool or integer tensors, not ",
                                    DTypeName(w.d), " (ATen refuses them too)"));
      }
      a = std::move(w.a), b = std::move(w.b), shape = std::move(w.shape), d = w.d;
    }
    OVERLAP_ASSIGN_OR_RETURN(
        Tensor r, c.NewUninitializedOutput(logical ? DType::kBool : DType::kInt64, shape));
    int64_t k = 0;
    const auto apply = [op](int64_t x, int64_t y) {
      return op == Logic::kAnd ? (x & y) : op == Logic::kOr ? (x | y) : (x ^ y);
    };
    ForEach2(
        shape, BroadcastStrides(a, shape), BroadcastStrides(b, shape), [&](int64_t ia, int64_t ib) {
          if (logical) {
            r.data<uint8_t>()[k++] =
                static_cast<uint8_t>(apply(a.data<double>()[ia] != 0, b.data<double>()[ib] != 0));
          } else {
            r.data<int64_t>()[k++] = apply(a.data<int64_t>()[ia], b.data<int64_t>()[ib]);
          }
        });
    if (logical || d == DType::kInt64) return std::vector<Tensor>{r};
    return One(Converted(c, r, d));
  };
}

// out[k] = cond[k] ? a[k] : b[k] over the broadcast offsets, elements of E (any dtype of
// E's width: the values are only moved).
template <typename E>
void Select(const std::vector<int64_t>& shape, const Tensor& cond, const Tensor& a, const Tensor& b,
            Tensor& out) {
  const std::vector<int64_t> sa = BroadcastStrides(a, shape), sb = BroadcastStrides(b, shape),
                             sc = BroadcastStrides(cond, shape);
  // Offsets of the three by one walk: ForEach2 over (a, b), the condition's from the index.
  std::vector<int64_t> cond_at;
  cond_at.reserve(out.numel());
  ForEach2(shape, sc, sc, [&](int64_t i, int64_t) { cond_at.push_back(i); });
  const bool* pc = cond.data<bool>();
  const E* pa = reinterpret_cast<const E*>(Bytes(a));
  const E* pb = reinterpret_cast<const E*>(Bytes(b));
  E* o = reinterpret_cast<E*>(Bytes(out));
  int64_t k = 0;
  ForEach2(shape, sa, sb, [&](int64_t ia, int64_t ib) {
    o[k] = pc[cond_at[k]] ? pa[ia] : pb[ib];
    ++k;
  });
}

// where(condition, self, other): self where condition holds, else other; the three broadcast,
// the dtype result_type of self and other (a 0-d operand counts only from a higher
// category: scalar_tensor's 0 beside a float16 gradient keeps float16).
Results Where(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor cond, c.TensorArg("condition"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b0, c.TensorArg("other"));
  if (cond.dtype() != DType::kBool) return c.Error("condition should be a bool tensor");
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShape(c, a0.shape(), b0.shape()));
  OVERLAP_ASSIGN_OR_RETURN(shape, BroadcastShape(c, shape, cond.shape()));
  OVERLAP_ASSIGN_OR_RETURN(DType dtype,
                           DecidedDType(c, ResultType({OperandOf(a0), OperandOf(b0)})));
  OVERLAP_ASSIGN_OR_RETURN(Tensor a, Converted(c, a0, dtype));
  OVERLAP_ASSIGN_OR_RETURN(Tensor b, Converted(c, b0, dtype));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(dtype, shape));
  switch (DTypeSize(dtype)) {
    case 1:
      Select<uint8_t>(shape, cond, a, b, out);
      break;
    case 2:
      Select<uint16_t>(shape, cond, a, b, out);
      break;
    case 4:
      Select<uint32_t>(shape, cond, a, b, out);
      break;
    default:
      Select<uint64_t>(shape, cond, a, b, out);
  }
  return std::vector<Tensor>{out};
}

// clamp(self, min, max) / clamp_min(self, min): result_type of self and the bounds (an
// integer tensor with a float bound is clamped as float32); NaN stays NaN.
Results Clamp(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  const Value* lo_v = c.Arg("min");
  const Value* hi_v = c.Arg("max");
  const bool has_lo = lo_v != nullptr && !lo_v->is_none(),
             has_hi = hi_v != nullptr && !hi_v->is_none();
  if (!has_lo && !has_hi) return c.Error("at least one of min and max must be given");
  std::vector<PromotionOperand> operands = {OperandOf(x0)};
  for (const Value* bound : {lo_v, hi_v}) {
    if (bound == nullptr || bound->is_none()) continue;
    std::optional<PromotionOperand> b = PromotionOperand::Number(*bound);
    if (!b) return c.Error("min and max should be numbers");
    operands.push_back(*b);
  }
  OVERLAP_ASSIGN_OR_RETURN(DType d, DecidedDType(c, ResultType(operands)));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Converted(c, x0, d));
  double lo = -std::numeric_limits<double>::infinity(),
         hi = std::numeric_limits<double>::infinity();
  if (has_lo) {
    OVERLAP_ASSIGN_OR_RETURN(lo, c.DoubleArg("min"));
  }
  if (has_hi) {
    OVERLAP_ASSIGN_OR_RETURN(hi, c.DoubleArg("max"));
  }
  if (!IsFloatingPoint(d)) {
    // Integer bounds on an integer tensor (torch 2.x's upsampling writes its source indices
    // so): ATen's min(max(v, lo), hi) on the values as int64 (exact), the bounds as given
    // (exact within +-2^53).
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, x.shape()));
    auto bound = [](double b) {
      return b <= -9.2e18 ? INT64_MIN : b >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(b);
    };
    const int64_t lo_i = bound(lo), hi_i = bound(hi);
    auto clamp = [&](int64_t v) { return std::min(std::max(v, lo_i), hi_i); };
    if (d == DType::kInt64) {
      const int64_t* in = x.data<int64_t>();
      int64_t* o = out.data<int64_t>();
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = clamp(in[i]);
    } else {  // narrower integers: exact as doubles
      for (int64_t i = 0; i < out.numel(); ++i) {
        SetElement(out, i, static_cast<double>(clamp(static_cast<int64_t>(GetElement(x, i)))));
      }
    }
    return std::vector<Tensor>{out};
  }
  // ATen's min(max(v, lo), hi): max wins when min > max; a NaN value or bound gives NaN.
  const bool nan_bound = lo != lo || hi != hi;
  return Map1(c, x, [lo_n = Number(lo), hi_n = Number(hi), nan_bound](auto v) {
    using T = decltype(v);
    const T lo = lo_n.as<T>(), hi = hi_n.as<T>();
    if (v != v || nan_bound) return static_cast<T>(NAN);
    const T up = v < lo ? lo : v;
    return up > hi ? hi : up;
  });
}

// bitwise_not: a bool's logical not, an integer's bits flipped.
Results BitwiseNot(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  if (x.dtype() != DType::kBool && x.dtype() != DType::kInt64 && x.dtype() != DType::kInt32 &&
      x.dtype() != DType::kUInt8) {
    return c.Error(absl::StrCat("bitwise_not of ", DTypeName(x.dtype()), " (bool or integers)"));
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double v = GetElement(x, i);
    SetElement(out, i,
               x.dtype() == DType::kBool    ? (v != 0 ? 0.0 : 1.0)
               : x.dtype() == DType::kUInt8 ? static_cast<double>(255 - static_cast<int64_t>(v))
                                            : static_cast<double>(~static_cast<int64_t>(v)));
  }
  return std::vector<Tensor>{out};
}

// scalar_tensor(s, dtype=): a 0-d tensor holding s.
Results ScalarTensor(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(double s, c.DoubleArg("s"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, DType::kFloat32));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, {}));
  SetElement(out, 0, s);
  return std::vector<Tensor>{out};
}

// lift_fresh_copy: a copy of self.
Results LiftFreshCopy(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, x, out));
  return std::vector<Tensor>{out};
}

// ones_like(self) and full_like(self, fill_value): self's shape, its dtype unless dtype says.
Kernel FilledLike(bool ones) {
  return [ones](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
    double value = 1.0;
    if (!ones) {
      OVERLAP_ASSIGN_OR_RETURN(value, c.DoubleArg("fill_value"));
    }
    OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, x.dtype()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, x.shape()));
    FillContiguous(out, value);
    return std::vector<Tensor>{out};
  };
}

// minimum / maximum(self, other): broadcast, in the promoted dtype; floats compared as
// doubles with NaN propagating (ATen's rule), integers as int64. The result is one of the
// operands' values, so the narrowing back to the dtype is exact.
Kernel MinMaxTensor(bool larger) {
  return [larger](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(WideOperands w, Widened(c));
    const Tensor &a = w.a, &b = w.b;
    const DType d = w.d, wide = w.wide;
    const std::vector<int64_t>& shape = w.shape;
    OVERLAP_ASSIGN_OR_RETURN(Tensor r, c.NewUninitializedOutput(wide, shape));
    int64_t k = 0;
    ForEach2(shape, BroadcastStrides(a, shape), BroadcastStrides(b, shape),
             [&](int64_t ia, int64_t ib) {
               if (wide == DType::kFloat64) {
                 const double x = a.data<double>()[ia], y = b.data<double>()[ib];
                 r.data<double>()[k++] = std::isnan(x) || std::isnan(y)
                                             ? std::numeric_limits<double>::quiet_NaN()
                                             : (larger ? std::max(x, y) : std::min(x, y));
               } else {
                 const int64_t x = a.data<int64_t>()[ia], y = b.data<int64_t>()[ib];
                 r.data<int64_t>()[k++] = larger ? std::max(x, y) : std::min(x, y);
               }
             });
    if (d == wide) return std::vector<Tensor>{r};
    return One(Converted(c, r, d));
  };
}

// masked_fill(self, mask, value): value where mask (broadcast to self) is true.
Results MaskedFill(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor m0, c.TensorArg("mask"));
  OVERLAP_ASSIGN_OR_RETURN(double value, c.DoubleArg("value"));
  if (m0.dtype() != DType::kBool) return c.Error("mask should be a bool tensor");
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShape(c, x0.shape(), m0.shape()));
  if (shape != x0.shape()) return c.Error("mask does not broadcast to self's shape");
  OVERLAP_ASSIGN_OR_RETURN(Tensor spread,
                           m0.AsStrided(shape, BroadcastStrides(m0, shape), m0.offset()));
  OVERLAP_ASSIGN_OR_RETURN(Tensor m, Contiguous(c, spread));
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  return DispatchFloat(c, x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), shape));
    const T* in = x.data<T>();
    const bool* mask = m.data<bool>();
    const T fill = static_cast<T>(value);
    T* o = out.data<T>();
    ParallelFor(out.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = mask[i] ? fill : in[i];
    });
    return std::vector<Tensor>{out};
  });
}

// triu / tril(self, diagonal): the upper (lower) triangle of the last two dimensions, zeros
// below (above).
Results Triangle(KernelCall& c, bool lower) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x0, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t diagonal, c.IntArg("diagonal"));
  if (x0.dim() < 2) return c.Error("triu and tril need at least two dimensions");
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, Contiguous(c, x0));
  OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(x.dtype(), x.shape()));
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  const int64_t lines = rows * cols == 0 ? 0 : x.numel() / cols;  // rows of every matrix
  const int64_t width = DTypeSize(x.dtype());
  const std::byte* in = Bytes(x);
  std::byte* o = Bytes(out);
  // Row r keeps columns from r + diagonal on (triu) or up to it (tril) and zeroes the rest
  // (any dtype: bytes).
  ParallelFor(
      lines,
      [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) {
          const int64_t r = line % rows;
          std::byte* row = o + line * cols * width;
          const std::byte* src = in + line * cols * width;
          if (lower) {
            const int64_t kept = std::clamp<int64_t>(r + diagonal + 1, 0, cols);
            std::memcpy(row, src, kept * width);
            std::memset(row + kept * width, 0, (cols - kept) * width);
          } else {
            const int64_t zeros = std::clamp<int64_t>(r + diagonal, 0, cols);
            std::memset(row, 0, zeros * width);
            std::memcpy(row + zeros * width, src + zeros * width, (cols - zeros) * width);
          }
        }
      },
      kParallelGrain / std::max<int64_t>(cols, 1) + 1);
  return std::vector<Tensor>{out};
}

Results NewZeros(KernelCall& c) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
  OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, x.dtype()));
  return One(c.NewOutput(d, size));
}

// new_ones(self, size) / new_full(self, size, fill_value): self's dtype unless dtype says;
// self is read for nothing else.
Kernel NewFilled(bool ones) {
  return [ones](KernelCall& c) -> Results {
    OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
    OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, c.IntListArg("size"));
    for (int64_t s : size) {
      if (s < 0) return c.Error(absl::StrCat("size ", s, " is negative"));
    }
    double value = 1.0;
    if (!ones) {
      OVERLAP_ASSIGN_OR_RETURN(value, c.DoubleArg("fill_value"));
    }
    OVERLAP_ASSIGN_OR_RETURN(DType d, DTypeKwarg(c, x.dtype()));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(d, size));
    FillContiguous(out, value);
    return std::vector<Tensor>{out};
  };
}

}  // namespace
}  // namespace kernels

void RegisterElementwiseKernels(KernelRegistry& r) {
  using namespace kernels;  // NOLINT: the kernels of this file
  for (const EwRow& row : ElementwiseRows()) r.Register(row.target, FromRow(row));
  const auto arithmetic = [](ArithmeticOp family, EwOp ew) -> Kernel {
    return [=](KernelCall& c) { return Arithmetic(c, family, ew); };
  };
  r.Register("aten.add.Tensor", arithmetic(ArithmeticOp::kAdd, EwOp::kAdd));
  r.Register("aten.sub.Tensor", arithmetic(ArithmeticOp::kSub, EwOp::kAdd));  // s = -alpha
  r.Register("aten.mul.Tensor", arithmetic(ArithmeticOp::kMul, EwOp::kMul));
  r.Register("aten.add.Scalar", arithmetic(ArithmeticOp::kAdd, EwOp::kAdd));
  r.Register("aten.mul.Scalar", arithmetic(ArithmeticOp::kMul, EwOp::kMul));
  r.Register("aten.div.Scalar", arithmetic(ArithmeticOp::kTrueDivide, EwOp::kDiv));
  r.Register("aten.div.Tensor_mode", DivMode);
  r.Register("aten.div.Tensor", DivMode);  // no rounding_mode: true division
  r.Register("aten.pow.Tensor_Scalar", PowTensorScalar);
  r.Register("aten.pow.Tensor_Tensor", PowTensorTensor);
  r.Register("aten.rsub.Scalar", RsubScalar);
  r.Register("aten.pow.Scalar", PowScalarTensor);
  r.Register("aten.floor_divide.default", [](KernelCall& c) {
    return Arithmetic(c, ArithmeticOp::kRoundingDivide, EwOp::kDivFloor);
  });
  r.Register("aten.hardtanh.default", Hardtanh);
  r.Register("aten.hardtanh_backward.default", HardtanhBackward);
  r.Register("aten.softplus.default", Softplus);
  r.Register("aten.softplus_backward.default", SoftplusBackward);
  r.Register("aten.gelu.default", Gelu);
  r.Register("aten.gelu_backward.default", GeluBackward);
  r.Register("aten.leaky_relu_backward.default", LeakyReluBackward);
  r.Register("aten.full.default", Full);
  r.Register("aten.neg.default", Neg);
  r.Register("aten.zeros_like.default", ZerosLike);
  r.Register("aten.empty_like.default", ZerosLike);  // zeroed: no stale memory in a result
  r.Register("aten.zeros.default", Zeros);
  r.Register("aten.fill.Scalar", Fill);
  r.Register("aten.fill.Tensor", FillTensor);
  r.Register("aten.roll.default", Roll);
  r.Register("aten.eq.Scalar", CompareScalar(Compare::kEq));
  r.Register("aten.ne.Scalar", CompareScalar(Compare::kNe));
  r.Register("aten.le.Scalar", CompareScalar(Compare::kLe));
  r.Register("aten.ge.Scalar", CompareScalar(Compare::kGe));
  r.Register("aten.lt.Scalar", CompareScalar(Compare::kLt));
  r.Register("aten.gt.Scalar", CompareScalar(Compare::kGt));
  r.Register("aten.eq.Tensor", CompareTensor(Compare::kEq));
  r.Register("aten.ne.Tensor", CompareTensor(Compare::kNe));
  r.Register("aten.le.Tensor", CompareTensor(Compare::kLe));
  r.Register("aten.ge.Tensor", CompareTensor(Compare::kGe));
  r.Register("aten.lt.Tensor", CompareTensor(Compare::kLt));
  r.Register("aten.gt.Tensor", CompareTensor(Compare::kGt));
  r.Register("aten.sub.Scalar", arithmetic(ArithmeticOp::kSub, EwOp::kAdd));  // s = -alpha
  r.Register("aten.abs.default", AbsOrSgn(EwOp::kAbs));
  r.Register("aten.sgn.default", AbsOrSgn(EwOp::kSgn));
  r.Register("aten.where.self", Where);
  r.Register("aten.bitwise_not.default", BitwiseNot);
  r.Register("aten.bitwise_and.Tensor", LogicTensor(Logic::kAnd, /*logical=*/false));
  r.Register("aten.bitwise_or.Tensor", LogicTensor(Logic::kOr, /*logical=*/false));
  r.Register("aten.bitwise_xor.Tensor", LogicTensor(Logic::kXor, /*logical=*/false));
  r.Register("aten.logical_and.default", LogicTensor(Logic::kAnd, /*logical=*/true));
  r.Register("aten.logical_or.default", LogicTensor(Logic::kOr, /*logical=*/true));
  r.Register("aten.logical_xor.default", LogicTensor(Logic::kXor, /*logical=*/true));
  r.Register("aten.clamp.default", Clamp);
  r.Register("aten.clamp_min.default", Clamp);
  r.Register("aten.scalar_tensor.default", ScalarTensor);
  r.Register("aten.lift_fresh_copy.default", LiftFreshCopy);
  r.Register("aten.zero.default", ZerosLike);
  r.Register("aten.new_empty.default", NewZeros);  // zeroed: no stale memory in a result
  r.Register("aten.new_zeros.default", NewZeros);
  r.Register("aten.new_ones.default", NewFilled(/*ones=*/true));
  r.Register("aten.new_full.default", NewFilled(/*ones=*/false));
  r.Register("aten.ones_like.default", FilledLike(/*ones=*/true));
  r.Register("aten.full_like.default", FilledLike(/*ones=*/false));
  r.Register("aten.minimum.default", MinMaxTensor(/*larger=*/false));
  r.Register("aten.maximum.default", MinMaxTensor(/*larger=*/true));
  r.Register("aten.masked_fill.Scalar", MaskedFill);
  r.Register("aten.triu.default", [](KernelCall& c) { return Triangle(c, /*lower=*/false); });
  r.Register("aten.tril.default", [](KernelCall& c) { return Triangle(c, /*lower=*/true); });
}

}  // namespace overlap
