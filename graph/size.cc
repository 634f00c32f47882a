#include "graph/size.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/text.h"

namespace overlap {

absl::StatusOr<int64_t> ParseSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid size \"", Printable(text), "\": ", why));
  };
  size_t digits = 0;
  while (digits < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[digits]))) {
    ++digits;
  }
  if (digits == 0) return bad("expected a non-negative number with an optional unit");
  uint64_t value;
  if (!absl::SimpleAtoi(s.substr(0, digits), &value)) return bad("number too large");
  // A fraction, as FormatBytes prints sizes ("195.1 KiB"): up to 9 digits.
  uint64_t fraction = 0, scale = 1;
  size_t end = digits;
  if (end < s.size() && s[end] == '.') {
    ++end;
    const size_t first = end;
    while (end < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[end]))) {
      if (end - first < 9) {
        fraction = fraction * 10 + static_cast<uint64_t>(s[end] - '0');
        scale *= 10;
      }
      ++end;
    }
    if (end == first) return bad("expected digits after the decimal point");
  }
  absl::string_view unit = absl::StripAsciiWhitespace(s.substr(end));
  struct Unit {
    const char* name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1000ULL},
      {"MB", 1000ULL * 1000},
      {"GB", 1000ULL * 1000 * 1000},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
      {"PB", 1000ULL * 1000 * 1000 * 1000 * 1000},
      {"EB", 1000ULL * 1000 * 1000 * 1000 * 1000 * 1000},
      {"KiB", 1ULL << 10},
      {"MiB", 1ULL << 20},
      {"GiB", 1ULL << 30},
      {"TiB", 1ULL << 40},
      {"PiB", 1ULL << 50},
      {"EiB", 1ULL << 60},
  };
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    if (fraction > 0 && u.factor == 1) return bad("a number of bytes is whole");
    // Exact: whole part x factor plus the fraction's share, rounded to the nearest byte.
    const unsigned __int128 part =
        (static_cast<unsigned __int128>(fraction) * u.factor + scale / 2) / scale;
    const unsigned __int128 bytes = static_cast<unsigned __int128>(value) * u.factor + part;
    if (bytes > static_cast<unsigned __int128>(INT64_MAX)) return bad("overflows 64 bits");
    return static_cast<int64_t>(bytes);
  }
  return bad("unknown unit (use B, KB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB or EiB)");
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.*f %s", v >= 100 ? 1 : 2, v, kUnits[u]);
}

std::string FormatCount(int64_t n) {
  std::string s = absl::StrCat(n);
  std::string out;
  const size_t start = (n < 0) ? 1 : 0;
  if (start) out.push_back('-');
  const size_t len = s.size() - start;
  for (size_t i = 0; i < len; ++i) {
    if (i > 0 && (len - i) % 3 == 0) out.push_back(',');
    out.push_back(s[start + i]);
  }
  return out;
}

std::string FormatSeconds(double s) {
  if (s == 0) return "0 s";
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3f ms", s * 1e3);
  if (s >= 1e-6) return absl::StrFormat("%.3f us", s * 1e6);
  return absl::StrFormat("%.1f ns", s * 1e9);
}

}  // namespace overlap
