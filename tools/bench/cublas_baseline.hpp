#pragma once

// The peer a user would pick instead: cuBLASLt fp16 dense Y = A·W for the
// same M, K and weight columns, its weights rotated through DRAM the same
// way (fp16 dense weights are 4x the bytes of int4 ones).

#include "method.hpp"
#include "timing.hpp"

#include "nbits/runtime.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace nbits::bench {

struct BaselineResult {
    Timing timing;
    std::uint64_t bytes = 0;  // fp16 A and W read once, Y written once
    std::string note;
};

BaselineResult time_cublas_f16(CudaRuntime& runtime, std::size_t m, std::size_t k, std::size_t n, const Method& method,
                               std::uint64_t seed);

}  // namespace nbits::bench
