#include "key_summary.hpp"

#include "kernels.hpp"

namespace nbits::prewarm {
namespace {

std::string source_name(std::string_view digest)
{
    for (const jit::KernelSource& source : kernels::all()) {
        if (source.digest() == digest) {
            return source.name();
        }
    }
    return "? " + std::string(digest.substr(0, 12));
}

}  // namespace

KeySummary summarize_key(std::string_view key_text)
{
    KeySummary summary;
    while (!key_text.empty()) {
        const std::size_t end = std::min(key_text.find('\n'), key_text.size());
        const std::string_view line = key_text.substr(0, end);
        key_text.remove_prefix(std::min(end + 1, key_text.size()));
        const std::size_t space = line.find(' ');
        if (space == std::string_view::npos) {
            continue;
        }
        const std::string_view label = line.substr(0, space);
        const std::string_view value = line.substr(space + 1);
        if (label == "source") {
            summary.source = source_name(value);
        } else if (label == "entries") {
            summary.entries = std::string(value);
        } else if (label == "target") {
            summary.target = std::string(value);
        } else if (label == "nvrtc") {
            summary.nvrtc = std::string(value);
        }
    }
    return summary;
}

}  // namespace nbits::prewarm
