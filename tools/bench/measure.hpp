#pragma once

// One shape, start to end: data, the checked eager run, the timed launches,
// the cuBLASLt baseline. Every buffer of the shape is freed before it returns.

#include "cublas_baseline.hpp"
#include "method.hpp"
#include "options.hpp"
#include "reference.hpp"
#include "shapes.hpp"
#include "timing.hpp"

#include "nbits/runtime.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nbits::bench {

struct BenchContext {
    std::shared_ptr<CudaRuntime> runtime;
    PathConfig path;
    Method method;
    bool cublas = true;
    std::uint64_t seed = 0;
};

struct ShapeResult {
    BenchShape shape;
    std::string variant;               // from the executed LaunchPlan
    std::string reason;
    std::vector<std::string> steps;    // kernel entries, "cublasLt" for a GEMM step
    bool capture_safe = false;
    std::uint64_t bytes = 0;           // the minimum bytes the node moves
    double flops = 0.0;
    std::optional<CheckResult> check;
    std::optional<Timing> timing;
    std::optional<BaselineResult> cublas;
    std::vector<std::string> notes;
    std::string error;                 // set when the shape failed

    bool failed() const { return !error.empty(); }
    double gbps() const;      // bytes over the median time
    double tflops() const;
    // cuBLASLt median over nbits median: above 1 means nbits is faster.
    std::optional<double> speedup_over_cublas() const;
};

ShapeResult measure_shape(const BenchContext& context, const BenchShape& shape);

}  // namespace nbits::bench
