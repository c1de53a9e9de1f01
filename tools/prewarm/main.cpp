// nbits-prewarm: fills the nbits disk cache with compiled kernel images ahead
// of time (at deploy or image build time), so that an engine's first launch
// loads an image instead of compiling.

#include "cache_actions.hpp"
#include "command_line.hpp"
#include "options.hpp"
#include "prewarm_action.hpp"

#include "nbits/error.hpp"
#include "jit/disk_cache.hpp"

#include <cstdio>
#include <fstream>

using namespace nbits;
using namespace nbits::prewarm;

namespace {

// The directory a runtime in this environment would use, unless --cache-dir names one.
jit::DiskCache open_cache(const PrewarmOptions& options)
{
    const jit::CacheLocation location = jit::resolve_cache_location(jit::DiskCacheOptions{});
    const std::string directory = options.cache_dir.empty() ? location.directory : options.cache_dir;
    if (directory.empty()) {
        throw tools::UsageError("no cache directory: " + location.unusable_reason + " (or pass --cache-dir)");
    }
    if (!location.enabled && location.unusable_reason.empty()) {
        std::fprintf(stderr, "nbits-prewarm: note: the disk cache is switched off here (NBITS_CACHE); runtimes in "
                             "this environment will not read %s\n", directory.c_str());
    }
    return jit::DiskCache(directory, options.max_bytes.value_or(location.max_bytes));
}

ActionOutput perform(const PrewarmOptions& options)
{
    jit::DiskCache cache = open_cache(options);
    switch (options.action) {
    case Action::List: return list_images(cache);
    case Action::Verify: return verify_images(cache);
    case Action::Clear: return clear_images(cache);
    default: return prewarm_images(options, cache);
    }
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        const PrewarmOptions options = parse_options(argc, argv);
        if (options.action == Action::Help) {
            std::fputs(help_text().c_str(), stdout);
            return kExitOk;
        }
        const ActionOutput output = perform(options);
        std::fputs((options.json ? output.json : output.text).c_str(), stdout);
        if (!options.json_out.empty() && !(std::ofstream(options.json_out) << output.json)) {
            std::fprintf(stderr, "nbits-prewarm: cannot write %s\n", options.json_out.c_str());
            return kExitFailed;
        }
        return output.exit_code;
    } catch (const tools::UsageError& error) {
        std::fprintf(stderr, "nbits-prewarm: %s\n", error.what());
        return kExitUsage;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "nbits-prewarm: %s\n", error.what());
        return kExitFailed;
    }
}
