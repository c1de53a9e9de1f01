#pragma once

#include <string>
#include <string_view>

namespace nbits::jit {

// `text` made safe to print on a terminal: names and key texts come from
// files anyone may have put into a cache directory, and a crafted one must
// not move the cursor, recolour or retitle the terminal, or reorder what is
// shown. C0 and C1 control characters, DEL, bidirectional formatting
// characters and bytes that are not UTF-8 become \xNN (or \u{NNNN});
// everything else, valid UTF-8 included, stays as it is. A message of
// several lines keeps its line breaks with `keep_line_breaks`.
std::string printable(std::string_view text, bool keep_line_breaks = false);

}  // namespace nbits::jit
