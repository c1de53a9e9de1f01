// The block-32 int4 GEMV with fp16 scales: one warp per output column, used
// both on the activation in global memory (matmul_nbits_gemv_f16_scales_f16*)
// and on the RMS-normalized activation staged in shared memory (the fused
// RMS-norm entries), so both paths round identically.
#pragma once

#include "nbits/half.cuh"
#include "nbits/int4_f16.cuh"
#include "nbits/reduce.cuh"
#include "nbits/scale_bias_f16.cuh"
#include "nbits/zero_point.cuh"

// Symmetric or zero-point int4 with block_size 32 (16-byte blobs; the
// `blob_size` argument only addresses the column row), fp16 scales.
// Lane l owns K elements [256*i + 8*l, 256*i + 8*l + 8) for i = 0, 1, ...:
// one aligned packed word and one uint4 of activations per step, all eight
// inside block 8*i + l/4. Whole 8-element chunks accumulate in four half2
// sums (scale applied in fp16); a partial last chunk (k not a multiple of 8)
// accumulates in fp32 with the scale applied per element. The warp then adds
// the chunk tail and the half2 lanes in fp32 and tree-reduces, and lane 0
// stores fp16 with the bias epilogue. `activation` must be 16-byte aligned;
// every lane of the warp must call this (it shuffles), including lanes whose
// `column >= n`.
template <bool HasZp>
__device__ __forceinline__ void gemv_scales_f16_column(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const __half* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int column,
    const int lane)
{
    __half2 sum0 = __float2half2_rn(0.0f);
    __half2 sum1 = __float2half2_rn(0.0f);
    __half2 sum2 = __float2half2_rn(0.0f);
    __half2 sum3 = __float2half2_rn(0.0f);
    float tail = 0.0f;
    if (column < n) {
        const int lane_depth = lane * 8;
        const __half* activation_ptr = activation + lane_depth;
        const unsigned char* packed_ptr =
            packed + (long)column * k_blocks * blob_size + lane * 4;
        const __half* scale_ptr =
            scales + (long)column * k_blocks + (lane >> 2);
        int depth_base = 0;
        for (; depth_base + lane_depth + 8 <= k; depth_base += 256) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const int block = (depth_base >> 5) + (lane >> 2);
            const unsigned int sub2 =
                block_sub2<HasZp>(zero_points, column, block, zp_row_bytes);
            accumulate_int4x8_f16_zp(
                packed_word,
                activation_ptr,
                *scale_ptr,
                sub2,
                sum0,
                sum1,
                sum2,
                sum3);
            activation_ptr += 256;
            packed_ptr += 128;
            scale_ptr += 8;
        }
        const int tail_depth = depth_base + lane_depth;
        if (tail_depth < k) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const float scale = __half2float(*scale_ptr);
            const int tail_block = (depth_base >> 5) + (lane >> 2);
            const int zero_point =
                block_zp<HasZp>(zero_points, column, tail_block, zp_row_bytes);
            const int valid = min(8, k - tail_depth);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (i < valid) {
                    const int q = (int)((packed_word >> (i * 4)) & 15u) - zero_point;
                    tail += (float)q * __half2float(activation_ptr[i]) * scale;
                }
            }
        }
    }
    float value = half2x4_sum_f32<true>(tail, sum0, sum1, sum2, sum3);
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}
