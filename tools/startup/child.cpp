// nbits-startup: the measured child process (it runs this executable again)
// and the parent's side of it: spawning, timing and reading its report.

#include "startup.hpp"

#include "kernels.hpp"
#include "nbits/launch_plan.hpp"
#include "nbits/runtime.hpp"
#include "runtime/internals.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace nbits::startup {
namespace {

constexpr const char* kLinePrefix = "nbits-startup-child";

std::vector<std::string> changed_environment(const std::map<std::string, std::string>& changes)
{
    std::vector<std::string> variables;
    for (char** variable = environ; *variable != nullptr; ++variable) {
        const std::string text = *variable;
        if (changes.find(text.substr(0, text.find('='))) == changes.end()) {
            variables.push_back(text);
        }
    }
    for (const auto& [name, value] : changes) {
        if (!value.empty()) {
            variables.push_back(name + "=" + value);
        }
    }
    return variables;
}

std::vector<char*> pointers(std::vector<std::string>& texts)
{
    std::vector<char*> result;
    for (std::string& text : texts) {
        result.push_back(text.data());
    }
    result.push_back(nullptr);
    return result;
}

}  // namespace

int run_child(const ChildOptions& options, int device)
{
    const std::int64_t main_at = monotonic_ns();
    RuntimeOptions runtime_options;
    runtime_options.device = device;
    runtime_options.granularity = options.granularity;
    runtime_options.jit_image = options.jit_image;
    runtime_options.disk_cache.directory = options.cache_dir;
    CudaRuntime runtime(runtime_options);
    const std::int64_t runtime_at = monotonic_ns();

    std::vector<const jit::KernelSource*> sources;
    std::vector<std::string> entries;
    for (std::string_view entry : kDecodeStepEntries) {
        sources.push_back(&kernels::source_of_entry(entry));
        entries.emplace_back(entry);
    }
    std::int64_t first_at = 0;
    if (options.prepare) {
        // What an engine does at session start: all the step's kernels at once.
        ops::LaunchPlan plan;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            ops::KernelStep step;
            step.source = sources[i]->name();
            step.entry = entries[i];
            plan.steps.emplace_back(std::move(step));
        }
        runtime.prepare({&plan});
        first_at = monotonic_ns();
    } else {
        for (std::size_t i = 0; i < entries.size(); ++i) {
            runtime.internals().function(*sources[i], entries[i]);
            if (first_at == 0) {
                first_at = monotonic_ns();
            }
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


ChildRun spawn_self(const std::vector<std::string>& arguments, const std::map<std::string, std::string>& environment)
{
    ChildRun run;
    std::vector<std::string> argv = {"/proc/self/exe"};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    argv.push_back("--spawned-at-ns");
    argv.push_back(std::string(24, ' '));  // filled in just before the spawn
    std::vector<std::string> envp = changed_environment(environment);

    int pipe_ends[2];
    if (::pipe(pipe_ends) != 0) {
        run.output = std::string("pipe failed: ") + std::strerror(errno);
        return run;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
    posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);

    std::vector<char*> argv_pointers = pointers(argv);
    std::vector<char*> envp_pointers = pointers(envp);
    pid_t pid = 0;
    argv.back() = std::to_string(monotonic_ns());
    argv_pointers[argv.size() - 1] = argv.back().data();
    const int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, argv_pointers.data(), envp_pointers.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_ends[1]);
    if (spawned != 0) {
        ::close(pipe_ends[0]);
        run.output = std::string("posix_spawn failed: ") + std::strerror(spawned);
        return run;
    }
    char buffer[4096];
    for (;;) {
        const ssize_t got = ::read(pipe_ends[0], buffer, sizeof(buffer));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;
        }
        run.output.append(buffer, static_cast<std::size_t>(got));
    }
    ::close(pipe_ends[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
}

}  // namespace nbits::startup
