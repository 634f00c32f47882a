// The TCP store and torchrun's variables: ranks (forked, 127.0.0.1) meet through rank 0's
// store, connect Gloo through it and allreduce; the start-up check names a rank that runs a
// different program; a missing store is an error within the timeout.
#include "runtime/comm/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/testing/loopback.h"
#include "runtime/testing/ranks.h"

namespace overlap {
namespace {

// Rank `rank` of `world` on 127.0.0.1:port, connected (rank 0 serving the store).
absl::StatusOr<std::shared_ptr<TcpStore>> JoinStore(int rank, int world, int port,
                                                    const std::string& secret = "") {
  RendezvousInfo info;
  info.rank = rank;
  info.world_size = world;
  info.master_port = port;
  info.secret = secret;
  return TcpStore::Connect(info, absl::Seconds(20));
}

TEST(TcpStoreTest, RanksMeetThroughTorchrunsVariablesAndAllreduce) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(3, [&](int rank) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
    if (!info.ok() || info->rank != rank || info->local_world_size != 3) return 1;
    absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(*info, absl::Seconds(20));
    if (!store.ok()) return 2;
    if (!CheckSameProgram(**store, rank, 3, "graphs-v1", absl::Seconds(20)).ok()) return 3;
    GlooOptions o;
    o.rank = rank;
    o.world_size = 3;
    o.store = *store;
    absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(o);
    if (!comm.ok()) return 4;
    Allocator alloc;
    Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {3});
    for (int i = 0; i < 3; ++i) t.data<float>()[i] = rank + i;
    if (!(*comm)->AllReduce(t)->Wait(absl::Seconds(20)).ok()) return 5;
    for (int i = 0; i < 3; ++i) {
      if (t.data<float>()[i] != 3 + 3 * i) return 6;
    }
    // Rank 0 serves the store: it leaves last.
    if (!(*comm)->Barrier()->Wait(absl::Seconds(20)).ok()) return 7;
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpStoreTest, TheStartUpCheckNamesTheRankThatDiffers) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(3, [&](int rank) {
    absl::StatusOr<std::shared_ptr<TcpStore>> store = JoinStore(rank, 3, port);
    if (!store.ok()) return 2;
    absl::Status s =
        CheckSameProgram(**store, rank, 3, rank == 2 ? "other" : "same", absl::Seconds(20));
    if (s.ok() || !absl::StrContains(s.message(), "rank 2 runs a different program")) return 3;
    (*store)->Set(absl::StrCat("done/", rank), "1").IgnoreError();
    if (rank == 0) {  // the server leaves last
      for (int r = 1; r < 3; ++r) {
        if (!(*store)->Get(absl::StrCat("done/", r), absl::Seconds(20)).ok()) return 4;
      }
    }
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpStoreTest, MissingVariablesAndAbsentStoresAreErrors) {
  unsetenv("RANK");
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "RANK"));
  RendezvousInfo alone;
  alone.rank = 1;
  alone.world_size = 2;
  alone.master_port = FreeLoopbackPort();
  absl::StatusOr<std::shared_ptr<TcpStore>> store =
      TcpStore::Connect(alone, absl::Milliseconds(300));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(TcpStoreTest, RendezvousVariablesHaveStatedBounds) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "100000", 1);
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(
      absl::StrContains(info.status().message(), "WORLD_SIZE=100000 is out of range: 1 to "))
      << info.status();
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "RANK=2 is out of range: 0 to 1"))
      << info.status();
  setenv("RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "3", 1);
  EXPECT_FALSE(RendezvousFromEnv().ok());
  unsetenv("LOCAL_WORLD_SIZE");
  // The secret: a variable, or the first line of a file; not both.
  const std::string file = testing::TempDir() + "/secret";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fputs("from-file\nignored\n", f);
    std::fclose(f);
  }
  setenv("OVERLAP_STORE_SECRET_FILE", file.c_str(), 1);
  // Readable by others: refused, as ssh refuses such a key, saying how to fix it.
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(info.status().message(), "0644")) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), "chmod 600")) << info.status();
  ASSERT_EQ(chmod(file.c_str(), 0600), 0);
  info = RendezvousFromEnv();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->secret, "from-file");
  setenv("OVERLAP_STORE_SECRET", "from-env", 1);
  EXPECT_FALSE(RendezvousFromEnv().ok());
  unsetenv("OVERLAP_STORE_SECRET_FILE");
  info = RendezvousFromEnv();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->secret, "from-env");
  // A FIFO is refused at once, never waited on.
  const std::string fifo = testing::TempDir() + "/secret.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  unsetenv("OVERLAP_STORE_SECRET");
  setenv("OVERLAP_STORE_SECRET_FILE", fifo.c_str(), 1);
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "not a regular file")) << info.status();
  unsetenv("OVERLAP_STORE_SECRET_FILE");
  setenv("OVERLAP_STORE_SECRET", "from-env", 1);
  unsetenv("OVERLAP_STORE_SECRET");
}

TEST(TcpStoreTest, TheFirstSlurmHostIsTheStoresHost) {
  EXPECT_EQ(*FirstSlurmHost("node[07-09,12],gpu1"), "node07");
  EXPECT_EQ(*FirstSlurmHost("rack[1-2]-n[01-04]"), "rack1-n01");
  EXPECT_EQ(*FirstSlurmHost("a,b"), "a");
  EXPECT_EQ(*FirstSlurmHost("localhost"), "localhost");
  EXPECT_EQ(*FirstSlurmHost("gpu[003]"), "gpu003");
  for (const char* bad : {"", "node[07", "node[]", "node[x-2]", "[", "n]["}) {
    EXPECT_FALSE(FirstSlurmHost(bad).ok()) << bad;
  }
}

// srun's variables stand in for torchrun's when RANK is absent; RANK wins when both are set.
TEST(TcpStoreTest, SlurmsVariablesMapToTheRendezvous) {
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_ADDR");
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODEID", "2", 1);
  setenv("SLURM_TASKS_PER_NODE", "3(x2),2", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[011-014]", 1);
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_world_size, 2);  // node 2's entry
  EXPECT_EQ(info->master_addr, "gpu011");
  EXPECT_EQ(info->launcher, "Slurm");
  EXPECT_EQ(info->protocol, StoreProtocol::kOverlap);
  setenv("MASTER_ADDR", "10.0.0.9", 1);
  EXPECT_EQ(RendezvousFromEnv()->master_addr, "10.0.0.9");
  unsetenv("MASTER_ADDR");
  setenv("SLURM_NODEID", "3", 1);  // no entry for node 3
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "SLURM_TASKS_PER_NODE")) << info.status();
  setenv("SLURM_NODEID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_PROCID", "4", 1);
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "SLURM_PROCID=4 is out of range"))
      << info.status();
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  info = RendezvousFromEnv();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->launcher, "torchrun");
  EXPECT_EQ(info->world_size, 1);
  for (const char* v : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
                        "SLURM_TASKS_PER_NODE", "SLURM_JOB_NODELIST", "RANK", "WORLD_SIZE"}) {
    unsetenv(v);
  }
}

// Under torchrun's agent store the store is PyTorch's (keys under the attempt's prefix);
// overlap's launcher says its agent store is overlap's own; a secret cannot go with c10d.
TEST(TcpStoreTest, TheAgentStoresProtocolFollowsTheVariables) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "4", 1);
  absl::StatusOr<RendezvousInfo> info = RendezvousFromEnv();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->protocol, StoreProtocol::kC10d);
  EXPECT_EQ(info->key_prefix, "/worker/attempt_4/");
  EXPECT_EQ(info->c10d_wire, 0);
  setenv("OVERLAP_C10D_WIRE", "3", 1);
  EXPECT_FALSE(RendezvousFromEnv().ok());
  setenv("OVERLAP_C10D_WIRE", "2", 1);
  EXPECT_EQ(RendezvousFromEnv()->c10d_wire, 2);
  unsetenv("OVERLAP_C10D_WIRE");
  setenv("OVERLAP_STORE_SECRET", "s", 1);
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "c10d TCPStore")) << info.status();
  setenv("OVERLAP_STORE_PROTOCOL", "overlap", 1);
  info = RendezvousFromEnv();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->protocol, StoreProtocol::kOverlap);
  EXPECT_EQ(info->secret, "s");
  setenv("OVERLAP_STORE_PROTOCOL", "gloo", 1);
  EXPECT_FALSE(RendezvousFromEnv().ok());
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  unsetenv("OVERLAP_STORE_SECRET");
  setenv("OVERLAP_STORE_PROTOCOL", "c10d", 1);
  info = RendezvousFromEnv();
  ASSERT_FALSE(info.ok());
  EXPECT_TRUE(absl::StrContains(info.status().message(), "TORCHELASTIC_USE_AGENT_STORE"));
  for (const char* v :
       {"OVERLAP_STORE_PROTOCOL", "TORCHELASTIC_RESTART_COUNT", "RANK", "WORLD_SIZE"}) {
    unsetenv(v);
  }
}

// WORLD_SIZE differing between ranks is named before any communicator connects (it was
// Gloo's "enforce fail ... address.cc"), and a rank that never comes ends the join within
// the timeout, naming it.
TEST(TcpStoreTest, TheJoinCheckNamesADifferentWorldSizeAndAMissingRank) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(2, [&](int rank) {
    const int world = rank == 1 ? 4 : 2;
    absl::StatusOr<std::shared_ptr<TcpStore>> store = JoinStore(rank, world, port, "job");
    if (!store.ok()) return 2;
    absl::Status s = CheckJoin(**store, rank, world, "same", absl::Seconds(20));
    const std::string want = "WORLD_SIZE differs: rank 1 has 4, rank 0 has 2";
    if (s.ok() || !absl::StrContains(s.message(), want)) {
      std::fprintf(stderr, "rank %d: %s\n", rank, std::string(s.message()).c_str());
      return 3;
    }
    (*store)->Set(absl::StrCat("done/", rank), "1").IgnoreError();
    if (rank == 0 && !(*store)->Get("done/1", absl::Seconds(20)).ok()) return 4;
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;

  RendezvousInfo alone;
  alone.world_size = 3;
  alone.master_port = FreeLoopbackPort();
  absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(alone, absl::Seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = CheckJoin(**store, 0, 3, "p", absl::Milliseconds(500));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(s.message(), "2 of 3 ranks did not join")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "ranks 1, 2")) << s;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
}

// Rank 0 serves the store and ends as soon as its join check fails: the others still read
// why (it once took the store away first: "lost the store" instead of the difference).
TEST(TcpStoreTest, EveryRankReadsTheVerdictBeforeRankZerosStoreEnds) {
  const int port = FreeLoopbackPort();
  const std::vector<int> codes = RunRanks(3, [&](int rank) {
    absl::StatusOr<std::shared_ptr<TcpStore>> store = JoinStore(rank, 3, port);
    if (!store.ok()) return 2;
    if (rank == 1) {
      // Joined (its record is in), then slow to read the verdict: rank 0 is done by then.
      if (!(*store)->Set("join/1", "3 other").ok()) return 4;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    absl::Status s = CheckJoin(**store, rank, 3, rank == 1 ? "other" : "same", absl::Seconds(20));
    if (s.ok() || !absl::StrContains(s.message(), "rank 1 runs a different program")) {
      std::fprintf(stderr, "rank %d: %s\n", rank, std::string(s.message()).c_str());
      return 3;
    }
    return 0;  // rank 0 ends here, and its store with it
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// A PyTorch 1.x c10d store that answers slowly (a busy agent): GETNUMKEYS after `delay`, the
// requests a client sends after the probe at once. Serves each connection on a thread of its
// own until it closes; the 2.x probe's VALIDATE reads to it as an unfinished SET.
class SlowC10dWire1Server {
 public:
  explicit SlowC10dWire1Server(absl::Duration delay) : delay_(delay) {
    listener_ = ListenOnLoopback(&port_);
    accept_ = std::thread([this] {
      while (true) {
        const int fd = accept(listener_, nullptr, nullptr);
        if (fd < 0) return;
        clients_.emplace_back([this, fd] { Serve(fd); });
      }
    });
  }
  ~SlowC10dWire1Server() {
    shutdown(listener_, SHUT_RDWR);
    accept_.join();
    for (std::thread& t : clients_) t.join();
    close(listener_);
  }
  int port() const { return port_; }

 private:
  static bool String(int fd, std::string& out) {
    uint64_t n = 0;
    if (!store_wire::RecvAll(fd, &n, 8) || n > (1 << 20)) return false;
    out.resize(n);
    return store_wire::RecvAll(fd, out.data(), n);
  }
  void Serve(int fd) {
    std::map<std::string, std::string> data;
    uint8_t code = 0;
    std::string key, value;
    while (store_wire::RecvAll(fd, &code, 1)) {
      if (code == 6) {  // GETNUMKEYS
        std::this_thread::sleep_for(absl::ToChronoMilliseconds(delay_));
        const int64_t n = 0;
        if (!store_wire::SendAll(fd, &n, 8)) break;
      } else if (code == 3) {  // ADD: key, amount; the sum back
        int64_t amount = 0;
        if (!String(fd, key) || !store_wire::RecvAll(fd, &amount, 8)) break;
        std::lock_guard<std::mutex> lock(mu_);
        counts_[key] += amount;
        if (!store_wire::SendAll(fd, &counts_[key], 8)) break;
      } else if (code == 0) {  // SET: key, value
        if (!String(fd, key) || !String(fd, value)) break;
        std::lock_guard<std::mutex> lock(mu_);
        values_[key] = value;
      } else if (code == 4) {  // CHECK: a count, keys; READY (0) or NOT_READY (1)
        uint64_t n = 0;
        if (!store_wire::RecvAll(fd, &n, 8) || n > 16) break;
        uint8_t ready = 0;
        for (uint64_t k = 0; k < n; ++k) {
          if (!String(fd, key)) return (void)close(fd);
          std::lock_guard<std::mutex> lock(mu_);
          if (values_.count(key) == 0) ready = 1;
        }
        if (!store_wire::SendAll(fd, &ready, 1)) break;
      } else if (code == 2) {  // GET: key; the value
        if (!String(fd, key)) break;
        std::lock_guard<std::mutex> lock(mu_);
        const std::string v = values_[key];
        const uint64_t n = v.size();
        if (!store_wire::SendAll(fd, &n, 8) || !store_wire::SendAll(fd, v.data(), n)) break;
      } else {
        break;
      }
    }
    close(fd);
  }
  absl::Duration delay_;
  int listener_ = -1;
  int port_ = 0;
  std::thread accept_;
  std::vector<std::thread> clients_;
  std::mutex mu_;
  std::map<std::string, int64_t> counts_;
  std::map<std::string, std::string> values_;
};

// The agent store's generation is asked both ways and waited for within the timeout: a
// store silent for longer than the first wait is neither taken for 2.x nor given up on, and
// one that never answers ends within the timeout naming both wires and the way around.
TEST(TcpStoreTest, TheC10dWireIsProbedWithinTheTimeoutAndNamed) {
  RendezvousInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.agent_store = true;
  info.protocol = StoreProtocol::kC10d;
  {
    int port = 0;
    const int silent = ListenOnLoopback(&port);
    ASSERT_GE(silent, 0);
    info.master_port = port;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(info, absl::Seconds(3));
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded) << store.status();
    EXPECT_TRUE(absl::StrContains(store.status().message(), "answered neither PyTorch wire"))
        << store.status();
    EXPECT_TRUE(absl::StrContains(store.status().message(), "OVERLAP_C10D_WIRE"));
    EXPECT_GE(took, 2.5);
    EXPECT_LT(took, 10);
    close(silent);
  }
  SlowC10dWire1Server slow(absl::Seconds(3));
  info.master_port = slow.port();
  absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(info, absl::Seconds(20));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  absl::StatusOr<std::string> v = (*store)->Get("k", absl::Seconds(5));
  ASSERT_TRUE(v.ok()) << v.status() << " (the store was taken for 2.x)";
  EXPECT_EQ(*v, "v");
}

}  // namespace
}  // namespace overlap
