// Does compute-sanitizer's racecheck follow an mbarrier producer/consumer
// hand-over? The prefill GEMM's producer warps (kernels_cu/matmul_prefill.cu,
// produced_k_tiles) hand shared-memory stages over this way; this probe ran
// the patterns it chose between on the H200 (README, The wgmma GEMM's
// pipeline). One CTA: a producer warp fills a four-stage ring, two consumer
// warps read it; every variant checks its sum.
//   0: no mbarriers, every warp copies, __syncthreads around the reads
//   1: producer st.shared, arrive on `full`; consumers wait (parity), read,
//      __syncwarp, lane 0 arrives on `empty`
//   2: as 1, the producer copying with cp.async + cp.async.wait_group
//   3: as 1, every consumer thread arriving on `empty`
//   4: as 2, every consumer thread arriving on `empty`
// On a GPU machine:
//   nvcc -arch=sm_90 -lineinfo -o /tmp/probe scripts/racecheck-probe.cu
//   for v in 0 1 2 3 4; do compute-sanitizer --tool racecheck /tmp/probe $v; done
// Compute Sanitizer 2025.3.1: 5 hazards on 1 and 2, none on 0, 3 and 4.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
typedef unsigned int u32;
constexpr int kStages = 4, kWords = 256, kIters = 64, kConsumers = 2;

__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(u32 b, u32 n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(u32 b) { asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.shared::cta.b64 s, [%0];\n}" :: "r"(b) : "memory"); }
__device__ __forceinline__ void bar_wait(u32 b, u32 parity) {
  u32 done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(b), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void cp16(u32 dst, const void* src) { asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory"); }

__global__ void ring(const u32* __restrict__ in, unsigned long long* out, int variant)
{
  __shared__ __align__(16) u32 stage[kStages][kWords];
  __shared__ __align__(8) unsigned long long full[kStages], empty[kStages];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned long long sum = 0;
  if (variant == 0) {
    for (int i = 0; i < kIters; ++i) {
      const int s = i % kStages;
      for (int w = tid; w < kWords; w += blockDim.x) stage[s][w] = in[i * kWords + w];
      __syncthreads();
      for (int w = tid; w < kWords; w += blockDim.x) sum += stage[s][(w * 7) % kWords];
      __syncthreads();
    }
    atomicAdd(out, sum);
    return;
  }
  const bool all_arrive = variant >= 3;
  const bool async_copy = variant == 2 || variant == 4;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) { bar_init(sa(&full[s]), 32); bar_init(sa(&empty[s]), all_arrive ? 32 * kConsumers : kConsumers); }
  }
  __syncthreads();
  if (warp == kConsumers) {  // producer
    for (int i = 0; i < kIters; ++i) {
      const int s = i % kStages;
      if (i >= kStages) bar_wait(sa(&empty[s]), (u32)((i / kStages - 1) & 1));
      if (async_copy) {
        for (int w = 4 * lane; w < kWords; w += 128) cp16(sa(&stage[s][w]), in + i * kWords + w);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
      } else {
        for (int w = lane; w < kWords; w += 32) stage[s][w] = in[i * kWords + w];
      }
      bar_arrive(sa(&full[s]));
    }
  } else {
    const int c = tid;  // 0 .. 32 * kConsumers - 1
    for (int i = 0; i < kIters; ++i) {
      const int s = i % kStages;
      bar_wait(sa(&full[s]), (u32)((i / kStages) & 1));
      for (int w = c; w < kWords; w += 32 * kConsumers) sum += stage[s][(w * 7) % kWords];
      if (all_arrive) {
        bar_arrive(sa(&empty[s]));
      } else {
        __syncwarp();
        if (lane == 0) bar_arrive(sa(&empty[s]));
      }
    }
    atomicAdd(out, sum);
  }
}

int main(int argc, char** argv)
{
  const int variant = argc > 1 ? atoi(argv[1]) : 1;
  u32* in; unsigned long long* out;
  cudaMalloc(&in, kIters * kWords * 4); cudaMalloc(&out, 8);
  u32* h = (u32*)malloc(kIters * kWords * 4);
  unsigned long long expect = 0;
  for (int i = 0; i < kIters * kWords; ++i) { h[i] = (i * 2654435761u) >> 12; expect += h[i]; }
  cudaMemcpy(in, h, kIters * kWords * 4, cudaMemcpyHostToDevice);
  cudaMemset(out, 0, 8);
  ring<<<1, variant == 0 ? 96 : 32 * (kConsumers + 1)>>>(in, out, variant);
  unsigned long long got = 0;
  cudaError_t e = cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost);
  printf("variant %d: %s, sum %s\n", variant, cudaGetErrorString(e), got == expect ? "correct" : "WRONG");
  return got == expect ? 0 : 1;
}
