// SiLU shared by the paired gate/up SwiGLU epilogue and the pointwise
// silu_mul kernel, so the fused and the two-op paths round identically.
#pragma once

// silu(x) = x * sigmoid(x) in the form that never divides inf by inf: for
// x >= 0 as x / (1 + e^-x), otherwise as (x * e^x) / (1 + e^x). The
// exponential is taken in double and rounded to fp32; every other step is an
// explicitly rounded fp32 operation, so no contraction can change the result.
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
