#pragma once

// What one nbits-startup invocation was asked to do.

#include "jit/target.hpp"
#include "runtime/module_cache.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace nbits::startup {

// Exit codes of nbits-startup.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a measured child process failed
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoGpu = 3;

// The measured child process: what the parent passes it.
struct ChildOptions {
    std::string cache_dir;
    CompileGranularity granularity = CompileGranularity::Entry;
    std::int64_t spawned_at_ns = 0;  // the parent's CLOCK_MONOTONIC just before it spawned this process
    std::int64_t hits = 0;           // in-process lookups to time after loading
};

struct StartupOptions {
    bool help = false;
    bool compile_only = false;
    int repeats = 5;
    std::int64_t hits = 1'000'000;
    int device = 0;
    std::string work_dir;                      // empty: $TMPDIR, else /tmp
    bool json = false;
    std::string json_out;

    bool child = false;
    ChildOptions child_options;
};

// Throws tools::UsageError.
StartupOptions parse_options(int argc, char** argv);
std::string help_text();

}  // namespace nbits::startup
