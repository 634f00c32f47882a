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
absl::Status DnnlConvBackward(const DnnlConvShape&, const float*, const float*, const float*,
                              float*, float*) {
  return absl::UnimplementedError("built without oneDNN");
}
bool DnnlConvWeightsDirect(const DnnlConvShape&) { return false; }
void SetDnnlThreads(int) {}
bool DnnlAvailable() { return false; }
int DnnlThreads() { return 1; }
}  // namespace overlap
#else

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
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
  // Weight gradients: the implementation oneDNN chose (impl_info_str: "jit:avx512_core",
  // "x64:gemm:jit", ...), for DnnlConvWeightsDirect.
  std::string impl;
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
      e->impl = wpd.impl_info_str();
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

// Per-thread buffers for the reorders and the scratchpad, kept between calls and grown as
// needed: fresh ones each call would fault in their pages every time (a convolution's
// operands are megabytes), what a caching allocator spares PyTorch.
class Slots {
 public:
  void* Get(int slot, size_t bytes) {
    Slot& s = slots_[slot];
    if (bytes > s.bytes) {
      s.data.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      s.bytes = s.data ? bytes : 0;
    }
    return s.data.get();
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Slot {
    std::unique_ptr<char, Free> data;
    size_t bytes = 0;
  };
  Slot slots_[6];
};

// A memory object of `desc` on slot `slot` of this thread's buffers.
memory OnSlot(const memory::desc& desc, int slot) {
  thread_local Slots slots;
  const size_t bytes = desc.get_size();
  return memory(desc, Engine(), bytes == 0 ? nullptr : slots.Get(slot, bytes));
}

// The operand `p` (plain layout) in the layout the primitive wants: the user's buffer
// itself, or its reorder on this thread's slot `slot`.
memory Prepared(const std::optional<dnnl::reorder>& to, const memory::desc& want,
                const memory::desc& plain, const float* p, int slot, dnnl::stream& stream) {
  memory user(plain, Engine(), const_cast<float*>(p));
  if (!to) return user;
  memory m = OnSlot(want, slot);
  to->execute(stream, user, m);
  return m;
}

// Runs entry `e` on prepared operands a, b into the plain buffer out (through slot
// `out_slot` when the primitive's layout differs), with `bias` (forward only).
void Exec(const Entry& e, const memory& a, const memory& b, const float* bias, float* out,
          int a_arg, int b_arg, int out_arg, int out_slot, const DnnlConvShape& s,
          dnnl::stream& stream) {
  memory user_out(e.plain_out, Engine(), out);
  memory mo = e.from_out ? OnSlot(e.out, out_slot) : user_out;
  std::unordered_map<int, memory> args{
      {a_arg, a}, {b_arg, b}, {out_arg, mo}, {DNNL_ARG_SCRATCHPAD, OnSlot(e.scratch, 3)}};
  if (bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS,
                 memory(Plain({s.o}, memory::format_tag::x), Engine(), const_cast<float*>(bias)));
  }
  e.prim.execute(stream, args);
  if (e.from_out) e.from_out->execute(stream, mo, user_out);
}

dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

// Runs entry `e` on plain buffers a, b (operands) into out, with `bias` (forward only).
absl::Status Run(const Entry& e, const float* a, const float* b, const float* bias, float* out,
                 int out_arg, int a_arg, int b_arg, const DnnlConvShape& s) {
  try {
    dnnl::stream& stream = Stream();
    const memory ma = Prepared(e.to_a, e.a, e.plain_a, a, 0, stream);
    const memory mb = Prepared(e.to_b, e.b, e.plain_b, b, 1, stream);
    Exec(e, ma, mb, bias, out, a_arg, b_arg, out_arg, 2, s, stream);
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

bool DnnlConvWeightsDirect(const DnnlConvShape& s) {
  absl::StatusOr<const Entry*> e = Get(Kind::kWeights, s);
  return e.ok() && absl::StartsWith((*e)->impl, "jit");
}

absl::Status DnnlConvBackward(const DnnlConvShape& s, const float* x, const float* gy,
                              const float* w, float* dx, float* dw) {
  const Entry* data = nullptr;
  const Entry* weights = nullptr;
  if (dx != nullptr) {
    absl::StatusOr<const Entry*> e = Get(Kind::kData, s);
    if (!e.ok()) return e.status();
    data = *e;
  }
  if (dw != nullptr) {
    absl::StatusOr<const Entry*> e = Get(Kind::kWeights, s);
    if (!e.ok()) return e.status();
    weights = *e;
  }
  try {
    dnnl::stream& stream = Stream();
    std::optional<memory> gy_data;
    if (data != nullptr) {
      gy_data = Prepared(data->to_a, data->a, data->plain_a, gy, 0, stream);
      const memory mw = Prepared(data->to_b, data->b, data->plain_b, w, 1, stream);
      Exec(*data, *gy_data, mw, nullptr, dx, DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC,
           2, s, stream);
    }
    if (weights != nullptr) {
      // The output gradient in the weight primitive's layout: the data primitive's reorder
      // when they agree (the usual case), else its own.
      const memory gy_weights =
          gy_data && data->a == weights->b
              ? *gy_data
              : Prepared(weights->to_b, weights->b, weights->plain_b, gy, 4, stream);
      const memory mx = Prepared(weights->to_a, weights->a, weights->plain_a, x, 5, stream);
      Exec(*weights, mx, gy_weights, nullptr, dw, DNNL_ARG_SRC, DNNL_ARG_DIFF_DST,
           DNNL_ARG_DIFF_WEIGHTS, 2, s, stream);
    }
    stream.wait();
    return absl::OkStatus();
  } catch (const dnnl::error& err) {
    return absl::InternalError(absl::StrCat("oneDNN: ", err.what()));
  }
}

namespace {

// GNU OpenMP's pool does not survive fork(): a child forked after the parent ran a
// parallel region waits forever on threads it does not have. A child forked without exec
// (a test's ranks; `overlap run` execs its ranks) therefore runs one OpenMP thread: with a
// team of one, no pool thread is involved, and ranks sharing a machine's cores want no more.
std::atomic<bool> forked_child{false};

void OnForkChild() {
  forked_child = true;
  omp_set_num_threads(1);
}

const bool registered = [] { return pthread_atfork(nullptr, nullptr, OnForkChild) == 0; }();

}  // namespace

void SetDnnlThreads(int threads) {
  (void)registered;
  omp_set_num_threads(forked_child || threads < 1 ? 1 : threads);
}

bool DnnlAvailable() { return true; }

int DnnlThreads() { return omp_get_max_threads(); }

}  // namespace overlap

#endif  // OVERLAP_NO_DNNL
