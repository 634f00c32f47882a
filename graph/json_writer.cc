#include "graph/json_writer.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/output_file.h"

namespace overlap {

void AppendJsonString(std::string* out, absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void AppendJsonDouble(std::string* out, double d) {
  if (!std::isfinite(d)) {
    out->append("null");
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  absl::string_view s(buf, end - buf);
  out->append(s.data(), s.size());
  if (s.find_first_of(".e") == absl::string_view::npos) out->append(".0");
}

namespace {

class Writer {
 public:
  // `flush` is called whenever the buffer passes 1 MiB, and once at the end.
  explicit Writer(const Graph& g, std::FILE* sink) : g_(g), sink_(sink) {
    out_.reserve(sink ? (1 << 21) : 256);
  }

  absl::Status Write() {
    out_.append("{\"format\": \"overlap-graph\", \"version\": 1");
    if (g_.has_name()) {
      out_.append(", \"name\": ");
      AppendJsonString(&out_, g_.name());
    }
    out_.append(",\n \"nodes\": [");
    bool first = true;
    for (NodeId id : g_.order()) {
      out_.append(first ? "\n  " : ",\n  ");
      first = false;
      WriteNode(g_.node(id));
      if (!MaybeFlush()) return WriteError();
    }
    out_.append("\n ]");
    if (g_.has_params_key() || !g_.params().empty()) {
      out_.append(",\n \"params\": [");
      first = true;
      for (const Param& p : g_.params()) {
        out_.append(first ? "\n  " : ",\n  ");
        first = false;
        WriteParam(p);
      }
      out_.append(g_.params().empty() ? "]" : "\n ]");
    }
    WriteExtras(g_.extra(), ",\n ");
    out_.append("}\n");
    if (sink_ != nullptr) {
      if (!Flush()) return WriteError();
    }
    return absl::OkStatus();
  }

  std::string Take() { return std::move(out_); }

 private:
  static absl::Status WriteError() {
    return absl::InternalError(absl::StrCat("write failed: ", std::strerror(errno)));
  }

  bool MaybeFlush() { return sink_ == nullptr || out_.size() < (1 << 20) || Flush(); }
  bool Flush() {
    bool ok = std::fwrite(out_.data(), 1, out_.size(), sink_) == out_.size();
    out_.clear();
    return ok;
  }

  void WriteExtras(const Extras& extras, absl::string_view sep) {
    for (const auto& [key, raw] : extras) {
      out_.append(sep.data(), sep.size());
      AppendJsonString(&out_, key);
      out_.append(": ");
      out_.append(raw);
    }
  }

  void WriteInts(absl::Span<const int64_t> v) {
    out_.push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out_.append(", ");
      absl::StrAppend(&out_, v[i]);
    }
    out_.push_back(']');
  }

  void WriteValue(const Value& v) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out_.append("null");
        break;
      case Value::Kind::kBool:
        out_.append(v.as_bool() ? "true" : "false");
        break;
      case Value::Kind::kInt:
        absl::StrAppend(&out_, v.as_int());
        break;
      case Value::Kind::kDouble:
        if (!std::isfinite(v.as_double())) {  // JSON has no spelling for these
          out_.append(std::isnan(v.as_double()) ? "{\"$float\": \"nan\"}"
                      : v.as_double() > 0       ? "{\"$float\": \"inf\"}"
                                                : "{\"$float\": \"-inf\"}");
          break;
        }
        AppendJsonDouble(&out_, v.as_double());
        break;
      case Value::Kind::kString: {
        const std::string& s = v.as_string();
        if (!s.empty() && s[0] == '%') {
          AppendJsonString(&out_, absl::StrCat("%", s));  // a constant, not a reference
        } else {
          AppendJsonString(&out_, s);
        }
        break;
      }
      case Value::Kind::kRef:
        out_.append("\"%");
        out_.append(g_.node(v.as_ref()).name());  // names need no escaping
        out_.push_back('"');
        break;
      case Value::Kind::kList:
        WriteList(v.items());
        break;
      case Value::Kind::kDict:
        WriteDict(v.dict());
        break;
      case Value::Kind::kSlice:
        out_.append("{\"$slice\": ");
        WriteList(v.items());
        out_.push_back('}');
        break;
    }
  }

  void WriteList(const std::vector<Value>& items) {
    out_.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_.append(", ");
      WriteValue(items[i]);
    }
    out_.push_back(']');
  }

  void WriteDict(const ValueDict& d) {
    out_.push_back('{');
    for (size_t i = 0; i < d.size(); ++i) {
      if (i) out_.append(", ");
      AppendJsonString(&out_, d[i].first);
      out_.append(": ");
      WriteValue(d[i].second);
    }
    out_.push_back('}');
  }

  void WriteNode(const Node& n) {
    out_.append("{\"name\": \"");
    out_.append(n.name());
    out_.append("\", \"op\": \"");
    absl::string_view op = OpName(n.op());
    out_.append(op.data(), op.size());
    out_.append("\", \"target\": ");
    AppendJsonString(&out_, n.target());
    out_.append(", \"args\": ");
    WriteList(n.args());
    if (n.has_kwargs_key() || !n.kwargs().empty()) {
      out_.append(", \"kwargs\": ");
      WriteDict(n.kwargs());
    }
    const NodeMeta& m = n.meta();
    if (n.has_meta_key() || !m.empty()) {
      out_.append(", \"meta\": {");
      absl::string_view sep = "";
      auto key = [&](absl::string_view k) {
        out_.append(sep.data(), sep.size());
        out_.push_back('"');
        out_.append(k.data(), k.size());
        out_.append("\": ");
        sep = ", ";
      };
      if (m.has_shape) {
        key("shape");
        WriteInts(m.shape);
      }
      if (m.has_dtype) {
        key("dtype");
        AppendJsonString(&out_, m.dtype);
      }
      if (m.has_tensor_size) {
        key("tensor_size");
        absl::StrAppend(&out_, m.tensor_size);
      }
      if (m.has_device_time) {
        key("device_time");
        AppendJsonDouble(&out_, m.device_time);
      }
      if (m.has_aliases_input) {
        key("aliases_input");
        out_.append(m.aliases_input ? "true" : "false");
      }
      if (m.has_param) {
        key("param");
        AppendJsonString(&out_, m.param);
      }
      if (m.has_grad_of) {
        key("grad_of");
        AppendJsonString(&out_, m.grad_of);
      }
      for (const auto& [k, raw] : m.extra) {
        out_.append(sep.data(), sep.size());
        AppendJsonString(&out_, k);
        out_.append(": ");
        out_.append(raw);
        sep = ", ";
      }
      out_.push_back('}');
    }
    WriteExtras(n.extra(), ", ");
    out_.push_back('}');
  }

  void WriteParam(const Param& p) {
    out_.append("{\"name\": ");
    AppendJsonString(&out_, p.name);
    out_.append(", \"owner\": ");
    AppendJsonString(&out_, p.owner);
    if (p.has_shape) {
      out_.append(", \"shape\": ");
      WriteInts(p.shape);
    }
    if (p.has_dtype) {
      out_.append(", \"dtype\": ");
      AppendJsonString(&out_, p.dtype);
    }
    absl::StrAppend(&out_, ", \"bytes\": ", p.bytes);
    if (p.has_requires_grad || !p.requires_grad) {
      out_.append(p.requires_grad ? ", \"requires_grad\": true" : ", \"requires_grad\": false");
    }
    if (p.has_ddp_ignored || p.ddp_ignored) {
      out_.append(p.ddp_ignored ? ", \"ddp_ignored\": true" : ", \"ddp_ignored\": false");
    }
    if (p.has_storage || !p.storage.empty()) {
      out_.append(", \"storage\": ");
      AppendJsonString(&out_, p.storage_key());
    }
    WriteExtras(p.extra, ", ");
    out_.push_back('}');
  }

  const Graph& g_;
  std::FILE* sink_;
  std::string out_;
};

}  // namespace

std::string WriteGraphJson(const Graph& g) {
  Writer w(g, nullptr);
  (void)w.Write();  // cannot fail without a sink
  return w.Take();
}

absl::Status WriteGraphJsonStream(const Graph& g, std::FILE* out) {
  Writer w(g, out);
  absl::Status s = w.Write();
  if (s.ok() && std::fflush(out) != 0) {
    return absl::InternalError(absl::StrCat("write failed: ", std::strerror(errno)));
  }
  return s;
}

absl::Status WriteGraphJsonFile(const Graph& g, const std::string& path) {
  // Atomically: a failed write (a full disk, say) never truncates what `path` held, which
  // may be the very graph being read (`overlap schedule g.json -o g.json`).
  absl::StatusOr<OutputFile> out = OutputFile::Open(path);
  if (!out.ok()) return out.status();
  absl::Status s = WriteGraphJsonStream(g, out->stream());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("\"", path, "\": ", s.message()));
  return out->Commit();
}

}  // namespace overlap
