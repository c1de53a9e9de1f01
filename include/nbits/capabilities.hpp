#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace nbits {

// What the driver reported for a device; zero means "reported nothing".
struct DeviceAttributes {
    int compute_major = 0;
    int compute_minor = 0;
    int max_threads_per_block = 0;
    int max_threads_per_multiprocessor = 0;
    int max_shared_memory_per_block = 0;
    int max_shared_memory_per_block_optin = 0;
    int multiprocessor_count = 0;
    std::uint64_t total_memory_bytes = 0;
    int memory_clock_khz = 0;       // peak memory clock
    int memory_bus_width_bits = 0;  // global memory bus width
    std::string name;
    // Thread block clusters of 2, 3 and 4 CTAs that run at once, one CTA an SM
    // (cuOccupancyMaxActiveClusters, compute capability 9.0 and newer).
    std::array<int, 3> clusters_a_cta_an_sm{};
};

// The device facts kernel selection depends on, read once per runtime.
struct Capabilities {
    int compute_major = 0;
    int compute_minor = 0;
    std::uint32_t max_threads_per_block = 256;
    // Resident threads per SM: 2048 on sm_80, sm_90 and sm_100, 1536 on
    // sm_86, sm_89 and sm_120 class parts.
    std::uint32_t max_threads_per_multiprocessor = 1536;
    std::uint32_t max_shared_memory_per_block = 48 * 1024;
    std::uint32_t max_shared_memory_per_block_optin = 48 * 1024;
    std::uint32_t multiprocessor_count = 1;
    std::uint64_t total_memory_bytes = 0;  // 0: unknown
    // Peak DRAM bandwidth, two transfers a memory clock over the bus (what the
    // driver's clock and bus width give; HBM and GDDR report them so). The
    // decode plan asks how many bytes an SM must keep in flight. 0: unknown.
    std::uint32_t memory_bandwidth_gb_per_s = 0;
    std::string name;
    // Thread block clusters of 2, 3 and 4 CTAs that run at once, one CTA an
    // SM, as the driver counts them for this GPU: a cluster's CTAs share a
    // GPC, whose SM counts differ from chip to chip. 0: not reported (named
    // devices, GPUs without clusters); the planner then estimates them from
    // the SM count (see clusters_at_once).
    std::array<std::uint32_t, 3> clusters_a_cta_an_sm{};

    // Applies the original's fallbacks: 256 threads, 48 KiB shared memory,
    // opt-in = default and never below it, 1 multiprocessor; resident threads
    // per SM from the compute capability when the driver reports none. A compute
    // capability with major 0 is Error(UnsupportedDevice).
    static Capabilities from(const DeviceAttributes& attributes);

    // Named devices for tests and the plan dump.
    static Capabilities h200();      // sm_90, 132 SMs, 227 KiB opt-in, 4.9 TB/s
    static Capabilities h100();      // sm_90, 132 SMs, 227 KiB opt-in, 3.35 TB/s (SXM, HBM3)
    static Capabilities h100_pcie(); // sm_90, 114 SMs, 227 KiB opt-in
    static Capabilities h20();       // sm_90, 78 SMs, 227 KiB opt-in
    static Capabilities rtx4090();   // sm_89, 128 SMs, 99 KiB opt-in
    static Capabilities l4();        // sm_89, 58 SMs, 99 KiB opt-in
    static Capabilities sm89_46();   // sm_89, 46 SMs, 99 KiB opt-in (RTX 4070 class)
    static Capabilities sm86_28();   // sm_86, 28 SMs, 99 KiB opt-in (RTX 3060 class)
    static Capabilities a100();      // sm_80, 108 SMs, 163 KiB opt-in
    static Capabilities rtx5090();   // sm_120, 170 SMs, 99 KiB opt-in, 48 resident warps per SM

    int sm() const { return compute_major * 10 + compute_minor; }
    // Clusters of `size` CTAs (2, 3 or 4) that run at once, one CTA an SM: the
    // driver's count, else the estimate of an H100's GPCs (132 SMs: 66, 39, 30):
    // half the SMs in pairs, 8/9 of them in clusters of 3, 10/11 in clusters of 4.
    std::size_t clusters_at_once(std::size_t size) const;
    std::uint32_t resident_warps_per_multiprocessor() const { return max_threads_per_multiprocessor / 32; }
};

}  // namespace nbits
