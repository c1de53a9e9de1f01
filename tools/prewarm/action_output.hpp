#pragma once

#include <string>

namespace nbits::prewarm {

// Exit codes of nbits-prewarm.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a compile failed, damaged images found, or the cache is unusable
inline constexpr int kExitUsage = 2;

// What an action reports: a human table, the same as JSON, and the exit code.
struct ActionOutput {
    std::string text;
    std::string json;
    int exit_code = kExitOk;
};

}  // namespace nbits::prewarm
