#pragma once

#include <cstddef>

namespace nbits::jit {

// One file of a directory embedded at build time (cmake/EmbedSources.cmake).
struct EmbeddedFile {
    const char* path;            // relative to the embedded directory, e.g. "nbits/reduce.cuh"
    const char* text;
    std::size_t size;
};

struct EmbeddedFileSet {
    const EmbeddedFile* files;
    std::size_t count;
    const EmbeddedFile* begin() const { return files; }
    const EmbeddedFile* end() const { return files + count; }
};

}  // namespace nbits::jit
