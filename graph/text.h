// Text taken from the input: UTF-8 well-formedness (the reader rejects malformed strings)
// and how messages show input text (every message that quotes a name, key, flag or path
// passes it through Printable).
#ifndef OVERLAP_GRAPH_TEXT_H_
#define OVERLAP_GRAPH_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace overlap {

// Length of the well-formed UTF-8 sequence that starts at p[0] (p[0..n), n >= 1), by Table
// 3-7 of the Unicode standard: 1 to 4; 0 if it is malformed (a stray continuation byte, an
// overlong form, a surrogate, a code point above U+10FFFF, a sequence cut short by a byte
// that is not a continuation); -1 if p[0..n) is a well-formed but incomplete prefix. O(1).
int Utf8SequenceLength(const unsigned char* p, size_t n);

// `s` made safe to show in a message: every byte below 0x20, DEL, the C1 controls
// (U+0080..U+009F) and every byte of malformed UTF-8 become \xNN, so that a NUL or an
// escape sequence in a name can neither cut a message short nor drive the terminal. Other
// text, including well-formed non-ASCII UTF-8, is kept, so applying it twice changes
// nothing more. O(size).
std::string Printable(absl::string_view s);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_TEXT_H_
