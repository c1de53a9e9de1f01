// Paired gate/up projection + SwiGLU for decode (M == 1): one warp computes
// column `column` of both the gate and the up projection (same activation,
// same block-32 int4 layout with fp16 scales as
// matmul_nbits_gemv_f16_scales_f16) and writes
//   fp16(silu(fp16(gate)) * fp16(up)),
// rounding each projection to fp16 first, exactly like the two standalone
// GEMVs followed by the pointwise silu_mul kernel. 256 threads per CTA
// (8 columns), grid ceil(n / 8).

#include "nbits/half.cuh"
#include "nbits/int4_f16.cuh"
#include "nbits/reduce.cuh"
#include "nbits/rmsnorm_f16.cuh"
#include "nbits/silu.cuh"
#include "nbits/zero_point.cuh"

// The paired dot over `activation` (global, or the staged RMS-normalized
// shared copy) and the SwiGLU epilogue. Lane l takes K chunks
// [256i + 8l, 256i + 8l + 8) as in gemv_scales_f16_column: the chunk's
// activations are permuted once and feed both half2 accumulator sets; a
// chunk cut by k accumulates both projections in fp32, gate then up per
// element. Each projection is then summed in half2x4_sum_f32 order after its
// tail and warp-reduced.
// `PrefetchWeights` loads the next chunk's two packed words one step ahead so
// their latency overlaps the current step; it changes the schedule only, not
// which values are accumulated or in which order.
template <bool HasZp, bool PrefetchWeights>
__device__ __forceinline__ void gate_up_swiglu_column(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed_gate,
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,
    const __half* __restrict__ scales_up,
    const unsigned char* __restrict__ zero_points_gate,
    const unsigned char* __restrict__ zero_points_up,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int column,
    const int lane)
{
    __half2 g0 = __float2half2_rn(0.0f);
    __half2 g1 = __float2half2_rn(0.0f);
    __half2 g2 = __float2half2_rn(0.0f);
    __half2 g3 = __float2half2_rn(0.0f);
    __half2 u0 = __float2half2_rn(0.0f);
    __half2 u1 = __float2half2_rn(0.0f);
    __half2 u2 = __float2half2_rn(0.0f);
    __half2 u3 = __float2half2_rn(0.0f);
    float gate_tail = 0.0f;
    float up_tail = 0.0f;
    if (column < n) {
        const int lane_depth = lane * 8;
        const __half* activation_ptr = activation + lane_depth;
        const unsigned char* packed_gate_ptr =
            packed_gate + (long)column * k_blocks * blob_size + lane * 4;
        const unsigned char* packed_up_ptr =
            packed_up + (long)column * k_blocks * blob_size + lane * 4;
        const __half* scale_gate_ptr =
            scales_gate + (long)column * k_blocks + (lane >> 2);
        const __half* scale_up_ptr =
            scales_up + (long)column * k_blocks + (lane >> 2);
        int depth_base = 0;
        if (PrefetchWeights) {
            unsigned int gate_word_next =
                *reinterpret_cast<const unsigned int*>(packed_gate_ptr);
            unsigned int up_word_next =
                *reinterpret_cast<const unsigned int*>(packed_up_ptr);
            for (; depth_base + lane_depth + 8 <= k; depth_base += 256) {
                const uint4 permuted = permute_activation_f16x8(activation_ptr);
                const int block = (depth_base >> 5) + (lane >> 2);
                const unsigned int gate_sub2 =
                    block_sub2<HasZp>(zero_points_gate, column, block, zp_row_bytes);
                const unsigned int up_sub2 =
                    block_sub2<HasZp>(zero_points_up, column, block, zp_row_bytes);
                const unsigned int gate_word = gate_word_next;
                const unsigned int up_word = up_word_next;
                if (depth_base + 256 + lane_depth + 8 <= k) {
                    gate_word_next = *reinterpret_cast<const unsigned int*>(
                        packed_gate_ptr + 128);
                    up_word_next = *reinterpret_cast<const unsigned int*>(
                        packed_up_ptr + 128);
                }
                accumulate_int4x8_f16_permuted_zp(
                    gate_word, permuted, *scale_gate_ptr, gate_sub2, g0, g1, g2, g3);
                accumulate_int4x8_f16_permuted_zp(
                    up_word, permuted, *scale_up_ptr, up_sub2, u0, u1, u2, u3);
                activation_ptr += 256;
                packed_gate_ptr += 128;
                packed_up_ptr += 128;
                scale_gate_ptr += 8;
                scale_up_ptr += 8;
            }
        } else {
            for (; depth_base + lane_depth + 8 <= k; depth_base += 256) {
                const uint4 permuted = permute_activation_f16x8(activation_ptr);
                const int block = (depth_base >> 5) + (lane >> 2);
                const unsigned int gate_sub2 =
                    block_sub2<HasZp>(zero_points_gate, column, block, zp_row_bytes);
                const unsigned int up_sub2 =
                    block_sub2<HasZp>(zero_points_up, column, block, zp_row_bytes);
                const unsigned int gate_word =
                    *reinterpret_cast<const unsigned int*>(packed_gate_ptr);
                accumulate_int4x8_f16_permuted_zp(
                    gate_word, permuted, *scale_gate_ptr, gate_sub2, g0, g1, g2, g3);
                const unsigned int up_word =
                    *reinterpret_cast<const unsigned int*>(packed_up_ptr);
                accumulate_int4x8_f16_permuted_zp(
                    up_word, permuted, *scale_up_ptr, up_sub2, u0, u1, u2, u3);
                activation_ptr += 256;
                packed_gate_ptr += 128;
                packed_up_ptr += 128;
                scale_gate_ptr += 8;
                scale_up_ptr += 8;
            }
        }
        const int tail_depth = depth_base + lane_depth;
        if (tail_depth < k) {
            const unsigned int gate_word =
                *reinterpret_cast<const unsigned int*>(packed_gate_ptr);
            const unsigned int up_word =
                *reinterpret_cast<const unsigned int*>(packed_up_ptr);
            const float gate_scale = __half2float(*scale_gate_ptr);
            const float up_scale = __half2float(*scale_up_ptr);
            const int tail_block = (depth_base >> 5) + (lane >> 2);
            const int gate_zp =
                block_zp<HasZp>(zero_points_gate, column, tail_block, zp_row_bytes);
            const int up_zp =
                block_zp<HasZp>(zero_points_up, column, tail_block, zp_row_bytes);
            const int valid = min(8, k - tail_depth);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (i < valid) {
                    const float a = __half2float(activation_ptr[i]);
                    const int qg = (int)((gate_word >> (i * 4)) & 15u) - gate_zp;
                    const int qu = (int)((up_word >> (i * 4)) & 15u) - up_zp;
                    gate_tail += (float)qg * a * gate_scale;
                    up_tail += (float)qu * a * up_scale;
                }
            }
        }
    }
    float gate_value = half2x4_sum_f32<true>(gate_tail, g0, g1, g2, g3);
    gate_value = warp_sum(gate_value);
    float up_value = half2x4_sum_f32<true>(up_tail, u0, u1, u2, u3);
    up_value = warp_sum(up_value);

    if (lane == 0 && column < n) {
        const float gate_h = __half2float(__float2half(gate_value));
        const float up_h = __half2float(__float2half(up_value));
        output[column] =
            __float2half_rn(__fmul_rn(gate_up_silu_f32(gate_h), up_h));
    }
}

// Symmetric weights. Needs 16-byte aligned activation and 4-byte aligned
// blobs.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_gate_up_swiglu
extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed_gate,  // align 4
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,  // align 4
    const __half* __restrict__ scales_up,
    const unsigned char* __restrict__ zero_points_gate,
    const unsigned char* __restrict__ zero_points_up,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes)
{
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gate_up_swiglu_column<false, false>(activation, packed_gate, scales_gate,
        packed_up, scales_up, zero_points_gate, zero_points_up, output, k, n,
        k_blocks, blob_size, zp_row_bytes, column, lane);
}
#endif

// Both projections carry zero points (same zp_row_bytes).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_gate_up_swiglu_zp
extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu_zp(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed_gate,  // align 4
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,  // align 4
    const __half* __restrict__ scales_up,
    const unsigned char* __restrict__ zero_points_gate,
    const unsigned char* __restrict__ zero_points_up,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes)
{
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gate_up_swiglu_column<true, false>(activation, packed_gate, scales_gate,
        packed_up, scales_up, zero_points_gate, zero_points_up, output, k, n,
        k_blocks, blob_size, zp_row_bytes, column, lane);
}
#endif

// RMS-norm prologue (rmsnorm_stage_activation_f16, once for both
// projections) then the paired dot over the staged activation. Needs
// k % 128 == 0 and k * sizeof(__half) bytes of dynamic shared memory.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm
extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm(
    const __half* __restrict__ activation,  // align 8
    const unsigned char* __restrict__ packed_gate,  // align 4
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,  // align 4
    const __half* __restrict__ scales_up,
    const unsigned char* __restrict__ zero_points_gate,
    const unsigned char* __restrict__ zero_points_up,
    const void* __restrict__ gamma,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int gamma_is_half,
    const float epsilon)
{
    const __half* staged = rmsnorm_stage_activation_f16(
        activation, gamma, gamma_is_half, k, epsilon);
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gate_up_swiglu_column<false, false>(staged, packed_gate, scales_gate,
        packed_up, scales_up, zero_points_gate, zero_points_up, output, k, n,
        k_blocks, blob_size, zp_row_bytes, column, lane);
}
#endif

// Zero-point weights with the RMS-norm prologue; this is the load-latency
// bound case, so the packed weights are prefetched one step ahead.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp
extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp(
    const __half* __restrict__ activation,  // align 8
    const unsigned char* __restrict__ packed_gate,  // align 4
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,  // align 4
    const __half* __restrict__ scales_up,
    const unsigned char* __restrict__ zero_points_gate,
    const unsigned char* __restrict__ zero_points_up,
    const void* __restrict__ gamma,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int gamma_is_half,
    const float epsilon)
{
    const __half* staged = rmsnorm_stage_activation_f16(
        activation, gamma, gamma_is_half, k, epsilon);
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gate_up_swiglu_column<true, true>(staged, packed_gate, scales_gate,
        packed_up, scales_up, zero_points_gate, zero_points_up, output, k, n,
        k_blocks, blob_size, zp_row_bytes, column, lane);
}
#endif
