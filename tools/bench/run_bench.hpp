#pragma once

// The timed run: device facts, the read ceiling, then every shape in turn.

#include "options.hpp"
#include "shapes.hpp"

#include "nbits/runtime.hpp"

#include <memory>
#include <string>
#include <vector>

namespace nbits::bench {

struct BenchOutcome {
    std::string report;     // in the requested format
    int failed_shapes = 0;
};

// Progress goes to stderr, one line per shape; the report is returned.
BenchOutcome run_benchmarks(const std::shared_ptr<CudaRuntime>& runtime, const BenchOptions& options,
                            const std::vector<BenchShape>& shapes);

}  // namespace nbits::bench
