#include "nbits/blas/gemm.hpp"

#include "nbits/error.hpp"
#include "nbits/runtime/cuda_runtime.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

#include <memory>

namespace nbits::blas {
namespace {

void check(cublasStatus_t status, const char* what)
{
    if (status != CUBLAS_STATUS_SUCCESS) {
        throw Error(ErrorKind::Blas, fmt::format("cuBLASLt {} failed: {} ({})", what, cublasLtGetStatusName(status),
                                                 cublasLtGetStatusString(status)));
    }
}

struct DescDeleter {
    void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
    void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
    void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

Layout layout(cudaDataType_t type, std::uint64_t rows, std::uint64_t columns, std::int64_t leading)
{
    cublasLtMatrixLayout_t raw = nullptr;
    check(cublasLtMatrixLayoutCreate(&raw, type, rows, columns, leading), "matrix layout creation");
    return Layout(raw);
}

}  // namespace

void gemm(CudaRuntime& runtime, const GemmParams& p, CUdeviceptr workspace, std::size_t workspace_bytes)
{
    if (p.m == 0 || p.n == 0 || p.k == 0) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("degenerate GEMM dims M={} N={} K={}: cuBLASLt needs every dimension positive",
                                p.m, p.n, p.k));
    }
    const cudaDataType_t type = p.dtype == GemmDtype::F32 ? CUDA_R_32F : CUDA_R_16F;
    cublasLtMatmulDesc_t raw_desc = nullptr;
    check(cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor creation");
    Desc desc(raw_desc);
    if (p.bias != 0) {
        const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        check(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
              "bias epilogue");
        const void* bias = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(p.bias));
        check(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
              "bias pointer");
    }
    // Row-major through column-major cuBLASLt: Y^T[N,M] = W^T[N,K] · A^T[K,M].
    const Layout w_layout = layout(type, p.n, p.k, static_cast<std::int64_t>(p.n));
    const Layout a_layout = layout(type, p.k, p.m, static_cast<std::int64_t>(p.k));
    const Layout y_layout = layout(type, p.n, p.m, static_cast<std::int64_t>(p.n));

    cublasLtMatmulPreference_t raw_preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&raw_preference), "preference creation");
    Preference preference(raw_preference);
    const std::uint64_t max_workspace = workspace_bytes;
    check(cublasLtMatmulPreferenceSetAttribute(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &max_workspace, sizeof(max_workspace)),
          "workspace preference");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    cublasLtHandle_t handle = runtime.blas();
    check(cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), w_layout.get(), a_layout.get(), y_layout.get(),
                                         y_layout.get(), preference.get(), 1, &heuristic, &found),
          "algorithm heuristic");
    if (found == 0) {
        throw Error(ErrorKind::Blas, fmt::format("cuBLASLt found no algorithm for the M={} N={} K={} GEMM", p.m,
                                                 p.n, p.k));
    }
    const float alpha = 1.0f;
    const float beta = 0.0f;
    auto pointer = [](CUdeviceptr value) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(value)); };
    CudaRuntime::ScopedContext scope(runtime);
    check(cublasLtMatmul(handle, desc.get(), &alpha, pointer(p.w), w_layout.get(), pointer(p.a), a_layout.get(),
                         &beta, pointer(p.y), y_layout.get(), pointer(p.y), y_layout.get(), &heuristic.algo,
                         pointer(workspace), workspace_bytes, reinterpret_cast<cudaStream_t>(runtime.stream())),
          "matmul");
}

}  // namespace nbits::blas
