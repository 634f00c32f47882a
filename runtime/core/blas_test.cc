#include "runtime/core/blas.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace overlap {
namespace {

// C = op(A) op(B) by the definition, for comparison.
template <typename T>
std::vector<T> Reference(bool ta, bool tb, int m, int n, int k, const std::vector<T>& a,
                         const std::vector<T>& b) {
  std::vector<T> c(m * n, 0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      T s = 0;
      for (int p = 0; p < k; ++p)
        s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
  }
  return c;
}

TEST(BlasTest, GemmMatchesTheDefinitionInEveryTransposeAndBothPrecisions) {
  const int m = 5, n = 3, k = 4;
  std::vector<double> a(m * k), b(k * n);
  for (int i = 0; i < m * k; ++i) a[i] = std::sin(i + 1.0);
  for (int i = 0; i < k * n; ++i) b[i] = std::cos(i + 2.0);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<double> want = Reference(ta, tb, m, n, k, a, b);
      std::vector<double> c(m * n, 7.0);
      Gemm(ta, tb, m, n, k, 1.0, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0, c.data(), n);
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(m * n, 0.0f);
      Gemm(ta, tb, m, n, k, 1.0f, af.data(), ta ? m : k, bf.data(), tb ? k : n, 0.0f, cf.data(), n);
      for (int i = 0; i < m * n; ++i) {
        EXPECT_NEAR(c[i], want[i], 1e-12) << ta << tb << " " << i;
        EXPECT_NEAR(cf[i], want[i], 1e-5) << ta << tb << " " << i;
      }
    }
  }
}

TEST(BlasTest, AnEmptyInnerDimensionScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 0, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 0, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST(BlasTest, ReportsItselfAndTakesAThreadCount) {
  SetBlasThreads(1);
  const BlasInfo info = GetBlasInfo();
  EXPECT_FALSE(info.corename.empty());
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.config;
  EXPECT_EQ(info.threads, 1);
}

}  // namespace
}  // namespace overlap
