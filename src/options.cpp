// The spellings of the public option enums, and the library version.

#include "nbits/nbits.hpp"

namespace nbits {

const char* version() { return NBITS_VERSION; }

const char* to_string(CompileGranularity granularity)
{
    return granularity == CompileGranularity::Entry ? "entry" : "source";
}

std::optional<CompileGranularity> parse_granularity(std::string_view text)
{
    if (text == "entry") {
        return CompileGranularity::Entry;
    }
    if (text == "source") {
        return CompileGranularity::Source;
    }
    return std::nullopt;
}

const char* to_string(JitImage image) { return image == JitImage::Ptx ? "ptx" : "cubin"; }

std::optional<JitImage> parse_jit_image(std::string_view text)
{
    if (text == "ptx") {
        return JitImage::Ptx;
    }
    if (text == "cubin") {
        return JitImage::Cubin;
    }
    return std::nullopt;
}

const char* to_string(KernelPolicy policy) { return policy == KernelPolicy::Original ? "original" : "fastest"; }

std::optional<KernelPolicy> parse_kernel_policy(std::string_view text)
{
    if (text == "original") {
        return KernelPolicy::Original;
    }
    if (text == "fastest") {
        return KernelPolicy::Fastest;
    }
    return std::nullopt;
}

}  // namespace nbits
