#pragma once

#include <string>
#include <string_view>

namespace nbits::jit {

enum class ImageKind { Ptx, Cubin };

// What NVRTC compiles for: PTX for a virtual architecture (compute_90) that
// the driver finishes at load time, or CUBIN for one real one (sm_90).
struct Target {
    int major = 0;
    int minor = 0;
    ImageKind kind = ImageKind::Ptx;

    static Target ptx(int major, int minor) { return {major, minor, ImageKind::Ptx}; }
    static Target cubin(int major, int minor) { return {major, minor, ImageKind::Cubin}; }
    // "sm_90" -> CUBIN, "compute_80" -> PTX. Throws Error(InvalidArgument).
    static Target parse(std::string_view text);

    std::string str() const;  // "compute_90" or "sm_90"
    int sm() const { return major * 10 + minor; }
    bool operator==(const Target& other) const
    {
        return major == other.major && minor == other.minor && kind == other.kind;
    }
    bool operator!=(const Target& other) const { return !(*this == other); }
};

}  // namespace nbits::jit
