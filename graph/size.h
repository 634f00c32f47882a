// Byte sizes on the command line and in reports.
//
// ParseSize accepts a number with an optional unit, as the interchange format's CLI
// results define them: KB / MB / GB / TB / PB / EB are powers of 1000, KiB / MiB / GiB /
// TiB / PiB / EiB powers of 1024, B or nothing means bytes ("25MiB", "1MB", "1048576").
// A decimal fraction is allowed with a unit and rounded to the nearest byte, so that what
// FormatBytes prints reads back ("195.1 KiB" -> 199782). Negative numbers, fractional
// bytes, unknown units and sizes beyond int64 are errors naming the text.
#ifndef OVERLAP_GRAPH_SIZE_H_
#define OVERLAP_GRAPH_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

absl::StatusOr<int64_t> ParseSize(absl::string_view text);

// "1.50 GiB", "512 B": binary units, three significant digits. For humans, not for files.
std::string FormatBytes(int64_t bytes);

// 68976648192 -> "68,976,648,192".
std::string FormatCount(int64_t n);

// Seconds with a readable unit: "1.23 ms", "45.6 us", "2.00 s".
std::string FormatSeconds(double s);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_SIZE_H_
