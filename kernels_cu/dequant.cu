// Block-wise dequantization of a packed MatMulNBits weight into a dense fp32
// K x N matrix, the input of the cuBLASLt GEMM fallback (prefill, g_idx).

// Grid-stride over the K x N output (row-major, weight_kn[depth * n + output]).
// Handles any bit width 2..8 and any block_size, with optional per-depth
// group indices (g_idx): a depth whose group is out of range dequantizes to 0.
// Zero points pack `bits` per block along each output row; the default is
// 2^(bits-1).
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_dequant_f32
extern "C" __global__ void matmul_nbits_dequant_f32(
    const unsigned char* packed,
    const float* scales,
    const unsigned char* zero_points,
    const int* group_indices,
    float* weight_kn,
    const int k,
    const int n,
    const int block_size,
    const int k_blocks,
    const int blob_size,
    const int zp_row_bytes,
    const int bits)
{
    const long total = (long)k * n;
    for (long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
         idx < total; idx += (long)gridDim.x * blockDim.x) {
        const int depth = (int)(idx / n);
        const int output = (int)(idx % n);
        const int block = depth / block_size;
        const int within = depth - block * block_size;
        const int bit_offset = within * bits;
        const unsigned char byte =
            packed[((long)output * k_blocks + block) * blob_size + bit_offset / 8];
        const int mask = bits == 8 ? 255 : ((1 << bits) - 1);
        const int quantized = (byte >> (bit_offset & 7)) & mask;
        const int group = group_indices ? group_indices[depth] : block;
        if (group < 0 || group >= k_blocks) {
            weight_kn[idx] = 0.0f;
            continue;
        }
        int zero_point = 1 << (bits - 1);
        if (zero_points) {
            const int zp_bit_offset = group * bits;
            const unsigned char zp =
                zero_points[(long)output * zp_row_bytes + zp_bit_offset / 8];
            zero_point = (zp >> (zp_bit_offset & 7)) & mask;
        }
        weight_kn[idx] =
            ((float)quantized - (float)zero_point) * scales[(long)output * k_blocks + group];
    }
}
#endif
