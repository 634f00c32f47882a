#include "runtime/core/blas.h"

#include <cblas.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/core/dnnl_conv.h"

#ifndef OVERLAP_NO_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace overlap {
namespace {

// k = 0 leaves C = beta * C; CBLAS rejects the zero leading dimensions such a call has.
template <typename T>
void ScaleOnly(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? T(0) : beta * c[i * ldc + j];
  }
}

#ifdef OVERLAP_NO_DNNL
constexpr bool kHaveDnnl = false;
#else
constexpr bool kHaveDnnl = true;
#endif

// -1: not chosen yet (the environment decides at the first product); else a GemmLibrary.
std::atomic<int> chosen{-1};

GemmLibrary Chosen() {
  int v = chosen.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("OVERLAP_GEMM");
    const bool openblas = !kHaveDnnl || (env != nullptr && std::strcmp(env, "openblas") == 0);
    int from_env = static_cast<int>(openblas ? GemmLibrary::kOpenBlas : GemmLibrary::kOneDnn);
    // A SetFloat32Gemm that landed meanwhile wins over the environment's default.
    if (chosen.compare_exchange_strong(v, from_env, std::memory_order_relaxed)) v = from_env;
  }
  return static_cast<GemmLibrary>(v);
}

#ifndef OVERLAP_NO_DNNL
const char* IsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}
#endif

}  // namespace

BlasInfo GetBlasInfo() {
  BlasInfo info;
  info.corename = openblas_get_corename();
  info.config = openblas_get_config();
  info.threads = openblas_get_num_threads();
  info.pool_threads = DnnlThreads();
#ifndef OVERLAP_NO_DNNL
  if (Chosen() == GemmLibrary::kOneDnn) {
    const dnnl_version_t* v = dnnl_version();
    info.float32 = absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " sgemm (",
                                IsaName(dnnl_get_effective_cpu_isa()), ")");
    return info;
  }
#endif
  info.float32 = absl::StrCat("OpenBLAS sgemm (", info.corename, ")");
  return info;
}

void SetBlasThreads(int threads) {
  openblas_set_num_threads(threads < 1 ? 1 : threads);
  SetDnnlThreads(threads);
}

void SetFloat32Gemm(GemmLibrary library) {
  if (!kHaveDnnl) library = GemmLibrary::kOpenBlas;
  chosen.store(static_cast<int>(library), std::memory_order_relaxed);
}

GemmLibrary Float32Gemm() { return Chosen(); }

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
#ifndef OVERLAP_NO_DNNL
  if (Chosen() == GemmLibrary::kOneDnn) {
    const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n,
                                            k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status == dnnl_success) return;
    // Arguments refused (the callers check sizes and strides, so not expected): nothing was
    // written, and OpenBLAS computes the same product. Any other failure (memory for its
    // packing buffers) may come after part of C was written: with beta 0 OpenBLAS
    // overwrites it; otherwise C cannot be recovered, and a silent wrong answer is worse
    // than stopping.
    if (status != dnnl_invalid_arguments && beta != 0.0f) {
      std::fprintf(stderr, "overlap: oneDNN's sgemm failed (status %d) after C was updated\n",
                   static_cast<int>(status));
      std::abort();
    }
  }
#endif
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
