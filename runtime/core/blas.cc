#include "runtime/core/blas.h"

#include <cblas.h>

namespace overlap {
namespace {

// k = 0 leaves C = beta * C; CBLAS rejects the zero leading dimensions such a call has.
template <typename T>
void ScaleOnly(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? T(0) : beta * c[i * ldc + j];
  }
}

}  // namespace

BlasInfo GetBlasInfo() {
  BlasInfo info;
  info.corename = openblas_get_corename();
  info.config = openblas_get_config();
  info.threads = openblas_get_num_threads();
  return info;
}

void SetBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace overlap
