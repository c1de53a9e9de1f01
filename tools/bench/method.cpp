#include "method.hpp"

#include "device.hpp"

#include "nbits/error.hpp"

#include <algorithm>

namespace nbits::bench {

std::size_t Method::weight_budget(CudaRuntime& runtime) const
{
    // A quarter of the free memory stays for activations, outputs, the
    // cuBLASLt workspace and whatever the operator allocates.
    return std::min(max_weight_bytes, free_device_memory(runtime) / 4 * 3);
}

Rotation Method::rotation(CudaRuntime& runtime, std::size_t bytes_per_copy, bool decode) const
{
    return plan_rotation(bytes_per_copy, l2_bytes, weight_budget(runtime), decode ? min_graph_launches : 1);
}

Timing time_launches(CudaRuntime& runtime, const Enqueue& enqueue, bool decode, bool capture_safe,
                     const Rotation& rotation, const Method& method, std::string* note)
{
    Timing timing;
    if (!decode) {
        timing = time_eager_batches(runtime, enqueue, 1, method.warmups, method.prefill_repeats);
    } else if (capture_safe) {
        try {
            timing = time_graph_replays(runtime, enqueue, rotation.launches, method.warmups, method.decode_repeats);
        } catch (const Error& error) {
            // Capture failed cleanly (the stream left capture); the eager
            // numbers include launch gaps, and the note says so.
            if (note != nullptr) {
                *note = std::string("graph capture failed, timed eagerly: ") + error.what();
            }
            timing = time_eager_batches(runtime, enqueue, rotation.launches, method.warmups, method.decode_repeats);
        }
    } else {
        if (note != nullptr) {
            *note = "path is not capture-safe: timed as eager batches (includes launch gaps)";
        }
        timing = time_eager_batches(runtime, enqueue, rotation.launches, method.warmups, method.decode_repeats);
    }
    timing.copies = rotation.copies;
    return timing;
}

}  // namespace nbits::bench
