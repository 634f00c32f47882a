#include "graph/json_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/json_writer.h"
#include "graph/text.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

// Deep nesting in args is legal JSON but no FX graph needs it; the limit keeps a hostile file
// from overflowing the stack of this recursive-descent parser.
constexpr int kMaxDepth = 200;
constexpr size_t kChunk = 1 << 20;
// The input's size only presizes the name index, once a "nodes" array starts, and only up to
// this many bytes' worth (256 MiB: 2^20 names, a reservation of about 50 MB of address space
// of which only the 2 MB of control bytes are touched before names arrive); beyond that the
// index grows as nodes actually arrive. A size is a claim of the file system (a sparse file,
// or a directory's 2^63-1), not data; without the bound it would size an allocation.
constexpr int64_t kMaxSizeHintBytes = int64_t{256} << 20;
// Files that overlap writes with full metadata take about 250 bytes per node.
constexpr int64_t kBytesPerNodeEstimate = 256;

// The keys of one JSON object, for duplicate detection in O(1) expected per key: a short
// list for the usual handful of keys (no hashing, no allocation once warm), a hash set from
// kSmall keys on, so that an object with 10^6 keys costs 10^6 steps, not 10^12.
class KeySet {
 public:
  void Clear() {
    small_size_ = 0;
    if (large_) {
      set_.clear();
      large_ = false;
    }
  }
  // Adds `key`; false if it was there already.
  bool Insert(absl::string_view key) {
    if (!large_) {
      for (size_t i = 0; i < small_size_; ++i) {
        if (small_[i] == key) return false;
      }
      if (small_size_ < kSmall) {
        if (small_.size() == small_size_) small_.emplace_back();
        small_[small_size_++].assign(key.data(), key.size());
        return true;
      }
      large_ = true;
      set_.reserve(2 * kSmall);
      for (size_t i = 0; i < small_size_; ++i) set_.insert(small_[i]);
    }
    return set_.insert(std::string(key)).second;
  }

 private:
  static constexpr size_t kSmall = 16;
  std::vector<std::string> small_;  // the first small_size_ entries are live
  size_t small_size_ = 0;
  bool large_ = false;  // the keys are in set_ (all of them)
  absl::flat_hash_set<std::string> set_;
};

// Bytes from memory or from a FILE* read in chunks; tracks line and column for errors.
class Source {
 public:
  explicit Source(absl::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}
  // Reads at most `max_bytes` from `f`; a longer input ends there, with over_limit() set.
  Source(std::FILE* f, int64_t max_bytes)
      : file_(f), buf_(new char[kChunk]), max_bytes_(max_bytes) {
    p_ = end_ = buf_.get();
  }

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
  int read_errno() const { return read_errno_; }
  bool over_limit() const { return over_limit_; }

 private:
  const char* base_() const { return file_ ? buf_.get() : begin_; }
  bool Refill() {
    if (file_ == nullptr || over_limit_) return false;
    consumed_ += end_ - buf_.get();
    p_ = end_ = buf_.get();
    errno = 0;
    size_t n = std::fread(buf_.get(), 1, kChunk, file_);
    if (n == 0 && std::ferror(file_)) {
      read_error_ = true;
      read_errno_ = errno;
    }
    if (static_cast<int64_t>(n) > max_bytes_ - consumed_) {
      over_limit_ = true;  // the parser sees the end of the input; the caller reports why
      return false;
    }
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
  int64_t max_bytes_ = 0;
  bool read_error_ = false;
  int read_errno_ = 0;
  bool over_limit_ = false;
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
  // `size_hint`: the input's size in bytes, if known, to presize the name index (bounded by
  // kMaxSizeHintBytes, and only once a "nodes" array starts).
  Parser(Source* src, int64_t size_hint, const ReadOptions& options)
      : src_(*src),
        size_hint_(std::min(std::max<int64_t>(size_hint, 0), kMaxSizeHintBytes)),
        max_string_bytes_(std::max<int64_t>(options.max_string_bytes, 0)) {}

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
      // Names, keys and values are quoted from the input: escaped here, once, for all.
      error_ = absl::InvalidArgumentError(Printable(
          absl::StrCat("line ", src_.line(), ", column ", src_.column(), ": ", where, msg)));
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

  bool ParseHex4(uint32_t* out, bool is_key) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = HexVal(src_.Peek());
      if (h < 0) return StringFail("malformed \\u escape in string", is_key);
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

  // Fails with `what` and the string's place: the key whose value it is in, or a key.
  bool StringFail(absl::string_view what, bool is_key) {
    if (is_key) return Fail(absl::StrCat(what, ", in an object key"));
    if (member_key_ == nullptr) return Fail(what);
    return Fail(absl::StrCat(what, ", in the value of \"", *member_key_, "\""));
  }

  bool StringTooLong(bool is_key) {
    return StringFail(absl::StrCat("string longer than the limit of ", max_string_bytes_,
                                   " bytes (docs/format.md, \"Limits\")"),
                      is_key);
  }

  // Parses a string literal (after whitespace) into `out` (cleared first). The bytes must be
  // well-formed UTF-8, and the result at most max_string_bytes_ long. `is_key`: the string
  // is an object key (for messages).
  bool ParseString(std::string* out, bool is_key = false) {
    out->clear();
    src_.SkipWs();
    if (src_.Peek() != '"') return Fail(absl::StrCat("expected a string, got ", Found()));
    src_.Advance();
    while (true) {
      if (static_cast<int64_t>(out->size()) > max_string_bytes_) return StringTooLong(is_key);
      absl::string_view avail = src_.Available();
      if (avail.empty()) return StringFail("unterminated string", is_key);
      const auto* bytes = reinterpret_cast<const unsigned char*>(avail.data());
      size_t i = 0;
      int utf8 = 1;  // the last sequence's Utf8SequenceLength: 0 malformed, -1 cut by the chunk
      while (i < avail.size()) {
        const unsigned char c = bytes[i];
        if (c == '"' || c == '\\' || c < 0x20) break;
        if (c < 0x80) {
          ++i;
          continue;
        }
        utf8 = Utf8SequenceLength(bytes + i, avail.size() - i);
        if (utf8 <= 0) break;
        i += utf8;
      }
      // Checked before appending: a 5 GB literal fails at the limit, not in the allocator.
      if (static_cast<int64_t>(i) > max_string_bytes_ - static_cast<int64_t>(out->size())) {
        return StringTooLong(is_key);
      }
      out->append(avail.data(), i);
      src_.Skip(i);
      if (utf8 == 0) return StringFail("invalid UTF-8 in string", is_key);
      if (utf8 < 0) {
        if (!ParseSplitUtf8(out, is_key)) return false;
        continue;
      }
      if (i == avail.size()) continue;
      unsigned char c = avail[i];
      if (c == '"') {
        src_.Advance();
        return true;
      }
      if (c < 0x20) return StringFail("control character in string (must be escaped)", is_key);
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
          // A high surrogate must be followed by an escaped low one (the pair is one code
          // point); any other surrogate escape would decode to malformed UTF-8.
          constexpr absl::string_view kUnpaired = "unpaired surrogate in \\u escape";
          uint32_t cp = 0;
          if (!ParseHex4(&cp, is_key)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t lo = 0;
            if (src_.Peek() != '\\') return StringFail(kUnpaired, is_key);
            src_.Advance();
            if (src_.Peek() != 'u') return StringFail(kUnpaired, is_key);
            src_.Advance();
            if (!ParseHex4(&lo, is_key)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return StringFail(kUnpaired, is_key);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return StringFail(kUnpaired, is_key);
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          return StringFail("invalid escape in string", is_key);
      }
    }
  }

  // Reads, byte by byte, a multi-byte UTF-8 sequence that the end of a chunk cuts.
  bool ParseSplitUtf8(std::string* out, bool is_key) {
    unsigned char seq[4];
    size_t n = 0;
    while (true) {
      const int c = src_.Peek();
      if (c == -1) return StringFail("unterminated string", is_key);
      seq[n++] = static_cast<unsigned char>(c);
      const int len = Utf8SequenceLength(seq, n);
      if (len == 0) return StringFail("invalid UTF-8 in string", is_key);
      src_.Advance();
      if (len > 0) {
        out->append(reinterpret_cast<const char*>(seq), len);
        return true;
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

  // `raw` holds an unknown key's value so far (checked before each item and after each
  // string it takes in): bounded like a string.
  bool RawWithinLimit(const std::string& raw) {
    if (static_cast<int64_t>(raw.size()) <= max_string_bytes_) return true;
    return Fail(absl::StrCat("an unknown key's value is longer than the limit of ",
                             max_string_bytes_, " bytes (docs/format.md, \"Limits\")"));
  }

  // Parses any JSON value and appends it, minified, to `out` (for unknown keys). The same
  // rules as everywhere hold inside it: no duplicate keys, well-formed UTF-8, the limits.
  bool ParseRaw(std::string* out, int depth) {
    if (depth > kMaxDepth) return Fail("JSON nested too deeply");
    if (!RawWithinLimit(*out)) return false;
    src_.SkipWs();
    int c = src_.Peek();
    switch (c) {
      case '"': {
        if (!ParseString(&scratch_)) return false;
        AppendJsonString(out, scratch_);  // escaping may make it longer
        return RawWithinLimit(*out);
      }
      case '{': {
        src_.Advance();
        out->push_back('{');
        bool first = true;
        return ParseMembers(ObjectKind::kValue,
                            [&](absl::string_view key) {
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

  // Which object a duplicate key is in, for its message.
  enum class ObjectKind {
    kTop,     // the graph object: duplicate top-level key "k"
    kRecord,  // a node or parameter (named by the context): duplicate key "k"
    kMeta,    // a node's meta: duplicate key "meta.k"
    kValue,   // any other: duplicate key "k" in the value of "<the enclosing key>"
  };

  // The per-object state of ParseMembers, one per level of nesting: the set of keys seen
  // (reused, so a million small objects allocate nothing) and the enclosing member's key.
  class ObjectScope {
   public:
    explicit ObjectScope(Parser* p) : p_(p), parent_key_(p->member_key_) {
      if (p->key_sets_.size() <= p->object_depth_) {
        p->key_sets_.push_back(std::make_unique<KeySet>());
      }
      keys_ = p->key_sets_[p->object_depth_++].get();
      keys_->Clear();
    }
    ~ObjectScope() {
      --p_->object_depth_;
      p_->member_key_ = parent_key_;
    }
    ObjectScope(const ObjectScope&) = delete;
    ObjectScope& operator=(const ObjectScope&) = delete;
    KeySet& keys() { return *keys_; }
    const std::string* parent_key() const { return parent_key_; }

   private:
    Parser* p_;
    const std::string* parent_key_;
    KeySet* keys_;
  };

  bool DuplicateKey(ObjectKind kind, absl::string_view key, const std::string* parent_key) {
    switch (kind) {
      case ObjectKind::kTop:
        return Fail(absl::StrCat("duplicate top-level key \"", key, "\""));
      case ObjectKind::kMeta:
        return Fail(absl::StrCat("duplicate key \"meta.", key, "\""));
      case ObjectKind::kValue:
        if (parent_key != nullptr) {
          return Fail(
              absl::StrCat("duplicate key \"", key, "\" in the value of \"", *parent_key, "\""));
        }
        break;
      case ObjectKind::kRecord:
        break;
    }
    return Fail(absl::StrCat("duplicate key \"", key, "\""));
  }

  // Iterates the members of an object whose '{' was consumed: on_member(key) must parse the
  // value. Handles ',' and '}', and rejects a duplicate key (O(1) expected per key, so an
  // object with many keys is read in linear time), whatever the object.
  template <typename F>
  bool ParseMembers(ObjectKind kind, F&& on_member) {
    ObjectScope scope(this);
    src_.SkipWs();
    if (src_.Peek() == '}') {
      src_.Advance();
      return true;
    }
    std::string key;
    while (true) {
      if (!ParseString(&key, /*is_key=*/true)) return false;
      if (!scope.keys().Insert(key)) return DuplicateKey(kind, key, scope.parent_key());
      if (!Expect(':')) return false;
      member_key_ = &key;
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
        if (!dict.empty() && dict[0].first == "$float") {
          const Value& v = dict[0].second;
          const std::string* word = v.kind() == Value::Kind::kString ? &v.as_string() : nullptr;
          if (dict.size() != 1 || word == nullptr ||
              (*word != "inf" && *word != "-inf" && *word != "nan")) {
            return Fail("malformed float: expected {\"$float\": \"inf\" | \"-inf\" | \"nan\"}");
          }
          *out = Value::Double(*word == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                               : *word == "inf" ? std::numeric_limits<double>::infinity()
                                                : -std::numeric_limits<double>::infinity());
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
    return ParseMembers(ObjectKind::kValue, [&](absl::string_view key) {
      dict->emplace_back(std::string(key), Value());
      return ParseArgValue(&dict->back().second, depth + 1);
    });
  }

  // ---- graph structure ------------------------------------------------------------------------
  bool ParseMeta(NodeMeta* m) {
    if (!BeginObject("meta")) return false;
    // ParseMembers rejects a repeated key, so each field is read at most once.
    return ParseMembers(ObjectKind::kMeta, [&](absl::string_view key) {
      if (key == "shape") {
        m->has_shape = true;
        return ParseShapeField("meta.shape", &m->shape);
      }
      if (key == "dtype") {
        m->has_dtype = true;
        return ParseStringField("meta.dtype", &m->dtype);
      }
      if (key == "tensor_size") {
        m->has_tensor_size = true;
        return ParseSizeField("meta.tensor_size", &m->tensor_size);
      }
      if (key == "device_time") {
        m->has_device_time = true;
        return ParseDeviceTime(&m->device_time);
      }
      if (key == "aliases_input") {
        m->has_aliases_input = true;
        return ParseBoolField("meta.aliases_input", &m->aliases_input);
      }
      if (key == "param") {
        m->has_param = true;
        return ParseStringField("meta.param", &m->param);
      }
      if (key == "grad_of") {
        m->has_grad_of = true;
        return ParseStringField("meta.grad_of", &m->grad_of);
      }
      return ParseExtra(&m->extra, key);
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

  // An unknown key (its object's ParseMembers has checked that it is new).
  bool ParseExtra(Extras* extras, absl::string_view key) {
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
    // ParseMembers rejects a repeated key, so each field is read at most once.
    bool ok = ParseMembers(ObjectKind::kRecord, [&](absl::string_view key) {
      if (key == "name") {
        has_name = true;
        if (!ParseStringField("name", &name)) return false;
        context_name_ = &name;
        return true;
      }
      if (key == "op") {
        has_op = true;
        return ParseStringField("op", &op_name);
      }
      if (key == "target") {
        has_target = true;
        return ParseStringField("target", &target);
      }
      if (key == "args") {
        has_args = true;
        if (!BeginArray("args")) return false;
        return ParseElements([&]() {
          args.emplace_back();
          return ParseArgValue(&args.back(), 1);
        });
      }
      if (key == "kwargs") {
        has_kwargs = true;
        if (!BeginObject("kwargs")) return false;
        return ParseDictMembers(&kwargs, 0);
      }
      if (key == "meta") {
        has_meta = true;
        return ParseMeta(&meta);
      }
      return ParseExtra(&extra, key);
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
    // ParseMembers rejects a repeated key, so each field is read at most once.
    bool ok = ParseMembers(ObjectKind::kRecord, [&](absl::string_view key) {
      if (key == "name") {
        has_name = true;
        if (!ParseStringField("name", &p.name)) return false;
        context_name_ = &p.name;
        return true;
      }
      if (key == "owner") {
        has_owner = true;
        return ParseStringField("owner", &p.owner);
      }
      if (key == "bytes") {
        has_bytes = true;
        return ParseSizeField("bytes", &p.bytes);
      }
      if (key == "shape") {
        p.has_shape = true;
        return ParseShapeField("shape", &p.shape);
      }
      if (key == "dtype") {
        p.has_dtype = true;
        return ParseStringField("dtype", &p.dtype);
      }
      if (key == "requires_grad") {
        p.has_requires_grad = true;
        return ParseBoolField("requires_grad", &p.requires_grad);
      }
      if (key == "ddp_ignored") {
        p.has_ddp_ignored = true;
        return ParseBoolField("ddp_ignored", &p.ddp_ignored);
      }
      if (key == "storage") {
        p.has_storage = true;
        return ParseStringField("storage", &p.storage);
      }
      return ParseExtra(&p.extra, key);
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
    // ParseMembers rejects a repeated key, so each field is read at most once.
    bool ok = ParseMembers(ObjectKind::kTop, [&](absl::string_view key) {
      if (key == "format") {
        std::string f;
        has_format = true;
        if (!ParseStringField("format", &f)) return false;
        if (f != "overlap-graph") {
          return Fail(absl::StrCat("field \"format\" must be \"overlap-graph\", got \"", f, "\""));
        }
        return true;
      }
      if (key == "version") {
        has_version = true;
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
        has_name = true;
        if (!ParseStringField("name", &name)) return false;
        g_.set_name(std::move(name));
        return true;
      }
      if (key == "nodes") {
        has_nodes = true;
        if (!BeginArray("nodes")) return false;
        if (size_hint_ > 0) g_.ReserveNodes(size_hint_ / kBytesPerNodeEstimate);
        int64_t i = 0;
        return ParseElements([&]() { return ParseNode(i++); });
      }
      if (key == "params") {
        has_params = true;
        if (!BeginArray("params")) return false;
        g_.set_has_params_key(true);
        int64_t i = 0;
        return ParseElements([&]() { return ParseParam(i++); });
      }
      return ParseExtra(&g_.mutable_extra(), key);
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
  const int64_t size_hint_;         // bounded by kMaxSizeHintBytes
  const int64_t max_string_bytes_;  // ReadOptions::max_string_bytes
  Graph g_;
  NodeId output_ = kNoNode;
  std::string scratch_;
  // What is being parsed, for error messages; formatted only when an error occurs.
  enum class Context { kNone, kNode, kParam };
  Context context_ = Context::kNone;
  int64_t context_index_ = 0;
  const std::string* context_name_ = nullptr;  // the name once read, else null
  // The key whose value is being parsed (innermost object), for messages; null at the top.
  const std::string* member_key_ = nullptr;
  // ParseMembers' key sets, one per level of object nesting (ObjectScope).
  std::vector<std::unique_ptr<KeySet>> key_sets_;
  size_t object_depth_ = 0;
  absl::Status error_;
};

absl::StatusOr<Graph> Finish(absl::StatusOr<Graph> g, const ReadOptions& options) {
  if (!g.ok() || !options.verify) return g;
  absl::Status s = Verify(*g);
  // Verify quotes names from the input: escape them as the parser's own messages are.
  if (!s.ok()) return absl::Status(s.code(), Printable(s.message()));
  return g;
}

std::string TooLarge(int64_t max_bytes) {
  return absl::StrCat("the input is larger than the limit of ", max_bytes,
                      " bytes (docs/format.md, \"Limits\")");
}

// Closes a file opened by ReadGraphJsonFile (never stdin).
struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != stdin) std::fclose(f);
  }
};

}  // namespace

absl::StatusOr<Graph> ReadGraphJson(absl::string_view text, const ReadOptions& options) {
  if (static_cast<int64_t>(text.size()) > options.max_input_bytes) {
    return absl::InvalidArgumentError(TooLarge(options.max_input_bytes));
  }
  Source src(text);
  Parser parser(&src, static_cast<int64_t>(text.size()), options);
  return Finish(parser.Run(), options);
}

absl::StatusOr<Graph> ReadGraphJsonFile(const std::string& path, const ReadOptions& options) {
  const std::string shown = Printable(path);
  std::unique_ptr<std::FILE, FileCloser> f(path == "-" ? stdin : std::fopen(path.c_str(), "rb"));
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open \"", shown, "\": ", std::strerror(errno)));
  }
  // The file's type first: a directory opens (and reports a size of 2^63-1 on ext4) but holds
  // no text. Pipes and character devices (a terminal, /dev/stdin) are streams: read them.
  struct stat st;
  if (fstat(fileno(f.get()), &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat \"", shown, "\": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", shown, "\" is a directory"));
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", shown, "\" is not a regular file (nor a pipe or a character device)"));
  }
  int64_t size_hint = 0;
  if (S_ISREG(st.st_mode)) {
    // A regular file's size is known: refuse one over the limit before reading a byte. The
    // size is only a hint otherwise (Parser bounds it): a sparse file claims terabytes.
    if (st.st_size > options.max_input_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": ", st.st_size, " bytes: ", TooLarge(options.max_input_bytes)));
    }
    size_hint = st.st_size;
  }
  Source src(f.get(), options.max_input_bytes);
  Parser parser(&src, size_hint, options);
  absl::StatusOr<Graph> g = parser.Run();
  const bool read_error = src.read_error();
  const int read_errno = src.read_errno();
  f.reset();
  if (read_error) {
    return absl::DataLossError(absl::StrCat("error reading \"", shown, "\"",
                                            read_errno != 0 ? ": " : "",
                                            read_errno != 0 ? std::strerror(read_errno) : ""));
  }
  // A stream that went on past the limit: whatever the parser made of its first part, the
  // input is refused for its size (the parser saw an end that the input does not have).
  if (src.over_limit()) {
    return absl::InvalidArgumentError(absl::StrCat(shown, ": ", TooLarge(options.max_input_bytes)));
  }
  if (!g.ok()) {
    return absl::Status(g.status().code(), absl::StrCat(shown, ": ", g.status().message()));
  }
  absl::StatusOr<Graph> v = Finish(std::move(g), options);
  if (!v.ok()) {
    return absl::Status(v.status().code(), absl::StrCat(shown, ": ", v.status().message()));
  }
  return v;
}

}  // namespace overlap
