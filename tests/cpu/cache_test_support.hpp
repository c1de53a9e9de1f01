#pragma once

// What the disk-cache and prewarm suites share: scratch directories and
// running the built tools.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace nbits::test {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
public:
    TempDir()
    {
        std::string pattern = (std::filesystem::temp_directory_path() / "nbits-cache-test-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed for " + pattern);
        }
        path_ = pattern;
    }
    ~TempDir()
    {
        std::error_code ignored;
        std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::string& path() const { return path_; }
    std::string operator/(const std::string& leaf) const { return path_ + "/" + leaf; }

private:
    std::string path_;
};

struct CommandResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};

// Runs a shell command line; safe to call from several threads at once.
inline CommandResult run_command(const std::string& command_line)
{
    CommandResult result;
    FILE* pipe = ::popen((command_line + " 2>&1").c_str(), "r");
    if (pipe == nullptr) {
        return result;
    }
    char buffer[4096];
    std::size_t got = 0;
    while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
        result.output.append(buffer, got);
    }
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

#ifdef NBITS_BINARY_DIR
// A tool built next to the tests (tools in <build>/, tests in <build>/tests/),
// or empty when the build has no tools (NBITS_BUILD_TOOLS=OFF).
inline std::string built_tool(const std::string& name)
{
    const std::string path = std::string(NBITS_BINARY_DIR) + "/" + name;
    return ::access(path.c_str(), X_OK) == 0 ? path : std::string();
}
#endif

}  // namespace nbits::test
