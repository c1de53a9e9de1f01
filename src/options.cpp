// The spellings of the public option enums, and the library version.

#include "nbits/nbits.hpp"

#include <initializer_list>

namespace nbits {

const char* version() { return NBITS_VERSION; }

const char* to_string(CompileGranularity granularity)
{
    return granularity == CompileGranularity::Entry ? "entry" : "source";
}

const char* to_string(JitImage image) { return image == JitImage::Ptx ? "ptx" : "cubin"; }

const char* to_string(KernelPolicy policy) { return policy == KernelPolicy::Original ? "original" : "fastest"; }

namespace {

// The value of `values` whose to_string is `text`: each spelling is written once, in its to_string.
template <class Enum>
std::optional<Enum> parse_spelling(std::string_view text, std::initializer_list<Enum> values)
{
    for (const Enum value : values) {
        if (text == to_string(value)) {
            return value;
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<CompileGranularity> parse_granularity(std::string_view text)
{
    return parse_spelling(text, {CompileGranularity::Entry, CompileGranularity::Source});
}

std::optional<JitImage> parse_jit_image(std::string_view text)
{
    return parse_spelling(text, {JitImage::Ptx, JitImage::Cubin});
}

std::optional<KernelPolicy> parse_kernel_policy(std::string_view text)
{
    return parse_spelling(text, {KernelPolicy::Original, KernelPolicy::Fastest});
}

}  // namespace nbits
