#include "bench_kernels.hpp"
#include "runtime/internals.hpp"

#include "runtime/kernel_args.hpp"

namespace nbits::bench {
namespace {

// bench_stream_read: four independent 16-byte loads in flight per thread per
// iteration; the sum is stored only under a condition the data never meets,
// so the compiler keeps every load and the kernel writes nothing that costs
// bandwidth.
constexpr const char* kSource = R"CUDA(
extern "C" __global__ void bench_stream_read(const uint4* __restrict__ data, unsigned long long count,
                                             unsigned int* __restrict__ sink)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int sum = 0;
    for (; i + 3 * stride < count; i += 4 * stride) {
        const uint4 a = data[i];
        const uint4 b = data[i + stride];
        const uint4 c = data[i + 2 * stride];
        const uint4 d = data[i + 3 * stride];
        sum += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    }
    for (; i < count; i += stride) {
        const uint4 a = data[i];
        sum += a.x + a.y + a.z + a.w;
    }
    if (sum == 0x9E3779B9u) {
        sink[0] = sum;
    }
}

extern "C" __global__ void bench_spin(unsigned long long nanoseconds)
{
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long now = start;
    while (now - start < nanoseconds) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}
)CUDA";

}  // namespace

const jit::KernelSource& bench_kernels()
{
    static const jit::KernelSource source("nbits_bench_kernels", kSource);
    return source;
}

void enqueue_spin(CudaRuntime& runtime, std::uint64_t nanoseconds)
{
    const CUfunction function = runtime.internals().function(bench_kernels(), "bench_spin");
    LaunchConfig config;
    KernelArgs args;
    args.i64(static_cast<std::int64_t>(nanoseconds));
    runtime.internals().launch(function, config, args, runtime.stream(), "bench_spin (holds the stream while launches are queued)");
}

}  // namespace nbits::bench
