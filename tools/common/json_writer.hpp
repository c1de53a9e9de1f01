#pragma once

// A streaming JSON writer for tool output read by machines: it places the
// commas, indents two spaces per level, escapes strings, and writes
// non-finite numbers as null (JSON has no NaN).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace nbits::tools {

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
        for (char c : text) {
            switch (c) {
                case '"': out += "\\\""; break;
                case '\\': out += "\\\\"; break;
                case '\n': out += "\\n"; break;
                case '\r': out += "\\r"; break;
                case '\t': out += "\\t"; break;
                default:
                    if (static_cast<unsigned char>(c) < 0x20) {
                        char escaped[8];
                        std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
                        out += escaped;
                    } else {
                        out += c;
                    }
            }
        }
        return out + "\"";
    }

    std::string text_;
    std::vector<bool> first_;
    bool after_key_ = false;
};

}  // namespace nbits::tools
