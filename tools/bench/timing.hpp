#pragma once

// Device-side timing with CUDA events: graph replays for short launches (the
// graph removes the host launch gaps between them), eager runs for long or
// capture-unsafe ones. Either way the timed work is queued behind a device
// spin, so the samples hold device time, not the host's launch cost. Every
// driver call is checked.

#include "nbits/runtime.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace nbits::bench {

struct Stats {
    double median = 0.0;
    double min = 0.0;
    double max = 0.0;
    std::vector<double> samples;
};

Stats summarize(std::vector<double> samples);

// Microseconds per launch, and how they were obtained.
struct Timing {
    Stats per_launch_us;
    std::string method;          // "graph", "eager batches" or "eager"
    std::size_t launches = 0;    // launches per timed sample
    std::size_t copies = 1;      // weight copies rotated through
};

// Enqueues launch number `index` on the runtime's stream (no synchronization).
using Enqueue = std::function<void(std::size_t index)>;

// Captures `launches` enqueues into one graph, replays it `warmups` times,
// then times `repeats` back-to-back replays with one event between each pair.
// Throws (leaving the stream out of capture) if anything in the capture
// fails, so that the caller can fall back to eager timing.
Timing time_graph_replays(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups, int repeats);

// The same measurement without a graph: each sample is `launches` eager
// enqueues between two events, divided by `launches`. A path that
// synchronizes inside its enqueue drains the queue, and then its samples do
// include its host time, as they would in an engine.
Timing time_eager_batches(CudaRuntime& runtime, const Enqueue& enqueue, std::size_t launches, int warmups, int repeats);

}  // namespace nbits::bench
