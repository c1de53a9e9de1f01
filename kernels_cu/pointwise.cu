// Pointwise SwiGLU product for the gate/up prefill path: after the gate and
// up GEMMs wrote fp16 outputs, y = fp16(silu(gate) * up) element-wise. Uses
// the gate/up SwiGLU kernels' silu, so prefill and decode round identically.

#include "nbits/half.cuh"
#include "nbits/silu.cuh"

// fp16(silu(a) * b), each step explicitly rounded.
__device__ __forceinline__ __half silu_mul_f16(const __half a, const __half b)
{
    return __float2half_rn(__fmul_rn(gate_up_silu_f32(__half2float(a)), __half2float(b)));
}

// y[i] = fp16(silu(a[i]) * b[i]) for i < n, grid-stride. When a, b and y are
// all 4-byte aligned the loop walks half2 pairs (element n - 1 of an odd n is
// done by thread 0); otherwise it walks scalars. Each element is computed
// alone, so both paths give the same bits. `y` may alias `b` (or `a`): every
// element is read before it is written, by the same thread.
#if NBITS_ALL_ENTRIES || NBITS_ENTRY_matmul_nbits_silu_mul_f16
extern "C" __global__ void matmul_nbits_silu_mul_f16(
    const __half* a,
    const __half* b,
    __half* y,
    const int n)
{
    const long first = (long)blockIdx.x * blockDim.x + threadIdx.x;
    const long stride = (long)gridDim.x * blockDim.x;
    const unsigned long long addresses = reinterpret_cast<unsigned long long>(a)
        | reinterpret_cast<unsigned long long>(b)
        | reinterpret_cast<unsigned long long>(y);
    if ((addresses & 3ull) == 0) {
        const __half2* a2 = reinterpret_cast<const __half2*>(a);
        const __half2* b2 = reinterpret_cast<const __half2*>(b);
        __half2* y2 = reinterpret_cast<__half2*>(y);
        const long pairs = n / 2;
        for (long i = first; i < pairs; i += stride) {
            const __half2 av = a2[i];
            const __half2 bv = b2[i];
            y2[i] = __halves2half2(
                silu_mul_f16(__low2half(av), __low2half(bv)),
                silu_mul_f16(__high2half(av), __high2half(bv)));
        }
        if ((n & 1) && first == 0) {
            y[n - 1] = silu_mul_f16(a[n - 1], b[n - 1]);
        }
    } else {
        for (long i = first; i < n; i += stride) {
            y[i] = silu_mul_f16(a[i], b[i]);
        }
    }
}
#endif
