#include "runtime/conv_args.h"

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

absl::StatusOr<std::vector<int64_t>> PairArg(KernelCall& c, int pos, absl::string_view name,
                                             int64_t fallback) {
  const Value* v = c.Arg(pos, name);
  if (v == nullptr || v->is_none()) return std::vector<int64_t>{fallback, fallback};
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> p, c.IntListArg(pos, name));
  if (p.empty()) return std::vector<int64_t>{fallback, fallback};
  if (p.size() == 1) p.push_back(p[0]);
  if (p.size() != 2) return c.Error(absl::StrCat(name, " should have 2 entries"));
  return p;
}

// Reads stride, padding, dilation, transposed, groups from positions `first`.. of the call.
absl::StatusOr<ConvGeometry> ConvArgs(KernelCall& c, const Tensor& x, const Tensor& wt, int first) {
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> stride, PairArg(c, first, "stride", 1));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> pad, PairArg(c, first + 1, "padding", 0));
  OVERLAP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, PairArg(c, first + 2, "dilation", 1));
  OVERLAP_ASSIGN_OR_RETURN(bool transposed, c.BoolArg(first + 3, "transposed", false));
  OVERLAP_ASSIGN_OR_RETURN(int64_t groups, c.IntArg(first + 5, "groups", 1));
  if (transposed) return c.Error("transposed convolutions are not supported");
  if (x.dim() != 4 || wt.dim() != 4) {
    return c.Error(absl::StrCat("2-D convolutions only: input ", x.DebugString(), ", weight ",
                                wt.DebugString()));
  }
  ConvGeometry gm;
  gm.n = x.shape()[0], gm.c = x.shape()[1], gm.h = x.shape()[2], gm.w = x.shape()[3];
  gm.o = wt.shape()[0], gm.kh = wt.shape()[2], gm.kw = wt.shape()[3], gm.groups = groups;
  gm.sh = stride[0], gm.sw = stride[1], gm.ph = pad[0], gm.pw = pad[1], gm.dh = dil[0],
  gm.dw = dil[1];
  if (groups <= 0 || gm.c % groups != 0 || gm.o % groups != 0 || wt.shape()[1] * groups != gm.c) {
    return c.Error(absl::StrCat("weight ", wt.DebugString(), " does not fit input ",
                                x.DebugString(), " with ", groups, " groups"));
  }
  if (gm.sh <= 0 || gm.sw <= 0 || gm.dh <= 0 || gm.dw <= 0 || gm.ph < 0 || gm.pw < 0) {
    return c.Error("stride and dilation must be positive, padding non-negative");
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

}  // namespace overlap
