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

        // Per-K-block int8 activation quantization (block scale == the weight
        // block granularity), matching ORT/MLAS CompInt8 and the CPU native
        // path. A single per-row scale is dominated by activation outliers and
        // collapses small in-block magnitudes to zero, which flips argmaxes on
        // outlier-heavy models (e.g. Phi-3.5); per-block scales avoid that.
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
                const unsigned char zp =
                    zero_points[(long)output * zp_row_bytes + block / 2];
                zero_point = (block & 1) ? (zp >> 4) : (zp & 15);
            }
            int dot = 0;
            for (int depth = begin; depth < end; ++depth) {
                int quantized_activation =
                    (int)roundf(fminf(127.0f, fmaxf(-127.0f,
                        activation[depth] * inverse_scale)));
                const int within = depth - begin;
                const unsigned char byte =
                    packed[((long)output * k_blocks + block) * blob_size + within / 2];
                const int quantized_weight =
                    (within & 1) ? (byte >> 4) : (byte & 15);
                dot += quantized_activation * (quantized_weight - zero_point);
            }
            const float combined_scale = __fmul_rn(
                activation_scale,
                scales[(long)output * k_blocks + block]);
            value = __fadd_rn(value, __fmul_rn((float)dot, combined_scale));
        }
        y[idx] = bias ? __fadd_rn(value, bias[output]) : value;
    }
}
