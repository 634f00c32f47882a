#include "runtime/kernels/conv_args.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

absl::StatusOr<std::vector<int64_t>> SpatialArg(KernelCall& c, absl::string_view name, size_t n,
                                                int64_t fallback) {
  const Value* v = c.Arg(name);
  if (v == nullptr || v->is_none()) return std::vector<int64_t>(n, fallback);
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> p, c.IntListArg(name));
  if (p.empty()) return std::vector<int64_t>(n, fallback);
  if (p.size() == 1) p.assign(n, p[0]);
  if (p.size() != n) return c.Error(absl::StrCat(name, " should have 1 or ", n, " entries"));
  return p;
}

absl::StatusOr<std::vector<int64_t>> PairArg(KernelCall& c, absl::string_view name,
                                             int64_t fallback) {
  return SpatialArg(c, name, 2, fallback);
}

std::vector<int64_t> AdaptiveGeometry::OutShape(const std::vector<int64_t>& x_shape) const {
  std::vector<int64_t> shape = x_shape;
  for (int i = 0; i < spatial; ++i) shape[shape.size() - spatial + i] = out[3 - spatial + i];
  return shape;
}

namespace {

// The planes and the input sizes of an adaptive pooling of `spatial` dimensions over `x`.
absl::StatusOr<AdaptiveGeometry> AdaptiveInput(KernelCall& c, const Tensor& x, int spatial) {
  const char* layout =
      spatial == 2 ? "[C, H, W] or [N, C, H, W]" : "[C, D, H, W] or [N, C, D, H, W]";
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2) {
    return c.Error(absl::StrCat(spatial, "-D adaptive pooling input ", x.DebugString(),
                                " should be ", layout));
  }
  for (int64_t i = 1; i < x.dim(); ++i) {
    if (x.shape()[i] == 0) {
      return c.Error(absl::StrCat(spatial, "-D adaptive pooling input ", x.DebugString(),
                                  " has an empty non-batch dimension"));
    }
  }
  AdaptiveGeometry g;
  g.spatial = spatial;
  g.planes = 1;
  for (int64_t i = 0; i < x.dim() - spatial; ++i) g.planes *= x.shape()[i];
  for (int i = 0; i < spatial; ++i) g.in[3 - spatial + i] = x.shape()[x.dim() - spatial + i];
  return g;
}

}  // namespace

absl::StatusOr<AdaptiveGeometry> AdaptiveArgs(KernelCall& c, const Tensor& x, int spatial) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> size, SpatialArg(c, "output_size", spatial, -1));
  OVERLAP_ASSIGN_OR_RETURN(AdaptiveGeometry g, AdaptiveInput(c, x, spatial));
  for (int i = 0; i < spatial; ++i) {
    if (size[i] <= 0) {
      return c.Error(absl::StrCat("output_size must be ", spatial, " positive sizes"));
    }
    g.out[3 - spatial + i] = size[i];
  }
  return g;
}

absl::StatusOr<AdaptiveGeometry> AdaptiveBackwardArgs(KernelCall& c, const Tensor& grad,
                                                      const Tensor& self, int spatial) {
  OVERLAP_ASSIGN_OR_RETURN(AdaptiveGeometry g, AdaptiveInput(c, self, spatial));
  bool fits = grad.dim() == self.dim() && grad.dtype() == self.dtype();
  int64_t grad_planes = 1;
  for (int64_t i = 0; fits && i < grad.dim() - spatial; ++i) grad_planes *= grad.shape()[i];
  for (int i = 0; fits && i < spatial; ++i) {
    g.out[3 - spatial + i] = grad.shape()[grad.dim() - spatial + i];
    fits = g.out[3 - spatial + i] > 0;
  }
  if (!fits || grad_planes != g.planes) {
    return c.Error(absl::StrCat("grad_output ", grad.DebugString(), " does not fit self ",
                                self.DebugString()));
  }
  return g;
}

namespace {

// The last `spatial` of (d, h, w) after n and channels.
std::vector<int64_t> SpatialShape(int64_t n, int64_t channels, int spatial, int64_t d, int64_t h,
                                  int64_t w) {
  std::vector<int64_t> out{n, channels, d, h, w};
  out.erase(out.begin() + 2, out.begin() + 5 - spatial);
  return out;
}

// One spatial dimension of a convolution: sizes in, kernel k, out and stride, padding,
// dilation, output_padding (`extra`).
struct ConvDim {
  int64_t in = 1, k = 1, out = 1, s = 1, p = 0, d = 1, extra = 0;
};

// Fills `dims` (depth, height, width; the missing leading ones unit) from the arguments and
// the tensors, the described convolution's in or out sizes computed from the other.
absl::Status ReadConvDims(KernelCall& c, const Tensor& x, const Tensor& wt, bool transposed,
                          std::array<ConvDim, 3>& dims) {
  const size_t n = x.dim() - 2;
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, SpatialArg(c, "stride", n, 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad, SpatialArg(c, "padding", n, 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, SpatialArg(c, "dilation", n, 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> extra, SpatialArg(c, "output_padding", n, 0));
  for (size_t i = 0; i < n; ++i) {
    ConvDim& d = dims[3 - n + i];
    d.s = stride[i], d.p = pad[i], d.d = dil[i], d.extra = extra[i];
    d.k = wt.shape()[2 + i];
    if (d.s <= 0 || d.d <= 0 || d.p < 0) {
      return c.Error("stride and dilation must be positive, padding non-negative");
    }
    if (transposed) {
      if (d.extra < 0 || (d.extra >= d.s && d.extra >= d.d)) {
        return c.Error("output_padding must be non-negative and below the stride or the dilation");
      }
      d.out = x.shape()[2 + i];
      d.in = (d.out - 1) * d.s - 2 * d.p + d.d * (d.k - 1) + d.extra + 1;
      if (d.in <= 0) return c.Error("the transposed convolution's output is empty");
      continue;
    }
    if (d.extra != 0) return c.Error("output_padding is for transposed convolutions");
    d.in = x.shape()[2 + i];
    const int64_t span = d.in + 2 * d.p - d.d * (d.k - 1) - 1;
    if (span < 0) return c.Error("the kernel is larger than the padded input");
    d.out = span / d.s + 1;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> ConvInShape(const ConvGeometry& g) {
  return SpatialShape(g.n, g.c, g.spatial, g.d, g.h, g.w);
}

std::vector<int64_t> ConvOutShape(const ConvGeometry& g) {
  return SpatialShape(g.n, g.o, g.spatial, g.od, g.ho, g.wo);
}

// Reads stride, padding, dilation, transposed, output_padding and groups by name.
absl::StatusOr<ConvGeometry> ConvArgs(KernelCall& c, const Tensor& x, const Tensor& wt) {
  OVERLAP_ASSIGN_OR_RETURN(bool transposed, c.BoolArg("transposed"));
  OVERLAP_ASSIGN_OR_RETURN(int64_t groups, c.IntArg("groups"));
  if (x.dim() < 3 || x.dim() > 5 || wt.dim() != x.dim()) {
    return c.Error(absl::StrCat("1-, 2- or 3-D convolutions only: input ", x.DebugString(),
                                ", weight ", wt.DebugString()));
  }
  std::array<ConvDim, 3> dims;
  OVERLAP_RETURN_IF_ERROR(ReadConvDims(c, x, wt, transposed, dims));
  ConvGeometry gm;
  gm.transposed = transposed;
  gm.spatial = static_cast<int>(x.dim() - 2);
  gm.groups = groups;
  gm.n = x.shape()[0];
  gm.d = dims[0].in, gm.kd = dims[0].k, gm.od = dims[0].out;
  gm.sd = dims[0].s, gm.pd = dims[0].p, gm.dd = dims[0].d;
  gm.h = dims[1].in, gm.kh = dims[1].k, gm.ho = dims[1].out;
  gm.sh = dims[1].s, gm.ph = dims[1].p, gm.dh = dims[1].d;
  gm.w = dims[2].in, gm.kw = dims[2].k, gm.wo = dims[2].out;
  gm.sw = dims[2].s, gm.pw = dims[2].p, gm.dw = dims[2].d;
  if (transposed) {
    // The input is the described convolution's output: [n, o, spatial...], o = weight's first
    // dimension; its output [n, c, spatial...] with c = weight's second dimension * groups.
    gm.o = x.shape()[1];
    if (groups <= 0 || gm.o % groups != 0 || wt.shape()[0] != gm.o) {
      return c.Error(absl::StrCat("weight ", wt.DebugString(), " does not fit input ",
                                  x.DebugString(), " with ", groups, " groups (transposed)"));
    }
    gm.c = wt.shape()[1] * groups;
  } else {
    gm.c = x.shape()[1];
    gm.o = wt.shape()[0];
    if (groups <= 0 || gm.c % groups != 0 || gm.o % groups != 0 || wt.shape()[1] * groups != gm.c) {
      return c.Error(absl::StrCat("weight ", wt.DebugString(), " does not fit input ",
                                  x.DebugString(), " with ", groups, " groups"));
    }
  }
  gm.cg = gm.c / groups, gm.og = gm.o / groups;
  if (gm.od <= 0 || gm.ho <= 0 || gm.wo <= 0) {
    return c.Error("the kernel is larger than the padded input");
  }
  return gm;
}

namespace {

int64_t PlanesOf(const Tensor& x) {
  int64_t p = 1;
  for (int64_t i = 0; i + 2 < x.dim(); ++i) p *= x.shape()[i];
  return p;
}

int64_t PoolOutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;  // the caller reports it
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

}  // namespace

absl::StatusOr<NnPool> PoolArgs(KernelCall& c, const Tensor& x) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> k, PairArg(c, "kernel_size", 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> s, PairArg(c, "stride", 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> p, PairArg(c, "padding", 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> d, PairArg(c, "dilation", 1));
  OVERLAP_ASSIGN_OR_RETURN(bool ceil_mode, c.BoolArg("ceil_mode"));
  if (s[0] == 0) s = k;  // PyTorch: an empty stride means the kernel size
  if (x.dim() < 3) return c.Error(absl::StrCat("pooling input ", x.DebugString(), " is not 2-D"));
  if (k[0] <= 0 || k[1] <= 0 || s[0] <= 0 || s[1] <= 0 || d[0] <= 0 || d[1] <= 0 || p[0] < 0 ||
      p[1] < 0 || 2 * p[0] > k[0] || 2 * p[1] > k[1]) {
    return c.Error("bad kernel size, stride, padding or dilation");
  }
  NnPool g;
  g.h = x.shape()[x.dim() - 2], g.w = x.shape()[x.dim() - 1];
  g.planes = PlanesOf(x);
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1];
  g.dh = d[0], g.dw = d[1];
  g.ho = PoolOutSize(g.h, g.kh, g.sh, g.ph, g.dh, ceil_mode);
  g.wo = PoolOutSize(g.w, g.kw, g.sw, g.pw, g.dw, ceil_mode);
  if (g.ho <= 0 || g.wo <= 0) return c.Error("the pooling window is larger than the input");
  return g;
}

absl::StatusOr<AttnShape> AttnArgs(KernelCall& c, const Tensor& q, const Tensor& k,
                                   const Tensor& v) {
  OVERLAP_ASSIGN_OR_RETURN(double dropout, c.DoubleArg("dropout_p"));
  OVERLAP_ASSIGN_OR_RETURN(bool causal, c.BoolArg("is_causal"));
  if (dropout != 0) return c.Error("attention dropout is not supported (no RNG state)");
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.dtype() != k.dtype() ||
      q.dtype() != v.dtype()) {
    return c.Error("query, key and value should be [batch, heads, seq, dim] of one dtype");
  }
  AttnShape a{q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2],
              k.shape()[2], q.shape()[3], v.shape()[3], 0,
              causal};
  if (k.shape()[0] != a.b || v.shape()[0] != a.b || k.shape()[3] != a.d || v.shape()[1] != a.hk ||
      v.shape()[2] != a.sk || a.hk == 0 || a.h % a.hk != 0) {
    return c.Error(absl::StrCat("query ", q.DebugString(), ", key ", k.DebugString(), " and value ",
                                v.DebugString(), " do not fit"));
  }
  OVERLAP_ASSIGN_OR_RETURN(a.scale,
                           c.DoubleArg("scale", 1.0 / std::sqrt(std::max<int64_t>(a.d, 1))));
  return a;
}

}  // namespace overlap
