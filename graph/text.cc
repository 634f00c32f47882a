#include "graph/text.h"

#include "absl/strings/str_cat.h"

namespace overlap {

// Length of the well-formed UTF-8 sequence that starts at p[0] (p[0..n), n >= 1), by Table
// 3-7 of the Unicode standard: 1 to 4; 0 if it is malformed (a stray continuation byte, an
// overlong form, a surrogate, a code point above U+10FFFF, a sequence cut short by a byte
// that is not a continuation); -1 if p[0..n) is a well-formed but incomplete prefix.
int Utf8SequenceLength(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c == 0xE0) {
    len = 3;
    lo = 0xA0;  // E0 80..9F would be overlong
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    len = 3;
  } else if (c == 0xED) {
    len = 3;
    hi = 0x9F;  // ED A0..BF would be a surrogate (U+D800..U+DFFF)
  } else if (c == 0xF0) {
    len = 4;
    lo = 0x90;  // F0 80..8F would be overlong
  } else if (c >= 0xF1 && c <= 0xF3) {
    len = 4;
  } else if (c == 0xF4) {
    len = 4;
    hi = 0x8F;  // F4 90.. would be above U+10FFFF
  } else {
    return 0;  // 80..C1 (continuation bytes, overlong 2-byte leads), F5..FF
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) return -1;
    const unsigned char b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return len;
}

// `s` made safe to show in a message: every byte below 0x20, DEL, the C1 controls
// (U+0080..U+009F) and every byte of malformed UTF-8 become \xNN, so that a NUL or an escape
// sequence in a name can neither cut a message short nor drive the terminal. Other text,
// including well-formed non-ASCII UTF-8, is kept. Messages are built from the input and then
// passed through this once, where they leave the reader.
std::string Printable(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    const int len = c < 0x80 ? 0 : Utf8SequenceLength(p + i, s.size() - i);
    const bool c1_control = len == 2 && c == 0xC2 && p[i + 1] < 0xA0;
    if (len > 0 && !c1_control) {
      out.append(s.data() + i, len);
      i += len;
      continue;
    }
    const int n = c1_control ? 2 : 1;
    for (int k = 0; k < n; ++k) {
      absl::StrAppend(&out, "\\x", absl::Hex(p[i + k], absl::kZeroPad2));
    }
    i += n;
  }
  return out;
}

}  // namespace overlap
