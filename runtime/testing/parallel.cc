#include "runtime/testing/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/models.h"
#include "graph/status_macros.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/train/synthetic.h"

namespace overlap {

absl::StatusOr<AotPair> TinyPair(absl::string_view model, int64_t batch) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  o.batch = batch;
  OVERLAP_ASSIGN_OR_RETURN(Graph g, BuildModel(model, o, Preset::kTiny));
  return BuildAotPair(g);
}

absl::StatusOr<TensorMap> SeededParams(const AotPair& pair, Allocator& alloc, uint64_t seed) {
  SeededInputsOptions only;
  only.data = false;
  OVERLAP_ASSIGN_OR_RETURN(TensorMap seeded, SeededInputs(pair.forward, seed, alloc, only));
  TensorMap params;
  for (NodeId id : pair.forward.order()) {
    const Node& n = pair.forward.node(id);
    if (n.op() == Op::kPlaceholder && IsParameterPlaceholder(pair.forward, id)) {
      params[ParamNameOf(n)] = seeded.at(n.name());
    }
  }
  return params;
}

absl::StatusOr<TensorMap> TrainOneProcess(const AotPair& global, TensorMap params, int steps,
                                          const OptimizerOptions& optimizer, uint64_t task_seed) {
  // Tensors share storage when copied: train on deep copies, the caller's stay as they are.
  static Allocator* const copies = new Allocator();
  for (auto& [name, t] : params) {
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Tensor::Empty(*copies, t.dtype(), t.shape()));
    OVERLAP_RETURN_IF_ERROR(CopyConvert(t, copy));
    t = std::move(copy);
  }
  SyntheticTask task(global.forward, task_seed);
  TrainOptimizer opt(optimizer);
  for (int k = 0; k < steps; ++k) {
    OVERLAP_ASSIGN_OR_RETURN(TensorMap batch, task.Batch(k));
    OVERLAP_ASSIGN_OR_RETURN(AotStepResult s, RunAotStep(global, params, batch));
    OVERLAP_RETURN_IF_ERROR(opt.Step(params, s.grads));
  }
  return params;
}

std::string CompareParams(const TensorMap& got, const TensorMap& want, double tolerance) {
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return absl::StrCat("no parameter '", name, "'");
    if (it->second.numel() != w.numel()) return absl::StrCat(name, ": element counts differ");
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      worst = std::max(worst, std::fabs(GetElement(it->second, i) - GetElement(w, i)));
      scale = std::max(scale, std::fabs(GetElement(w, i)));
    }
    if (!(worst <= tolerance * scale)) {
      return absl::StrCat(name, " differs by ", worst, " (max |b| ", scale, ", tolerance ",
                          tolerance, ")");
    }
  }
  return "";
}

std::string CompareBits(const TensorMap& got, const TensorMap& want) {
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return absl::StrCat("no parameter '", name, "'");
    const Tensor& g = it->second;
    if (g.numel() != w.numel() || g.dtype() != w.dtype())
      return absl::StrCat(name, ": types differ");
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double a = GetElement(g, i), b = GetElement(w, i);
      if (std::memcmp(&a, &b, sizeof a) != 0) {
        return absl::StrCat(name, " element ", i, ": ", a, " vs ", b);
      }
    }
  }
  return "";
}

absl::StatusOr<ParallelCase> MakeParallelCase(absl::string_view model, int64_t rows, int world,
                                              int steps, const OptimizerOptions& optimizer) {
  ParallelCase c;
  OVERLAP_ASSIGN_OR_RETURN(c.global, TinyPair(model, rows * world));
  OVERLAP_ASSIGN_OR_RETURN(c.local, TinyPair(model, rows));
  OVERLAP_ASSIGN_OR_RETURN(c.init, SeededParams(c.local, *c.alloc));
  OVERLAP_ASSIGN_OR_RETURN(c.want, TrainOneProcess(c.global, c.init, steps, optimizer, 3));
  return c;
}

absl::StatusOr<std::unique_ptr<Communicator>> TestCommunicator(int rank, int world,
                                                               const std::string& dir,
                                                               bool deterministic, bool race) {
  GlooOptions go;
  go.rank = rank;
  go.world_size = world;
  go.store_path = dir;
  go.timeout = absl::Seconds(60);
  go.deterministic = deterministic;
  go.random_delays = race;
  return CreateGlooCommunicator(go);
}

int Fail(int rank, const std::string& what, int code) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return code;
}

}  // namespace overlap
