// The store's trust model and bounds: a connection without the job's secret reads and
// writes nothing and is counted; keys and values past their bounds close the connection
// (the client is told, never left waiting); a value's memory follows its bytes; departed
// clients' descriptors are released (1,100 connect / close cycles under a 1,024-descriptor
// limit); a store that accepts and never answers, or goes away, ends a client's request
// within its deadline.
#include "runtime/comm/store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/testing/loopback.h"

namespace overlap {
namespace {

// Whether the server closed `fd` (reads end) within 5 s.
bool ClosedByServer(int fd) {
  char c;
  return store_wire::RecvAll(fd, &c, 1, absl::Now() + absl::Seconds(5)) == false &&
         errno != ETIMEDOUT;
}

// This process's descriptor limit lowered to at most `n` while it lives.
class ScopedDescriptorLimit {
 public:
  explicit ScopedDescriptorLimit(rlim_t n) {
    getrlimit(RLIMIT_NOFILE, &old_);
    rlimit small = old_;
    small.rlim_cur = std::min<rlim_t>(old_.rlim_cur, n);
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &small), 0);
  }
  ~ScopedDescriptorLimit() { setrlimit(RLIMIT_NOFILE, &old_); }

 private:
  rlimit old_{};
};

RendezvousInfo Client(int port, const std::string& secret) {
  RendezvousInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.master_port = port;
  info.agent_store = true;
  info.secret = secret;
  return info;
}

std::unique_ptr<TcpStoreServer> ServeWithSecret(const std::string& secret) {
  StoreServerOptions o;
  o.secret = secret;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> s = TcpStoreServer::Serve("127.0.0.1", 0, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(StoreServerTest, OnlyTheSecretsHolderReadsOrWrites) {
  std::unique_ptr<TcpStoreServer> server = ServeWithSecret("s3cret");
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::shared_ptr<TcpStore>> owner =
      TcpStore::Connect(Client(server->port(), "s3cret"), absl::Seconds(5));
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_TRUE((*owner)->Set("step", "1").ok());

  // A wrong secret, no secret: refused at the handshake, named as such.
  for (const std::string& guess : {std::string("wrong"), std::string()}) {
    absl::StatusOr<std::shared_ptr<TcpStore>> stranger =
        TcpStore::Connect(Client(server->port(), guess), absl::Seconds(5));
    ASSERT_FALSE(stranger.ok());
    EXPECT_EQ(stranger.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(absl::StrContains(stranger.status().message(), "OVERLAP_STORE_SECRET"));
  }
  // A raw client that skips the handshake and sends a SET of `abort`: closed, not stored.
  const int fd = DialLoopback(server->port());
  ASSERT_GE(fd, 0);
  const std::string key = "abort";
  const uint32_t klen = static_cast<uint32_t>(key.size());
  const uint64_t vlen = 5;
  store_wire::SendAll(fd, &store_wire::kSet, 1);
  store_wire::SendAll(fd, &klen, 4);
  store_wire::SendAll(fd, key.data(), klen);
  store_wire::SendAll(fd, &vlen, 8);
  store_wire::SendAll(fd, "forge", 5);
  EXPECT_TRUE(ClosedByServer(fd));
  close(fd);
  EXPECT_EQ((*owner)->Get("abort", absl::Milliseconds(100)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*(*owner)->Get("step", absl::Seconds(1)), "1");
  // Counted: two wrong handshakes and the raw one.
  for (int i = 0; i < 100 && server->rejected() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server->rejected(), 3);
}

TEST(StoreServerTest, KeysAndValuesPastTheirBoundsCloseTheConnection) {
  std::unique_ptr<TcpStoreServer> server = ServeWithSecret("k");
  ASSERT_NE(server, nullptr);
  // The client refuses them itself, naming the bound.
  absl::StatusOr<std::shared_ptr<TcpStore>> client =
      TcpStore::Connect(Client(server->port(), "k"), absl::Seconds(5));
  ASSERT_TRUE(client.ok());
  absl::Status long_key = (*client)->Set(std::string(store_wire::kMaxKeyBytes + 1, 'k'), "v");
  EXPECT_EQ(long_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*client)->Set("fine", "v").ok()) << "a refused request leaves the connection";

  // A raw client declaring a key over the bound, or a value of 2^40 bytes: the server
  // closes the connection at once (before reading or allocating what was declared).
  for (bool value : {false, true}) {
    const int fd = DialLoopback(server->port());
    ASSERT_GE(fd, 0);
    const uint32_t slen = 1;
    store_wire::SendAll(fd, &store_wire::kHello, 1);
    store_wire::SendAll(fd, &slen, 4);
    store_wire::SendAll(fd, "k", 1);
    const int32_t rank = -1;
    store_wire::SendAll(fd, &rank, 4);
    uint8_t ok = 1;
    ASSERT_TRUE(store_wire::RecvAll(fd, &ok, 1, absl::Now() + absl::Seconds(5)));
    const uint32_t klen = value ? 3 : store_wire::kMaxKeyBytes + 1;
    store_wire::SendAll(fd, &store_wire::kSet, 1);
    store_wire::SendAll(fd, &klen, 4);
    if (value) {
      const uint64_t vlen = uint64_t{1} << 40;
      store_wire::SendAll(fd, "big", 3);
      store_wire::SendAll(fd, &vlen, 8);
    }
    EXPECT_TRUE(ClosedByServer(fd)) << (value ? "value" : "key");
    close(fd);
  }
  EXPECT_EQ(*(*client)->Get("fine", absl::Seconds(1)), "v");
}

TEST(StoreServerTest, DepartedClientsReleaseTheirDescriptors) {
  const ScopedDescriptorLimit limit(1024);
  std::unique_ptr<TcpStoreServer> server = ServeWithSecret("fd");
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 1100; ++i) {
    const int fd = DialLoopback(server->port());
    ASSERT_GE(fd, 0) << "cycle " << i;
    close(fd);
    // Let the server's side of the connection go too (the descriptors are one process's).
    if (i % 100 == 99) {
      for (int k = 0; k < 500 && server->connections() > 0; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
  absl::StatusOr<std::shared_ptr<TcpStore>> client =
      TcpStore::Connect(Client(server->port(), "fd"), absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("still", "serving").ok());
  EXPECT_EQ(*(*client)->Get("still", absl::Seconds(1)), "serving");
}

TEST(StoreServerTest, AStoreThatNeverAnswersEndsTheRequestWithinItsDeadline) {
  // Listens and accepts (the kernel does) but never reads: a stopped launcher.
  int port = 0;
  const int listener = ListenOnLoopback(&port);
  ASSERT_GE(listener, 0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<TcpStore>> client =
      TcpStore::Connect(Client(port, "x"), absl::Seconds(2));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::StrContains(client.status().message(), "did not answer")) << client.status();
  EXPECT_LT(took, 30) << "bounded by the connect timeout and the handshake's";
  close(listener);
}

TEST(StoreServerTest, ALostStoreFailsEveryLaterRequestAtOnce) {
  std::unique_ptr<TcpStoreServer> server = ServeWithSecret("gone");
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::shared_ptr<TcpStore>> client =
      TcpStore::Connect(Client(server->port(), "gone"), absl::Seconds(5));
  ASSERT_TRUE(client.ok());
  server.reset();
  absl::Status first = (*client)->Set("hb/1", "1");
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(first.message(), "the store is gone")) << first;
  EXPECT_EQ((*client)->Get("x", absl::Seconds(60)).status().code(), absl::StatusCode::kUnavailable);
}

// Threads of this process (from /proc/self/status), -1 when unknown.
int Threads() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "Threads: %d", &n) == 1) break;
  }
  std::fclose(f);
  return n;
}

// A flood of idle connections from a process without the secret (anyone who reaches the
// port) neither takes a thread each nor the process's descriptors: at most
// kMaxPendingHandshakes wait for their handshake (the oldest are told "busy" and closed),
// the job's own clients still connect, and the process can still open files (a `--save`
// after training).
TEST(StoreServerTest, AFloodOfIdleConnectionsKeepsTheStoreAndTheDescriptors) {
  const ScopedDescriptorLimit limit(1024);
  std::unique_ptr<TcpStoreServer> server = ServeWithSecret("flood");
  ASSERT_NE(server, nullptr);
  const int threads_before = Threads();
  std::vector<int> idle;
  for (int i = 0; i < 700; ++i) {
    const int fd = DialLoopback(server->port());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  // The server has caught up once it holds no more than the bound.
  for (int k = 0; k < 500 && server->connections() > store_wire::kMaxPendingHandshakes; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(server->connections(), store_wire::kMaxPendingHandshakes);
  EXPECT_GE(server->rejected(), 700 - store_wire::kMaxPendingHandshakes);
  EXPECT_EQ(Threads(), threads_before) << "a thread per connection";
  // The oldest were told "busy" before being closed.
  uint8_t reply = 0;
  ASSERT_TRUE(store_wire::RecvAll(idle.front(), &reply, 1, absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(reply, store_wire::kHelloBusy);
  absl::StatusOr<std::shared_ptr<TcpStore>> client =
      TcpStore::Connect(Client(server->port(), "flood"), absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("after", "flood").ok());
  EXPECT_EQ(*(*client)->Get("after", absl::Seconds(1)), "flood");
  // Descriptors are left for the process's own files.
  std::vector<std::FILE*> files;
  for (int i = 0; i < 100; ++i) files.push_back(std::fopen("/dev/null", "r"));
  for (std::FILE* f : files) {
    EXPECT_NE(f, nullptr);
    if (f != nullptr) std::fclose(f);
  }
  for (int fd : idle) close(fd);
}

// Past max_connections a client is told "busy" and retries within its timeout: it gets in
// once another leaves.
TEST(StoreServerTest, ABusyStoreIsRetriedUntilAConnectionFrees) {
  StoreServerOptions o;
  o.secret = "b";
  o.max_connections = 1;
  o.on_refused = [](const std::string&) {};
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Serve("127.0.0.1", 0, o);
  ASSERT_TRUE(server.ok());
  absl::StatusOr<std::shared_ptr<TcpStore>> first =
      TcpStore::Connect(Client((*server)->port(), "b"), absl::Seconds(5));
  ASSERT_TRUE(first.ok()) << first.status();
  std::thread leave([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    first->reset();
  });
  absl::StatusOr<std::shared_ptr<TcpStore>> second =
      TcpStore::Connect(Client((*server)->port(), "b"), absl::Seconds(10));
  leave.join();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->Set("in", "1").ok());
  EXPECT_GE((*server)->rejected(), 1);
}

// The store names a refused rank and why, at the store's end, and reports a flood in a
// bounded number of lines.
TEST(StoreServerTest, ARefusedRankIsNamedAtTheStore) {
  std::vector<std::string> lines;
  std::mutex mu;
  StoreServerOptions o;
  o.secret = "right";
  o.on_refused = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Serve("127.0.0.1", 0, o);
  ASSERT_TRUE(server.ok());
  RendezvousInfo info = Client((*server)->port(), "wrong");
  info.rank = 3;
  absl::StatusOr<std::shared_ptr<TcpStore>> refused = TcpStore::Connect(info, absl::Seconds(5));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "refused this process's secret"))
      << refused.status();
  for (int k = 0; k < 100 && (*server)->rejected() < 1; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_TRUE(absl::StrContains(lines[0], "(rank 3): it presented a wrong secret")) << lines[0];
  }
  for (int i = 0; i < 40; ++i) {
    RendezvousInfo again = Client((*server)->port(), "");
    EXPECT_FALSE(TcpStore::Connect(again, absl::Seconds(5)).ok());
  }
  for (int k = 0; k < 100 && (*server)->rejected() < 41; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(lines.size(), static_cast<size_t>(store_wire::kMaxRefusalReports) + 1);
  EXPECT_TRUE(absl::StrContains(lines.back(), "counted, not reported"));
}

// A store slowed past the 5 s floor (many ranks on few cores) is not taken for gone while the
// job's timeout allows it: a reply's grace follows the connection's timeout.
TEST(StoreServerTest, ASlowReplyWithinTheJobsTimeoutIsWaitedFor) {
  int port = 0;
  const int listener = ListenOnLoopback(&port);
  ASSERT_GE(listener, 0);
  // Answers the handshake at once and the first SET after 6 s.
  std::thread slow([listener] {
    const int fd = accept(listener, nullptr, nullptr);
    char hello[1 + 4 + 1 + 4];
    const uint8_t ok = store_wire::kHelloOk;
    if (!store_wire::RecvAll(fd, hello, sizeof(hello)) || !store_wire::SendAll(fd, &ok, 1)) return;
    char set[1 + 4 + 1 + 8 + 1];
    if (!store_wire::RecvAll(fd, set, sizeof(set))) return;
    std::this_thread::sleep_for(std::chrono::seconds(6));
    store_wire::SendAll(fd, &ok, 1);
    char c;
    store_wire::RecvAll(fd, &c, 1, absl::Now() + absl::Seconds(5));
    close(fd);
  });
  absl::StatusOr<std::shared_ptr<TcpStore>> client =
      TcpStore::Connect(Client(port, "s"), absl::Seconds(20));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  client->reset();
  slow.join();
  close(listener);
}

}  // namespace
}  // namespace overlap
