#include "jit/disk_cache.hpp"

#include "jit/cache_text.hpp"

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
        // Messages name directories from the environment, which may hold anything.
        std::fprintf(stderr, "nbits: warning: %s\n", printable(message, true).c_str());
    });
    return warnings;
}

}  // namespace nbits::jit
