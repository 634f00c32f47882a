#include "runtime/cuda/cuda_kernels.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "graph/status_macros.h"

namespace overlap {
namespace {

constexpr absl::string_view kCublasOps[] = {"aten.mm.default", "aten.addmm.default"};

const absl::flat_hash_set<std::string>& ViewTargets() {
  static const auto* targets = [] {
    KernelRegistry views;
    RegisterViewKernels(views);
    std::vector<std::string> t = views.Targets();
    return new absl::flat_hash_set<std::string>(t.begin(), t.end());
  }();
  return *targets;
}

// The CPU kernel on host copies of the inputs; results copied to the device.
Kernel OnHost(Kernel cpu, CudaDevice* dev) {
  return [cpu = std::move(cpu), dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    Allocator host;
    absl::flat_hash_map<NodeId, Tensor> staged;
    for (NodeId in : c.node().inputs()) {
      const Tensor* t = c.TensorOf(in);
      if (t == nullptr || !t->defined() || staged.contains(in)) continue;
      if (t->device() == Device::kCpu) {
        staged[in] = *t;
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor h, Tensor::Uninitialized(host, t->dtype(), t->shape()));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(*t, h));
      staged[in] = std::move(h);
    }
    KernelCall on_host(c.node(), host, [&](NodeId id) -> const Tensor* {
      auto it = staged.find(id);
      return it != staged.end() ? &it->second : nullptr;
    });
    OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> results, cpu(on_host));
    std::vector<Tensor> out;
    out.reserve(results.size());
    for (const Tensor& r : results) {
      if (!r.defined()) {
        out.emplace_back();
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(Tensor d, c.NewUninitializedOutput(r.dtype(), r.shape()));
      OVERLAP_RETURN_IF_ERROR(dev->Copy(r, d));
      out.push_back(std::move(d));
    }
    return out;
  };
}

// How cuBLAS reads a logical row-major [rows, cols] matrix in place: not transposed with
// ld = stride 0, or transposed with ld = stride 1; neither: it needs a contiguous copy.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
};

absl::StatusOr<Operand> AsOperand(KernelCall& c, const Tensor& x, CudaDevice& dev) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (x.strides()[1] == 1 && x.strides()[0] >= std::max<int64_t>(1, cols)) {
    return Operand{x, false, x.strides()[0]};
  }
  if (x.strides()[0] == 1 && x.strides()[1] >= std::max<int64_t>(1, rows)) {
    return Operand{x, true, x.strides()[1]};
  }
  OVERLAP_ASSIGN_OR_RETURN(Tensor packed, c.NewScratch(x.dtype(), x.shape()));
  OVERLAP_RETURN_IF_ERROR(dev.Copy(x, packed));
  return Operand{packed, false, std::max<int64_t>(1, cols)};
}

// out (m x n, contiguous) = alpha a @ b + beta out, through cuBLAS's column-major view:
// out^T = b^T a^T.
absl::Status MatMul(KernelCall& c, CudaDevice& dev, const Tensor& a, const Tensor& b, double alpha,
                    double beta, Tensor& out) {
  OVERLAP_ASSIGN_OR_RETURN(Operand oa, AsOperand(c, a, dev));
  OVERLAP_ASSIGN_OR_RETURN(Operand ob, AsOperand(c, b, dev));
  GemmArgs g;
  g.m = b.shape()[1];
  g.n = a.shape()[0];
  g.k = a.shape()[1];
  g.trans_a = ob.trans;
  g.a = ViewOf(ob.t).data;
  g.lda = ob.ld;
  g.trans_b = oa.trans;
  g.b = ViewOf(oa.t).data;
  g.ldb = oa.ld;
  g.c = ViewOf(out).data;
  g.ldc = std::max<int64_t>(1, g.m);
  g.alpha = alpha;
  g.beta = beta;
  g.dtype = out.dtype();
  if (g.m == 0 || g.n == 0) return absl::OkStatus();
  return dev.api().Gemm(g, dev.compute());
}

absl::Status CheckMatrices(KernelCall& c, const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.shape()[1] != b.shape()[0]) {
    return c.Error(absl::StrCat("matrix product of ", a.DebugString(), " and ", b.DebugString()));
  }
  if (a.dtype() != b.dtype() || (a.dtype() != DType::kFloat32 && a.dtype() != DType::kFloat64)) {
    return c.Error("cuBLAS products take two float32 or two float64 matrices");
  }
  return absl::OkStatus();
}

}  // namespace

std::string CudaKernelKind(absl::string_view target) {
  for (absl::string_view t : kCublasOps) {
    if (t == target) return "cublas";
  }
  if (ViewTargets().contains(target)) return "view";
  return CpuKernels().Find(target) != nullptr ? "host" : "";
}

KernelRegistry CudaKernels(CudaDevice& device) {
  KernelRegistry r;
  CudaDevice* dev = &device;
  const KernelRegistry& cpu = CpuKernels();
  for (const std::string& target : cpu.Targets()) {
    if (ViewTargets().contains(target)) {
      r.Register(target, *cpu.Find(target));
    } else {
      r.Register(target, OnHost(*cpu.Find(target), dev));
    }
  }
  r.Register("aten.mm.default", [dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg(0, "self"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(1, "mat2"));
    OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a, b));
    OVERLAP_ASSIGN_OR_RETURN(Tensor out,
                             c.NewUninitializedOutput(a.dtype(), {a.shape()[0], b.shape()[1]}));
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, 1, 0, out));
    return std::vector<Tensor>{out};
  });
  r.Register("aten.addmm.default", [dev](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
    OVERLAP_ASSIGN_OR_RETURN(Tensor bias, c.TensorArg(0, "self"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor a, c.TensorArg(1, "mat1"));
    OVERLAP_ASSIGN_OR_RETURN(Tensor b, c.TensorArg(2, "mat2"));
    OVERLAP_ASSIGN_OR_RETURN(double beta, c.DoubleArg(3, "beta", 1.0));
    OVERLAP_ASSIGN_OR_RETURN(double alpha, c.DoubleArg(4, "alpha", 1.0));
    OVERLAP_RETURN_IF_ERROR(CheckMatrices(c, a, b));
    const int64_t m = a.shape()[0], n = b.shape()[1];
    OVERLAP_ASSIGN_OR_RETURN(Tensor out, c.NewUninitializedOutput(a.dtype(), {m, n}));
    // The bias broadcast over the rows (a [n] or [1, n] or [m, n] tensor), then the product
    // accumulated onto it.
    std::vector<int64_t> strides;
    if (bias.dim() == 1 && bias.shape()[0] == n) {
      strides = {0, bias.strides()[0]};
    } else if (bias.dim() == 2 && bias.shape()[1] == n &&
               (bias.shape()[0] == m || bias.shape()[0] == 1)) {
      strides = {bias.shape()[0] == 1 ? 0 : bias.strides()[0], bias.strides()[1]};
    } else {
      return c.Error(
          absl::StrCat("addmm: a bias of ", bias.DebugString(), " for [", m, ", ", n, "]"));
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor spread, bias.AsStrided({m, n}, strides, bias.offset()));
    OVERLAP_RETURN_IF_ERROR(dev->Copy(spread, out));
    OVERLAP_RETURN_IF_ERROR(MatMul(c, *dev, a, b, alpha, beta, out));
    return std::vector<Tensor>{out};
  });
  return r;
}

}  // namespace overlap
