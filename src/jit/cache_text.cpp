#include "jit/cache_text.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace nbits::jit {
namespace {

// The length and code point of the UTF-8 sequence at `at`; length 0 when
// the bytes there are not one (overlong, surrogate, beyond U+10FFFF, cut).
std::size_t utf8_sequence(std::string_view text, std::size_t at, std::uint32_t& code)
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    std::size_t length = 0;
    if (lead < 0x80) {
        code = lead;
        return 1;
    }
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2, code = lead & 0x1fu;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3, code = lead & 0x0fu;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4, code = lead & 0x07u;
    } else {
        return 0;
    }
    if (at + length > text.size()) {
        return 0;
    }
    for (std::size_t i = 1; i < length; ++i) {
        if ((byte(at + i) & 0xc0u) != 0x80u) {
            return 0;
        }
        code = (code << 6) | (byte(at + i) & 0x3fu);
    }
    const bool overlong = (length == 3 && code < 0x800) || (length == 4 && code < 0x10000);
    const bool surrogate = code >= 0xd800 && code <= 0xdfff;
    return overlong || surrogate || code > 0x10ffff ? 0 : length;
}

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
