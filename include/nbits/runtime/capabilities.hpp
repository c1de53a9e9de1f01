#pragma once

#include <cstdint>
#include <string>

namespace nbits {

// What the driver reported for a device; zero means "reported nothing".
struct DeviceAttributes {
    int compute_major = 0;
    int compute_minor = 0;
    int max_threads_per_block = 0;
    int max_shared_memory_per_block = 0;
    int max_shared_memory_per_block_optin = 0;
    int multiprocessor_count = 0;
    std::string name;
};

// The device facts kernel selection depends on, read once per runtime.
struct Capabilities {
    int compute_major = 0;
    int compute_minor = 0;
    std::uint32_t max_threads_per_block = 256;
    std::uint32_t max_shared_memory_per_block = 48 * 1024;
    std::uint32_t max_shared_memory_per_block_optin = 48 * 1024;
    std::uint32_t multiprocessor_count = 1;
    std::string name;

    // Applies the original's fallbacks: 256 threads, 48 KiB shared memory,
    // opt-in = default and never below it, 1 multiprocessor. A compute
    // capability with major 0 is Error(UnsupportedDevice).
    static Capabilities from(const DeviceAttributes& attributes);

    // Named devices for tests and the plan dump.
    static Capabilities h200();      // sm_90, 132 SMs, 227 KiB opt-in
    static Capabilities rtx4090();   // sm_89, 128 SMs, 99 KiB opt-in
    static Capabilities l4();        // sm_89, 58 SMs, 99 KiB opt-in
    static Capabilities sm89_46();   // sm_89, 46 SMs, 99 KiB opt-in (RTX 4070 class)
    static Capabilities sm86_28();   // sm_86, 28 SMs, 99 KiB opt-in (RTX 3060 class)
    static Capabilities a100();      // sm_80, 108 SMs, 163 KiB opt-in
};

// What `configure_dynamic_shared_memory` does for a request.
enum class SharedMemoryAction {
    Unchanged,   // fits the default per-block budget
    RaiseLimit,  // fits only after raising CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

// Pure decision: the function's static shared memory is subtracted from both
// budgets. Throws Error(Unsupported) when `requested` exceeds the opt-in one.
SharedMemoryAction decide_dynamic_shared_memory(std::uint32_t requested, std::uint32_t static_bytes,
                                                const Capabilities& capabilities, const std::string& what);

}  // namespace nbits
