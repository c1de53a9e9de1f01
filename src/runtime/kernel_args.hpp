#pragma once

#include "nbits/launch_plan.hpp"

#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace nbits {

// The typed argument list of one kernel launch, in the entry's parameter
// order. Values live inside the object, so `pointers()` stays valid while it
// does.
class KernelArgs {
public:
    static constexpr std::size_t kMaxArgs = 24;

    KernelArgs& ptr(CUdeviceptr value) { return push(value); }
    KernelArgs& i32(std::int32_t value) { return push(value); }
    KernelArgs& i64(std::int64_t value) { return push(value); }
    KernelArgs& f32(float value) { return push(value); }
    // A tensor map passed by value (a `const __grid_constant__ TmaMap` parameter).
    KernelArgs& tensor_map(const CUtensorMap& value)
    {
        if (maps_used_ == kMaxMaps || count_ == kMaxArgs) {
            std::abort();  // more than any nbits entry takes: a programming error
        }
        maps_[maps_used_] = value;
        map_of_[count_] = static_cast<std::int8_t>(maps_used_);
        ++maps_used_;
        ++count_;
        return *this;
    }

    std::size_t size() const { return count_; }
    void** pointers()
    {
        for (std::size_t i = 0; i < count_; ++i) {
            pointers_[i] = map_of_[i] >= 0 ? static_cast<void*>(&maps_[static_cast<std::size_t>(map_of_[i])])
                                           : static_cast<void*>(&slots_[i]);
        }
        return pointers_.data();
    }

private:
    template <typename T>
    KernelArgs& push(T value)
    {
        static_assert(sizeof(T) <= sizeof(std::uint64_t), "kernel arguments are at most 8 bytes");
        if (count_ == kMaxArgs) {
            // More parameters than any nbits entry has: a programming error.
            std::abort();
        }
        slots_[count_] = 0;
        std::memcpy(&slots_[count_], &value, sizeof(T));
        map_of_[count_] = -1;
        ++count_;
        return *this;
    }

    static constexpr std::size_t kMaxMaps = 3;
    std::array<CUtensorMap, kMaxMaps> maps_{};
    std::array<std::int8_t, kMaxArgs> map_of_{};
    std::size_t maps_used_ = 0;
    std::array<std::uint64_t, kMaxArgs> slots_{};
    std::array<void*, kMaxArgs> pointers_{};
    std::size_t count_ = 0;
};

// The tensor map `map` describes over the tensor at `base`, through the
// driver's cuTensorMapEncodeTiled; Error(Driver) naming `what` if the driver
// refuses it.
CUtensorMap encode_tensor_map(const ops::TensorMapArg& map, CUdeviceptr base, std::string_view what);

// The arguments of `step` for one launch, each buffer's address from
// `resolve(BufferRef)`.
template <typename Resolve>
KernelArgs kernel_args(const ops::KernelStep& step, Resolve&& resolve)
{
    KernelArgs args;
    for (const ops::KernelArg& arg : step.args) {
        if (const auto* ref = std::get_if<ops::BufferRef>(&arg)) {
            args.ptr(resolve(*ref));
        } else if (const auto* value = std::get_if<std::int32_t>(&arg)) {
            args.i32(*value);
        } else if (const auto* map = std::get_if<ops::TensorMapArg>(&arg)) {
            args.tensor_map(encode_tensor_map(*map, resolve(map->base), step.what));
        } else {
            args.f32(std::get<float>(arg));
        }
    }
    return args;
}

}  // namespace nbits
