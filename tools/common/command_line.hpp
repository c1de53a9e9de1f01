#pragma once

// A small command-line parser for the nbits tools: `--flag`, `--name value`
// and `--name=value`, a generated --help text, and typed value parsers whose
// errors name the option. No positional arguments: every tool input is named,
// so a misspelt option is an error instead of a silently ignored word.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::tools {

// A bad value or an unknown option; its message is meant for the user.
class UsageError : public std::runtime_error {
public:
    explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

class CommandLine {
public:
    using Apply = std::function<void(const std::string& value)>;

    CommandLine(std::string usage, std::string summary) : usage_(std::move(usage)), summary_(std::move(summary)) {}

    // `--name` with no value sets `*target`.
    void flag(std::string name, std::string help, bool* target)
    {
        options_.push_back({std::move(name), "", std::move(help), [target](const std::string&) { *target = true; }});
    }

    // `--name VALUE` (or `--name=VALUE`); `apply` runs once per occurrence and
    // throws UsageError (or std::invalid_argument) for a bad value.
    void option(std::string name, std::string value_name, std::string help, Apply apply)
    {
        options_.push_back({std::move(name), std::move(value_name), std::move(help), std::move(apply)});
    }

    // A heading line in the --help text, before the options added after it.
    void section(std::string title) { options_.push_back({"", "", std::move(title), nullptr}); }

    // Throws UsageError naming the offending argument.
    void parse(int argc, char** argv) const
    {
        for (int i = 1; i < argc; ++i) {
            const std::string argument = argv[i];
            if (argument.rfind("--", 0) != 0) {
                throw UsageError("unexpected argument '" + argument + "' (every input is a --option; see --help)");
            }
            const std::size_t equals = argument.find('=');
            const std::string name = argument.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
            const Option* option = find(name);
            if (option == nullptr) {
                throw UsageError("unknown option '--" + name + "' (see --help)");
            }
            std::string value;
            if (option->value_name.empty()) {
                if (equals != std::string::npos) {
                    throw UsageError("option '--" + name + "' takes no value");
                }
            } else if (equals != std::string::npos) {
                value = argument.substr(equals + 1);
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                throw UsageError("option '--" + name + "' needs a value " + option->value_name);
            }
            try {
                option->apply(value);
            } catch (const std::invalid_argument& error) {
                throw UsageError("--" + name + " " + value + ": " + error.what());
            } catch (const UsageError& error) {
                throw UsageError("--" + name + " " + value + ": " + error.what());
            }
        }
    }

    std::string help() const
    {
        std::string text = "usage: " + usage_ + "\n\n" + summary_ + "\n";
        std::size_t width = 0;
        for (const Option& option : options_) {
            width = std::max(width, spelled(option).size());
        }
        for (const Option& option : options_) {
            if (option.name.empty()) {
                text += "\n" + option.help + ":\n";
                continue;
            }
            const std::string left = spelled(option);
            text += "  " + left + std::string(width - left.size() + 2, ' ');
            // Continuation lines of a multi-line help string line up under its first.
            for (char c : option.help) {
                text += c;
                if (c == '\n') {
                    text += std::string(width + 4, ' ');
                }
            }
            text += "\n";
        }
        return text;
    }

private:
    struct Option {
        std::string name;
        std::string value_name;
        std::string help;
        Apply apply;
    };

    const Option* find(const std::string& name) const
    {
        for (const Option& option : options_) {
            if (!option.name.empty() && option.name == name) {
                return &option;
            }
        }
        return nullptr;
    }

    static std::string spelled(const Option& option)
    {
        if (option.name.empty()) {
            return "";
        }
        return "--" + option.name + (option.value_name.empty() ? "" : " " + option.value_name);
    }

    std::string usage_;
    std::string summary_;
    std::vector<Option> options_;
};

// A whole decimal integer in [minimum, maximum]; throws std::invalid_argument.
inline std::int64_t parse_integer(std::string_view text, std::int64_t minimum = std::numeric_limits<std::int64_t>::min(),
                                  std::int64_t maximum = std::numeric_limits<std::int64_t>::max())
{
    const std::string copy(text);
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(copy.c_str(), &end, 10);
    if (copy.empty() || end != copy.c_str() + copy.size() || errno == ERANGE) {
        throw std::invalid_argument("'" + copy + "' is not an integer");
    }
    if (value < minimum || value > maximum) {
        throw std::invalid_argument(copy + " is outside " + std::to_string(minimum) + ".." + std::to_string(maximum));
    }
    return value;
}

// A whole decimal number; throws std::invalid_argument.
inline double parse_number(std::string_view text)
{
    const std::string copy(text);
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size() || errno == ERANGE) {
        throw std::invalid_argument("'" + copy + "' is not a number");
    }
    return value;
}

// "a,b,,c" -> {"a", "b", "c"}: empty items are dropped.
inline std::vector<std::string> split_list(std::string_view text, char separator = ',')
{
    std::vector<std::string> items;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find(separator, start);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        if (end > start) {
            items.emplace_back(text.substr(start, end - start));
        }
        start = end + 1;
    }
    return items;
}

}  // namespace nbits::tools
