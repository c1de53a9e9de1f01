// Int4 weight x fp16 activation building blocks: register-only nibble to
// half2 conversion, the activation permutation that matches its output order,
// half2 accumulation, and the fixed-order fp32 reductions of the half2 sums.
#pragma once

#include "nbits/half.cuh"
#include "nbits/zero_point.cuh"

// fp16x2 {8.0, 8.0}: the subtrahend of the symmetric int4 zero point.
constexpr unsigned int fp16x2_eight = 0x48004800u;

// Converts the eight nibbles of `packed` into four half2 values of
// (code - zero point), with the zero point given as an fp16x2 pair `sub2`.
// OR-ing a nibble into the mantissa of fp16 1024 (low nibble) or 1024 with
// the nibble scaled by 16 (high nibble) gives exact fp16 values that one
// sub.f16x2 / fma.rn.f16x2 turns back into the code. Output order:
//   values[0] = {n0, n4}, values[1] = {n1, n5},
//   values[2] = {n2, n6}, values[3] = {n3, n7}
// where n<i> is nibble i counting from the least significant bits.
__device__ __forceinline__ void int4x8_to_half2x4_sub(
    const unsigned int packed,
    __half2* values,
    const unsigned int sub2)
{
    unsigned int* h = reinterpret_cast<unsigned int*>(values);
    constexpr unsigned int bottom_mask = 0x000f000f;
    constexpr unsigned int top_mask = 0x00f000f0;
    constexpr unsigned int fp16_magic = 0x64006400;
    constexpr unsigned int lop3_lut = (0xf0 & 0xcc) | 0xaa;
    const unsigned int top = packed >> 8;
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[0])
                 : "r"(packed), "n"(bottom_mask), "n"(fp16_magic), "n"(lop3_lut));
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[1])
                 : "r"(packed), "n"(top_mask), "n"(fp16_magic), "n"(lop3_lut));
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[2])
                 : "r"(top), "n"(bottom_mask), "n"(fp16_magic), "n"(lop3_lut));
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[3])
                 : "r"(top), "n"(top_mask), "n"(fp16_magic), "n"(lop3_lut));

    constexpr unsigned int fp16_1024 = 0x64006400;
    constexpr unsigned int fp16_one_sixteenth = 0x2c002c00;
    constexpr unsigned int fp16_neg64 = 0xd400d400;
    asm volatile("sub.f16x2 %0, %1, %2;\n"
                 : "=r"(h[0]) : "r"(h[0]), "r"(fp16_1024));
    asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
                 : "=r"(h[1])
                 : "r"(h[1]), "r"(fp16_one_sixteenth), "r"(fp16_neg64));
    asm volatile("sub.f16x2 %0, %1, %2;\n"
                 : "=r"(h[2]) : "r"(h[2]), "r"(fp16_1024));
    asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
                 : "=r"(h[3])
                 : "r"(h[3]), "r"(fp16_one_sixteenth), "r"(fp16_neg64));
    // Codes 0..15 minus a zero point 0..15 are exact in fp16.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        asm volatile("sub.f16x2 %0, %1, %2;\n"
                     : "=r"(h[i]) : "r"(h[i]), "r"(sub2));
    }
}

// Symmetric int4: (code - 8).
__device__ __forceinline__ void int4x8_to_half2x4(
    const unsigned int packed,
    __half2* values)
{
    int4x8_to_half2x4_sub(packed, values, fp16x2_eight);
}

// fp16x2 subtrahend of a scalar zero point (a nibble, exact in fp16).
__device__ __forceinline__ unsigned int int4_zero_point_sub2(const int zero_point)
{
    const __half zp = __float2half((float)zero_point);
    const __half2 zp2 = __halves2half2(zp, zp);
    return *reinterpret_cast<const unsigned int*>(&zp2);
}

// Per-block subtrahend for the vectorized int4 GEMVs, keyed on the template
// parameter (never the runtime pointer): `HasZp == false` is the constant
// fp16 8.0 with no load.
template <bool HasZp>
__device__ __forceinline__ unsigned int block_sub2(
    const unsigned char* __restrict__ zero_points,
    const long column,
    const int block,
    const int zp_row_bytes)
{
    if (!HasZp) {
        return fp16x2_eight;
    }
    return int4_zero_point_sub2(
        int4_block_zero_point(zero_points, column, block, zp_row_bytes));
}

// Loads eight fp16 activations (16-byte aligned) and reorders them into the
// nibble order of int4x8_to_half2x4_sub: {a0,a4}, {a1,a5}, {a2,a6}, {a3,a7}.
__device__ __forceinline__ uint4 permute_activation_f16x8(
    const __half* __restrict__ activation)
{
    const uint4 a = *reinterpret_cast<const uint4*>(activation);
    constexpr unsigned int low_halves = 0x5410;
    constexpr unsigned int high_halves = 0x7632;
    uint4 permuted;
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.x) : "r"(a.x), "r"(a.z), "r"(low_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.y) : "r"(a.x), "r"(a.z), "r"(high_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.z) : "r"(a.y), "r"(a.w), "r"(low_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.w) : "r"(a.y), "r"(a.w), "r"(high_halves));
    return permuted;
}

__device__ __forceinline__ const __half2& half2_at(const unsigned int& word)
{
    return *reinterpret_cast<const __half2*>(&word);
}

// Sums the eight fp32-widened halves of four half2 values in the order
// s0.x, s1.x, s2.x, s3.x, s0.y, s1.y, s2.y, s3.y, i.e. K order 0..7 after the
// permutation. With `HasLead` the sum starts from `lead + s0.x`.
template <bool HasLead>
__device__ __forceinline__ float half2x4_sum_f32(
    const float lead,
    const __half2 s0,
    const __half2 s1,
    const __half2 s2,
    const __half2 s3)
{
    const float2 v0 = __half22float2(s0);
    const float2 v1 = __half22float2(s1);
    const float2 v2 = __half22float2(s2);
    const float2 v3 = __half22float2(s3);
    float value = HasLead ? lead + v0.x : v0.x;
    value += v1.x;
    value += v2.x;
    value += v3.x;
    value += v0.y;
    value += v1.y;
    value += v2.y;
    value += v3.y;
    return value;
}

// fp32 dot of eight symmetric int4 weights with eight unscaled fp16
// activations (16-byte aligned), in K order 0..7.
__device__ __forceinline__ float dot_int4x8_f16(
    const unsigned int packed,
    const __half* __restrict__ activation)
{
    const uint4 permuted = permute_activation_f16x8(activation);
    __half2 q[4];
    int4x8_to_half2x4(packed, q);
    const float2 q04 = __half22float2(q[0]);
    const float2 q15 = __half22float2(q[1]);
    const float2 q26 = __half22float2(q[2]);
    const float2 q37 = __half22float2(q[3]);
    const float2 a04 = __half22float2(half2_at(permuted.x));
    const float2 a15 = __half22float2(half2_at(permuted.y));
    const float2 a26 = __half22float2(half2_at(permuted.z));
    const float2 a37 = __half22float2(half2_at(permuted.w));
    float dot = q04.x * a04.x;
    dot += q15.x * a15.x;
    dot += q26.x * a26.x;
    dot += q37.x * a37.x;
    dot += q04.y * a04.y;
    dot += q15.y * a15.y;
    dot += q26.y * a26.y;
    dot += q37.y * a37.y;
    return dot;
}

// Four independent half2 accumulators: sum<i> += (q<i> * scale) * a<i>, with
// the weights centred by `sub2` and the activation already permuted.
__device__ __forceinline__ void accumulate_int4x8_f16_permuted_zp(
    const unsigned int packed,
    const uint4& activation,
    const __half scale,
    const unsigned int sub2,
    __half2& sum0,
    __half2& sum1,
    __half2& sum2,
    __half2& sum3)
{
    __half2 q[4];
    int4x8_to_half2x4_sub(packed, q, sub2);
    const __half2 scale2 = __halves2half2(scale, scale);
    sum0 = __hfma2(__hmul2(q[0], scale2), half2_at(activation.x), sum0);
    sum1 = __hfma2(__hmul2(q[1], scale2), half2_at(activation.y), sum1);
    sum2 = __hfma2(__hmul2(q[2], scale2), half2_at(activation.z), sum2);
    sum3 = __hfma2(__hmul2(q[3], scale2), half2_at(activation.w), sum3);
}

// accumulate_int4x8_f16_permuted_zp on eight activations loaded from memory.
__device__ __forceinline__ void accumulate_int4x8_f16_zp(
    const unsigned int packed,
    const __half* __restrict__ activation,
    const __half scale,
    const unsigned int sub2,
    __half2& sum0,
    __half2& sum1,
    __half2& sum2,
    __half2& sum3)
{
    const uint4 permuted = permute_activation_f16x8(activation);
    accumulate_int4x8_f16_permuted_zp(
        packed, permuted, scale, sub2, sum0, sum1, sum2, sum3);
}

// One half2 accumulator for a whole 8-weight group:
// sum += (q<i> * scale2) * a<i> for i = 0..3, symmetric weights.
__device__ __forceinline__ void accumulate_int4x8_dot_f16(
    const unsigned int packed,
    const uint4& activation,
    const __half2 scale2,
    __half2& sum)
{
    __half2 q[4];
    int4x8_to_half2x4(packed, q);
    sum = __hfma2(__hmul2(q[0], scale2), half2_at(activation.x), sum);
    sum = __hfma2(__hmul2(q[1], scale2), half2_at(activation.y), sum);
    sum = __hfma2(__hmul2(q[2], scale2), half2_at(activation.z), sum);
    sum = __hfma2(__hmul2(q[3], scale2), half2_at(activation.w), sum);
}

// Scaled dot of one symmetric block-32 int4 blob (16 bytes) with its 32
// permuted activations: each 8-weight group accumulates in its own half2, the
// four group sums are then added in fp32 in half2x4_sum_f32 order.
__device__ __forceinline__ float dot_int4x32_f16_permuted_scaled(
    const uint4& packed,
    const uint4& activation0,
    const uint4& activation1,
    const uint4& activation2,
    const uint4& activation3,
    const __half scale)
{
    const __half2 scale2 = __halves2half2(scale, scale);
    __half2 sum0 = __float2half2_rn(0.0f);
    __half2 sum1 = __float2half2_rn(0.0f);
    __half2 sum2 = __float2half2_rn(0.0f);
    __half2 sum3 = __float2half2_rn(0.0f);
    accumulate_int4x8_dot_f16(packed.x, activation0, scale2, sum0);
    accumulate_int4x8_dot_f16(packed.y, activation1, scale2, sum1);
    accumulate_int4x8_dot_f16(packed.z, activation2, scale2, sum2);
    accumulate_int4x8_dot_f16(packed.w, activation3, scale2, sum3);
    return half2x4_sum_f32<false>(0.0f, sum0, sum1, sum2, sum3);
}

// fp32 dot of the first `valid` (<= 8) weights of a packed int4 word with
// unaligned fp16 activations, centred by a scalar zero point, in K order. The
// scale is applied by the caller.
__device__ __forceinline__ float int4x8_partial_f32(
    const unsigned int packed_word,
    const __half* __restrict__ activation,
    const int zero_point,
    const int valid)
{
    float partial = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (i < valid) {
            const int q = (int)((packed_word >> (i * 4)) & 15u) - zero_point;
            partial += (float)q * __half2float(activation[i]);
        }
    }
    return partial;
}
