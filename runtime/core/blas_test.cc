#include "runtime/core/blas.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/core/dnnl_conv.h"

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

// Both float32 libraries and OpenBLAS's float64 against the definition, in every transpose,
// with strided operands (row strides above the matrix widths), alpha and beta, and sizes
// past one register block (oneDNN's kernels block 16 x 48 or so).
class GemmTest : public ::testing::TestWithParam<GemmLibrary> {
 protected:
  void SetUp() override {
    before_ = Float32Gemm();
    SetFloat32Gemm(GetParam());
  }
  void TearDown() override { SetFloat32Gemm(before_); }
  GemmLibrary before_ = GemmLibrary::kOneDnn;
};

TEST_P(GemmTest, MatchesTheDefinitionInEveryTransposeAndBothPrecisions) {
  for (const auto& [m, n, k] : {std::tuple{5, 3, 4}, std::tuple{37, 53, 70}}) {
    std::vector<double> a(m * k), b(k * n);
    for (int i = 0; i < m * k; ++i) a[i] = std::sin(i + 1.0);
    for (int i = 0; i < k * n; ++i) b[i] = std::cos(i + 2.0);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::vector<double> want = Reference(ta, tb, m, n, k, a, b);
        std::vector<double> c(m * n, 7.0);
        Gemm(ta, tb, m, n, k, 1.0, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0, c.data(), n);
        std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(m * n, 0.0f);
        Gemm(ta, tb, m, n, k, 1.0f, af.data(), ta ? m : k, bf.data(), tb ? k : n, 0.0f, cf.data(),
             n);
        for (int i = 0; i < m * n; ++i) {
          EXPECT_NEAR(c[i], want[i], 1e-12) << ta << tb << " " << i;
          EXPECT_NEAR(cf[i], want[i], 1e-5 * k) << ta << tb << " " << i;
        }
      }
    }
  }
}

TEST_P(GemmTest, StridedOperandsAlphaAndBeta) {
  // A 6 x 4 inside rows of 9, B 4 x 5 inside rows of 7, C 6 x 5 inside rows of 8: the
  // padding must be neither read into the product nor written.
  const int m = 6, n = 5, k = 4, lda = 9, ldb = 7, ldc = 8;
  std::vector<float> a(m * lda, 1e30f), b(k * ldb, 1e30f), c(m * ldc, -3.0f);
  std::vector<double> ad(m * k), bd(k * n);
  for (int i = 0; i < m; ++i) {
    for (int p = 0; p < k; ++p) a[i * lda + p] = static_cast<float>(ad[i * k + p] = i - 0.5 * p);
  }
  for (int p = 0; p < k; ++p) {
    for (int j = 0; j < n; ++j) b[p * ldb + j] = static_cast<float>(bd[p * n + j] = 0.25 * j + p);
  }
  const std::vector<double> ab = Reference(false, false, m, n, k, ad, bd);
  Gemm(false, false, m, n, k, 2.0f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const double want = j < n ? 2.0 * ab[i * n + j] + 0.5 * -3.0 : -3.0;
      EXPECT_NEAR(c[i * ldc + j], want, 1e-4) << i << " " << j;
    }
  }
}

TEST_P(GemmTest, BetaZeroOverwritesNaN) {
  std::vector<float> a = {1, 2}, b = {3, 4}, c = {std::nanf(""), std::nanf("")};
  Gemm(false, false, 1, 2, 1, 1.0f, a.data(), 1, b.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{3, 4}));
}

INSTANTIATE_TEST_SUITE_P(Libraries, GemmTest,
                         ::testing::Values(GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas),
                         [](const ::testing::TestParamInfo<GemmLibrary>& p) {
                           return p.param == GemmLibrary::kOneDnn ? "oneDNN" : "OpenBLAS";
                         });

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
  EXPECT_EQ(info.pool_threads, 1);
  const GemmLibrary before = Float32Gemm();
  SetFloat32Gemm(GemmLibrary::kOneDnn);
  // A build without oneDNN keeps OpenBLAS whatever is asked.
  const GemmLibrary want = DnnlAvailable() ? GemmLibrary::kOneDnn : GemmLibrary::kOpenBlas;
  EXPECT_EQ(Float32Gemm(), want);
  EXPECT_NE(GetBlasInfo().float32.find(DnnlAvailable() ? "oneDNN" : "OpenBLAS"), std::string::npos)
      << GetBlasInfo().float32;
  SetFloat32Gemm(GemmLibrary::kOpenBlas);
  EXPECT_EQ(Float32Gemm(), GemmLibrary::kOpenBlas);
  EXPECT_NE(GetBlasInfo().float32.find("OpenBLAS"), std::string::npos) << GetBlasInfo().float32;
  SetFloat32Gemm(before);
}

}  // namespace
}  // namespace overlap
