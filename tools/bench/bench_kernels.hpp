#pragma once

// The tool's own device kernels, compiled through the same NVRTC JIT as the
// operator's: a streaming read (the read ceiling) and a spin that holds the
// stream while the host queues the launches to be timed.

#include "jit/kernel_source.hpp"
#include "nbits/runtime.hpp"

#include <cstddef>
#include <cstdint>

namespace nbits::bench {

const jit::KernelSource& bench_kernels();

inline constexpr const char* kStreamReadEntry = "bench_stream_read";

// Enqueues a one-thread kernel that busy-waits `nanoseconds` on the device's
// global timer. Work queued behind it starts back to back once it ends, so
// events around that work time the device alone, not the host's launch cost.
void enqueue_spin(CudaRuntime& runtime, std::uint64_t nanoseconds);

}  // namespace nbits::bench
