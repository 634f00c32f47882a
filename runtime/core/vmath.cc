#include "runtime/core/vmath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#ifndef OVERLAP_NO_SLEEF
#include <immintrin.h>
#include <sleef.h>  // the SSE2 functions

// sleef.h declares its AVX2 and AVX-512 functions only in a translation unit compiled for
// them; this one is baseline x86-64, so they are declared here with their target.
extern "C" {
#define OVERLAP_SLEEF(TARGET, VEC, NAME) __attribute__((target(TARGET))) VEC NAME(VEC);
OVERLAP_SLEEF("avx2,fma", __m256, Sleef_expf8_u10avx2)
OVERLAP_SLEEF("avx2,fma", __m256, Sleef_erff8_u10avx2)
OVERLAP_SLEEF("avx2,fma", __m256, Sleef_tanhf8_u10avx2)
OVERLAP_SLEEF("avx512f", __m512, Sleef_expf16_u10avx512f)
OVERLAP_SLEEF("avx512f", __m512, Sleef_erff16_u10avx512f)
OVERLAP_SLEEF("avx512f", __m512, Sleef_tanhf16_u10avx512f)
#undef OVERLAP_SLEEF
}
#endif

namespace overlap {
namespace {

struct Isa {
  void (*apply)(VecFn, float*, int64_t);
  const char* name;
};

// Abramowitz and Stegun 7.1.26's constants.
constexpr float kErfP = 0.3275911f;
constexpr float kErfA1 = 0.254829592f, kErfA2 = -0.284496736f, kErfA3 = 1.421413741f,
                kErfA4 = -1.453152027f, kErfA5 = 1.061405429f;

// VecFn::kErfFast over x with `exp` for the exponential, a block at a time: the polynomial
// and the combination in loops the compiler vectorizes (inlined into each instruction set's
// function, for its width).
inline __attribute__((always_inline)) void ErfFast(float* x, int64_t n,
                                                   void (*exp)(VecFn, float*, int64_t)) {
  constexpr int64_t kBlock = 256;
  float t[kBlock], e[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t m = std::min(kBlock, n - at);
    float* v = x + at;
    for (int64_t i = 0; i < m; ++i) {
      t[i] = 1.0f / (1.0f + kErfP * std::fabs(v[i]));
      e[i] = -v[i] * v[i];
    }
    exp(VecFn::kExp, e, m);
    for (int64_t i = 0; i < m; ++i) {
      const float p =
          ((((kErfA5 * t[i] + kErfA4) * t[i] + kErfA3) * t[i] + kErfA2) * t[i] + kErfA1) * t[i];
      v[i] = std::copysign(1.0f - p * e[i], v[i]);
    }
  }
}

// libm, one element at a time.
void ApplyScalar(VecFn fn, float* x, int64_t n) {
  if (fn == VecFn::kErfFast) {
    ErfFast(x, n, ApplyScalar);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    x[i] = fn == VecFn::kExp   ? std::exp(x[i])
           : fn == VecFn::kErf ? std::erf(x[i])
                               : std::tanh(x[i]);
  }
}

#ifndef OVERLAP_NO_SLEEF

// One function per instruction set, each compiled for its set by a target attribute (the
// rest of the library stays baseline x86-64). W floats at a time; a tail of fewer than W
// goes through a padded copy.
#define OVERLAP_VEC_LOOP(W, LOAD, STORE, VEC)                    \
  int64_t i = 0;                                                 \
  for (; i + (W) <= n; i += (W)) STORE(x + i, VEC(LOAD(x + i))); \
  if (i < n) {                                                   \
    alignas(64) float tail[W] = {};                              \
    std::memcpy(tail, x + i, sizeof(float) * (n - i));           \
    STORE(tail, VEC(LOAD(tail)));                                \
    std::memcpy(x + i, tail, sizeof(float) * (n - i));           \
  }

// Apply<W> for one instruction set: its target, vector width, load / store and SLEEF's
// three functions.
#define OVERLAP_VEC_APPLY(NAME, TARGET, W, LOAD, STORE, EXP, ERF, TANH) \
  TARGET void NAME(VecFn fn, float* x, int64_t n) {                     \
    switch (fn) {                                                       \
      case VecFn::kExp: {                                               \
        OVERLAP_VEC_LOOP(W, LOAD, STORE, EXP)                           \
        return;                                                         \
      }                                                                 \
      case VecFn::kErf: {                                               \
        OVERLAP_VEC_LOOP(W, LOAD, STORE, ERF)                           \
        return;                                                         \
      }                                                                 \
      case VecFn::kTanh: {                                              \
        OVERLAP_VEC_LOOP(W, LOAD, STORE, TANH)                          \
        return;                                                         \
      }                                                                 \
      case VecFn::kErfFast:                                             \
        ErfFast(x, n, NAME);                                            \
        return;                                                         \
    }                                                                   \
  }

OVERLAP_VEC_APPLY(Apply16, __attribute__((target("avx512f"))), 16, _mm512_loadu_ps,
                  _mm512_storeu_ps, Sleef_expf16_u10avx512f, Sleef_erff16_u10avx512f,
                  Sleef_tanhf16_u10avx512f)
OVERLAP_VEC_APPLY(Apply8, __attribute__((target("avx2,fma"))), 8, _mm256_loadu_ps, _mm256_storeu_ps,
                  Sleef_expf8_u10avx2, Sleef_erff8_u10avx2, Sleef_tanhf8_u10avx2)
OVERLAP_VEC_APPLY(Apply4, , 4, _mm_loadu_ps, _mm_storeu_ps, Sleef_expf4_u10sse2,
                  Sleef_erff4_u10sse2, Sleef_tanhf4_u10sse2)

#undef OVERLAP_VEC_APPLY
#undef OVERLAP_VEC_LOOP

// Best first.
std::vector<Isa> Available() {
  __builtin_cpu_init();
  std::vector<Isa> isas;
  if (__builtin_cpu_supports("avx512f")) isas.push_back({Apply16, "avx512f"});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    isas.push_back({Apply8, "avx2"});
  }
  isas.push_back({Apply4, "sse2"});
  isas.push_back({ApplyScalar, "scalar"});
  return isas;
}

Isa Choose() { return Available().front(); }

const Isa& Chosen() {
  static const Isa isa = Choose();
  return isa;
}

#else  // OVERLAP_NO_SLEEF: libm, one element at a time

std::vector<Isa> Available() { return {{ApplyScalar, "scalar"}}; }

const Isa& Chosen() {
  static const Isa isa{ApplyScalar, "scalar"};
  return isa;
}

#endif

}  // namespace

void VecApply(VecFn fn, float* x, int64_t n) {
  if (n > 0) Chosen().apply(fn, x, n);
}

const char* VecMathIsa() { return Chosen().name; }

namespace internal {
bool VecApplyOn(const char* isa, VecFn fn, float* x, int64_t n) {
  for (const Isa& i : Available()) {
    if (std::strcmp(i.name, isa) == 0) {
      if (n > 0) i.apply(fn, x, n);
      return true;
    }
  }
  return false;
}
}  // namespace internal

}  // namespace overlap
