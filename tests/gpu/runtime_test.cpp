#include "gpu_fixture.hpp"
#include "runtime/internals.hpp"
#include "cuda/driver.hpp"
#include "nbits/error.hpp"
#include "jit/kernel_source.hpp"
#include "kernels.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <thread>

using namespace nbits;
using nbits::test::gpu;

namespace {

// A producer that spins for ~`spin_cycles` clock cycles before writing, so a
// copy that does not wait for it would read stale data.
const jit::KernelSource& slow_producer()
{
    static const jit::KernelSource source("slow_producer", R"(
extern "C" __global__ void slow_fill(unsigned int* out, const int n, const unsigned int value, const long long spin_cycles)
{
    const long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        out[i] = value + (unsigned int)i;
    }
}
extern "C" __global__ void fill_shared(unsigned int* out, const int words)
{
    extern __shared__ unsigned int staged[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
        staged[i] = (unsigned int)i * 3u + 1u;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
        out[i] = staged[words - 1 - i];
    }
}
)");
    return source;
}

void launch_slow_fill(CudaRuntime& runtime, CUdeviceptr out, int n, unsigned value)
{
    KernelArgs args;
    args.ptr(out).i32(n).i32(static_cast<std::int32_t>(value));
    args.i64(200'000'000);  // ~0.1 s at 2 GHz
    runtime.internals().launch(runtime.internals().function(slow_producer(), "slow_fill"), LaunchConfig{{1, 1, 1}, {256, 1, 1}, 0}, args,
                   "slow_fill");
}

// Kernels whose CTAs, launched in clusters of 2, 3 or 4 with all the shared memory a block may opt into (one
// CTA an SM), each count themselves in `arrived` and wait until all `total` have, or until `spin` clock cycles
// have passed; each writes the count it saw last.
const jit::KernelSource& cluster_meeting()
{
    static const jit::KernelSource source("cluster_meeting", R"(
#define CLUSTERS_OF_2 __cluster_dims__(2, 1, 1)
#define CLUSTERS_OF_3 __cluster_dims__(3, 1, 1)
#define CLUSTERS_OF_4 __cluster_dims__(4, 1, 1)
__device__ void meet(unsigned int* arrived, unsigned int* seen, const unsigned int total, const long long spin)
{
    if (threadIdx.x == 0) {
        atomicAdd(arrived, 1u);
        const long long start = clock64();
        unsigned int now = 0;
        do {
            now = atomicAdd(arrived, 0u);
        } while (now < total && clock64() - start < spin);
        seen[blockIdx.x] = now;
    }
}
extern "C" __global__ void CLUSTERS_OF_2 meet_in_clusters_of_2(unsigned int* arrived, unsigned int* seen,
                                                               const unsigned int total, const long long spin)
{
    meet(arrived, seen, total, spin);
}
extern "C" __global__ void CLUSTERS_OF_3 meet_in_clusters_of_3(unsigned int* arrived, unsigned int* seen,
                                                               const unsigned int total, const long long spin)
{
    meet(arrived, seen, total, spin);
}
extern "C" __global__ void CLUSTERS_OF_4 meet_in_clusters_of_4(unsigned int* arrived, unsigned int* seen,
                                                               const unsigned int total, const long long spin)
{
    meet(arrived, seen, total, spin);
}
)");
    return source;
}

}  // namespace

TEST_CASE("the clusters a runtime counts run at once one CTA an SM, and one cluster more does not")
{
    CudaRuntime& runtime = gpu();
    const Capabilities& caps = runtime.capabilities();
    if (caps.compute_major < 9) {
        for (const std::uint32_t clusters : caps.clusters_a_cta_an_sm) {
            CHECK(clusters == 0);  // no clusters before compute capability 9.0
        }
        return;
    }
    const std::uint32_t shared = caps.max_shared_memory_per_block_optin;
    for (std::uint32_t size = 2; size <= 4; ++size) {
        CAPTURE(size);
        const std::uint32_t clusters = caps.clusters_a_cta_an_sm[size - 2];
        MESSAGE(caps.name << " (" << caps.multiprocessor_count << " SMs): " << clusters << " clusters of " << size
                          << " a CTA an SM; the estimate without the driver's count: " << [&] {
                                 Capabilities estimate = caps;
                                 estimate.clusters_a_cta_an_sm = {};
                                 return estimate.clusters_at_once(size);
                             }());
        REQUIRE(clusters > 0);
        CHECK(clusters * size <= caps.multiprocessor_count);
        CHECK(caps.clusters_at_once(size) == clusters);
        const std::string entry = "meet_in_clusters_of_" + std::to_string(size);
        CUfunction function = runtime.internals().function(cluster_meeting(), entry);
        runtime.internals().configure_dynamic_shared_memory(function, shared, entry);
        for (const std::uint32_t launched : {clusters, clusters + 1}) {
            CAPTURE(launched);
            const std::uint32_t ctas = launched * size;
            DeviceBuffer arrived(runtime, 4);
            DeviceBuffer seen(runtime, ctas * 4);
            runtime.memset_async(arrived.get(), 0, 4);
            runtime.memset_async(seen.get(), 0, ctas * 4);
            KernelArgs args;
            args.ptr(arrived.get()).ptr(seen.get()).i32(static_cast<std::int32_t>(ctas));
            args.i64(100'000'000);  // ~0.05 s at 2 GHz: how long a CTA waits for a cluster that cannot start
            runtime.internals().launch(function, LaunchConfig{{ctas, 1, 1}, {32, 1, 1}, shared}, args, entry);
            const auto values = test::download<unsigned>(runtime, seen);
            const unsigned fewest = *std::min_element(values.begin(), values.end());
            if (launched == clusters) {
                CHECK(fewest == ctas);  // every CTA saw all the others: they ran at once
            } else {
                CHECK(fewest < ctas);  // the CTAs that ran first gave up before the last cluster started
            }
        }
    }
    // Another runtime of the device, created after the first, plans with the same counts (the process keeps them).
    RuntimeOptions options;
    options.device = runtime.device();
    options.disk_cache.enabled = false;
    const CudaRuntime another(options);
    CHECK(another.capabilities().clusters_a_cta_an_sm == caps.clusters_a_cta_an_sm);
}

TEST_CASE("an embedded kernel loads, launches and computes the dequantized weights")
{
    CudaRuntime& runtime = gpu();
    const int k = 64, n = 3, block_size = 32, k_blocks = 2, blob_size = 16;
    std::vector<std::uint8_t> packed(n * k_blocks * blob_size);
    for (std::size_t i = 0; i < packed.size(); ++i) {
        packed[i] = static_cast<std::uint8_t>(i * 37 + 11);
    }
    std::vector<float> scales = {0.5f, -0.25f, 2.0f, 0.125f, 1.5f, -3.0f};
    auto packed_dev = test::upload(runtime, packed);
    auto scales_dev = test::upload(runtime, scales);
    auto weight_dev = test::poisoned(runtime, k * n * sizeof(float));

    KernelArgs args;
    args.ptr(packed_dev.get()).ptr(scales_dev.get()).ptr(0).ptr(0).ptr(weight_dev.get());
    args.i32(k).i32(n).i32(block_size).i32(k_blocks).i32(blob_size).i32(1).i32(4);
    runtime.internals().launch(runtime.internals().function(kernels::source_of_entry("matmul_nbits_dequant_f32"), "matmul_nbits_dequant_f32"),
                   LaunchConfig{{1, 1, 1}, {256, 1, 1}, 0}, args, "dequant");
    const auto weight = test::download<float>(runtime, weight_dev);
    for (int depth = 0; depth < k; ++depth) {
        for (int column = 0; column < n; ++column) {
            const int block = depth / block_size;
            const int within = depth % block_size;
            const std::uint8_t byte = packed[(column * k_blocks + block) * blob_size + within / 2];
            const int q = (within & 1) ? (byte >> 4) : (byte & 15);
            CAPTURE(depth);
            CAPTURE(column);
            REQUIRE(weight[depth * n + column] == static_cast<float>(q - 8) * scales[column * k_blocks + block]);
        }
    }
}

TEST_CASE("dtod and dtod_async never copy before a slow producer finished")
{
    CudaRuntime& runtime = gpu();
    const int n = 4096;
    DeviceBuffer source(runtime, n * 4);
    DeviceBuffer copy(runtime, n * 4);
    runtime.memset_async(source.get(), 0, n * 4);
    runtime.memset_async(copy.get(), 0, n * 4);

    launch_slow_fill(runtime, source.get(), n, 1000);
    runtime.dtod(copy.get(), source.get(), n * 4);
    auto values = test::download<unsigned>(runtime, copy);
    for (int i = 0; i < n; ++i) {
        REQUIRE(values[i] == 1000u + i);
    }

    launch_slow_fill(runtime, source.get(), n, 5000);
    runtime.dtod_async(copy.get(), source.get(), n * 4);
    values = test::download<unsigned>(runtime, copy);
    for (int i = 0; i < n; ++i) {
        REQUIRE(values[i] == 5000u + i);
    }
}

TEST_CASE("dynamic shared memory above the default budget is opted into on a real function")
{
    CudaRuntime& runtime = gpu();
    const Capabilities& caps = runtime.capabilities();
    CUfunction function = runtime.internals().function(slow_producer(), "fill_shared");
    const std::uint32_t request = caps.max_shared_memory_per_block_optin;
    REQUIRE_MESSAGE(request > caps.max_shared_memory_per_block, "this GPU has no opt-in shared memory to test");
    const int words = static_cast<int>(request / 4);
    DeviceBuffer out(runtime, request);
    runtime.internals().configure_dynamic_shared_memory(function, request, "fill_shared");
    int limit = 0;
    cuda::check(cuda::driver().func_get_attribute(&limit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function),
                "reading the limit");
    CHECK(limit == static_cast<int>(request));
    KernelArgs args;
    args.ptr(out.get()).i32(words);
    runtime.internals().launch(function, LaunchConfig{{1, 1, 1}, {256, 1, 1}, request}, args, "fill_shared");
    const auto values = test::download<unsigned>(runtime, out);
    CHECK(values.front() == static_cast<unsigned>(words - 1) * 3u + 1u);
    CHECK(values.back() == 1u);

    CHECK_THROWS_WITH_AS(runtime.internals().configure_dynamic_shared_memory(function, request + 1, "fill_shared"),
                         doctest::Contains("fill_shared needs"), Error);
}

TEST_CASE("eight threads asking for one entry at once cause one compile")
{
    RuntimeOptions options;
    options.disk_cache.enabled = false;
    CudaRuntime runtime(options);
    const jit::KernelSource& source = kernels::source_of_entry("matmul_nbits_gemv_f32");
    std::atomic<int> ready{0};
    std::vector<CUfunction> functions(8, nullptr);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < 8) {
            }
            functions[t] = runtime.internals().function(source, "matmul_nbits_gemv_f32");
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    const ModuleCacheStats stats = runtime.internals().modules().stats();
    CHECK(stats.compiles == 1);
    CHECK(stats.modules == 1);
    for (CUfunction function : functions) {
        CHECK(function == functions[0]);
        CHECK(function != nullptr);
    }
}

TEST_CASE("allocation and free counters balance, and zero bytes still allocate")
{
    CudaRuntime& runtime = gpu();
    const AllocationCounters before = runtime.counters();
    {
        DeviceBuffer a(runtime, 0);
        DeviceBuffer b(runtime, 1 << 20);
        CHECK(a.get() != 0);
        CHECK(runtime.counters().live() == before.live() + 2);
        DeviceBuffer moved = std::move(b);
        CHECK(runtime.counters().live() == before.live() + 2);
    }
    const AllocationCounters after = runtime.counters();
    CHECK(after.allocations == before.allocations + 2);
    CHECK(after.frees == before.frees + 2);
}

TEST_CASE("a launch error names the launch and leaves the runtime usable")
{
    CudaRuntime& runtime = gpu();
    KernelArgs args;
    args.ptr(0).i32(0);
    // 4096 threads per block is beyond every CUDA GPU.
    CHECK_THROWS_WITH_AS(runtime.internals().launch(runtime.internals().function(slow_producer(), "fill_shared"),
                                        LaunchConfig{{1, 1, 1}, {4096, 1, 1}, 0}, args, "oversized block"),
                         doctest::Contains("launch oversized block"), Error);
    runtime.synchronize();
}
