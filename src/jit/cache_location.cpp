#include "jit/disk_cache.hpp"

#include <fmt/format.h>

#include <cctype>
#include <limits>

namespace nbits::jit {
namespace {

std::string lowercase(std::string text)
{
    for (char& c : text) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return text;
}

std::optional<std::string> non_empty(const EnvLookup& env, const char* name)
{
    std::optional<std::string> value = env(name);
    return value && !value->empty() ? value : std::nullopt;
}

std::string join_path(const std::string& directory, const char* leaf)
{
    return directory + (directory.back() == '/' ? "" : "/") + leaf;
}

}  // namespace

std::optional<std::uint64_t> parse_byte_size(std::string_view text)
{
    std::uint64_t value = 0;
    std::size_t at = 0;
    for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at) {
        const std::uint64_t digit = static_cast<std::uint64_t>(text[at] - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
            return std::nullopt;
        }
        value = value * 10 + digit;
    }
    if (at == 0 || at + 1 < text.size()) {
        return std::nullopt;
    }
    int shift = 0;
    if (at < text.size()) {
        switch (std::tolower(static_cast<unsigned char>(text[at]))) {
        case 'k': shift = 10; break;
        case 'm': shift = 20; break;
        case 'g': shift = 30; break;
        case 't': shift = 40; break;
        default: return std::nullopt;
        }
    }
    if (value == 0 || value > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
        return std::nullopt;
    }
    return value << shift;
}

CacheLocation resolve_cache_location(const DiskCacheOptions& options, const EnvLookup& env)
{
    CacheLocation location;
    location.enabled = options.enabled;
    if (auto switch_value = non_empty(env, "NBITS_CACHE")) {
        const std::string value = lowercase(*switch_value);
        if (value == "off" || value == "0" || value == "false" || value == "no") {
            location.enabled = false;
        } else if (value != "on" && value != "1" && value != "true" && value != "yes") {
            location.ignored_setting = fmt::format(
                "NBITS_CACHE='{}' is neither on nor off; the disk cache stays {}. How to fix: set NBITS_CACHE=off "
                "to keep compiled kernels in memory only, or unset it",
                *switch_value, location.enabled ? "on" : "off");
        }
    }

    std::uint64_t max_bytes = options.max_bytes;
    if (max_bytes == 0) {
        if (auto text = non_empty(env, "NBITS_CACHE_MAX_BYTES")) {
            if (auto parsed = parse_byte_size(*text)) {
                max_bytes = *parsed;
            } else {
                location.ignored_setting = fmt::format(
                    "NBITS_CACHE_MAX_BYTES='{}' is not a size; the disk cache keeps at most {} bytes. How to fix: "
                    "write a byte count, optionally with a K, M or G suffix (e.g. 512M)",
                    *text, kDefaultCacheMaxBytes);
            }
        }
    }
    location.max_bytes = max_bytes != 0 ? max_bytes : kDefaultCacheMaxBytes;

    // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
    const std::optional<std::string> xdg = non_empty(env, "XDG_CACHE_HOME");
    if (!options.directory.empty()) {
        location.directory = options.directory;
    } else if (auto explicit_dir = non_empty(env, "NBITS_CACHE_DIR")) {
        location.directory = *explicit_dir;
    } else if (xdg && xdg->front() == '/') {
        location.directory = join_path(*xdg, "nbits");
    } else if (auto home = non_empty(env, "HOME")) {
        location.directory = join_path(*home, ".cache/nbits");
    } else if (location.enabled) {
        location.enabled = false;
        location.unusable_reason =
            "no directory for the nbits disk cache: none of NBITS_CACHE_DIR, XDG_CACHE_HOME and HOME is set, so "
            "compiled kernels stay in memory and every process compiles them again. How to fix: set "
            "NBITS_CACHE_DIR to a writable directory";
    }
    return location;
}

CacheLocation resolve_cache_location(const DiskCacheOptions& options)
{
    return resolve_cache_location(options, process_environment());
}

}  // namespace nbits::jit
