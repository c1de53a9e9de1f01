// GEMVs with a fused RMS-normalization prologue, and the standalone RMS norm
// that feeds the prefill GEMM. The input is the residual sum that a
// SkipSimplifiedLayerNormalization would normalize; the normalized fp16
// activation is rounded exactly like skip_rmsnorm_f16_warp_half4's output, so
// the fused GEMV equals the norm followed by the plain GEMV to the bit.
//
// The fused entries need k % 128 == 0 (the half4 reduction has no tail), a
// 16-byte aligned activation, and k * sizeof(__half) bytes of dynamic shared
// memory for the staged activation (above 48 KiB the host must opt in).

#include "nbits/four_lane_dot_f16.cuh"
#include "nbits/gemv_scales_f16.cuh"
#include "nbits/half.cuh"
#include "nbits/reduce.cuh"
#include "nbits/rmsnorm_f16.cuh"
#include "nbits/scale_bias_f16.cuh"
#include "nbits/zero_point.cuh"

// RMS-norm prologue + block-32 int4 GEMV with fp16 scales
// (gemv_scales_f16_column over the staged activation).
template <bool HasZp>
__device__ __forceinline__ void gemv_scales_f16_rmsnorm(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    const __half* staged = rmsnorm_stage_activation_f16(
        activation, gamma, gamma_is_half, k, epsilon);
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gemv_scales_f16_column<HasZp>(staged, packed,
        reinterpret_cast<const __half*>(scales), zero_points, bias, output,
        k, n, k_blocks, blob_size, zp_row_bytes, bias_post_round, column, lane);
}

// RMS-norm prologue + block-32 int8 GEMV with fp16 scales (the
// matmul_nbits_gemv_int8_f16 work split over the staged activation).
template <bool HasZp>
__device__ __forceinline__ void gemv_int8_scales_f16_rmsnorm(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    const __half* staged = rmsnorm_stage_activation_f16(
        activation, gamma, gamma_is_half, k, epsilon);
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    const __half* __restrict__ half_scales =
        reinterpret_cast<const __half*>(scales);

    float value = 0.0f;
    if (column < n) {
        value = four_lane_column_dot(k_blocks, lane, 0, 8,
            [&](const int block, const int quarter) {
                const int zero_point =
                    block_zp_int8<HasZp>(zero_points, column, block, k_blocks);
                return int8_block32_lane_partial(staged, packed, column, k,
                    k_blocks, block, quarter, zero_point);
            },
            [&](const int block) {
                return __half2float(half_scales[(long)column * k_blocks + block]);
            });
    }
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

// Symmetric int4.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_rmsnorm
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_rmsnorm(
    const __half* __restrict__ activation,  // align 8
    const unsigned char* __restrict__ packed,  // align 4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    gemv_scales_f16_rmsnorm<false>(activation, packed, scales, zero_points,
        gamma, bias, output, k, n, k_blocks, blob_size, zp_row_bytes,
        bias_post_round, gamma_is_half, epsilon);
}
#endif

// int4 with zero points.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp(
    const __half* __restrict__ activation,  // align 8
    const unsigned char* __restrict__ packed,  // align 4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    gemv_scales_f16_rmsnorm<true>(activation, packed, scales, zero_points,
        gamma, bias, output, k, n, k_blocks, blob_size, zp_row_bytes,
        bias_post_round, gamma_is_half, epsilon);
}
#endif

// Symmetric int8 (zero point 128).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm
extern "C" __global__ void matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm(
    const __half* __restrict__ activation,  // align 8
    const unsigned char* __restrict__ packed,  // align 8
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    gemv_int8_scales_f16_rmsnorm<false>(activation, packed, scales,
        zero_points, gamma, bias, output, k, n, k_blocks, bias_post_round,
        gamma_is_half, epsilon);
}
#endif

// int8 with one zero-point byte per block.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp
extern "C" __global__ void matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp(
    const __half* __restrict__ activation,  // align 8
    const unsigned char* __restrict__ packed,  // align 8
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    gemv_int8_scales_f16_rmsnorm<true>(activation, packed, scales,
        zero_points, gamma, bias, output, k, n, k_blocks, bias_post_round,
        gamma_is_half, epsilon);
}
#endif

// Standalone RMS norm of `num_groups` rows of `norm_size` fp16 values (a
// multiple of 128; rows and gamma 8-byte aligned): one 32-thread CTA per row,
// grid = num_groups. Same reduction as the fused prologue; inv_std is formed
// on lane 0 and broadcast, and the output is written as half4 chunks of
// fp16(x * inv_std * gamma), gamma fp16 or fp32.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_rmsnorm_f16_warp_half4
extern "C" __global__ void matmul_nbits_rmsnorm_f16_warp_half4(
    const __half* __restrict__ activation,  // align 8
    const void* __restrict__ gamma,  // align 8 when fp16
    __half* __restrict__ normalized,
    const int norm_size,
    const int num_groups,
    const int gamma_is_half,
    const float epsilon)
{
    const int g = (int)blockIdx.x;
    if (g >= num_groups) return;
    const long base = (long)g * norm_size;
    const int lane = (int)threadIdx.x;
    const int chunks_per_lane = norm_size / (32 * 4);
    const unsigned long long* activation4 =
        reinterpret_cast<const unsigned long long*>(activation + base);
    const unsigned long long* gamma4 =
        reinterpret_cast<const unsigned long long*>(gamma);
    unsigned long long* normalized4 =
        reinterpret_cast<unsigned long long*>(normalized + base);
    const float ss = rms_sum_of_squares_f16(activation + base, norm_size, lane);
    float inv_std = 0.0f;
    if (lane == 0) {
        inv_std = rms_inv_std(ss, norm_size, epsilon);
    }
    inv_std = __shfl_sync(0xffffffffu, inv_std, 0);
    for (int item = 0; item < chunks_per_lane; ++item) {
        const int chunk = lane + item * 32;
        Half4 residual;
        Half4 output;
        residual.raw = activation4[chunk];
        const float2 value0 = __half22float2(residual.pair[0]);
        const float2 value1 = __half22float2(residual.pair[1]);
        float scale0x, scale0y, scale1x, scale1y;
        if (gamma_is_half) {
            Half4 scale;
            scale.raw = gamma4[chunk];
            const float2 scale0 = __half22float2(scale.pair[0]);
            const float2 scale1 = __half22float2(scale.pair[1]);
            scale0x = scale0.x;
            scale0y = scale0.y;
            scale1x = scale1.x;
            scale1y = scale1.y;
        } else {
            const int j = chunk << 2;
            const float* gamma_f = reinterpret_cast<const float*>(gamma);
            scale0x = gamma_f[j];
            scale0y = gamma_f[j + 1];
            scale1x = gamma_f[j + 2];
            scale1y = gamma_f[j + 3];
        }
        output.pair[0] = __floats2half2_rn(
            value0.x * inv_std * scale0x,
            value0.y * inv_std * scale0y);
        output.pair[1] = __floats2half2_rn(
            value1.x * inv_std * scale1x,
            value1.y * inv_std * scale1y);
        normalized4[chunk] = output.raw;
    }
}
#endif
