#include "toolkit_include_dirs.hpp"

#include "jit/environment.hpp"

#include <algorithm>
#include <sys/stat.h>

namespace nbits::test {

std::vector<std::string> toolkit_include_dirs()
{
    const jit::EnvLookup env = jit::process_environment();
    std::vector<std::string> candidates;
    for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
        if (auto root = env(variable); root && !root->empty()) {
            std::string dir = *root;
            while (dir.size() > 1 && dir.back() == '/') {
                dir.pop_back();
            }
            candidates.push_back(dir + "/include");
        }
    }
    candidates.emplace_back("/usr/local/cuda/include");
    std::vector<std::string> found;
    for (const std::string& dir : candidates) {
        struct stat info {};
        const std::string header = dir + "/cuda_fp16.h";
        if (::stat(header.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
            std::find(found.begin(), found.end(), dir) == found.end()) {
            found.push_back(dir);
        }
    }
    return found;
}

}  // namespace nbits::test
