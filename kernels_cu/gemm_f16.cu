// Portable fp16-activation prefill GEMM (M > 1) over block-quantized int4/int8
// weights: 16 x 16 output tile per 16 x 16 CTA, K walked in 32-wide tiles
// through static shared memory, fp32 dequantization and accumulation, fp16
// output through fold_bias_f16. No tensor cores, async copies or
// architecture-specific PTX.

#include "nbits/half.cuh"
#include "nbits/scale_bias_f16.cuh"
#include "nbits/zero_point.cuh"

// Stages the 16 x 32 activation tile of K tile `tile` (rows blockIdx.y * 16
// + r, depths 32 * tile + w, zero outside m x k) as fp32.
__device__ __forceinline__ void load_activation_tile_f16(
    float (&activation_tile)[16][32],
    const __half* __restrict__ activation,
    const int m,
    const int k,
    const int tile,
    const int tid)
{
#pragma unroll
    for (int load = tid; load < 16 * 32; load += 16 * 16) {
        const int tile_row = load >> 5;
        const int within = load & 31;
        const int depth = tile * 32 + within;
        const int global_row = (int)blockIdx.y * 16 + tile_row;
        activation_tile[tile_row][within] =
            global_row < m && depth < k
                ? __half2float(activation[(long)global_row * k + depth])
                : 0.0f;
    }
}

// Dequantized weight (code - zp) * scale of column `global_column` at
// position `within_block` of block `block`, in fp32. int8: one byte per code
// in blobs of `int8_blob` bytes, one zero-point byte per block (default 128).
// int4: two codes per byte in blobs of `int4_blob` bytes, zero points two
// blocks per byte in rows of ceil(k_blocks / 2) bytes (default 8).
__device__ __forceinline__ float dequantize_weight_f16_gemm(
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const int global_column,
    const int k_blocks,
    const int block,
    const int within_block,
    const int bits,
    const int scales_fp16,
    const long int8_blob,
    const long int4_blob)
{
    const long scale_index = (long)global_column * k_blocks + block;
    const float scale = load_f16_or_f32(scales, scales_fp16, scale_index);
    int quantized;
    int zero_point;
    if (bits == 8) {
        quantized = (int)packed[scale_index * int8_blob + within_block];
        zero_point = zero_points ? (int)zero_points[scale_index] : 128;
    } else {
        const unsigned char byte =
            packed[scale_index * int4_blob + (within_block >> 1)];
        quantized = (within_block & 1) ? (byte >> 4) : (byte & 15);
        zero_point = 8;
        if (zero_points) {
            const int zp_row_bytes = (k_blocks + 1) >> 1;
            zero_point = int4_zero_point_nibble(
                zero_points[(long)global_column * zp_row_bytes + (block >> 1)], block);
        }
    }
    return ((float)quantized - (float)zero_point) * scale;
}

// Output element (row, column) accumulates activation_tile[r][w] *
// weight_tile[w][c] for w = 0..31 per K tile, in K order.
__device__ __forceinline__ void accumulate_tile_product(
    float& value,
    const float (&activation_tile)[16][32],
    const float (&weight_tile)[32][16])
{
#pragma unroll
    for (int within = 0; within < 32; ++within) {
        value += activation_tile[threadIdx.y][within]
            * weight_tile[within][threadIdx.x];
    }
}

// Bias row: a residual folded into the bias slot has one row per token
// (bias_row_stride == n); a broadcast bias has stride 0.
__device__ __forceinline__ void store_gemm_output_f16(
    const float value,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int row,
    const int column,
    const int n,
    const int bias_post_round,
    const int bias_row_stride)
{
    const __half* row_bias = bias ? bias + (long)row * bias_row_stride : bias;
    output[(long)row * n + column] =
        fold_bias_f16(value, row_bias, column, bias_post_round);
}

// block_size 32: one K tile per block.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemm_f16
extern "C" __global__ void matmul_nbits_gemm_f16(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int m,
    const int k,
    const int n,
    const int k_blocks,
    const int bits,
    const int scales_fp16,
    const int bias_post_round,
    const int bias_row_stride)
{
    __shared__ float activation_tile[16][32];
    __shared__ float weight_tile[32][16];
    const int tid = (int)threadIdx.y * 16 + (int)threadIdx.x;
    const int row = (int)blockIdx.y * 16 + (int)threadIdx.y;
    const int column = (int)blockIdx.x * 16 + (int)threadIdx.x;
    float value = 0.0f;

    for (int block = 0; block < k_blocks; ++block) {
        load_activation_tile_f16(activation_tile, activation, m, k, block, tid);
#pragma unroll
        for (int load = tid; load < 32 * 16; load += 16 * 16) {
            const int tile_column = load >> 5;
            const int within = load & 31;
            const int global_column = (int)blockIdx.x * 16 + tile_column;
            const int depth = block * 32 + within;
            float weight = 0.0f;
            if (global_column < n && depth < k) {
                weight = dequantize_weight_f16_gemm(packed, scales,
                    zero_points, global_column, k_blocks, block, within, bits,
                    scales_fp16, 32, 16);
            }
            weight_tile[within][tile_column] = weight;
        }
        __syncthreads();

        if (row < m && column < n) {
            accumulate_tile_product(value, activation_tile, weight_tile);
        }
        __syncthreads();
    }

    if (row < m && column < n) {
        store_gemm_output_f16(value, bias, output, row, column, n,
            bias_post_round, bias_row_stride);
    }
}
#endif

// Any power-of-two block_size: K is still walked in 32-wide tiles and each
// depth finds its block as depth / block_size, so the tile width does not
// depend on the block width. For block_size == 32 this computes exactly what
// matmul_nbits_gemm_f16 computes.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemm_f16_general_bs
extern "C" __global__ void matmul_nbits_gemm_f16_general_bs(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int m,
    const int k,
    const int n,
    const int k_blocks,
    const int bits,
    const int scales_fp16,
    const int bias_post_round,
    const int bias_row_stride,
    const int block_size,
    const int blob_size)
{
    __shared__ float activation_tile[16][32];
    __shared__ float weight_tile[32][16];
    const int tid = (int)threadIdx.y * 16 + (int)threadIdx.x;
    const int row = (int)blockIdx.y * 16 + (int)threadIdx.y;
    const int column = (int)blockIdx.x * 16 + (int)threadIdx.x;
    float value = 0.0f;

    const int k_tiles = (k + 31) / 32;
    for (int tile = 0; tile < k_tiles; ++tile) {
        load_activation_tile_f16(activation_tile, activation, m, k, tile, tid);
#pragma unroll
        for (int load = tid; load < 32 * 16; load += 16 * 16) {
            const int tile_column = load >> 5;
            const int within = load & 31;
            const int depth = tile * 32 + within;
            const int global_column = (int)blockIdx.x * 16 + tile_column;
            float weight = 0.0f;
            if (global_column < n && depth < k) {
                const int block = depth / block_size;
                const int within_block = depth - block * block_size;
                weight = dequantize_weight_f16_gemm(packed, scales,
                    zero_points, global_column, k_blocks, block, within_block,
                    bits, scales_fp16, blob_size, blob_size);
            }
            weight_tile[within][tile_column] = weight;
        }
        __syncthreads();

        if (row < m && column < n) {
            accumulate_tile_product(value, activation_tile, weight_tile);
        }
        __syncthreads();
    }

    if (row < m && column < n) {
        store_gemm_output_f16(value, bias, output, row, column, n,
            bias_post_round, bias_row_stride);
    }
}
#endif
