#pragma once

#include "jit/environment.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace nbits::jit {

using FileExists = std::function<bool(const std::string& path)>;

// Directories NVRTC needs for <cuda_fp16.h> (NVRTC 13 has no built-in copy):
// $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include, and for a
// pip-installed CUDA each LD_LIBRARY_PATH entry ending in nvidia/cuda_nvrtc/lib
// mapped to its sibling nvidia/cuda_runtime/include. Only directories that
// hold cuda_fp16.h are kept, in that order, without repeats.
std::vector<std::string> discover_include_dirs(const EnvLookup& env, const FileExists& exists);

// The same over the process environment and the real file system.
std::vector<std::string> discover_include_dirs();

// The fix a user needs when no directory was found.
std::string missing_half_headers_message(const std::string& op);

}  // namespace nbits::jit
