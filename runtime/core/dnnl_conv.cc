#include "runtime/core/dnnl_conv.h"

#ifdef OVERLAP_NO_DNNL
// Builds without oneDNN (the OSS-Fuzz build: its images have no static libdnnl): no shape is
// supported, so the kernels run their own loops.
namespace overlap {
bool DnnlConvSupports(const DnnlConvShape&) { return false; }
absl::Status DnnlConvForward(const DnnlConvShape&, const float*, const float*, const float*,
                             float*) {
  return absl::UnimplementedError("built without oneDNN");
}
absl::Status DnnlConvBackwardData(const DnnlConvShape&, const float*, const float*, float*) {
  return absl::UnimplementedError("built without oneDNN");
}
absl::Status DnnlConvBackwardWeights(const DnnlConvShape&, const float*, const float*, float*) {
  return absl::UnimplementedError("built without oneDNN");
}
void SetDnnlThreads(int) {}
}  // namespace overlap
#else

#include <omp.h>

#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

using dnnl::memory;

enum class Kind { kForward, kForwardBias, kData, kWeights };

dnnl::engine& Engine() {
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

memory::dims SrcDims(const DnnlConvShape& s) { return {s.n, s.c, s.h, s.w}; }
memory::dims DstDims(const DnnlConvShape& s) { return {s.n, s.o, s.ho, s.wo}; }
memory::dims WeiDims(const DnnlConvShape& s) {
  if (s.groups == 1) return {s.o, s.c, s.kh, s.kw};
  return {s.groups, s.o / s.groups, s.c / s.groups, s.kh, s.kw};
}
memory::format_tag WeiTag(const DnnlConvShape& s) {
  return s.groups == 1 ? memory::format_tag::oihw : memory::format_tag::goihw;
}
memory::desc Plain(const memory::dims& d, memory::format_tag tag) {
  return memory::desc(d, memory::data_type::f32, tag);
}
memory::desc Any(const memory::dims& d) {
  return memory::desc(d, memory::data_type::f32, memory::format_tag::any);
}

// The bottom / right padding that gives `out` positions (oneDNN checks the same relation).
int64_t PadEnd(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, int64_t out) {
  return (out - 1) * stride + (k - 1) * dil + 1 - in - pad;
}

// One convolution's primitive (of `kind`) and the layouts it chose: reorders from and to the
// plain layouts, made once. A primitive is stateless (the scratchpad is the caller's), so
// one entry serves concurrent calls.
struct Entry {
  dnnl::primitive prim;
  memory::desc scratch;
  // The primitive's layouts of its two operands and its result (forward: src, weights,
  // dst; data: diff_dst, weights, diff_src; weights: src, diff_dst, diff_weights).
  memory::desc a, b, out;
  memory::desc plain_a, plain_b, plain_out;
  std::optional<dnnl::reorder> to_a, to_b, from_out;
};

absl::StatusOr<std::unique_ptr<Entry> > Make(Kind kind, const DnnlConvShape& s) {
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const memory::dims strides{s.sh, s.sw}, dil{s.dh - 1, s.dw - 1}, pl{s.ph, s.pw},
        pr{PadEnd(s.h, s.kh, s.sh, s.ph, s.dh, s.ho), PadEnd(s.w, s.kw, s.sw, s.pw, s.dw, s.wo)};
    const memory::desc src = Plain(SrcDims(s), memory::format_tag::nchw),
                       dst = Plain(DstDims(s), memory::format_tag::nchw),
                       wei = Plain(WeiDims(s), WeiTag(s));
    const memory::desc bias = Plain({s.o}, memory::format_tag::x);
    dnnl::convolution_forward::desc fd =
        kind == Kind::kForwardBias
            ? dnnl::convolution_forward::desc(
                  dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                  Any(SrcDims(s)), Any(WeiDims(s)), bias, Any(DstDims(s)), strides, dil, pl, pr)
            : dnnl::convolution_forward::desc(
                  dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                  Any(SrcDims(s)), Any(WeiDims(s)), Any(DstDims(s)), strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc fpd(fd, attr, Engine());
    auto e = std::make_unique<Entry>();
    if (kind == Kind::kForward || kind == Kind::kForwardBias) {
      e->prim = dnnl::convolution_forward(fpd);
      e->scratch = fpd.scratchpad_desc();
      std::tie(e->a, e->b, e->out) =
          std::make_tuple(fpd.src_desc(), fpd.weights_desc(), fpd.dst_desc());
      std::tie(e->plain_a, e->plain_b, e->plain_out) = std::make_tuple(src, wei, dst);
    } else if (kind == Kind::kData) {
      dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, Any(SrcDims(s)),
                                               Any(WeiDims(s)), Any(DstDims(s)), strides, dil, pl,
                                               pr);
      dnnl::convolution_backward_data::primitive_desc bpd(bd, attr, Engine(), fpd);
      e->prim = dnnl::convolution_backward_data(bpd);
      e->scratch = bpd.scratchpad_desc();
      std::tie(e->a, e->b, e->out) =
          std::make_tuple(bpd.diff_dst_desc(), bpd.weights_desc(), bpd.diff_src_desc());
      std::tie(e->plain_a, e->plain_b, e->plain_out) = std::make_tuple(dst, wei, src);
    } else {
      dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct,
                                                  Any(SrcDims(s)), Any(WeiDims(s)), Any(DstDims(s)),
                                                  strides, dil, pl, pr);
      dnnl::convolution_backward_weights::primitive_desc wpd(wd, attr, Engine(), fpd);
      e->prim = dnnl::convolution_backward_weights(wpd);
      e->scratch = wpd.scratchpad_desc();
      std::tie(e->a, e->b, e->out) =
          std::make_tuple(wpd.src_desc(), wpd.diff_dst_desc(), wpd.diff_weights_desc());
      std::tie(e->plain_a, e->plain_b, e->plain_out) = std::make_tuple(src, dst, wei);
    }
    if (e->a != e->plain_a)
      e->to_a = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), e->plain_a, Engine(), e->a));
    if (e->b != e->plain_b)
      e->to_b = dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), e->plain_b, Engine(), e->b));
    if (e->out != e->plain_out)
      e->from_out =
          dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), e->out, Engine(), e->plain_out));
    return e;
  } catch (const dnnl::error& err) {  // no implementation for this shape: the caller's loops
    return absl::UnimplementedError(absl::StrCat("oneDNN: ", err.what()));
  }
}

using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

// The cached entry of (kind, s); made on first use. Entries live for the process.
absl::StatusOr<const Entry*> Get(Kind kind, const DnnlConvShape& s) {
  static std::mutex* mu = new std::mutex;
  static auto* cache = new absl::flat_hash_map<Key, std::unique_ptr<Entry> >;
  const Key key{static_cast<int>(kind),
                s.n,
                s.c,
                s.h,
                s.w,
                s.o,
                s.kh,
                s.kw,
                s.groups,
                s.ho,
                s.wo,
                s.sh,
                s.sw,
                s.ph,
                s.pw,
                s.dh,
                s.dw};
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<Entry> > e = Make(kind, s);
  if (!e.ok()) return e.status();
  return cache->emplace(key, *std::move(e)).first->second.get();
}

// Runs entry `e` on plain buffers a, b (operands) into out, with `bias` (forward only).
absl::Status Run(const Entry& e, const float* a, const float* b, const float* bias, float* out,
                 int out_arg, int a_arg, int b_arg, const DnnlConvShape& s) {
  try {
    dnnl::engine& eng = Engine();
    thread_local dnnl::stream stream(eng);
    memory user_a(e.plain_a, eng, const_cast<float*>(a));
    memory user_b(e.plain_b, eng, const_cast<float*>(b));
    memory user_out(e.plain_out, eng, out);
    memory ma = user_a, mb = user_b, mo = user_out;
    if (e.to_a) {
      ma = memory(e.a, eng);
      e.to_a->execute(stream, user_a, ma);
    }
    if (e.to_b) {
      mb = memory(e.b, eng);
      e.to_b->execute(stream, user_b, mb);
    }
    if (e.from_out) mo = memory(e.out, eng);
    memory scratch(e.scratch, eng);
    std::unordered_map<int, memory> args{
        {a_arg, ma}, {b_arg, mb}, {out_arg, mo}, {DNNL_ARG_SCRATCHPAD, scratch}};
    if (bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS,
                   memory(Plain({s.o}, memory::format_tag::x), eng, const_cast<float*>(bias)));
    }
    e.prim.execute(stream, args);
    if (e.from_out) e.from_out->execute(stream, mo, user_out);
    stream.wait();
    return absl::OkStatus();
  } catch (const dnnl::error& err) {
    return absl::InternalError(absl::StrCat("oneDNN: ", err.what()));
  }
}

}  // namespace

bool DnnlConvSupports(const DnnlConvShape& s) {
  if (s.n <= 0 || s.c <= 0 || s.o <= 0 || s.groups <= 0 || s.c % s.groups != 0 ||
      s.o % s.groups != 0 || s.ho <= 0 || s.wo <= 0 || s.h <= 0 || s.w <= 0) {
    return false;
  }
  // oneDNN's relation between the sizes: out = (in - dilated kernel + pad + pad_end) /
  // stride + 1, with a pad_end no smaller than -(stride - 1) below the top padding's
  // mirror; a negative end padding the floor absorbs is fine.
  const int64_t eh = PadEnd(s.h, s.kh, s.sh, s.ph, s.dh, s.ho);
  const int64_t ew = PadEnd(s.w, s.kw, s.sw, s.pw, s.dw, s.wo);
  return eh > -s.sh && ew > -s.sw && eh <= s.ph + s.sh && ew <= s.pw + s.sw;
}

absl::Status DnnlConvForward(const DnnlConvShape& s, const float* x, const float* w,
                             const float* bias, float* y) {
  absl::StatusOr<const Entry*> e = Get(bias ? Kind::kForwardBias : Kind::kForward, s);
  if (!e.ok()) return e.status();
  return Run(**e, x, w, bias, y, DNNL_ARG_DST, DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, s);
}

absl::Status DnnlConvBackwardData(const DnnlConvShape& s, const float* gy, const float* w,
                                  float* dx) {
  absl::StatusOr<const Entry*> e = Get(Kind::kData, s);
  if (!e.ok()) return e.status();
  return Run(**e, gy, w, nullptr, dx, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, s);
}

absl::Status DnnlConvBackwardWeights(const DnnlConvShape& s, const float* x, const float* gy,
                                     float* dw) {
  absl::StatusOr<const Entry*> e = Get(Kind::kWeights, s);
  if (!e.ok()) return e.status();
  return Run(**e, x, gy, nullptr, dw, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, s);
}

void SetDnnlThreads(int threads) { omp_set_num_threads(threads < 1 ? 1 : threads); }

}  // namespace overlap

#endif  // OVERLAP_NO_DNNL
