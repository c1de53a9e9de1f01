#pragma once

// --list, --verify and --clear: the cache as it is, without compiling.

#include "action_output.hpp"

#include "jit/disk_cache.hpp"

namespace nbits::prewarm {

ActionOutput list_images(const jit::DiskCache& cache);
// Exit code 1 when any image was damaged (those are removed).
ActionOutput verify_images(jit::DiskCache& cache);
ActionOutput clear_images(jit::DiskCache& cache);

}  // namespace nbits::prewarm
