// The four-lanes-per-block column dot of the block-32 fp16 GEMVs
// (matmul_nbits_gemv_f16, the int8 GEMVs and the int8 RMS-norm GEMV).
#pragma once

#include "nbits/half.cuh"

// One warp computes one output column. Four adjacent lanes share a block
// (lane quarter q = lane % 4 takes 8 consecutive K elements of it), so a warp
// step covers 8 blocks: block first_block + lane / 4, then every
// `block_step`. `lane_partial(block, quarter)` returns the lane's fp32
// partial of a block; a two-step shuffle (offsets 2, 1 within groups of 4)
// adds the four partials, and quarter 0 accumulates partial * scale_of(block)
// in block order. The returned sum is per lane (the caller warp-reduces).
// Every lane of the warp must call this (it shuffles).
template <typename LanePartial, typename BlockScale>
__device__ __forceinline__ float four_lane_column_dot(
    const int k_blocks,
    const int lane,
    const int first_block,
    const int block_step,
    const LanePartial& lane_partial,
    const BlockScale& scale_of)
{
    float value = 0.0f;
    const int quarter = lane & 3;
    for (int block_base = first_block; block_base < k_blocks;
         block_base += block_step) {
        const int block = block_base + (lane >> 2);
        float block_partial = 0.0f;
        if (block < k_blocks) {
            block_partial = lane_partial(block, quarter);
        }
        block_partial += __shfl_down_sync(0xffffffffu, block_partial, 2, 4);
        block_partial += __shfl_down_sync(0xffffffffu, block_partial, 1, 4);
        if (quarter == 0 && block < k_blocks) {
            const float scale = scale_of(block);
            value += block_partial * scale;
        }
    }
    return value;
}

// Lane partial of a block-32 int8 weight (32 bytes, one unsigned code per K
// element): sum of (code - zero_point) * a over the lane's 8 elements in K
// order, in fp32. Whole chunks use one uint2 weight load and one uint4
// activation load (activation 16-byte aligned); a chunk cut by k reads
// scalars.
__device__ __forceinline__ float int8_block32_lane_partial(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const int column,
    const int k,
    const int k_blocks,
    const int block,
    const int quarter,
    const int zero_point)
{
    float block_partial = 0.0f;
    const int depth = block * 32 + quarter * 8;
    const long packed_start =
        ((long)column * k_blocks + block) * 32 + quarter * 8;
    if (depth + 8 <= k) {
        const uint2 packed_word =
            *reinterpret_cast<const uint2*>(packed + packed_start);
        const unsigned char* bytes =
            reinterpret_cast<const unsigned char*>(&packed_word);
        const uint4 act = *reinterpret_cast<const uint4*>(activation + depth);
        const __half* acth = reinterpret_cast<const __half*>(&act);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            block_partial += ((float)(int)bytes[i] - (float)zero_point)
                * __half2float(acth[i]);
        }
    } else if (depth < k) {
        const int valid = min(8, k - depth);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (i < valid) {
                const int quantized = (int)packed[packed_start + i];
                block_partial += ((float)quantized - (float)zero_point)
                    * __half2float(activation[depth + i]);
            }
        }
    }
    return block_partial;
}
