// fp32-activation decode GEMVs (M == 1): one CTA per output column, each
// thread striding K by blockDim.x, a block_sum reduction, thread 0 stores.
// All four entries evaluate the same per-element expression in the same
// per-thread depth order, so for a given weight they agree to the bit; the
// specialized entries only make the address arithmetic cheaper.

#include "nbits/reduce.cuh"
#include "nbits/zero_point.cuh"

// Reduces the per-thread partials of one column; thread 0 adds the bias.
__device__ __forceinline__ void store_column_f32(
    float value,
    const float* bias,
    float* output,
    const int column)
{
    value = block_sum(value);
    if (threadIdx.x == 0) {
        output[column] = value + (bias ? bias[column] : 0.0f);
    }
}

// Any power-of-two block_size, int4 or int8 (`bits`). int4: two codes per
// byte (low nibble first), zero points packed two blocks per byte, default 8.
// int8: one byte per code, one zero-point byte per block, default 128.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_f32
extern "C" __global__ void matmul_nbits_gemv_f32(
    const float* activation,
    const unsigned char* packed,
    const float* scales,
    const unsigned char* zero_points,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bits)
{
    const int column = (int)blockIdx.x;
    if (column >= n) {
        return;
    }

    float value = 0.0f;
    for (int depth = (int)threadIdx.x; depth < k; depth += (int)blockDim.x) {
        const int block = depth / block_size;
        const int within = depth - block * block_size;
        const long blob_base = ((long)column * k_blocks + block) * blob_size;
        int quantized;
        int zero_point;
        if (bits == 8) {
            quantized = (int)packed[blob_base + within];
            zero_point =
                zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
        } else {
            const unsigned char byte = packed[blob_base + within / 2];
            quantized = (within & 1) ? (byte >> 4) : (byte & 15);
            zero_point = 8;
            if (zero_points) {
                zero_point = int4_zero_point_nibble(
                    zero_points[(long)column * zp_row_bytes + block / 2], block);
            }
        }
        value += activation[depth] * ((float)quantized - (float)zero_point)
            * scales[(long)column * k_blocks + block];
    }
    store_column_f32(value, bias, output, column);
}
#endif

// int8, block_size 32 (blob of 32 bytes).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f32
extern "C" __global__ void matmul_nbits_gemv_int8_f32(
    const float* activation,
    const unsigned char* packed,
    const float* scales,
    const unsigned char* zero_points,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    const int column = (int)blockIdx.x;
    if (column >= n) {
        return;
    }

    float value = 0.0f;
    for (int depth = (int)threadIdx.x; depth < k; depth += (int)blockDim.x) {
        const int block = depth >> 5;
        const int within = depth & 31;
        const int quantized =
            (int)packed[((long)column * k_blocks + block) * 32 + within];
        const int zero_point =
            zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
        value += activation[depth] * ((float)quantized - (float)zero_point)
            * scales[(long)column * k_blocks + block];
    }
    store_column_f32(value, bias, output, column);
}
#endif

// int8, block_size 128: the block index is a shift and, with 128-byte blobs,
// the code of depth d sits at byte column * k_blocks * 128 + d of the packed
// row, so no within-block offset is needed. Bit-identical to
// matmul_nbits_gemv_f32 with bits == 8, block_size == 128.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int8_f32_block128
extern "C" __global__ void matmul_nbits_gemv_int8_f32_block128(
    const float* activation,
    const unsigned char* packed,
    const float* scales,
    const unsigned char* zero_points,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    const int column = (int)blockIdx.x;
    if (column >= n) {
        return;
    }

    const long col_kb = (long)column * k_blocks;
    const long packed_row = col_kb << 7;  // k_blocks * 128 bytes per weight row
    const float* col_scales = scales + col_kb;
    const unsigned char* col_zp = zero_points ? zero_points + col_kb : (const unsigned char*)0;

    float value = 0.0f;
    for (int depth = (int)threadIdx.x; depth < k; depth += (int)blockDim.x) {
        const int block = depth >> 7;
        const int quantized = (int)packed[packed_row + depth];
        const int zero_point = col_zp ? (int)col_zp[block] : 128;
        value += activation[depth] * ((float)quantized - (float)zero_point)
            * col_scales[block];
    }
    store_column_f32(value, bias, output, column);
}
#endif

// int4, block_size 128, with zero points (zero_points must not be null; the
// zero-point row is ceil(k_blocks / 2) bytes). Bit-identical to
// matmul_nbits_gemv_f32 with bits == 4, block_size == 128. Each warp covers 32
// consecutive depths, i.e. 16 aligned packed bytes: lanes 0..3 load one
// 32-bit word each and a shuffle hands word l / 8 to lane l, which extracts
// nibble l % 8. Requires blockDim.x to be a multiple of 32 and the packed
// buffer 4-byte aligned.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_gemv_int4_f32_block128
extern "C" __global__ void matmul_nbits_gemv_int4_f32_block128(
    const float* activation,
    const unsigned char* packed,  // align 4
    const float* scales,
    const unsigned char* zero_points,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    const int column = (int)blockIdx.x;
    if (column >= n) {
        return;
    }

    const int lane = (int)threadIdx.x & 31;
    const long col_kb = (long)column * k_blocks;
    const long packed_row = col_kb << 6;  // k_blocks * 64 bytes per weight row
    const float* col_scales = scales + col_kb;
    const unsigned char* col_zp =
        zero_points + (long)column * ((k_blocks + 1) >> 1);

    float value = 0.0f;
    for (int depth = (int)threadIdx.x; depth < k; depth += (int)blockDim.x) {
        const int block = depth >> 7;
        const int warp_depth = depth - lane;
        const unsigned int* packed_words =
            (const unsigned int*)(packed + packed_row + (warp_depth >> 1));
        unsigned int packed_word = lane < 4 ? packed_words[lane] : 0;
        packed_word = __shfl_sync(__activemask(), packed_word, lane >> 3);
        const int quantized = (int)((packed_word >> ((lane & 7) << 2)) & 15);
        const int zero_point = int4_zero_point_nibble(col_zp[block >> 1], block);
        value += activation[depth] * ((float)quantized - (float)zero_point)
            * col_scales[block];
    }
    store_column_f32(value, bias, output, column);
}
#endif
