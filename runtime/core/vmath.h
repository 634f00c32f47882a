// Vectorized float32 math over arrays: exp, erf and tanh on SLEEF (Debian's libsleef-dev
// 3.5), the library PyTorch's CPU kernels vectorize exp and tanh with. The kernels' scalar
// formulas (runtime/kernels/elementwise_ops.h) call libm per element; the CPU kernels
// evaluate a formula's transcendental part over a block with VecApply instead, then the rest
// as plain arithmetic the compiler vectorizes.
//
// The instruction set is chosen once, at the first call, from what the running CPU has
// (never what the build machine had): AVX-512F, else AVX2 with FMA, else SSE2 (every x86-64
// CPU). SLEEF's u10 functions are within 1.0 ULP of the exact result (libm's expf / erff /
// tanhf within 1 to 2), so results may differ from the scalar formulas in the last bit.
// A build with OVERLAP_NO_SLEEF (the OSS-Fuzz build: no static libsleef) runs libm's
// scalar functions.
//
//   float block[256];  // x * M_SQRT1_2
//   VecApply(VecFn::kErf, block, n);
#ifndef OVERLAP_RUNTIME_CORE_VMATH_H_
#define OVERLAP_RUNTIME_CORE_VMATH_H_

#include <cstdint>

namespace overlap {

// The functions VecApply evaluates.
enum class VecFn : int32_t {
  kExp,
  kErf,
  kTanh,
  // erf by Abramowitz and Stegun's formula 7.1.26 over exp: 1 - t (a1 + a2 t + ... + a5 t^4)
  // e^(-x^2), t = 1 / (1 + p |x|), signed as x; absolute error <= 1.5e-7 by the formula,
  // 5e-7 evaluated in float (a few ULPs of 1), relative error larger where erf is near 0. What
  // PyTorch's vectorized CPU kernels compute for erf (its gelu); about 3x faster than kErf here
  // (SLEEF's u10 erf spends most of the GPT's gelu time).
  kErfFast,
};

// x[i] = fn(x[i]) for i in [0, n), in place. Any alignment; n >= 0. About 0.3-1 ns per
// element on one AVX2 core (libm's scalar functions: 3-10 ns). Thread-safe.
void VecApply(VecFn fn, float* x, int64_t n);

// The instruction set VecApply runs: "avx512f", "avx2", "sse2", or "scalar" (a build
// without SLEEF).
const char* VecMathIsa();

namespace internal {
// VecApply on the named instruction set ("avx512f", "avx2", "sse2", "scalar"), for tests
// covering each: false (x untouched) when this CPU or build lacks it.
bool VecApplyOn(const char* isa, VecFn fn, float* x, int64_t n);
}  // namespace internal

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_VMATH_H_
