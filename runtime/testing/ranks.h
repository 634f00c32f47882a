// Multi-rank tests: ranks as forked processes on 127.0.0.1, a store folder per run.
// Test-only.
#ifndef OVERLAP_RUNTIME_TESTING_RANKS_H_
#define OVERLAP_RUNTIME_TESTING_RANKS_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace overlap {

// A fresh, empty folder under $TEST_TMPDIR (or /tmp) for one run's rendezvous.
std::string FreshStoreDir(const std::string& name);

// Runs body(rank) in `size` forked processes and returns each one's exit code (body's
// return value; 98 for an exception). Children still running after `deadline` are killed
// and reported as 200: a hang is a failure, never a stuck test. Fork before starting threads.
// `started`, when given, runs in the parent once every child is forked, with their pids
// (a test kills one from outside).
std::vector<int> RunRanks(int size, const std::function<int(int)>& body,
                          std::chrono::seconds deadline = std::chrono::seconds(120),
                          const std::function<void(const std::vector<int>&)>& started = nullptr);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TESTING_RANKS_H_
