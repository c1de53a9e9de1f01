#include "scratch_dir.hpp"

#include "nbits/error.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace nbits::startup {

ScratchDir::ScratchDir(const std::string& parent)
{
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = (parent.empty() ? std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") : parent) +
                          "/nbits-startup-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw Error(ErrorKind::Io, "cannot create a scratch directory " + pattern + ": " + std::strerror(errno) +
                                       ". How to fix: pass --work-dir with a writable directory");
    }
    root_ = pattern;
}

ScratchDir::~ScratchDir()
{
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
}

}  // namespace nbits::startup
