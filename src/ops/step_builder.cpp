#include "ops/step_builder.hpp"

#include "ops/entries.hpp"
#include "ops/selection.hpp"

#include <algorithm>

namespace nbits::ops::detail {

StepBuilder::StepBuilder(const char* entry, std::string what)
{
    step_.source = source_of_entry(entry);
    step_.entry = entry;
    step_.what = std::move(what);
}

StepBuilder& StepBuilder::pointers(std::initializer_list<BufferRef> refs)
{
    step_.args.insert(step_.args.end(), refs.begin(), refs.end());
    return *this;
}

StepBuilder& StepBuilder::pointers(const std::vector<BufferRef>& refs)
{
    step_.args.insert(step_.args.end(), refs.begin(), refs.end());
    return *this;
}

StepBuilder& StepBuilder::i32(std::int32_t value)
{
    step_.args.emplace_back(value);
    return *this;
}

StepBuilder& StepBuilder::i32s(std::initializer_list<std::int32_t> values)
{
    for (const std::int32_t value : values) {
        i32(value);
    }
    return *this;
}

StepBuilder& StepBuilder::f32(float value)
{
    step_.args.emplace_back(value);
    return *this;
}

StepBuilder& StepBuilder::grid(std::uint32_t x, std::uint32_t y)
{
    step_.config.grid = Dim3{x, y, 1};
    return *this;
}

StepBuilder& StepBuilder::block(std::uint32_t x, std::uint32_t y)
{
    step_.config.block = Dim3{x, y, 1};
    return *this;
}

StepBuilder& StepBuilder::shared_memory(std::uint32_t bytes, bool configure)
{
    step_.config.dynamic_shared_bytes = bytes;
    step_.configure_shared_memory = configure;
    return *this;
}

std::uint32_t grid_extent(std::size_t value, std::size_t divisor)
{
    return static_cast<std::uint32_t>((value + divisor - 1) / divisor);
}

std::uint32_t clamped_grid(std::size_t value, std::size_t divisor)
{
    const std::size_t blocks = (value + divisor - 1) / divisor;
    return static_cast<std::uint32_t>(std::clamp<std::size_t>(blocks, 1, kMaxGridX));
}

}  // namespace nbits::ops::detail
