#include "runtime/kernels/conv_args.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

absl::StatusOr<std::vector<int64_t>> PairArg(KernelCall& c, absl::string_view name,
                                             int64_t fallback) {
  const Value* v = c.Arg(name);
  if (v == nullptr || v->is_none()) return std::vector<int64_t>{fallback, fallback};
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> p, c.IntListArg(name));
  if (p.empty()) return std::vector<int64_t>{fallback, fallback};
  if (p.size() == 1) p.push_back(p[0]);
  if (p.size() != 2) return c.Error(absl::StrCat(name, " should have 2 entries"));
  return p;
}

// Reads stride, padding, dilation, transposed, output_padding and groups by name.
absl::StatusOr<ConvGeometry> ConvArgs(KernelCall& c, const Tensor& x, const Tensor& wt) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, PairArg(c, "stride", 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad, PairArg(c, "padding", 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, PairArg(c, "dilation", 1));
  OVERLAP_ASSIGN_OR_RETURN(bool transposed, c.BoolArg("transposed"));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> extra, PairArg(c, "output_padding", 0));
  OVERLAP_ASSIGN_OR_RETURN(int64_t groups, c.IntArg("groups"));
  if (x.dim() != 4 || wt.dim() != 4) {
    return c.Error(absl::StrCat("2-D convolutions only: input ", x.DebugString(), ", weight ",
                                wt.DebugString()));
  }
  ConvGeometry gm;
  gm.transposed = transposed;
  gm.sh = stride[0], gm.sw = stride[1], gm.ph = pad[0], gm.pw = pad[1], gm.dh = dil[0],
  gm.dw = dil[1];
  gm.kh = wt.shape()[2], gm.kw = wt.shape()[3], gm.groups = groups;
  if (gm.sh <= 0 || gm.sw <= 0 || gm.dh <= 0 || gm.dw <= 0 || gm.ph < 0 || gm.pw < 0) {
    return c.Error("stride and dilation must be positive, padding non-negative");
  }
  gm.n = x.shape()[0];
  if (transposed) {
    // The input is the described convolution's output: [n, o, ho, wo], o = weight's first
    // dimension; its output [n, c, h, w] with c = weight's second dimension * groups.
    gm.o = x.shape()[1], gm.ho = x.shape()[2], gm.wo = x.shape()[3];
    if (groups <= 0 || gm.o % groups != 0 || wt.shape()[0] != gm.o) {
      return c.Error(absl::StrCat("weight ", wt.DebugString(), " does not fit input ",
                                  x.DebugString(), " with ", groups, " groups (transposed)"));
    }
    if (extra[0] < 0 || extra[1] < 0 || (extra[0] >= gm.sh && extra[0] >= gm.dh) ||
        (extra[1] >= gm.sw && extra[1] >= gm.dw)) {
      return c.Error("output_padding must be non-negative and below the stride or the dilation");
    }
    gm.c = wt.shape()[1] * groups;
    gm.h = (gm.ho - 1) * gm.sh - 2 * gm.ph + gm.dh * (gm.kh - 1) + extra[0] + 1;
    gm.w = (gm.wo - 1) * gm.sw - 2 * gm.pw + gm.dw * (gm.kw - 1) + extra[1] + 1;
    if (gm.h <= 0 || gm.w <= 0) return c.Error("the transposed convolution's output is empty");
    gm.cg = gm.c / groups, gm.og = gm.o / groups;
    return gm;
  }
  if (extra[0] != 0 || extra[1] != 0) {
    return c.Error("output_padding is for transposed convolutions");
  }
  gm.c = x.shape()[1], gm.h = x.shape()[2], gm.w = x.shape()[3];
  gm.o = wt.shape()[0];
  if (groups <= 0 || gm.c % groups != 0 || gm.o % groups != 0 || wt.shape()[1] * groups != gm.c) {
    return c.Error(absl::StrCat("weight ", wt.DebugString(), " does not fit input ",
                                x.DebugString(), " with ", groups, " groups"));
  }
  gm.cg = gm.c / groups, gm.og = gm.o / groups;
  if (gm.h + 2 * gm.ph - gm.dh * (gm.kh - 1) - 1 < 0 ||
      gm.w + 2 * gm.pw - gm.dw * (gm.kw - 1) - 1 < 0) {
    return c.Error("the kernel is larger than the padded input");
  }
  gm.ho = (gm.h + 2 * gm.ph - gm.dh * (gm.kh - 1) - 1) / gm.sh + 1;
  gm.wo = (gm.w + 2 * gm.pw - gm.dw * (gm.kw - 1) - 1) / gm.sw + 1;
  if (gm.ho <= 0 || gm.wo <= 0) return c.Error("the kernel is larger than the padded input");
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
