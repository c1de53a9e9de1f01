#pragma once

#include "nbits/launch_plan.hpp"
#include "nbits/runtime.hpp"
#include "nbits/tensor.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace nbits::blas {

// Row-major Y[M,N] = A[M,K] · W (+ bias[N]) through cuBLASLt with fp32
// compute and fp32 scale type; A, W and bias share `dtype` (Float32,
// Float16 or BFloat16), Y too unless `y_dtype` is set (Float32). W is
// [K, N] row-major, or [N, K] row-major with `weights_nk` (Y = A · Wᵀ).
struct GemmParams {
    DataType dtype = DataType::Float32;
    std::optional<DataType> y_dtype;
    bool weights_nk = false;
    CUdeviceptr a = 0;
    CUdeviceptr w = 0;
    CUdeviceptr y = 0;
    CUdeviceptr bias = 0;  // 0: no bias epilogue
    std::size_t m = 0;
    std::size_t k = 0;
    std::size_t n = 0;
    std::size_t ldy = 0;   // Y's row stride in elements; 0: n
};

// The parameters of a plan's GEMM step, its buffers resolved to device addresses.
GemmParams gemm_params(const ops::GemmStep& step, const std::function<CUdeviceptr(const ops::BufferRef&)>& resolve);

// The workspace the original reserved for cuBLASLt's heuristic: 32 MiB.
inline constexpr std::size_t kWorkspaceBytes = 32u << 20;

// Enqueues the GEMM on `stream`, with the first heuristic algorithm for a
// `workspace_bytes` workspace (looked up once per shape). Degenerate
// dimensions (any of M, N, K zero) are Error(InvalidArgument); cuBLASLt
// failures Error(Blas).
void gemm(CudaRuntime& runtime, const GemmParams& params, CUdeviceptr workspace, std::size_t workspace_bytes,
          CUstream stream);

}  // namespace nbits::blas
