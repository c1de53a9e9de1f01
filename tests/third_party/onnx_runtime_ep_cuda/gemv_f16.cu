#include <cuda_fp16.h>

__device__ __forceinline__ float warp_sum(float value)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    return value;
}

// Fp16 GEMV bias epilogue. The fp32 accumulator is always rounded to fp16 for
// the base output. When a bias is present:
//   * `bias_post_round == 0` (native MatMulNBits bias): add in fp32 and round
//     once — `fp16(acc + bias)` — matching an ORT-style fused epilogue.
//   * `bias_post_round != 0` (a folded standalone `Add`): round the accumulator
//     to fp16 first, then add the fp16 bias with a second fp16 round —
//     `fp16(fp16(acc) + bias)` — reproducing the original two-op path so greedy
//     tokens stay byte-identical.
__device__ __forceinline__ __half fold_bias_f16(
    const float value,
    const __half* __restrict__ bias,
    const int column,
    const int bias_post_round)
{
    const __half rounded = __float2half(value);
    if (!bias) {
        return rounded;
    }
    const float b = __half2float(bias[column]);
    if (bias_post_round) {
        return __float2half(__half2float(rounded) + b);
    }
    return __float2half(value + b);
}

// One warp per output column. Block-32 INT8 stores one unsigned quantized
// weight byte per K element and one optional uint8 zero point per block.
extern "C" __global__ void matmul_nbits_gemv_int8_f16(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int scales_fp16,
    const int bias_post_round)
{
    // Mirrors the int4 `matmul_nbits_gemv_f16` work split: four adjacent lanes
    // cooperate on one block-32 column, eight blocks are consumed per warp step.
    // Each lane issues one aligned 8-byte packed-int8 load (uint2) and one 16-byte
    // activation load (uint4), then a four-lane shuffle reduction reconstructs the
    // block dot product before its scale is applied. This replaces the previous
    // one-byte-per-lane scalar walk that only advanced 32 K per warp step.
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;

    float value = 0.0f;
    if (column < n) {
        const int quarter = lane & 3;
        for (int block_base = 0; block_base < k_blocks; block_base += 8) {
            const int block = block_base + (lane >> 2);
            float block_partial = 0.0f;
            if (block < k_blocks) {
                const int zero_point =
                    zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
                const int depth = block * 32 + quarter * 8;
                const long packed_start =
                    ((long)column * k_blocks + block) * 32 + quarter * 8;
                if (depth + 8 <= k) {
                    const uint2 packed_word =
                        *reinterpret_cast<const uint2*>(packed + packed_start);
                    const unsigned char* bytes =
                        reinterpret_cast<const unsigned char*>(&packed_word);
                    const uint4 act = *reinterpret_cast<const uint4*>(activation + depth);
                    const __half* acth = reinterpret_cast<const __half*>(&act);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        block_partial += ((float)(int)bytes[i] - (float)zero_point)
                            * __half2float(acth[i]);
                    }
                } else if (depth < k) {
                    const int valid = min(8, k - depth);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        if (i < valid) {
                            const int quantized = (int)packed[packed_start + i];
                            block_partial += ((float)quantized - (float)zero_point)
                                * __half2float(activation[depth + i]);
                        }
                    }
                }
            }
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 2, 4);
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 1, 4);
            if (quarter == 0 && block < k_blocks) {
                const float scale = scales_fp16
                    ? __half2float(reinterpret_cast<const __half*>(scales_raw)
                        [(long)column * k_blocks + block])
                    : reinterpret_cast<const float*>(scales_raw)
                        [(long)column * k_blocks + block];
                value += block_partial * scale;
            }
        }
    }
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

// Split-K standalone int8 GEMV: K_SPLIT warps cooperate on one output column,
// each reducing a strided subset of the 8-block (256-wide) K steps, then summing
// their fp32 partials through shared memory. The launch grid is K_SPLIT x larger
// than the single-warp kernel, which fills the SMs on the grid-starved
// (~0.48 waves/SM) Phi int8 down-projection decode GEMV. This kernel has no
// serial prologue, so the added grid parallelism directly hides the
// Long-Scoreboard latency (unlike the fused RMSNorm-prologue int8 kernel, whose
// serial full-vector prologue caps any split-K benefit). The fp32 partial sum is
// a new block-sum association, so results are near-equal (not byte-identical) to
// the single-warp kernel; asymmetric-zp parity is validated against a dequant
// reference to tolerance. Requires K % 256 == 0 (whole steps, no divergent tail)
// — the launch only routes here in that case.
extern "C" __global__ void matmul_nbits_gemv_int8_f16_splitk(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int scales_fp16,
    const int bias_post_round)
{
    constexpr int K_SPLIT = 2;
    const int lane = (int)threadIdx.x & 31;
    const int warp = (int)threadIdx.x >> 5;
    const int warps_per_block = (int)blockDim.x >> 5;
    const int cols_per_block = warps_per_block / K_SPLIT;
    const int col_local = warp / K_SPLIT;
    const int ks = warp % K_SPLIT;
    const int column = (int)blockIdx.x * cols_per_block + col_local;

    __shared__ float partials[8][K_SPLIT];

    float value = 0.0f;
    if (column < n) {
        const int quarter = lane & 3;
        for (int block_base = ks * 8; block_base < k_blocks;
             block_base += K_SPLIT * 8) {
            const int block = block_base + (lane >> 2);
            float block_partial = 0.0f;
            if (block < k_blocks) {
                const int zero_point =
                    zero_points ? (int)zero_points[(long)column * k_blocks + block] : 128;
                const int depth = block * 32 + quarter * 8;
                const long packed_start =
                    ((long)column * k_blocks + block) * 32 + quarter * 8;
                if (depth + 8 <= k) {
                    const uint2 packed_word =
                        *reinterpret_cast<const uint2*>(packed + packed_start);
                    const unsigned char* bytes =
                        reinterpret_cast<const unsigned char*>(&packed_word);
                    const uint4 act = *reinterpret_cast<const uint4*>(activation + depth);
                    const __half* acth = reinterpret_cast<const __half*>(&act);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        block_partial += ((float)(int)bytes[i] - (float)zero_point)
                            * __half2float(acth[i]);
                    }
                } else if (depth < k) {
                    const int valid = min(8, k - depth);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        if (i < valid) {
                            const int quantized = (int)packed[packed_start + i];
                            block_partial += ((float)quantized - (float)zero_point)
                                * __half2float(activation[depth + i]);
                        }
                    }
                }
            }
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 2, 4);
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 1, 4);
            if (quarter == 0 && block < k_blocks) {
                const float scale = scales_fp16
                    ? __half2float(reinterpret_cast<const __half*>(scales_raw)
                        [(long)column * k_blocks + block])
                    : reinterpret_cast<const float*>(scales_raw)
                        [(long)column * k_blocks + block];
                value += block_partial * scale;
            }
        }
    }
    value = warp_sum(value);
    if (lane == 0) {
        partials[col_local][ks] = (column < n) ? value : 0.0f;
    }
    __syncthreads();
    if (ks == 0 && lane == 0 && column < n) {
        float acc = 0.0f;
#pragma unroll
        for (int s = 0; s < K_SPLIT; ++s) {
            acc += partials[col_local][s];
        }
        output[column] = fold_bias_f16(acc, bias, column, bias_post_round);
    }
}
// block-32 activation/weight tile, so each packed weight is reused by up to 16
// prompt rows and each activation by up to 16 output columns. It deliberately
// uses only ordinary shared memory, fp32 arithmetic, and __half conversion:
// no tensor-core, async-copy, or architecture-specific PTX requirement.
extern "C" __global__ void matmul_nbits_gemm_f16(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
#pragma unroll
        for (int load = tid; load < 16 * 32; load += 16 * 16) {
            const int tile_row = load >> 5;
            const int within = load & 31;
            const int depth = block * 32 + within;
            const int global_row = (int)blockIdx.y * 16 + tile_row;
            activation_tile[tile_row][within] =
                global_row < m && depth < k
                    ? __half2float(activation[(long)global_row * k + depth])
                    : 0.0f;
        }
#pragma unroll
        for (int load = tid; load < 32 * 16; load += 16 * 16) {
            const int tile_column = load >> 5;
            const int within = load & 31;
            const int global_column = (int)blockIdx.x * 16 + tile_column;
            const int depth = block * 32 + within;
            float weight = 0.0f;
            if (global_column < n && depth < k) {
                const long scale_index = (long)global_column * k_blocks + block;
                const float scale = scales_fp16
                    ? __half2float(
                        reinterpret_cast<const __half*>(scales_raw)[scale_index])
                    : reinterpret_cast<const float*>(scales_raw)[scale_index];
                int quantized;
                int zero_point;
                if (bits == 8) {
                    quantized = (int)packed[scale_index * 32 + within];
                    zero_point = zero_points ? (int)zero_points[scale_index] : 128;
                } else {
                    const unsigned char byte =
                        packed[scale_index * 16 + (within >> 1)];
                    quantized = (within & 1) ? (byte >> 4) : (byte & 15);
                    zero_point = 8;
                    if (zero_points) {
                        const int zp_row_bytes = (k_blocks + 1) >> 1;
                        const unsigned char zp =
                            zero_points[(long)global_column * zp_row_bytes + (block >> 1)];
                        zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
                    }
                }
                weight = ((float)quantized - (float)zero_point) * scale;
            }
            weight_tile[within][tile_column] = weight;
        }
        __syncthreads();

        if (row < m && column < n) {
#pragma unroll
            for (int within = 0; within < 32; ++within) {
                value += activation_tile[threadIdx.y][within]
                    * weight_tile[within][threadIdx.x];
            }
        }
        __syncthreads();
    }

    if (row < m && column < n) {
        // A folded residual epilogue binds a per-token residual (row stride N)
        // into the bias slot; a genuine broadcast bias keeps stride 0.
        const __half* row_bias = bias ? bias + (long)row * bias_row_stride : bias;
        output[(long)row * n + column] =
            fold_bias_f16(value, row_bias, column, bias_post_round);
    }
}

__device__ __forceinline__ void int4x8_to_half2x4_sub(
    const unsigned int packed,
    __half2* values,
    const unsigned int sub2)
{
    unsigned int* h = reinterpret_cast<unsigned int*>(values);
    constexpr unsigned int bottom_mask = 0x000f000f;
    constexpr unsigned int top_mask = 0x00f000f0;
    constexpr unsigned int fp16_magic = 0x64006400;
    constexpr unsigned int lop3_lut = (0xf0 & 0xcc) | 0xaa;
    const unsigned int top = packed >> 8;
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[0])
                 : "r"(packed), "n"(bottom_mask), "n"(fp16_magic), "n"(lop3_lut));
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[1])
                 : "r"(packed), "n"(top_mask), "n"(fp16_magic), "n"(lop3_lut));
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[2])
                 : "r"(top), "n"(bottom_mask), "n"(fp16_magic), "n"(lop3_lut));
    asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
                 : "=r"(h[3])
                 : "r"(top), "n"(top_mask), "n"(fp16_magic), "n"(lop3_lut));

    constexpr unsigned int fp16_1024 = 0x64006400;
    constexpr unsigned int fp16_one_sixteenth = 0x2c002c00;
    constexpr unsigned int fp16_neg64 = 0xd400d400;
    asm volatile("sub.f16x2 %0, %1, %2;\n"
                 : "=r"(h[0]) : "r"(h[0]), "r"(fp16_1024));
    asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
                 : "=r"(h[1])
                 : "r"(h[1]), "r"(fp16_one_sixteenth), "r"(fp16_neg64));
    asm volatile("sub.f16x2 %0, %1, %2;\n"
                 : "=r"(h[2]) : "r"(h[2]), "r"(fp16_1024));
    asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
                 : "=r"(h[3])
                 : "r"(h[3]), "r"(fp16_one_sixteenth), "r"(fp16_neg64));
    // Center each nibble by subtracting the block zero point. A symmetric int4
    // weight uses the implicit `sub2 == 8` (fp16 0x48004800), which reproduces
    // the previous fixed `- 8` byte-for-byte; an asymmetric weight passes its
    // per-block zero point instead so the dequant is `(code - zp)`.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        asm volatile("sub.f16x2 %0, %1, %2;\n"
                     : "=r"(h[i]) : "r"(h[i]), "r"(sub2));
    }
}

// Symmetric int4 dequant: `(code - 8)` in fp16, byte-identical to the historical
// hard-coded `- 8` path (the `sub2` register just carries fp16 8.0).
__device__ __forceinline__ void int4x8_to_half2x4(
    const unsigned int packed,
    __half2* values)
{
    constexpr unsigned int fp16_eight = 0x48004800;
    int4x8_to_half2x4_sub(packed, values, fp16_eight);
}

// Pack a scalar block zero point (nibble in [0, 15]) into an fp16x2 subtrahend
// for [`int4x8_to_half2x4_sub`].
__device__ __forceinline__ unsigned int int4_zero_point_sub2(const int zero_point)
{
    const __half zp = __float2half((float)zero_point);
    const __half2 zp2 = __halves2half2(zp, zp);
    return *reinterpret_cast<const unsigned int*>(&zp2);
}

// Load the block zero point for `column`/`block` from the packed nibble layout,
// or the symmetric default (8) when the weight carries no zero points.
__device__ __forceinline__ int int4_block_zero_point(
    const unsigned char* __restrict__ zero_points,
    const long column,
    const int block,
    const int zp_row_bytes)
{
    if (!zero_points) {
        return 8;
    }
    const unsigned char zp = zero_points[column * zp_row_bytes + (block >> 1)];
    return (block & 1) ? (zp >> 4) : (zp & 15);
}

// Compile-time-specialized per-block subtrahend for the vectorized int4 GEMVs.
// `HasZp == false` (symmetric weights) folds to the constant fp16 `8.0`
// subtrahend with no memory traffic, so the compiler emits the exact
// pre-zero-point instruction stream; `HasZp == true` reads the per-block
// asymmetric zero point. Keying off the template parameter — never the runtime
// pointer — keeps the symmetric decode path byte-identical and register-light.
template <bool HasZp>
__device__ __forceinline__ unsigned int block_sub2(
    const unsigned char* __restrict__ zero_points,
    const long column,
    const int block,
    const int zp_row_bytes)
{
    if (!HasZp) {
        return 0x48004800u;
    }
    return int4_zero_point_sub2(
        int4_block_zero_point(zero_points, column, block, zp_row_bytes));
}

// Scalar counterpart of [`block_sub2`] for the partial-block tail. `HasZp ==
// false` returns the symmetric default (8) with no load.
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

__device__ __forceinline__ float dot_int4x8_f16(
    const unsigned int packed,
    const __half* __restrict__ activation)
{
    const uint4 a = *reinterpret_cast<const uint4*>(activation);
    constexpr unsigned int low_halves = 0x5410;
    constexpr unsigned int high_halves = 0x7632;
    uint4 permuted;
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.x) : "r"(a.x), "r"(a.z), "r"(low_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.y) : "r"(a.x), "r"(a.z), "r"(high_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.z) : "r"(a.y), "r"(a.w), "r"(low_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.w) : "r"(a.y), "r"(a.w), "r"(high_halves));

    __half2 q[4];
    int4x8_to_half2x4(packed, q);
    const float2 q04 = __half22float2(q[0]);
    const float2 q15 = __half22float2(q[1]);
    const float2 q26 = __half22float2(q[2]);
    const float2 q37 = __half22float2(q[3]);
    const float2 a04 = __half22float2(*reinterpret_cast<const __half2*>(&permuted.x));
    const float2 a15 = __half22float2(*reinterpret_cast<const __half2*>(&permuted.y));
    const float2 a26 = __half22float2(*reinterpret_cast<const __half2*>(&permuted.z));
    const float2 a37 = __half22float2(*reinterpret_cast<const __half2*>(&permuted.w));
    float dot = q04.x * a04.x;
    dot += q15.x * a15.x;
    dot += q26.x * a26.x;
    dot += q37.x * a37.x;
    dot += q04.y * a04.y;
    dot += q15.y * a15.y;
    dot += q26.y * a26.y;
    dot += q37.y * a37.y;
    return dot;
}

__device__ __forceinline__ uint4 permute_activation_f16x8(
    const __half* __restrict__ activation)
{
    const uint4 a = *reinterpret_cast<const uint4*>(activation);
    constexpr unsigned int low_halves = 0x5410;
    constexpr unsigned int high_halves = 0x7632;
    uint4 permuted;
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.x) : "r"(a.x), "r"(a.z), "r"(low_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.y) : "r"(a.x), "r"(a.z), "r"(high_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.z) : "r"(a.y), "r"(a.w), "r"(low_halves));
    asm volatile("prmt.b32 %0, %1, %2, %3;\n"
                 : "=r"(permuted.w) : "r"(a.y), "r"(a.w), "r"(high_halves));
    return permuted;
}

__device__ __forceinline__ void accumulate_int4x8_f16_permuted(
    const unsigned int packed,
    const uint4& activation,
    const __half scale,
    __half2& sum0,
    __half2& sum1,
    __half2& sum2,
    __half2& sum3)
{
    __half2 q[4];
    int4x8_to_half2x4(packed, q);
    const __half2 scale2 = __halves2half2(scale, scale);
    sum0 = __hfma2(
        __hmul2(q[0], scale2),
        *reinterpret_cast<const __half2*>(&activation.x),
        sum0);
    sum1 = __hfma2(
        __hmul2(q[1], scale2),
        *reinterpret_cast<const __half2*>(&activation.y),
        sum1);
    sum2 = __hfma2(
        __hmul2(q[2], scale2),
        *reinterpret_cast<const __half2*>(&activation.z),
        sum2);
    sum3 = __hfma2(
        __hmul2(q[3], scale2),
        *reinterpret_cast<const __half2*>(&activation.w),
        sum3);
}

// Zero-point-aware [`accumulate_int4x8_f16_permuted`]: `sub2` centers each
// nibble by the block zero point (fp16 8.0 for symmetric weights, giving a
// byte-identical result). Used by the paired gate/up kernels, which permute the
// shared activation once and dequant each projection with its own zero point.
__device__ __forceinline__ void accumulate_int4x8_f16_permuted_zp(
    const unsigned int packed,
    const uint4& activation,
    const __half scale,
    const unsigned int sub2,
    __half2& sum0,
    __half2& sum1,
    __half2& sum2,
    __half2& sum3)
{
    __half2 q[4];
    int4x8_to_half2x4_sub(packed, q, sub2);
    const __half2 scale2 = __halves2half2(scale, scale);
    sum0 = __hfma2(__hmul2(q[0], scale2),
                   *reinterpret_cast<const __half2*>(&activation.x), sum0);
    sum1 = __hfma2(__hmul2(q[1], scale2),
                   *reinterpret_cast<const __half2*>(&activation.y), sum1);
    sum2 = __hfma2(__hmul2(q[2], scale2),
                   *reinterpret_cast<const __half2*>(&activation.z), sum2);
    sum3 = __hfma2(__hmul2(q[3], scale2),
                   *reinterpret_cast<const __half2*>(&activation.w), sum3);
}

__device__ __forceinline__ void accumulate_int4x8_dot_f16(
    const unsigned int packed,
    const uint4& activation,
    const __half2 scale2,
    __half2& sum)
{
    __half2 q[4];
    int4x8_to_half2x4(packed, q);
    sum = __hfma2(
        __hmul2(q[0], scale2),
        *reinterpret_cast<const __half2*>(&activation.x),
        sum);
    sum = __hfma2(
        __hmul2(q[1], scale2),
        *reinterpret_cast<const __half2*>(&activation.y),
        sum);
    sum = __hfma2(
        __hmul2(q[2], scale2),
        *reinterpret_cast<const __half2*>(&activation.z),
        sum);
    sum = __hfma2(
        __hmul2(q[3], scale2),
        *reinterpret_cast<const __half2*>(&activation.w),
        sum);
}

__device__ __forceinline__ float dot_int4x32_f16_permuted_scaled(
    const uint4& packed,
    const uint4& activation0,
    const uint4& activation1,
    const uint4& activation2,
    const uint4& activation3,
    const __half scale)
{
    const __half2 scale2 = __halves2half2(scale, scale);
    __half2 sum0 = __float2half2_rn(0.0f);
    __half2 sum1 = __float2half2_rn(0.0f);
    __half2 sum2 = __float2half2_rn(0.0f);
    __half2 sum3 = __float2half2_rn(0.0f);
    accumulate_int4x8_dot_f16(packed.x, activation0, scale2, sum0);
    accumulate_int4x8_dot_f16(packed.y, activation1, scale2, sum1);
    accumulate_int4x8_dot_f16(packed.z, activation2, scale2, sum2);
    accumulate_int4x8_dot_f16(packed.w, activation3, scale2, sum3);
    const float2 value0 = __half22float2(sum0);
    const float2 value1 = __half22float2(sum1);
    const float2 value2 = __half22float2(sum2);
    const float2 value3 = __half22float2(sum3);
    float value = value0.x;
    value += value1.x;
    value += value2.x;
    value += value3.x;
    value += value0.y;
    value += value1.y;
    value += value2.y;
    value += value3.y;
    return value;
}

__device__ __forceinline__ void accumulate_int4x8_f16(
    const unsigned int packed,
    const __half* __restrict__ activation,
    const __half scale,
    __half2& sum0,
    __half2& sum1,
    __half2& sum2,
    __half2& sum3)
{
    const uint4 permuted = permute_activation_f16x8(activation);
    accumulate_int4x8_f16_permuted(
        packed, permuted, scale, sum0, sum1, sum2, sum3);
}

// Zero-point-aware variant of [`accumulate_int4x8_f16`]: `sub2` is the fp16x2
// subtrahend for this block (the packed zero point, or fp16 8.0 for symmetric
// weights). With the symmetric default this is byte-identical to the plain
// accumulate, so callers can route both symmetric and asymmetric weights here.
__device__ __forceinline__ void accumulate_int4x8_f16_zp(
    const unsigned int packed,
    const __half* __restrict__ activation,
    const __half scale,
    const unsigned int sub2,
    __half2& sum0,
    __half2& sum1,
    __half2& sum2,
    __half2& sum3)
{
    const uint4 permuted = permute_activation_f16x8(activation);
    __half2 q[4];
    int4x8_to_half2x4_sub(packed, q, sub2);
    const __half2 scale2 = __halves2half2(scale, scale);
    sum0 = __hfma2(__hmul2(q[0], scale2),
                   *reinterpret_cast<const __half2*>(&permuted.x), sum0);
    sum1 = __hfma2(__hmul2(q[1], scale2),
                   *reinterpret_cast<const __half2*>(&permuted.y), sum1);
    sum2 = __hfma2(__hmul2(q[2], scale2),
                   *reinterpret_cast<const __half2*>(&permuted.z), sum2);
    sum3 = __hfma2(__hmul2(q[3], scale2),
                   *reinterpret_cast<const __half2*>(&permuted.w), sum3);
}

// One warp per output column; `columns_per_block` (== blockDim.x / 32) columns
// per CTA. Four adjacent lanes split each block-32 weight blob into aligned
// uint32 loads, so every warp issues contiguous 128-byte packed-weight
// transactions. Each lane also reads eight activations with one uint4 load.
// Register-only nibble conversion and four-lane shuffle reduction reconstruct
// each block dot product before applying its scale.
extern "C" __global__ void matmul_nbits_gemv_f16(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
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
        const int quarter = lane & 3;
        for (int block_base = 0; block_base < k_blocks; block_base += 8) {
            const int block = block_base + (lane >> 2);
            float block_partial = 0.0f;
            if (block < k_blocks) {
                const int depth = block * block_size + quarter * 8;
                const long packed_start =
                    ((long)column * k_blocks + block) * blob_size + quarter * 4;
                const unsigned int packed_word =
                    *reinterpret_cast<const unsigned int*>(packed + packed_start);
                int zero_point = 8;
                if (zero_points) {
                    const unsigned char zp =
                        zero_points[(long)column * zp_row_bytes + block / 2];
                    zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
                }
                if (depth + 8 <= k) {
                    if (zero_points) {
#pragma unroll
                        for (int i = 0; i < 8; ++i) {
                            const int q =
                                (int)((packed_word >> (i * 4)) & 15u) - zero_point;
                            block_partial +=
                                (float)q * __half2float(activation[depth + i]);
                        }
                    } else {
                        block_partial = dot_int4x8_f16(packed_word, activation + depth);
                    }
                } else if (depth < k) {
                    const int valid = min(8, k - depth);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        if (i < valid) {
                            const int q =
                                (int)((packed_word >> (i * 4)) & 15u) - zero_point;
                            block_partial +=
                                (float)q * __half2float(activation[depth + i]);
                        }
                    }
                }
            }
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 2, 4);
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 1, 4);
            if (quarter == 0 && block < k_blocks) {
                float scale;
                if (scales_fp16) {
                    scale = __half2float(
                        reinterpret_cast<const __half*>(scales)[(long)column * k_blocks + block]);
                } else {
                    scale =
                        reinterpret_cast<const float*>(scales)[(long)column * k_blocks + block];
                }
                value += block_partial * scale;
            }
        }
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

template <bool HasZp>
__device__ __forceinline__ void matmul_nbits_gemv_f16_scales_f16_tpl(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    const __half* __restrict__ scales =
        reinterpret_cast<const __half*>(scales_raw);
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column_base = (int)blockIdx.x * columns_per_block;
    const int column = column_base + warp;

    __half2 sum0 = __float2half2_rn(0.0f);
    __half2 sum1 = __float2half2_rn(0.0f);
    __half2 sum2 = __float2half2_rn(0.0f);
    __half2 sum3 = __float2half2_rn(0.0f);
    float tail = 0.0f;
    if (column < n) {
        const int lane_depth = lane * 8;
        const __half* activation_ptr = activation + lane_depth;
        const unsigned char* packed_ptr =
            packed + (long)column * k_blocks * blob_size + lane * 4;
        const __half* scale_ptr =
            scales + (long)column * k_blocks + (lane >> 2);
        int depth_base = 0;
        for (; depth_base + lane_depth + 8 <= k; depth_base += 256) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            // block == depth/32; each lane's 8 nibbles all sit in one block.
            const int block = (depth_base >> 5) + (lane >> 2);
            const unsigned int sub2 =
                block_sub2<HasZp>(zero_points, column, block, zp_row_bytes);
            accumulate_int4x8_f16_zp(
                packed_word,
                activation_ptr,
                *scale_ptr,
                sub2,
                sum0,
                sum1,
                sum2,
                sum3);
            activation_ptr += 256;
            packed_ptr += 128;
            scale_ptr += 8;
        }
        const int tail_depth = depth_base + lane_depth;
        if (tail_depth < k) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const float scale = __half2float(*scale_ptr);
            const int tail_block = (depth_base >> 5) + (lane >> 2);
            const int zero_point =
                block_zp<HasZp>(zero_points, column, tail_block, zp_row_bytes);
            const int valid = min(8, k - tail_depth);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (i < valid) {
                    const int q = (int)((packed_word >> (i * 4)) & 15u) - zero_point;
                    tail += (float)q * __half2float(activation_ptr[i]) * scale;
                }
            }
        }
    }
    const float2 value04 = __half22float2(sum0);
    const float2 value15 = __half22float2(sum1);
    const float2 value26 = __half22float2(sum2);
    const float2 value37 = __half22float2(sum3);
    float value = tail + value04.x;
    value += value15.x;
    value += value26.x;
    value += value37.x;
    value += value04.y;
    value += value15.y;
    value += value26.y;
    value += value37.y;
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    matmul_nbits_gemv_f16_scales_f16_tpl<false>(activation, packed, scales_raw, zero_points, bias, output, k, n, block_size, k_blocks, blob_size, zp_row_bytes, scales_fp16, bias_post_round);
}

extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_zp(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    matmul_nbits_gemv_f16_scales_f16_tpl<true>(activation, packed, scales_raw, zero_points, bias, output, k, n, block_size, k_blocks, blob_size, zp_row_bytes, scales_fp16, bias_post_round);
}

// Split-K asymmetric int4 GEMV: K_SPLIT warps cooperate on one output column,
// each reducing a strided subset of the 256-wide K steps, then summing their
// fp32 partials through shared memory. The launch grid is K_SPLIT x larger than
// the single-warp `_zp` kernel, which fills the SMs on this grid-starved,
// latency-bound decode GEMV. Requires K % 256 == 0 (whole steps, no divergent
// tail) — the launch only routes here in that case. The fp32 partial sum is a
// new block-sum association, so results are near-equal (not byte-identical) to
// the single-warp kernel; asymmetric-zp parity is validated against a dequant
// reference to tolerance. Always HasZp (only the zp path is grid-starved enough
// to benefit); the symmetric path keeps its byte-identical single-warp kernel.
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_zp_splitk(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    constexpr int K_SPLIT = 2;
    const __half* __restrict__ scales =
        reinterpret_cast<const __half*>(scales_raw);
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int warps_per_block = (int)blockDim.x >> 5;
    const int cols_per_block = warps_per_block / K_SPLIT;
    const int col_local = warp / K_SPLIT;
    const int ks = warp % K_SPLIT;
    const int column = (int)blockIdx.x * cols_per_block + col_local;

    __shared__ float partials[8][K_SPLIT];

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
            scales + (long)column * k_blocks + (depth_base >> 5) + (lane >> 2);
        for (; depth_base + 256 <= k; depth_base += K_SPLIT * 256) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const int block = (depth_base >> 5) + (lane >> 2);
            const unsigned int sub2 =
                block_sub2<true>(zero_points, column, block, zp_row_bytes);
            accumulate_int4x8_f16_zp(
                packed_word, activation_ptr, *scale_ptr, sub2, sum0, sum1, sum2, sum3);
            activation_ptr += K_SPLIT * 256;
            packed_ptr += K_SPLIT * 128;
            scale_ptr += K_SPLIT * 8;
        }
    }
    const float2 value04 = __half22float2(sum0);
    const float2 value15 = __half22float2(sum1);
    const float2 value26 = __half22float2(sum2);
    const float2 value37 = __half22float2(sum3);
    float value = value04.x;
    value += value15.x;
    value += value26.x;
    value += value37.x;
    value += value04.y;
    value += value15.y;
    value += value26.y;
    value += value37.y;
    value = warp_sum(value);
    if (lane == 0) {
        partials[col_local][ks] = (column < n) ? value : 0.0f;
    }
    __syncthreads();
    if (ks == 0 && lane == 0 && column < n) {
        float acc = 0.0f;
#pragma unroll
        for (int s = 0; s < K_SPLIT; ++s) {
            acc += partials[col_local][s];
        }
        output[column] = fold_bias_f16(acc, bias, column, bias_post_round);
    }
}

// Half4 view matching `skip_rmsnorm_f16_warp_half4` so the fused prologue below
// reduces the activation with the exact same chunking and rounding.
union MatMulNBitsSkipHalf4 {
    unsigned long long raw;
    __half2 pair[2];
};

// Scalar RMS-norm gamma load matching `skip_rmsnorm_f16_warp_half4`: gamma is
// only ever a final multiplicand (never part of the fp32 variance
// accumulation), so an fp32 gamma is read at full precision while an fp16 gamma
// keeps the half round-trip. This lets decoders that export gamma in fp32 (e.g.
// Phi-4-mini) take the fused RMS-norm-prologue GEMV path bit-identically to the
// standalone norm + GEMV pair.
__device__ __forceinline__ float load_rmsnorm_gamma(
    const void* __restrict__ gamma,
    const int gamma_is_half,
    const int index)
{
    return gamma_is_half
        ? __half2float(reinterpret_cast<const __half*>(gamma)[index])
        : reinterpret_cast<const float*>(gamma)[index];
}

// General fp16/fp16-scales GEMV with a fused RMS-normalization prologue. The
// preceding GEMV's residual epilogue already produced the byte-identical
// residual sum that `SkipSimplifiedLayerNormalization` would emit as its
// residual output, so this kernel only has to (1) reduce that sum exactly as
// `skip_rmsnorm_f16_warp_half4` does, (2) write the normalized activation into
// shared memory with the same rounding, and (3) run the standard `scales_f16`
// int4 dot over that staged, normalized activation. Every arithmetic step
// mirrors the standalone norm + GEMV pair, so tokens stay bit-for-bit identical
// while the separate normalization kernel is removed from the decode graph.
template <bool HasZp>
__device__ __forceinline__ void matmul_nbits_gemv_f16_scales_f16_rmsnorm_tpl(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    // Normalized activation, staged 16-byte aligned so the dot below can reuse
    // the `scales_f16` `uint4` activation loads unchanged.
    extern __shared__ __align__(16) __half staged_activation[];
    __shared__ float shared_inv_std;

    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    // --- RMS reduction, byte-identical to `skip_rmsnorm_f16_warp_half4`. ---
    if (warp == 0) {
        const int chunks_per_lane = k / (32 * 4);
        const unsigned long long* activation4 =
            reinterpret_cast<const unsigned long long*>(activation);
        float ss0 = 0.0f;
        float ss1 = 0.0f;
        float ss2 = 0.0f;
        float ss3 = 0.0f;
        for (int item = 0; item < chunks_per_lane; ++item) {
            const int chunk = lane + item * 32;
            MatMulNBitsSkipHalf4 residual;
            residual.raw = activation4[chunk];
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
        if (lane == 0) {
            shared_inv_std = 1.0f / sqrtf(ss / (float)k + epsilon);
        }
    }
    __syncthreads();
    const float inv_std = shared_inv_std;

    // --- Normalized activation, matching the norm kernel's rounded output. ---
    for (int j = tid; j < k; j += (int)blockDim.x) {
        const float residual = __half2float(activation[j]);
        const float scale = load_rmsnorm_gamma(gamma, gamma_is_half, j);
        staged_activation[j] = __float2half((residual * inv_std) * scale);
    }
    __syncthreads();

    // --- Standard `scales_f16` int4 dot over the staged, normalized input. ---
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;
    const __half* __restrict__ scales =
        reinterpret_cast<const __half*>(scales_raw);

    __half2 sum0 = __float2half2_rn(0.0f);
    __half2 sum1 = __float2half2_rn(0.0f);
    __half2 sum2 = __float2half2_rn(0.0f);
    __half2 sum3 = __float2half2_rn(0.0f);
    float tail = 0.0f;
    if (column < n) {
        const int lane_depth = lane * 8;
        const __half* activation_ptr = staged_activation + lane_depth;
        const unsigned char* packed_ptr =
            packed + (long)column * k_blocks * blob_size + lane * 4;
        const __half* scale_ptr =
            scales + (long)column * k_blocks + (lane >> 2);
        int depth_base = 0;
        for (; depth_base + lane_depth + 8 <= k; depth_base += 256) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const int block = (depth_base >> 5) + (lane >> 2);
            const unsigned int sub2 =
                block_sub2<HasZp>(zero_points, column, block, zp_row_bytes);
            accumulate_int4x8_f16_zp(
                packed_word,
                activation_ptr,
                *scale_ptr,
                sub2,
                sum0,
                sum1,
                sum2,
                sum3);
            activation_ptr += 256;
            packed_ptr += 128;
            scale_ptr += 8;
        }
        const int tail_depth = depth_base + lane_depth;
        if (tail_depth < k) {
            const unsigned int packed_word =
                *reinterpret_cast<const unsigned int*>(packed_ptr);
            const float scale = __half2float(*scale_ptr);
            const int tail_block = (depth_base >> 5) + (lane >> 2);
            const int zero_point =
                block_zp<HasZp>(zero_points, column, tail_block, zp_row_bytes);
            const int valid = min(8, k - tail_depth);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (i < valid) {
                    const int q = (int)((packed_word >> (i * 4)) & 15u) - zero_point;
                    tail += (float)q * __half2float(activation_ptr[i]) * scale;
                }
            }
        }
    }
    const float2 value04 = __half22float2(sum0);
    const float2 value15 = __half22float2(sum1);
    const float2 value26 = __half22float2(sum2);
    const float2 value37 = __half22float2(sum3);
    float value = tail + value04.x;
    value += value15.x;
    value += value26.x;
    value += value37.x;
    value += value04.y;
    value += value15.y;
    value += value26.y;
    value += value37.y;
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_rmsnorm(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    matmul_nbits_gemv_f16_scales_f16_rmsnorm_tpl<false>(activation, packed, scales_raw, zero_points, gamma, bias, output, k, n, k_blocks, blob_size, zp_row_bytes, bias_post_round, gamma_is_half, epsilon);
}

extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    matmul_nbits_gemv_f16_scales_f16_rmsnorm_tpl<true>(activation, packed, scales_raw, zero_points, gamma, bias, output, k, n, k_blocks, blob_size, zp_row_bytes, bias_post_round, gamma_is_half, epsilon);
}

// Compile-time-specialized per-block int8 zero point. `HasZp == false`
// (symmetric int8) folds to the constant 128 with no load — mirroring the int4
// `block_zp` helper — so a future symmetric-int8 model keeps the constant
// subtrahend and never pays the per-block occupancy cost the int4 path shed.
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

// INT8 sibling of `matmul_nbits_gemv_f16_scales_f16_rmsnorm`. The RMS reduction
// and normalized-activation staging are byte-identical to the int4 fused kernel
// (and to the standalone `skip_rmsnorm_f16_warp_half4`); only the quantized dot
// differs, reusing the exact block-32 int8 dequant work split from
// `matmul_nbits_gemv_int8_f16` (one byte per weight, per-block uint8 zero point
// defaulting to 128, fp32 accumulation). Specialized on `HasZp` like the int4
// sibling so the symmetric case emits no per-block zero-point load.
template <bool HasZp>
__device__ __forceinline__ void matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_tpl(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    extern __shared__ __align__(16) __half staged_activation[];
    __shared__ float shared_inv_std;

    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    // --- RMS reduction, byte-identical to `skip_rmsnorm_f16_warp_half4`. ---
    if (warp == 0) {
        const int chunks_per_lane = k / (32 * 4);
        const unsigned long long* activation4 =
            reinterpret_cast<const unsigned long long*>(activation);
        float ss0 = 0.0f;
        float ss1 = 0.0f;
        float ss2 = 0.0f;
        float ss3 = 0.0f;
        for (int item = 0; item < chunks_per_lane; ++item) {
            const int chunk = lane + item * 32;
            MatMulNBitsSkipHalf4 residual;
            residual.raw = activation4[chunk];
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
        if (lane == 0) {
            shared_inv_std = 1.0f / sqrtf(ss / (float)k + epsilon);
        }
    }
    __syncthreads();
    const float inv_std = shared_inv_std;

    // --- Normalized activation, matching the norm kernel's rounded output. ---
    for (int j = tid; j < k; j += (int)blockDim.x) {
        const float residual = __half2float(activation[j]);
        const float scale = load_rmsnorm_gamma(gamma, gamma_is_half, j);
        staged_activation[j] = __float2half((residual * inv_std) * scale);
    }
    __syncthreads();

    // --- INT8 dot over the staged, normalized input (mirrors the non-fused
    //     `matmul_nbits_gemv_int8_f16` work split, fp32 accumulation). ---
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;
    const __half* __restrict__ scales =
        reinterpret_cast<const __half*>(scales_raw);

    float value = 0.0f;
    if (column < n) {
        const int quarter = lane & 3;
        for (int block_base = 0; block_base < k_blocks; block_base += 8) {
            const int block = block_base + (lane >> 2);
            float block_partial = 0.0f;
            if (block < k_blocks) {
                const int zero_point =
                    block_zp_int8<HasZp>(zero_points, column, block, k_blocks);
                const int depth = block * 32 + quarter * 8;
                const long packed_start =
                    ((long)column * k_blocks + block) * 32 + quarter * 8;
                if (depth + 8 <= k) {
                    const uint2 packed_word =
                        *reinterpret_cast<const uint2*>(packed + packed_start);
                    const unsigned char* bytes =
                        reinterpret_cast<const unsigned char*>(&packed_word);
                    const uint4 act =
                        *reinterpret_cast<const uint4*>(staged_activation + depth);
                    const __half* acth = reinterpret_cast<const __half*>(&act);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        block_partial += ((float)(int)bytes[i] - (float)zero_point)
                            * __half2float(acth[i]);
                    }
                } else if (depth < k) {
                    const int valid = min(8, k - depth);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        if (i < valid) {
                            const int quantized = (int)packed[packed_start + i];
                            block_partial += ((float)quantized - (float)zero_point)
                                * __half2float(staged_activation[depth + i]);
                        }
                    }
                }
            }
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 2, 4);
            block_partial += __shfl_down_sync(0xffffffffu, block_partial, 1, 4);
            if (quarter == 0 && block < k_blocks) {
                const float scale =
                    __half2float(scales[(long)column * k_blocks + block]);
                value += block_partial * scale;
            }
        }
    }
    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

extern "C" __global__ void matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_tpl<false>(activation, packed, scales_raw, zero_points, gamma, bias, output, k, n, k_blocks, bias_post_round, gamma_is_half, epsilon);
}

extern "C" __global__ void matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const unsigned char* __restrict__ zero_points,
    const void* __restrict__ gamma,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int k,
    const int n,
    const int k_blocks,
    const int bias_post_round,
    const int gamma_is_half,
    const float epsilon)
{
    matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_tpl<true>(activation, packed, scales_raw, zero_points, gamma, bias, output, k, n, k_blocks, bias_post_round, gamma_is_half, epsilon);
}

// Standalone RMS-normalization prologue for the M>1 prefill path of the fused
// GEMV. It reproduces `skip_rmsnorm_f16_warp_half4` (minus the residual add,
// which the preceding GEMV's epilogue already applied) bit-for-bit: identical
// half4 chunking, identical `(ss0+ss1)+(ss2+ss3)` reduction, identical warp
// shuffle, and identical `__floats2half2_rn` output rounding. One warp
// normalizes one token row into `normalized`, which the portable tiled GEMM
// then consumes exactly as it would the standalone norm's fp16 output.
extern "C" __global__ void matmul_nbits_rmsnorm_f16_warp_half4(
    const __half* __restrict__ activation,
    const void* __restrict__ gamma,
    __half* __restrict__ normalized,
    const int norm_size,
    const int num_groups,
    const int gamma_is_half,
    const float epsilon)
{
    const int g = (int)blockIdx.x;
    if (g >= num_groups) return;
    const long base = (long)g * norm_size;
    const int lane = (int)threadIdx.x;
    const int chunks_per_lane = norm_size / (32 * 4);
    const unsigned long long* activation4 =
        reinterpret_cast<const unsigned long long*>(activation + base);
    const unsigned long long* gamma4 =
        reinterpret_cast<const unsigned long long*>(gamma);
    unsigned long long* normalized4 =
        reinterpret_cast<unsigned long long*>(normalized + base);
    float ss0 = 0.0f;
    float ss1 = 0.0f;
    float ss2 = 0.0f;
    float ss3 = 0.0f;
    for (int item = 0; item < chunks_per_lane; ++item) {
        const int chunk = lane + item * 32;
        MatMulNBitsSkipHalf4 residual;
        residual.raw = activation4[chunk];
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
    float inv_std = 0.0f;
    if (lane == 0) {
        inv_std = 1.0f / sqrtf(ss / (float)norm_size + epsilon);
    }
    inv_std = __shfl_sync(0xffffffffu, inv_std, 0);
    for (int item = 0; item < chunks_per_lane; ++item) {
        const int chunk = lane + item * 32;
        MatMulNBitsSkipHalf4 residual;
        MatMulNBitsSkipHalf4 output;
        residual.raw = activation4[chunk];
        const float2 value0 = __half22float2(residual.pair[0]);
        const float2 value1 = __half22float2(residual.pair[1]);
        // gamma is only a final multiplicand: an fp16 gamma keeps the wide
        // half4 load, an fp32 gamma is read at full precision (matching the
        // standalone `skip_rmsnorm_f16_warp_half4`), so fp32-gamma decoders fuse.
        float scale0x, scale0y, scale1x, scale1y;
        if (gamma_is_half) {
            MatMulNBitsSkipHalf4 scale;
            scale.raw = gamma4[chunk];
            const float2 scale0 = __half22float2(scale.pair[0]);
            const float2 scale1 = __half22float2(scale.pair[1]);
            scale0x = scale0.x;
            scale0y = scale0.y;
            scale1x = scale1.x;
            scale1y = scale1.y;
        } else {
            const int j = chunk << 2;
            const float* gamma_f = reinterpret_cast<const float*>(gamma);
            scale0x = gamma_f[j];
            scale0y = gamma_f[j + 1];
            scale1x = gamma_f[j + 2];
            scale1y = gamma_f[j + 3];
        }
        output.pair[0] = __floats2half2_rn(
            value0.x * inv_std * scale0x,
            value0.y * inv_std * scale0y);
        output.pair[1] = __floats2half2_rn(
            value1.x * inv_std * scale1x,
            value1.y * inv_std * scale1y);
        normalized4[chunk] = output.raw;
    }
}

// SwiGLU activation, byte-identical to the standalone `op_silu` in the
// elementwise kernels: silu(x) = x * sigmoid(x), evaluated in the same
// rounding-stable form so the paired epilogue reproduces the two-op tokens.
__device__ __forceinline__ float gate_up_silu_f32(float x)
{
    if (x >= 0.0f) {
        const float denominator = __fadd_rn(1.0f, (float)exp((double)-x));
        return __fdiv_rn(x, denominator);
    }
    const float e = (float)exp((double)x);
    const float numerator = __fmul_rn(x, e);
    return __fdiv_rn(numerator, __fadd_rn(1.0f, e));
}

// Paired gate/up projection + SwiGLU. One warp computes column `column` of BOTH
// the gate and up projections (which share the same activation and the block-32
// fp16 layout of `matmul_nbits_gemv_f16_scales_f16`), then writes
// silu(gate)*up directly. The activation is permuted once per K-tile and reused
// by both accumulators, so the two GEMVs read the activation from registers
// exactly once. The epilogue reproduces the standalone two-op numerics
// (`fp16(gate_acc)`, `fp16(up_acc)`, then `fp16(silu(gate_h)*up_h)`) so greedy
// decoding stays byte-identical. Register-only + warp shuffles: no shared
// memory, so it is portable to sm_53+ and safe on small SMs (no >48KB opt-in).
template <bool HasZp>
__device__ __forceinline__ void matmul_nbits_gemv_f16_gate_up_swiglu_tpl(
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
    const int zp_row_bytes)
{
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;

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
        for (; depth_base + lane_depth + 8 <= k; depth_base += 256) {
            // Permute the shared activation once; both projections reuse it.
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
    // Reduce each accumulator in the exact term order of the standalone
    // `matmul_nbits_gemv_f16_scales_f16` epilogue so the pre-round sums match.
    const float2 g04 = __half22float2(g0);
    const float2 g15 = __half22float2(g1);
    const float2 g26 = __half22float2(g2);
    const float2 g37 = __half22float2(g3);
    float gate_value = gate_tail + g04.x;
    gate_value += g15.x;
    gate_value += g26.x;
    gate_value += g37.x;
    gate_value += g04.y;
    gate_value += g15.y;
    gate_value += g26.y;
    gate_value += g37.y;
    gate_value = warp_sum(gate_value);

    const float2 u04 = __half22float2(u0);
    const float2 u15 = __half22float2(u1);
    const float2 u26 = __half22float2(u2);
    const float2 u37 = __half22float2(u3);
    float up_value = up_tail + u04.x;
    up_value += u15.x;
    up_value += u26.x;
    up_value += u37.x;
    up_value += u04.y;
    up_value += u15.y;
    up_value += u26.y;
    up_value += u37.y;
    up_value = warp_sum(up_value);

    if (lane == 0 && column < n) {
        // Round each projection to fp16 first (matching the separate GEMV
        // stores), then compute silu(gate)*up and round once — identical to the
        // standalone silu_mul_f16 kernel fed by the two GEMV outputs.
        const float gate_h = __half2float(__float2half(gate_value));
        const float up_h = __half2float(__float2half(up_value));
        output[column] =
            __float2half_rn(__fmul_rn(gate_up_silu_f32(gate_h), up_h));
    }
}

extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu(
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
    const int zp_row_bytes)
{
    matmul_nbits_gemv_f16_gate_up_swiglu_tpl<false>(activation, packed_gate, scales_gate, packed_up, scales_up, zero_points_gate, zero_points_up, output, k, n, k_blocks, blob_size, zp_row_bytes);
}

extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu_zp(
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
    const int zp_row_bytes)
{
    matmul_nbits_gemv_f16_gate_up_swiglu_tpl<true>(activation, packed_gate, scales_gate, packed_up, scales_up, zero_points_gate, zero_points_up, output, k, n, k_blocks, blob_size, zp_row_bytes);
}

// Paired gate/up projection + SwiGLU with a fused RMS-normalization prologue.
// This is `matmul_nbits_gemv_f16_gate_up_swiglu` preceded by the exact prologue
// of `matmul_nbits_gemv_f16_scales_f16_rmsnorm`: the block reduces the shared
// activation (the residual sum the preceding GEMV epilogue already produced)
// once, stages the normalized activation into shared memory with the same
// rounding, and then both the gate and up GEMVs read that single staged,
// normalized activation. Doing the reduction once — rather than once per
// following GEMV — is the whole point of routing the fan-out-2 post-attention
// `SkipSimplifiedLayerNormalization` through the paired kernel. Every arithmetic
// step mirrors the standalone norm followed by the two-op gate/up SwiGLU, so
// greedy tokens stay bit-for-bit identical.
template <bool HasZp>
__device__ __forceinline__ void matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_tpl(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed_gate,
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,
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
    extern __shared__ __align__(16) __half staged_activation[];
    __shared__ float shared_inv_std;

    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    // --- RMS reduction, byte-identical to `skip_rmsnorm_f16_warp_half4`. ---
    if (warp == 0) {
        const int chunks_per_lane = k / (32 * 4);
        const unsigned long long* activation4 =
            reinterpret_cast<const unsigned long long*>(activation);
        float ss0 = 0.0f;
        float ss1 = 0.0f;
        float ss2 = 0.0f;
        float ss3 = 0.0f;
        for (int item = 0; item < chunks_per_lane; ++item) {
            const int chunk = lane + item * 32;
            MatMulNBitsSkipHalf4 residual;
            residual.raw = activation4[chunk];
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
        if (lane == 0) {
            shared_inv_std = 1.0f / sqrtf(ss / (float)k + epsilon);
        }
    }
    __syncthreads();
    const float inv_std = shared_inv_std;

    // --- Normalized activation, matching the norm kernel's rounded output. ---
    for (int j = tid; j < k; j += (int)blockDim.x) {
        const float residual = __half2float(activation[j]);
        const float scale = load_rmsnorm_gamma(gamma, gamma_is_half, j);
        staged_activation[j] = __float2half((residual * inv_std) * scale);
    }
    __syncthreads();

    // --- Paired gate/up int4 dot over the staged, normalized activation. ---
    const int columns_per_block = (int)blockDim.x >> 5;
    const int column = (int)blockIdx.x * columns_per_block + warp;

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
        const __half* activation_ptr = staged_activation + lane_depth;
        const unsigned char* packed_gate_ptr =
            packed_gate + (long)column * k_blocks * blob_size + lane * 4;
        const unsigned char* packed_up_ptr =
            packed_up + (long)column * k_blocks * blob_size + lane * 4;
        const __half* scale_gate_ptr =
            scales_gate + (long)column * k_blocks + (lane >> 2);
        const __half* scale_up_ptr =
            scales_up + (long)column * k_blocks + (lane >> 2);
        int depth_base = 0;
        if constexpr (HasZp) {
            // Asymmetric (zero-point) path — the dominant Phi decode kernel, which
            // ncu shows is Long-Scoreboard/global-load-latency bound. Software-
            // pipeline the int4 gate/up weight loads: issue the next iteration's
            // two 128-byte weight words before consuming the current ones so the
            // load latency overlaps this iteration's compute. Pure scheduling
            // change (identical accumulation order/ops) → bit-identical to the
            // non-prefetched loop. Only the weight words are prefetched; also
            // prefetching the small (L1/L2-resident) scales and per-block zero
            // points pushed registers 48->56 and the occupancy loss erased the
            // latency win. The symmetric (`HasZp == false`) path below keeps its
            // exact original instruction stream so Qwen stays byte-identical with
            // no register/occupancy change.
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
    const float2 g04 = __half22float2(g0);
    const float2 g15 = __half22float2(g1);
    const float2 g26 = __half22float2(g2);
    const float2 g37 = __half22float2(g3);
    float gate_value = gate_tail + g04.x;
    gate_value += g15.x;
    gate_value += g26.x;
    gate_value += g37.x;
    gate_value += g04.y;
    gate_value += g15.y;
    gate_value += g26.y;
    gate_value += g37.y;
    gate_value = warp_sum(gate_value);

    const float2 u04 = __half22float2(u0);
    const float2 u15 = __half22float2(u1);
    const float2 u26 = __half22float2(u2);
    const float2 u37 = __half22float2(u3);
    float up_value = up_tail + u04.x;
    up_value += u15.x;
    up_value += u26.x;
    up_value += u37.x;
    up_value += u04.y;
    up_value += u15.y;
    up_value += u26.y;
    up_value += u37.y;
    up_value = warp_sum(up_value);

    if (lane == 0 && column < n) {
        const float gate_h = __half2float(__float2half(gate_value));
        const float up_h = __half2float(__float2half(up_value));
        output[column] =
            __float2half_rn(__fmul_rn(gate_up_silu_f32(gate_h), up_h));
    }
}

extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed_gate,
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,
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
    matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_tpl<false>(activation, packed_gate, scales_gate, packed_up, scales_up, zero_points_gate, zero_points_up, gamma, output, k, n, k_blocks, blob_size, zp_row_bytes, gamma_is_half, epsilon);
}

extern "C" __global__ void matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed_gate,
    const __half* __restrict__ scales_gate,
    const unsigned char* __restrict__ packed_up,
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
    matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_tpl<true>(activation, packed_gate, scales_gate, packed_up, scales_up, zero_points_gate, zero_points_up, gamma, output, k, n, k_blocks, blob_size, zp_row_bytes, gamma_is_half, epsilon);
}

// Down projection specialization: a 256-thread CTA (8 warps) computes `COLS`
// columns and parallelizes over block-32 K tiles. Each thread loads its assigned
// activation block directly into registers and reuses it across all `COLS`
// columns, then the 8 warps combine their per-column partials through shared
// memory.
//
// `COLS` is a pure grid-fill knob: every output column is still reduced
// *entirely within one CTA* by all 256 threads striding the same K tiles in the
// same order, so the fp32 accumulation is bit-identical regardless of `COLS` —
// only the CTA count (grid = ceil(N / COLS)) changes. Tall-skinny down/output
// projections have a small N, so on many-SM devices the default 8-column launch
// underfills the machine (e.g. Qwen2.5-7B down: N=3584 -> 448 CTAs, ~0.57
// waves/SM on an H200). Halving `COLS` doubles the grid to fill the idle SMs on
// this latency-bound M=1 GEMV without changing the numerics; the host picks
// `COLS` from the device multiprocessor count (see `select_down_columns`).
template <int COLS>
__device__ __forceinline__ void matmul_nbits_gemv_f16_scales_f16_down_tpl(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
    const __half* __restrict__ bias,
    __half* __restrict__ output,
    const int n,
    const int k_blocks,
    const int blob_size,
    const int bias_post_round)
{
    __shared__ float warp_sums[8][COLS];
    const __half* __restrict__ scales =
        reinterpret_cast<const __half*>(scales_raw);
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int column_base = (int)blockIdx.x * COLS;

    float values[COLS];
#pragma unroll
    for (int i = 0; i < COLS; ++i) {
        values[i] = 0.0f;
    }
    for (int block = tid; block < k_blocks; block += (int)blockDim.x) {
        const __half* activation_block = activation + block * 32;
        const uint4 activation0 = permute_activation_f16x8(activation_block);
        const uint4 activation1 = permute_activation_f16x8(activation_block + 8);
        const uint4 activation2 = permute_activation_f16x8(activation_block + 16);
        const uint4 activation3 = permute_activation_f16x8(activation_block + 24);
#pragma unroll
        for (int tile_column = 0; tile_column < COLS; ++tile_column) {
            const int column = column_base + tile_column;
            if (column < n) {
                const long packed_start =
                    ((long)column * k_blocks + block) * blob_size;
                const uint4 packed_weights =
                    *reinterpret_cast<const uint4*>(packed + packed_start);
                const __half scale = scales[(long)column * k_blocks + block];
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
    for (int tile_column = 0; tile_column < COLS; ++tile_column) {
        const float value = warp_sum(values[tile_column]);
        if (lane == 0) {
            warp_sums[warp][tile_column] = value;
        }
    }
    __syncthreads();

    if (warp == 0 && lane < COLS) {
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

// Default 8-column down projection (grid = ceil(N/8)).
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_down(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    matmul_nbits_gemv_f16_scales_f16_down_tpl<8>(
        activation, packed, scales_raw, bias, output, n, k_blocks, blob_size,
        bias_post_round);
}

// Grid-fill down projection variants: fewer columns per CTA -> proportionally
// larger grid, bit-identical output. Selected on grid-starved (small-N) down
// shapes to fill the multiprocessors on latency-bound decode.
extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_down_c4(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    matmul_nbits_gemv_f16_scales_f16_down_tpl<4>(
        activation, packed, scales_raw, bias, output, n, k_blocks, blob_size,
        bias_post_round);
}

extern "C" __global__ void matmul_nbits_gemv_f16_scales_f16_down_c2(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
    matmul_nbits_gemv_f16_scales_f16_down_tpl<2>(
        activation, packed, scales_raw, bias, output, n, k_blocks, blob_size,
        bias_post_round);
}

// Model-agnostic fp16 int4/int8 decode GEMV supporting any power-of-two
// block_size. One warp per output column. Each lane owns contiguous 8-element K
// chunks and strides by 256 (= 32 lanes * 8) across the reduction. Unlike the
// tuned block-32 kernels, the scale / zero-point block index is derived from the
// real block_size (block = depth / block_size), so a lane's 8-element chunk
// always resolves to the block it belongs to for any block width that is a
// multiple of 8 (all supported power-of-two block sizes >= 16). The `bits`
// scalar selects the packed layout: int4 unpacks two nibbles per byte with an
// optional int4 zero point (default 8, packed two block-nibbles per byte); int8
// reads one unsigned byte per weight with an optional uint8 zero point (default
// 128, one per block) — byte-for-byte the tuned block-32 int8 layout generalized
// to any block width. fp32 accumulation is preserved; the kernel is
// register-only (capture-safe).
extern "C" __global__ void matmul_nbits_gemv_f16_general_bs(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
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
            float scale;
            if (scales_fp16) {
                scale = __half2float(
                    reinterpret_cast<const __half*>(scales)[(long)column * k_blocks + block]);
            } else {
                scale =
                    reinterpret_cast<const float*>(scales)[(long)column * k_blocks + block];
            }
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
                    const unsigned char zp =
                        zero_points[(long)column * zp_row_bytes + (block >> 1)];
                    zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
                }
                const unsigned int packed_word =
                    *reinterpret_cast<const unsigned int*>(packed + blob_base + (within >> 1));
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    if (i < valid) {
                        const int q = (int)((packed_word >> (i * 4)) & 15u) - zero_point;
                        partial += (float)q * __half2float(activation[depth + i]);
                    }
                }
            }
            value += partial * scale;
        }
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = fold_bias_f16(value, bias, column, bias_post_round);
    }
}

// Model-agnostic fp16 int4/int8 prefill GEMM supporting any power-of-two
// block_size. Identical 16x16 tiling and fp32 accumulation as the tuned
// block-32 GEMM, but the reduction walks K in fixed 32-wide tiles and derives
// the block index from the real block_size (block = depth / block_size), so the
// K-tile width is decoupled from the block width. For block_size == 32 this is
// numerically identical to matmul_nbits_gemm_f16 (block == tile).
extern "C" __global__ void matmul_nbits_gemm_f16_general_bs(
    const __half* __restrict__ activation,
    const unsigned char* __restrict__ packed,
    const void* __restrict__ scales_raw,
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
                const long scale_index = (long)global_column * k_blocks + block;
                const float scale = scales_fp16
                    ? __half2float(
                        reinterpret_cast<const __half*>(scales_raw)[scale_index])
                    : reinterpret_cast<const float*>(scales_raw)[scale_index];
                const long blob_base =
                    ((long)global_column * k_blocks + block) * blob_size;
                int quantized;
                int zero_point;
                if (bits == 8) {
                    quantized = (int)packed[blob_base + within_block];
                    zero_point = zero_points ? (int)zero_points[scale_index] : 128;
                } else {
                    const unsigned char byte =
                        packed[blob_base + (within_block >> 1)];
                    quantized = (within_block & 1) ? (byte >> 4) : (byte & 15);
                    zero_point = 8;
                    if (zero_points) {
                        const int zp_row_bytes = (k_blocks + 1) >> 1;
                        const unsigned char zp =
                            zero_points[(long)global_column * zp_row_bytes + (block >> 1)];
                        zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
                    }
                }
                weight = ((float)quantized - (float)zero_point) * scale;
            }
            weight_tile[within][tile_column] = weight;
        }
        __syncthreads();

        if (row < m && column < n) {
#pragma unroll
            for (int within = 0; within < 32; ++within) {
                value += activation_tile[threadIdx.y][within]
                    * weight_tile[within][threadIdx.x];
            }
        }
        __syncthreads();
    }

    if (row < m && column < n) {
        const __half* row_bias = bias ? bias + (long)row * bias_row_stride : bias;
        output[(long)row * n + column] =
            fold_bias_f16(value, row_bias, column, bias_post_round);
    }
}
