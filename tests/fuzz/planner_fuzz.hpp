#pragma once

#include <cstddef>
#include <cstdint>

namespace nbits::fuzz {

// One planner call decoded from `data`; aborts (a finding) when the planner
// crashes, throws anything but nbits::Error, reports an internal error, or
// returns a plan that breaks a device limit or a size bound.
void fuzz_planner(const std::uint8_t* data, std::size_t size);

}  // namespace nbits::fuzz
