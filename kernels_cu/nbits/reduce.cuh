// fp32 warp and block sum reductions shared by every GEMV family.
#pragma once

// Tree sum down to lane 0 (offsets 16, 8, 4, 2, 1). Only lane 0 holds the
// full sum; every kernel that reduces a dot product relies on this order.
__device__ __forceinline__ float warp_sum(float value)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    return value;
}

// Block-wide sum: each warp reduces with warp_sum, warp 0 then reduces the
// per-warp sums. The result is valid in thread 0 only (other warps return 0).
__device__ __forceinline__ float block_sum(float value)
{
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    value = warp_sum(value);
    if (lane == 0) {
        warp_sums[warp] = value;
    }
    __syncthreads();
    value = threadIdx.x < ((blockDim.x + 31) >> 5) ? warp_sums[lane] : 0.0f;
    return warp == 0 ? warp_sum(value) : 0.0f;
}
