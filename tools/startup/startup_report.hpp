#pragma once

// Tables and JSON of nbits-startup.

#include "compile_measurement.hpp"
#include "gpu_measurement.hpp"

#include <string>

namespace nbits::startup {

// The targets for a decode step.
inline constexpr double kWarmStepTargetMs = 20.0;    // prewarmed cache: every function of the step
inline constexpr double kHitTargetNs = 1000.0;       // in-process lookup, amortized

std::string gpu_table(const GpuMeasurement& measurement);
std::string gpu_json(const GpuMeasurement& measurement);
std::string compile_table(const CompileMeasurement& measurement);
std::string compile_json(const CompileMeasurement& measurement);

}  // namespace nbits::startup
