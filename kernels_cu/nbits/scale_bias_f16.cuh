// Scalar loads and the fp16 output epilogue shared by the fp16 GEMV/GEMM
// families.
#pragma once

#include "nbits/half.cuh"

// Reads element `index` of a tensor that is fp16 when `is_half` is set and
// fp32 otherwise (block scales, RMS-norm gamma). fp32 values are used at full
// precision; fp16 values widen exactly.
template <typename Index>
__device__ __forceinline__ float load_f16_or_f32(
    const void* __restrict__ values,
    const int is_half,
    const Index index)
{
    return is_half
        ? __half2float(reinterpret_cast<const __half*>(values)[index])
        : reinterpret_cast<const float*>(values)[index];
}

// Rounds the fp32 accumulator of one output to fp16 and applies the bias.
//   * `bias_post_round == 0` (the node's own bias): add in fp32, round once:
//     fp16(acc + bias).
//   * `bias_post_round != 0` (a bias folded from a following Add): round the
//     accumulator first, then add with a second rounding:
//     fp16(fp16(acc) + bias), which is what the unfused MatMul + Add pair
//     produces.
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
