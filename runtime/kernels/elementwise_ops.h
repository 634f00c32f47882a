// The elementwise formulas, once, for every backend: the CPU kernels
// (kernels/elementwise.cc), the CUDA kernel (runtime/cuda/device_kernels.cu) and the
// emulated device all compute Ew(op, a, b, s) in the element type T, so the backends differ
// only by their math libraries' last bits (exp, tanh, erf, pow).
//
// Each op is f(a, b, s): `a` the first operand, `b` the second (a tensor's element, or a
// number: a scalar variant passes the number as b), `s` the op's scalar parameter (add's
// alpha, threshold_backward's threshold). Header-only; host and device code.
#ifndef OVERLAP_RUNTIME_KERNELS_ELEMENTWISE_OPS_H_
#define OVERLAP_RUNTIME_KERNELS_ELEMENTWISE_OPS_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define OVERLAP_HOST_DEVICE __host__ __device__
#define OVERLAP_INLINE __forceinline__
#else
#define OVERLAP_HOST_DEVICE
// Ew inlined into every loop: with its op a constant there, the switch folds away and the
// loop vectorizes (the CPU kernels call it with op fixed per loop, WithOp).
#define OVERLAP_INLINE inline __attribute__((always_inline))
#endif

namespace overlap {

enum class EwOp : int32_t {
  kAdd,                  // a + s b (aten.add: s = alpha)
  kMul,                  // a b
  kDiv,                  // a / b
  kDivFloor,             // floor(a / b)
  kDivTrunc,             // trunc(a / b)
  kSquare,               // a a (pow 2)
  kCube,                 // a a a (pow 3)
  kPow,                  // a^b
  kRsqrt,                // 1 / sqrt(a)
  kRelu,                 // a <= 0 ? 0 : a (NaN stays NaN)
  kSilu,                 // a / (1 + e^-a)
  kGelu,                 // exact, erf
  kGeluTanh,             // PyTorch's tanh approximation
  kGeluBackward,         // a: grad, b: x
  kGeluTanhBackward,     // a: grad, b: x
  kSiluBackward,         // a: grad, b: x
  kSigmoid,              // 1 / (1 + e^-a)
  kSigmoidBackward,      // a: grad, b: y (the forward's result): a y (1 - y)
  kTanh,                 // tanh(a)
  kTanhBackward,         // a: grad, b: y (the forward's result): a (1 - y^2)
  kThresholdBackward,    // a: grad, b: y; 0 where y <= s (ATen's rule)
  kExp,                  // e^a
  kHardswish,            // a relu6(a + 3) / 6
  kHardswishBackward,    // a: grad, b: x; ATen's: 0 below -3, a (x / 3 + 1/2) to 3, a above
  kHardsigmoid,          // relu6(a + 3) / 6
  kHardsigmoidBackward,  // a: grad, b: x; a / 6 strictly inside (-3, 3), 0 outside
  kLeakyRelu,            // a > 0 ? a : s a (s = negative_slope; NaN stays NaN)
  kLeakyReluBackward,    // a: grad, b: x; b > 0 ? a : s a
  kSin,                  // sin(a)
  kCos,                  // cos(a)
  kLog,                  // ln(a)
  kAbs,                  // |a| (-0 to 0; NaN stays NaN)
  kSgn,                  // -1, 0 or 1 by a's sign; 0 for NaN (ATen's CPU sign)
  kSqrt,                 // sqrt(a)
  kFloor,                // floor(a)
  kReciprocal,           // 1 / a
};

// Whether `op` reads b.
OVERLAP_HOST_DEVICE inline bool EwBinary(EwOp op) {
  switch (op) {
    case EwOp::kAdd:
    case EwOp::kMul:
    case EwOp::kDiv:
    case EwOp::kDivFloor:
    case EwOp::kDivTrunc:
    case EwOp::kPow:
    case EwOp::kGeluBackward:
    case EwOp::kGeluTanhBackward:
    case EwOp::kSiluBackward:
    case EwOp::kSigmoidBackward:
    case EwOp::kTanhBackward:
    case EwOp::kThresholdBackward:
    case EwOp::kHardswishBackward:
    case EwOp::kHardsigmoidBackward:
    case EwOp::kLeakyReluBackward:
      return true;
    default:
      return false;
  }
}

// The transcendental part of a formula. A formula with one computes
//   EwCombine(op, a, b, s, f1(EwArg1(op, a, b)), f2(EwArg2(op, a, b)))
// with f1 = EwMath1(op), f2 = EwMath2(op) (kNone: the argument itself), so a CPU kernel can
// evaluate f1 and f2 over a block of elements with a vector math library
// (runtime/core/vmath.h) and the rest as plain arithmetic; Ew composes the same three
// steps with libm's scalar functions, so both evaluate one formula.
enum class EwMath : int32_t { kNone, kExp, kErf, kTanh };

namespace ew_internal {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCoeff = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)
}  // namespace ew_internal

OVERLAP_HOST_DEVICE constexpr EwMath EwMath1(EwOp op) {
  switch (op) {
    case EwOp::kSilu:
    case EwOp::kSiluBackward:
    case EwOp::kSigmoid:
    case EwOp::kExp:
      return EwMath::kExp;
    case EwOp::kGelu:
    case EwOp::kGeluBackward:
      return EwMath::kErf;
    case EwOp::kGeluTanh:
    case EwOp::kGeluTanhBackward:
    case EwOp::kTanh:
      return EwMath::kTanh;
    default:
      return EwMath::kNone;
  }
}

OVERLAP_HOST_DEVICE constexpr EwMath EwMath2(EwOp op) {
  return op == EwOp::kGeluBackward ? EwMath::kExp : EwMath::kNone;
}

// The argument of f1.
template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_INLINE T EwArg1(EwOp op, T a, T b) {
  using namespace ew_internal;
  switch (op) {
    case EwOp::kSilu:
    case EwOp::kSigmoid:
      return -a;
    case EwOp::kSiluBackward:
      return -b;
    case EwOp::kGelu:
      return a * static_cast<T>(kInvSqrt2);
    case EwOp::kGeluBackward:
      return b * static_cast<T>(kInvSqrt2);
    case EwOp::kGeluTanh:
      return static_cast<T>(kSqrt2OverPi) * (a + static_cast<T>(kGeluCoeff) * a * a * a);
    case EwOp::kGeluTanhBackward:
      return static_cast<T>(kSqrt2OverPi) * (b + static_cast<T>(kGeluCoeff) * b * b * b);
    default:  // kExp, kTanh
      return a;
  }
}

// The argument of f2.
template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_INLINE T EwArg2(EwOp op, T /*a*/, T b) {
  return op == EwOp::kGeluBackward ? T(-0.5) * b * b : b;
}

// The formula from its operands and its transcendental values t1 = f1(arg1), t2 = f2(arg2).
template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_INLINE T EwCombine(EwOp op, T a, T b, T /*s*/, T t1, T t2) {
  using namespace ew_internal;
  switch (op) {
    case EwOp::kSilu:
      return a / (T(1) + t1);
    case EwOp::kGelu:
    case EwOp::kGeluTanh:
      return T(0.5) * a * (T(1) + t1);
    case EwOp::kGeluBackward: {
      const T cdf = T(0.5) * (T(1) + t1);
      const T pdf = static_cast<T>(kInvSqrt2Pi) * t2;
      return a * (cdf + b * pdf);
    }
    case EwOp::kGeluTanhBackward: {
      const T du =
          static_cast<T>(kSqrt2OverPi) * (T(1) + T(3) * static_cast<T>(kGeluCoeff) * b * b);
      return a * (T(0.5) * (T(1) + t1) + T(0.5) * b * (T(1) - t1 * t1) * du);
    }
    case EwOp::kSiluBackward: {
      const T sg = T(1) / (T(1) + t1);
      return a * sg * (T(1) + b * (T(1) - sg));
    }
    case EwOp::kSigmoid:
      return T(1) / (T(1) + t1);
    default:  // kExp, kTanh
      return t1;
  }
}

// f(x) with libm's scalar functions (CUDA's in device code).
template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_INLINE T EwApply(EwMath f, T x) {
  using std::erf;
  using std::exp;
  using std::tanh;
  switch (f) {
    case EwMath::kExp:
      return exp(x);
    case EwMath::kErf:
      return erf(x);
    case EwMath::kTanh:
      return tanh(x);
    case EwMath::kNone:
      return x;
  }
  return x;
}

template <typename T>
OVERLAP_HOST_DEVICE OVERLAP_INLINE T Ew(EwOp op, T a, T b, T s) {
  using std::cos;
  using std::fabs;
  using std::floor;
  using std::log;
  using std::pow;
  using std::sin;
  using std::sqrt;
  using std::trunc;
  if (EwMath1(op) != EwMath::kNone) {
    return EwCombine(op, a, b, s, EwApply(EwMath1(op), EwArg1(op, a, b)),
                     EwApply(EwMath2(op), EwArg2(op, a, b)));
  }
  switch (op) {
    case EwOp::kSin:
      return sin(a);
    case EwOp::kCos:
      return cos(a);
    case EwOp::kLog:
      return log(a);
    case EwOp::kAbs:
      return fabs(a);
    case EwOp::kSgn:
      return static_cast<T>((a > T(0)) - (a < T(0)));
    case EwOp::kAdd:
      return a + s * b;
    case EwOp::kMul:
      return a * b;
    case EwOp::kDiv:
      return a / b;
    case EwOp::kDivFloor:
      return floor(a / b);
    case EwOp::kDivTrunc:
      return trunc(a / b);
    case EwOp::kSquare:
      return a * a;
    case EwOp::kCube:
      return a * a * a;
    case EwOp::kPow:
      return pow(a, b);
    case EwOp::kRsqrt:
      return T(1) / sqrt(a);
    case EwOp::kSqrt:
      return sqrt(a);
    case EwOp::kFloor:
      return floor(a);
    case EwOp::kReciprocal:
      return T(1) / a;
    case EwOp::kRelu:
      return a <= T(0) ? T(0) : a;
    case EwOp::kSigmoidBackward:
      return a * b * (T(1) - b);
    case EwOp::kTanhBackward:
      return a * (T(1) - b * b);
    case EwOp::kThresholdBackward:
      return b <= s ? T(0) : a;
    case EwOp::kHardswish:  // NaN stays NaN (every comparison false)
      return a <= T(-3) ? T(0) : a >= T(3) ? a : a * (a + T(3)) / T(6);
    case EwOp::kHardswishBackward:
      return b < T(-3) ? T(0) : b <= T(3) ? a * (b / T(3) + T(0.5)) : a;
    case EwOp::kHardsigmoid:
      return a <= T(-3) ? T(0) : a >= T(3) ? T(1) : a / T(6) + T(0.5);
    case EwOp::kHardsigmoidBackward:
      return b > T(-3) && b < T(3) ? a / T(6) : T(0);
    case EwOp::kLeakyRelu:
      return a > T(0) ? a : a * s;
    case EwOp::kLeakyReluBackward:
      return b > T(0) ? a : a * s;
    default:  // the transcendental ones, above
      return a;
  }
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_ELEMENTWISE_OPS_H_
