#include "cuda/driver.hpp"
#include "nbits/error.hpp"
#include "host_half.hpp"
#include "nbits/capabilities.hpp"
#include "nbits/runtime.hpp"
#include "runtime/internals.hpp"
#include "runtime/kernel_args.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

using namespace nbits;

TEST_CASE("capabilities fall back like the original when the driver reports nothing")
{
    DeviceAttributes attributes;
    attributes.compute_major = 8;
    attributes.compute_minor = 6;
    const Capabilities c = Capabilities::from(attributes);
    CHECK(c.max_threads_per_block == 256);
    CHECK(c.max_shared_memory_per_block == 48 * 1024);
    CHECK(c.max_shared_memory_per_block_optin == 48 * 1024);
    CHECK(c.multiprocessor_count == 1);

    attributes.max_shared_memory_per_block = 64 * 1024;
    attributes.max_shared_memory_per_block_optin = 32 * 1024;  // below the default: never
    CHECK(Capabilities::from(attributes).max_shared_memory_per_block_optin == 64 * 1024);

    attributes.max_shared_memory_per_block_optin = 0;  // nothing: opt-in equals the default
    CHECK(Capabilities::from(attributes).max_shared_memory_per_block_optin == 64 * 1024);

    attributes.multiprocessor_count = 132;
    attributes.max_threads_per_block = 1024;
    const Capabilities reported = Capabilities::from(attributes);
    CHECK(reported.multiprocessor_count == 132);
    CHECK(reported.max_threads_per_block == 1024);
}

TEST_CASE("memory bandwidth: two transfers a memory clock over the bus, unknown where either is not reported")
{
    DeviceAttributes attributes;
    attributes.compute_major = 9;
    CHECK(Capabilities::from(attributes).memory_bandwidth_gb_per_s == 0);
    attributes.memory_clock_khz = 2619000;  // the H100 80GB HBM3's report
    CHECK(Capabilities::from(attributes).memory_bandwidth_gb_per_s == 0);
    attributes.memory_bus_width_bits = 5120;
    CHECK(Capabilities::from(attributes).memory_bandwidth_gb_per_s == 3352);
    attributes.memory_clock_khz = -1;
    CHECK(Capabilities::from(attributes).memory_bandwidth_gb_per_s == 0);
    attributes.memory_clock_khz = std::numeric_limits<int>::max();  // saturates, never wraps
    attributes.memory_bus_width_bits = std::numeric_limits<int>::max();
    CHECK(Capabilities::from(attributes).memory_bandwidth_gb_per_s == std::numeric_limits<std::uint32_t>::max());
}

TEST_CASE("clusters that run at once: the driver's count where it gave one, else the estimate from the SM count")
{
    DeviceAttributes attributes;
    attributes.compute_major = 9;
    attributes.multiprocessor_count = 132;
    const Capabilities estimated = Capabilities::from(attributes);
    // The H100 80GB HBM3's counts (cuOccupancyMaxActiveClusters): 66, 39 and 30.
    CHECK(estimated.clusters_at_once(2) == 66);
    CHECK(estimated.clusters_at_once(3) == 39);
    CHECK(estimated.clusters_at_once(4) == 30);
    CHECK(Capabilities::h100_pcie().clusters_at_once(4) == 25);
    CHECK(Capabilities::h20().clusters_at_once(3) == 23);

    attributes.clusters_a_cta_an_sm = {64, 0, -1};  // a GPU whose GPCs pair fewer SMs; nothing for 3 and 4
    const Capabilities reported = Capabilities::from(attributes);
    CHECK(reported.clusters_a_cta_an_sm == std::array<std::uint32_t, 3>{64, 0, 0});
    CHECK(reported.clusters_at_once(2) == 64);
    CHECK(reported.clusters_at_once(3) == 39);
    CHECK(reported.clusters_at_once(4) == 30);
    CHECK(reported.clusters_at_once(5) == 26);
}

TEST_CASE("a compute capability with major 0 is an unsupported device")
{
    DeviceAttributes attributes;
    attributes.name = "ghost";
    CHECK_THROWS_WITH_AS(Capabilities::from(attributes), doctest::Contains("compute capability 0.0"), Error);
    try {
        Capabilities::from(attributes);
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::UnsupportedDevice);
    }
}

TEST_CASE("dynamic shared memory: unchanged, raised, or refused before any launch")
{
    const Capabilities h200 = Capabilities::h200();  // 48 KiB default, 227 KiB opt-in
    CHECK(decide_dynamic_shared_memory(0, 0, h200, "k") == SharedMemoryAction::Unchanged);
    CHECK(decide_dynamic_shared_memory(48 * 1024, 0, h200, "k") == SharedMemoryAction::Unchanged);
    CHECK(decide_dynamic_shared_memory(48 * 1024 + 1, 0, h200, "k") == SharedMemoryAction::RaiseLimit);
    // Static shared memory comes off both budgets.
    CHECK(decide_dynamic_shared_memory(48 * 1024 - 4, 4, h200, "k") == SharedMemoryAction::Unchanged);
    CHECK(decide_dynamic_shared_memory(48 * 1024 - 3, 4, h200, "k") == SharedMemoryAction::RaiseLimit);
    CHECK(decide_dynamic_shared_memory(227 * 1024 - 4, 4, h200, "k") == SharedMemoryAction::RaiseLimit);
    CHECK_THROWS_WITH_AS(decide_dynamic_shared_memory(227 * 1024 - 3, 4, h200, "the fused GEMV"),
                         doctest::Contains("the fused GEMV needs 232445 bytes"), Error);

    const Capabilities small = Capabilities::sm86_28();  // 99 KiB opt-in
    CHECK_THROWS_AS(decide_dynamic_shared_memory(128 * 1024, 0, small, "k"), Error);
}

TEST_CASE("kernel arguments keep their values and order")
{
    KernelArgs args;
    args.ptr(0x1234'5678'9abcull).i32(-7).f32(1.5f);
    REQUIRE(args.size() == 3);
    void** pointers = args.pointers();
    CHECK(*static_cast<CUdeviceptr*>(pointers[0]) == 0x1234'5678'9abcull);
    CHECK(*static_cast<std::int32_t*>(pointers[1]) == -7);
    CHECK(*static_cast<float*>(pointers[2]) == 1.5f);
}

TEST_CASE("fp16 conversion rounds to nearest even and round-trips every half")
{
    for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
        const auto half = static_cast<std::uint16_t>(bits);
        const float value = half_to_float(half);
        if (std::isnan(value)) {
            CHECK((float_to_half(value) & 0x7c00) == 0x7c00);
            continue;
        }
        REQUIRE(float_to_half(value) == half);
    }
    CHECK(float_to_half(1.0f + 1.0f / 2048.0f) == 0x3c00);       // tie: to even
    CHECK(float_to_half(1.0f + 3.0f / 2048.0f) == 0x3c02);       // tie: to even (up)
    CHECK(float_to_half(65520.0f) == 0x7c00);                    // rounds to infinity
    CHECK(float_to_half(5.960464477539063e-08f) == 0x0001);      // smallest subnormal
    CHECK(float_to_half(2.9802322387695312e-08f) == 0x0000);     // half of it: tie to even (zero)
}

TEST_CASE("without a driver, creating a runtime says no driver was found and what to install")
{
    std::string reason;
    if (cuda::driver_available(&reason)) {
        MESSAGE("a CUDA driver is present here; the no-driver path is asserted on machines without one");
        return;
    }
    CHECK(reason.find("libcuda.so.1") != std::string::npos);
    CHECK(reason.find("How to fix") != std::string::npos);
    try {
        CudaRuntime runtime;
        FAIL("a runtime must not start without a driver");
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::NoDriver);
        CHECK(std::string(error.what()).find("no CUDA driver was found") != std::string::npos);
    }
}
