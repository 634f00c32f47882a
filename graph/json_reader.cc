#include "graph/json_reader.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "graph/json_writer.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

// Deep nesting in args is legal JSON but no FX graph needs it; the limit keeps a hostile file
// from overflowing the stack of this recursive-descent parser.
constexpr int kMaxDepth = 200;
constexpr size_t kChunk = 1 << 20;

// Bytes from memory or from a FILE* read in chunks; tracks line and column for errors.
class Source {
 public:
  explicit Source(absl::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}
  explicit Source(std::FILE* f) : file_(f), buf_(new char[kChunk]) { p_ = end_ = buf_.get(); }

  // Next byte, or -1 at the end.
  int Peek() {
    if (p_ == end_ && !Refill()) return -1;
    return static_cast<unsigned char>(*p_);
  }
  void Advance() { ++p_; }
  // Skips whitespace, counting lines.
  void SkipWs() {
    while (true) {
      if (p_ == end_ && !Refill()) return;
      char c = *p_;
      if (c == '\n') {
        ++line_;
        line_start_ = Offset() + 1;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        return;
      }
      ++p_;
    }
  }
  // Contiguous bytes available now (refilling if empty).
  absl::string_view Available() {
    if (p_ == end_) Refill();
    return absl::string_view(p_, end_ - p_);
  }
  void Skip(size_t n) { p_ += n; }
  int64_t Offset() const { return consumed_ + (p_ - base_()); }
  int64_t line() const { return line_; }
  int64_t column() const { return Offset() - line_start_ + 1; }
  bool read_error() const { return read_error_; }

 private:
  const char* base_() const { return file_ ? buf_.get() : begin_; }
  bool Refill() {
    if (file_ == nullptr) return false;
    consumed_ += end_ - buf_.get();
    size_t n = std::fread(buf_.get(), 1, kChunk, file_);
    if (n == 0 && std::ferror(file_)) read_error_ = true;
    p_ = buf_.get();
    end_ = p_ + n;
    return n > 0;
  }

  std::FILE* file_ = nullptr;
  std::unique_ptr<char[]> buf_;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  const char* begin_ = p_;
  int64_t consumed_ = 0;
  int64_t line_ = 1;
  int64_t line_start_ = 0;
  bool read_error_ = false;
};

// A parsed JSON number.
struct Number {
  bool is_int = false;
  bool int_overflow = false;  // integer syntax but outside int64
  int64_t i = 0;
  double d = 0;
  std::string text;  // the literal as written
};

class Parser {
 public:
  // `size_hint`: the input's size in bytes, if known, to presize the name index.
  Parser(Source* src, int64_t size_hint) : src_(*src) {
    // Files that overlap writes with full metadata take about 250 bytes per node.
    if (size_hint > 0) g_.ReserveNodes(size_hint / 256);
  }

  absl::StatusOr<Graph> Run() {
    if (!ParseTop()) return error_;
    src_.SkipWs();
    if (src_.Peek() != -1) {
      Fail("unexpected data after the end of the graph object");
      return error_;
    }
    return std::move(g_);
  }

 private:
  // ---- errors -------------------------------------------------------------------------------
  bool Fail(absl::string_view msg) {
    if (error_.ok()) {
      std::string where;
      if (context_ != Context::kNone) {
        const bool node = context_ == Context::kNode;
        where = context_name_ != nullptr
                    ? absl::StrCat(node ? "node \"" : "parameter \"", *context_name_, "\": ")
                    : absl::StrCat(node ? "nodes[" : "params[", context_index_, "]: ");
      }
      error_ = absl::InvalidArgumentError(
          absl::StrCat("line ", src_.line(), ", column ", src_.column(), ": ", where, msg));
    }
    return false;
  }

  std::string Found() {
    int c = src_.Peek();
    switch (c) {
      case -1:
        return "the end of the input";
      case '"':
        return "a string";
      case '[':
        return "an array";
      case '{':
        return "an object";
      case 't':
      case 'f':
        return "a boolean";
      case 'n':
        return "null";
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return "a number";
        return absl::StrCat("'", std::string(1, static_cast<char>(c)), "'");
    }
  }

  bool TypeError(absl::string_view field, absl::string_view want) {
    return Fail(absl::StrCat("field \"", field, "\" must be ", want, ", got ", Found()));
  }

  // ---- lexing ---------------------------------------------------------------------------------
  bool Expect(char c) {
    src_.SkipWs();
    if (src_.Peek() != static_cast<unsigned char>(c)) {
      return Fail(absl::StrCat("expected '", std::string(1, c), "', got ", Found()));
    }
    src_.Advance();
    return true;
  }

  bool ParseLiteral(absl::string_view word) {
    for (char c : word) {
      if (src_.Peek() != static_cast<unsigned char>(c)) {
        return Fail(absl::StrCat("malformed literal (expected \"", word, "\")"));
      }
      src_.Advance();
    }
    return true;
  }

  static int HexVal(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool ParseHex4(uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = HexVal(src_.Peek());
      if (h < 0) return Fail("malformed \\u escape in string");
      v = v * 16 + h;
      src_.Advance();
    }
    *out = v;
    return true;
  }

  static void AppendUtf8(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Parses a string literal (after whitespace) into `out` (cleared first).
  bool ParseString(std::string* out) {
    out->clear();
    src_.SkipWs();
    if (src_.Peek() != '"') return Fail(absl::StrCat("expected a string, got ", Found()));
    src_.Advance();
    while (true) {
      absl::string_view avail = src_.Available();
      if (avail.empty()) return Fail("unterminated string");
      size_t i = 0;
      while (i < avail.size()) {
        unsigned char c = avail[i];
        if (c == '"' || c == '\\' || c < 0x20) break;
        ++i;
      }
      out->append(avail.data(), i);
      src_.Skip(i);
      if (i == avail.size()) continue;
      unsigned char c = avail[i];
      if (c == '"') {
        src_.Advance();
        return true;
      }
      if (c < 0x20) return Fail("control character in string (must be escaped)");
      src_.Advance();  // backslash
      int e = src_.Peek();
      src_.Advance();
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!ParseHex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t lo = 0;
            if (src_.Peek() != '\\') return Fail("unpaired surrogate in \\u escape");
            src_.Advance();
            if (src_.Peek() != 'u') return Fail("unpaired surrogate in \\u escape");
            src_.Advance();
            if (!ParseHex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return Fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("unpaired surrogate in \\u escape");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          return Fail("invalid escape in string");
      }
    }
  }

  // Parses a number at the cursor (after whitespace), strictly by JSON's grammar.
  bool ParseNumber(Number* num) {
    src_.SkipWs();
    char buf[64];
    size_t n = 0;
    bool is_int = true;
    auto take = [&]() -> bool {
      if (n + 1 >= sizeof(buf)) return Fail("number literal too long");
      buf[n++] = static_cast<char>(src_.Peek());
      src_.Advance();
      return true;
    };
    auto digit = [&]() {
      int c = src_.Peek();
      return c >= '0' && c <= '9';
    };
    if (src_.Peek() == '-' && !take()) return false;
    if (!digit()) return Fail(absl::StrCat("expected a number, got ", Found()));
    if (src_.Peek() == '0') {
      if (!take()) return false;
    } else {
      while (digit())
        if (!take()) return false;
    }
    if (src_.Peek() == '.') {
      is_int = false;
      if (!take()) return false;
      if (!digit()) return Fail("malformed number: digit expected after '.'");
      while (digit())
        if (!take()) return false;
    }
    if (src_.Peek() == 'e' || src_.Peek() == 'E') {
      is_int = false;
      if (!take()) return false;
      if ((src_.Peek() == '+' || src_.Peek() == '-') && !take()) return false;
      if (!digit()) return Fail("malformed number: digit expected in exponent");
      while (digit())
        if (!take()) return false;
    }
    buf[n] = '\0';
    *num = Number();
    num->text.assign(buf, n);
    if (is_int) {
      auto [ptr, ec] = std::from_chars(buf, buf + n, num->i);
      if (ec == std::errc()) {
        num->is_int = true;
        num->d = static_cast<double>(num->i);
        return true;
      }
      num->int_overflow = true;
    }
    num->d = std::strtod(buf, nullptr);
    if (!std::isfinite(num->d)) return Fail("number out of the range of a double");
    return true;
  }

  // Parses any JSON value and appends it, minified, to `out` (for unknown keys).
  bool ParseRaw(std::string* out, int depth) {
    if (depth > kMaxDepth) return Fail("JSON nested too deeply");
    src_.SkipWs();
    int c = src_.Peek();
    switch (c) {
      case '"': {
        if (!ParseString(&scratch_)) return false;
        AppendJsonString(out, scratch_);
        return true;
      }
      case '{': {
        src_.Advance();
        out->push_back('{');
        bool first = true;
        return ParseMembers([&](absl::string_view key) {
                 if (!first) out->push_back(',');
                 first = false;
                 AppendJsonString(out, key);
                 out->push_back(':');
                 return ParseRaw(out, depth + 1);
               }) &&
               (out->push_back('}'), true);
      }
      case '[': {
        src_.Advance();
        out->push_back('[');
        bool first = true;
        return ParseElements([&]() {
                 if (!first) out->push_back(',');
                 first = false;
                 return ParseRaw(out, depth + 1);
               }) &&
               (out->push_back(']'), true);
      }
      case 't':
        out->append("true");
        return ParseLiteral("true");
      case 'f':
        out->append("false");
        return ParseLiteral("false");
      case 'n':
        out->append("null");
        return ParseLiteral("null");
      default: {
        Number num;
        if (!ParseNumber(&num)) return false;
        // Numbers of unknown keys are kept as written: exact, whatever their size.
        out->append(num.text);
        return true;
      }
    }
  }

  // Iterates the members of an object whose '{' was consumed: on_member(key) must parse the
  // value. Handles ',' and '}'.
  template <typename F>
  bool ParseMembers(F&& on_member) {
    src_.SkipWs();
    if (src_.Peek() == '}') {
      src_.Advance();
      return true;
    }
    std::string key;
    while (true) {
      if (!ParseString(&key)) return false;
      if (!Expect(':')) return false;
      if (!on_member(absl::string_view(key))) return false;
      src_.SkipWs();
      int c = src_.Peek();
      if (c == ',') {
        src_.Advance();
        continue;
      }
      if (c == '}') {
        src_.Advance();
        return true;
      }
      return Fail(absl::StrCat("expected ',' or '}' in object, got ", Found()));
    }
  }

  // Iterates the elements of an array whose '[' was consumed.
  template <typename F>
  bool ParseElements(F&& on_element) {
    src_.SkipWs();
    if (src_.Peek() == ']') {
      src_.Advance();
      return true;
    }
    while (true) {
      if (!on_element()) return false;
      src_.SkipWs();
      int c = src_.Peek();
      if (c == ',') {
        src_.Advance();
        continue;
      }
      if (c == ']') {
        src_.Advance();
        return true;
      }
      return Fail(absl::StrCat("expected ',' or ']' in array, got ", Found()));
    }
  }

  bool BeginObject(absl::string_view field) {
    src_.SkipWs();
    if (src_.Peek() != '{') return TypeError(field, "an object");
    src_.Advance();
    return true;
  }
  bool BeginArray(absl::string_view field) {
    src_.SkipWs();
    if (src_.Peek() != '[') return TypeError(field, "an array");
    src_.Advance();
    return true;
  }

  bool ParseStringField(absl::string_view field, std::string* out) {
    src_.SkipWs();
    if (src_.Peek() != '"') return TypeError(field, "a string");
    return ParseString(out);
  }

  bool ParseBoolField(absl::string_view field, bool* out) {
    src_.SkipWs();
    int c = src_.Peek();
    if (c == 't') {
      *out = true;
      return ParseLiteral("true");
    }
    if (c == 'f') {
      *out = false;
      return ParseLiteral("false");
    }
    return TypeError(field, "a boolean");
  }

  // A non-negative integer that fits in int64 (sizes, byte counts).
  bool ParseSizeField(absl::string_view field, int64_t* out) {
    src_.SkipWs();
    int c = src_.Peek();
    if (!(c == '-' || (c >= '0' && c <= '9'))) return TypeError(field, "a non-negative integer");
    Number num;
    if (!ParseNumber(&num)) return false;
    if (num.int_overflow) {
      return Fail(absl::StrCat("field \"", field, "\" overflows a 64-bit byte count"));
    }
    if (!num.is_int) return Fail(absl::StrCat("field \"", field, "\" must be an integer"));
    if (num.i < 0) {
      return Fail(absl::StrCat("field \"", field, "\" must be >= 0, got ", num.i));
    }
    *out = num.i;
    return true;
  }

  bool ParseShapeField(absl::string_view field, Shape* out) {
    if (!BeginArray(field)) return false;
    out->clear();
    return ParseElements([&]() {
      src_.SkipWs();
      int c = src_.Peek();
      if (!(c == '-' || (c >= '0' && c <= '9'))) return TypeError(field, "an array of integers");
      Number num;
      if (!ParseNumber(&num)) return false;
      if (!num.is_int)
        return Fail(absl::StrCat("field \"", field, "\": dimensions must be integers"));
      out->push_back(num.i);
      return true;
    });
  }

  // ---- values of args / kwargs ----------------------------------------------------------------
  bool ParseArgValue(Value* out, int depth) {
    if (depth > kMaxDepth) return Fail("arguments nested too deeply");
    src_.SkipWs();
    int c = src_.Peek();
    switch (c) {
      case '"': {
        std::string s;
        if (!ParseString(&s)) return false;
        if (!s.empty() && s[0] == '%') {
          if (s.size() > 1 && s[1] == '%') {
            *out = Value::String(s.substr(1));
            return true;
          }
          absl::string_view ref = absl::string_view(s).substr(1);
          NodeId id = FindRecent(ref);
          if (id == kNoNode) {
            return Fail(absl::StrCat("argument \"", s, "\" is not a node defined earlier ",
                                     "(nodes must be in topological order: a reference to a "
                                     "missing node, a later node, or the node itself is an "
                                     "error, and so is any cycle)"));
          }
          *out = Value::Ref(id);
          return true;
        }
        *out = Value::String(std::move(s));
        return true;
      }
      case '[': {
        src_.Advance();
        std::vector<Value> items;
        if (!ParseElements([&]() {
              items.emplace_back();
              return ParseArgValue(&items.back(), depth + 1);
            })) {
          return false;
        }
        *out = Value::List(std::move(items));
        return true;
      }
      case '{': {
        src_.Advance();
        ValueDict dict;
        if (!ParseDictMembers(&dict, depth)) return false;
        if (!dict.empty() && dict[0].first == "$slice") {
          if (dict.size() != 1 || dict[0].second.kind() != Value::Kind::kList ||
              dict[0].second.items().size() != 3) {
            return Fail("malformed slice: expected {\"$slice\": [start, stop, step]}");
          }
          std::vector<Value>& it = dict[0].second.mutable_items();
          *out = Value::Slice(std::move(it[0]), std::move(it[1]), std::move(it[2]));
          return true;
        }
        *out = Value::Dict(std::move(dict));
        return true;
      }
      case 't':
        *out = Value::Bool(true);
        return ParseLiteral("true");
      case 'f':
        *out = Value::Bool(false);
        return ParseLiteral("false");
      case 'n':
        *out = Value();
        return ParseLiteral("null");
      default: {
        Number num;
        if (!ParseNumber(&num)) return false;
        *out = num.is_int ? Value::Int(num.i) : Value::Double(num.d);
        return true;
      }
    }
  }

  // Most references name one of the last few nodes; checking those first spares a lookup
  // in the (cache-cold) name index.
  NodeId FindRecent(absl::string_view name) {
    for (NodeId id : recent_) {
      if (id == kNoNode) continue;
      const std::string& n = g_.node(id).name();
      // Generated names share prefixes and lengths ("view_1203", "view_1207"): compare the
      // last byte before calling memcmp.
      if (n.size() == name.size() && !n.empty() && n.back() == name.back() &&
          std::memcmp(n.data(), name.data(), n.size()) == 0) {
        return id;
      }
    }
    return g_.FindNode(name);
  }

  bool ParseDictMembers(ValueDict* dict, int depth) {
    return ParseMembers([&](absl::string_view key) {
      for (const auto& [k, v] : *dict) {
        if (k == key) return Fail(absl::StrCat("duplicate key \"", key, "\" in a dict argument"));
      }
      dict->emplace_back(std::string(key), Value());
      return ParseArgValue(&dict->back().second, depth + 1);
    });
  }

  // ---- graph structure ------------------------------------------------------------------------
  bool ParseMeta(NodeMeta* m) {
    if (!BeginObject("meta")) return false;
    return ParseMembers([&](absl::string_view key) {
      bool seen = false;
      bool ok;
      if (key == "shape") {
        seen = m->has_shape;
        m->has_shape = true;
        ok = ParseShapeField("meta.shape", &m->shape);
      } else if (key == "dtype") {
        seen = m->has_dtype;
        m->has_dtype = true;
        ok = ParseStringField("meta.dtype", &m->dtype);
      } else if (key == "tensor_size") {
        seen = m->has_tensor_size;
        m->has_tensor_size = true;
        ok = ParseSizeField("meta.tensor_size", &m->tensor_size);
      } else if (key == "device_time") {
        seen = m->has_device_time;
        m->has_device_time = true;
        ok = ParseDeviceTime(&m->device_time);
      } else if (key == "aliases_input") {
        seen = m->has_aliases_input;
        m->has_aliases_input = true;
        ok = ParseBoolField("meta.aliases_input", &m->aliases_input);
      } else if (key == "param") {
        seen = m->has_param;
        m->has_param = true;
        ok = ParseStringField("meta.param", &m->param);
      } else if (key == "grad_of") {
        seen = m->has_grad_of;
        m->has_grad_of = true;
        ok = ParseStringField("meta.grad_of", &m->grad_of);
      } else {
        return ParseExtra(&m->extra, key, "meta.");
      }
      if (seen) return Fail(absl::StrCat("duplicate key \"meta.", key, "\""));
      return ok;
    });
  }

  bool ParseDeviceTime(double* out) {
    src_.SkipWs();
    int c = src_.Peek();
    if (!(c == '-' || (c >= '0' && c <= '9'))) return TypeError("meta.device_time", "a number");
    Number num;
    if (!ParseNumber(&num)) return false;
    if (num.d < 0) {
      return Fail(absl::StrCat("field \"meta.device_time\" must be >= 0, got ", num.d));
    }
    *out = num.d;
    return true;
  }

  bool ParseExtra(Extras* extras, absl::string_view key, absl::string_view prefix) {
    for (const auto& [k, v] : *extras) {
      if (k == key) return Fail(absl::StrCat("duplicate key \"", prefix, key, "\""));
    }
    extras->emplace_back(std::string(key), std::string());
    return ParseRaw(&extras->back().second, 0);
  }

  bool ParseNode(int64_t index) {
    context_ = Context::kNode;
    context_index_ = index;
    context_name_ = nullptr;
    src_.SkipWs();
    if (src_.Peek() != '{') return Fail(absl::StrCat("expected a node object, got ", Found()));
    src_.Advance();
    std::string name, op_name, target;
    std::vector<Value> args;
    ValueDict kwargs;
    NodeMeta meta;
    Extras extra;
    bool has_name = false, has_op = false, has_target = false, has_args = false;
    bool has_kwargs = false, has_meta = false;
    auto dup = [&](bool* flag, absl::string_view key) {
      if (*flag) return Fail(absl::StrCat("duplicate key \"", key, "\""));
      *flag = true;
      return true;
    };
    bool ok = ParseMembers([&](absl::string_view key) {
      if (key == "name") {
        if (!dup(&has_name, key) || !ParseStringField("name", &name)) return false;
        context_name_ = &name;
        return true;
      }
      if (key == "op") return dup(&has_op, key) && ParseStringField("op", &op_name);
      if (key == "target") return dup(&has_target, key) && ParseStringField("target", &target);
      if (key == "args") {
        if (!dup(&has_args, key) || !BeginArray("args")) return false;
        return ParseElements([&]() {
          args.emplace_back();
          return ParseArgValue(&args.back(), 1);
        });
      }
      if (key == "kwargs") {
        if (!dup(&has_kwargs, key) || !BeginObject("kwargs")) return false;
        return ParseDictMembers(&kwargs, 0);
      }
      if (key == "meta") return dup(&has_meta, key) && ParseMeta(&meta);
      return ParseExtra(&extra, key, "");
    });
    if (!ok) return false;
    for (auto [present, field] : {std::pair<bool, const char*>{has_name, "name"},
                                  {has_op, "op"},
                                  {has_target, "target"},
                                  {has_args, "args"}}) {
      if (!present) return Fail(absl::StrCat("missing required field \"", field, "\""));
    }
    Op op;
    if (!ParseOp(op_name, &op)) {
      return Fail(absl::StrCat("unknown op \"", op_name,
                               "\" (expected placeholder, get_attr, call_function, call_module, "
                               "call_method or output)"));
    }
    if (output_ != kNoNode) {
      return Fail(absl::StrCat(op == Op::kOutput ? "a second output node" : "a node",
                               " follows the output node \"", g_.node(output_).name(),
                               "\" (exactly one output node, last)"));
    }
    context_name_ = nullptr;  // `name` is moved into the graph below
    absl::StatusOr<NodeId> id =
        g_.AddNode(op, std::move(name), std::move(target), std::move(args), std::move(kwargs));
    if (!id.ok()) return Fail(id.status().message());
    Node& n = g_.mutable_node(*id);
    n.mutable_meta() = std::move(meta);
    n.mutable_extra() = std::move(extra);
    n.set_has_kwargs_key(has_kwargs);
    n.set_has_meta_key(has_meta);
    if (op == Op::kOutput) output_ = *id;
    recent_[recent_next_++ % kRecent] = *id;
    context_ = Context::kNone;
    return true;
  }

  bool ParseParam(int64_t index) {
    context_ = Context::kParam;
    context_index_ = index;
    context_name_ = nullptr;
    src_.SkipWs();
    if (src_.Peek() != '{') return Fail(absl::StrCat("expected a parameter object, got ", Found()));
    src_.Advance();
    Param p;
    bool has_name = false, has_owner = false, has_bytes = false;
    auto dup = [&](bool* flag, absl::string_view key) {
      if (*flag) return Fail(absl::StrCat("duplicate key \"", key, "\""));
      *flag = true;
      return true;
    };
    bool ok = ParseMembers([&](absl::string_view key) {
      if (key == "name") {
        if (!dup(&has_name, key) || !ParseStringField("name", &p.name)) return false;
        context_name_ = &p.name;
        return true;
      }
      if (key == "owner") return dup(&has_owner, key) && ParseStringField("owner", &p.owner);
      if (key == "bytes") return dup(&has_bytes, key) && ParseSizeField("bytes", &p.bytes);
      if (key == "shape") return dup(&p.has_shape, key) && ParseShapeField("shape", &p.shape);
      if (key == "dtype") return dup(&p.has_dtype, key) && ParseStringField("dtype", &p.dtype);
      if (key == "requires_grad") {
        return dup(&p.has_requires_grad, key) && ParseBoolField("requires_grad", &p.requires_grad);
      }
      if (key == "ddp_ignored") {
        return dup(&p.has_ddp_ignored, key) && ParseBoolField("ddp_ignored", &p.ddp_ignored);
      }
      if (key == "storage") {
        return dup(&p.has_storage, key) && ParseStringField("storage", &p.storage);
      }
      return ParseExtra(&p.extra, key, "");
    });
    if (!ok) return false;
    for (auto [present, field] : {std::pair<bool, const char*>{has_name, "name"},
                                  {has_owner, "owner"},
                                  {has_bytes, "bytes"}}) {
      if (!present) return Fail(absl::StrCat("missing required field \"", field, "\""));
    }
    if (p.name.empty()) return Fail("field \"name\" must not be empty");
    const std::string name = p.name;
    context_name_ = &name;
    absl::Status s = g_.AddParam(std::move(p));
    if (!s.ok()) return Fail(s.message());
    context_ = Context::kNone;
    return true;
  }

  bool ParseTop() {
    src_.SkipWs();
    if (src_.Peek() != '{') {
      return Fail(absl::StrCat("expected a JSON object (the graph), got ", Found()));
    }
    src_.Advance();
    bool has_format = false, has_version = false, has_nodes = false, has_name = false;
    bool has_params = false;
    auto dup = [&](bool* flag, absl::string_view key) {
      if (*flag) return Fail(absl::StrCat("duplicate top-level key \"", key, "\""));
      *flag = true;
      return true;
    };
    bool ok = ParseMembers([&](absl::string_view key) {
      if (key == "format") {
        std::string f;
        if (!dup(&has_format, key) || !ParseStringField("format", &f)) return false;
        if (f != "overlap-graph") {
          return Fail(absl::StrCat("field \"format\" must be \"overlap-graph\", got \"", f, "\""));
        }
        return true;
      }
      if (key == "version") {
        if (!dup(&has_version, key)) return false;
        src_.SkipWs();
        int c = src_.Peek();
        if (!(c == '-' || (c >= '0' && c <= '9'))) return TypeError("version", "the integer 1");
        Number num;
        if (!ParseNumber(&num)) return false;
        if (!num.is_int || num.i != 1) {
          return Fail("unsupported \"version\" (this reader reads version 1)");
        }
        return true;
      }
      if (key == "name") {
        std::string name;
        if (!dup(&has_name, key) || !ParseStringField("name", &name)) return false;
        g_.set_name(std::move(name));
        return true;
      }
      if (key == "nodes") {
        if (!dup(&has_nodes, key) || !BeginArray("nodes")) return false;
        int64_t i = 0;
        return ParseElements([&]() { return ParseNode(i++); });
      }
      if (key == "params") {
        if (!dup(&has_params, key) || !BeginArray("params")) return false;
        g_.set_has_params_key(true);
        int64_t i = 0;
        return ParseElements([&]() { return ParseParam(i++); });
      }
      return ParseExtra(&g_.mutable_extra(), key, "");
    });
    if (!ok) return false;
    if (!has_format) return Fail("missing required top-level field \"format\"");
    if (!has_version) return Fail("missing required top-level field \"version\"");
    if (!has_nodes) return Fail("missing required top-level field \"nodes\"");
    if (output_ == kNoNode) return Fail("the graph has no output node");
    return true;
  }

  static constexpr int kRecent = 8;
  NodeId recent_[kRecent] = {kNoNode, kNoNode, kNoNode, kNoNode,
                             kNoNode, kNoNode, kNoNode, kNoNode};
  unsigned recent_next_ = 0;

  Source& src_;
  Graph g_;
  NodeId output_ = kNoNode;
  std::string scratch_;
  // What is being parsed, for error messages; formatted only when an error occurs.
  enum class Context { kNone, kNode, kParam };
  Context context_ = Context::kNone;
  int64_t context_index_ = 0;
  const std::string* context_name_ = nullptr;  // the name once read, else null
  absl::Status error_;
};

absl::StatusOr<Graph> Finish(absl::StatusOr<Graph> g, const ReadOptions& options) {
  if (!g.ok() || !options.verify) return g;
  absl::Status s = Verify(*g);
  if (!s.ok()) return s;
  return g;
}

}  // namespace

absl::StatusOr<Graph> ReadGraphJson(absl::string_view text, const ReadOptions& options) {
  Source src(text);
  Parser parser(&src, static_cast<int64_t>(text.size()));
  return Finish(parser.Run(), options);
}

absl::StatusOr<Graph> ReadGraphJsonFile(const std::string& path, const ReadOptions& options) {
  std::FILE* f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open \"", path, "\": ", std::strerror(errno)));
  }
  int64_t size_hint = 0;
  if (f != stdin && std::fseek(f, 0, SEEK_END) == 0) {
    size_hint = std::ftell(f);
    std::rewind(f);
  }
  Source src(f);
  Parser parser(&src, size_hint);
  absl::StatusOr<Graph> g = parser.Run();
  bool read_error = src.read_error();
  if (f != stdin) std::fclose(f);
  if (read_error) return absl::DataLossError(absl::StrCat("error reading \"", path, "\""));
  if (!g.ok()) {
    return absl::Status(g.status().code(), absl::StrCat(path, ": ", g.status().message()));
  }
  absl::StatusOr<Graph> v = Finish(std::move(g), options);
  if (!v.ok()) {
    return absl::Status(v.status().code(), absl::StrCat(path, ": ", v.status().message()));
  }
  return v;
}

}  // namespace overlap
