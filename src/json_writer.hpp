#pragma once

// The one JSON writer of nbits (plan dumps, tool reports): it places the
// commas, indents two spaces per level, escapes strings (bytes that are not
// UTF-8 become U+FFFD, so the output is always valid JSON text), and writes
// non-finite numbers as null (JSON has no NaN).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace nbits {

// The length and code point of the UTF-8 sequence at `at`; length 0 when
// the bytes there are not one (overlong, surrogate, beyond U+10FFFF, cut).
// The one decoder behind the JSON writer and the cache's printable text.
inline std::size_t utf8_sequence(std::string_view text, std::size_t at, std::uint32_t& code)
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

class JsonWriter {
public:
    JsonWriter& begin_object() { return open('{'); }
    JsonWriter& end_object() { return close('}'); }
    JsonWriter& begin_array() { return open('['); }
    JsonWriter& end_array() { return close(']'); }

    // The next value belongs to `name`.
    JsonWriter& key(std::string_view name)
    {
        separate();
        text_ += quoted(name) + ": ";
        after_key_ = true;
        return *this;
    }

    JsonWriter& value(std::string_view text) { return raw(quoted(text)); }
    JsonWriter& value(const char* text) { return text ? value(std::string_view(text)) : null(); }
    JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
    JsonWriter& value(bool flag) { return raw(flag ? "true" : "false"); }
    JsonWriter& value(double number)
    {
        if (!std::isfinite(number)) {
            return null();
        }
        char buffer[32];
        std::snprintf(buffer, sizeof(buffer), "%.9g", number);
        return raw(buffer);
    }
    template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    JsonWriter& value(T number)
    {
        return raw(std::to_string(number));
    }
    JsonWriter& null() { return raw("null"); }
    // A value rendered as JSON elsewhere, inserted as it is.
    JsonWriter& rendered(std::string_view json) { return raw(json); }

    template <typename T>
    JsonWriter& field(std::string_view name, const T& v)
    {
        return key(name).value(v);
    }

    const std::string& str() const { return text_; }

private:
    JsonWriter& open(char bracket)
    {
        separate();
        text_ += bracket;
        first_.push_back(true);
        return *this;
    }

    JsonWriter& close(char bracket)
    {
        const bool empty = first_.back();
        first_.pop_back();
        if (!empty) {
            newline();
        }
        text_ += bracket;
        if (first_.empty()) {
            text_ += '\n';
        }
        return *this;
    }

    JsonWriter& raw(std::string_view token)
    {
        separate();
        text_ += token;
        return *this;
    }

    // A comma and a new line before every element but the first of its
    // container; nothing between a key and its value.
    void separate()
    {
        if (after_key_) {
            after_key_ = false;
            return;
        }
        if (first_.empty()) {
            return;
        }
        if (!first_.back()) {
            text_ += ',';
        }
        first_.back() = false;
        newline();
    }

    void newline() { text_ += '\n' + std::string(2 * first_.size(), ' '); }

    static std::string quoted(std::string_view text)
    {
        std::string out = "\"";
        for (std::size_t at = 0; at < text.size(); ++at) {
            const char c = text[at];
            switch (c) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                default:
                    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                        char escaped[8];
                        std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
                        out += escaped;
                    } else if (static_cast<unsigned char>(c) < 0x80) {
                        out += c;
                    } else if (std::uint32_t code = 0; const std::size_t length = utf8_sequence(text, at, code)) {
                        out.append(text.substr(at, length));
                        at += length - 1;
                    } else {
                        out += "\\ufffd";
                    }
            }
        }
        return out + "\"";
    }

    std::string text_;
    std::vector<bool> first_;
    bool after_key_ = false;
};

}  // namespace nbits
