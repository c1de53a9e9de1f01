#pragma once

#include "nbits/jit/image_store.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace nbits::jit {

// Where compiled kernel images persist between processes. The directory
// defaults to $NBITS_CACHE_DIR, else $XDG_CACHE_HOME/nbits, else
// ~/.cache/nbits; NBITS_CACHE=off (or `enabled = false`) keeps images in
// memory only.
struct DiskCacheOptions {
    bool enabled = true;
    std::string directory;                 // empty: the default above
    std::uint64_t max_bytes = 1ull << 30;  // least recently used images are evicted beyond this
};

class DiskCache;

// The cache the options describe, or nullptr when it is switched off or its
// directory cannot be used (then one warning goes to stderr and nbits keeps
// compiled images in memory only).
std::shared_ptr<DiskCache> open_disk_cache(const DiskCacheOptions& options);

// The cache seen as the module cache's image store.
std::shared_ptr<ImageStore> as_image_store(const std::shared_ptr<DiskCache>& cache);

}  // namespace nbits::jit
