#pragma once

// How one shape is timed, the same way for nbits and for the cuBLASLt
// baseline: decode as graph replays over rotated weights, prefill as
// back-to-back eager runs.

#include "timing.hpp"
#include "workload.hpp"

#include "nbits/runtime.hpp"

#include <cstddef>
#include <string>

namespace nbits::bench {

struct Method {
    int warmups = 2;
    int decode_repeats = 5;
    int prefill_repeats = 10;
    std::size_t min_graph_launches = 20;
    std::size_t l2_bytes = 0;
    std::size_t max_weight_bytes = 0;

    // Device memory the rotated copies of one shape may take now.
    std::size_t weight_budget(CudaRuntime& runtime) const;
    Rotation rotation(CudaRuntime& runtime, std::size_t bytes_per_copy, bool decode) const;
};

// Decode (`decode`): `rotation.launches` launches per sample, captured into a
// graph when `capture_safe`, else (or when capture fails; `note` says why)
// timed as eager batches. Prefill: one eager launch per sample. The enqueue
// gets the launch number; it picks the weight copy from it.
Timing time_launches(CudaRuntime& runtime, const Enqueue& enqueue, bool decode, bool capture_safe,
                     const Rotation& rotation, const Method& method, std::string* note);

}  // namespace nbits::bench
