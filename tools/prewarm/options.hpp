#pragma once

// What one nbits-prewarm invocation was asked to do.

#include "jit/target.hpp"
#include "runtime/module_cache.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nbits::prewarm {

enum class Action { Prewarm, List, Verify, Clear, Help };

struct PrewarmOptions {
    Action action = Action::Prewarm;
    std::vector<jit::Target> targets;  // empty: the local GPUs, else sm_90
    std::string cache_dir;             // empty: where a runtime looks (NBITS_CACHE_DIR, ...)
    std::optional<std::uint64_t> max_bytes;
    int jobs = 0;                      // 0: hardware threads
    CompileGranularity granularity = CompileGranularity::Entry;
    std::vector<std::string> sources;  // empty: every embedded source
    bool json = false;
    std::string json_out;
};

// Throws tools::UsageError.
PrewarmOptions parse_options(int argc, char** argv);
std::string help_text();

}  // namespace nbits::prewarm
