#pragma once

// The device's streaming-read ceiling, measured in the same run as the
// shapes it is compared with: the denominator of every %read.

#include "device.hpp"
#include "timing.hpp"

#include "nbits/runtime.hpp"

#include <cstddef>

namespace nbits::bench {

struct ReadCeiling {
    double gbps = 0.0;        // from the median launch
    std::size_t bytes = 0;    // read per launch
    Timing timing;
};

// Graph-timed launches of a kernel that sums 16-byte loads over a buffer of
// at least 1 GiB (2 GiB when memory allows), far beyond L2.
ReadCeiling measure_read_ceiling(CudaRuntime& runtime, const DeviceFacts& facts, int warmups, int repeats);

}  // namespace nbits::bench
