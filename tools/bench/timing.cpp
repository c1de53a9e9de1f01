#include "timing.hpp"
#include "runtime/internals.hpp"

#include "bench_kernels.hpp"

#include "cuda/driver.hpp"
#include "nbits/error.hpp"


#include <algorithm>
#include <chrono>

namespace nbits::bench {
namespace {

// Host time assumed per graph replay when sizing the spin ahead of replays.
constexpr double kGraphLaunchHostSeconds = 20e-6;
constexpr double kMinSpinSeconds = 1e-3;
// Bounds the wait a host-synchronizing path (whose enqueue includes device
// time) can add to one shape.
constexpr double kMaxSpinSeconds = 0.2;

// Long enough, with a 2x margin, for the host to queue `samples` samples
// that take `host_seconds` each to issue while the device spins.
std::uint64_t spin_nanoseconds(double host_seconds, std::size_t samples)
{
    const double seconds = std::clamp(2.0 * host_seconds * static_cast<double>(samples), kMinSpinSeconds,
                                      kMaxSpinSeconds);
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

// Microseconds between consecutive events, after the last one completed.
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

std::vector<Event> make_events(int count)
{
    std::vector<Event> events;
    events.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) {
        events.emplace_back();
    }
    return events;
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
    std::vector<Event> events = make_events(repeats + 1);
    const CUstream stream = runtime.stream();
    enqueue_spin(runtime, spin_nanoseconds(host_seconds_per_sample, static_cast<std::size_t>(repeats)));
    events[0].record(stream);
    for (int i = 0; i < repeats; ++i) {
        sample();
        events[static_cast<std::size_t>(i) + 1].record(stream);
    }
    Timing timing;
    timing.per_launch_us = summarize(intervals_us(events, static_cast<double>(launches)));
    timing.method = method;
    timing.launches = launches;
    runtime.synchronize();
    return timing;
}

}  // namespace

Stats summarize(std::vector<double> samples)
{
    Stats stats;
    stats.samples = samples;
    if (samples.empty()) {
        return stats;
    }
    std::sort(samples.begin(), samples.end());
    const std::size_t middle = samples.size() / 2;
    stats.median = samples.size() % 2 == 1 ? samples[middle] : 0.5 * (samples[middle - 1] + samples[middle]);
    stats.min = samples.front();
    stats.max = samples.back();
    return stats;
}

Timing time_graph_replays(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups, int repeats)
{
    CudaRuntime::Internals::ScopedContext scope(runtime);
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

Timing time_eager_batches(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups, int repeats)
{
    CudaRuntime::Internals::ScopedContext scope(runtime);
    runtime.synchronize();
    // The warm-ups also measure what one enqueue costs the host, which sizes
    // the spin that the timed launches queue up behind.
    std::size_t index = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int w = 0; w < warmups; ++w) {
        for (std::size_t i = 0; i < launches; ++i) {
            enqueue(index++);
        }
    }
    const double host_seconds_per_sample =
        index > 0 ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                        static_cast<double>(warmups)
                  : kMaxSpinSeconds;
    return time_samples(runtime, host_seconds_per_sample, launches, repeats, launches == 1 ? "eager" : "eager batches",
                        [&] {
                            for (std::size_t i = 0; i < launches; ++i) {
                                enqueue(index++);
                            }
                        });
}

}  // namespace nbits::bench
