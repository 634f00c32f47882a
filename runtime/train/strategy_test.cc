// Both strategies behind the one interface (forked ranks on 127.0.0.1, Gloo): a trainer made
// by CreateTrainer, driven only through DistributedTrainer, ends K steps with the gathered
// parameters one process reaches on the whole batch, and reports its buckets, its simulated
// peak and its state (DDP: whole parameters; ZeRO-3: the rank's shards).
#include "runtime/train/strategy.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/testing/parallel.h"
#include "runtime/testing/ranks.h"
#include "runtime/train/data.h"
#include "runtime/train/synthetic.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

constexpr int kSteps = 3;

// What `strategy` trains: the pair as it is (DDP) or with ZeRO-3 ops inserted and scheduled.
absl::StatusOr<AotPair> Prepared(AotPair pair, Strategy strategy, int world) {
  if (strategy == Strategy::kDdp) return pair;
  SchedulerOptions so;
  so.collectives.world_size = world;
  so.record_trace = false;
  for (auto [g, kind] : {std::pair{&pair.forward, GraphKind::kForward},
                         std::pair{&pair.backward, GraphKind::kBackward}}) {
    absl::StatusOr<bool> inserted = Zero3Insertion(kind).Run(g);
    if (!inserted.ok()) return inserted.status();
    absl::StatusOr<ScheduleReport> r = RunScheduler("lookahead", g, so);
    if (!r.ok()) return r.status();
  }
  return pair;
}

int StrategyRank(Strategy strategy, int rank, int world, const std::string& dir) {
  OptimizerOptions opt;
  opt.kind = OptimizerKind::kSgd;
  opt.lr = 0.05;
  absl::StatusOr<ParallelCase> c = MakeParallelCase("mlp", 4, world, kSteps, opt);
  if (!c.ok()) return Fail(rank, std::string(c.status().message()), 2);
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      TestCommunicator(rank, world, dir, /*deterministic=*/false, /*race=*/false);
  if (!comm.ok()) return Fail(rank, std::string(comm.status().message()), 3);
  absl::StatusOr<AotPair> pair = Prepared(c->local, strategy, world);
  if (!pair.ok()) return Fail(rank, std::string(pair.status().message()), 4);
  TrainerOptions o;
  o.optimizer = opt;
  int64_t param_bytes = 0;
  for (const auto& [name, p] : c->init) param_bytes += p.nbytes();
  absl::StatusOr<std::unique_ptr<DistributedTrainer>> t =
      CreateTrainer(strategy, *pair, c->init, comm->get(), o, param_bytes / 4);
  if (!t.ok()) return Fail(rank, std::string(t.status().message()), 5);
  DistributedTrainer& trainer = **t;
  if (trainer.bucket_count() < 1) return Fail(rank, "no buckets", 6);
  if (trainer.simulated_peak_bytes() <= 0) return Fail(rank, "no simulated peak", 7);
  SyntheticTask task(c->global.forward, 3);
  for (int k = 0; k < kSteps; ++k) {
    absl::StatusOr<TensorMap> batch = task.Batch(k);
    if (!batch.ok()) return Fail(rank, std::string(batch.status().message()), 8);
    absl::StatusOr<TensorMap> mine = ShardRows(*batch, rank, world);
    if (!mine.ok()) return Fail(rank, std::string(mine.status().message()), 8);
    absl::StatusOr<StepResult> s = trainer.Step(*mine);
    if (!s.ok()) return Fail(rank, std::string(s.status().message()), 9);
  }
  const TrainerStateBytes state = trainer.state_bytes();
  const bool whole = strategy == Strategy::kDdp;
  if (whole ? state.params != param_bytes : state.params >= param_bytes) {
    return Fail(rank, absl::StrCat("state: ", state.params, " bytes of ", param_bytes), 10);
  }
  if (state.optimizer <= 0 || state.buffers <= 0)
    return Fail(rank, "no optimizer state or buffers", 11);
  absl::StatusOr<TensorMap> got = trainer.GatherParams();
  if (!got.ok()) return Fail(rank, std::string(got.status().message()), 12);
  const std::string diff = CompareParams(*got, c->want, 1e-5);
  if (!diff.empty()) return Fail(rank, diff, 13);
  return 0;
}

TEST(StrategyTest, NamesRoundTripAndOthersAreRefused) {
  for (Strategy s : {Strategy::kDdp, Strategy::kZero3}) {
    absl::StatusOr<Strategy> parsed = ParseStrategy(StrategyName(s));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
  absl::StatusOr<Strategy> bad = ParseStrategy("fsdp");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown strategy 'fsdp' (ddp or zero3)");
}

TEST(StrategyTest, EitherTrainerThroughTheInterfaceMatchesOneProcess) {
  constexpr int kWorld = 2;
  for (Strategy strategy : {Strategy::kDdp, Strategy::kZero3}) {
    const std::string name(StrategyName(strategy));
    const std::string dir = FreshStoreDir(absl::StrCat("strategy_", name));
    const std::vector<int> codes =
        RunRanks(kWorld, [&](int rank) { return StrategyRank(strategy, rank, kWorld, dir); });
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(codes[r], 0) << name << ", rank " << r;
  }
}

}  // namespace
}  // namespace overlap
