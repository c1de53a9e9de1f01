#include "ceiling.hpp"
#include "runtime/internals.hpp"

#include "bench_kernels.hpp"

#include "nbits/error.hpp"
#include "runtime/kernel_args.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace nbits::bench {
namespace {

constexpr std::size_t kPreferredBytes = std::size_t{2} << 30;
constexpr std::size_t kMinimumBytes = std::size_t{1} << 30;
constexpr std::size_t kLaunchesPerGraph = 8;
constexpr unsigned kThreads = 512;
constexpr unsigned kBlocksPerMultiprocessor = 4;

}  // namespace

ReadCeiling measure_read_ceiling(CudaRuntime& runtime, const DeviceFacts& facts, int warmups, int repeats)
{
    const std::size_t free_bytes = free_device_memory(runtime);
    const std::size_t bytes = std::min(kPreferredBytes, free_bytes / 2 / 16 * 16);
    if (bytes < kMinimumBytes) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("the read ceiling needs a 1 GiB buffer; only {} MiB of device memory are free",
                                free_bytes >> 20));
    }
    DeviceBuffer buffer(runtime, bytes);
    DeviceBuffer sink(runtime, sizeof(unsigned int));
    // A non-zero pattern: the sink condition must stay false and nothing reads zeros.
    runtime.memset_async(buffer.get(), 0x5A, bytes);
    runtime.synchronize();

    const CUfunction function = runtime.internals().function(bench_kernels(), kStreamReadEntry);
    LaunchConfig config;
    config.grid.x = static_cast<std::uint32_t>(std::max(facts.multiprocessors, 1)) * kBlocksPerMultiprocessor;
    config.block.x = kThreads;
    const unsigned long long count = bytes / 16;
    auto enqueue = [&](std::size_t) {
        KernelArgs args;
        args.ptr(buffer.get()).i64(static_cast<std::int64_t>(count)).ptr(sink.get());
        runtime.internals().launch(function, config, args, runtime.stream(), "bench_stream_read (read-ceiling kernel)");
    };
    enqueue(0);  // loads the module outside the capture
    runtime.synchronize();

    ReadCeiling ceiling;
    ceiling.bytes = bytes;
    ceiling.timing = time_graph_replays(runtime, enqueue, kLaunchesPerGraph, warmups, repeats);
    ceiling.gbps = static_cast<double>(bytes) / (ceiling.timing.per_launch_us.median * 1e3);
    return ceiling;
}

}  // namespace nbits::bench
