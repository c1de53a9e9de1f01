#pragma once

// What the disk-cache and prewarm suites share: scratch directories and
// running the built tools.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <grp.h>
#include <string>
#include <string_view>
#include <sys/stat.h>
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
    // Lets every user reach what is inside (mkdtemp makes it private).
    void open_to_all() const { ::chmod(path_.c_str(), 0755); }

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

// Whether file permissions bind this process: root passes through them.
inline bool privileged() { return ::geteuid() == 0; }

// The user permission tests run as: this one, or nobody (65534) for root.
inline std::string unprivileged_prefix()
{
    return privileged() ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
}

// Runs `body` in a child process that file permissions bind (as nobody when
// this process is root) and returns the text it produced; an exception in
// it comes back as "exception: <what>".
inline std::string run_unprivileged(const std::function<std::string()>& body)
{
    int ends[2];
    if (::pipe(ends) != 0) {
        return "pipe failed";
    }
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(ends[0]);
        if (privileged() && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) {
            ::_exit(99);
        }
        std::string text;
        try {
            text = body();
        } catch (const std::exception& error) {
            text = std::string("exception: ") + error.what();
        }
        for (std::size_t done = 0; done < text.size();) {
            const ssize_t put = ::write(ends[1], text.data() + done, text.size() - done);
            if (put <= 0) {
                break;
            }
            done += static_cast<std::size_t>(put);
        }
        ::_exit(0);
    }
    ::close(ends[1]);
    std::string text;
    char buffer[4096];
    ssize_t got = 0;
    while ((got = ::read(ends[0], buffer, sizeof(buffer))) > 0) {
        text.append(buffer, static_cast<std::size_t>(got));
    }
    ::close(ends[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    return text;
}

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or cut sequences).
inline bool valid_utf8(std::string_view text)
{
    for (std::size_t at = 0; at < text.size();) {
        const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
        const unsigned char lead = byte(at);
        std::size_t length = lead < 0x80 ? 1 : lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3
                                             : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
        if (length == 0 || at + length > text.size()) {
            return false;
        }
        unsigned code = length == 1 ? lead : lead & (0x7fu >> length);
        for (std::size_t i = 1; i < length; ++i) {
            if ((byte(at + i) & 0xc0u) != 0x80u) {
                return false;
            }
            code = (code << 6) | (byte(at + i) & 0x3fu);
        }
        if ((length == 3 && code < 0x800) || (length == 4 && (code < 0x10000 || code > 0x10ffff)) ||
            (code >= 0xd800 && code <= 0xdfff)) {
            return false;
        }
        at += length;
    }
    return true;
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
