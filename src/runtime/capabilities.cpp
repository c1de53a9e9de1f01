#include "nbits/capabilities.hpp"
#include "runtime/internals.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace nbits {
namespace {

std::uint32_t or_default(int reported, std::uint32_t fallback)
{
    return reported > 0 ? static_cast<std::uint32_t>(reported) : fallback;
}

// `memory_mhz` and `bus_bits` as the driver reports them for the part.
Capabilities make(int major, int minor, std::uint32_t sms, std::uint32_t optin_kib, std::uint64_t memory_gib,
                  int memory_mhz, int bus_bits, const char* name)
{
    DeviceAttributes attributes;
    attributes.compute_major = major;
    attributes.compute_minor = minor;
    attributes.max_threads_per_block = 1024;
    attributes.max_threads_per_multiprocessor = 0;  // derived from the compute capability
    attributes.max_shared_memory_per_block = 48 * 1024;
    attributes.max_shared_memory_per_block_optin = static_cast<int>(optin_kib * 1024);
    attributes.multiprocessor_count = static_cast<int>(sms);
    attributes.total_memory_bytes = memory_gib << 30;
    attributes.memory_clock_khz = memory_mhz * 1000;
    attributes.memory_bus_width_bits = bus_bits;
    attributes.name = name;
    return Capabilities::from(attributes);
}

}  // namespace

Capabilities Capabilities::from(const DeviceAttributes& attributes)
{
    if (attributes.compute_major <= 0) {
        throw Error(ErrorKind::UnsupportedDevice,
                    fmt::format("device '{}' reports compute capability {}.{}. Why: nbits needs a CUDA GPU with a "
                                "real compute capability to choose kernels. How to fix: check the driver "
                                "installation and CUDA_VISIBLE_DEVICES",
                                attributes.name, attributes.compute_major, attributes.compute_minor));
    }
    Capabilities c;
    c.compute_major = attributes.compute_major;
    c.compute_minor = attributes.compute_minor;
    c.max_threads_per_block = or_default(attributes.max_threads_per_block, 256);
    const bool full_size_sm = (c.compute_major == 8 && c.compute_minor == 0) || c.compute_major == 9 ||
                              c.compute_major == 10;
    c.max_threads_per_multiprocessor = or_default(attributes.max_threads_per_multiprocessor, full_size_sm ? 2048 : 1536);
    c.max_shared_memory_per_block = or_default(attributes.max_shared_memory_per_block, 48 * 1024);
    c.max_shared_memory_per_block_optin =
        std::max(or_default(attributes.max_shared_memory_per_block_optin, c.max_shared_memory_per_block),
                 c.max_shared_memory_per_block);
    c.multiprocessor_count = or_default(attributes.multiprocessor_count, 1);
    c.total_memory_bytes = attributes.total_memory_bytes;
    if (attributes.memory_clock_khz > 0 && attributes.memory_bus_width_bits > 0) {
        // Two transfers a clock of bus-width bits: kHz x bits / 4e6 = GB/s.
        const std::uint64_t khz = static_cast<std::uint64_t>(attributes.memory_clock_khz);
        const std::uint64_t gb_per_s = khz * static_cast<std::uint64_t>(attributes.memory_bus_width_bits) / 4000000;
        c.memory_bandwidth_gb_per_s = static_cast<std::uint32_t>(std::min<std::uint64_t>(gb_per_s, UINT32_MAX));
    }
    c.name = attributes.name;
    for (std::size_t i = 0; i < c.clusters_a_cta_an_sm.size(); ++i) {
        c.clusters_a_cta_an_sm[i] = or_default(attributes.clusters_a_cta_an_sm[i], 0);
    }
    return c;
}

std::size_t Capabilities::clusters_at_once(std::size_t size) const
{
    if (size >= 2 && size - 2 < clusters_a_cta_an_sm.size() && clusters_a_cta_an_sm[size - 2] > 0) {
        return clusters_a_cta_an_sm[size - 2];
    }
    const std::size_t sms = multiprocessor_count;
    switch (size) {
    case 3:
        return sms * 8 / 9 / 3;
    case 4:
        return sms * 10 / 11 / 4;
    default:
        return size == 0 ? 0 : sms / size;
    }
}

Capabilities Capabilities::h200() { return make(9, 0, 132, 227, 140, 3201, 6144, "NVIDIA H200"); }
Capabilities Capabilities::h100() { return make(9, 0, 132, 227, 80, 2619, 5120, "NVIDIA H100 80GB HBM3"); }
Capabilities Capabilities::h100_pcie() { return make(9, 0, 114, 227, 80, 1593, 5120, "NVIDIA H100 PCIe"); }
Capabilities Capabilities::h20() { return make(9, 0, 78, 227, 96, 2619, 6144, "NVIDIA H20"); }
Capabilities Capabilities::rtx4090() { return make(8, 9, 128, 99, 24, 10501, 384, "NVIDIA GeForce RTX 4090"); }
Capabilities Capabilities::l4() { return make(8, 9, 58, 99, 24, 6251, 192, "NVIDIA L4"); }
Capabilities Capabilities::sm89_46() { return make(8, 9, 46, 99, 12, 10501, 192, "sm_89 with 46 SMs"); }
Capabilities Capabilities::sm86_28() { return make(8, 6, 28, 99, 12, 7501, 192, "sm_86 with 28 SMs"); }
Capabilities Capabilities::a100() { return make(8, 0, 108, 163, 80, 1593, 5120, "NVIDIA A100"); }
Capabilities Capabilities::rtx5090() { return make(12, 0, 170, 99, 32, 14001, 512, "NVIDIA GeForce RTX 5090"); }

SharedMemoryAction decide_dynamic_shared_memory(std::uint32_t requested, std::uint32_t static_bytes,
                                                const Capabilities& capabilities, const std::string& what)
{
    const auto budget = [&](std::uint32_t total) { return total > static_bytes ? total - static_bytes : 0u; };
    const std::uint32_t default_budget = budget(capabilities.max_shared_memory_per_block);
    const std::uint32_t optin_budget = budget(capabilities.max_shared_memory_per_block_optin);
    if (requested > optin_budget) {
        throw Error(ErrorKind::Unsupported,
                    fmt::format("{} needs {} bytes of dynamic shared memory, but {} allows at most {} per block "
                                "({} opt-in minus {} static). Why: the kernel stages the whole activation row in "
                                "shared memory. How to fix: use a GPU with more shared memory per block, or a "
                                "model whose hidden size fits",
                                what, requested, capabilities.name, optin_budget,
                                capabilities.max_shared_memory_per_block_optin, static_bytes));
    }
    return requested > default_budget ? SharedMemoryAction::RaiseLimit : SharedMemoryAction::Unchanged;
}

}  // namespace nbits
