#include "tools/compute_hand_off.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/core/companion_file.h"

namespace overlap {
namespace {

constexpr char kComputeBinary[] = "overlap_compute";

CommandSpec Stub(absl::string_view name, absl::string_view synopsis, absl::string_view summary) {
  CommandSpec s;
  s.name = name;
  s.synopsis = synopsis;
  s.summary = summary;
  s.hand_off = &HandOffToCompute;
  return s;
}

}  // namespace

absl::Span<const CommandSpec* const> ComputeCommandStubs() {
  static const CommandSpec kStubs[] = {
      Stub("exec", "FILE [--backward-graph FILE] [options]",
           "run a graph on the CPU kernels (or replay it), memory vs the simulator's"),
      Stub("train", "[--model M | --graph F --backward-graph B] [--data D] [--steps K] [options]",
           "train a built-in model or an AOT pair in one process"),
      Stub("run", "--nproc N [--strategy ddp|zero3] [--model M] [options]",
           "train across N local processes (DDP or ZeRO-3 over Gloo)"),
      Stub("worker", "[--strategy ddp|zero3] [--model M] [options]",
           "one rank of a job, joined from the torchrun variables"),
      Stub("bench-comm", "[--nproc N] [--sizes 4KiB..256MiB] [--save FILE]",
           "measure allreduce, allgather and reduce-scatter; fit the cost model"),
      Stub("demo", "[MODEL] [options]", "run the pipeline on a built-in model (default gpt2)"),
  };
  static const CommandSpec* const kPointers[] = {&kStubs[0], &kStubs[1], &kStubs[2],
                                                 &kStubs[3], &kStubs[4], &kStubs[5]};
  return kPointers;
}

std::vector<std::string> ComputeBinaryCandidates() {
  return CompanionFileCandidates("OVERLAP_COMPUTE_BINARY", kComputeBinary, "tools");
}

int HandOffToCompute(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("GOMP_SPINCOUNT", "10000", 1);
  }
  std::fflush(out);
  std::fflush(err);
  std::vector<std::string> tried;
  for (const std::string& path : ComputeBinaryCandidates()) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || access(path.c_str(), X_OK) != 0) {
      tried.push_back(path);
      continue;
    }
    std::vector<std::string> argv_strings = {"overlap"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    std::fprintf(err, "overlap: error: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
    return kExitBadInput;
  }
  std::fprintf(err,
               "overlap: error: `overlap %s` runs in %s, built beside overlap (bazel build "
               "//tools:overlap builds both; OVERLAP_COMPUTE_BINARY names it); not found at %s\n",
               args.empty() ? "" : args[0].c_str(), kComputeBinary,
               absl::StrJoin(tried, ", ").c_str());
  return kExitBadInput;
}

}  // namespace overlap
