// overlap inspect: verify a graph file and print its summary.
#include "graph/json_reader.h"
#include "graph/summary.h"
#include "tools/commands.h"

namespace overlap {
namespace {

int Run(Invocation& in) {
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  std::fputs(FormatSummary(*g, Summarize(*g)).c_str(), in.out());
  return kExitOk;
}

}  // namespace

const CommandSpec& InspectCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "inspect";
    s.synopsis = "FILE";
    s.summary = "verify a graph file and print its summary";
    s.description =
        "Reads and verifies a graph file (\"-\": stdin), then prints node counts by op, the\n"
        "parameters (count, bytes by dtype, tied groups, frozen and ignored), total device\n"
        "time and the critical path.\n";
    s.min_positional = 1;
    s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
