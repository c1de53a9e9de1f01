// fp16-activation decode GEMVs (M == 1) over block-quantized int4/int8
// weights: fp32 or fp16 block scales, fp16 output through fold_bias_f16.
// Unless stated otherwise an entry runs one warp per output column,
// blockDim.x / 32 columns per CTA, and needs no dynamic shared memory.

#include "nbits/four_lane_dot_f16.cuh"
#include "nbits/gemv_scales_f16.cuh"
#include "nbits/half.cuh"
#include "nbits/int4_f16.cuh"
#include "nbits/reduce.cuh"
#include "nbits/scale_bias_f16.cuh"
#include "nbits/zero_point.cuh"

// Warps per output column of the split-K entries. The host sizes the grid
// as ceil(n / (blockDim.x / 32 / k_split)).
constexpr int k_split = 2;

// Split-K epilogue: warp `ks` of a column's KSplit warps reduces its partial,
// the partials meet in shared memory (at most 8 columns per CTA) and lane 0
// of warp 0 of the column adds them in split order in fp32 and stores. Every
// thread of the CTA must reach it (it synchronizes).
template <int KSplit>
__device__ __forceinline__ void store_split_k_column_f16(
    float value,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int column,
    const int n,
    const int col_local,
    const int ks,
    const int lane,
    const int bias_post_round)
{
    __shared__ float partials[8][KSplit];
    value = warp_sum(value);
    if (lane == 0) {
        partials[col_local][ks] = (column < n) ? value : 0.0f;
    }
    __syncthreads();
    if (ks == 0 && lane == 0 && column < n) {
        float acc = 0.0f;
#pragma unroll
        for (int s = 0; s < KSplit; ++s) {
            acc += partials[col_local][s];
        }
        output[column] = fold_bias_f16(acc, bias, column, bias_post_round);
    }
}

// Block-32 int8 GEMV: four lanes per block, eight blocks per warp step
// (four_lane_column_dot). Zero points: one byte per block when present, else
// 128. Scales fp16 or fp32 (`scales_fp16`). Needs 16-byte aligned activation
// and 8-byte aligned packed rows.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f16
extern "C" __global__ void matmul_nbits_gemv_int8_f16(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 8
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int scales_fp16,
    const int bias_post_round)
{
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;

    float value = 0.0f;
    if (column < n) {
        value = four_lane_column_dot(k_blocks, lane, 0, 8,
            [&](const int block, const int quarter) {
                const int zero_point =
                    zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
                return int8_block32_lane_partial(activation, packed, column, k,
                    k_blocks, block, quarter, zero_point);
            },
            [&](const int block) {
                return load_f16_or_f32(scales, scales_fp16,
                    (long)column * k_blocks + block);
            });
    }
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}
#endif

// Split-K matmul_nbits_gemv_int8_f16: k_split adjacent warps share a
// column, warp ks taking the 8-block steps ks, ks + k_split, ... The
// partials are added in fp32 in a different association than the single-warp
// entry, so results agree to rounding, not to the bit. Requires
// k % 256 == 0 and blockDim.x / 32 a multiple of k_split with at most
// 8 columns per CTA (blockDim.x <= 512).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f16_splitk
extern "C" __global__ void matmul_nbits_gemv_int8_f16_splitk(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 8
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int scales_fp16,
    const int bias_post_round)
{
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps_per_block = (int)blockDim.x >> 5;
    const int cols_per_block = warps_per_block / k_split;
    const int col_local = warp / k_split;
    const int ks = warp % k_split;
    const int column = (int)blockIdx.x * cols_per_block + col_local;

    float value = 0.0f;
    if (column < n) {
        value = four_lane_column_dot(k_blocks, lane, ks * 8, k_split * 8,
            [&](const int block, const int quarter) {
                const int zero_point =
                    zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
                return int8_block32_lane_partial(activation, packed, column, k,
                    k_blocks, block, quarter, zero_point);
            },
            [&](const int block) {
                return load_f16_or_f32(scales, scales_fp16,
                    (long)column * k_blocks + block);
            });
    }
    store_split_k_column_f16<k_split>(value, bias, output, column, n,
        col_local, ks, lane, bias_post_round);
}
#endif

// Int4 GEMV with fp32 or fp16 scales. The warp layout (four lanes x 8
// elements per block) assumes block_size == 32; block_size and blob_size
// still address the activation and the packed blobs. Each lane takes one
// aligned packed word (8 codes) and 8 activations. Symmetric whole chunks use the register nibble conversion
// (dot_int4x8_f16); zero-point weights and chunks cut by k use scalar fp32
// products. Needs 16-byte aligned activation and 4-byte aligned blobs.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16
extern "C" __global__ void matmul_nbits_gemv_f16(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;

    float value = 0.0f;
    if (column < n) {
        value = four_lane_column_dot(k_blocks, lane, 0, 8,
            [&](const int block, const int quarter) {
                float block_partial = 0.0f;
                const int depth = block * block_size + quarter * 8;
                const long packed_start =
                    ((long)column * k_blocks + block) * blob_size + quarter * 4;
                const unsigned int packed_word =
                    *reinterpret_cast<const unsigned int*>(packed + packed_start);
                int zero_point = 8;
                if (zero_points) {
                    zero_point = int4_zero_point_nibble(
                        zero_points[(long)column * zp_row_bytes + block / 2], block);
                }
                if (depth + 8 <= k) {
                    if (zero_points) {
                        block_partial = int4x8_partial_f32(
                            packed_word, activation + depth, zero_point, 8);
                    } else {
                        block_partial = dot_int4x8_f16(packed_word, activation + depth);
                    }
                } else if (depth < k) {
                    block_partial = int4x8_partial_f32(
                        packed_word, activation + depth, zero_point, min(8, k - depth));
                }
                return block_partial;
            },
            [&](const int block) {
                return load_f16_or_f32(scales, scales_fp16,
                    (long)column * k_blocks + block);
            });
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}
#endif

// Int4 or int8 (`bits`) GEMV for any power-of-two block_size >= 16 with fp32
// or fp16 scales. Lane l takes K chunks [8l + 256i, 8l + 256i + 8); a chunk
// lies inside one block because block_size is a multiple of 8, so
// block = depth / block_size gives its scale and zero point. Per chunk the
// fp32 partial (code - zp) * a is formed in K order and then scaled.
// int4: two codes per byte (4-byte aligned word per chunk), zero points two
// blocks per byte, default 8. int8: one byte per code, one zero-point byte per
// block, default 128.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_general_bs
extern "C" __global__ void matmul_nbits_gemv_f16_general_bs(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,  // align 4 when int4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round,
    const int bits)
{
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;

    float value = 0.0f;
    if (column < n) {
        for (int depth = lane * 8; depth < k; depth += 256) {
            const int block = depth / block_size;
            const int within = depth - block * block_size;
            const long blob_base = ((long)column * k_blocks + block) * blob_size;
            const float scale =
                load_f16_or_f32(scales, scales_fp16, (long)column * k_blocks + block);
            const int valid = min(8, k - depth);
            float partial = 0.0f;
            if (bits == 8) {
                const int zero_point =
                    zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
                const unsigned char* block_bytes = packed + blob_base + within;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if (i < valid) {
                        const int q = (int)block_bytes[i] - zero_point;
                        partial += (float)q * __half2float(activation[depth + i]);
                    }
                }
            } else {
                int zero_point = 8;
                if (zero_points) {
                    zero_point = int4_zero_point_nibble(
                        zero_points[(long)column * zp_row_bytes + (block >> 1)], block);
                }
                const unsigned int packed_word =
                    *reinterpret_cast<const unsigned int*>(packed + blob_base + (within >> 1));
                partial = int4x8_partial_f32(
                    packed_word, activation + depth, zero_point, valid);
            }
            value += partial * scale;
        }
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}
#endif

// Block-32 int4 GEMV with fp16 scales (`scales_fp16` and `block_size` are
// ignored), symmetric: see gemv_scales_f16_column.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    (void)block_size;
    (void)scales_fp16;
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gemv_scales_f16_column<false>(activation, packed,
        reinterpret_cast<const __half*>(scales), zero_points, bias, output,
        k, n, k_blocks, blob_size, zp_row_bytes, bias_post_round, column, lane);
}
#endif

// matmul_nbits_gemv_f16_scales_f16 for weights with zero points.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_zp
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_zp(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    (void)block_size;
    (void)scales_fp16;
    const int lane = (int)threadIdx.x & 31;
    const int column = (int)blockIdx.x * ((int)blockDim.x >> 5) + ((int)threadIdx.x >> 5);
    gemv_scales_f16_column<true>(activation, packed,
        reinterpret_cast<const __half*>(scales), zero_points, bias, output,
        k, n, k_blocks, blob_size, zp_row_bytes, bias_post_round, column, lane);
}
#endif

// Split-K matmul_nbits_gemv_f16_scales_f16_zp: k_split adjacent warps
// share a column, warp ks taking the 256-wide K steps ks, ks + k_split,
// ... with the same per-step half2 accumulation. The partials are added in
// fp32 in a different association than the single-warp entry, so results
// agree to rounding, not to the bit. Requires k % 256 == 0 (no tail) and
// blockDim.x / 32 a multiple of k_split with at most 8 columns per CTA.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_zp_splitk
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_zp_splitk(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 4
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    (void)block_size;
    (void)scales_fp16;
    const __half* __restrict__ half_scales =
        reinterpret_cast<const __half*>(scales);
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int warps_per_block = (int)blockDim.x >> 5;
    const int cols_per_block = warps_per_block / k_split;
    const int col_local = warp / k_split;
    const int ks = warp % k_split;
    const int column = (int)blockIdx.x * cols_per_block + col_local;

    __half2 sum0 = __float2half2_rn(0.0f);
    __half2 sum1 = __float2half2_rn(0.0f);
    __half2 sum2 = __float2half2_rn(0.0f);
    __half2 sum3 = __float2half2_rn(0.0f);
    if (column < n) {
        const int lane_depth = lane * 8;
        int depth_base = ks * 256;
        const __half* activation_ptr = activation + depth_base + lane_depth;
        const unsigned char* packed_ptr =
            packed + (long)column * k_blocks * blob_size +
            (long)(depth_base >> 5) * blob_size + lane * 4;
        const __half* scale_ptr =
            half_scales + (long)column * k_blocks + (depth_base >> 5) + (lane >> 2);
        for (; depth_base + 256 <= k; depth_base += k_split * 256) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const int block = (depth_base >> 5) + (lane >> 2);
            const unsigned int sub2 =
                block_sub2<true>(zero_points, column, block, zp_row_bytes);
            accumulate_int4x8_f16_zp(
                packed_word, activation_ptr, *scale_ptr, sub2, sum0, sum1, sum2, sum3);
            activation_ptr += k_split * 256;
            packed_ptr += k_split * 128;
            scale_ptr += k_split * 8;
        }
    }
    const float value = half2x4_sum_f32<false>(0.0f, sum0, sum1, sum2, sum3);
    store_split_k_column_f16<k_split>(value, bias, output, column, n,
        col_local, ks, lane, bias_post_round);
}
#endif

// Down-projection GEMV, block_size 32 symmetric int4 with fp16 scales and no
// K tail (k % 32 == 0): a 256-thread CTA (8 warps) computes Cols adjacent
// columns. Thread t takes blocks t, t + 256, ...; it loads and permutes the
// block's 32 activations once and reuses them for all Cols columns, each block
// dot accumulating in half2 (dot_int4x32_f16_permuted_scaled) and then in
// fp32 per column. Each column is then reduced by warp_sum per warp and the 8
// warp sums are added in warp order. Every column is reduced by the same
// threads in the same order whatever Cols is, so the 8-, 4- and 2-column
// entries agree to the bit; Cols only sets the grid (ceil(n / Cols) CTAs).
template <int Cols>
__device__ __forceinline__ void gemv_scales_f16_down(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int bias_post_round)
{
    __shared__ float warp_sums[8][Cols];
    const __half* __restrict__ half_scales =
        reinterpret_cast<const __half*>(scales);
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int column_base = (int)blockIdx.x * Cols;

    float values[Cols];
#pragma unroll
    for (int i = 0; i < Cols; ++i) {
        values[i] = 0.0f;
    }
    for (int block = tid; block < k_blocks; block += (int)blockDim.x) {
        const __half* activation_block = activation + block * 32;
        const uint4 activation0 = permute_activation_f16x8(activation_block);
        const uint4 activation1 = permute_activation_f16x8(activation_block + 8);
        const uint4 activation2 = permute_activation_f16x8(activation_block + 16);
        const uint4 activation3 = permute_activation_f16x8(activation_block + 24);
#pragma unroll
        for (int tile_column = 0; tile_column < Cols; ++tile_column) {
            const int column = column_base + tile_column;
            if (column < n) {
                const long packed_start =
                    ((long)column * k_blocks + block) * blob_size;
                const uint4 packed_weights =
                    *reinterpret_cast<const uint4*>(packed + packed_start);
                const __half scale = half_scales[(long)column * k_blocks + block];
                values[tile_column] += dot_int4x32_f16_permuted_scaled(
                    packed_weights,
                    activation0,
                    activation1,
                    activation2,
                    activation3,
                    scale);
            }
        }
    }

#pragma unroll
    for (int tile_column = 0; tile_column < Cols; ++tile_column) {
        const float value = warp_sum(values[tile_column]);
        if (lane == 0) {
            warp_sums[warp][tile_column] = value;
        }
    }
    __syncthreads();

    if (warp == 0 && lane < Cols) {
        const int column = column_base + lane;
        float value = warp_sums[0][lane];
        value += warp_sums[1][lane];
        value += warp_sums[2][lane];
        value += warp_sums[3][lane];
        value += warp_sums[4][lane];
        value += warp_sums[5][lane];
        value += warp_sums[6][lane];
        value += warp_sums[7][lane];
        if (column < n) {
            output[column] = fold_bias_f16(value, bias, column, bias_post_round);
        }
    }
}

// 8 columns per CTA (grid ceil(n / 8)).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_down
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_down(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 16
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    (void)k;
    (void)block_size;
    (void)zero_points;
    (void)zp_row_bytes;
    (void)scales_fp16;
    gemv_scales_f16_down<8>(activation, packed, scales, bias, output, n,
        k_blocks, blob_size, bias_post_round);
}
#endif

// 4 columns per CTA (grid ceil(n / 4)), for grid-starved small-n shapes.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_down_c4
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_down_c4(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 16
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    (void)k;
    (void)block_size;
    (void)zero_points;
    (void)zp_row_bytes;
    (void)scales_fp16;
    gemv_scales_f16_down<4>(activation, packed, scales, bias, output, n,
        k_blocks, blob_size, bias_post_round);
}
#endif

// 2 columns per CTA (grid ceil(n / 2)), for grid-starved small-n shapes.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f16_scales_f16_down_c2
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_down_c2(
    const __half* __restrict__ activation,  // align 16
    const unsigned char* __restrict__ packed,  // align 16
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int scales_fp16,
    const int bias_post_round)
{
    (void)k;
    (void)block_size;
    (void)zero_points;
    (void)zp_row_bytes;
    (void)scales_fp16;
    gemv_scales_f16_down<2>(activation, packed, scales, bias, output, n,
        k_blocks, blob_size, bias_post_round);
}
#endif
