// DDP across processes (forked ranks on 127.0.0.1, Gloo): N ranks, each on its shard of a
// batch, end K steps with the parameters one process reaches on the whole batch, within
// per-tensor max|a - b| <= 1e-5 max|b| (SGD) or 1e-4 (AdamW); with a bucket cap that gives
// at least three buckets, most of them launched while the backward still runs.
#include "runtime/ddp.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/gloo_communicator.h"
#include "runtime/synthetic.h"
#include "runtime/testing/ranks.h"
#include "runtime/train.h"

namespace overlap {
namespace {

// The tiny mlp's AOT pair at `batch` rows.
AotPair MlpPair(int64_t batch) {
  MlpConfig c = MlpPreset(Preset::kTiny);
  c.batch = batch;
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  return *BuildAotPair(*BuildMlp(c, o));
}

// Step k's global batch of `rows` (x standard normal, targets a fixed linear map of x); rows
// [begin, end) of it.
TensorMap Batch(Allocator& alloc, int step, int64_t rows, int64_t begin, int64_t end) {
  const int64_t in = 8, out = 4;
  Rng rng(1000 + step);
  std::vector<double> x(rows * in);
  for (double& v : x) v = rng.Normal();
  Tensor xs = *Tensor::Empty(alloc, DType::kFloat32, {end - begin, in});
  Tensor ts = *Tensor::Empty(alloc, DType::kFloat32, {end - begin, out});
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t i = 0; i < in; ++i) SetElement(xs, (r - begin) * in + i, x[r * in + i]);
    for (int64_t j = 0; j < out; ++j) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * std::sin(1.0 + i * out + j);
      SetElement(ts, (r - begin) * out + j, s);
    }
  }
  return {{"x", xs}, {"targets", ts}};
}

TensorMap SeededParams(const AotPair& pair, Allocator& alloc) {
  SeededInputsOptions only;
  only.data = false;
  TensorMap seeded = *SeededInputs(pair.forward, 5, alloc, only);
  TensorMap params;
  for (NodeId id : pair.forward.order()) {
    const Node& n = pair.forward.node(id);
    if (n.op() == Op::kPlaceholder && IsParameterPlaceholder(pair.forward, id)) {
      params[ParamNameOf(n)] = seeded.at(n.name());
    }
  }
  return params;
}

int DdpRank(int rank, int size, const std::string& dir, OptimizerKind kind, double tolerance) {
  constexpr int kSteps = 5;
  constexpr int64_t kRows = 4;  // per rank
  OptimizerOptions opt;
  opt.kind = kind;
  opt.lr = kind == OptimizerKind::kSgd ? 0.05 : 0.01;
  // The reference: one process on the whole batch.
  Allocator alloc;
  const AotPair whole = MlpPair(kRows * size);
  TensorMap ref = SeededParams(whole, alloc);
  TrainOptimizer ref_opt(opt);
  for (int k = 0; k < kSteps; ++k) {
    absl::StatusOr<AotStepResult> s =
        RunAotStep(whole, ref, Batch(alloc, k, kRows * size, 0, kRows * size));
    if (!s.ok() || !ref_opt.Step(ref, s->grads).ok()) return 3;
  }
  // DDP: this rank's rows.
  GlooOptions go;
  go.rank = rank;
  go.size = size;
  go.store_path = dir;
  go.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(go);
  if (!comm.ok()) return 2;
  const AotPair shard = MlpPair(kRows);
  DdpOptions o;
  o.optimizer = opt;
  o.bucket_cap_bytes = 200;  // several buckets for the tiny mlp
  absl::StatusOr<std::unique_ptr<DdpTrainer>> t =
      DdpTrainer::Create(shard, SeededParams(shard, alloc), comm->get(), o);
  if (!t.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(t.status().message()).c_str());
    return 4;
  }
  if ((*t)->buckets().size() < 3) return 5;
  int64_t during = 0, total = 0;
  for (int k = 0; k < kSteps; ++k) {
    absl::StatusOr<DdpStepResult> s =
        (*t)->Step(Batch(alloc, k, kRows * size, rank * kRows, (rank + 1) * kRows));
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, std::string(s.status().message()).c_str());
      return 6;
    }
    during += s->launched_during_backward;
    total += s->allreduces;
  }
  if (during == 0 || total != kSteps * static_cast<int64_t>((*t)->buckets().size())) return 7;
  for (const auto& [name, want] : ref) {
    const Tensor& got = (*t)->params().at(name);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      worst = std::max(worst, std::fabs(GetElement(got, i) - GetElement(want, i)));
      scale = std::max(scale, std::fabs(GetElement(want, i)));
    }
    if (worst > tolerance * scale) {
      std::fprintf(stderr, "rank %d: %s differs by %g (max %g)\n", rank, name.c_str(), worst,
                   scale);
      return 8;
    }
  }
  return 0;
}

TEST(DdpTest, RanksOnShardsMatchOneProcessOnTheWholeBatch) {
  for (int size : {2, 3, 4}) {
    const std::string dir = FreshStoreDir(absl::StrCat("sgd", size));
    const std::vector<int> codes = RunRanks(
        size, [&](int rank) { return DdpRank(rank, size, dir, OptimizerKind::kSgd, 1e-5); });
    for (int r = 0; r < size; ++r) EXPECT_EQ(codes[r], 0) << "SGD, world " << size << " rank " << r;
  }
  const std::string dir = FreshStoreDir("adamw");
  const std::vector<int> codes =
      RunRanks(2, [&](int rank) { return DdpRank(rank, 2, dir, OptimizerKind::kAdamW, 1e-4); });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(codes[r], 0) << "AdamW, world 2 rank " << r;
}

}  // namespace
}  // namespace overlap
