// The device work of nbits-bench that is not the operator: device facts, the
// tool's own kernels (a streaming read, a spin), event timing of graph
// replays and eager runs, weight rotation through DRAM, the read ceiling and
// the cuBLASLt dense baseline. Every driver call is checked.

#include "bench.hpp"

#include "blas/gemm.hpp"
#include "cuda/driver.hpp"
#include "host_reference.hpp"
#include "jit/compile.hpp"
#include "jit/kernel_source.hpp"
#include "runtime/internals.hpp"
#include "runtime/kernel_args.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace nbits::bench {
namespace {

using ScopedContext = CudaRuntime::Internals::ScopedContext;

constexpr double kMiB = 1024.0 * 1024.0;

// ------------------------------------------------------------ the kernels ---

// bench_stream_read: four independent 16-byte loads in flight per thread per
// iteration; the sum is stored only under a condition the data never meets,
// so the compiler keeps every load and the kernel writes nothing that costs
// bandwidth. bench_spin holds the stream on the device's global timer, so that
// work queued behind it runs back to back once it ends.
constexpr const char* kKernelText = R"CUDA(
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

const jit::KernelSource& bench_kernels()
{
    static const jit::KernelSource source("nbits_bench_kernels", kKernelText);
    return source;
}

void enqueue_spin(CudaRuntime& runtime, std::uint64_t nanoseconds)
{
    const CUfunction function = runtime.internals().function(bench_kernels(), "bench_spin");
    KernelArgs args;
    args.i64(static_cast<std::int64_t>(nanoseconds));
    runtime.internals().launch(function, LaunchConfig{}, args, runtime.stream(),
                               "bench_spin (holds the stream while timed launches are queued)");
}

// ----------------------------------------------------------------- timing ---

// Host time assumed per graph replay when sizing the spin ahead of replays.
constexpr double kGraphLaunchHostSeconds = 20e-6;
constexpr double kMinSpinSeconds = 1e-3;
// Bounds the wait a host-synchronizing path (whose enqueue includes device
// time) can add to one row.
constexpr double kMaxSpinSeconds = 0.2;

// Long enough, with a 2x margin, for the host to queue `samples` samples
// that take `host_seconds` each to issue while the device spins.
std::uint64_t spin_nanoseconds(double host_seconds, std::size_t samples)
{
    const double seconds =
        std::clamp(2.0 * host_seconds * static_cast<double>(samples), kMinSpinSeconds, kMaxSpinSeconds);
    return static_cast<std::uint64_t>(seconds * 1e9);
}

class Event {
public:
    Event() { cuda::check(cuda::driver().event_create(&event_, CU_EVENT_DEFAULT), "creating a timing event"); }
    ~Event()
    {
        if (event_ != nullptr) {
            cuda::driver().event_destroy(event_);
        }
    }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
    Event& operator=(Event&&) = delete;

    void record(CUstream stream) { cuda::check(cuda::driver().event_record(event_, stream), "recording a timing event"); }
    CUevent get() const { return event_; }

private:
    CUevent event_ = nullptr;
};

std::vector<Event> make_events(std::size_t count)
{
    std::vector<Event> events;
    events.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        events.emplace_back();
    }
    return events;
}

// Microseconds between consecutive events divided by `divisor`, once the last completed.
std::vector<double> intervals_us(const std::vector<Event>& events, double divisor)
{
    const cuda::Driver& driver = cuda::driver();
    cuda::check(driver.event_synchronize(events.back().get()), "waiting for the timed work (a kernel failed)");
    std::vector<double> samples;
    for (std::size_t i = 1; i < events.size(); ++i) {
        float milliseconds = 0.0f;
        cuda::check(driver.event_elapsed_time(&milliseconds, events[i - 1].get(), events[i].get()),
                    "reading a timing event");
        samples.push_back(static_cast<double>(milliseconds) * 1000.0 / divisor);
    }
    return samples;
}

// Ends a capture on every path: an exception inside the captured region
// leaves the stream usable again, with the partial graph discarded.
class StreamCapture {
public:
    explicit StreamCapture(CUstream stream) : stream_(stream)
    {
        // Thread-local mode: a capture-unsafe call from this thread (an
        // allocation, a synchronization) fails the capture instead of
        // producing a graph that would replay wrongly.
        cuda::check(cuda::driver().stream_begin_capture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                    "beginning CUDA graph capture on the nbits stream");
        active_ = true;
    }
    ~StreamCapture()
    {
        if (active_) {
            CUgraph graph = nullptr;
            cuda::driver().stream_end_capture(stream_, &graph);
            if (graph != nullptr) {
                cuda::driver().graph_destroy(graph);
            }
        }
    }
    StreamCapture(const StreamCapture&) = delete;
    StreamCapture& operator=(const StreamCapture&) = delete;

    CUgraph finish()
    {
        active_ = false;
        CUgraph graph = nullptr;
        cuda::check(cuda::driver().stream_end_capture(stream_, &graph), "ending CUDA graph capture");
        return graph;
    }

private:
    CUstream stream_;
    bool active_ = false;
};

class GraphExec {
public:
    explicit GraphExec(CUgraph graph) : graph_(graph)
    {
        const CUresult result = cuda::driver().graph_instantiate(&exec_, graph_, 0);
        if (result != CUDA_SUCCESS) {
            cuda::driver().graph_destroy(graph_);
            cuda::check(result, "instantiating the captured CUDA graph");
        }
    }
    ~GraphExec()
    {
        cuda::driver().graph_exec_destroy(exec_);
        cuda::driver().graph_destroy(graph_);
    }
    GraphExec(const GraphExec&) = delete;
    GraphExec& operator=(const GraphExec&) = delete;

    void launch(CUstream stream) { cuda::check(cuda::driver().graph_launch(exec_, stream), "launching the CUDA graph"); }

private:
    CUgraph graph_ = nullptr;
    CUgraphExec exec_ = nullptr;
};

// `repeats` samples queued behind a spin, back to back, one event between
// each: the device never idles between samples, so no launch latency or
// host cost is timed. Each sample holds `launches` launches.
Timing time_samples(CudaRuntime& runtime, double host_seconds_per_sample, std::size_t launches, int repeats,
                    const char* method, const std::function<void()>& sample)
{
    runtime.synchronize();
    const CUstream stream = runtime.stream();
    std::vector<Event> events = make_events(static_cast<std::size_t>(repeats) + 1);
    enqueue_spin(runtime, spin_nanoseconds(host_seconds_per_sample, static_cast<std::size_t>(repeats)));
    events[0].record(stream);
    for (int i = 0; i < repeats; ++i) {
        sample();
        events[static_cast<std::size_t>(i) + 1].record(stream);
    }
    Timing timing;
    timing.us = summarize(intervals_us(events, static_cast<double>(launches)));
    timing.method = method;
    timing.launches = launches;
    runtime.synchronize();
    return timing;
}

}  // namespace

// ----------------------------------------------------------- device facts ---

DeviceFacts read_device_facts(CudaRuntime& runtime)
{
    const cuda::Driver& driver = cuda::driver();
    ScopedContext scope(runtime);
    CUdevice device = 0;
    cuda::check(driver.device_get(&device, runtime.device()), "opening the CUDA device");
    int l2 = 0;
    cuda::check(driver.device_get_attribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device), "reading the L2 size");
    std::size_t total = 0;
    cuda::check(driver.device_total_mem(&total, device), "reading the device memory size");

    DeviceFacts facts;
    const Capabilities& capabilities = runtime.capabilities();
    facts.name = capabilities.name;
    facts.compute_major = capabilities.compute_major;
    facts.compute_minor = capabilities.compute_minor;
    facts.multiprocessors = static_cast<int>(capabilities.multiprocessor_count);
    const auto& clusters = capabilities.clusters_a_cta_an_sm;
    if (clusters[0] > 0) {
        facts.clusters = fmt::format("{}/{}/{}", clusters[0], clusters[1], clusters[2]);
    }
    facts.l2_bytes = static_cast<std::size_t>(std::max(l2, 0));
    facts.total_memory = total;
    facts.memory_bandwidth_gb_per_s = capabilities.memory_bandwidth_gb_per_s;
    facts.driver_version = driver.version;
    facts.nvrtc_version = jit::nvrtc_version();
    return facts;
}

std::size_t free_device_memory(CudaRuntime& runtime)
{
    ScopedContext scope(runtime);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    cuda::check(cuda::driver().mem_get_info(&free_bytes, &total_bytes), "reading free device memory");
    return free_bytes;
}

// ----------------------------------------------------------------- timing ---

Timing time_graph_replays(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups,
                          int repeats)
{
    ScopedContext scope(runtime);
    const CUstream stream = runtime.stream();
    runtime.synchronize();
    CUgraph graph = nullptr;
    {
        StreamCapture capture(stream);
        for (std::size_t i = 0; i < launches; ++i) {
            enqueue(i);
        }
        graph = capture.finish();
    }
    GraphExec exec(graph);
    for (int i = 0; i < warmups; ++i) {
        exec.launch(stream);
    }
    return time_samples(runtime, kGraphLaunchHostSeconds, launches, repeats, "graph", [&] { exec.launch(stream); });
}

Timing time_eager_batches(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups,
                          int repeats)
{
    ScopedContext scope(runtime);
    runtime.synchronize();
    // The warm-ups also measure what one sample costs the host to enqueue,
    // which sizes the spin that the timed samples queue up behind.
    std::size_t index = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int w = 0; w < warmups; ++w) {
        for (std::size_t i = 0; i < launches; ++i) {
            enqueue(index++);
        }
    }
    const double host_seconds_per_sample =
        warmups > 0 ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / warmups
                    : kMaxSpinSeconds;
    return time_samples(runtime, host_seconds_per_sample, launches, repeats, launches == 1 ? "eager" : "eager batches",
                        [&] {
                            for (std::size_t i = 0; i < launches; ++i) {
                                enqueue(index++);
                            }
                        });
}

double time_once_ms(CudaRuntime& runtime, const Enqueue& enqueue)
{
    ScopedContext scope(runtime);
    runtime.synchronize();
    std::vector<Event> events = make_events(2);
    events[0].record(runtime.stream());
    enqueue(0);
    events[1].record(runtime.stream());
    return intervals_us(events, 1.0).front() / 1000.0;
}

Timing time_row(CudaRuntime& runtime, const Enqueue& enqueue, Regime regime, bool capture_safe,
                const Rotation& rotation, const Method& method, std::string& note)
{
    Timing timing;
    if (regime == Regime::Prefill) {
        // One untimed run sizes the rest: slow rows get fewer runs, so that a
        // sweep over the original's 45 ms prefill kernels stays short.
        const double once_ms = std::max(time_once_ms(runtime, enqueue), 1e-3);
        const int affordable = static_cast<int>(std::floor(method.row_budget_ms / once_ms));
        const int repeats = std::clamp(affordable, method.min_prefill_repeats, method.prefill_repeats);
        const int warmups = std::min(method.warmups, std::max(1, affordable / 4));
        if (repeats < method.prefill_repeats) {
            note = fmt::format("{} timed runs of {:.1f} ms (--row-budget-ms {:g})", repeats, once_ms,
                               method.row_budget_ms);
        }
        timing = time_eager_batches(runtime, enqueue, 1, warmups, repeats);
    } else if (capture_safe) {
        try {
            timing = time_graph_replays(runtime, enqueue, rotation.launches, method.warmups, method.decode_repeats);
        } catch (const Error& error) {
            // The capture failed cleanly (the stream left capture); eager
            // numbers include launch gaps, and the note says so.
            note = std::string("graph capture failed, timed as eager batches (includes launch gaps): ") + error.what();
            timing = time_eager_batches(runtime, enqueue, rotation.launches, method.warmups, method.decode_repeats);
        }
    } else {
        note = "the plan is not capture-safe: timed as eager batches (includes launch gaps)";
        timing = time_eager_batches(runtime, enqueue, rotation.launches, method.warmups, method.decode_repeats);
    }
    timing.copies = rotation.copies;
    return timing;
}

// --------------------------------------------------------------- rotation ---

namespace {

constexpr std::size_t kAlignment = 256;
constexpr std::size_t kL2Multiple = 4;
constexpr std::size_t kMinCopies = 2;

}  // namespace

std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

Rotation plan_rotation(std::size_t bytes_per_copy, std::size_t l2_bytes, std::size_t budget, std::size_t min_launches)
{
    const std::size_t copy = std::max<std::size_t>(bytes_per_copy, 1);
    if (copy > budget) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("one copy of the weights takes {:.0f} MiB, more than the {:.0f} MiB this node may "
                                "use (free device memory, --max-weight-gib)",
                                static_cast<double>(copy) / kMiB, static_cast<double>(budget) / kMiB));
    }
    const std::size_t target = kL2Multiple * l2_bytes;
    const std::size_t wanted = std::max(kMinCopies, (target + copy - 1) / copy);
    Rotation rotation;
    rotation.copies = std::max<std::size_t>(1, std::min(wanted, budget / copy));
    rotation.working_set = rotation.copies * copy;
    rotation.below_target = rotation.working_set < target;
    const std::size_t rounds = (std::max<std::size_t>(min_launches, 1) + rotation.copies - 1) / rotation.copies;
    rotation.launches = rounds * rotation.copies;
    return rotation;
}

std::string Rotation::shortfall() const
{
    if (!below_target) {
        return "";
    }
    return fmt::format("memory allowed only {} weight copies ({:.0f} MiB), short of 4 x L2: some reads may hit L2",
                       copies, static_cast<double>(working_set) / kMiB);
}

Rotation rotation_for(CudaRuntime& runtime, const Method& method, std::size_t bytes_per_copy, bool decode)
{
    // A quarter of the free memory stays for activations, outputs, the
    // cuBLASLt workspace and the operator's scratch.
    const std::size_t budget = std::min(method.max_weight_bytes, free_device_memory(runtime) / 4 * 3);
    return plan_rotation(bytes_per_copy, method.l2_bytes, budget, decode ? method.min_graph_launches : 1);
}

void tile_device(CudaRuntime& runtime, CUdeviceptr base, std::size_t filled, std::size_t total)
{
    if (filled == 0) {
        throw Error(ErrorKind::InvalidArgument, "tile_device needs a filled prefix to repeat");
    }
    while (filled < total) {
        const std::size_t span = std::min(filled, total - filled);
        runtime.dtod(base + filled, base, span);
        filled += span;
    }
}

// ----------------------------------------------------------- read ceiling ---

namespace {

constexpr std::size_t kPreferredCeilingBytes = std::size_t{2} << 30;
constexpr std::size_t kMinimumCeilingBytes = std::size_t{1} << 30;
constexpr std::size_t kCeilingLaunchesPerGraph = 8;
constexpr unsigned kCeilingThreads = 512;
constexpr unsigned kCeilingBlocksPerMultiprocessor = 4;

// bench_stream_read over `bytes` (a multiple of 16) at base + index * stride.
Enqueue stream_read(CudaRuntime& runtime, const DeviceFacts& facts, CUdeviceptr base, std::size_t bytes,
                    std::size_t stride, CUdeviceptr sink)
{
    const CUfunction function = runtime.internals().function(bench_kernels(), "bench_stream_read");
    LaunchConfig config;
    config.grid.x = static_cast<std::uint32_t>(std::max(facts.multiprocessors, 1)) * kCeilingBlocksPerMultiprocessor;
    config.block.x = kCeilingThreads;
    const auto count = static_cast<std::int64_t>(bytes / 16);
    return [&runtime, function, config, base, count, stride, sink](std::size_t index) {
        KernelArgs args;
        args.ptr(base + index * stride).i64(count).ptr(sink);
        runtime.internals().launch(function, config, args, runtime.stream(), "bench_stream_read");
    };
}

}  // namespace

ReadCeiling measure_read_ceiling(CudaRuntime& runtime, const DeviceFacts& facts, const Method& method)
{
    const std::size_t free_bytes = free_device_memory(runtime);
    const std::size_t bytes = std::min(kPreferredCeilingBytes, free_bytes / 2 / 16 * 16);
    if (bytes < kMinimumCeilingBytes) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("the read ceiling needs a 1 GiB buffer; only {} MiB of device memory are free",
                                free_bytes >> 20));
    }
    DeviceBuffer buffer(runtime, bytes);
    DeviceBuffer sink(runtime, sizeof(unsigned int));
    // A non-zero pattern: the sink condition stays false and nothing reads zeros.
    runtime.memset_async(buffer.get(), 0x5A, bytes);
    runtime.synchronize();

    const Enqueue enqueue = stream_read(runtime, facts, buffer.get(), bytes, 0, sink.get());
    enqueue(0);  // loads the module outside the capture
    runtime.synchronize();

    ReadCeiling ceiling;
    ceiling.bytes = bytes;
    ceiling.timing = time_graph_replays(runtime, enqueue, kCeilingLaunchesPerGraph, method.warmups,
                                        method.decode_repeats);
    ceiling.gbps = static_cast<double>(bytes) / (ceiling.timing.us.median * 1e3);
    return ceiling;
}

Timing time_read_floor(CudaRuntime& runtime, const DeviceFacts& facts, std::uint64_t bytes, const Method& method)
{
    const std::size_t read = static_cast<std::size_t>((std::max<std::uint64_t>(bytes, 16) + 15) / 16 * 16);
    const std::size_t copy = aligned(read);
    const Rotation rotation = rotation_for(runtime, method, copy, true);
    DeviceBuffer buffer(runtime, rotation.copies * copy);
    DeviceBuffer sink(runtime, sizeof(unsigned int));
    runtime.memset_async(buffer.get(), 0x5A, rotation.copies * copy);
    runtime.synchronize();
    const Enqueue enqueue = stream_read(runtime, facts, buffer.get(), read, copy, sink.get());
    const Enqueue rotated = [&](std::size_t index) { enqueue(index % rotation.copies); };
    rotated(0);
    runtime.synchronize();
    Timing timing = time_graph_replays(runtime, rotated, rotation.launches, method.warmups, method.decode_repeats);
    timing.copies = rotation.copies;
    return timing;
}

// ------------------------------------------------------------------ dense ---

namespace {

// Random values in [-range, range) tiled over a buffer: dense outputs are not
// checked, so the data only has to be finite and not zero, and uploading
// gigabytes of fresh random data would dominate the run.
constexpr std::size_t kPatternBytes = std::size_t{8} << 20;

void fill_random(CudaRuntime& runtime, DataType dtype, CUdeviceptr base, std::size_t bytes, float range,
                 test::Lcg& lcg)
{
    const std::size_t element = element_size(dtype);
    const std::size_t pattern_bytes = std::min(kPatternBytes, bytes) / element * element;
    std::vector<float> values(pattern_bytes / element);
    for (float& value : values) {
        value = lcg.next() * range;
    }
    const test::HostTensor pattern = test::HostTensor::real(dtype, {values.size()}, values);
    runtime.htod(base, pattern.bytes.data(), pattern.bytes.size());
    tile_device(runtime, base, pattern_bytes, bytes / element * element);
}

}  // namespace

std::vector<Dense> time_dense(CudaRuntime& runtime, DataType dtype, std::size_t k, std::size_t n,
                              const std::vector<std::size_t>& ms, Regime regime, const Method& method,
                              std::uint64_t seed)
{
    const std::size_t element = element_size(dtype);
    std::vector<Dense> results(ms.size());
    for (std::size_t i = 0; i < ms.size(); ++i) {
        results[i].dtype = dtype;
        results[i].bytes = static_cast<std::uint64_t>(k * n + ms[i] * k + ms[i] * n) * element;
    }
    try {
        const std::size_t stride = aligned(k * n * element);
        const Rotation rotation = rotation_for(runtime, method, stride, regime == Regime::Decode);
        test::Lcg lcg(seed);
        DeviceBuffer weights(runtime, stride * rotation.copies);
        DeviceBuffer workspace(runtime, blas::kWorkspaceBytes);
        fill_random(runtime, dtype, weights.get(), stride * rotation.copies, 0.05f, lcg);
        for (std::size_t i = 0; i < ms.size(); ++i) {
            const std::size_t m = ms[i];
            try {
                DeviceBuffer activation(runtime, m * k * element);
                DeviceBuffer output(runtime, m * n * element);
                fill_random(runtime, dtype, activation.get(), m * k * element, 1.0f, lcg);
                const Enqueue enqueue = [&](std::size_t index) {
                    blas::GemmParams params;
                    params.dtype = dtype;
                    params.a = activation.get();
                    params.w = weights.get() + (index % rotation.copies) * stride;
                    params.y = output.get();
                    params.m = m;
                    params.k = k;
                    params.n = n;
                    blas::gemm(runtime, params, workspace.get(), blas::kWorkspaceBytes, runtime.stream());
                };
                // The handle and the heuristic query come here, outside any capture.
                enqueue(0);
                runtime.synchronize();
                std::string note;
                results[i].timing = time_row(runtime, enqueue, regime, true, rotation, method, note);
                results[i].note = note.empty() ? rotation.shortfall() : note;
            } catch (const std::exception& error) {
                results[i].error = error.what();
            }
        }
    } catch (const std::exception& error) {
        for (Dense& result : results) {
            if (result.error.empty() && !result.timing) {
                result.error = error.what();
            }
        }
    }
    return results;
}

}  // namespace nbits::bench
