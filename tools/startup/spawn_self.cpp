#include "spawn_self.hpp"

#include "clock.hpp"

#include <cerrno>
#include <cstring>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace nbits::startup {
namespace {

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
