// Integer helpers of the accuracy-level-4 path (int8 activations x int4
// weights, integer block dots, fp32 block accumulation). fp32 only.
#pragma once

// Max of |value| over the warp (shuffle-down tree), broadcast from lane 0.
__device__ __forceinline__ float warp_max_broadcast(float max_abs)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        max_abs = fmaxf(max_abs,
            __shfl_down_sync(0xffffffffu, max_abs, offset));
    }
    return __shfl_sync(0xffffffffu, max_abs, 0);
}

// Symmetric int8 scale of a block whose largest magnitude is `max_abs`;
// an all-zero block gets scale 0.
__device__ __forceinline__ float accuracy4_activation_scale(const float max_abs)
{
    return max_abs == 0.0f ? 0.0f : max_abs / 127.0f;
}

__device__ __forceinline__ float accuracy4_inverse_scale(const float activation_scale)
{
    return activation_scale == 0.0f ? 0.0f : 1.0f / activation_scale;
}

// int8 code of value * inverse_scale clamped to [-127, 127], rounded half
// away from zero (roundf).
__device__ __forceinline__ int quantize_int8(
    const float value,
    const float inverse_scale)
{
    return (int)roundf(fminf(127.0f, fmaxf(-127.0f, value * inverse_scale)));
}

// Four int4 codes (bits offset..offset+15 of `packed`) minus 8, as packed
// signed bytes.
__device__ __forceinline__ int unpack_int4x4(unsigned int packed, int offset)
{
    const int w0 = (int)((packed >> (offset + 0)) & 15u) - 8;
    const int w1 = (int)((packed >> (offset + 4)) & 15u) - 8;
    const int w2 = (int)((packed >> (offset + 8)) & 15u) - 8;
    const int w3 = (int)((packed >> (offset + 12)) & 15u) - 8;
    return (w0 & 255) | ((w1 & 255) << 8) | ((w2 & 255) << 16)
        | ((w3 & 255) << 24);
}

// Signed 4-way byte dot product plus accumulator (dp4a where available).
__device__ __forceinline__ int dot_int8x4(int lhs, int rhs, int accumulator)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(lhs, rhs, accumulator);
#else
#pragma unroll
    for (int byte = 0; byte < 4; ++byte) {
        int lhs_value = ((unsigned int)lhs >> (byte * 8)) & 255u;
        int rhs_value = ((unsigned int)rhs >> (byte * 8)) & 255u;
        lhs_value = lhs_value >= 128 ? lhs_value - 256 : lhs_value;
        rhs_value = rhs_value >= 128 ? rhs_value - 256 : rhs_value;
        accumulator += lhs_value * rhs_value;
    }
    return accumulator;
#endif
}

// Integer dot of one symmetric block-32 int4 blob (16 bytes, two codes per
// byte, low nibble first) with its 32 int8 activations (4-byte aligned).
__device__ __forceinline__ int dot_int4x32_int8(
    const uint4 packed_weights,
    const signed char* activation_block)
{
    const unsigned int words[4] = {
        packed_weights.x, packed_weights.y, packed_weights.z, packed_weights.w
    };
    int dot = 0;
#pragma unroll
    for (int word = 0; word < 4; ++word) {
        const int activation0 =
            *reinterpret_cast<const int*>(activation_block + word * 8);
        const int activation1 =
            *reinterpret_cast<const int*>(activation_block + word * 8 + 4);
        dot = dot_int8x4(activation0, unpack_int4x4(words[word], 0), dot);
        dot = dot_int8x4(activation1, unpack_int4x4(words[word], 16), dot);
    }
    return dot;
}

// value + dot * (activation_scale * weight_scale), each product and the sum
// rounded separately (no fused multiply-add), blocks added in ascending order
// by every accuracy-4 kernel so they agree to the bit.
__device__ __forceinline__ float accumulate_block_dot(
    const float value,
    const int dot,
    const float activation_scale,
    const float weight_scale)
{
    const float combined_scale = __fmul_rn(activation_scale, weight_scale);
    return __fadd_rn(value, __fmul_rn((float)dot, combined_scale));
}
