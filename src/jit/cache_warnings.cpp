#include "jit/disk_cache.hpp"

#include <cstdio>

namespace nbits::jit {

void CacheWarnings::once(CacheWarning kind, const std::string& message)
{
    if (!told_[static_cast<std::size_t>(kind)].exchange(true) && sink_) {
        sink_(message);
    }
}

CacheWarnings& CacheWarnings::process()
{
    static CacheWarnings warnings([](const std::string& message) {
        std::fprintf(stderr, "nbits: warning: %s\n", message.c_str());
    });
    return warnings;
}

}  // namespace nbits::jit
