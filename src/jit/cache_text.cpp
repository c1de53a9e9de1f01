#include "jit/cache_text.hpp"

#include "json_writer.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace nbits::jit {
namespace {

bool shown_escaped(std::uint32_t code)
{
    return code < 0x20 || (code >= 0x7f && code <= 0x9f) ||  // C0, DEL, C1
           code == 0x061c || code == 0x200e || code == 0x200f ||  // bidirectional marks
           (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069);  // embeddings, isolates
}

}  // namespace

std::string printable(std::string_view text, bool keep_line_breaks)
{
    std::string out;
    out.reserve(text.size());
    for (std::size_t at = 0; at < text.size();) {
        std::uint32_t code = 0;
        const std::size_t length = utf8_sequence(text, at, code);
        if (length == 0) {
            out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[at]));
            ++at;
            continue;
        }
        if (shown_escaped(code) && !(keep_line_breaks && code == '\n')) {
            // \xNN stays for single bytes, so that a C1 character (two bytes of
            // UTF-8) reads differently from a stray byte of the same value.
            out += code < 0x80 ? fmt::format("\\x{:02x}", code) : fmt::format("\\u{{{:04x}}}", code);
        } else {
            out.append(text.substr(at, length));
        }
        at += length;
    }
    return out;
}

}  // namespace nbits::jit
