#pragma once

#include "action_output.hpp"
#include "options.hpp"

#include "jit/disk_cache.hpp"

namespace nbits::prewarm {

// Compiles what `options` asks for into `cache`; exit code 1 when any
// compile failed. Throws Error(MissingHeaders) when NVRTC lacks cuda_fp16.h.
ActionOutput prewarm_images(const PrewarmOptions& options, jit::DiskCache& cache);

}  // namespace nbits::prewarm
