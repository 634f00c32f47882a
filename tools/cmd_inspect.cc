// overlap inspect: verify a graph file and print its summary.
#include "absl/strings/str_join.h"
#include "graph/json_reader.h"
#include "graph/shape_rules.h"
#include "graph/summary.h"
#include "tools/commands.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"shapes", 0, "", "also check every node's stated shape and dtype against its op's rule"},
};

int Run(Invocation& in) {
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  std::fputs(FormatSummary(*g, Summarize(*g)).c_str(), in.out());
  if (in.Has("shapes")) {
    absl::StatusOr<ShapeCheckReport> r = CheckShapes(*g);
    if (!r.ok()) return in.BadInput(r.status());
    std::fprintf(in.out(), "shapes: %lld nodes match their op's rule, %lld without a stated type",
                 static_cast<long long>(r->checked), static_cast<long long>(r->unstated));
    if (r->no_rule > 0) {
      std::fprintf(in.out(), "; %lld nodes of %zu targets without a rule (not checked): %s",
                   static_cast<long long>(r->no_rule), r->targets_without_rule.size(),
                   absl::StrJoin(r->targets_without_rule, ", ").c_str());
    }
    std::fputs("\n", in.out());
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& InspectCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "inspect";
    s.synopsis = "FILE [--shapes]";
    s.summary = "verify a graph file and print its summary";
    s.description =
        "Reads and verifies a graph file (\"-\": stdin), then prints node counts by op, the\n"
        "parameters (count, bytes by dtype, tied groups, frozen and ignored), total device\n"
        "time and the critical path. --shapes also checks each node's stated shape and\n"
        "dtype against its op's rule (docs/ops.md; ops without a rule are listed, not\n"
        "checked): exit 1 naming the first node that differs.\n";
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
