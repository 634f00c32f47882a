// overlap print: the compact text form of a graph (graph/print.h).
#include "graph/json_reader.h"
#include "graph/print.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"output", 'o', "FILE", "write to FILE (default: stdout)", true},
};

int Run(Invocation& in) {
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  absl::Status s = WriteTextFile(in, in.Path("output").value_or("-"), PrintGraph(*g));
  return s.ok() ? kExitOk : in.BadInput(s);
}

}  // namespace

const CommandSpec& PrintCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "print";
    s.synopsis = "FILE [-o OUT]";
    s.summary = "print a graph file compactly, one line per node";
    s.description =
        "Reads and verifies a graph file (\"-\": stdin) and prints it for reading and\n"
        "diffing: the parameter table, then one line per node in graph order,\n"
        "  %name = target(args, kwargs) : shape dtype  # time, bytes\n"
        "(graph/print.h). The JSON file stays the round-trip form.\n";
    s.flags = {kFlags};
    s.min_positional = 1;
    s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
