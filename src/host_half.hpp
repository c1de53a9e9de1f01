#pragma once

#include <cstdint>
#include <cstring>

namespace nbits {

// IEEE binary16 bits from a float, rounded to nearest even (as __float2half_rn).
inline std::uint16_t float_to_half(float value)
{
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const std::uint32_t exponent = (bits >> 23) & 0xffu;
    std::uint32_t mantissa = bits & 0x7fffffu;
    if (exponent == 0xffu) {
        return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    }
    const int unbiased = static_cast<int>(exponent) - 127;
    if (unbiased > 15) {
        return static_cast<std::uint16_t>(sign | 0x7c00u);
    }
    if (unbiased >= -14) {
        std::uint32_t half = (static_cast<std::uint32_t>(unbiased + 15) << 10) | (mantissa >> 13);
        const std::uint32_t rest = mantissa & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) {
            ++half;  // may carry into the exponent, up to infinity: still correct
        }
        return static_cast<std::uint16_t>(sign | half);
    }
    if (unbiased < -25) {
        return static_cast<std::uint16_t>(sign);
    }
    mantissa |= 0x800000u;
    const int shift = -unbiased - 14 + 13;  // 14..24 more than a normal half
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) {
        ++half;
    }
    return static_cast<std::uint16_t>(sign | half);
}

inline float half_to_float(std::uint16_t half)
{
    const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
    const std::uint32_t exponent = (half >> 10) & 0x1fu;
    std::uint32_t mantissa = half & 0x3ffu;
    std::uint32_t bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else {
        int shift = 0;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            ++shift;
        }
        bits = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

}  // namespace nbits
