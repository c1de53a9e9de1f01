#pragma once

#include "nbits/launch_plan.hpp"

#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstring>

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

    std::size_t size() const { return count_; }
    void** pointers()
    {
        for (std::size_t i = 0; i < count_; ++i) {
            pointers_[i] = &slots_[i];
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
        ++count_;
        return *this;
    }

    std::array<std::uint64_t, kMaxArgs> slots_{};
    std::array<void*, kMaxArgs> pointers_{};
    std::size_t count_ = 0;
};

}  // namespace nbits
