#pragma once

// One way to write a kernel launch into a plan: the entry, its arguments in
// parameter order, its geometry. The kernels_cu source comes from the entry.

#include "nbits/ops/launch_plan.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace nbits::ops::detail {

class StepBuilder {
public:
    StepBuilder(const char* entry, std::string what);

    StepBuilder& pointers(std::initializer_list<BufferRef> refs);
    StepBuilder& pointers(const std::vector<BufferRef>& refs);
    StepBuilder& i32(std::int32_t value);
    StepBuilder& i32s(std::initializer_list<std::int32_t> values);
    StepBuilder& f32(float value);
    StepBuilder& flag(bool value) { return i32(value ? 1 : 0); }
    StepBuilder& grid(std::uint32_t x, std::uint32_t y = 1);
    StepBuilder& block(std::uint32_t x, std::uint32_t y = 1);
    // Dynamic shared memory; `configure` opts into more than the default
    // budget first (and fails cleanly beyond the opt-in one).
    StepBuilder& shared_memory(std::uint32_t bytes, bool configure);

    KernelStep build() const { return step_; }

private:
    KernelStep step_;
};

// ceil(value / divisor) as a grid extent (the original's `as u32`).
std::uint32_t grid_extent(std::size_t value, std::size_t divisor);
// ceil(value / divisor) clamped to [1, 65535], the original's 1-D grid rule.
std::uint32_t clamped_grid(std::size_t value, std::size_t divisor);

}  // namespace nbits::ops::detail
