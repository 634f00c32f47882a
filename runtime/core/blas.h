// Matrix products through OpenBLAS (CBLAS), the only GEMM the CPU kernels use, and the
// library's identity and threading for the record (docs/runtime.md records both beside the
// benchmarks). OpenBLAS's threads are shared by every rank on a machine: callers that run
// several ranks on few cores set them with SetBlasThreads.
#ifndef OVERLAP_RUNTIME_CORE_BLAS_H_
#define OVERLAP_RUNTIME_CORE_BLAS_H_

#include <cstdint>
#include <string>

namespace overlap {

// What OpenBLAS says of itself.
struct BlasInfo {
  std::string corename;  // openblas_get_corename(): the kernel set chosen for this CPU
  std::string config;    // openblas_get_config(): version and build options
  int threads = 1;       // openblas_get_num_threads()
};
// O(1).
BlasInfo GetBlasInfo();

// Sets OpenBLAS's thread count (>= 1) for the whole process. O(1).
void SetBlasThreads(int threads);

// C = alpha * op(A) * op(B) + beta * C for row-major matrices: op(A) is m x k, op(B) k x n,
// C m x n; lda, ldb, ldc are the row strides of A, B, C as stored (before the transpose).
// O(m n k).
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_BLAS_H_
