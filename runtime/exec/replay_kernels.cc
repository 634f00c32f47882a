#include "runtime/exec/replay_kernels.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/shape_rules.h"
#include "graph/status_macros.h"
#include "runtime/core/tensor.h"
#include "runtime/exec/replay.h"
#include "schedule/zero3_ops.h"

namespace overlap {

double ReplayKernelSeconds(const Node& node, double time_scale) {
  if (SharesInputStorage(node) || TimeOf(node) <= 0) return 0;
  return std::max(ReplayWaitSeconds(node, time_scale), kMinReplayKernelWaitSeconds);
}

std::unique_ptr<KernelRegistry> ReplayKernels(double time_scale) {
  auto r = std::make_unique<KernelRegistry>();
  for (const std::string& target : CpuKernels().Targets()) {
    const Kernel* real = CpuKernels().Find(target);
    r->Register(target, [real, time_scale](KernelCall& c) -> absl::StatusOr<std::vector<Tensor>> {
      if (SharesInputStorage(c.node())) return (*real)(c);
      const double t = ReplayWaitSeconds(c.node(), time_scale);
      if (!(t <= kMaxReplayWaitSeconds)) {
        return c.Error(absl::StrCat("timed replay would wait ", t, " s, more than the bound of ",
                                    kMaxReplayWaitSeconds, " s a node"));
      }
      const double wait = ReplayKernelSeconds(c.node(), time_scale);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      std::vector<Tensor> out;
      for (const TensorType& type : StatedTypes(c.node())) {
        OVERLAP_ASSIGN_OR_RETURN(const DType d,
                                 ParseDType(type.dtype.empty() ? "float32" : type.dtype));
        const std::vector<int64_t> shape(type.shape.begin(), type.shape.end());
        OVERLAP_ASSIGN_OR_RETURN(Tensor x, c.NewUninitializedOutput(d, shape));
        out.push_back(std::move(x));
      }
      if (out.empty()) return c.Error("timed replay needs meta.shape and meta.dtype");
      return out;
    });
  }
  return r;
}

Graph ReplayTimes(Graph g, double time_scale) {
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kCallFunction || IsZero3Op(n)) continue;
    const double seconds = ReplayKernelSeconds(n, time_scale);
    if (seconds > 0) g.mutable_node(id).mutable_meta().set_device_time(seconds);
  }
  return g;
}

}  // namespace overlap
