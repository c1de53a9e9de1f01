// The disk cache as a runtime uses it: what nbits-prewarm writes is what a
// runtime loads, a cold runtime leaves images for the next one, and a damaged
// image is recompiled instead of launched.

#include "../cpu/cache_test_support.hpp"
#include "runtime/internals.hpp"
#include "gpu_fixture.hpp"
#include "jit/disk_cache.hpp"
#include "kernels.hpp"

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

// What `nbits-prewarm --arch sm_XY` writes for this GPU and `kEntry`.
std::string prewarm_cubin(const TempDir& dir)
{
    const jit::Target target =
        jit::Target::cubin(gpu().capabilities().compute_major, gpu().capabilities().compute_minor);
    const jit::CompileRequest request = module_request(kernels::source_of_entry(kEntry), kEntry, {},
                                                       CompileGranularity::Entry, target);
    jit::DiskCache cache(dir.path(), jit::kDefaultCacheMaxBytes);
    jit::compile_or_load(request, &cache);
    return cache.path_of(jit::ImageKey::for_request(request));
}

}  // namespace

TEST_SUITE("disk cache on the GPU")
{
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
