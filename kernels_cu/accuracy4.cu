// accuracy_level == 4 (int8 activation x int4 weight) paths for fp32
// activations. Activations are quantized per K block (the weight's block
// granularity) to symmetric int8 with scale max|a| / 127, each block's integer
// dot is exact, and blocks are accumulated in ascending order as
// value + dot * (activation_scale * weight_scale) with separately rounded fp32
// operations. The tiled kernel and the quantize + GEMV pairs therefore agree
// to the bit for the same block size.

#include "nbits/accuracy4.cuh"
#include "nbits/reduce.cuh"
#include "nbits/zero_point.cuh"

// Per-block quantization, block_size == 32: one 32-thread CTA per K block,
// lane l owns depth 32 * block + l. Writes padded_k = 32 * gridDim.x int8
// codes (depths >= k are 0) and one scale per block (0 for an all-zero block).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_quantize_accuracy4_block32
extern "C" __global__ void matmul_nbits_quantize_accuracy4_block32(
    const float* activation,
    signed char* quantized_activation,
    float* activation_scale_out,
    const int k,
    const int padded_k)
{
    (void)padded_k;
    const int block = (int)blockIdx.x;
    const int lane = (int)threadIdx.x;
    const int depth = block * 32 + lane;
    const float value = (depth < k) ? activation[depth] : 0.0f;

    const float max_abs = warp_max_broadcast(fabsf(value));
    const float activation_scale = accuracy4_activation_scale(max_abs);
    const float inverse_scale = accuracy4_inverse_scale(activation_scale);
    if (lane == 0) {
        activation_scale_out[block] = activation_scale;
    }
    int quantized = 0;
    if (depth < k && activation_scale != 0.0f) {
        quantized = quantize_int8(value, inverse_scale);
    }
    quantized_activation[depth] = (signed char)quantized;
}
#endif

// Block-32 GEMV over the quantized activation for symmetric int4 weights (16
// bytes per block). 256 threads = 8 warps = 8 output columns per CTA. The CTA
// stages TileBlocks blocks of int8 activations (dynamic shared memory,
// TileBlocks * 32 bytes) at a time; lane l of a warp takes the tile's blocks
// l, l + 32, ..., which over the whole K is blocks l, l + 32, l + 64, ... for
// either tile width, so the per-lane accumulation order and the warp_sum
// reduction do not depend on TileBlocks.
template <int TileBlocks>
__device__ __forceinline__ void gemv_accuracy4_block32_staged(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,
    const float* scales,
    const float* bias,
    float* output,
    const int n,
    const int k_blocks)
{
    extern __shared__ signed char activation_tile[];
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int column = (int)blockIdx.x * 8 + warp;

    float value = 0.0f;
    for (int tile_block = 0; tile_block < k_blocks; tile_block += TileBlocks) {
        const int tile_blocks = min(TileBlocks, k_blocks - tile_block);
        const int tile_depths = tile_blocks * 32;
        for (int depth = tid; depth < tile_depths; depth += (int)blockDim.x) {
            activation_tile[depth] =
                quantized_activation[tile_block * 32 + depth];
        }
        __syncthreads();

        for (int tile_offset = lane; tile_offset < tile_blocks; tile_offset += 32) {
            const int block = tile_block + tile_offset;
            if (column >= n) {
                continue;
            }
            const long packed_start = ((long)column * k_blocks + block) * 16;
            const uint4 packed_weights =
                *reinterpret_cast<const uint4*>(packed + packed_start);
            const int dot = dot_int4x32_int8(
                packed_weights, activation_tile + tile_offset * 32);
            value = accumulate_block_dot(value, dot,
                activation_scale_ptr[block], scales[(long)column * k_blocks + block]);
        }
        __syncthreads();
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = bias ? __fadd_rn(value, bias[column]) : value;
    }
}

// Stages 32 blocks (1024 bytes of dynamic shared memory).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_accuracy4_block32
extern "C" __global__ void matmul_nbits_gemv_accuracy4_block32(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,  // align 16
    const float* scales,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    (void)k;
    gemv_accuracy4_block32_staged<32>(quantized_activation, activation_scale_ptr,
        packed, scales, bias, output, n, k_blocks);
}
#endif

// Stages 64 blocks (2048 bytes of dynamic shared memory): half the barriers
// of the 32-block tile, same result.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_accuracy4_block32_stage64
extern "C" __global__ void matmul_nbits_gemv_accuracy4_block32_stage64(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,  // align 16
    const float* scales,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    (void)k;
    gemv_accuracy4_block32_staged<64>(quantized_activation, activation_scale_ptr,
        packed, scales, bias, output, n, k_blocks);
}
#endif

// Per-block quantization for any power-of-two block_size: one 32-thread CTA
// per K block, lanes stride the block by 32. Same scale and rounding as the
// block-32 entry and as the tiled kernel; depths >= k in a partial last block
// quantize to 0. Writes k_blocks * block_size codes.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_quantize_accuracy4_blockwise
extern "C" __global__ void matmul_nbits_quantize_accuracy4_blockwise(
    const float* activation,
    signed char* quantized_activation,
    float* activation_scale_out,
    const int k,
    const int block_size,
    const int padded_k)
{
    (void)padded_k;
    const int block = (int)blockIdx.x;
    const int lane = (int)threadIdx.x;
    const int begin = block * block_size;

    float max_abs = 0.0f;
    for (int within = lane; within < block_size; within += 32) {
        const int depth = begin + within;
        const float value = (depth < k) ? activation[depth] : 0.0f;
        max_abs = fmaxf(max_abs, fabsf(value));
    }
    max_abs = warp_max_broadcast(max_abs);

    const float activation_scale = accuracy4_activation_scale(max_abs);
    const float inverse_scale = accuracy4_inverse_scale(activation_scale);
    if (lane == 0) {
        activation_scale_out[block] = activation_scale;
    }
    for (int within = lane; within < block_size; within += 32) {
        const int depth = begin + within;
        int quantized = 0;
        if (depth < k && activation_scale != 0.0f) {
            quantized = quantize_int8(activation[depth], inverse_scale);
        }
        quantized_activation[depth] = (signed char)quantized;
    }
}
#endif

// GEMV over the blockwise-quantized activation for any power-of-two
// block_size, symmetric or asymmetric int4. One warp per output column
// (blockDim.x / 32 columns per CTA). Per block, the lanes compute
// sum(qa * qw) and sum(qa) (block_size == 128 on sm_61+: one 4-byte dp4a
// pair per lane; otherwise lanes stride the block), reduce both with a
// shuffle tree, and lane 0 forms dot = sum(qa * qw) - zp * sum(qa), which
// equals the tiled kernel's sum(qa * (qw - zp)) exactly. Padded activation
// codes are 0, so tail lanes contribute nothing. The quantized activation
// must be 4-byte aligned and the packed buffer 2-byte aligned for the
// block-128 path.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_accuracy4_blockwise
extern "C" __global__ void matmul_nbits_gemv_accuracy4_blockwise(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,  // align 2 when block_size=128
    const float* scales,
    const unsigned char* zero_points,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks,
    const int block_size,
    const int blob_size,
    const int zp_row_bytes)
{
    (void)k;
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int column = (int)blockIdx.x * (int)(blockDim.x >> 5) + warp;
    if (column >= n) {
        return;
    }

    float value = 0.0f;
    for (int block = 0; block < k_blocks; ++block) {
        const int begin = block * block_size;
        const long blob_base = ((long)column * k_blocks + block) * blob_size;
        int weighted = 0;
        int activation_sum = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
        if (block_size == 128) {
            const int within = lane * 4;
            const int activation_pack = *reinterpret_cast<const int*>(
                quantized_activation + begin + within);
            const unsigned int packed_weights =
                (unsigned int)*reinterpret_cast<const unsigned short*>(
                    packed + blob_base + (within >> 1));
            const unsigned int even_weights = packed_weights & 0x0f0fu;
            const unsigned int odd_weights = (packed_weights >> 4) & 0x0f0fu;
            const unsigned int weight_pack =
                __byte_perm(even_weights, odd_weights, 0x5140);
            weighted = dot_int8x4(
                activation_pack, (int)weight_pack, weighted);
            activation_sum = dot_int8x4(
                activation_pack, 0x01010101, activation_sum);
        } else
#endif
        {
            for (int within = lane; within < block_size; within += 32) {
                const int quantized_activation_value =
                    (int)quantized_activation[begin + within];
                const unsigned char byte = packed[blob_base + (within >> 1)];
                const int quantized_weight =
                    (within & 1) ? (byte >> 4) : (byte & 15);
                weighted += quantized_activation_value * quantized_weight;
                activation_sum += quantized_activation_value;
            }
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
            weighted += __shfl_down_sync(0xffffffffu, weighted, offset);
            activation_sum +=
                __shfl_down_sync(0xffffffffu, activation_sum, offset);
        }
        if (lane == 0) {
            int zero_point = 8;
            if (zero_points) {
                zero_point = int4_zero_point_nibble(
                    zero_points[(long)column * zp_row_bytes + (block >> 1)], block);
            }
            const int dot = weighted - zero_point * activation_sum;
            value = accumulate_block_dot(value, dot,
                activation_scale_ptr[block], scales[(long)column * k_blocks + block]);
        }
    }
    if (lane == 0) {
        output[column] = bias ? __fadd_rn(value, bias[column]) : value;
    }
}
#endif

// Reference-style tiled accuracy-4 GEMM for any M: one thread per output
// element (grid-stride), quantizing each K block of its activation row
// inline. An all-zero block is skipped (it contributes exactly 0).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_accuracy4
extern "C" __global__ void matmul_nbits_accuracy4(
    const float* a,
    const unsigned char* packed,
    const float* scales,
    const unsigned char* zero_points,
    const float* bias,
    float* y,
    const int m,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes)
{
    const long total = (long)m * n;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
         idx < total; idx += (long)gridDim.x * blockDim.x) {
        const int row = (int)(idx / n);
        const int output = (int)(idx % n);
        const float* activation = a + (long)row * k;

        float value = 0.0f;
        for (int block = 0; block < k_blocks; ++block) {
            const int begin = block * block_size;
            const int end = min(begin + block_size, k);
            float block_max = 0.0f;
            for (int depth = begin; depth < end; ++depth) {
                block_max = fmaxf(block_max, fabsf(activation[depth]));
            }
            if (block_max == 0.0f) {
                continue;
            }
            const float activation_scale = block_max / 127.0f;
            const float inverse_scale = 1.0f / activation_scale;
            int zero_point = 8;
            if (zero_points) {
                zero_point = int4_zero_point_nibble(
                    zero_points[(long)output * zp_row_bytes + block / 2], block);
            }
            int dot = 0;
            for (int depth = begin; depth < end; ++depth) {
                const int quantized_activation =
                    quantize_int8(activation[depth], inverse_scale);
                const int within = depth - begin;
                const unsigned char byte =
                    packed[((long)output * k_blocks + block) * blob_size + within / 2];
                const int quantized_weight =
                    (within & 1) ? (byte >> 4) : (byte & 15);
                dot += quantized_activation * (quantized_weight - zero_point);
            }
            value = accumulate_block_dot(value, dot,
                activation_scale, scales[(long)output * k_blocks + block]);
        }
        y[idx] = bias ? __fadd_rn(value, bias[output]) : value;
    }
}
#endif
