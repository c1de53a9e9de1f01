// The disk cache as a runtime uses it: what nbits-prewarm writes is what a
// runtime loads, a cold runtime leaves images for the next one, and a damaged
// image is recompiled instead of launched.

#include "../cpu/cache_test_support.hpp"
#include "runtime/internals.hpp"
#include "gpu_fixture.hpp"
#include "jit/disk_cache.hpp"
#include "kernels.hpp"
#include "nbits/launch_plan.hpp"

#include <doctest/doctest.h>

#include <fstream>

using namespace nbits;
using nbits::test::gpu;
using nbits::test::TempDir;

namespace {

constexpr const char* kEntry = "matmul_nbits_gemv_f16_scales_f16";

RuntimeOptions cached_in(const TempDir& dir)
{
    RuntimeOptions options;
    options.device = gpu().device();
    options.disk_cache.directory = dir.path();
    return options;
}

// The request `nbits-prewarm --arch sm_XY` compiles for this GPU and `kEntry`.
jit::CompileRequest cubin_request()
{
    const jit::Target target =
        jit::Target::cubin(gpu().capabilities().compute_major, gpu().capabilities().compute_minor);
    return module_request(kernels::source_of_entry(kEntry), kEntry, {}, CompileGranularity::Entry, target);
}

// Writes what `nbits-prewarm --arch sm_XY` writes for this GPU and `kEntry`; returns its path.
std::string prewarm_cubin(const TempDir& dir)
{
    const jit::CompileRequest request = cubin_request();
    jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
    jit::compile_or_load(request, &cache);
    return cache.path_of(jit::ImageKey::for_request(request));
}

ops::KernelStep kernel_step(const std::string& entry)
{
    ops::KernelStep step;
    step.source = kernels::source_of_entry(entry).name();
    step.entry = entry;
    return step;
}

}  // namespace

TEST_SUITE("disk cache on the GPU")
{
    TEST_CASE("CudaRuntime::prepare loads every kernel of the plans once, in parallel; later lookups compile nothing")
    {
        TempDir dir;
        CudaRuntime runtime(cached_in(dir));
        const char* const gate_up = "matmul_nbits_gemv_f16_gate_up_swiglu";
        const char* const down = "matmul_nbits_gemv_f16_scales_f16_down_c2";
        ops::LaunchPlan first;
        first.steps = {kernel_step(kEntry), kernel_step(gate_up)};
        ops::LaunchPlan second;
        second.steps = {kernel_step(kEntry), kernel_step(down)};  // kEntry again: loaded once
        runtime.prepare({&first, &second, nullptr});
        CHECK(runtime.internals().modules().stats().compiles == 3);
        CHECK(runtime.internals().modules().stats().modules == 3);
        for (const char* entry : {kEntry, gate_up, down}) {
            CHECK(runtime.internals().function(kernels::source_of_entry(entry), entry) != nullptr);
        }
        CHECK(runtime.internals().modules().stats().compiles == 3);

        // A step that cannot load fails the call once the others have loaded.
        TempDir other_dir;
        CudaRuntime other(cached_in(other_dir));
        ops::LaunchPlan broken;
        broken.steps = {kernel_step(kEntry), kernel_step(kEntry)};
        std::get<ops::KernelStep>(broken.steps[1]).entry = "no_such_entry";
        CHECK_THROWS_WITH_AS(other.prepare({&broken}, 2), doctest::Contains("no_such_entry"), Error);
        CHECK(other.internals().modules().stats().compiles == 1);
    }

    TEST_CASE("a runtime loads the prewarmed CUBIN for its GPU and compiles nothing")
    {
        TempDir dir;
        prewarm_cubin(dir);
        CudaRuntime runtime(cached_in(dir));
        CHECK(runtime.internals().function(kernels::source_of_entry(kEntry), kEntry) != nullptr);
        const ModuleCacheStats stats = runtime.internals().modules().stats();
        CHECK(stats.compiles == 0);
        CHECK(stats.store_loads == 1);
        REQUIRE(runtime.internals().disk_cache() != nullptr);
        CHECK(runtime.internals().disk_cache()->directory() == dir.path());
    }

    TEST_CASE("a cold runtime stores what it compiles and the next runtime loads it")
    {
        TempDir dir;
        {
            CudaRuntime cold(cached_in(dir));
            CHECK(cold.internals().function(kernels::source_of_entry(kEntry), kEntry) != nullptr);
            CHECK(cold.internals().modules().stats().compiles == 1);
            CHECK(cold.internals().disk_cache()->stats().stores == 1);
        }
        CudaRuntime warm(cached_in(dir));
        CHECK(warm.internals().function(kernels::source_of_entry(kEntry), kEntry) != nullptr);
        CHECK(warm.internals().modules().stats().compiles == 0);
        CHECK(warm.internals().modules().stats().store_loads == 1);
    }

    TEST_CASE("JitImage::Cubin compiles the GPU's CUBIN, which a PTX runtime then loads as if prewarmed")
    {
        TempDir dir;
        const Capabilities& caps = gpu().capabilities();
        RuntimeOptions cubin = cached_in(dir);
        cubin.jit_image = JitImage::Cubin;
        {
            CudaRuntime cold(cubin);
            CHECK(cold.internals().modules().target() == jit::Target::cubin(caps.compute_major, caps.compute_minor));
            CHECK(cold.internals().function(kernels::source_of_entry(kEntry), kEntry) != nullptr);
            CHECK(cold.internals().modules().stats().compiles == 1);
            CHECK(cold.internals().disk_cache()->stats().stores == 1);
        }
        // Stored under the key nbits-prewarm --arch sm_XY uses.
        CHECK(std::ifstream(jit::DiskCache(dir.path(), jit::kDefaultCacheMaxBytes)
                                .path_of(jit::ImageKey::for_request(cubin_request())))
                  .good());
        CudaRuntime warm(cached_in(dir));
        CHECK(warm.internals().modules().target() == jit::Target::ptx(caps.compute_major, caps.compute_minor));
        CHECK(warm.internals().function(kernels::source_of_entry(kEntry), kEntry) != nullptr);
        CHECK(warm.internals().modules().stats().compiles == 0);
        CHECK(warm.internals().modules().stats().store_loads == 1);
    }

    TEST_CASE("a damaged prewarmed image is deleted and recompiled, never loaded")
    {
        TempDir dir;
        const std::string path = prewarm_cubin(dir);
        {
            std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
            file.seekg(-100, std::ios::end);
            const char byte = static_cast<char>(file.get());
            file.seekp(-100, std::ios::end);
            file.put(static_cast<char>(byte ^ 0x01));
        }
        CudaRuntime runtime(cached_in(dir));
        CHECK(runtime.internals().function(kernels::source_of_entry(kEntry), kEntry) != nullptr);
        CHECK(runtime.internals().modules().stats().compiles == 1);
        CHECK(runtime.internals().disk_cache()->stats().removed_damaged == 1);
    }
}
