#pragma once

#include "jit/compile.hpp"

#include <optional>
#include <string>
#include <vector>

namespace nbits::jit {

// Everything that changes a compiled image: source digest (headers included),
// entry set, target, NVRTC version and the compile options.
struct ImageKey {
    std::string source_digest;
    std::vector<std::string> entries;  // empty: the whole source
    Target target;
    std::string nvrtc_version;
    std::vector<std::string> options;  // -I<dir> appears as -I<include_dir_identity(dir)>

    static ImageKey for_request(const CompileRequest& request);
    // A text holding every component, one per line; equal keys, equal texts.
    std::string canonical() const;
    // Hex SHA-256 of `canonical()`.
    std::string digest() const;
};

// What an include directory contributes to an image: the content of the fp16
// headers NVRTC reads from it (cuda_fp16.h, cuda_fp16.hpp), not its path, so
// that a cache prewarmed where the toolkit lives at one path serves a runtime
// that finds the same headers at another. Computed once per directory.
std::string include_dir_identity(const std::string& dir);

// Somewhere compiled images outlive the process (the on-disk JIT cache).
class ImageStore {
public:
    virtual ~ImageStore() = default;
    // The image stored under `key`, or nothing (absent, damaged, or foreign).
    virtual std::optional<std::string> load(const ImageKey& key) = 0;
    virtual void store(const ImageKey& key, const std::string& image) = 0;
    // Forgets an image the driver refused to load.
    virtual void discard(const ImageKey& key) = 0;
};

// Compiles `request` unless `store` already holds its image; stores what it
// compiles. `compiled_now` says which happened.
CompiledImage compile_or_load(const CompileRequest& request, ImageStore* store, bool* compiled_now = nullptr);

}  // namespace nbits::jit
