// 2-D convolutions in float32 through oneDNN (Debian's libdnnl 2.6, what PyTorch's CPU
// convolutions run): the forward, the data gradient and the weight gradient of one
// convolution over the whole batch, on contiguous NCHW / OIHW buffers. oneDNN picks its
// own blocked layouts; the inputs are reordered into them and the result back, per call.
// Primitives are cached by shape (process-wide, thread-safe), so a shape's first call pays
// oneDNN's code generation (~1 ms) and later ones do not. Threads: oneDNN's OpenMP pool,
// sized by SetDnnlThreads.
#ifndef OVERLAP_RUNTIME_CORE_DNNL_CONV_H_
#define OVERLAP_RUNTIME_CORE_DNNL_CONV_H_

#include <cstdint>

#include "absl/status/status.h"

namespace overlap {

// A convolution: input [n, c, h, w], weight [o, c / groups, kh, kw], output [n, o, ho, wo];
// stride s, padding p on the top / left (the bottom / right padding is what makes the
// output ho x wo), dilation d (1: none).
struct DnnlConvShape {
  int64_t n, c, h, w, o, kh, kw, groups, ho, wo;
  int64_t sh, sw, ph, pw, dh, dw;
};

// Whether oneDNN takes `s` (false for a shape it cannot express, e.g. an output that needs
// negative bottom padding): the callers' own loops then run. O(1).
bool DnnlConvSupports(const DnnlConvShape& s);

// y = conv(x, w) + bias (bias [o] or nullptr). Every element of y is written.
// Unimplemented (nothing written) when oneDNN has no primitive for the shape; Internal for a
// failure while it runs. O(n o ho wo c kh kw / groups).
absl::Status DnnlConvForward(const DnnlConvShape& s, const float* x, const float* w,
                             const float* bias, float* y);
// dx = the gradient of conv's input for the output gradient gy; every element written.
absl::Status DnnlConvBackwardData(const DnnlConvShape& s, const float* gy, const float* w,
                                  float* dx);
// dw = the gradient of conv's weight for input x and output gradient gy; every element
// written.
absl::Status DnnlConvBackwardWeights(const DnnlConvShape& s, const float* x, const float* gy,
                                     float* dw);

// Both gradients at once (dx or dw nullptr: that one is not computed): the output gradient
// is reordered once for the two primitives. Every element of dx and dw written.
absl::Status DnnlConvBackward(const DnnlConvShape& s, const float* x, const float* gy,
                              const float* w, float* dx, float* dw);

// Whether oneDNN's weight gradient for `s` is one of its direct JIT kernels (false: it has
// only its GEMM-based or reference implementation for the shape, as for depthwise 5 x 5
// kernels and 2 x 2 images, or none; the caller may have a better loop). The first call for
// a shape makes the primitive (~1 ms). O(1) after.
bool DnnlConvWeightsDirect(const DnnlConvShape& s);

// Sets oneDNN's thread count (>= 1; OpenMP's for the process, which the kernels' own
// parallel loops share). In a child forked without exec it stays 1: GNU OpenMP's pool does
// not survive fork (the child would wait on the parent's threads), so such a child runs
// every parallel region on its one thread. O(1).
void SetDnnlThreads(int threads);

// The thread count SetDnnlThreads left for parallel regions the calling thread starts
// (omp_get_max_threads(); 1 without oneDNN). O(1).
int DnnlThreads();

// Whether this build has oneDNN (false in an OVERLAP_NO_DNNL build, where every convolution
// runs the im2col loops). O(1).
bool DnnlAvailable();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_DNNL_CONV_H_
