// Faults in a multi-process job (forked ranks on 127.0.0.1, the store served by the test as
// a launcher would): a rank killed by the injection hook or from outside makes every other
// rank fail within the collective timeout naming the lost rank; a silent (hung) rank gives
// a timeout naming the collective; a rank with a different program fails the start-up
// check; the launcher ends the survivors of a failed rank. And a healthy job trains.
#include "runtime/job/job.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/core/safetensors.h"
#include "runtime/job/launcher.h"
#include "runtime/testing/ranks.h"
#include "runtime/train/synthetic.h"
#include "runtime/train/train.h"
#include "schedule/scheduler_registry.h"

namespace overlap {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Outcome {
  std::vector<int> codes;
  std::vector<std::string> messages;  // each rank's final status ("ok" or the error)
  std::vector<std::string> stderr_text;
  double seconds = 0;
};

// Runs `world` ranks of `options` (rank r may be changed by `tweak`), the store served
// here. `started` sees the pids.
Outcome RunJob(int world, JobOptions options,
               const std::function<void(int, JobOptions&)>& tweak = nullptr,
               const std::function<void(const std::vector<int>&)>& started = nullptr) {
  const std::string dir = FreshStoreDir("job");
  // The store in a process of its own, as a launcher serves it: the test process itself
  // starts no thread before forking the ranks (ThreadSanitizer refuses that).
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t store_pid = fork();
  if (store_pid == 0) {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Serve("127.0.0.1", 0);
    const int served = server.ok() ? (*server)->port() : -1;
    if (write(fds[1], &served, sizeof(served)) != sizeof(served)) _exit(1);
    while (true) pause();
  }
  int port = -1;
  EXPECT_EQ(read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  close(fds[0]);
  close(fds[1]);
  EXPECT_GT(port, 0) << "the store did not start";
  const auto start = std::chrono::steady_clock::now();
  Outcome out;
  out.codes = RunRanks(
      world,
      [&](int rank) {
        // The watchdog reports on stderr when it ends a stuck process (exit code 3).
        if (std::freopen(absl::StrCat(dir, "/rank", rank, ".err").c_str(), "w", stderr) ==
            nullptr) {
          return 97;
        }
        JobOptions o = options;
        if (tweak) tweak(rank, o);
        RendezvousInfo info;
        info.rank = rank;
        info.world_size = world;
        info.master_port = port;
        info.agent_store = true;
        absl::StatusOr<JobSummary> s = RunJobRank(o, info, nullptr);
        std::ofstream f(absl::StrCat(dir, "/rank", rank));
        if (!s.ok()) {
          f << s.status().message();
          return 1;
        }
        int64_t peak = 0;
        for (const StepReport& r : s->steps) peak = std::max(peak, r.peak_bytes);
        f << "ok " << s->steps.front().loss << " " << s->steps.back().loss << " " << peak << " "
          << s->simulated_peak_bytes << (s->profiled ? " profiled" : "");
        for (const AlgorithmTiming& t : s->comparison) {
          f << "\n"
            << t.algorithm << " " << t.predicted_step_s << " " << t.measured_step_s << " "
            << t.peak_bytes << " " << t.simulated_peak_bytes;
        }
        return s.ok() ? 0 : 1;
      },
      std::chrono::seconds(120), started);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(store_pid, SIGKILL);
  waitpid(store_pid, nullptr, 0);
  for (int r = 0; r < world; ++r) {
    out.messages.push_back(ReadFile(absl::StrCat(dir, "/rank", r)));
    out.stderr_text.push_back(ReadFile(absl::StrCat(dir, "/rank", r, ".err")));
  }
  return out;
}

// A survivor of a lost rank: it failed with an error naming `lost`, either returned by the
// job (exit 1) or, when it was stuck in a collective Gloo cannot interrupt, reported by its
// watchdog as it ended the process (exit 3).
void ExpectNamesLostRank(const Outcome& out, int r, int lost) {
  const std::string want = absl::StrCat("rank ", lost, " is lost");
  EXPECT_TRUE(out.codes[r] == 1 || out.codes[r] == 3) << "rank " << r << ": " << out.codes[r];
  EXPECT_TRUE(absl::StrContains(out.messages[r], want) ||
              absl::StrContains(out.stderr_text[r], want))
      << "rank " << r << ": " << out.messages[r] << "\n"
      << out.stderr_text[r];
}

JobOptions Mlp(Strategy strategy, int64_t steps) {
  JobOptions o;
  o.strategy = strategy;
  o.model = "mlp";
  o.steps = steps;
  o.timeout = absl::Seconds(10);
  return o;
}

TEST(JobTest, HealthyJobsTrainWithAFallingLoss) {
  for (Strategy s : {Strategy::kDdp, Strategy::kZero3}) {
    const Outcome out = RunJob(3, Mlp(s, 10));
    for (int r = 0; r < 3; ++r) {
      double first = 0, last = 0;
      char ok[3] = {0};
      ASSERT_EQ(std::sscanf(out.messages[r].c_str(), "%2s %lf %lf", ok, &first, &last), 3)
          << out.messages[r];
      EXPECT_LT(last, first) << "rank " << r;
      auto first_line = [](const std::string& m) { return m.substr(0, m.find('\n')); };
      EXPECT_EQ(first_line(out.messages[r]), first_line(out.messages[0]))
          << "every rank reports the mean loss";
    }
  }
}

// A weights file with no tensors stops every rank before its first step, naming the missing
// parameters (it was taken for no file: the ranks trained from the seeded parameters).
TEST(JobTest, AnEmptyWeightsFileIsRefusedNamingTheMissingParameters) {
  const std::string weights = FreshStoreDir("jobweights") + "/empty.safetensors";
  std::ofstream(weights, std::ios::binary) << WriteSafetensors(TensorMap{});
  JobOptions o = Mlp(Strategy::kDdp, 1);
  o.weights_path = weights;
  const Outcome out = RunJob(2, o);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(out.codes[r], 0) << r;
    EXPECT_TRUE(
        absl::StrContains(out.messages[r], "the weights lack 6 of the graph's 6 parameters"))
        << out.messages[r];
  }
}

// A data file of two global batches and a weights file: 2-rank DDP and 2-rank ZeRO-3
// (every scheduler) train 3 steps (batch 1, 2, then 1 again) to the parameters one process
// reaches on the whole batches (Trainer, the global model), rank 0 saving them; a file whose
// batch is one rank's rows is refused up front naming the placeholder.
TEST(JobTest, ADataFileTrainsRanksToWhatOneProcessReaches) {
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> local = BuildModel("mlp", mo, Preset::kTiny);
  ASSERT_TRUE(local.ok()) << local.status();
  int64_t rows = 0;
  for (NodeId id : local->order()) {
    const Node& n = local->node(id);
    if (n.op() == Op::kPlaceholder && n.name() == "x") rows = n.meta().shape[0];
  }
  ASSERT_GT(rows, 0);
  mo.batch = 2 * rows;
  absl::StatusOr<Graph> global = BuildModel("mlp", mo, Preset::kTiny);
  ASSERT_TRUE(global.ok()) << global.status();
  absl::StatusOr<AotPair> pair = BuildAotPair(*global);
  ASSERT_TRUE(pair.ok()) << pair.status();
  Allocator alloc;
  SeededInputsOptions only_data;
  only_data.parameters = false;
  TrainOptions t;
  t.optimizer.kind = OptimizerKind::kSgd;
  t.optimizer.lr = 0.1;
  t.optimizer.momentum = 0.9;
  TensorMap file;
  for (int k = 0; k < 2; ++k) {
    absl::StatusOr<TensorMap> b = SeededInputs(pair->forward, 40 + k, alloc, only_data);
    ASSERT_TRUE(b.ok()) << b.status();
    for (const auto& [name, v] : *b) file[absl::StrCat("batch/", k, "/", name)] = v;
    t.batches.push_back(*b);
  }
  absl::StatusOr<Trainer> one = Trainer::FromPair(*pair, "mlp", t);
  ASSERT_TRUE(one.ok()) << one.status();
  const std::string dir = FreshStoreDir("jobdata");
  const std::string data = dir + "/data.safetensors", weights = dir + "/w.safetensors";
  std::ofstream(data, std::ios::binary) << WriteSafetensors(file);
  std::ofstream(weights, std::ios::binary) << WriteSafetensors(one->params());
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(one->Step().ok());

  std::vector<std::pair<Strategy, std::string>> runs = {{Strategy::kDdp, ""}};
  for (const SchedulerEntry& e : Schedulers())
    runs.push_back({Strategy::kZero3, std::string(e.name)});
  for (const auto& [strategy, algorithm] : runs) {
    SCOPED_TRACE(absl::StrCat(StrategyName(strategy), " ", algorithm));
    JobOptions o = Mlp(strategy, 3);
    if (!algorithm.empty()) o.algorithm = algorithm;
    o.optimizer = t.optimizer;
    o.data_path = data;
    o.weights_path = weights;
    o.save_path = dir + "/trained.safetensors";
    std::remove(o.save_path.c_str());
    const Outcome out = RunJob(2, o);
    ASSERT_EQ(out.codes, std::vector<int>({0, 0})) << out.messages[0] << out.messages[1];
    absl::StatusOr<TensorMap> saved = ReadSafetensorsFile(o.save_path, alloc);
    ASSERT_TRUE(saved.ok()) << saved.status();
    ASSERT_EQ(saved->size(), one->params().size());
    for (const auto& [name, p] : one->params()) {
      ASSERT_TRUE(saved->count(name)) << name;
      const Tensor& q = saved->at(name);
      ASSERT_EQ(q.numel(), p.numel()) << name;
      double scale = 0, worst = 0;
      for (int64_t i = 0; i < p.numel(); ++i) {
        scale = std::max(scale, std::abs(GetElement(p, i)));
        worst = std::max(worst, std::abs(GetElement(p, i) - GetElement(q, i)));
      }
      EXPECT_LE(worst, 1e-5 * scale) << name;
    }
  }

  // One rank's rows in the file: each of 2 ranks would get half of what its graph takes.
  absl::StatusOr<AotPair> local_pair = BuildAotPair(*local);
  ASSERT_TRUE(local_pair.ok()) << local_pair.status();
  absl::StatusOr<TensorMap> small = SeededInputs(local_pair->forward, 40, alloc, only_data);
  ASSERT_TRUE(small.ok()) << small.status();
  std::ofstream(data, std::ios::binary) << WriteSafetensors(*small);
  JobOptions o = Mlp(Strategy::kDdp, 1);
  o.data_path = data;
  const Outcome bad = RunJob(2, o);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(bad.codes[r], 1);
    EXPECT_TRUE(absl::StrContains(bad.messages[r], "placeholder 'x'") &&
                absl::StrContains(bad.messages[r], "per-rank batch"))
        << bad.messages[r];
  }
}

// Timed replay (compute as waits of device_time x 1000, at least 1 ms; real collectives of
// the real sizes) of a transformer whose parameters are large enough for communication to
// matter, under every scheduler in turn, the collectives' model calibrated first: every
// scheduler trains and reports a prediction and a measured step. Whether the measured steps come in
// the predicted order depends on the machine's load, so it is not asserted here: `overlap run
// --algorithm all` reports it (medians of the steps), recorded in docs/benchmarks.md.
// The executor's peak against the simulator's (zero3.h): a reduced gradient and an offloaded
// value are kept exactly until compute passes the position the simulation reaches before
// their collective's or copy's completion (SimulationResult::reached_s), waiting there for a
// collective that is late, so the measured peak is the simulated one, whatever the network's
// speed.
void ExpectMeasuredPeakIsTheSimulatedOne(int64_t peak, int64_t simulated, const std::string& what) {
  EXPECT_EQ(peak, simulated) << what;
}

// Every scheduler's step plan on 1 and 2 ranks: the measured peak of graph values over the
// whole step (both graphs, residents held across) is the simulated one (as the helper reads
// "is").
TEST(JobTest, EveryStepPlansMeasuredPeakIsTheSimulatedOne) {
  for (int world : {1, 2}) {
    JobOptions o;
    o.strategy = Strategy::kZero3;
    o.model = "gpt2";
    o.steps = 2;
    o.timeout = absl::Seconds(60);
    for (const SchedulerEntry& e : Schedulers()) o.compare_algorithms.emplace_back(e.name);
    const Outcome out = RunJob(world, o);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(absl::StartsWith(out.messages[r], "ok")) << out.messages[r];
      std::istringstream lines(out.messages[r]);
      std::string line;
      std::getline(lines, line);
      int rows = 0;
      while (std::getline(lines, line)) {
        std::string name;
        double predicted, measured;
        int64_t peak = -1, simulated = -2;
        std::istringstream(line) >> name >> predicted >> measured >> peak >> simulated;
        ExpectMeasuredPeakIsTheSimulatedOne(peak, simulated,
                                            absl::StrCat(world, " ranks, rank ", r, ", ", name));
        ++rows;
      }
      EXPECT_EQ(rows, static_cast<int>(Schedulers().size()));
    }
  }
}

// Two ranks train `model` (tiny) with ZeRO-3 under a step budget below every order's peak
// with all saved tensors kept, and without one: the same losses and parameters (within 1e-5;
// the same operations in the same order, so in fact equal), each run's measured peak the
// simulated one, the tight run's within the budget and below the free run's.
void TrainsUnderABudgetLikeTheUnconstrainedRun(const std::string& model, int64_t budget) {
  const std::string dir = FreshStoreDir(absl::StrCat("levers_", model));
  auto run = [&](std::optional<int64_t> limit, const std::string& save) {
    JobOptions o;
    o.strategy = Strategy::kZero3;
    o.model = model;
    o.steps = 4;
    o.deterministic = true;
    o.timeout = absl::Seconds(60);
    o.budget.budget_bytes = limit;
    o.save_path = save;
    return RunJob(2, o);
  };
  const Outcome free = run(std::nullopt, dir + "/free.safetensors");
  const Outcome tight = run(budget, dir + "/tight.safetensors");
  ASSERT_TRUE(absl::StartsWith(free.messages[0], "ok")) << free.messages[0];
  ASSERT_TRUE(absl::StartsWith(tight.messages[0], "ok")) << tight.messages[0];
  std::string ok;
  double first_a, last_a, first_b, last_b;
  int64_t peak_a, sim_a, peak_b, sim_b;
  std::istringstream(free.messages[0]) >> ok >> first_a >> last_a >> peak_a >> sim_a;
  std::istringstream(tight.messages[0]) >> ok >> first_b >> last_b >> peak_b >> sim_b;
  EXPECT_NEAR(first_a, first_b, 1e-5);
  EXPECT_NEAR(last_a, last_b, 1e-5);
  ExpectMeasuredPeakIsTheSimulatedOne(peak_a, sim_a, "unconstrained");
  ExpectMeasuredPeakIsTheSimulatedOne(peak_b, sim_b, "under the budget");
  EXPECT_LE(peak_b, budget);
  EXPECT_LT(peak_b, peak_a);
  Allocator alloc;
  absl::StatusOr<TensorMap> a = ReadSafetensorsFile(dir + "/free.safetensors", alloc);
  absl::StatusOr<TensorMap> b = ReadSafetensorsFile(dir + "/tight.safetensors", alloc);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (const auto& [name, t] : *a) {
    ASSERT_EQ(b->count(name), 1u) << name;
    const Tensor& u = b->at(name);
    ASSERT_EQ(t.numel(), u.numel()) << name;
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_NEAR(GetElement(t, i), GetElement(u, i), 1e-5) << name << "[" << i << "]";
    }
  }
}

// gpt2: ours recomputes saved tensors in the backward (cheap elementwise chains).
TEST(JobTest, ATightBudgetRecomputesAndTrainsLikeTheUnconstrainedRun) {
  TrainsUnderABudgetLikeTheUnconstrainedRun("gpt2", int64_t{160} << 10);
}

// gpt2 below what recomputation reaches (146 KiB here): ours also keeps saved tensors in host
// memory (matrix products' outputs, which recomputation cannot remake), offloaded in the
// forward and reloaded in the backward.
TEST(JobTest, ATighterBudgetOffloadsAndTrainsLikeTheUnconstrainedRun) {
  TrainsUnderABudgetLikeTheUnconstrainedRun("gpt2", int64_t{100} << 10);
}

TEST(JobTest, EverySchedulerTrainsAndReportsMeasuredAgainstPredicted) {
  TransformerConfig c = Gpt2Config(Preset::kTiny);
  c.hidden = 256;
  c.heads = 8;
  c.kv_heads = 8;
  c.ffn = 1024;
  c.vocab = 4096;
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildTransformer(c, mo);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AotPair> pair = BuildAotPair(*g);
  ASSERT_TRUE(pair.ok()) << pair.status();
  const std::string dir = FreshStoreDir("replay");
  ASSERT_TRUE(WriteGraphJsonFile(pair->forward, dir + "/fwd.json").ok());
  ASSERT_TRUE(WriteGraphJsonFile(pair->backward, dir + "/bwd.json").ok());
  JobOptions o;
  o.strategy = Strategy::kZero3;
  o.graph_path = dir + "/fwd.json";
  o.backward_graph_path = dir + "/bwd.json";
  o.steps = 6;
  o.time_scale = 1000;
  o.calibrate = true;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.timeout = absl::Seconds(60);
  for (const SchedulerEntry& e : Schedulers()) o.compare_algorithms.emplace_back(e.name);
  const Outcome out = RunJob(2, o);
  ASSERT_TRUE(absl::StartsWith(out.messages[0], "ok")) << out.messages[0];
  struct Row {
    std::string name;
    double predicted, measured;
  };
  std::vector<Row> rows;
  std::istringstream lines(out.messages[0]);
  std::string line;
  std::getline(lines, line);  // ok first last
  while (std::getline(lines, line)) {
    Row r;
    std::istringstream fields(line);
    fields >> r.name >> r.predicted >> r.measured;
    rows.push_back(r);
    std::fprintf(stderr, "%-16s predicted %8.1f ms  measured %8.1f ms\n", r.name.c_str(),
                 r.predicted * 1e3, r.measured * 1e3);
  }
  ASSERT_EQ(rows.size(), Schedulers().size());
  // The predictions come from the calibrated collectives, which are this machine's and
  // its load's too: only their presence is asserted.
  for (const Row& a : rows) {
    EXPECT_GT(a.predicted, 0) << a.name;
    EXPECT_GT(a.measured, 0) << a.name;
  }
}

// Calibrated with this machine's kernels, both strategies predict from a profile every rank
// shares (a rank's own figures would give the ranks different schedules: the start-up
// check would refuse them), and report a predicted step and hidden fraction beside the
// measured ones. Time is asserted nowhere (the machine may be busy).
TEST(JobTest, CalibratedRealKernelsPredictFromOneSharedProfile) {
  for (Strategy s : {Strategy::kDdp, Strategy::kZero3}) {
    JobOptions o = Mlp(s, 4);
    o.calibrate = true;
    o.timeout = absl::Seconds(60);
    const Outcome out = RunJob(2, o);
    double predicted[2] = {0, 0};
    for (int r = 0; r < 2; ++r) {
      const std::string& m = out.messages[r];
      ASSERT_TRUE(absl::StartsWith(m, "ok")) << "rank " << r << ": " << m;
      const std::string head = m.substr(0, m.find('\n'));
      EXPECT_TRUE(absl::EndsWith(head, " profiled")) << head;
      std::istringstream row(m.substr(m.find('\n') + 1));
      std::string name;
      double measured = 0;
      row >> name >> predicted[r] >> measured;
      EXPECT_EQ(name, s == Strategy::kDdp ? "ddp" : "lookahead");
      EXPECT_GT(predicted[r], 0) << name;
      EXPECT_GT(measured, 0) << name;
    }
    EXPECT_EQ(predicted[0], predicted[1]) << "the ranks predicted from different profiles";
  }
}

TEST(JobTest, AnInjectedKillIsNamedByEverySurvivor) {
  for (Strategy s : {Strategy::kDdp, Strategy::kZero3}) {
    JobOptions o = Mlp(s, 6);
    FaultSpec f;
    f.rank = 1;
    f.step = 3;
    f.node = "mm";  // a backward node of the mlp
    f.action = FaultSpec::Action::kKill;
    o.fault = f;
    const Outcome out = RunJob(3, o);
    EXPECT_EQ(out.codes[1], 128 + SIGKILL);
    for (int r : {0, 2}) ExpectNamesLostRank(out, r, 1);
    EXPECT_LT(out.seconds, 10 + 15) << "the survivors must end within the collective timeout";
  }
}

TEST(JobTest, AnExternalSigkillIsNamedByEverySurvivor) {
  JobOptions o = Mlp(Strategy::kZero3, 100000);  // runs until killed
  const Outcome out = RunJob(3, o, nullptr, [](const std::vector<int>& pids) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    kill(pids[2], SIGKILL);
  });
  EXPECT_EQ(out.codes[2], 128 + SIGKILL);
  for (int r : {0, 1}) ExpectNamesLostRank(out, r, 2);
}

TEST(JobTest, ASilentRankGivesATimeoutNamingTheCollective) {
  JobOptions o = Mlp(Strategy::kDdp, 6);
  o.timeout = absl::Seconds(3);
  FaultSpec f;
  f.rank = 2;
  f.step = 2;
  f.node = "mm";
  f.action = FaultSpec::Action::kHang;
  o.fault = f;
  const Outcome out = RunJob(3, o);
  for (int r : {0, 1}) {
    // Gloo's timeout, or the abort another survivor published: either names a collective.
    EXPECT_TRUE(out.codes[r] == 1 || out.codes[r] == 3) << "rank " << r;
    EXPECT_TRUE(absl::StrContains(out.messages[r] + out.stderr_text[r], "allreduce #"))
        << out.messages[r] << out.stderr_text[r];
  }
  // The hung rank's watchdog sees the abort and ends its process.
  EXPECT_EQ(out.codes[2], 3);
  EXPECT_LT(out.seconds, 60);
}

TEST(JobTest, ADifferentProgramFailsTheStartUpCheck) {
  const Outcome out = RunJob(3, Mlp(Strategy::kZero3, 2), [](int rank, JobOptions& o) {
    if (rank == 2) o.optimizer.lr = 0.5;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out.codes[r], 1) << "rank " << r;
    EXPECT_TRUE(absl::StrContains(out.messages[r], "rank 2 runs a different program"))
        << out.messages[r];
  }
}

TEST(LauncherTest, EndsTheSurvivorsOfAFailedRank) {
  LaunchOptions o;
  o.nproc = 3;
  o.argv = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 1000"};
  o.grace = absl::Seconds(1);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<LaunchResult> r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20);
  EXPECT_EQ(r->first_failed_rank, 1);
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_TRUE(r->killed_by_launcher[0] && r->killed_by_launcher[2]);
  EXPECT_EQ(r->codes[0], 128 + SIGKILL);
  EXPECT_TRUE(absl::StrContains(r->message, "rank 1 exited with code 7")) << r->message;
}

// A rank stopped (SIGSTOP) after the others exited 0 does not keep the launcher waiting:
// it is killed finish_grace later and named with the signal that stopped it.
TEST(LauncherTest, ARankStoppedAfterTheOthersFinishedIsKilledAndNamed) {
  LaunchOptions o;
  o.nproc = 3;
  o.argv = {"/bin/sh", "-c", "if [ \"$RANK\" = 2 ]; then sleep 0.3; kill -STOP $$; fi; exit 0"};
  o.finish_grace = absl::Seconds(2);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<LaunchResult> r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
  EXPECT_EQ(r->exit_code, 124);
  EXPECT_EQ(r->codes[0], 0);
  EXPECT_TRUE(r->killed_by_launcher[2]);
  EXPECT_TRUE(absl::StrContains(r->message, "rank 2 (stopped by signal 19")) << r->message;
  EXPECT_TRUE(absl::StrContains(r->message, "did not exit within 2s")) << r->message;
}

// Gloo's full mesh needs local ports by the square of the ranks: a job past this machine's
// ephemeral range is refused before it starts, naming the count that fits.
TEST(LauncherTest, AMeshPastTheLocalPortRangeIsRefusedBeforeAnyRankStarts) {
  EXPECT_TRUE(CheckLocalPorts(2).ok());
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r"); f != nullptr) {
    std::fclose(f);
    absl::Status s = CheckLocalPorts(1000);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(s.message(), "ip_local_port_range")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "run at most")) << s;
  }
}

// Many ranks failing alike make one bounded line: the first events, then how many more.
TEST(LauncherTest, ManyFailuresAreSummarizedInOneBoundedLine) {
  LaunchOptions o;
  o.nproc = 20;
  o.argv = {"/bin/sh", "-c", "exit 3"};
  absl::StatusOr<LaunchResult> r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_TRUE(absl::StrContains(r->message, "and 8 more")) << r->message;
  EXPECT_LT(r->message.size(), 600u) << r->message;
}

TEST(LauncherTest, PassesTheTorchrunVariables) {
  const std::string dir = FreshStoreDir("env");
  LaunchOptions o;
  o.nproc = 2;
  o.argv = {"/bin/sh", "-c",
            absl::StrCat("echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                         "$TORCHELASTIC_USE_AGENT_STORE > ",
                         dir, "/$RANK")};
  absl::StatusOr<LaunchResult> r = Launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(ReadFile(dir + "/0"), "0 2 0 2 127.0.0.1 True\n");
  EXPECT_EQ(ReadFile(dir + "/1"), "1 2 1 2 127.0.0.1 True\n");
}

// A launcher that dies (SIGKILL: no handler runs) or is sent SIGTERM, SIGINT or SIGHUP
// alone takes every rank with it: the parent-death signal, the forwarded signal. The test
// is the orphans' subreaper, so it reaps (and so counts) every rank that ended.
void LaunchInAChildAndSignalIt(int sig) {
  const std::string dir = FreshStoreDir(absl::StrCat("orphans", sig));
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions o;
    o.nproc = 3;
    o.argv = {"/bin/sh", "-c", absl::StrCat("echo $$ > ", dir, "/pid.$RANK; exec sleep 1000")};
    o.grace = absl::Seconds(2);
    absl::StatusOr<LaunchResult> r = Launch(o);
    _exit(r.ok() && r->signal == sig ? 0 : 1);
  }
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    std::string pid;
    for (int i = 0; i < 500 && pid.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      pid = ReadFile(absl::StrCat(dir, "/pid.", rank));
    }
    ASSERT_FALSE(pid.empty()) << "rank " << rank << " did not start";
    ranks.push_back(std::stoi(pid));
  }
  kill(launcher, sig);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  if (sig == SIGKILL) {
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  } else {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the launcher reports the signal it passed on";
  }
  // Every rank ends within a few seconds (reaped here: no process of the job remains).
  const auto start = std::chrono::steady_clock::now();
  int remaining = 3;
  while (remaining > 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    remaining = 0;
    for (pid_t p : ranks) {
      waitpid(p, nullptr, WNOHANG);
      remaining += kill(p, 0) == 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(remaining, 0) << "ranks outlived their launcher (signal " << sig << ")";
  for (pid_t p : ranks) kill(p, SIGKILL);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(LauncherTest, AKilledLauncherTakesItsRanksWithIt) { LaunchInAChildAndSignalIt(SIGKILL); }

TEST(LauncherTest, SignalsToTheLauncherReachEveryRank) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) LaunchInAChildAndSignalIt(sig);
}

TEST(LauncherTest, HandsEachRankTheJobsSecretAndNoInheritedRendezvous) {
  const std::string dir = FreshStoreDir("secret");
  setenv("RANK", "7", 1);  // a launcher's own variables must not shadow the rank's
  setenv("OVERLAP_STORE_SECRET_FILE", "/nonexistent", 1);
  LaunchOptions o;
  o.nproc = 2;
  o.argv = {
      "/bin/sh", "-c",
      absl::StrCat("echo $RANK ${#OVERLAP_STORE_SECRET} ${OVERLAP_STORE_SECRET_FILE:-none} > ", dir,
                   "/$RANK; echo $OVERLAP_STORE_SECRET > ", dir, "/secret.$RANK")};
  absl::StatusOr<LaunchResult> r = Launch(o);
  unsetenv("RANK");
  unsetenv("OVERLAP_STORE_SECRET_FILE");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(ReadFile(dir + "/0"), "0 64 none\n");
  EXPECT_EQ(ReadFile(dir + "/1"), "1 64 none\n");
  EXPECT_EQ(ReadFile(dir + "/secret.0"), ReadFile(dir + "/secret.1"));
  // A fresh secret per job.
  const std::string first = ReadFile(dir + "/secret.0");
  absl::StatusOr<LaunchResult> again = Launch(o);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(ReadFile(dir + "/secret.0"), first);
}

}  // namespace
}  // namespace overlap
