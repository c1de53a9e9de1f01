// RMS normalization of an fp16 row with exactly the arithmetic of
// skip_rmsnorm_f16_warp_half4 (minus its residual add): the fused
// RMS-norm-prologue GEMVs and the standalone prefill norm share it, so every
// path produces the same normalized fp16 activation.
#pragma once

#include "nbits/half.cuh"
#include "nbits/scale_bias_f16.cuh"

// Four fp16 values read or written as one 8-byte word.
union Half4 {
    unsigned long long raw;
    __half2 pair[2];
};

// Sum of squares of `size` fp16 values (a multiple of 128, 8-byte aligned)
// by one warp: lane l reads 4-element chunks l, l + 32, ... and keeps one fp32
// partial per element position, combined as (ss0 + ss1) + (ss2 + ss3); a
// shuffle-down tree then sums the lanes. The full sum is valid in lane 0.
__device__ __forceinline__ float rms_sum_of_squares_f16(
    const __half* __restrict__ row,
    const int size,
    const int lane)
{
    const int chunks_per_lane = size / (32 * 4);
    const unsigned long long* row4 =
        reinterpret_cast<const unsigned long long*>(row);
    float ss0 = 0.0f;
    float ss1 = 0.0f;
    float ss2 = 0.0f;
    float ss3 = 0.0f;
    for (int item = 0; item < chunks_per_lane; ++item) {
        const int chunk = lane + item * 32;
        Half4 residual;
        residual.raw = row4[chunk];
        const float2 rounded0 = __half22float2(residual.pair[0]);
        const float2 rounded1 = __half22float2(residual.pair[1]);
        ss0 += rounded0.x * rounded0.x;
        ss1 += rounded0.y * rounded0.y;
        ss2 += rounded1.x * rounded1.x;
        ss3 += rounded1.y * rounded1.y;
    }
    float ss = (ss0 + ss1) + (ss2 + ss3);
    for (int off = 16; off > 0; off >>= 1) {
        ss += __shfl_down_sync(0xffffffffu, ss, off);
    }
    return ss;
}

__device__ __forceinline__ float rms_inv_std(
    const float sum_of_squares,
    const int size,
    const float epsilon)
{
    return 1.0f / sqrtf(sum_of_squares / (float)size + epsilon);
}

// Block prologue of the fused RMS-norm GEMVs: warp 0 reduces the row of `k`
// values, then all threads write fp16((x * inv_std) * gamma) into dynamic
// shared memory (k * sizeof(__half) bytes, 16-byte aligned so the GEMV can
// read it with uint4 loads). gamma is fp16 or fp32 (`gamma_is_half`); it is
// only ever the final multiplicand, so an fp32 gamma is used at full
// precision. Must be reached by every thread of the block (it synchronizes);
// returns the staged activation.
__device__ __forceinline__ const __half* rmsnorm_stage_activation_f16(
    const __half* __restrict__ activation,
    const void* __restrict__ gamma,
    const int gamma_is_half,
    const int k,
    const float epsilon)
{
    extern __shared__ __align__(16) __half staged_activation[];
    __shared__ float shared_inv_std;

    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    if (warp == 0) {
        const float ss = rms_sum_of_squares_f16(activation, k, lane);
        if (lane == 0) {
            shared_inv_std = rms_inv_std(ss, k, epsilon);
        }
    }
    __syncthreads();
    const float inv_std = shared_inv_std;

    for (int j = tid; j < k; j += (int)blockDim.x) {
        const float residual = __half2float(activation[j]);
        const float scale = load_f16_or_f32(gamma, gamma_is_half, j);
        staged_activation[j] = __float2half((residual * inv_std) * scale);
    }
    __syncthreads();
    return staged_activation;
}
