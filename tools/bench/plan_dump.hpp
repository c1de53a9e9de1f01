#pragma once

// --plan: what the operator would launch for each shape, without timing.

#include "options.hpp"
#include "shapes.hpp"

#include <string>
#include <vector>

namespace nbits::bench {

// Plans against the device's capabilities when a GPU is present, else
// against an H200's (the plan is pure: it needs no device). Returns the
// rendered plans; `failed` counts shapes the operator rejected.
std::string render_plans(const BenchOptions& options, const std::vector<BenchShape>& shapes, int& failed);

}  // namespace nbits::bench
