// Fuzz target: every file any CLI command writes reads back. The input picks a graph
// (GraphFromBytes, module-owned or lifted parameters), written to a file; then the CLI runs
// in-process on it: inspect, print -o, partition --json -o --subgraphs-dir, schedule (each
// registered algorithm, forward or backward, with a budget) --json -o --trace, simulate
// --json --trace, and gen random with cost-model flags drawn from the bytes. Every command
// exits 0, 1 (bad input) or 2 (only gen, for out-of-range flags); after a success every
// graph it wrote is read back and verified by the CLI's reader, and every result / trace
// is strict JSON whose figures are finite numbers. Any violation aborts.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/random_graph.h"
#include "nlohmann/json.hpp"
#include "schedule/scheduler_registry.h"
#include "tools/cli.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "cli_roundtrip_fuzzer: %s\n", what.c_str());
  std::abort();
}

const std::string& Dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/overlap_cli_fuzz_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Fail("mkdtemp failed");
    return new std::string(tmpl);
  }();
  return *dir;
}

std::string Path(const std::string& name) { return Dir() + "/" + name; }

int Cli(const std::vector<std::string>& args) {
  std::FILE* out = std::fopen("/dev/null", "w");
  std::FILE* err = std::fopen("/dev/null", "w");
  const int code = overlap::RunCli(args, out, err);
  std::fclose(out);
  std::fclose(err);
  return code;
}

void ExpectGraphReadsBack(const std::string& path) {
  absl::StatusOr<overlap::Graph> g = overlap::ReadGraphJsonFile(path);
  if (!g.ok())
    Fail(absl::StrCat("written graph ", path, " does not read back: ", g.status().message()));
}

// Strict JSON; the named keys, where present, are finite numbers (not null).
void ExpectJson(const std::string& path, const std::vector<std::string>& numbers) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Fail(absl::StrCat(path, " is not JSON"));
  for (const std::string& key : numbers) {
    if (j.contains(key) && !j[key].is_number())
      Fail(absl::StrCat(path, ": ", key, " is not a number"));
  }
}

void Run(const std::vector<std::string>& args, const std::vector<std::string>& graphs,
         const std::vector<std::string>& results, bool usage_allowed = false) {
  for (const std::string& f : graphs) std::remove(f.c_str());
  for (const std::string& f : results) std::remove(f.c_str());
  const int code = Cli(args);
  if (code == 2 && usage_allowed) return;
  if (code != 0 && code != 1) Fail(absl::StrCat("`overlap ", args[0], "` exited ", code));
  if (code != 0) return;
  for (const std::string& f : graphs) ExpectGraphReadsBack(f);
  for (const std::string& f : results) {
    ExpectJson(f, {"peak_memory_bytes", "peak_gathered_bytes", "step_time_s", "exposed_comm_s",
                   "lower_bound_s", "scheduler_s"});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  if (size < 6) return 0;
  // data[6] (GraphFromBytes' first byte) picks module-owned or lifted parameters.
  const bool lifted = data[0] & 1, backward = data[0] & 2;
  uint32_t budget = 0;
  for (size_t i = 1; i < 5; ++i) budget = budget << 8 | data[i];
  const uint8_t flag_byte = data[5];
  Graph g = GraphFromBytes(absl::MakeConstSpan(data + 6, size - 6), 60);
  const std::string in = Path("in.json");
  if (!WriteGraphJsonFile(g, in).ok()) Fail("cannot write the input");
  Run({"inspect", in}, {}, {});
  Run({"print", in, "-o", Path("print.txt")}, {}, {});
  Run({"partition", in, "--json", Path("p.json"), "-o", Path("outer.json"), "--subgraphs-dir",
       Path("subs")},
      {Path("outer.json")}, {Path("p.json")});
  for (const SchedulerEntry& e : Schedulers()) {
    std::vector<std::string> args = {
        "schedule",     in,   "--algorithm",          std::string(e.name), "--json",
        Path("s.json"), "-o", Path("scheduled.json"), "--trace",           Path("t.json")};
    if (backward) args.push_back("--backward");
    if (e.honours_budget && budget % 3 != 0) {
      args.push_back("--memory-limit");
      args.push_back(absl::StrCat(budget));
    }
    Run(args, {Path("scheduled.json")}, {Path("s.json"), Path("t.json")});
    if (e.honours_budget) {
      Run({"simulate", Path("scheduled.json"), "--json", Path("sim.json"), "--trace",
           Path("simt.json")},
          {}, {Path("sim.json"), Path("simt.json")});
    }
  }
  const char* const values[] = {"1e-320", "1e-6", "0.5", "989", "1e30", "nan", "-1", "inf"};
  Run({"gen", "random", "--nodes", absl::StrCat(2 + budget % 50), "--seed", absl::StrCat(budget),
       lifted ? "--lifted" : "--sparse-meta", "--peak-tflops", values[flag_byte % 8],
       "--mem-bandwidth", values[(flag_byte / 8) % 8], "-o", Path("gen.json")},
      {Path("gen.json")}, {}, /*usage_allowed=*/true);
  return 0;
}
