#include "child.hpp"
#include "runtime/internals.hpp"

#include "clock.hpp"
#include "decode_step.hpp"

#include "kernels.hpp"
#include "nbits/runtime.hpp"

#include <cstdio>
#include <sstream>
#include <vector>

namespace nbits::startup {
namespace {

constexpr const char* kLinePrefix = "nbits-startup-child";

}  // namespace

int run_child(const ChildOptions& options, int device)
{
    const std::int64_t main_at = monotonic_ns();
    RuntimeOptions runtime_options;
    runtime_options.device = device;
    runtime_options.granularity = options.granularity;
    runtime_options.disk_cache.directory = options.cache_dir;
    CudaRuntime runtime(runtime_options);
    const std::int64_t runtime_at = monotonic_ns();

    std::vector<const jit::KernelSource*> sources;
    std::vector<std::string> entries;
    std::int64_t first_at = 0;
    for (std::string_view entry : kDecodeStepEntries) {
        sources.push_back(&kernels::source_of_entry(entry));
        entries.emplace_back(entry);
        runtime.internals().function(*sources.back(), entry);
        if (first_at == 0) {
            first_at = monotonic_ns();
        }
    }
    const std::int64_t all_at = monotonic_ns();

    // Round-robin over the step's entries, as a decode loop asks for them:
    // once as a thread without the context current (each call pushes and
    // pops it), once as an engine thread that has the device's primary
    // context current already.
    std::uintptr_t sink = 0;
    auto time_lookups = [&] {
        const std::int64_t start = monotonic_ns();
        for (std::int64_t i = 0; i < options.hits; ++i) {
            const std::size_t which = static_cast<std::size_t>(i % static_cast<std::int64_t>(entries.size()));
            sink ^= reinterpret_cast<std::uintptr_t>(runtime.internals().function(*sources[which], entries[which]));
        }
        return options.hits > 0 ? static_cast<double>(monotonic_ns() - start) / static_cast<double>(options.hits) : 0.0;
    };
    const double hit_ns = time_lookups();
    double hit_current_ns = 0.0;
    {
        const CudaRuntime::Internals::ScopedContext current(runtime);
        hit_current_ns = time_lookups();
    }

    const ModuleCacheStats stats = runtime.internals().modules().stats();
    std::printf("%s spawn_to_main_ns=%lld runtime_ns=%lld first_ns=%lld all_ns=%lld hit_ns=%.3f hit_current_ns=%.3f "
                "compiles=%llu "
                "store_loads=%llu sink=%llu\n",
                kLinePrefix, static_cast<long long>(main_at - options.spawned_at_ns),
                static_cast<long long>(runtime_at - main_at), static_cast<long long>(first_at - runtime_at),
                static_cast<long long>(all_at - runtime_at), hit_ns, hit_current_ns,
                static_cast<unsigned long long>(stats.compiles), static_cast<unsigned long long>(stats.store_loads),
                static_cast<unsigned long long>(sink & 1));
    return 0;
}

std::optional<ChildTimings> parse_child_output(const std::string& output)
{
    const std::size_t at = output.find(kLinePrefix);
    if (at == std::string::npos) {
        return std::nullopt;
    }
    const std::size_t end = output.find('\n', at);
    std::istringstream words(output.substr(at, end == std::string::npos ? std::string::npos : end - at));
    ChildTimings timings;
    std::string word;
    while (words >> word) {
        const std::size_t equals = word.find('=');
        if (equals != std::string::npos) {
            timings[word.substr(0, equals)] = std::stod(word.substr(equals + 1));
        }
    }
    return timings;
}

}  // namespace nbits::startup
