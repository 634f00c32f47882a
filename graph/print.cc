#include "graph/print.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/json_writer.h"
#include "graph/size.h"

namespace overlap {
namespace {

// Appends a name, target, key or dtype as it is, except that a backslash and anything that
// is not printable ASCII (newlines, control characters, bytes of multi-byte UTF-8) are
// escaped, so every node stays on one line whatever the file held.
void AppendText(std::string* out, absl::string_view s) {
  for (unsigned char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c >= 0x20 && c < 0x7f) {
      out->push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
}

void AppendValue(const Graph& g, const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->append("None");
      return;
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "True" : "False");
      return;
    case Value::Kind::kInt:
      absl::StrAppend(out, v.as_int());
      return;
    case Value::Kind::kDouble:
      AppendJsonDouble(out, v.as_double());
      return;
    case Value::Kind::kString:
      AppendJsonString(out, v.as_string());  // escaped, so one node stays on one line
      return;
    case Value::Kind::kRef:
      absl::StrAppend(out, "%", g.node(v.as_ref()).name());
      return;
    case Value::Kind::kList:
    case Value::Kind::kSlice: {
      const bool slice = v.kind() == Value::Kind::kSlice;
      out->append(slice ? "slice(" : "[");
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out->append(", ");
        AppendValue(g, v.items()[i], out);
      }
      out->append(slice ? ")" : "]");
      return;
    }
    case Value::Kind::kDict: {
      out->append("{");
      for (size_t i = 0; i < v.dict().size(); ++i) {
        if (i) out->append(", ");
        AppendJsonString(out, v.dict()[i].first);
        out->append(": ");
        AppendValue(g, v.dict()[i].second, out);
      }
      out->append("}");
      return;
    }
  }
}

void AppendCall(const Graph& g, const Node& n, std::string* out) {
  out->push_back('(');
  bool first = true;
  for (const Value& a : n.args()) {
    if (!first) out->append(", ");
    first = false;
    AppendValue(g, a, out);
  }
  for (const auto& [k, v] : n.kwargs()) {
    if (!first) out->append(", ");
    first = false;
    AppendText(out, k);
    out->push_back('=');
    AppendValue(g, v, out);
  }
  out->push_back(')');
}

}  // namespace

std::string PrintNode(const Graph& g, const Node& n) {
  std::string out;
  if (n.op() != Op::kOutput) {
    out.push_back('%');
    AppendText(&out, n.name());
    out.append(" = ");
  }
  if (n.op() == Op::kCallFunction) {
    AppendText(&out, n.target());
  } else if (n.op() == Op::kOutput) {
    out.append("output");
  } else {
    absl::StrAppend(&out, OpName(n.op()), "[");
    AppendText(&out, n.target());
    out.push_back(']');
  }
  if (n.op() != Op::kPlaceholder && n.op() != Op::kGetAttr) AppendCall(g, n, &out);
  const NodeMeta& m = n.meta();
  if (m.has_shape || m.has_dtype) {
    out.append(" :");
    if (m.has_shape) absl::StrAppend(&out, " [", absl::StrJoin(m.shape, ", "), "]");
    if (m.has_dtype) {
      out.push_back(' ');
      AppendText(&out, m.dtype);
    }
  }
  std::vector<std::string> notes;
  if (m.has_device_time && m.device_time > 0) notes.push_back(FormatSeconds(m.device_time));
  if (m.has_tensor_size) notes.push_back(FormatBytes(m.tensor_size));
  if (IsView(n)) notes.push_back("view");
  if (m.has_param) {
    notes.push_back("param ");
    AppendText(&notes.back(), m.param);
  }
  if (m.has_grad_of) {
    notes.push_back("grad of ");
    AppendText(&notes.back(), m.grad_of);
  }
  if (!notes.empty()) absl::StrAppend(&out, "  # ", absl::StrJoin(notes, ", "));
  return out;
}

std::string PrintGraph(const Graph& g) {
  std::string out;
  for (size_t i = 0; i < g.params().size(); ++i) {
    const Param& p = g.params()[i];
    absl::StrAppend(&out, "param #", i, " ");
    AppendText(&out, p.name);
    out.append(" (owner ");
    AppendText(&out, p.owner);
    out.push_back(')');
    if (p.has_shape) absl::StrAppend(&out, " [", absl::StrJoin(p.shape, ", "), "]");
    if (p.has_dtype) {
      out.push_back(' ');
      AppendText(&out, p.dtype);
    }
    absl::StrAppend(&out, " ", FormatBytes(p.bytes));
    if (!p.storage.empty() && p.storage != p.name) {
      out.append(", storage ");
      AppendText(&out, p.storage);
    }
    if (!p.requires_grad) out.append(", frozen");
    if (p.ddp_ignored) out.append(", ddp_ignored");
    out.push_back('\n');
  }
  for (NodeId id : g.order()) {
    out.append(PrintNode(g, g.node(id)));
    out.push_back('\n');
  }
  return out;
}

}  // namespace overlap
