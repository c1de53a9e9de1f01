#pragma once

#include "nbits/jit/embedded.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace nbits::jit {

// A header NVRTC resolves by name for `#include "name"`.
struct Header {
    std::string name;
    std::string text;
};

// One CUDA translation unit as NVRTC sees it: its text, the named headers it
// reaches through #include "...", and the extern "C" entries it declares.
// Immutable; its digest is computed once, here, so that looking a compiled
// function up never hashes the text again.
class KernelSource {
public:
    // Keeps only the headers of `available` reachable from `text` (directly or
    // through other headers): those, and nothing else, are part of the digest.
    KernelSource(std::string name, std::string text, const std::vector<Header>& available = {});

    const std::string& name() const { return name_; }
    const std::string& text() const { return text_; }
    const std::vector<Header>& headers() const { return headers_; }
    const std::vector<std::string>& entries() const { return entries_; }
    // Hex SHA-256 over the text and the reachable headers' names and texts.
    const std::string& digest() const { return digest_; }
    bool has_entry(std::string_view entry) const;

private:
    std::string name_;
    std::string text_;
    std::vector<Header> headers_;
    std::vector<std::string> entries_;
    std::string digest_;
};

// The `#include "..."` names in a text, in order of appearance.
std::vector<std::string> quoted_includes(std::string_view text);
// The `extern "C" __global__ void name(` declarations in a text.
std::vector<std::string> declared_entries(std::string_view text);

// Builds one KernelSource per *.cu file of an embedded set; every *.cuh file
// of the set is available to them as a named header.
std::vector<KernelSource> sources_from(const EmbeddedFileSet& files);

}  // namespace nbits::jit
