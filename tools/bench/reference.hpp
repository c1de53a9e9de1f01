#pragma once

// The output check that runs before any timing: a float64 host reference on
// a sample of rows and columns, against a tolerance that fits the path.

#include "host_data.hpp"
#include "options.hpp"

#include "nbits/runtime.hpp"

#include <cuda.h>

#include <cstddef>
#include <string>

namespace nbits::bench {

struct CheckResult {
    // max |out - ref| / max |ref| over the sampled values: a relative error
    // that stays meaningful where single reference values are near zero.
    double max_error = 0.0;
    double tolerance = 0.0;
    std::size_t values_checked = 0;
    // NaN or infinity anywhere in the sampled rows (the output is poisoned
    // with NaN before the run, so an unwritten element shows here).
    std::size_t non_finite = 0;
    bool passed = false;
    std::string summary;  // one line for the log and for a failed shape
};

// fp16 storage and half2 accumulation, or int8-quantized activations
// (accuracy level 4), against plain fp32 arithmetic.
double tolerance_for(const PathConfig& path);

// Reads the sampled rows of `output` back (synchronizing the stream) and
// compares them with the reference computed from `host`.
CheckResult check_output(CudaRuntime& runtime, const HostData& host, CUdeviceptr output);

}  // namespace nbits::bench
