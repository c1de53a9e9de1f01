#include "jit/include_dirs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sys/stat.h>

namespace nbits::jit {
namespace {

std::string strip_trailing_slashes(std::string path)
{
    while (path.size() > 1 && path.back() == '/') {
        path.pop_back();
    }
    return path;
}

bool ends_with(const std::string& text, const std::string& suffix)
{
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> discover_include_dirs(const EnvLookup& env, const FileExists& exists)
{
    std::vector<std::string> candidates;
    for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
        if (auto root = env(variable); root && !root->empty()) {
            candidates.push_back(strip_trailing_slashes(*root) + "/include");
        }
    }
    candidates.emplace_back("/usr/local/cuda/include");
    if (auto library_path = env("LD_LIBRARY_PATH"); library_path) {
        const std::string nvrtc_lib = "nvidia/cuda_nvrtc/lib";
        std::size_t start = 0;
        while (start <= library_path->size()) {
            const std::size_t end = std::min(library_path->find(':', start), library_path->size());
            const std::string entry = strip_trailing_slashes(library_path->substr(start, end - start));
            if (ends_with(entry, nvrtc_lib)) {
                candidates.push_back(entry.substr(0, entry.size() - nvrtc_lib.size()) + "nvidia/cuda_runtime/include");
            }
            start = end + 1;
        }
    }
    std::vector<std::string> found;
    for (const std::string& dir : candidates) {
        if (exists(dir + "/cuda_fp16.h") && std::find(found.begin(), found.end(), dir) == found.end()) {
            found.push_back(dir);
        }
    }
    return found;
}

std::vector<std::string> discover_include_dirs()
{
    return discover_include_dirs(
        process_environment(),
        [](const std::string& path) {
            struct stat info {};
            return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
        });
}

std::string missing_half_headers_message(const std::string& op)
{
    return fmt::format(
        "{} needs the CUDA fp16 headers (cuda_fp16.h) for NVRTC, and none were found. Why: NVRTC 13 has no "
        "built-in cuda_fp16.h; nbits looks in $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include "
        "and, for a pip-installed CUDA, next to nvidia/cuda_nvrtc/lib entries of LD_LIBRARY_PATH. How to fix: "
        "install the CUDA runtime headers (the toolkit's cuda-cudart-dev package, or pip "
        "nvidia-cuda-runtime), or set CUDA_HOME or CUDA_PATH to the toolkit root",
        op);
}

}  // namespace nbits::jit
