#pragma once

#include <string>
#include <string_view>

namespace nbits::jit {

enum class ImageKind { Ptx, Cubin };

// What NVRTC compiles for: PTX for a virtual architecture (compute_90) that
// the driver finishes at load time, or CUBIN for one real one (sm_90). An
// arch-specific target (compute_90a, sm_90a) unlocks instructions of exactly
// that architecture (wgmma) and loads on no other.
struct Target {
    int major = 0;
    int minor = 0;
    ImageKind kind = ImageKind::Ptx;
    bool arch_specific = false;

    static Target ptx(int major, int minor, bool arch_specific = false)
    {
        return {major, minor, ImageKind::Ptx, arch_specific};
    }
    static Target cubin(int major, int minor, bool arch_specific = false)
    {
        return {major, minor, ImageKind::Cubin, arch_specific};
    }
    // "sm_90" -> CUBIN, "compute_80" -> PTX, "sm_90a" arch-specific. Throws Error(InvalidArgument).
    static Target parse(std::string_view text);

    std::string str() const;  // "compute_90", "sm_90" or "sm_90a"
    int sm() const { return major * 10 + minor; }
    bool operator==(const Target& other) const
    {
        return major == other.major && minor == other.minor && kind == other.kind &&
               arch_specific == other.arch_specific;
    }
    bool operator!=(const Target& other) const { return !(*this == other); }
};

}  // namespace nbits::jit
