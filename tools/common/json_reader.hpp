#pragma once

// A small JSON reader for the tools' own reports (nbits-bench --from-json):
// a value tree, numbers kept as their text so that 64-bit integers survive,
// and errors that say where the text went wrong.

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nbits::tools {

class JsonValue {
public:
    enum class Type { Null, Bool, Number, String, Array, Object };

    Type type = Type::Null;
    bool boolean = false;
    std::string text;  // a string's value, or a number's literal
    std::vector<JsonValue> items;
    std::vector<std::pair<std::string, JsonValue>> members;

    bool is_null() const { return type == Type::Null; }
    // The member `key` of an object, or nullptr (also for a non-object).
    const JsonValue* find(std::string_view key) const
    {
        if (type != Type::Object) {
            return nullptr;
        }
        for (const auto& [name, value] : members) {
            if (name == key) {
                return &value;
            }
        }
        return nullptr;
    }

    double number(double fallback = 0.0) const
    {
        return type == Type::Number ? std::strtod(text.c_str(), nullptr) : fallback;
    }
    std::uint64_t unsigned_integer(std::uint64_t fallback = 0) const
    {
        return type == Type::Number ? std::strtoull(text.c_str(), nullptr, 10) : fallback;
    }
    std::string string(const std::string& fallback = "") const { return type == Type::String ? text : fallback; }
    bool flag(bool fallback = false) const { return type == Type::Bool ? boolean : fallback; }
};

namespace detail {

class JsonParser {
public:
    explicit JsonParser(std::string_view text) : text_(text) {}

    JsonValue document()
    {
        JsonValue value = parse_value(0);
        skip_space();
        if (at_ < text_.size()) {
            fail("text after the document");
        }
        return value;
    }

private:
    static constexpr int kMaxDepth = 64;

    [[noreturn]] void fail(const std::string& what) const
    {
        throw std::runtime_error("JSON: " + what + " at byte " + std::to_string(at_));
    }

    void skip_space()
    {
        while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\r' || text_[at_] == '\t')) {
            ++at_;
        }
    }

    bool take(char c)
    {
        skip_space();
        if (at_ < text_.size() && text_[at_] == c) {
            ++at_;
            return true;
        }
        return false;
    }

    void expect(char c)
    {
        if (!take(c)) {
            fail(std::string("expected '") + c + "'");
        }
    }

    bool literal(std::string_view word)
    {
        if (text_.substr(at_, word.size()) == word) {
            at_ += word.size();
            return true;
        }
        return false;
    }

    JsonValue parse_value(int depth)
    {
        if (depth > kMaxDepth) {
            fail("nesting too deep");
        }
        skip_space();
        if (at_ >= text_.size()) {
            fail("unexpected end");
        }
        JsonValue value;
        const char c = text_[at_];
        if (c == '{') {
            ++at_;
            value.type = JsonValue::Type::Object;
            if (take('}')) {
                return value;
            }
            do {
                skip_space();
                if (at_ >= text_.size() || text_[at_] != '"') {
                    fail("expected a member name");
                }
                std::string name = parse_string();
                expect(':');
                value.members.emplace_back(std::move(name), parse_value(depth + 1));
            } while (take(','));
            expect('}');
        } else if (c == '[') {
            ++at_;
            value.type = JsonValue::Type::Array;
            if (take(']')) {
                return value;
            }
            do {
                value.items.push_back(parse_value(depth + 1));
            } while (take(','));
            expect(']');
        } else if (c == '"') {
            value.type = JsonValue::Type::String;
            value.text = parse_string();
        } else if (literal("true")) {
            value.type = JsonValue::Type::Bool;
            value.boolean = true;
        } else if (literal("false")) {
            value.type = JsonValue::Type::Bool;
        } else if (literal("null")) {
            value.type = JsonValue::Type::Null;
        } else {
            value.type = JsonValue::Type::Number;
            value.text = parse_number();
        }
        return value;
    }

    std::string parse_number()
    {
        const std::size_t start = at_;
        if (at_ < text_.size() && text_[at_] == '-') {
            ++at_;
        }
        const auto digits = [&] {
            const std::size_t from = at_;
            while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
                ++at_;
            }
            return at_ > from;
        };
        if (!digits()) {
            fail("expected a value");
        }
        if (at_ < text_.size() && text_[at_] == '.') {
            ++at_;
            if (!digits()) {
                fail("expected digits after '.'");
            }
        }
        if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
            ++at_;
            if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) {
                ++at_;
            }
            if (!digits()) {
                fail("expected an exponent");
            }
        }
        return std::string(text_.substr(start, at_ - start));
    }

    unsigned hex4()
    {
        if (at_ + 4 > text_.size()) {
            fail("short \\u escape");
        }
        unsigned code = 0;
        for (int i = 0; i < 4; ++i) {
            const char h = text_[at_++];
            code <<= 4;
            if (h >= '0' && h <= '9') {
                code |= static_cast<unsigned>(h - '0');
            } else if (h >= 'a' && h <= 'f') {
                code |= static_cast<unsigned>(h - 'a' + 10);
            } else if (h >= 'A' && h <= 'F') {
                code |= static_cast<unsigned>(h - 'A' + 10);
            } else {
                fail("bad \\u escape");
            }
        }
        return code;
    }

    static void append_utf8(std::string& out, unsigned code)
    {
        if (code < 0x80) {
            out += static_cast<char>(code);
        } else if (code < 0x800) {
            out += static_cast<char>(0xc0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3f));
        } else if (code < 0x10000) {
            out += static_cast<char>(0xe0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (code & 0x3f));
        } else {
            out += static_cast<char>(0xf0 | (code >> 18));
            out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (code & 0x3f));
        }
    }

    std::string parse_string()
    {
        ++at_;  // the opening quote
        std::string out;
        while (true) {
            if (at_ >= text_.size()) {
                fail("unterminated string");
            }
            const char c = text_[at_++];
            if (c == '"') {
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) {
                fail("control character in a string");
            }
            if (c != '\\') {
                out += c;
                continue;
            }
            if (at_ >= text_.size()) {
                fail("unterminated escape");
            }
            const char e = text_[at_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                unsigned code = hex4();
                if (code >= 0xd800 && code <= 0xdbff && text_.substr(at_, 2) == "\\u") {
                    at_ += 2;
                    const unsigned low = hex4();
                    code = low >= 0xdc00 && low <= 0xdfff ? 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00) : 0xfffd;
                } else if (code >= 0xd800 && code <= 0xdfff) {
                    code = 0xfffd;
                }
                append_utf8(out, code);
                break;
            }
            default: fail("bad escape");
            }
        }
    }

    std::string_view text_;
    std::size_t at_ = 0;
};

}  // namespace detail

// Throws std::runtime_error naming the byte where the text is not JSON.
inline JsonValue parse_json(std::string_view text) { return detail::JsonParser(text).document(); }

}  // namespace nbits::tools
