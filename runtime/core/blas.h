// Matrix products, the only GEMM the CPU kernels use: float32 on oneDNN's sgemm by default
// (OpenBLAS where built without oneDNN, or when asked), float64 on OpenBLAS (CBLAS). Why two
// libraries: Debian's OpenBLAS 0.3.21 runs its Haswell (AVX2) kernels on AVX-512 AMD CPUs
// (Zen 4 / 5), which it does not recognize, while oneDNN dispatches on the running CPU's
// instruction set; on such a CPU oneDNN's sgemm is about 2x OpenBLAS's, and at AVX2 the two
// tie (docs/runtime.md, "Matrix products"). Also the libraries' identity and threading for the
// record. Threads: OpenBLAS's own pool (SetBlasThreads) and oneDNN's, which is OpenMP's
// (SetDnnlThreads, runtime/core/dnnl_conv.h); SetBlasThreads sets both.
#ifndef OVERLAP_RUNTIME_CORE_BLAS_H_
#define OVERLAP_RUNTIME_CORE_BLAS_H_

#include <cstdint>
#include <string>

namespace overlap {

// Which library float32 products run on.
enum class GemmLibrary { kOneDnn, kOpenBlas };

// What the libraries say of themselves.
struct BlasInfo {
  std::string corename;  // openblas_get_corename(): the kernel set chosen for this CPU
  std::string config;    // openblas_get_config(): version and build options
  int threads = 1;       // openblas_get_num_threads(): float64 products
  int pool_threads = 1;  // OpenMP's (DnnlThreads()): float32 products, convolutions, loops
  // float32 products: "oneDNN 2.6.3 sgemm (avx512_core)" or "OpenBLAS sgemm (Haswell)".
  std::string float32;
};
// O(1).
BlasInfo GetBlasInfo();

// Sets the thread count (>= 1) of both pools: OpenBLAS's for the process, and OpenMP's
// (oneDNN and the kernels' loops) for parallel regions the calling thread starts, which is
// where the kernels run. O(1).
void SetBlasThreads(int threads);

// Chooses the library of float32 products for the whole process. The default is oneDNN
// where built with it, unless the environment says OVERLAP_GEMM=openblas when the first
// product runs; kOneDnn in a build without oneDNN stays OpenBLAS. Not synchronized with
// products running on other threads: call it before them. O(1).
void SetFloat32Gemm(GemmLibrary library);
// The library float32 products run on now. O(1).
GemmLibrary Float32Gemm();

// C = alpha * op(A) * op(B) + beta * C for row-major matrices: op(A) is m x k, op(B) k x n,
// C m x n; lda, ldb, ldc are the row strides of A, B, C as stored (before the transpose).
// beta 0 ignores C's previous contents (NaNs included). O(m n k).
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_BLAS_H_
