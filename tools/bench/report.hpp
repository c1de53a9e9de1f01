#pragma once

// The results of a run as a table for people, JSON or CSV for machines.

#include "ceiling.hpp"
#include "device.hpp"
#include "measure.hpp"
#include "method.hpp"
#include "options.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace nbits::bench {

struct RunInfo {
    DeviceFacts device;
    ReadCeiling ceiling;
    PathConfig path;
    Method method;
    std::uint64_t seed = 0;
    bool cublas = true;
};

std::string render_report(OutputFormat format, const RunInfo& run, const std::vector<ShapeResult>& results);

}  // namespace nbits::bench
