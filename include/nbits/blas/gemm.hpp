#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace nbits {

class CudaRuntime;

namespace blas {

enum class GemmDtype { F32, F16 };

// Row-major Y[M,N] = A[M,K] · W[K,N] (+ bias[N]) through cuBLASLt with fp32
// compute and fp32 scale type. F16 data keeps the fp32 compute type.
struct GemmParams {
    GemmDtype dtype = GemmDtype::F32;
    CUdeviceptr a = 0;
    CUdeviceptr w = 0;
    CUdeviceptr y = 0;
    CUdeviceptr bias = 0;  // 0: no bias epilogue
    std::size_t m = 0;
    std::size_t k = 0;
    std::size_t n = 0;
};

// The workspace the original reserved for cuBLASLt's heuristic: 32 MiB.
inline constexpr std::size_t kWorkspaceBytes = 32u << 20;

// Enqueues the GEMM on the runtime's stream, with the first heuristic
// algorithm for a `workspace_bytes` workspace. Degenerate dimensions (any of
// M, N, K zero) are Error(InvalidArgument); cuBLASLt failures Error(Blas).
void gemm(CudaRuntime& runtime, const GemmParams& params, CUdeviceptr workspace, std::size_t workspace_bytes);

}  // namespace blas
}  // namespace nbits
