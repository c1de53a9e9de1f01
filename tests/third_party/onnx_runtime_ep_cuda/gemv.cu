__device__ __forceinline__ float warp_sum(float value)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    return value;
}

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

// Model-agnostic fp32-activation int4/int8 decode GEMV supporting any
// power-of-two block_size. The int4 path is bit-for-bit identical to the
// original (nibble unpack, symmetric default 8, per-block-nibble zero points);
// the int8 branch reads one byte per weight, uses a symmetric default of 128,
// and reads one whole-byte zero point per block. The tuned block-32 int8 entry
// (`matmul_nbits_gemv_int8_f32`) bakes in the block-32 geometry; block sizes
// other than 32 route here so the block index derives from the real block_size.
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
                const unsigned char zp =
                    zero_points[(long)column * zp_row_bytes + block / 2];
                zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
            }
        }
        value += activation[depth] * ((float)quantized - (float)zero_point)
            * scales[(long)column * k_blocks + block];
    }

    value = block_sum(value);
    if (threadIdx.x == 0) {
        output[column] = value + (bias ? bias[column] : 0.0f);
    }
}

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

    value = block_sum(value);
    if (threadIdx.x == 0) {
        output[column] = value + (bias ? bias[column] : 0.0f);
    }
}

// Structurally-selected int8 / block_size == 128 / asymmetric fp32-activation
// decode GEMV. This is a specialization of `matmul_nbits_gemv_f32` for the
// generic block-128 int8 loop that dominates Qwen3-0.6B decode. It is
// BIT-FOR-BIT IDENTICAL to that kernel: each thread walks the same depth stride
// (grid-stride by blockDim), evaluates the same per-element expression
// `activation * ((float)quantized - (float)zero_point) * scale`, and reduces in
// the same block_sum order — only the address arithmetic is cheaper.
//
// With block_size == 128 the block index is a shift (`depth >> 7`) instead of an
// integer divide, and the packed-byte address collapses: for blob_size == 128,
//   (column*k_blocks + block)*128 + (depth - block*128) == column*k_blocks*128 + depth,
// so `within` (the modulo) disappears entirely. The `column * k_blocks` base is
// hoisted once into `col_kb` for the scale and zero-point rows, and the runtime
// `bits == 8` branch of the generic kernel is gone. The `zero_points ? : 128`
// selection is retained (uniform across the CTA, effectively free) so the result
// stays identical whether or not zero points are present; dispatch restricts
// this entry to the asymmetric case in practice.
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

    value = block_sum(value);
    if (threadIdx.x == 0) {
        output[column] = value + (bias ? bias[column] : 0.0f);
    }
}

// Int4 counterpart of the block-128 int8 specialization above. Each warp owns
// 32 consecutive depths, hence 16 aligned packed bytes. Four lanes load one
// aligned 32-bit word each and shuffle it to the eight lanes consuming its
// nibbles. This removes duplicate scalar byte loads without changing any
// thread's depth sequence or fp32 arithmetic.
extern "C" __global__ void matmul_nbits_gemv_int4_f32_block128(
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
        const unsigned char zp_byte = col_zp[block >> 1];
        const int zero_point = (block & 1) ? (zp_byte >> 4) : (zp_byte & 15);
        value += activation[depth] * ((float)quantized - (float)zero_point)
            * col_scales[block];
    }

    value = block_sum(value);
    if (threadIdx.x == 0) {
        output[column] = value + (bias ? bias[column] : 0.0f);
    }
}

// Per-K-block (block-32) int8 activation quantization. One warp (CUDA block) owns
// one K-block and emits that block's own int8 scale, matching ORT/MLAS CompInt8
// and the CPU native path. A single per-row scale is dominated by activation
// outliers and rounds small in-block magnitudes to zero, flipping argmaxes on
// outlier-heavy models (e.g. Phi-3.5); per-block scales track fp32 faithfully.
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

    float max_abs = fabsf(value);
    for (int offset = 16; offset > 0; offset >>= 1) {
        max_abs = fmaxf(max_abs,
            __shfl_down_sync(0xffffffffu, max_abs, offset));
    }
    max_abs = __shfl_sync(0xffffffffu, max_abs, 0);

    const float activation_scale = max_abs == 0.0f ? 0.0f : max_abs / 127.0f;
    const float inverse_scale =
        activation_scale == 0.0f ? 0.0f : 1.0f / activation_scale;
    if (lane == 0) {
        activation_scale_out[block] = activation_scale;
    }
    int quantized = 0;
    if (depth < k && activation_scale != 0.0f) {
        quantized = (int)roundf(fminf(127.0f, fmaxf(-127.0f,
            value * inverse_scale)));
    }
    quantized_activation[depth] = (signed char)quantized;
}

__device__ __forceinline__ int unpack_int4x4(unsigned int packed, int offset)
{
    const int w0 = (int)((packed >> (offset + 0)) & 15u) - 8;
    const int w1 = (int)((packed >> (offset + 4)) & 15u) - 8;
    const int w2 = (int)((packed >> (offset + 8)) & 15u) - 8;
    const int w3 = (int)((packed >> (offset + 12)) & 15u) - 8;
    return (w0 & 255) | ((w1 & 255) << 8) | ((w2 & 255) << 16)
        | ((w3 & 255) << 24);
}

__device__ __forceinline__ int dot_int8x4(int lhs, int rhs, int accumulator)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(lhs, rhs, accumulator);
#else
#pragma unroll
    for (int byte = 0; byte < 4; ++byte) {
        int lhs_value = ((unsigned int)lhs >> (byte * 8)) & 255u;
        int rhs_value = ((unsigned int)rhs >> (byte * 8)) & 255u;
        lhs_value = lhs_value >= 128 ? lhs_value - 256 : lhs_value;
        rhs_value = rhs_value >= 128 ? rhs_value - 256 : rhs_value;
        accumulator += lhs_value * rhs_value;
    }
    return accumulator;
#endif
}

extern "C" __global__ void matmul_nbits_gemv_accuracy4_block32(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,
    const float* scales,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    extern __shared__ signed char activation_tile[];
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int column = (int)blockIdx.x * 8 + warp;

    float value = 0.0f;
    for (int tile_block = 0; tile_block < k_blocks; tile_block += 32) {
        const int tile_blocks = min(32, k_blocks - tile_block);
        const int tile_depths = tile_blocks * 32;
        for (int depth = tid; depth < tile_depths; depth += (int)blockDim.x) {
            activation_tile[depth] =
                quantized_activation[tile_block * 32 + depth];
        }
        __syncthreads();

        const int block = tile_block + lane;
        if (column < n && block < k_blocks) {
            const long packed_start = ((long)column * k_blocks + block) * 16;
            const uint4 packed_weights =
                *reinterpret_cast<const uint4*>(packed + packed_start);
            const unsigned int words[4] = {
                packed_weights.x, packed_weights.y, packed_weights.z, packed_weights.w
            };
            const signed char* activation_block = activation_tile + lane * 32;
            int dot = 0;
#pragma unroll
            for (int word = 0; word < 4; ++word) {
                const int activation0 =
                    *reinterpret_cast<const int*>(activation_block + word * 8);
                const int activation1 =
                    *reinterpret_cast<const int*>(activation_block + word * 8 + 4);
                dot = dot_int8x4(activation0, unpack_int4x4(words[word], 0), dot);
                dot = dot_int8x4(activation1, unpack_int4x4(words[word], 16), dot);
            }
            // Per-block int8 activation scale times the per-block weight scale.
            const float block_scale = __fmul_rn(
                activation_scale_ptr[block],
                scales[(long)column * k_blocks + block]);
            value = __fadd_rn(value, __fmul_rn((float)dot, block_scale));
        }
        __syncthreads();
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = bias ? __fadd_rn(value, bias[column]) : value;
    }
}

extern "C" __global__ void matmul_nbits_gemv_accuracy4_block32_stage64(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,
    const float* scales,
    const float* bias,
    float* output,
    const int k,
    const int n,
    const int k_blocks)
{
    extern __shared__ signed char activation_tile[];
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int column = (int)blockIdx.x * 8 + warp;

    float value = 0.0f;
    for (int tile_block = 0; tile_block < k_blocks; tile_block += 64) {
        const int tile_blocks = min(64, k_blocks - tile_block);
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
            const unsigned int words[4] = {
                packed_weights.x, packed_weights.y, packed_weights.z, packed_weights.w
            };
            const signed char* activation_block = activation_tile + tile_offset * 32;
            int dot = 0;
#pragma unroll
            for (int word = 0; word < 4; ++word) {
                const int activation0 =
                    *reinterpret_cast<const int*>(activation_block + word * 8);
                const int activation1 =
                    *reinterpret_cast<const int*>(activation_block + word * 8 + 4);
                dot = dot_int8x4(activation0, unpack_int4x4(words[word], 0), dot);
                dot = dot_int8x4(activation1, unpack_int4x4(words[word], 16), dot);
            }
            const float block_scale = __fmul_rn(
                activation_scale_ptr[block],
                scales[(long)column * k_blocks + block]);
            value = __fadd_rn(value, __fmul_rn((float)dot, block_scale));
        }
        __syncthreads();
    }

    value = warp_sum(value);
    if (lane == 0 && column < n) {
        output[column] = bias ? __fadd_rn(value, bias[column]) : value;
    }
}

// Per-K-block int8 activation quantization for ANY power-of-two block_size. One
// warp (CUDA block) owns one K-block and emits that block's own int8 scale,
// exactly matching the per-block quantization the tiled `matmul_nbits_accuracy4`
// reference performs inline (block_max / 127, symmetric round-to-nearest). The
// block-32 entry above hard-codes 32 lanes == 32 depths; this generalization
// strides each of the 32 lanes across the block so a single warp covers
// block_size (e.g. 128) depths. Padded tail depths (depth >= k in a partial
// final block) quantize to zero so they contribute nothing to the GEMV.
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
    for (int offset = 16; offset > 0; offset >>= 1) {
        max_abs = fmaxf(max_abs,
            __shfl_down_sync(0xffffffffu, max_abs, offset));
    }
    max_abs = __shfl_sync(0xffffffffu, max_abs, 0);

    const float activation_scale = max_abs == 0.0f ? 0.0f : max_abs / 127.0f;
    const float inverse_scale =
        activation_scale == 0.0f ? 0.0f : 1.0f / activation_scale;
    if (lane == 0) {
        activation_scale_out[block] = activation_scale;
    }
    for (int within = lane; within < block_size; within += 32) {
        const int depth = begin + within;
        int quantized = 0;
        if (depth < k && activation_scale != 0.0f) {
            quantized = (int)roundf(fminf(127.0f, fmaxf(-127.0f,
                activation[depth] * inverse_scale)));
        }
        quantized_activation[depth] = (signed char)quantized;
    }
}

// General-block-size int4 accuracy_level=4 decode GEMV over the pre-quantized
// int8 activation. One warp reduces one output column; the 32 lanes cooperate
// across the block_size depths of each K-block. The per-block integer dot is
// computed as sum(qa * qw) - zero_point * sum(qa), which is exactly the tiled
// reference's sum(qa * (qw - zero_point)). Block-128 uses two packed dp4a
// instructions per lane (one for each integer sum) on sm_61+, while older
// architectures and other block sizes retain the scalar loop. Padded tail
// activations are zero, so packed tail lanes remain exact no-ops. The fp32 block
// products are then accumulated by lane 0 in ascending block order with the same
// __fmul_rn / __fadd_rn rounding the tiled kernel uses, so the result is bit-for-bit
// identical. Symmetric int4 uses the default zero point 8; asymmetric int4
// reads the packed per-block nibble zero point. The grid width (warps per CTA)
// is chosen host-side from the device multiprocessor count so the launch fills
// consumer and datacenter GPUs alike.
extern "C" __global__ void matmul_nbits_gemv_accuracy4_blockwise(
    const signed char* quantized_activation,
    const float* activation_scale_ptr,
    const unsigned char* packed,
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
                const unsigned char zp =
                    zero_points[(long)column * zp_row_bytes + (block >> 1)];
                zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
            }
            const int dot = weighted - zero_point * activation_sum;
            const float combined_scale = __fmul_rn(
                activation_scale_ptr[block],
                scales[(long)column * k_blocks + block]);
            value = __fadd_rn(value, __fmul_rn((float)dot, combined_scale));
        }
    }
    if (lane == 0) {
        output[column] = bias ? __fadd_rn(value, bias[column]) : value;
    }
}
