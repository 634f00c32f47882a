// Channel ops: PReLU (a learned slope per channel) and its backward, in torch 1.13's form
// (prelu / prelu_backward: a weight of one element or one per channel, dimension 1) and 2.x's
// (_prelu_kernel / _prelu_kernel_backward: the weight broadcast to self, the weight's
// gradient left unsummed), one formula for both; pixel_shuffle and pixel_unshuffle, which
// move elements between the channel dimension and the spatial ones.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/kernel_util.h"

namespace overlap {
namespace kernels {
namespace {

using Results = absl::StatusOr<std::vector<Tensor>>;

// The prelu family's operands on the result's shape: self through its (broadcast) strides,
// the weight contiguous and read through `w_strides` (zero where it is broadcast).
struct PreluOperands {
  Tensor x;
  Tensor w;
  std::vector<int64_t> w_strides;
};

// `per_channel`: 1.13's prelu weight (one element, or one per channel of dimension 1);
// otherwise 2.x's, broadcast by NumPy rules, to self's shape alone for a backward.
absl::StatusOr<PreluOperands> Operands(KernelCall& c, bool per_channel, bool backward) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor w0, c.TensorArg("weight"));
  if (x.dtype() != w0.dtype()) {
    return c.Error(absl::StrCat("self ", x.DebugString(), " and weight ", w0.DebugString(),
                                " should have one dtype"));
  }
  std::vector<int64_t> shape = x.shape();
  OVERLAP_ASSIGN_OR_RETURN(Tensor w, Contiguous(c, w0));
  std::vector<int64_t> w_strides(shape.size(), 0);
  if (per_channel) {
    if (w.dim() > 1) return c.Error("weight must be a scalar or 1-d");
    if (w.numel() != 1) {
      const int64_t channels = x.dim() > 1 ? shape[1] : 1;
      if (x.dim() == 0 || channels != w.numel()) {
        return c.Error(absl::StrCat("weight has ", w.numel(), " elements, self ", channels,
                                    " channels (", x.DebugString(), ")"));
      }
      w_strides[1] = 1;
    }
  } else {
    OVERLAP_ASSIGN_OR_RETURN(shape, BroadcastShape(c, x.shape(), w.shape()));
    if (backward && shape != x.shape()) {
      return c.Error(absl::StrCat("weight ", w.DebugString(), " does not broadcast to self ",
                                  x.DebugString()));
    }
    w_strides = BroadcastStrides(w, shape);
    OVERLAP_ASSIGN_OR_RETURN(x, x.AsStrided(shape, BroadcastStrides(x, shape), x.offset()));
  }
  return PreluOperands{x, w, w_strides};
}

// x > 0 ? x : w x (NaN stays NaN).
Results Prelu(KernelCall& c, bool per_channel) {
  OVERLAP_ASSIGN_OR_RETURN(PreluOperands p, Operands(c, per_channel, false));
  return DispatchFloat(c, p.x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(p.x.dtype(), p.x.shape()));
    const T* x = p.x.data<T>();
    const T* w = p.w.data<T>();
    T* o = out.data<T>();
    int64_t j = 0;
    ForEach2(p.x.shape(), p.x.strides(), p.w_strides, [&](int64_t ox, int64_t ow) {
      const T v = x[ox];
      o[j++] = v > T(0) ? v : w[ow] * v;
    });
    return std::vector<Tensor>{out};
  });
}

// d_self = x > 0 ? g : w g; d_weight = x > 0 ? 0 : x g, summed to the weight's shape for
// `per_channel` (1.13's prelu_backward), of self's shape otherwise (2.x's kernel).
Results PreluBackward(KernelCall& c, bool per_channel) {
  OVERLAP_ASSIGN_OR_RETURN(PreluOperands p, Operands(c, per_channel, true));
  OVERLAP_ASSIGN_OR_RETURN(Tensor g0, c.TensorArg("grad_output"));
  OVERLAP_RETURN_IF_ERROR(CheckSame(c, g0, p.x, "grad_output and self"));
  OVERLAP_ASSIGN_OR_RETURN(Tensor g, Contiguous(c, g0));
  return DispatchFloat(c, p.x.dtype(), [&](auto tag) -> Results {
    using T = decltype(tag);
    OVERLAP_ASSIGN_OR_RETURN(Tensor gx, c.NewUninitializedOutput(p.x.dtype(), p.x.shape()));
    OVERLAP_ASSIGN_OR_RETURN(
        Tensor gw, c.NewUninitializedOutput(p.x.dtype(), per_channel ? p.w.shape() : p.x.shape()));
    const T* x = p.x.data<T>();
    const T* w = p.w.data<T>();
    const T* pg = g.data<T>();
    T* ox_grad = gx.data<T>();
    T* ow_grad = gw.data<T>();
    std::vector<double> acc(per_channel ? p.w.numel() : 0, 0.0);  // in double, as sums here
    int64_t j = 0;
    ForEach2(p.x.shape(), p.x.strides(), p.w_strides, [&](int64_t ox, int64_t ow) {
      const T v = x[ox], gv = pg[j];
      const bool positive = v > T(0);
      ox_grad[j] = positive ? gv : w[ow] * gv;
      const T d = positive ? T(0) : v * gv;
      if (per_channel) {
        acc[ow] += static_cast<double>(d);
      } else {
        ow_grad[j] = d;
      }
      ++j;
    });
    for (size_t i = 0; i < acc.size(); ++i) ow_grad[i] = static_cast<T>(acc[i]);
    return std::vector<Tensor>{gx, gw};
  });
}

// pixel_shuffle [..., C r^2, H, W] -> [..., C, H r, W r] (up), pixel_unshuffle the inverse:
// one strided copy of self seen as the result's 5 trailing dimensions. Any dtype.
Results PixelShuffle(KernelCall& c, bool up) {
  OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.TensorArg("self"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t r, c.IntArg(up ? "upscale_factor" : "downscale_factor"));
  const int64_t n = x.dim();
  if (n < 3) return c.Error(absl::StrCat("self has ", n, " dimensions, at least 3 are needed"));
  if (r <= 0) return c.Error(absl::StrCat("the factor must be positive, got ", r));
  const int64_t ch = x.shape()[n - 3], h = x.shape()[n - 2], w = x.shape()[n - 1];
  const int64_t sc = x.strides()[n - 3], sh = x.strides()[n - 2], sw = x.strides()[n - 1];
  int64_t rr = 0, grown = 0;
  const bool overflow =
      __builtin_mul_overflow(r, r, &rr) ||
      (up ? __builtin_mul_overflow(h, r, &grown) || __builtin_mul_overflow(w, r, &grown)
          : __builtin_mul_overflow(ch, rr, &grown));
  if (overflow) return c.Error("the result's size overflows int64");
  std::vector<int64_t> out(x.shape().begin(), x.shape().end() - 3);
  std::vector<int64_t> view = out, strides(x.strides().begin(), x.strides().end() - 3);
  if (up) {
    if (ch % rr != 0) return c.Error(absl::StrCat("channels ", ch, " not divisible by ", r, "^2"));
    out.insert(out.end(), {ch / rr, h * r, w * r});
    view.insert(view.end(), {ch / rr, h, r, w, r});
    strides.insert(strides.end(), {rr * sc, sh, r * sc, sw, sc});
  } else {
    if (h % r != 0 || w % r != 0) {
      return c.Error(absl::StrCat("height ", h, " and width ", w, " must be divisible by ", r));
    }
    out.insert(out.end(), {ch * rr, h / r, w / r});
    view.insert(view.end(), {ch, r, r, h / r, w / r});
    strides.insert(strides.end(), {sc, sh, sw, r * sh, r * sw});
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor result, c.NewUninitializedOutput(x.dtype(), out));
  OVERLAP_ASSIGN_OR_RETURN(Tensor dst, result.View(view));
  OVERLAP_ASSIGN_OR_RETURN(Tensor src, x.AsStrided(view, strides, x.offset()));
  OVERLAP_RETURN_IF_ERROR(CopyInto(c, src, dst));
  return std::vector<Tensor>{result};
}

}  // namespace
}  // namespace kernels

void RegisterChannelKernels(KernelRegistry& r) {
  using kernels::PixelShuffle;
  using kernels::Prelu;
  using kernels::PreluBackward;
  r.Register("aten.prelu.default", [](KernelCall& c) { return Prelu(c, true); });
  r.Register("aten.prelu_backward.default", [](KernelCall& c) { return PreluBackward(c, true); });
  r.Register("aten._prelu_kernel.default", [](KernelCall& c) { return Prelu(c, false); });
  r.Register("aten._prelu_kernel_backward.default",
             [](KernelCall& c) { return PreluBackward(c, false); });
  r.Register("aten.pixel_shuffle.default", [](KernelCall& c) { return PixelShuffle(c, true); });
  r.Register("aten.pixel_unshuffle.default", [](KernelCall& c) { return PixelShuffle(c, false); });
}

}  // namespace overlap
