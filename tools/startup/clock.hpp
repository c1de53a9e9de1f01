#pragma once

#include <cstdint>
#include <ctime>

namespace nbits::startup {

// CLOCK_MONOTONIC is one clock for every process of the machine, so a time
// the parent reads before spawning compares with one the child reads.
inline std::int64_t monotonic_ns()
{
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace nbits::startup
