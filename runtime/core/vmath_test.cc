#include "runtime/core/vmath.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace overlap {
namespace {

// The distance in units in the last place between two finite floats of one sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// Inputs spanning each function's range, in a length that leaves a tail for every width.
std::vector<float> Inputs(float lo, float hi) {
  std::vector<float> x;
  const int n = 4099;
  for (int i = 0; i < n; ++i) x.push_back(lo + (hi - lo) * static_cast<float>(i) / (n - 1));
  return x;
}

// y = fn(x) within SLEEF's 1.0 ULP of the exact value (2 after rounding the double result).
void ExpectCloseOn(const std::vector<float>& x, const std::vector<float>& y,
                   double (*exact)(double)) {
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(exact(static_cast<double>(x[i])));
    if (std::fabs(want) < 1e-30f) {
      EXPECT_NEAR(y[i], want, 1e-30f) << "at " << x[i];
      continue;
    }
    ASSERT_LE(UlpDistance(y[i], want), 2) << "at x = " << x[i] << ": " << y[i] << " vs " << want;
  }
}

constexpr const char* kIsas[] = {"avx512f", "avx2", "sse2", "scalar"};

// On every instruction set this CPU has, and on the default choice.
void ExpectClose(VecFn fn, double (*exact)(double), float lo, float hi) {
  const std::vector<float> x = Inputs(lo, hi);
  for (const char* isa : kIsas) {
    SCOPED_TRACE(isa);
    std::vector<float> y = x;
    if (!internal::VecApplyOn(isa, fn, y.data(), static_cast<int64_t>(y.size()))) continue;
    ExpectCloseOn(x, y, exact);
  }
  std::vector<float> y = x;
  VecApply(fn, y.data(), static_cast<int64_t>(y.size()));
  ExpectCloseOn(x, y, exact);
}

TEST(VecMathTest, ExpMatchesTheExactValue) {
  ExpectClose(
      VecFn::kExp, [](double v) { return std::exp(v); }, -87.0f, 88.0f);
}

TEST(VecMathTest, ErfMatchesTheExactValue) {
  ExpectClose(
      VecFn::kErf, [](double v) { return std::erf(v); }, -6.0f, 6.0f);
}

// Abramowitz and Stegun 7.1.26: within 1.5e-7 of erf plus float rounding (5e-7), on every
// instruction set; exactly 0 at 0.
TEST(VecMathTest, FastErfIsWithinItsAbsoluteError) {
  const std::vector<float> x = Inputs(-6.0f, 6.0f);
  for (const char* isa : kIsas) {
    SCOPED_TRACE(isa);
    std::vector<float> y = x;
    if (!internal::VecApplyOn(isa, VecFn::kErfFast, y.data(), static_cast<int64_t>(y.size()))) {
      continue;
    }
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(y[i], std::erf(static_cast<double>(x[i])), 5e-7) << "at x = " << x[i];
    }
  }
  float zero = 0.0f;
  VecApply(VecFn::kErfFast, &zero, 1);
  EXPECT_EQ(zero, 0.0f);
}

TEST(VecMathTest, TanhMatchesTheExactValue) {
  ExpectClose(
      VecFn::kTanh, [](double v) { return std::tanh(v); }, -12.0f, 12.0f);
}

TEST(VecMathTest, SpecialValuesFollowLibm) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, inf, nan, 0.0f, -0.0f, 100.0f, -120.0f};
  for (VecFn fn : {VecFn::kExp, VecFn::kErf, VecFn::kTanh}) {
    std::vector<float> y = x;
    VecApply(fn, y.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = fn == VecFn::kExp   ? std::exp(x[i])
                         : fn == VecFn::kErf ? std::erf(x[i])
                                             : std::tanh(x[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << "fn " << static_cast<int>(fn) << " at " << x[i];
      } else {
        EXPECT_EQ(y[i], want) << "fn " << static_cast<int>(fn) << " at " << x[i];
      }
    }
  }
}

TEST(VecMathTest, EveryLengthAndOffsetIsCovered) {
  // Lengths around each vector width, at an unaligned start: every element written, none
  // beyond.
  std::vector<float> buffer(80);
  for (int64_t n = 0; n <= 40; ++n) {
    for (size_t k = 0; k < buffer.size(); ++k) buffer[k] = 0.25f * static_cast<float>(k % 7);
    VecApply(VecFn::kExp, buffer.data() + 3, n);
    for (size_t k = 0; k < buffer.size(); ++k) {
      const float v = 0.25f * static_cast<float>(k % 7);
      const bool inside = k >= 3 && static_cast<int64_t>(k) < 3 + n;
      EXPECT_NEAR(buffer[k], inside ? std::exp(v) : v, 1e-6f * (inside ? std::exp(v) : 1))
          << "n " << n << " k " << k;
    }
  }
}

TEST(VecMathTest, NamesTheInstructionSetItRuns) {
  const std::string isa = VecMathIsa();
  EXPECT_TRUE(isa == "avx512f" || isa == "avx2" || isa == "sse2" || isa == "scalar") << isa;
}

}  // namespace
}  // namespace overlap
