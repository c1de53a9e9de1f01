// fp32 warp and block sum reductions shared by every GEMV family, and the
// thread block cluster primitives (compute_90+) of the split-K reductions.
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

// Thread block cluster barrier for every thread of every CTA of the cluster:
// shared-memory writes of any CTA before it (release) are visible to reads of
// any CTA after it (acquire).
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The 16 bytes at this CTA's shared address `address`, read from the same
// address of CTA `rank` of the cluster (distributed shared memory).
__device__ __forceinline__ float4 cluster_load_f4(const unsigned int address, const int rank)
{
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
    return v;
}

// The float at this CTA's shared address `address`, read from CTA `rank`.
__device__ __forceinline__ float cluster_load_f32(const unsigned int address, const int rank)
{
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// This CTA's rank in its cluster.
__device__ __forceinline__ int cluster_rank()
{
    unsigned int rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return (int)rank;
}
