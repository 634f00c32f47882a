#include "tools/cli.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/backward.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "graph/random_graph.h"
#include "graph/size.h"
#include "graph/summary.h"
#include "graph/verifier.h"
#include "partition/bucket_cap.h"
#include "partition/ddp_partitioner.h"
#include "partition/report.h"
#include "schedule/fast_free.h"
#include "schedule/list_schedule.h"
#include "schedule/lookahead_prefetch.h"
#include "schedule/schedule_verifier.h"
#include "schedule/simple_prefetch.h"
#include "schedule/simulator.h"
#include "schedule/zero3_insertion.h"

namespace overlap {
namespace {

constexpr char kMainUsage[] = R"(overlap: compile distributed-training dataflow graphs.

usage: overlap <command> [options]

commands:
  gen <model> [options] [-o FILE]   write a built-in model's graph (JSON) to FILE or stdout
  inspect FILE                      verify a graph file and print its summary
  partition FILE [options]          bucket and split a forward graph as DDP does
  schedule FILE [options]           insert ZeRO-3 ops if needed, schedule, verify, simulate
  simulate FILE [options]           simulate a (ZeRO-3) graph in its order on two streams
  demo [MODEL]                      run the pipeline on a built-in model (default gpt2)
  help [COMMAND]                    show help for a command

models: mlp, gpt2, llama-7b, llama-70b, resnet18, moe, random
exit codes: 0 ok, 1 bad input, 2 bad usage
)";

constexpr char kGenUsage[] = R"(usage: overlap gen <model> [options] [-o FILE]

Writes the forward graph of a built-in model in the interchange format (docs/format.md).

models: mlp, gpt2, llama-7b, llama-70b, resnet18, moe, random

options:
  -o, --output FILE        write to FILE (default: stdout)
  --lifted                 parameters as placeholders with meta.param (AOT / ZeRO-3 style);
                           default: owned by call_module / get_attr nodes (torch.fx style)
  --backward               the model's AOT-style backward graph instead (implies --lifted;
                           graph/backward.h): saved activations and tangents in, parameter
                           gradients (meta.grad_of) out
  --batch N, --seq N, --layers N
                           override the preset (transformers; --batch also mlp and resnet18)
  --peak-tflops X          16-bit peak of the roofline cost model (default 989, H100 SXM)
  --peak-tflops-fp32 X     32-bit (TF32) peak (default 494)
  --mem-bandwidth X        memory bandwidth in GB/s (default 3350)
random only:
  --nodes N                total nodes (default 100)
  --seed S                 seed (default 1); the same seed gives the same graph
  --sparse-meta            give metadata to about half of the nodes only
)";

constexpr char kInspectUsage[] = R"(usage: overlap inspect FILE

Reads and verifies a graph file, then prints node counts by op, the parameters (count,
bytes by dtype, tied groups, frozen and ignored), total device time and the critical path.
)";

constexpr char kPartitionUsage[] = R"(usage: overlap partition FILE [options]

Buckets the forward graph's parameters as DDP buckets gradients, prints the bucket table
(index, size in bytes, parameter names), and splits the graph into one subgraph per bucket
(split_module semantics). See docs/partition.md.

options:
  --mode reference|default   reference: PyTorch 2.0's DDPOptimizer exactly; default: improved
                             (no subgraph without outputs, tied storage once, ...)
  --bucket-cap SIZE|auto     bucket cap (default 25MiB); auto: choose the cap that minimises
                             predicted exposed allreduce time in backward, and print the
                             candidates
  --first-bucket-cap SIZE    cap of the bucket nearest the output (default min(1MiB, cap));
                             must not exceed --bucket-cap
  --world-size N             ranks for the allreduce model (default 32)
  --latency-us X             allreduce latency term in microseconds (default 20)
  --bandwidth X              per-rank bandwidth in GB/s (default 50)
  --json OUT                 write the partition result (overlap-result JSON)
  -o OUTER                   write the outer graph (calls submod_0, submod_1, ...)
  --subgraphs-dir DIR        write each subgraph as DIR/submod_<i>.json
SIZE: bytes, or with KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).
)";

constexpr char kSimulateUsage[] = R"(usage: overlap simulate FILE [options]

Simulates one step of the graph in its file order: compute on one stream, collectives
(dc.allgather_param, dc.reduce_grad) on another, waits blocking compute (schedule/simulator.h).
Prints peak memory, peak gathered bytes, step time, exposed communication and the lower
bound max(compute, communication).

options:
  --world-size N       ranks (default 32)
  --latency-us X       collective latency in microseconds (default 20)
  --bandwidth X        per-rank bandwidth in GB/s (default 50)
  --json OUT           write the figures (overlap-result JSON)
  --trace OUT          write a Chrome / Perfetto trace (open in ui.perfetto.dev)
)";

constexpr char kScheduleUsage[] = R"(usage: overlap schedule FILE [options]

Schedules a ZeRO-3 graph. A graph without dc.* ops gets them first (parameters must be
lifted: `overlap gen <model> --lifted`). The order is checked by the schedule verifier and
simulated on two streams (schedule/simulator.h). See schedule/README.md.

options:
  --algorithm A        lookahead (default): ours, memory-bounded lookahead prefetch;
                       fast_free, list, simple_prefetch: DeepSpeed DeepCompile's schedulers
  --memory-limit SIZE  lookahead: the simulated peak-memory budget; when no schedule fits,
                       exit 1 and report the smallest feasible budget (the result is still
                       written)
  --max-inflight N     lookahead: at most N allgathers issued ahead of the compute that
                       needs them (default: no cap besides memory)
  --backward           the graph is a backward graph (graph_id 1: reduce_grad inserted)
  --world-size N       ranks (default 32)
  --latency-us X       collective latency in microseconds (default 20)
  --bandwidth X        per-rank bandwidth in GB/s (default 50)
  --json OUT           write the schedule result (order, peak_gathered_bytes, simulation)
  -o OUT               write the scheduled graph (the output node last)
  --trace OUT          write a Chrome / Perfetto trace of the simulation
)";

constexpr char kDemoUsage[] = R"(usage: overlap demo [MODEL] [--lifted]

Runs what overlap can do today on a built-in model (default gpt2): builds its graph, writes
it in the interchange format, reads it back (checking the round trip), verifies it, prints
its summary, then partitions it into DDP buckets in PyTorch's reference mode and in ours,
predicts the exposed allreduce time at the default cap and at the best cap, and finally
inserts the ZeRO-3 ops into the lifted graph and compares DeepSpeed DeepCompile's
schedulers with ours in the two-stream simulator.
)";

// Parsed command line: positional arguments and --flags (with or without values).
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

// Flags that take no value.
bool IsSwitch(absl::string_view f) {
  return f == "lifted" || f == "help" || f == "sparse-meta" || f == "backward";
}

std::optional<std::string> ParseArgs(const std::vector<std::string>& argv, size_t start,
                                     const std::vector<std::string>& known, Args* out) {
  for (size_t i = start; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-o") {
      if (i + 1 >= argv.size()) return "-o needs a file name";
      out->flags["output"] = argv[++i];
      continue;
    }
    if (a == "-h") {
      out->flags["help"] = "";
      continue;
    }
    if (absl::StartsWith(a, "--") && a.size() > 2) {
      std::string name = a.substr(2), value;
      size_t eq = name.find('=');
      bool has_value = eq != std::string::npos;
      if (has_value) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (std::find(known.begin(), known.end(), name) == known.end() && name != "help") {
        return absl::StrCat("unknown option --", name);
      }
      if (IsSwitch(name)) {
        if (has_value) return absl::StrCat("--", name, " takes no value");
      } else if (!has_value) {
        if (i + 1 >= argv.size()) return absl::StrCat("--", name, " needs a value");
        value = argv[++i];
      }
      out->flags[name] = value;
      continue;
    }
    if (a.size() > 1 && a[0] == '-') return absl::StrCat("unknown option ", a);
    out->positional.push_back(a);
  }
  return std::nullopt;
}

std::string ResolvePath(const std::string& path) {
  if (path.empty() || path == "-" || path[0] == '/') return path;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (wd == nullptr || *wd == '\0') return path;
  return absl::StrCat(wd, "/", path);
}

class Cli {
 public:
  Cli(std::FILE* out, std::FILE* err) : out_(out), err_(err) {}

  int Run(const std::vector<std::string>& argv) {
    if (argv.empty()) {
      std::fputs(kMainUsage, err_);
      return kExitUsage;
    }
    const std::string& cmd = argv[0];
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      if (argv.size() > 1) return Help(argv[1]);
      std::fputs(kMainUsage, out_);
      return kExitOk;
    }
    if (cmd == "gen") return Gen(argv);
    if (cmd == "inspect") return Inspect(argv);
    if (cmd == "partition") return PartitionCmd(argv);
    if (cmd == "simulate") return SimulateCmd(argv);
    if (cmd == "schedule") return ScheduleCmd(argv);
    if (cmd == "demo") return Demo(argv);
    return Usage(absl::StrCat("unknown command \"", cmd, "\""), kMainUsage);
  }

 private:
  int Help(const std::string& cmd) {
    if (cmd == "gen")
      std::fputs(kGenUsage, out_);
    else if (cmd == "inspect")
      std::fputs(kInspectUsage, out_);
    else if (cmd == "demo")
      std::fputs(kDemoUsage, out_);
    else if (cmd == "partition")
      std::fputs(kPartitionUsage, out_);
    else if (cmd == "simulate")
      std::fputs(kSimulateUsage, out_);
    else if (cmd == "schedule")
      std::fputs(kScheduleUsage, out_);
    else
      return Usage(absl::StrCat("no help for unknown command \"", cmd, "\""), kMainUsage);
    return kExitOk;
  }

  int Usage(const std::string& msg, const char* usage) {
    std::fprintf(err_, "overlap: %s\n\n%s", msg.c_str(), usage);
    return kExitUsage;
  }

  int BadInput(const absl::Status& s) {
    std::fprintf(err_, "overlap: error: %s\n", std::string(s.message()).c_str());
    return kExitBadInput;
  }

  // Reads an integer flag; returns false (after printing usage) when malformed.
  bool IntFlag(const Args& a, const std::string& name, int64_t min, int64_t* v, int* rc,
               const char* usage) {
    auto it = a.flags.find(name);
    if (it == a.flags.end()) return true;
    if (!absl::SimpleAtoi(it->second, v) || *v < min) {
      *rc = Usage(
          absl::StrCat("--", name, " must be an integer >= ", min, ", got \"", it->second, "\""),
          usage);
      return false;
    }
    return true;
  }

  bool DoubleFlag(const Args& a, const std::string& name, double* v, int* rc, const char* usage) {
    auto it = a.flags.find(name);
    if (it == a.flags.end()) return true;
    if (!absl::SimpleAtod(it->second, v) || !(*v > 0) || *v > 1e30) {
      *rc = Usage(absl::StrCat("--", name, " must be a positive number, got \"", it->second, "\""),
                  usage);
      return false;
    }
    return true;
  }

  // Builds the graph `gen` / `demo` asked for. Returns the exit code through *rc on failure.
  std::optional<Graph> BuildRequested(const std::string& model, const Args& a, int* rc,
                                      const char* usage) {
    ModelOptions o;
    o.style = a.flags.count("lifted") ? ParamStyle::kLifted : ParamStyle::kModule;
    double tflops = 0, tflops32 = 0, gbps = 0;
    if (!DoubleFlag(a, "peak-tflops", &tflops, rc, usage) ||
        !DoubleFlag(a, "peak-tflops-fp32", &tflops32, rc, usage) ||
        !DoubleFlag(a, "mem-bandwidth", &gbps, rc, usage)) {
      return std::nullopt;
    }
    if (tflops > 0) o.device.peak_flops_16bit = tflops * 1e12;
    if (tflops32 > 0) o.device.peak_flops_32bit = tflops32 * 1e12;
    if (gbps > 0) o.device.memory_bandwidth = gbps * 1e9;
    int64_t batch = 0, seq = 0, layers = 0;
    if (!IntFlag(a, "batch", 1, &batch, rc, usage) || !IntFlag(a, "seq", 1, &seq, rc, usage) ||
        !IntFlag(a, "layers", 1, &layers, rc, usage)) {
      return std::nullopt;
    }
    if (model == "random") {
      RandomGraphOptions r;
      if (!IntFlag(a, "nodes", 2, &r.nodes, rc, usage)) return std::nullopt;
      int64_t seed = 1;
      if (!IntFlag(a, "seed", 0, &seed, rc, usage)) return std::nullopt;
      r.seed = static_cast<uint64_t>(seed);
      r.lifted = o.style == ParamStyle::kLifted;
      r.full_meta = !a.flags.count("sparse-meta");
      if (r.nodes > (int64_t{1} << 30)) {
        *rc = Usage("--nodes is limited to 2^30", usage);
        return std::nullopt;
      }
      return RandomGraph(r);
    }
    if (a.flags.count("nodes") || a.flags.count("seed") || a.flags.count("sparse-meta")) {
      *rc = Usage("--nodes, --seed and --sparse-meta apply to the random model only", usage);
      return std::nullopt;
    }
    absl::StatusOr<Graph> g;
    const bool transformer =
        model == "gpt2" || model == "llama-7b" || model == "llama-70b" || model == "moe";
    if ((seq || layers) && !transformer) {
      *rc = Usage("--seq and --layers apply to the transformer models only", usage);
      return std::nullopt;
    }
    if (transformer) {
      TransformerConfig c = model == "gpt2"        ? Gpt2Config()
                            : model == "llama-7b"  ? Llama7bConfig()
                            : model == "llama-70b" ? Llama70bConfig()
                                                   : MoeConfig();
      if (batch) c.batch = batch;
      if (seq) c.seq = seq;
      if (layers) c.layers = layers;
      g = BuildTransformer(c, o);
    } else if (model == "mlp") {
      MlpConfig c;
      if (batch) c.batch = batch;
      g = BuildMlp(c, o);
    } else if (model == "resnet18") {
      ResNetConfig c;
      if (batch) c.batch = batch;
      g = BuildResNet(c, o);
    } else {
      g = BuildModel(model, o);  // reports the unknown name
    }
    if (!g.ok()) {
      *rc = g.status().code() == absl::StatusCode::kNotFound
                ? Usage(std::string(g.status().message()), usage)
                : BadInput(g.status());
      return std::nullopt;
    }
    return std::move(*g);
  }

  int Gen(const std::vector<std::string>& argv) {
    Args a;
    if (auto e = ParseArgs(argv, 1,
                           {"output", "lifted", "backward", "nodes", "seed", "sparse-meta", "batch",
                            "seq", "layers", "peak-tflops", "peak-tflops-fp32", "mem-bandwidth"},
                           &a)) {
      return Usage(*e, kGenUsage);
    }
    if (a.flags.count("help")) return Help("gen");
    if (a.positional.size() != 1) return Usage("gen takes exactly one model name", kGenUsage);
    int rc = kExitOk;
    if (a.flags.count("backward")) a.flags["lifted"] = "";
    std::optional<Graph> g = BuildRequested(a.positional[0], a, &rc, kGenUsage);
    if (!g) return rc;
    if (a.flags.count("backward")) {
      absl::StatusOr<Graph> b = BuildBackward(*g);
      if (!b.ok()) return BadInput(b.status());
      g = std::move(*b);
    }
    auto it = a.flags.find("output");
    const std::string path = it == a.flags.end() ? "-" : ResolvePath(it->second);
    absl::Status s = path == "-" ? WriteGraphJsonStream(*g, out_) : WriteGraphJsonFile(*g, path);
    if (!s.ok()) return BadInput(s);
    return kExitOk;
  }

  int Inspect(const std::vector<std::string>& argv) {
    Args a;
    if (auto e = ParseArgs(argv, 1, {}, &a)) return Usage(*e, kInspectUsage);
    if (a.flags.count("help")) return Help("inspect");
    if (a.positional.size() != 1) return Usage("inspect takes exactly one file", kInspectUsage);
    absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(a.positional[0]));
    if (!g.ok()) return BadInput(g.status());
    std::fputs(FormatSummary(*g, Summarize(*g)).c_str(), out_);
    return kExitOk;
  }

  int PartitionCmd(const std::vector<std::string>& argv) {
    Args a;
    if (auto e = ParseArgs(argv, 1,
                           {"mode", "bucket-cap", "first-bucket-cap", "world-size", "latency-us",
                            "bandwidth", "json", "output", "subgraphs-dir"},
                           &a)) {
      return Usage(*e, kPartitionUsage);
    }
    if (a.flags.count("help")) return Help("partition");
    if (a.positional.size() != 1) return Usage("partition takes exactly one file", kPartitionUsage);
    BucketOptions bo;
    if (auto it = a.flags.find("mode");
        it != a.flags.end() && !ParsePartitionMode(it->second, &bo.mode)) {
      return Usage(absl::StrCat("--mode must be reference or default, got \"", it->second, "\""),
                   kPartitionUsage);
    }
    bool auto_cap = false;
    if (auto it = a.flags.find("bucket-cap"); it != a.flags.end()) {
      if (it->second == "auto") {
        auto_cap = true;
      } else {
        absl::StatusOr<int64_t> cap = ParseSize(it->second);
        if (!cap.ok())
          return Usage(absl::StrCat("--bucket-cap: ", cap.status().message()), kPartitionUsage);
        bo.bucket_cap_bytes = *cap;
      }
    }
    std::optional<int64_t> first;
    if (auto it = a.flags.find("first-bucket-cap"); it != a.flags.end()) {
      absl::StatusOr<int64_t> f = ParseSize(it->second);
      if (!f.ok())
        return Usage(absl::StrCat("--first-bucket-cap: ", f.status().message()), kPartitionUsage);
      first = *f;
      if (!auto_cap && *first > bo.bucket_cap_bytes) {
        return Usage(absl::StrCat("--first-bucket-cap (", *first, " bytes) exceeds --bucket-cap (",
                                  bo.bucket_cap_bytes, " bytes)"),
                     kPartitionUsage);
      }
    }
    CollectiveModel comm;
    int rc = kExitOk;
    int64_t world = comm.world_size;
    if (!IntFlag(a, "world-size", 1, &world, &rc, kPartitionUsage)) return rc;
    if (world > (int64_t{1} << 24)) return Usage("--world-size is too large", kPartitionUsage);
    comm.world_size = static_cast<int>(world);
    double latency_us = 0, gbps = 0;
    if (!DoubleFlag(a, "bandwidth", &gbps, &rc, kPartitionUsage)) return rc;
    if (gbps > 0) comm.bandwidth_bytes_per_s = gbps * 1e9;
    if (auto it = a.flags.find("latency-us"); it != a.flags.end()) {
      if (!absl::SimpleAtod(it->second, &latency_us) || !(latency_us >= 0) || latency_us > 1e9) {
        return Usage("--latency-us must be a number >= 0", kPartitionUsage);
      }
      comm.latency_s = latency_us * 1e-6;
    }

    absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(a.positional[0]));
    if (!g.ok()) return BadInput(g.status());
    std::optional<CapChoice> choice;
    if (auto_cap) {
      absl::StatusOr<CapChoice> c =
          ChooseBucketCap(*g, bo.mode, comm, first.value_or(kDefaultFirstBucketCapBytes));
      if (!c.ok()) return BadInput(c.status());
      choice = std::move(*c);
      bo.bucket_cap_bytes = choice->cap_bytes;
      std::fputs(FormatCapChoice(*choice).c_str(), out_);
    }
    bo.first_bucket_cap_bytes =
        std::min(first.value_or(kDefaultFirstBucketCapBytes), bo.bucket_cap_bytes);
    PartitionOptions po;
    po.buckets = bo;
    absl::StatusOr<PartitionResult> r = DdpPartitioner(po).Run(*g);
    if (!r.ok()) return BadInput(r.status());
    std::fputs(FormatBucketTable(*g, *r).c_str(), out_);
    if (auto it = a.flags.find("json"); it != a.flags.end()) {
      absl::Status s = WriteTextFile(ResolvePath(it->second),
                                     PartitionResultJson(*g, *r, choice ? &*choice : nullptr));
      if (!s.ok()) return BadInput(s);
    }
    if (auto it = a.flags.find("output"); it != a.flags.end()) {
      absl::Status s = WriteGraphJsonFile(r->split ? r->pieces.outer : *g, ResolvePath(it->second));
      if (!s.ok()) return BadInput(s);
    }
    if (auto it = a.flags.find("subgraphs-dir"); it != a.flags.end()) {
      const std::string dir = ResolvePath(it->second);
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return BadInput(absl::NotFoundError(
            absl::StrCat("cannot create \"", dir, "\": ", std::strerror(errno))));
      }
      for (const Submodule& sm : r->pieces.submodules) {
        absl::Status s = WriteGraphJsonFile(sm.graph, absl::StrCat(dir, "/", sm.name, ".json"));
        if (!s.ok()) return BadInput(s);
      }
    }
    return kExitOk;
  }

  // Reads --world-size / --latency-us / --bandwidth into `model`.
  bool CollectiveFlags(const Args& a, CollectiveModel* model, int* rc, const char* usage) {
    int64_t world = model->world_size;
    if (!IntFlag(a, "world-size", 1, &world, rc, usage)) return false;
    if (world > (int64_t{1} << 24)) {
      *rc = Usage("--world-size is too large", usage);
      return false;
    }
    model->world_size = static_cast<int>(world);
    double gbps = 0;
    if (!DoubleFlag(a, "bandwidth", &gbps, rc, usage)) return false;
    if (gbps > 0) model->bandwidth_bytes_per_s = gbps * 1e9;
    if (auto it = a.flags.find("latency-us"); it != a.flags.end()) {
      double us = 0;
      if (!absl::SimpleAtod(it->second, &us) || !(us >= 0) || us > 1e9) {
        *rc = Usage("--latency-us must be a number >= 0", usage);
        return false;
      }
      model->latency_s = us * 1e-6;
    }
    return true;
  }

  int ScheduleCmd(const std::vector<std::string>& argv) {
    Args a;
    if (auto e = ParseArgs(argv, 1,
                           {"algorithm", "backward", "world-size", "latency-us", "bandwidth",
                            "json", "output", "trace", "memory-limit", "max-inflight"},
                           &a)) {
      return Usage(*e, kScheduleUsage);
    }
    if (a.flags.count("help")) return Help("schedule");
    if (a.positional.size() != 1) return Usage("schedule takes exactly one file", kScheduleUsage);
    const std::string algorithm =
        a.flags.count("algorithm") ? a.flags.at("algorithm") : "lookahead";
    absl::StatusOr<std::vector<NodeId>> (*scheduler)(const Graph&) = nullptr;
    if (algorithm == "fast_free") scheduler = &FastFreeSchedule;
    if (algorithm == "list") scheduler = &ListSchedule;
    if (algorithm == "simple_prefetch") scheduler = &SimplePrefetchSchedule;
    if (scheduler == nullptr && algorithm != "lookahead") {
      return Usage(absl::StrCat("--algorithm must be lookahead, fast_free, list or "
                                "simple_prefetch, got \"",
                                algorithm, "\""),
                   kScheduleUsage);
    }
    std::optional<int64_t> limit;
    if (auto it = a.flags.find("memory-limit"); it != a.flags.end()) {
      if (algorithm != "lookahead") {
        return Usage(
            "--memory-limit applies to the lookahead scheduler (the DeepCompile "
            "baselines ignore memory)",
            kScheduleUsage);
      }
      absl::StatusOr<int64_t> l = ParseSize(it->second);
      if (!l.ok())
        return Usage(absl::StrCat("--memory-limit: ", l.status().message()), kScheduleUsage);
      limit = *l;
    }
    std::optional<int> max_inflight;
    if (auto it = a.flags.find("max-inflight"); it != a.flags.end()) {
      int n = 0;
      if (algorithm != "lookahead") {
        return Usage("--max-inflight applies to the lookahead scheduler", kScheduleUsage);
      }
      if (!absl::SimpleAtoi(it->second, &n) || n < 0) {
        return Usage(
            absl::StrCat("--max-inflight: expected an integer >= 0, got \"", it->second, "\""),
            kScheduleUsage);
      }
      max_inflight = n;
    }
    CollectiveModel model;
    int rc = kExitOk;
    if (!CollectiveFlags(a, &model, &rc, kScheduleUsage)) return rc;
    absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(a.positional[0]));
    if (!g.ok()) return BadInput(g.status());
    if (!HasZero3Ops(*g)) {
      absl::StatusOr<bool> inserted = Zero3Insertion(a.flags.count("backward") ? 1 : 0).Run(&*g);
      if (!inserted.ok()) return BadInput(inserted.status());
    }
    std::optional<LookaheadResult> ours;
    absl::StatusOr<std::vector<NodeId>> order;
    const auto scheduler_start = std::chrono::steady_clock::now();
    if (scheduler != nullptr) {
      order = (*scheduler)(*g);
    } else {
      absl::StatusOr<LookaheadResult> r = LookaheadPrefetchSchedule(*g, limit, model, max_inflight);
      if (!r.ok()) return BadInput(r.status());
      ours = std::move(*r);
      order = ours->order;
      // Selective unsharding: the parameters ours keeps gathered become persistent
      // allgathers without releases, in the graph that is verified, simulated and written.
      if (absl::Status s = MakeResident(&*g, ours->resident, &*order); !s.ok()) return BadInput(s);
      if (absl::Status s = BucketReduces(&*g, *order, ours->reduce_bucket_bytes); !s.ok()) {
        return BadInput(s);
      }
    }
    if (!order.ok()) return BadInput(order.status());
    const double scheduler_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - scheduler_start).count();
    if (absl::Status s = VerifySchedule(*g, *order); !s.ok()) return BadInput(s);
    absl::StatusOr<SimulationResult> r = Simulate(*g, *order, model);
    if (!r.ok()) return BadInput(r.status());
    const int64_t peak_gathered = PeakGatheredBytes(*g, *order);
    std::fprintf(out_,
                 "%s: %zu nodes; peak gathered %s, peak memory %s, step %s (lower bound %s, "
                 "exposed communication %s)\n",
                 algorithm.c_str(), order->size(), FormatBytes(peak_gathered).c_str(),
                 FormatBytes(r->peak_memory_bytes).c_str(), FormatSeconds(r->step_time_s).c_str(),
                 FormatSeconds(r->lower_bound_s).c_str(), FormatSeconds(r->exposed_comm_s).c_str());
    if (ours && !ours->resident.empty()) {
      int64_t bytes = 0;
      for (int64_t ds : ours->resident) bytes += g->params()[ds].bytes;
      std::fprintf(
          out_, "lookahead: k = %d; %zu parameters kept resident (%s)%s%s\n", ours->lookahead,
          ours->resident.size(), FormatBytes(bytes).c_str(),
          ours->reduce_bucket_bytes > 0 ? "; reduce-scatters bucketed at " : "",
          ours->reduce_bucket_bytes > 0 ? FormatBytes(ours->reduce_bucket_bytes).c_str() : "");
    }
    if (auto it = a.flags.find("json"); it != a.flags.end()) {
      std::string json = "{\"format\": \"overlap-result\", \"version\": 1, \"algorithm\": ";
      AppendJsonString(&json, algorithm);
      json.append(", \"order\": [");
      for (size_t i = 0; i < order->size(); ++i) {
        if (i) json.append(", ");
        AppendJsonString(&json, g->node((*order)[i]).name());
      }
      // The simulator's peak_gathered_bytes is the same walk over the order.
      absl::StrAppend(&json, "], ", SimulationJsonFields(*r), ", \"scheduler_s\": ");
      AppendJsonDouble(&json, scheduler_s);
      if (ours) {
        absl::StrAppend(&json, ", \"lookahead\": ", ours->lookahead,
                        ", \"reduce_bucket_bytes\": ", ours->reduce_bucket_bytes,
                        ", \"resident_params\": [");
        for (size_t i = 0; i < ours->resident.size(); ++i) {
          if (i) json.append(", ");
          AppendJsonString(&json, g->params()[ours->resident[i]].name);
        }
        json.append("]");
        if (limit) {
          absl::StrAppend(&json, ", \"memory_limit_bytes\": ", *limit,
                          ", \"feasible\": ", ours->feasible ? "true" : "false");
          if (!ours->feasible)
            absl::StrAppend(&json, ", \"min_feasible_bytes\": ", ours->min_feasible_bytes);
        }
      }
      json.append("}\n");
      absl::Status s = WriteTextFile(ResolvePath(it->second), json);
      if (!s.ok()) return BadInput(s);
    }
    if (auto it = a.flags.find("output"); it != a.flags.end()) {
      // A graph file has its output node last, wherever the schedule put it.
      std::vector<NodeId> file_order;
      for (NodeId id : *order) {
        if (g->node(id).op() != Op::kOutput) file_order.push_back(id);
      }
      file_order.push_back(g->last());
      Graph scheduled = *g;
      if (absl::Status s = scheduled.SetOrder(file_order); !s.ok()) return BadInput(s);
      absl::Status s = WriteGraphJsonFile(scheduled, ResolvePath(it->second));
      if (!s.ok()) return BadInput(s);
    }
    if (auto it = a.flags.find("trace"); it != a.flags.end()) {
      absl::Status s = WriteTextFile(ResolvePath(it->second), ChromeTraceJson(*g, *r));
      if (!s.ok()) return BadInput(s);
    }
    if (ours && !ours->feasible) {
      std::fprintf(err_,
                   "overlap: error: no schedule fits the memory limit of %s; the smallest "
                   "feasible budget found is %s (%lld bytes)\n",
                   FormatBytes(*limit).c_str(), FormatBytes(ours->min_feasible_bytes).c_str(),
                   static_cast<long long>(ours->min_feasible_bytes));
      return kExitBadInput;
    }
    return kExitOk;
  }

  int SimulateCmd(const std::vector<std::string>& argv) {
    Args a;
    if (auto e =
            ParseArgs(argv, 1, {"world-size", "latency-us", "bandwidth", "json", "trace"}, &a)) {
      return Usage(*e, kSimulateUsage);
    }
    if (a.flags.count("help")) return Help("simulate");
    if (a.positional.size() != 1) return Usage("simulate takes exactly one file", kSimulateUsage);
    CollectiveModel model;
    int rc = kExitOk;
    if (!CollectiveFlags(a, &model, &rc, kSimulateUsage)) return rc;
    absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(a.positional[0]));
    if (!g.ok()) return BadInput(g.status());
    absl::StatusOr<SimulationResult> r = Simulate(*g, g->OrderVector(), model);
    if (!r.ok()) return BadInput(r.status());
    std::fprintf(out_,
                 "peak memory %s, peak gathered %s, step %s (compute %s, communication %s, "
                 "exposed %s, lower bound %s)\n",
                 FormatBytes(r->peak_memory_bytes).c_str(),
                 FormatBytes(r->peak_gathered_bytes).c_str(), FormatSeconds(r->step_time_s).c_str(),
                 FormatSeconds(r->compute_s).c_str(), FormatSeconds(r->comm_s).c_str(),
                 FormatSeconds(r->exposed_comm_s).c_str(), FormatSeconds(r->lower_bound_s).c_str());
    if (!HasZero3Ops(*g)) {
      std::fputs("(no ZeRO-3 ops in the graph: compute only)\n", out_);
    }
    if (auto it = a.flags.find("json"); it != a.flags.end()) {
      absl::Status s = WriteTextFile(
          ResolvePath(it->second), absl::StrCat("{\"format\": \"overlap-result\", \"version\": 1, ",
                                                SimulationJsonFields(*r), "}\n"));
      if (!s.ok()) return BadInput(s);
    }
    if (auto it = a.flags.find("trace"); it != a.flags.end()) {
      absl::Status s = WriteTextFile(ResolvePath(it->second), ChromeTraceJson(*g, *r));
      if (!s.ok()) return BadInput(s);
    }
    return kExitOk;
  }

  static absl::Status WriteTextFile(const std::string& path, const std::string& text) {
    std::FILE* f = path == "-" ? stdout : std::fopen(path.c_str(), "wb");
    if (f == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("cannot open \"", path, "\" for writing: ", std::strerror(errno)));
    }
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (f != stdout && std::fclose(f) != 0) return absl::InternalError("close failed");
    if (!ok) return absl::InternalError(absl::StrCat("write to \"", path, "\" failed"));
    return absl::OkStatus();
  }

  int Demo(const std::vector<std::string>& argv) {
    Args a;
    if (auto e = ParseArgs(argv, 1, {"lifted"}, &a)) return Usage(*e, kDemoUsage);
    if (a.flags.count("help")) return Help("demo");
    if (a.positional.size() > 1) return Usage("demo takes at most one model name", kDemoUsage);
    const std::string model = a.positional.empty() ? std::string(kDefaultModel) : a.positional[0];
    int rc = kExitOk;
    using Clock = std::chrono::steady_clock;
    auto t0 = Clock::now();
    std::optional<Graph> g = BuildRequested(model, a, &rc, kDemoUsage);
    if (!g) return rc;
    auto t1 = Clock::now();
    const std::string json = WriteGraphJson(*g);
    absl::StatusOr<Graph> back = ReadGraphJson(json);
    if (!back.ok()) return BadInput(back.status());
    auto t2 = Clock::now();
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::fprintf(out_, "== overlap demo: %s (%s parameters) ==\n", model.c_str(),
                 a.flags.count("lifted") ? "lifted" : "module-owned");
    std::fprintf(out_, "[1] built the forward graph in %.1f ms\n", ms(t1 - t0));
    std::fprintf(out_,
                 "[2] wrote %s of interchange JSON and read it back in %.1f ms: round trip %s, "
                 "verifier %s\n",
                 FormatBytes(static_cast<int64_t>(json.size())).c_str(), ms(t2 - t1),
                 *back == *g ? "exact" : "MISMATCH", Verify(*back).ok() ? "ok" : "FAILED");
    std::fputs("[3] summary:\n", out_);
    std::fputs(FormatSummary(*back, Summarize(*back)).c_str(), out_);

    // [4] DDP partitioning: PyTorch's reference next to ours, and the cap the model picks.
    std::fputs("[4] DDP bucket partitioning (25 MiB cap, first bucket 1 MiB):\n", out_);
    for (PartitionMode mode : {PartitionMode::kReference, PartitionMode::kDefault}) {
      PartitionOptions po;
      po.buckets.mode = mode;
      auto t3 = Clock::now();
      absl::StatusOr<PartitionResult> r = DdpPartitioner(po).Run(*back);
      if (!r.ok()) return BadInput(r.status());
      int empty = 0;
      for (const Submodule& s : r->pieces.submodules) empty += s.outputs.empty();
      int64_t counted = 0;
      for (const Bucket& b : r->buckets) counted += b.size_bytes;
      std::fprintf(out_,
                   "  %-9s: %zu buckets, %s counted, %zu subgraphs (%d without outputs), "
                   "split in %.1f ms\n",
                   std::string(PartitionModeName(mode)).c_str(), r->buckets.size(),
                   FormatBytes(counted).c_str(), r->pieces.submodules.size(), empty,
                   ms(Clock::now() - t3));
    }
    absl::StatusOr<CapChoice> cap =
        ChooseBucketCap(*back, PartitionMode::kDefault, CollectiveModel());
    if (!cap.ok()) return BadInput(cap.status());
    for (const CapCandidate& c : cap->candidates) {
      if (c.cap_bytes == kDefaultBucketCapBytes || c.cap_bytes == cap->cap_bytes) {
        std::fprintf(out_, "  cap %-9s -> %2d buckets, predicted exposed allreduce %s%s\n",
                     FormatBytes(c.cap_bytes).c_str(), c.buckets,
                     FormatSeconds(c.exposed_s).c_str(),
                     c.cap_bytes == cap->cap_bytes ? "  (best of --bucket-cap auto)" : "");
      }
    }
    // [5] ZeRO-3: the lifted graph with allgather / wait / release inserted, simulated in
    // insertion order and in DeepSpeed's fast_free order (reference implementation).
    {
      ModelOptions lifted;
      lifted.style = ParamStyle::kLifted;
      Args la = a;
      la.flags["lifted"] = "";
      std::optional<Graph> z = BuildRequested(model, la, &rc, kDemoUsage);
      if (!z) return rc;
      absl::StatusOr<bool> inserted = Zero3Insertion(GraphKind::kForward).Run(&*z);
      if (!inserted.ok()) return BadInput(inserted.status());
      int64_t gathers = 0;
      for (NodeId id : z->order()) gathers += z->node(id).target() == kAllgatherTarget;
      std::fprintf(
          out_,
          "[5] ZeRO-3 on the lifted graph (32 ranks, 20 us, 50 GB/s): %lld allgathers inserted\n",
          static_cast<long long>(gathers));
      absl::StatusOr<std::vector<NodeId>> ff = FastFreeSchedule(*z);
      if (!ff.ok()) return BadInput(ff.status());
      absl::StatusOr<std::vector<NodeId>> ls = ListSchedule(*z);
      if (!ls.ok()) return BadInput(ls.status());
      absl::StatusOr<std::vector<NodeId>> sp = SimplePrefetchSchedule(*z);
      if (!sp.ok()) return BadInput(sp.status());
      absl::StatusOr<SimulationResult> ff_sim = Simulate(*z, *ff);
      if (!ff_sim.ok()) return BadInput(ff_sim.status());
      // Ours, with a budget of 1.25x fast_free's simulated peak.
      absl::StatusOr<LookaheadResult> ours =
          LookaheadPrefetchSchedule(*z, ff_sim->peak_memory_bytes * 5 / 4);
      if (!ours.ok()) return BadInput(ours.status());
      for (const auto& [label, order] :
           {std::pair<const char*, std::vector<NodeId>>{"insertion order", z->OrderVector()},
            {"list           ", *ls},
            {"simple_prefetch", *sp},
            {"fast_free      ", *ff},
            {"lookahead (ours, budget 1.25x fast_free's peak)", ours->order}}) {
        Graph zr = *z;  // ours' resident parameters applied (the others have none)
        std::vector<NodeId> applied = order;
        if (order == ours->order) {
          if (absl::Status s = MakeResident(&zr, ours->resident, &applied); !s.ok())
            return BadInput(s);
          if (absl::Status s = BucketReduces(&zr, applied, ours->reduce_bucket_bytes); !s.ok()) {
            return BadInput(s);
          }
        }
        absl::StatusOr<SimulationResult> sim = Simulate(zr, applied);
        if (!sim.ok()) return BadInput(sim.status());
        std::fprintf(
            out_, "  %s: peak gathered %s, peak memory %s, step %s (lower bound %s, exposed %s)\n",
            label, FormatBytes(sim->peak_gathered_bytes).c_str(),
            FormatBytes(sim->peak_memory_bytes).c_str(), FormatSeconds(sim->step_time_s).c_str(),
            FormatSeconds(sim->lower_bound_s).c_str(), FormatSeconds(sim->exposed_comm_s).c_str());
      }
      int64_t resident_bytes = 0;
      for (int64_t ds : ours->resident) resident_bytes += z->params()[ds].bytes;
      std::fprintf(out_,
                   "  ours: k = %d allgathers in flight ahead of compute; %zu of %zu parameters "
                   "kept resident (%s) with the memory left over (selective unsharding)\n",
                   ours->lookahead, ours->resident.size(), z->params().size(),
                   FormatBytes(resident_bytes).c_str());
    }
    std::fputs(
        "next: `overlap gen <model> -o g.json`, `overlap inspect g.json`, "
        "`overlap partition g.json --bucket-cap auto`, `overlap schedule z.json` (see --help)\n",
        out_);
    return *back == *g ? kExitOk : kExitBadInput;
  }

  std::FILE* out_;
  std::FILE* err_;
};

}  // namespace

int RunCli(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  return Cli(out, err).Run(args);
}

}  // namespace overlap
