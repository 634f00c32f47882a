// Parallel loops on the process's OpenMP pool: the pool oneDNN's convolutions run on, so
// the kernels' loops and the convolutions share one set of threads (sized with OpenBLAS's
// by --threads: runtime/core/dnnl_conv.h's SetDnnlThreads). A file compiled without
// -fopenmp runs every loop on the calling thread.
#ifndef OVERLAP_RUNTIME_CORE_PARALLEL_H_
#define OVERLAP_RUNTIME_CORE_PARALLEL_H_

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace overlap {

// Elements below which a loop runs on the calling thread alone: a fork-join of the pool
// costs a few microseconds, what ~32K elements of simple arithmetic take (PyTorch's grain
// size is the same).
inline constexpr int64_t kParallelGrain = 32768;

// fn(begin, end) over [0, n) split into one contiguous chunk per thread of the OpenMP pool
// when n >= grain; fn(0, n) otherwise.
// fn must not throw. A build without OpenMP runs fn(0, n).
template <typename F>
void ParallelFor(int64_t n, F&& fn, int64_t grain = kParallelGrain) {
#ifdef _OPENMP
  if (n >= grain && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t chunk = (n + threads - 1) / threads;
      const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
      if (begin < end) fn(begin, end);
    }
    return;
  }
#endif
  fn(int64_t{0}, n);
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_PARALLEL_H_
