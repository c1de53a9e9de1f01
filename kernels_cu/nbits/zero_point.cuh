// Integer zero-point lookups of the packed MatMulNBits layouts. No fp16 here:
// the fp32 kernels include this header too.
#pragma once

// An int4 zero-point row packs two blocks per byte, even block in the low
// nibble.
__device__ __forceinline__ int int4_zero_point_nibble(
    const unsigned char zp,
    const int block)
{
    return (block & 1) ? (zp >> 4) : (zp & 15);
}

// Block zero point of an int4 weight, or the symmetric default 8 when the
// weight carries no zero points.
__device__ __forceinline__ int int4_block_zero_point(
    const unsigned char* __restrict__ zero_points,
    const long column,
    const int block,
    const int zp_row_bytes)
{
    if (!zero_points) {
        return 8;
    }
    return int4_zero_point_nibble(
        zero_points[column * zp_row_bytes + (block >> 1)], block);
}

// Compile-time zero-point selection: `HasZp == false` folds to the symmetric
// default with no load, so symmetric weights never pay for the per-block read.
template <bool HasZp>
__device__ __forceinline__ int block_zp(
    const unsigned char* __restrict__ zero_points,
    const long column,
    const int block,
    const int zp_row_bytes)
{
    if (!HasZp) {
        return 8;
    }
    return int4_block_zero_point(zero_points, column, block, zp_row_bytes);
}

// Int8 counterpart of block_zp: one whole-byte zero point per block, default
// 128.
template <bool HasZp>
__device__ __forceinline__ int block_zp_int8(
    const unsigned char* __restrict__ zero_points,
    const long column,
    const int block,
    const int k_blocks)
{
    if (!HasZp) {
        return 128;
    }
    return (int)zero_points[column * k_blocks + block];
}
