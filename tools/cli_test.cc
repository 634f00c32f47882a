// The CLI end to end, in-process: exit codes, messages, and the first user's flow (gen
// llama-70b -o g.json, then inspect g.json prints 68,976,648,192 parameters).
#include "tools/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/json_reader.h"
#include "gtest/gtest.h"
#include "schedule/scheduler_registry.h"
#include "tools/commands.h"
#include "tools/compute_hand_off.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code;
  std::string out, err;
};

std::string Slurp(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

Result Overlap(std::vector<std::string> args) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  int code = RunCli(args, out, err);
  return {code, Slurp(out), Slurp(err)};
}

// The lines of `text`.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string Tmp(const std::string& name) { return testing::TempDir() + "/" + name; }

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A link planted at an output path (another user's, in a shared folder such as /tmp) that
// points at a file this user can write: every output replaces the link, never writes its
// target, through the one writer they share (graph/output_file.h).
TEST(CliOutputTest, EveryOutputReplacesALinkAtItsPathAndLeavesItsTargetUnchanged) {
  const std::string victim = Tmp("victim.txt");
  WriteFile(victim, "victim");
  const std::string graph = Tmp("links_mlp.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "-o", graph}).code, kExitOk);
  const std::string lifted = Tmp("links_mlp_lifted.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "--lifted", "-o", lifted}).code, kExitOk);
  const std::string pieces = Tmp("links_pieces");
  mkdir(pieces.c_str(), 0755);
  std::vector<std::string> links;
  const auto link = [&](const std::string& path) {
    unlink(path.c_str());
    EXPECT_EQ(symlink(victim.c_str(), path.c_str()), 0) << path;
    links.push_back(path);
    return path;
  };
  link(pieces + "/submod_0.json");  // a file --subgraphs-dir writes
  const std::vector<std::vector<std::string>> commands = {
      {"gen", "mlp", "-o", link(Tmp("link_gen.json"))},
      {"print", graph, "-o", link(Tmp("link_print.txt"))},
      {"schedule", lifted, "-o", link(Tmp("link_s.json")), "--json", link(Tmp("link_s_r.json")),
       "--trace", link(Tmp("link_s_t.json")), "--svg", link(Tmp("link_s.svg"))},
      {"partition", graph, "--mode", "reference", "--bucket-cap", "25MiB", "--dot",
       link(Tmp("link_p.dot")), "--subgraphs-dir", pieces},
      {"train", "--model", "mlp", "--steps", "1", "--save", link(Tmp("link_t.safetensors"))},
  };
  for (const std::vector<std::string>& args : commands) {
    Result r = Overlap(args);
    EXPECT_EQ(r.code, kExitOk) << args[0] << ": " << r.err;
  }
  EXPECT_EQ(ReadAll(victim), "victim");
  for (const std::string& path : links) {
    struct stat st {};
    ASSERT_EQ(lstat(path.c_str(), &st), 0) << path;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << path;
    EXPECT_NE(ReadAll(path), "victim") << path;
  }
}

TEST(CliTest, GenLlama70bThenInspectPrintsTheExactParameterCount) {
  const std::string path = Tmp("llama70b.json");
  Result gen = Overlap({"gen", "llama-70b", "-o", path});
  ASSERT_EQ(gen.code, kExitOk) << gen.err;
  Result inspect = Overlap({"inspect", path});
  ASSERT_EQ(inspect.code, kExitOk) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("parameters: 68,976,648,192"));
  EXPECT_THAT(inspect.out, HasSubstr("critical path"));
  EXPECT_THAT(inspect.out, HasSubstr("call_module: "));
}

// What the exporter writes (tools/overlap_export, torch's AOT graphs): the default loss
// (aten.sum.default, aten.mean.default: no dim, no keepdim), 1-d and 3-d convolutions, a
// bool mask summed (int64) and multiplied in (float32). inspect --shapes checks every node.
TEST(CliTest, InspectShapesAcceptsWhatTheExporterWrites) {
  const std::string graph = R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x1", "op": "placeholder", "target": "x1", "args": [],
     "meta": {"shape": [2, 3, 16], "dtype": "float32"}},
    {"name": "w1", "op": "placeholder", "target": "w1", "args": [],
     "meta": {"shape": [4, 3, 3], "dtype": "float32"}},
    {"name": "b1", "op": "placeholder", "target": "b1", "args": [],
     "meta": {"shape": [4], "dtype": "float32"}},
    {"name": "x3", "op": "placeholder", "target": "x3", "args": [],
     "meta": {"shape": [1, 2, 4, 8, 8], "dtype": "float32"}},
    {"name": "w3", "op": "placeholder", "target": "w3", "args": [],
     "meta": {"shape": [3, 2, 3, 3, 3], "dtype": "float32"}},
    {"name": "conv1d", "op": "call_function", "target": "aten.convolution.default",
     "args": ["%x1", "%w1", "%b1", [1], [0], [1], false, [0], 1],
     "meta": {"shape": [2, 4, 14], "dtype": "float32"}},
    {"name": "conv3d", "op": "call_function", "target": "aten.convolution.default",
     "args": ["%x3", "%w3", null, [1, 1, 1], [1, 1, 1], [1, 1, 1], false, [0, 0, 0], 1],
     "meta": {"shape": [1, 3, 4, 8, 8], "dtype": "float32"}},
    {"name": "mask", "op": "call_function", "target": "aten.gt.Scalar", "args": ["%conv1d", 0],
     "meta": {"shape": [2, 4, 14], "dtype": "bool"}},
    {"name": "count", "op": "call_function", "target": "aten.sum.default", "args": ["%mask"],
     "meta": {"shape": [], "dtype": "COUNT_DTYPE"}},
    {"name": "masked", "op": "call_function", "target": "aten.mul.Tensor",
     "args": ["%conv1d", "%mask"], "meta": {"shape": [2, 4, 14], "dtype": "float32"}},
    {"name": "sum", "op": "call_function", "target": "aten.sum.default", "args": ["%masked"],
     "meta": {"shape": [], "dtype": "float32"}},
    {"name": "mean", "op": "call_function", "target": "aten.mean.default", "args": ["%conv3d"],
     "meta": {"shape": [], "dtype": "float32"}},
    {"name": "loss", "op": "call_function", "target": "aten.add.Tensor", "args": ["%sum", "%mean"],
     "meta": {"shape": [], "dtype": "float32"}},
    {"name": "output", "op": "output", "target": "output", "args": [["%loss", "%count"]]}],
    "params": []})";
  auto with_count = [&](const std::string& dtype) {
    std::string text = graph;
    text.replace(text.find("COUNT_DTYPE"), 11, dtype);
    return text;
  };
  const std::string path = Tmp("exported_shapes.json");
  WriteFile(path, with_count("int64"));
  Result r = Overlap({"inspect", path, "--shapes"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("shapes: 8 nodes match their op's rule, 0 without a stated type"));
  EXPECT_THAT(r.out, Not(HasSubstr("without a rule")));
  // A bool sum stated as bool (what the rules once gave) is named: torch's is int64.
  const std::string wrong = Tmp("exported_shapes_bool_sum.json");
  WriteFile(wrong, with_count("bool"));
  Result bad = Overlap({"inspect", wrong, "--shapes"});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_THAT(bad.err, HasSubstr("node \"count\": its metadata says [] bool but aten.sum.default"));
  EXPECT_THAT(bad.err, HasSubstr("gives [] int64"));
}

TEST(CliTest, GenWritesToStdoutAndHonoursOptions) {
  Result r = Overlap({"gen", "gpt2", "--lifted", "--layers", "2", "--seq", "64"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"format\": \"overlap-graph\""));
  EXPECT_THAT(r.out, HasSubstr("\"param\": \"transformer.h.1.attn.c_attn.weight\""));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("transformer.h.2.")));
  Result random = Overlap({"gen", "random", "--nodes", "40", "--seed", "7"});
  ASSERT_EQ(random.code, kExitOk);
  EXPECT_EQ(random.out, Overlap({"gen", "random", "--nodes=40", "--seed=7"}).out);
}

TEST(CliTest, RelativePathsResolveAgainstBuildWorkingDirectory) {
  setenv("BUILD_WORKING_DIRECTORY", testing::TempDir().c_str(), 1);
  Result gen = Overlap({"gen", "mlp", "-o", "rel.json"});
  unsetenv("BUILD_WORKING_DIRECTORY");
  ASSERT_EQ(gen.code, kExitOk) << gen.err;
  EXPECT_EQ(Overlap({"inspect", Tmp("rel.json")}).code, kExitOk);
}

TEST(CliTest, DemoShowsTheRoundTripAndSummary) {
  Result r = Overlap({"demo"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("overlap demo: gpt2"));
  EXPECT_THAT(r.out, HasSubstr("round trip exact, verifier ok"));
  EXPECT_THAT(r.out, HasSubstr("parameters: 124,439,808"));
  // The step below every baseline: levers pulled, and they fit.
  EXPECT_THAT(r.out, HasSubstr("at 70% of that"));
  EXPECT_THAT(r.out, HasSubstr("below every baseline): lookahead: step"));
}

TEST(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Overlap({}).code, kExitUsage);
  EXPECT_EQ(Overlap({"frobnicate"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen"}).code, kExitUsage);
  Result unknown_model = Overlap({"gen", "gpt5"});
  EXPECT_EQ(unknown_model.code, kExitUsage);
  EXPECT_THAT(unknown_model.err, HasSubstr("unknown model \"gpt5\""));
  EXPECT_EQ(Overlap({"gen", "gpt2", "--bogus"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "gpt2", "--batch", "zero"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "gpt2", "--nodes", "5"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "random", "--nodes", "1"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "gpt2", "-o"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"inspect"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"inspect", "a", "b"}).code, kExitUsage);
}

TEST(CliTest, HelpOnEveryCommand) {
  for (const char* cmd : {"gen", "inspect", "print", "partition", "schedule", "simulate", "demo"}) {
    Result r = Overlap({cmd, "--help"});
    EXPECT_EQ(r.code, kExitOk) << cmd;
    EXPECT_THAT(r.out, HasSubstr("usage: overlap")) << cmd;
    EXPECT_EQ(Overlap({"help", cmd}).code, kExitOk);
  }
  EXPECT_EQ(Overlap({"--help"}).code, kExitOk);
}

// Each class of bad input exits 1 with a message naming the fault.
TEST(CliTest, BadInputExitsOneNamingTheFault) {
  const std::string head = R"({"format": "overlap-graph", "version": 1, "nodes": [)";
  const std::string x = R"({"name": "x", "op": "placeholder", "target": "x", "args": []})";
  const std::string out =
      R"({"name": "output", "op": "output", "target": "output", "args": ["%x"]})";
  struct Case {
    const char* what;
    std::string text;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"malformed", head + x, "line 1"},
      {"wrong type", head + R"({"name": 3})", "field \"name\" must be a string"},
      {"unknown op", head + R"({"name": "x", "op": "call", "target": "x", "args": []}]})",
       "unknown op \"call\""},
      {"duplicate", head + x + "," + x + "," + out + "]}", "duplicate node name \"x\""},
      {"malformed name",
       head + R"({"name": "9x", "op": "placeholder", "target": "x", "args": []}]})",
       "\"9x\" is malformed"},
      {"later ref",
       head + R"({"name": "y", "op": "call_function", "target": "f", "args": ["%z"]},)" +
           R"({"name": "z", "op": "placeholder", "target": "z", "args": []}]})",
       "node \"y\": argument \"%z\" is not a node defined earlier"},
      {"no output", head + x + "]}", "no output node"},
      {"extra output",
       head + x + "," + out + "," +
           R"({"name": "o2", "op": "output", "target": "output", "args": []}]})",
       "second output node"},
      {"negative",
       head +
           R"({"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"tensor_size": -1}},)" +
           out + "]}",
       "node \"x\": field \"meta.tensor_size\" must be >= 0"},
      {"overflow",
       head + x + "," + out +
           R"(], "params": [{"name": "a", "owner": "x", "bytes": 9223372036854775807},)"
           R"({"name": "b", "owner": "x", "bytes": 1}]})",
       "the sum of parameter bytes overflows"},
      // A call_module node makes the graph module-style, where every owner must exist (in a
      // lifted graph an unknown owner is an absent row: graph.h, ClassifyParams).
      {"unknown owner",
       head + x + "," + R"({"name": "fc", "op": "call_module", "target": "fc", "args": ["%x"]},)" +
           out + R"(], "params": [{"name": "a", "owner": "nobody", "bytes": 4}]})",
       "owner is not"},
      {"tied sizes",
       head + x + "," + out +
           R"(], "params": [{"name": "a", "owner": "x", "bytes": 4},)"
           R"({"name": "b", "owner": "x", "bytes": 8, "storage": "a"}]})",
       "shares storage \"a\""},
  };
  for (const Case& c : cases) {
    const std::string path = Tmp("bad.json");
    WriteFile(path, c.text);
    Result r = Overlap({"inspect", path});
    EXPECT_EQ(r.code, kExitBadInput) << c.what;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.what;
    EXPECT_THAT(r.err, HasSubstr(path)) << c.what;  // names the file too
  }
  Result missing = Overlap({"inspect", Tmp("does-not-exist.json")});
  EXPECT_EQ(missing.code, kExitBadInput);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
  Result unwritable = Overlap({"gen", "mlp", "-o", "/nonexistent-dir/g.json"});
  EXPECT_EQ(unwritable.code, kExitBadInput);
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliPartitionTest, EveryBuiltInModelInBothModesPrintsTheBucketTable) {
  for (const char* model : {"mlp", "gpt2", "llama-7b", "llama-70b", "resnet18", "moe"}) {
    const std::string path = Tmp(std::string(model) + ".json");
    ASSERT_EQ(Overlap({"gen", model, "-o", path}).code, kExitOk) << model;
    for (const char* mode : {"reference", "default"}) {
      Result r = Overlap({"partition", path, "--mode", mode});
      EXPECT_EQ(r.code, kExitOk) << model << " " << mode << ": " << r.err;
      EXPECT_THAT(r.out, HasSubstr("index    size (bytes)")) << model;
      EXPECT_THAT(r.out, HasSubstr(std::string("DDP buckets (") + mode + " mode")) << model;
    }
  }
}

TEST(CliPartitionTest, WritesResultOuterGraphAndSubgraphs) {
  const std::string path = Tmp("mlp_p.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "-o", path}).code, kExitOk);
  const std::string dir = Tmp("pieces");
  Result r = Overlap({"partition", path, "--mode", "reference", "--bucket-cap", "25MiB", "--json",
                      Tmp("result.json"), "-o", Tmp("outer.json"), "--subgraphs-dir", dir});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::ifstream in(Tmp("result.json"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"call_order\": [\"submod_0\", \"submod_1\", \"submod_2\"]"));
  EXPECT_EQ(Overlap({"inspect", Tmp("outer.json")}).code, kExitOk);
  for (const char* s : {"/submod_0.json", "/submod_1.json", "/submod_2.json"}) {
    EXPECT_EQ(Overlap({"inspect", dir + s}).code, kExitOk) << s;
  }
}

TEST(CliPartitionTest, AutoCapPrintsTheCandidates) {
  const std::string path = Tmp("gpt2_auto.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--layers", "2", "-o", path}).code, kExitOk);
  Result r = Overlap(
      {"partition", path, "--bucket-cap", "auto", "--world-size", "8", "--json", Tmp("auto.json")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bucket cap candidates"));
  EXPECT_THAT(r.out, HasSubstr("<- chosen"));
  std::ifstream in(Tmp("auto.json"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(),
              HasSubstr("\"cap_candidates\": [{\"cap_bytes\": 1048576, \"exposed_s\": "));
}

TEST(CliPartitionTest, UsageErrors) {
  const std::string path = Tmp("mlp_u.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "-o", path}).code, kExitOk);
  Result first = Overlap({"partition", path, "--bucket-cap", "1MiB", "--first-bucket-cap", "2MiB"});
  EXPECT_EQ(first.code, kExitUsage);
  EXPECT_THAT(first.err,
              HasSubstr("--first-bucket-cap (2097152 bytes) exceeds --bucket-cap (1048576 bytes)"));
  EXPECT_EQ(Overlap({"partition", path, "--mode", "fast"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"partition", path, "--bucket-cap", "25 parsecs"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"partition", path, "--world-size", "0"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"partition"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"partition", Tmp("missing.json")}).code, kExitBadInput);
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliSimulateTest, SimulatesAGraphAndWritesResultAndTrace) {
  const std::string path = Tmp("mlp_sim.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "-o", path}).code, kExitOk);
  Result r = Overlap({"simulate", path, "--world-size", "8", "--json", Tmp("sim.json"), "--trace",
                      Tmp("trace.json")});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("peak memory"));
  EXPECT_THAT(r.out, HasSubstr("no ZeRO-3 ops"));
  std::ifstream in(Tmp("sim.json"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(),
              HasSubstr("\"format\": \"overlap-result\", \"version\": 1, \"peak_memory_bytes\": "));
  std::ifstream tin(Tmp("trace.json"));
  std::stringstream trace;
  trace << tin.rdbuf();
  EXPECT_THAT(trace.str(), HasSubstr("\"traceEvents\""));
  EXPECT_EQ(Overlap({"simulate", path, "--world-size", "0"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"simulate"}).code, kExitUsage);
}

// The text after `key` up to the next ';' (or the line's end).
std::string Field(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return "(no " + key + ")";
  const size_t end = text.find_first_of(";\n", at);
  return text.substr(at + key.size(), end - at - key.size());
}

// "N resident parameters (B)" in `text`.
std::string Residents(const std::string& text) {
  const size_t at = text.find(" resident parameters (");
  if (at == std::string::npos) return "(no residents)";
  const size_t start = text.rfind(' ', at - 1);
  return text.substr(start, text.find(')', at) - start);
}

// `plan -o` writes a step whose figures `simulate --backward-graph` reproduces, for every
// scheduler; a budget below every order's peak exits 1 naming the smallest feasible one.
// `plan -o` then `simulate` on the written pair: the same step figures (tiny presets: the
// property is the files', not the sizes').
void ExpectSimulateReproducesPlan(const std::vector<std::string>& plan_args,
                                  const std::string& algorithm, const std::string& what) {
  const std::string prefix = Tmp("planned");
  std::vector<std::string> args = plan_args;
  for (const std::string& a : {std::string("--algorithm"), algorithm, std::string("-o"), prefix,
                               std::string("--explain")}) {
    args.push_back(a);
  }
  Result r = Overlap(args);
  ASSERT_EQ(r.code, kExitOk) << what << ": " << r.err;
  Result sim = Overlap(
      {"simulate", prefix + ".forward.json", "--backward-graph", prefix + ".backward.json"});
  ASSERT_EQ(sim.code, kExitOk) << what << ": " << sim.err;
  const std::string summary = r.out.substr(r.out.find(algorithm + ": step"));
  EXPECT_EQ(Field(summary, "step "),
            Field(sim.out, "step ").substr(0, Field(summary, "step ").size()))
      << what;
  EXPECT_EQ(Field(summary, "peak "), Field(sim.out, "peak memory ")) << what;
  EXPECT_EQ(Residents(summary), Residents(sim.out)) << what;
}

TEST(CliPlanTest, PlanFiguresAreSimulateFiguresOfTheWrittenPair) {
  for (const char* model : {"mlp", "gpt2", "resnet18", "moe", "llama-7b"}) {
    const std::string f = Tmp(std::string(model) + "_plan_f.json");
    const std::string b = Tmp(std::string(model) + "_plan_b.json");
    ASSERT_EQ(Overlap({"gen", model, "--lifted", "--preset", "tiny", "-o", f}).code, kExitOk);
    ASSERT_EQ(Overlap({"gen", model, "--backward", "--preset", "tiny", "-o", b}).code, kExitOk);
    for (const char* algorithm : {"lookahead", "fast_free", "list", "simple_prefetch"}) {
      ExpectSimulateReproducesPlan({"plan", f, b}, algorithm, std::string(model) + " " + algorithm);
    }
  }
  const std::string f = Tmp("mlp_plan_f.json"), b = Tmp("mlp_plan_b.json");
  Result tight = Overlap({"plan", f, b, "--memory-limit", "1KiB"});
  EXPECT_EQ(tight.code, kExitBadInput);
  EXPECT_THAT(tight.err, HasSubstr("no step plan fits the memory budget of 1.00 KiB"));
}

// Below every order's floor, recomputation off: ours offloads, --explain says what, and the
// written pair (host-memory ops in it) simulates to the same step.
TEST(CliPlanTest, OffloadedPlansSimulateToTheSameStep) {
  const std::string f = Tmp("gpt2_offload_f.json"), b = Tmp("gpt2_offload_b.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--preset", "tiny", "-o", f}).code, kExitOk);
  ASSERT_EQ(Overlap({"gen", "gpt2", "--backward", "--preset", "tiny", "-o", b}).code, kExitOk);
  Result floor = Overlap({"plan", f, b, "--memory-limit", "1", "--no-offload", "--no-recompute"});
  ASSERT_EQ(floor.code, kExitBadInput);
  Result lowest = Overlap({"plan", f, b, "--memory-limit", "1", "--no-recompute"});
  ASSERT_EQ(lowest.code, kExitBadInput);
  auto bytes = [](const std::string& err) {
    const size_t at = err.rfind('(');
    return at == std::string::npos ? int64_t{-1} : std::stoll(err.substr(at + 1));
  };
  const int64_t without = bytes(floor.err), with = bytes(lowest.err);
  ASSERT_GT(without, 0) << floor.err;
  ASSERT_GT(with, 0) << lowest.err;
  ASSERT_LT(with, without);
  const std::string budget = std::to_string((with + without) / 2);
  Result r = Overlap({"plan", f, b, "--memory-limit", budget, "--no-recompute", "--explain"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("offloads "));
  EXPECT_THAT(r.out, HasSubstr("live in host memory between the forward and the backward"));
  ExpectSimulateReproducesPlan({"plan", f, b, "--memory-limit", budget, "--no-recompute"},
                               "lookahead", "gpt2 offloaded");
  // Turned off, it does not fit.
  EXPECT_EQ(
      Overlap({"plan", f, b, "--memory-limit", budget, "--no-offload", "--no-recompute"}).code,
      kExitBadInput);
}

TEST(CliSimulateTest, DemoShowsZero3Step) {
  Result r = Overlap({"demo", "mlp"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[6] ZeRO-3 on the AOT forward"));
  EXPECT_THAT(r.out, HasSubstr("fast_free"));
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliScheduleTest, EveryAlgorithmSchedulesVerifiesAndWritesResults) {
  const std::string path = Tmp("mlp_lifted.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--layers", "2", "-o", path}).code, kExitOk);
  // Every scheduler the registry lists, baselines first.
  std::vector<std::string> algorithms;
  for (const std::string& line : Lines(Overlap({"schedule", "--list-algorithms"}).out)) {
    algorithms.insert(algorithms.begin(), line.substr(0, line.find('\t')));
  }
  ASSERT_EQ(algorithms.size(), 5u);
  for (const std::string& algorithm : algorithms) {
    const std::string json = Tmp(algorithm + "_result.json");
    const std::string graph = Tmp(algorithm + "_graph.json");
    Result r = Overlap({"schedule", path, "--algorithm", algorithm, "--json", json, "-o", graph,
                        "--trace", Tmp("trace_s.json")});
    ASSERT_EQ(r.code, kExitOk) << algorithm << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("peak gathered"));
    std::ifstream in(json);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_THAT(text.str(), HasSubstr(std::string("\"algorithm\": \"") + algorithm +
                                      "\", \"order\": [\"input_ids\""));
    EXPECT_THAT(text.str(), HasSubstr("\"peak_gathered_bytes\": "));
    // The scheduled graph is a valid graph file whose ZeRO-3 ops are already in place.
    Result again = Overlap({"simulate", graph});
    EXPECT_EQ(again.code, kExitOk) << again.err;
    EXPECT_THAT(again.out, ::testing::Not(HasSubstr("no ZeRO-3 ops")));
  }
}

// --insert-only: the dc.* ops in place, nothing ordered; what another scheduler (DeepSpeed's
// own, tools/deepcompile_oracle.py) reads. Scheduling that file gives the same order as
// scheduling the plain graph.
TEST(CliScheduleTest, InsertOnlyWritesTheInsertedGraph) {
  const std::string path = Tmp("gpt2_for_insert.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--layers", "2", "-o", path}).code, kExitOk);
  const std::string inserted = Tmp("gpt2_inserted.json");
  Result r = Overlap({"schedule", path, "--insert-only", "-o", inserted});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::ifstream in(inserted);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"dc.allgather_param\""));
  const std::string a = Tmp("from_plain.json"), b = Tmp("from_inserted.json");
  ASSERT_EQ(Overlap({"schedule", path, "--algorithm", "fast_free", "--json", a}).code, kExitOk);
  ASSERT_EQ(Overlap({"schedule", inserted, "--algorithm", "fast_free", "--json", b}).code, kExitOk);
  auto order = [](const std::string& file) {
    std::ifstream f(file);
    std::stringstream t;
    t << f.rdbuf();
    const std::string s = t.str();
    return s.substr(s.find("\"order\""), s.find(']', s.find("\"order\"")) - s.find("\"order\""));
  };
  EXPECT_EQ(order(a), order(b));
  EXPECT_EQ(Overlap({"schedule", path, "--insert-only"}).code, kExitUsage);  // no -o
}

TEST(CliScheduleTest, ModuleOwnedParametersAndBadAlgorithmsAreRejected) {
  const std::string path = Tmp("mlp_module.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "-o", path}).code, kExitOk);
  Result r = Overlap({"schedule", path});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err,
              HasSubstr("parameter \"net.0.weight\" is owned by call_module node \"net_0\""));
  EXPECT_EQ(Overlap({"schedule", path, "--algorithm", "magic"}).code, kExitUsage);
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliScheduleTest, LookaheadIsTheDefaultAndHonoursTheMemoryLimit) {
  const std::string path = Tmp("gpt2_lookahead.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--layers", "2", "-o", path}).code, kExitOk);
  Result r = Overlap({"schedule", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("lookahead: "));
  const std::string json = Tmp("infeasible.json");
  Result tight = Overlap({"schedule", path, "--memory-limit", "1KiB", "--json", json});
  EXPECT_EQ(tight.code, kExitBadInput);
  EXPECT_THAT(tight.err, HasSubstr("the smallest feasible budget found is"));
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"budget_bytes\": 1024, \"memory_limit_bytes\": 1024, "
                                    "\"feasible\": false"));
  EXPECT_THAT(text.str(), HasSubstr("\"min_feasible_bytes\": "));
  // A baseline ignores the budget but reports whether it fits, and exits 0.
  Result list = Overlap({"schedule", path, "--algorithm", "list", "--memory-limit", "1KiB"});
  EXPECT_EQ(list.code, kExitOk) << list.err;
  EXPECT_THAT(list.out, HasSubstr("budget 1.00 KiB: the peak does NOT fit"));
  EXPECT_EQ(Overlap({"schedule", path, "--algorithm", "list", "--max-inflight", "2"}).code,
            kExitUsage);
  // --gathered-budget is fast_free_0.19's (DeepSpeed 0.19's SchedulerMemoryBudget): taken
  // there, 0 included; a usage error naming the scheduler elsewhere.
  for (const char* bytes : {"0", "1KiB", "1GiB"}) {
    Result r =
        Overlap({"schedule", path, "--algorithm", "fast_free_0.19", "--gathered-budget", bytes});
    EXPECT_EQ(r.code, kExitOk) << bytes << ": " << r.err;
  }
  Result other = Overlap({"schedule", path, "--algorithm", "list", "--gathered-budget", "1KiB"});
  EXPECT_EQ(other.code, kExitUsage);
  EXPECT_THAT(other.err, HasSubstr("--gathered-budget is DeepSpeed 0.19's, for fast_free_0.19, "
                                   "not list"));
}

// --device-memory: the budget is the device less the per-rank state and the reserve; every
// scheduler takes it, and simulate too.
TEST(CliScheduleTest, DeviceMemorySetsTheBudgetFromStateAndReserve) {
  const std::string path = Tmp("gpt2_device.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--layers", "2", "-o", path}).code, kExitOk);
  for (const char* algorithm : {"lookahead", "fast_free", "list", "simple_prefetch"}) {
    const std::string json = Tmp(std::string(algorithm) + "_device.json");
    Result r = Overlap({"schedule", path, "--algorithm", algorithm, "--device-memory", "80GB",
                        "--optimizer", "sgd", "--json", json});
    ASSERT_EQ(r.code, kExitOk) << algorithm << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("(device 74.51 GiB - per-rank state "));
    std::ifstream in(json);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_THAT(text.str(), HasSubstr("\"device_memory_bytes\": 80000000000, \"reserve_bytes\": "
                                      "4536870912, \"budget_bytes\": "));
    EXPECT_THAT(text.str(), HasSubstr("\"feasible\": true"));
  }
  Result sim = Overlap({"simulate", path, "--device-memory", "80GB", "--reserve", "1GiB"});
  EXPECT_EQ(sim.code, kExitOk) << sim.err;
  EXPECT_THAT(sim.out, HasSubstr("reserve 1.00 GiB): the peak fits"));
  // Too small a device, both budgets, a reserve alone, an unknown optimizer.
  Result small = Overlap({"schedule", path, "--device-memory", "100MB"});
  EXPECT_EQ(small.code, kExitBadInput);
  EXPECT_THAT(small.err, HasSubstr("leaves nothing for the step"));
  EXPECT_EQ(Overlap({"schedule", path, "--device-memory", "80GB", "--memory-limit", "1GB"}).code,
            kExitUsage);
  EXPECT_EQ(Overlap({"simulate", path, "--reserve", "1GB"}).code, kExitUsage);
  Result bad = Overlap({"schedule", path, "--device-memory", "80GB", "--optimizer", "lamb"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("sgd or adamw"));
  // run reads the same flags (its ranks' budget: tools/run_test.sh); here, the usage error,
  // before any rank could start.
  EXPECT_EQ(Overlap({"run", "--strategy", "zero3", "--reserve", "1GB"}).code, kExitUsage);
}

// The number after "key": in a result JSON.
std::string JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return "(missing " + key + ")";
  const size_t from = at + key.size() + 4;
  return json.substr(from, json.find_first_of(",}", from) - from);
}

// What schedule reports is what simulate finds on the graph it wrote, for every scheduler
// and every built-in model's forward and backward graph, with the same flags.
TEST(CliScheduleTest, ScheduleFiguresAreSimulateFiguresOfTheWrittenGraph) {
  for (const char* model : {"mlp", "gpt2", "llama-7b", "llama-70b", "resnet18", "moe", "random"}) {
    for (const bool backward : {false, true}) {
      const std::string path = Tmp(std::string(model) + (backward ? "_b.json" : "_f.json"));
      std::vector<std::string> gen = {"gen", model, backward ? "--backward" : "--lifted", "-o",
                                      path};
      if (std::string(model) == "random") gen.insert(gen.end(), {"--nodes", "300"});
      ASSERT_EQ(Overlap(gen).code, kExitOk);
      for (const char* algorithm : {"lookahead", "fast_free", "list", "simple_prefetch"}) {
        const std::string what =
            std::string(model) + (backward ? " backward " : " forward ") + algorithm;
        const std::string json = Tmp("same_result.json"), graph = Tmp("same_graph.json"),
                          sim_json = Tmp("same_sim.json");
        std::vector<std::string> args = {"schedule", path, "--algorithm", algorithm,      "--json",
                                         json,       "-o", graph,         "--world-size", "8"};
        if (backward) args.push_back("--backward");
        Result r = Overlap(args);
        // A baseline may be unable to order a random graph (a kwargs dependency it cannot
        // see): exit 1 saying so, nothing to compare.
        if (r.code == kExitBadInput && r.err.find("breaks a dependency") != std::string::npos) {
          continue;
        }
        ASSERT_EQ(r.code, kExitOk) << what << ": " << r.err;
        Result sim = Overlap({"simulate", graph, "--json", sim_json, "--world-size", "8"});
        ASSERT_EQ(sim.code, kExitOk) << what << ": " << sim.err;
        const std::string a = ReadAll(json), b = ReadAll(sim_json);
        for (const char* key : {"peak_memory_bytes", "peak_gathered_bytes", "step_time_s"}) {
          EXPECT_EQ(JsonNumber(a, key), JsonNumber(b, key)) << what << " " << key;
        }
      }
    }
  }
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliScheduleTest, ExplainShowsExactlyOneChosenRowWithTheSummaryFigures) {
  const std::string path = Tmp("gpt2_explain.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "-o", path}).code, kExitOk);
  // Between the smallest feasible budget (7.90 GiB) and the unbounded peak (8.37 GiB).
  Result r = Overlap({"schedule", path, "--memory-limit", "8300MiB", "--explain"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_FALSE(lines.empty());
  // "lookahead: N nodes; peak gathered G, peak memory P, step S (...)"
  const std::string& summary = lines[0];
  const size_t p = summary.find("peak memory ") + 12;
  const std::string peak = summary.substr(p, summary.find(',', p) - p);
  const size_t s = summary.find("step ") + 5;
  const std::string step = summary.substr(s, summary.find(" (", s) - s);
  int chosen = 0;
  for (const std::string& line : lines) {
    if (line.find("  chosen") == std::string::npos) continue;
    ++chosen;
    EXPECT_THAT(line, HasSubstr(peak));
    EXPECT_THAT(line, HasSubstr(step));
  }
  EXPECT_EQ(chosen, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("verdict"));
  // A baseline makes no choices to explain.
  EXPECT_EQ(Overlap({"schedule", path, "--algorithm", "fast_free", "--explain"}).code, kExitUsage);
}

TEST(CliScheduleTest, ListAlgorithmsPrintsTheRegistry) {
  Result r = Overlap({"schedule", "--list-algorithms"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].substr(0, lines[0].find('\t')), "lookahead");
  EXPECT_THAT(r.out, HasSubstr("fast_free\t"));
  EXPECT_THAT(r.out, HasSubstr("fast_free_0.19\t"));
  EXPECT_EQ(Overlap({"schedule"}).code, kExitUsage);  // a file is needed otherwise
}

TEST(CliScheduleTest, ResultOrderIsTheWrittenGraphsOrderWithTheOutputLast) {
  const std::string path = Tmp("moe_bwd.json");
  ASSERT_EQ(Overlap({"gen", "moe", "--backward", "--layers", "2", "-o", path}).code, kExitOk);
  const std::string json = Tmp("moe_ff.json"), graph = Tmp("moe_ff_graph.json");
  Result r = Overlap(
      {"schedule", path, "--backward", "--algorithm", "fast_free", "--json", json, "-o", graph});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"output\"], \"peak_memory_bytes\""));
  // simulate on the written graph reports the same peak as schedule did.
  Result sim = Overlap({"simulate", graph});
  ASSERT_EQ(sim.code, kExitOk);
  const size_t p = r.out.find("peak memory ") + 12;
  EXPECT_THAT(sim.out, HasSubstr("peak memory " + r.out.substr(p, r.out.find(',', p) - p)));
}

// An AOT backward graph that takes primals_2 only while its table lists primals_1's
// parameter too (whole-model tables, docs/format.md): it loads, inspects and schedules.
TEST(CliTest, ABackwardGraphWithAbsentParametersInspectsAndSchedules) {
  const std::string path = Tmp("absent.json");
  WriteFile(path, R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "primals_2", "op": "placeholder", "target": "primals_2", "args": [],
     "meta": {"param": "b", "shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "tangents_1", "op": "placeholder", "target": "tangents_1", "args": [],
     "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16}},
    {"name": "mul", "op": "call_function", "target": "aten.mul.Tensor",
     "args": ["%tangents_1", "%primals_2"],
     "meta": {"shape": [4], "dtype": "float32", "tensor_size": 16, "device_time": 1e-6,
              "grad_of": "b"}},
    {"name": "output", "op": "output", "target": "output", "args": [[null, "%mul"]]}],
   "params": [{"name": "a", "owner": "primals_1", "bytes": 8},
              {"name": "b", "owner": "primals_2", "bytes": 16}]})");
  Result inspect = Overlap({"inspect", path});
  ASSERT_EQ(inspect.code, kExitOk) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("absent from this graph: 1 entries"));
  for (const SchedulerEntry& e : Schedulers()) {
    Result r = Overlap({"schedule", path, "--backward", "--algorithm", std::string(e.name)});
    EXPECT_EQ(r.code, kExitOk) << e.name << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("peak gathered 16 B")) << e.name;  // b only, never a
  }
}

// `annotate` fills what an exported graph lacks and keeps what it has; the report names the
// ops without a formula; -o is required and the graph it writes schedules.
TEST(CliTest, AnnotateFillsMissingTimesAndReportsTheFallback) {
  const std::string path = Tmp("unannotated.json");
  WriteFile(path, R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [],
     "meta": {"shape": [1024, 1024], "dtype": "float32"}},
    {"name": "w", "op": "placeholder", "target": "w", "args": [],
     "meta": {"shape": [1024, 1024], "dtype": "float32", "param": "w"}},
    {"name": "mm", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%w"],
     "meta": {"shape": [1024, 1024], "dtype": "float32"}},
    {"name": "odd", "op": "call_function", "target": "aten.odd.default", "args": ["%mm"],
     "meta": {"shape": [1024, 1024], "dtype": "float32", "device_time": 0.25}},
    {"name": "odder", "op": "call_function", "target": "aten.odder.default", "args": ["%odd"],
     "meta": {"shape": [1024, 1024], "dtype": "float32"}},
    {"name": "output", "op": "output", "target": "output", "args": ["%odder"]}],
   "params": [{"name": "w", "owner": "w", "shape": [1024, 1024], "dtype": "float32",
               "bytes": 4194304}]})");
  EXPECT_EQ(Overlap({"annotate", path}).code, kExitUsage);
  const std::string out = Tmp("annotated.json");
  // 1 TFLOP/s fp32: the 2 x 1024^3 FLOP matmul takes 2.15 ms.
  Result r = Overlap({"annotate", path, "-o", out, "--peak-tflops-fp32", "1"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("2 nodes filled (1 by formula, 1 by the memory-only fallback), 1 kept"));
  EXPECT_THAT(r.out, HasSubstr("aten.odder.default: 1"));
  Result inspect = Overlap({"inspect", out});
  ASSERT_EQ(inspect.code, kExitOk) << inspect.err;
  EXPECT_THAT(inspect.out, Not(HasSubstr("no device_time")));
  absl::StatusOr<Graph> g = ReadGraphJsonFile(out);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NEAR(g->node(g->FindNode("mm")).meta().device_time, 2.0 * 1024 * 1024 * 1024 / 1e12,
              1e-12);
  EXPECT_EQ(g->node(g->FindNode("odd")).meta().device_time, 0.25);
  EXPECT_EQ(g->node(g->FindNode("x")).meta().tensor_size, 4 << 20);
  // To stdout, the report goes to stderr.
  Result piped = Overlap({"annotate", path, "-o", "-"});
  ASSERT_EQ(piped.code, kExitOk) << piped.err;
  EXPECT_THAT(piped.err, HasSubstr("by formula"));
  // schedule and simulate say when times are missing, and only then.
  Result before = Overlap({"schedule", path});
  ASSERT_EQ(before.code, kExitOk) << before.err;
  EXPECT_THAT(before.err, HasSubstr("2 of 3 compute nodes have no device_time"));
  Result after = Overlap({"schedule", out});
  ASSERT_EQ(after.code, kExitOk) << after.err;
  EXPECT_THAT(after.err, Not(HasSubstr("device_time")));
  EXPECT_THAT(Overlap({"simulate", path}).err, HasSubstr("overlap annotate"));
}

// `gen --preset tiny --backward` and `--loss`, as docs/ops.md describes them.
TEST(CliTest, GenWritesTinyAotPairsWithTheChosenLoss) {
  const std::string fwd = Tmp("tiny_fwd.json"), bwd = Tmp("tiny_bwd.json");
  ASSERT_EQ(Overlap({"gen", "llama-7b", "--preset", "tiny", "--lifted", "-o", fwd}).code, kExitOk);
  ASSERT_EQ(Overlap({"gen", "llama-7b", "--preset", "tiny", "--backward", "-o", bwd}).code,
            kExitOk);
  Result p = Overlap({"print", fwd});
  ASSERT_EQ(p.code, kExitOk) << p.err;
  EXPECT_THAT(p.out, HasSubstr("%labels = placeholder[labels] : [2, 16] int64"));
  EXPECT_THAT(p.out, HasSubstr("aten.nll_loss_forward.default("));
  Result b = Overlap({"print", bwd});
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_THAT(b.out, HasSubstr("%tangents_1 = placeholder[tangents_1] : [] float32"));
  EXPECT_THAT(b.out, HasSubstr("aten.embedding_dense_backward.default("));
  EXPECT_THAT(b.out, HasSubstr("aten._scaled_dot_product_flash_attention_backward.default("));
  Result mse = Overlap({"gen", "gpt2", "--preset", "tiny", "--lifted", "--loss", "mse"});
  ASSERT_EQ(mse.code, kExitOk) << mse.err;
  EXPECT_THAT(mse.out, HasSubstr("\"aten.mse_loss.default\""));
  Result none = Overlap({"gen", "gpt2", "--preset", "tiny", "--backward", "--loss", "none"});
  ASSERT_EQ(none.code, kExitOk) << none.err;
  EXPECT_THAT(none.out, ::testing::Not(HasSubstr("nll_loss")));
  EXPECT_EQ(Overlap({"gen", "gpt2", "--loss", "hinge"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "gpt2", "--preset", "huge"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "random", "--preset", "tiny"}).code, kExitUsage);
  // Random graphs keep their structural backward.
  Result rb = Overlap({"gen", "random", "--backward", "--nodes", "50"});
  ASSERT_EQ(rb.code, kExitOk) << rb.err;
  EXPECT_THAT(rb.out, HasSubstr("_backward.default"));
}

// A deep chain for scaling measurements: `gen mlp --layers L --width W` (L linear layers,
// the preset's input and output widths around W-wide hidden layers).
TEST(CliTest, MlpTakesLayersAndWidth) {
  Result r = Overlap({"gen", "mlp", "--layers", "6", "--width", "32", "--lifted"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"net.10.weight\""));  // the 6th linear layer (net.0 ... net.10)
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("\"net.12.weight\"")));
  EXPECT_THAT(r.out, HasSubstr("\"shape\": [32, 32]"));
  Result tiny = Overlap({"gen", "mlp", "--preset", "tiny", "--layers", "1"});
  ASSERT_EQ(tiny.code, kExitOk) << tiny.err;
  EXPECT_THAT(tiny.out, HasSubstr("\"shape\": [4, 8]"));  // 8 -> 4 directly
  EXPECT_EQ(Overlap({"gen", "gpt2", "--width", "64"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "resnet18", "--layers", "2"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"gen", "mlp", "--seq", "2"}).code, kExitUsage);
}

TEST(CliTest, PrintWritesOneLinePerNode) {
  const std::string path = Tmp("mlp_print.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "-o", path}).code, kExitOk);
  Result r = Overlap({"print", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("%net_0 = call_module[net.0](%x) : [20, 5000] float32  # "));
  EXPECT_THAT(r.out, HasSubstr("\n%mse_loss = aten.mse_loss.default(%net_6, %targets, 1) : [] "));
  EXPECT_THAT(r.out, HasSubstr("\noutput(%mse_loss)\n"));
  EXPECT_EQ(Lines(r.out).size(), 8u + 11u);  // 8 parameters, 11 nodes (targets, the loss)
  EXPECT_EQ(Overlap({"print"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"print", Tmp("missing.json")}).code, kExitBadInput);
}

TEST(CliTest, AFlagGivenTwiceIsAUsageError) {
  Result r = Overlap({"gen", "random", "--nodes", "3", "--nodes", "4"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--nodes is given twice"));
  EXPECT_EQ(Overlap({"gen", "mlp", "-o", "a", "-o", "b"}).code, kExitUsage);
}

TEST(CliTest, DemoExplainsOursChoice) {
  Result r = Overlap({"demo", "mlp"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  // The AOT pair: the loss, the saved activations, the primals the backward reads.
  EXPECT_THAT(r.out, HasSubstr("[5] AOT pair (graph/aot.h"));
  EXPECT_THAT(r.out, HasSubstr("loss: aten.mse_loss.default, a scalar"));
  EXPECT_THAT(r.out, HasSubstr("returns the loss and 6 saved tensors"));
  EXPECT_THAT(r.out, HasSubstr("reads 3 of 8 parameters (5 absent from it), returns 8 gradients"));
  EXPECT_THAT(r.out, HasSubstr("[7] why ours chose that"));
  EXPECT_THAT(r.out, HasSubstr("chosen"));
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

// Regression tests from an adversarial campaign: inputs that once crashed or misled.

TEST(CliHardeningTest, ADsIdOutsideTheParameterTableIsBadInputNotACrash) {
  const std::string path = Tmp("bad_ds.json");
  WriteFile(path, R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": []},
    {"name": "p", "op": "placeholder", "target": "p", "args": [], "meta": {"param": "w"}},
    {"name": "ag", "op": "call_function", "target": "dc.allgather_param", "args": ["%p", 0, 1]},
    {"name": "wt", "op": "call_function", "target": "dc.wait_allgather", "args": ["%ag", 0, 1]},
    {"name": "y", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%wt"]},
    {"name": "output", "op": "output", "target": "output", "args": ["%y"]}],
    "params": [{"name": "w", "owner": "p", "bytes": 64}]})");
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"schedule", path, "--json", Tmp("bad_ds_r.json")},
        {"schedule", path},
        {"inspect", path},
        {"simulate", path},
        {"print", path}}) {
    Result r = Overlap(cmd);
    EXPECT_EQ(r.code, kExitBadInput) << cmd[0];
    EXPECT_THAT(r.err, HasSubstr("node \"ag\": ds_id (args[2])")) << cmd[0];
  }
}

TEST(CliHardeningTest, WhenStdoutCarriesDataTheSummaryGoesToStderr) {
  const std::string path = Tmp("gpt2_pipe.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--layers", "1", "-o", path}).code, kExitOk);
  Result r = Overlap({"schedule", path, "-o", "-"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.err, HasSubstr("lookahead: "));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("lookahead: ")));
  // What went to stdout is a graph file the CLI reads back.
  const std::string piped = Tmp("piped.json");
  WriteFile(piped, r.out);
  EXPECT_EQ(Overlap({"inspect", piped}).code, kExitOk);
  Result sim = Overlap({"simulate", path, "--json", "-"});
  ASSERT_EQ(sim.code, kExitOk);
  EXPECT_EQ(sim.out.rfind("{\"format\": \"overlap-result\"", 0), 0u);
  EXPECT_THAT(sim.err, HasSubstr("peak memory"));
  EXPECT_EQ(Overlap({"schedule", path, "-o", "-", "--json", "-"}).code, kExitUsage);
}

TEST(CliHardeningTest, WritingOverTheInputIsSafeAndAFullStdoutIsAnError) {
  const std::string path = Tmp("inplace.json");
  ASSERT_EQ(Overlap({"gen", "gpt2", "--lifted", "--layers", "1", "-o", path}).code, kExitOk);
  ASSERT_EQ(Overlap({"schedule", path, "-o", path}).code, kExitOk);
  EXPECT_EQ(Overlap({"inspect", path}).code, kExitOk);
  std::FILE* full = std::fopen("/dev/full", "w");
  if (full == nullptr) GTEST_SKIP() << "no /dev/full here";
  std::FILE* err = std::tmpfile();
  const int code = RunCli({"inspect", path}, full, err);
  std::fclose(full);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_THAT(Slurp(err), HasSubstr("writing to stdout failed: No space left on device"));
}

// Every model's demo, both parameter styles, at the tiny preset: the default sizes' demo of
// the larger models plans steps of 10^5 nodes below every baseline (seconds each, minutes
// under the sanitizers); gpt2's default-size demo is checked above.
TEST(CliHardeningTest, DemoSucceedsOnEveryBuiltInModel) {
  for (const char* model : {"mlp", "gpt2", "llama-7b", "llama-70b", "resnet18", "moe", "random"}) {
    for (bool lifted : {false, true}) {
      std::vector<std::string> args = {"demo", model};
      if (std::string(model) != "random") {  // a random graph has no preset
        args.push_back("--preset");
        args.push_back("tiny");
      }
      if (lifted) args.push_back("--lifted");
      Result r = Overlap(args);
      EXPECT_EQ(r.code, kExitOk) << model << (lifted ? " --lifted" : "") << ": " << r.err;
      EXPECT_THAT(r.out, HasSubstr("[7] why ours chose that")) << model;
    }
  }
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliHardeningTest, SizesAndCostFlagsBeyondTheLimitsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"gen", "random", "--nodes", "1073741824"}, "--nodes must be an integer from 2 to 10000000"},
      {{"gen", "random", "--nodes", "20000000"}, "--nodes must be an integer from 2 to 10000000"},
      {{"gen", "moe", "--layers", "100000"}, "--layers must be an integer from 1 to 4096"},
      {{"gen", "gpt2", "--batch", "1000000000"}, "--batch must be an integer from 1 to 65536"},
      {{"gen", "gpt2", "--peak-tflops-fp32", "1e-320"}, "--peak-tflops-fp32 must be a number from"},
      {{"gen", "gpt2", "--mem-bandwidth", "1e-320"}, "--mem-bandwidth must be a number from"},
      {{"schedule", "x.json", "--max-inflight", "2147483648"},
       "--max-inflight must be an integer from 0 to 2147483647"},
  };
  for (const Case& c : cases) {
    Result r = Overlap(c.args);
    EXPECT_EQ(r.code, kExitUsage) << c.args[1];
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  // Flags inside the limits that still give a non-finite model are the flags' fault too.
  Result tiny = Overlap({"gen", "llama-70b", "--peak-tflops", "1e-6", "--peak-tflops-fp32", "1e-6",
                         "--mem-bandwidth", "1e-6"});
  EXPECT_TRUE(tiny.code == kExitOk || tiny.code == kExitUsage) << tiny.err;
  if (tiny.code == kExitOk) {  // no figure written as null (a None argument is fine)
    EXPECT_THAT(tiny.out, ::testing::Not(HasSubstr("\"device_time\": null")));
    EXPECT_THAT(tiny.out, ::testing::Not(HasSubstr("\"tensor_size\": null")));
  }
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

TEST(CliHardeningTest, MessagesEscapeControlCharacters) {
  Result model = Overlap({"gen", std::string("gpt\0\n2", 6)});
  EXPECT_EQ(model.code, kExitUsage);
  EXPECT_THAT(model.err, HasSubstr("unknown model \"gpt\\x00\\x0a2\""));
  Result flag = Overlap({"gen", "gpt2", std::string("--x\x1b[31m", 8)});
  EXPECT_THAT(flag.err, HasSubstr("unknown option --x\\x1b[31m"));
  const std::string path = Tmp("nul_name.json");
  WriteFile(path, R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "a\u0000b", "op": "placeholder", "target": "x", "args": []},
    {"name": "output", "op": "output", "target": "output", "args": ["%a\u0000b"]}]})");
  Result r = Overlap({"inspect", path});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("a\\x00b"));
  EXPECT_EQ(r.err.find('\0'), std::string::npos);
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

// exec --replay: the measured peak equals the simulated one; without --replay a usage error
// (no kernels yet); a graph too large for the machine's memory is refused up front.
TEST(CliExecTest, ReplayMeasuresThePeakTheSimulatorPredicts) {
  const std::string path = Tmp("exec_tiny.json"), scheduled = Tmp("exec_tiny_s.json");
  ASSERT_EQ(Overlap({"gen", "llama-7b", "--preset", "tiny", "--backward", "-o", path}).code,
            kExitOk);
  ASSERT_EQ(Overlap({"schedule", path, "--backward", "-o", scheduled}).code, kExitOk);
  for (bool count_only : {false, true}) {
    std::vector<std::string> args = {"exec", scheduled, "--replay"};
    if (count_only) args.push_back("--count-only");
    Result r = Overlap(args);
    ASSERT_EQ(r.code, kExitOk) << r.err;
    EXPECT_THAT(r.out, HasSubstr("(world size 1): equal"));
  }
  Result mixed = Overlap({"exec", scheduled, "--count-only"});
  EXPECT_EQ(mixed.code, kExitUsage);
  EXPECT_THAT(mixed.err, HasSubstr("--count-only needs --replay"));
  Result refused = Overlap({"exec", scheduled, "--replay", "--guard", "10KB"});
  EXPECT_EQ(refused.code, kExitBadInput);
  EXPECT_THAT(refused.err, HasSubstr("more than the 9.77 KiB limit"));
  EXPECT_EQ(Overlap({"exec", scheduled, "--replay", "--count-only", "--guard", "10KB"}).code,
            kExitOk);
  // The same guard on a run of the kernels.
  Result kernels = Overlap({"exec", scheduled, "--guard", "1KB"});
  EXPECT_EQ(kernels.code, kExitBadInput);
  EXPECT_THAT(kernels.err, HasSubstr("more than the 1000 B limit"));
}

TEST(CliExecTest, RunsAForwardAndBackwardPairOnTheKernelsAndSavesTheResults) {
  const std::string fwd = Tmp("exec_fwd.json"), bwd = Tmp("exec_bwd.json");
  const std::string sched_fwd = Tmp("exec_fwd_s.json"), sched_bwd = Tmp("exec_bwd_s.json");
  const std::string saved = Tmp("exec_out.safetensors");
  ASSERT_EQ(Overlap({"gen", "mlp", "--preset", "tiny", "--lifted", "-o", fwd}).code, kExitOk);
  ASSERT_EQ(Overlap({"gen", "mlp", "--preset", "tiny", "--backward", "-o", bwd}).code, kExitOk);
  Result r = Overlap({"exec", fwd, "--backward-graph", bwd, "--save", saved});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("inputs: 0 from files, 8 seeded (seed 1)"));
  EXPECT_THAT(r.out, HasSubstr("mse_loss"));
  EXPECT_THAT(r.out, HasSubstr("grad:net.0.weight"));
  EXPECT_THAT(r.out, HasSubstr("(world size 1): equal"));
  EXPECT_THAT(r.out, HasSubstr("wrote"));
  // The saved file feeds the next run: its x and targets are inputs, as are the weights.
  Result again = Overlap({"exec", fwd, "--inputs", saved, "--seed", "9"});
  ASSERT_EQ(again.code, kExitOk) << again.err;
  EXPECT_THAT(again.out, HasSubstr("inputs: 2 from files, 6 seeded (seed 9)"));
  // ZeRO-3 scheduled graphs run too, and their memory is the simulator's.
  ASSERT_EQ(Overlap({"schedule", fwd, "-o", sched_fwd}).code, kExitOk);
  ASSERT_EQ(Overlap({"schedule", bwd, "--backward", "-o", sched_bwd}).code, kExitOk);
  Result z = Overlap({"exec", sched_fwd, "--backward-graph", sched_bwd});
  ASSERT_EQ(z.code, kExitOk) << z.err;
  EXPECT_THAT(z.out, Not(HasSubstr("DIFFERENT")));
  // Errors name the node.
  const std::string module = Tmp("exec_module.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "--preset", "tiny", "-o", module}).code, kExitOk);
  Result bad = Overlap({"exec", module});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_THAT(bad.err, HasSubstr("module-owned parameters"));
  Result rnd = Overlap({"exec", Tmp("exec_fwd.json"), "--replay", "--seed", "3"});
  EXPECT_EQ(rnd.code, kExitUsage);
}

TEST(CliTrainTest, PrintsOneLossPerStepAndKeepsTheParameters) {
  const std::string saved = Tmp("train_mlp.safetensors");
  Result r = Overlap({"train", "--model", "mlp", "--steps", "5", "--save", saved});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("step 1 loss "));
  EXPECT_THAT(r.out, HasSubstr("step 5 loss "));
  EXPECT_THAT(r.out, Not(HasSubstr("step 6 loss")));
  EXPECT_THAT(r.out, HasSubstr("regression onto a fixed linear teacher"));
  Result resumed = Overlap({"train", "--model", "mlp", "--steps", "1", "--weights", saved,
                            "--optimizer", "sgd", "--lr", "0.05"});
  ASSERT_EQ(resumed.code, kExitOk) << resumed.err;
  EXPECT_EQ(Overlap({"train", "--model", "mlp", "--optimizer", "lion"}).code, kExitUsage);
  EXPECT_EQ(Overlap({"train", "--model", "nope"}).code, kExitBadInput);
  Result wrong = Overlap({"train", "--model", "gpt2", "--steps", "1", "--weights", saved});
  EXPECT_EQ(wrong.code, kExitBadInput);
  EXPECT_THAT(wrong.err, HasSubstr("the weights lack"));
}

// A weights file with no tensors is an error naming the missing parameters, for every
// command that reads one (it was taken for no file: a run from the seeded parameters).
TEST(CliTrainTest, AnEmptyWeightsFileIsRefusedNamingTheMissingParameters) {
  const std::string empty = Tmp("weights_empty.safetensors");
  // The safetensors layout of no tensors: an 8-byte header length, then the header "{}".
  WriteFile(empty, std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  Result train = Overlap({"train", "--model", "mlp", "--steps", "1", "--weights", empty});
  EXPECT_EQ(train.code, kExitBadInput) << train.out;
  EXPECT_THAT(train.err,
              HasSubstr("the weights lack 6 of the graph's 6 parameters: 'net.0.weight'"));
  EXPECT_THAT(train.err, HasSubstr("holds no tensors"));
  const std::string fwd = Tmp("weights_fwd.json");
  ASSERT_EQ(Overlap({"gen", "mlp", "--preset", "tiny", "--lifted", "-o", fwd}).code, kExitOk);
  Result exec = Overlap({"exec", fwd, "--weights", empty});
  EXPECT_EQ(exec.code, kExitBadInput) << exec.out;
  EXPECT_THAT(exec.err, HasSubstr(empty + ": the weights lack"));
  EXPECT_THAT(exec.out, Not(HasSubstr("seeded")));
  // A whole file (train --save's) binds every parameter.
  const std::string saved = Tmp("weights_mlp.safetensors");
  ASSERT_EQ(Overlap({"train", "--model", "mlp", "--steps", "1", "--save", saved}).code, kExitOk);
  Result whole = Overlap({"exec", fwd, "--weights", saved});
  ASSERT_EQ(whole.code, kExitOk) << whole.err;
  EXPECT_THAT(whole.out, HasSubstr("inputs: 6 from files, 2 seeded"));  // x and targets
}

// exec's memory guard counts a value declared by shape alone (no tensor_size): a graph of a
// few hundred bytes declaring 64 GiB is refused before anything is allocated, naming it.
TEST(CliExecTest, TheGuardCountsAValueWithoutTensorSizeByItsShape) {
  const std::string path = Tmp("exec_huge_by_shape.json");
  WriteFile(path, R"({"format": "overlap-graph", "version": 1, "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [],
     "meta": {"shape": [4], "dtype": "float32"}},
    {"name": "big", "op": "call_function", "target": "aten.expand.default",
     "args": ["%x", [4194304, 4096, 4]], "meta": {"shape": [4194304, 4096, 4], "dtype": "float32"}},
    {"name": "y", "op": "call_function", "target": "aten.sum.default", "args": ["%big"],
     "meta": {"shape": [], "dtype": "float32"}},
    {"name": "output", "op": "output", "target": "output", "args": ["%y"]}]})");
  for (const bool replay : {false, true}) {
    std::vector<std::string> args = {"exec", path, "--guard", "1GiB"};
    if (replay) args.push_back("--replay");
    Result r = Overlap(args);
    EXPECT_EQ(r.code, kExitBadInput) << r.out;
    EXPECT_THAT(r.err, HasSubstr("needs 256.0 GiB"));
    EXPECT_THAT(r.err, HasSubstr("its largest value: node \"big\", 256.0 GiB"));
    EXPECT_THAT(r.err, HasSubstr("more than the 1.00 GiB limit"));
    EXPECT_THAT(r.out, Not(HasSubstr("inputs:")));  // refused before a tensor was made
  }
}

// The `overlap` binary lists the commands it hands to overlap_compute as their own specs
// say them: the same names, synopses and summaries, in the full CLI's order.
TEST(CliTest, TheHandedOffCommandsAreListedAsTheirSpecsSayThem) {
  const CommandSpec* const full[] = {&ExecCommand(),   &TrainCommand(),     &RunCommand(),
                                     &WorkerCommand(), &BenchCommCommand(), &DemoCommand()};
  absl::Span<const CommandSpec* const> stubs = ComputeCommandStubs();
  ASSERT_EQ(stubs.size(), sizeof(full) / sizeof(full[0]));
  for (size_t i = 0; i < stubs.size(); ++i) {
    EXPECT_EQ(stubs[i]->name, full[i]->name);
    EXPECT_EQ(stubs[i]->synopsis, full[i]->synopsis) << full[i]->name;
    EXPECT_EQ(stubs[i]->summary, full[i]->summary) << full[i]->name;
    EXPECT_NE(stubs[i]->hand_off, nullptr);
  }
}

}  // namespace
}  // namespace overlap
