#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nbits {

// How much one NVRTC compilation covers: the requested entry alone (fastest
// first launch) or the whole kernel source (one compile serves every entry).
enum class CompileGranularity { Entry, Source };

const char* to_string(CompileGranularity granularity);  // "entry" or "source"
std::optional<CompileGranularity> parse_granularity(std::string_view text);

// What the runtime compiles a kernel to when no cached image serves: PTX for
// compute_XY, which the driver translates to the GPU's machine code when it
// loads the module, or a CUBIN for the GPU's sm_XY, which NVRTC assembles in
// the compiling thread (CudaRuntime::prepare then assembles in parallel, and
// a later process loads the stored CUBIN without the driver's translation).
enum class JitImage { Ptx, Cubin };

const char* to_string(JitImage image);  // "ptx" or "cubin"
std::optional<JitImage> parse_jit_image(std::string_view text);

inline constexpr std::uint64_t kDefaultCacheMaxBytes = 1ull << 30;

// Where compiled kernel images persist between processes. An explicit option
// wins over the environment, the environment over the defaults.
struct DiskCacheOptions {
    // false, or NBITS_CACHE=off|0|false|no, keeps images in memory only.
    bool enabled = true;
    // Empty: $NBITS_CACHE_DIR, else $XDG_CACHE_HOME/nbits, else $HOME/.cache/nbits.
    std::string directory;
    // 0: $NBITS_CACHE_MAX_BYTES (a byte count, or with a K, M or G suffix),
    // else kDefaultCacheMaxBytes. Least recently used images go beyond it.
    std::uint64_t max_bytes = 0;
};

struct RuntimeOptions {
    int device = 0;
    CompileGranularity granularity = CompileGranularity::Entry;
    // PTX by default: on the H200 CUBIN loaded a decode step faster through
    // CudaRuntime::prepare (its compiles assemble in parallel) and slower one
    // entry after the other. Either way a driver that rejects this toolkit's
    // PTX makes the runtime switch to CUBIN.
    JitImage jit_image = JitImage::Ptx;
    DiskCacheOptions disk_cache;
};

// Which kernels an operator launches. Validation and error messages are the
// same under both; only the choice of launches differs.
enum class KernelPolicy {
    // The original operator's entries, geometry and output bytes.
    Original,
    // nbits' own kernels where they exist, the original's elsewhere.
    Fastest,
};

const char* to_string(KernelPolicy policy);  // "original" or "fastest"
std::optional<KernelPolicy> parse_kernel_policy(std::string_view text);

struct MatMulNBitsOptions {
    KernelPolicy policy = KernelPolicy::Original;
};

// Per call: where the work is ordered and where its scratch comes from.
struct RunOptions {
    // A stream of the runtime's context; every launch, copy and cuBLASLt call
    // of the run is ordered on it. nullptr: the runtime's own stream (pass
    // CU_STREAM_LEGACY for the legacy default stream).
    CUstream stream = nullptr;
    // Device scratch of the caller, at least MatMulNBits::workspace_bytes()
    // for the same tensors and 256-byte aligned. 0: nbits takes scratch from
    // its stream-ordered pool.
    CUdeviceptr workspace = 0;
    std::size_t workspace_bytes = 0;
};

}  // namespace nbits
