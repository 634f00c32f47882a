#include "partition/dot.h"

#include <initializer_list>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "graph/size.h"

namespace overlap {
namespace {

void AppendEscaped(std::string* out, absl::string_view s) {
  for (char c : s) {
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(static_cast<unsigned char>(c) < 0x20 ? ' ' : c);
  }
}

// A DOT double-quoted string of `lines` joined by DOT's centred line break.
std::string QuotedLines(std::initializer_list<absl::string_view> lines) {
  std::string out = "\"";
  bool first = true;
  for (absl::string_view s : lines) {
    if (!first) out.append("\\n");
    first = false;
    AppendEscaped(&out, s);
  }
  out.push_back('"');
  return out;
}
std::string Quoted(absl::string_view s) { return QuotedLines({s}); }

// "aten.mm.default" -> "mm": the label's second line.
absl::string_view ShortTarget(absl::string_view target) {
  if (absl::ConsumePrefix(&target, "aten.")) {
    const size_t dot = target.find('.');
    if (dot != absl::string_view::npos) target = target.substr(0, dot);
  }
  return target;
}

void AppendNode(std::string* out, const Graph& g, NodeId id, absl::string_view indent) {
  const Node& n = g.node(id);
  const char* shape = n.op() == Op::kPlaceholder ? "ellipse"
                      : n.op() == Op::kOutput    ? "doubleoctagon"
                                                 : "box";
  const bool call =
      n.op() == Op::kCallFunction || n.op() == Op::kCallMethod || n.op() == Op::kCallModule;
  absl::StrAppend(out, indent, Quoted(n.name()), " [shape=", shape, ", label=",
                  call ? QuotedLines({n.name(), ShortTarget(n.target())}) : Quoted(n.name()),
                  "];\n");
}

}  // namespace

absl::StatusOr<std::string> PartitionDot(const Graph& g, const PartitionResult& r,
                                         const PartitionDotOptions& options) {
  if (g.size() > options.max_nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the graph has ", g.size(), " nodes, over the DOT limit of ", options.max_nodes,
        " (Graphviz takes minutes on larger graphs and the picture cannot be read); use "
        "--json or --subgraphs-dir, or a smaller model (--layers, --preset tiny)"));
  }
  std::string out = absl::StrCat("digraph ", Quoted(g.name().empty() ? "graph" : g.name()),
                                 " {\n  rankdir=TB;\n  node [fontname=\"sans-serif\", "
                                 "fontsize=10];\n  edge [color=\"#777777\"];\n");
  std::vector<char> clustered(g.id_bound(), 0);
  for (const Bucket& b : r.buckets) {
    absl::StrAppend(&out, "  subgraph cluster_", b.index, " {\n    label=",
                    Quoted(absl::StrCat("submod_", b.index, ": bucket ", b.index, ", ",
                                        FormatBytes(b.size_bytes), ", ", b.params.size(),
                                        b.params.size() == 1 ? " parameter" : " parameters")),
                    ";\n    style=filled;\n    color=\"#e8eef7\";\n");
    for (NodeId id : b.nodes) {
      clustered[id] = 1;
      AppendNode(&out, g, id, "    ");
    }
    out.append("  }\n");
  }
  for (NodeId id : g.order()) {
    if (!clustered[id]) AppendNode(&out, g, id, "  ");
  }
  for (NodeId id : g.order()) {
    absl::flat_hash_set<NodeId> seen;
    for (NodeId in : g.node(id).inputs()) {
      if (!seen.insert(in).second) continue;
      absl::StrAppend(&out, "  ", Quoted(g.node(in).name()), " -> ", Quoted(g.node(id).name()),
                      ";\n");
    }
  }
  out.append("}\n");
  return out;
}

}  // namespace overlap
