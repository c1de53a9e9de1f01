#pragma once

#include "jit/embedded.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::jit {

// One parameter of a kernel entry, as its declaration in the .cu file says.
struct KernelParameter {
    // TensorMap: a CUtensorMap passed by value (`const __grid_constant__ TmaMap`).
    enum class Kind { Pointer, Int32, Float32, TensorMap, Unknown };
    // From a comment after the parameter, `// align N [when CONDITION]`, with
    // further clauses after ';': the byte alignment the entry's loads need of
    // the address under each condition (empty: always). The planner takes the
    // largest that applies.
    struct Alignment {
        std::uint32_t bytes = 1;
        std::string when;
    };
    std::string name;
    Kind kind = Kind::Unknown;
    std::vector<Alignment> alignment;
};

// An `extern "C" __global__` entry and its parameters in order.
struct KernelEntry {
    std::string name;
    std::vector<KernelParameter> parameters;
    // The index of the parameter called `parameter`, or -1.
    int find(std::string_view parameter) const;
};

// A header NVRTC resolves by name for `#include "name"`.
struct Header {
    std::string name;
    std::string text;
};

// One CUDA translation unit as NVRTC sees it: its text, the named headers it
// reaches through #include "...", and the extern "C" entries it declares.
// Immutable; its digest is computed once, here, so that looking a compiled
// function up never hashes the text again.
//
// nbits' own sources read nothing but their named headers, so NVRTC is given
// no include directory for them. `include_dirs` exists for sources that
// include toolkit headers such as <cuda_fp16.h>: the original kernels the
// tests compile as oracles. Image keys name such a directory by the content
// of its fp16 headers (include_dir_identity), never by its path.
class KernelSource {
public:
    // Keeps only the headers of `available` reachable from `text` (directly or
    // through other headers): those, and nothing else, are part of the digest.
    KernelSource(std::string name, std::string text, const std::vector<Header>& available = {},
                 std::vector<std::string> include_dirs = {});

    const std::string& name() const { return name_; }
    const std::string& text() const { return text_; }
    const std::vector<Header>& headers() const { return headers_; }
    const std::vector<std::string>& entries() const { return entries_; }
    const std::vector<std::string>& include_dirs() const { return include_dirs_; }
    // The declaration of `entry`, or nullptr when the source has none.
    const KernelEntry* entry(std::string_view entry) const;
    // Hex SHA-256 over the text and the reachable headers' names and texts.
    const std::string& digest() const { return digest_; }
    bool has_entry(std::string_view entry) const;

private:
    std::string name_;
    std::string text_;
    std::vector<Header> headers_;
    std::vector<std::string> entries_;
    std::vector<std::string> include_dirs_;
    std::vector<KernelEntry> declarations_;
    std::string digest_;
};

// The `#include "..."` names in a text, in order of appearance.
std::vector<std::string> quoted_includes(std::string_view text);
// The `extern "C" __global__ void [__launch_bounds__(...)] name(...)`
// declarations in a text, with their parameters.
std::vector<KernelEntry> declared_entries(std::string_view text);

// Builds one KernelSource per *.cu file of an embedded set; every *.cuh file
// of the set is available to them as a named header.
std::vector<KernelSource> sources_from(const EmbeddedFileSet& files, const std::vector<std::string>& include_dirs = {});

}  // namespace nbits::jit
