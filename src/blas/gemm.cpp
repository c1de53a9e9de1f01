#include "blas/gemm.hpp"

#include "nbits/error.hpp"
#include "runtime/internals.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

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

struct AlgorithmKey {
    cublasLtHandle_t handle;
    DataType dtype;
    DataType y_dtype;
    bool weights_nk;
    bool bias;
    std::size_t m, k, n, ldy, workspace_bytes;
    bool operator<(const AlgorithmKey& o) const
    {
        return std::tie(handle, dtype, y_dtype, weights_nk, bias, m, k, n, ldy, workspace_bytes) <
               std::tie(o.handle, o.dtype, o.y_dtype, o.weights_nk, o.bias, o.m, o.k, o.n, o.ldy, o.workspace_bytes);
    }
};

// The heuristic's choice per shape: asking cuBLASLt costs more host time than
// a decode kernel runs.
class AlgorithmCache {
public:
    std::optional<cublasLtMatmulAlgo_t> find(const AlgorithmKey& key)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto hit = algorithms_.find(key);
        return hit == algorithms_.end() ? std::nullopt : std::optional<cublasLtMatmulAlgo_t>(hit->second);
    }
    void remember(const AlgorithmKey& key, const cublasLtMatmulAlgo_t& algorithm)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (algorithms_.size() >= kMaxEntries) {
            algorithms_.clear();
        }
        algorithms_.emplace(key, algorithm);
    }

private:
    static constexpr std::size_t kMaxEntries = 1024;
    std::mutex mutex_;
    std::map<AlgorithmKey, cublasLtMatmulAlgo_t> algorithms_;
};

AlgorithmCache& algorithm_cache()
{
    static AlgorithmCache cache;
    return cache;
}

cudaDataType_t cuda_type(DataType dtype)
{
    switch (dtype) {
    case DataType::Float32: return CUDA_R_32F;
    case DataType::Float16: return CUDA_R_16F;
    case DataType::BFloat16: return CUDA_R_16BF;
    default: break;
    }
    throw Error(ErrorKind::Internal, fmt::format("cuBLASLt GEMM of dtype {} is not supported", to_string(dtype)));
}

}  // namespace

GemmParams gemm_params(const ops::GemmStep& step, const std::function<CUdeviceptr(const ops::BufferRef&)>& resolve)
{
    GemmParams params;
    params.dtype = step.dtype;
    params.y_dtype = step.y_dtype;
    params.weights_nk = step.weight_layout == ops::GemmStep::WeightLayout::NxK;
    params.a = resolve(step.a);
    params.w = resolve(step.w);
    params.y = resolve(step.y);
    params.bias = resolve(step.bias);
    params.m = step.m;
    params.k = step.k;
    params.n = step.n;
    params.ldy = step.ldy;
    return params;
}

void gemm(CudaRuntime& runtime, const GemmParams& p, CUdeviceptr workspace, std::size_t workspace_bytes,
          CUstream stream)
{
    if (p.m == 0 || p.n == 0 || p.k == 0) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("degenerate GEMM dims M={} N={} K={}: cuBLASLt needs every dimension positive",
                                p.m, p.n, p.k));
    }
    const cudaDataType_t type = cuda_type(p.dtype);
    const std::size_t ldy = p.ldy != 0 ? p.ldy : p.n;
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
    // Row-major through column-major cuBLASLt: Y^T[N,M] = op(W)[N,K] · A^T[K,M]. A row-major [K, N] W is a
    // column-major N x K matrix; a row-major [N, K] W is a column-major K x N matrix, transposed.
    if (p.weights_nk) {
        const cublasOperation_t transpose = CUBLAS_OP_T;
        check(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
              "weight transpose");
    }
    const Layout w_layout = p.weights_nk ? layout(type, p.k, p.n, static_cast<std::int64_t>(p.k))
                                         : layout(type, p.n, p.k, static_cast<std::int64_t>(p.n));
    const Layout a_layout = layout(type, p.k, p.m, static_cast<std::int64_t>(p.k));
    const DataType y_dtype = p.y_dtype.value_or(p.dtype);
    const Layout y_layout = layout(cuda_type(y_dtype), p.n, p.m, static_cast<std::int64_t>(ldy));

    cublasLtHandle_t handle = runtime.internals().blas();
    const AlgorithmKey key{handle, p.dtype, y_dtype, p.weights_nk, p.bias != 0, p.m, p.k, p.n, ldy, workspace_bytes};
    std::optional<cublasLtMatmulAlgo_t> algorithm = algorithm_cache().find(key);
    if (!algorithm) {
        cublasLtMatmulPreference_t raw_preference = nullptr;
        check(cublasLtMatmulPreferenceCreate(&raw_preference), "preference creation");
        Preference preference(raw_preference);
        const std::uint64_t max_workspace = workspace_bytes;
        check(cublasLtMatmulPreferenceSetAttribute(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &max_workspace, sizeof(max_workspace)),
              "workspace preference");
        cublasLtMatmulHeuristicResult_t heuristic{};
        int found = 0;
        check(cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), w_layout.get(), a_layout.get(), y_layout.get(),
                                             y_layout.get(), preference.get(), 1, &heuristic, &found),
              "algorithm heuristic");
        if (found == 0) {
            throw Error(ErrorKind::Blas, fmt::format("cuBLASLt found no algorithm for the M={} N={} K={} GEMM", p.m,
                                                     p.n, p.k));
        }
        algorithm = heuristic.algo;
        algorithm_cache().remember(key, *algorithm);
    }
    const float alpha = 1.0f;
    const float beta = 0.0f;
    auto pointer = [](CUdeviceptr value) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(value)); };
    CudaRuntime::Internals::ScopedContext scope(runtime);
    check(cublasLtMatmul(handle, desc.get(), &alpha, pointer(p.w), w_layout.get(), pointer(p.a), a_layout.get(),
                         &beta, pointer(p.y), y_layout.get(), pointer(p.y), y_layout.get(), &*algorithm,
                         pointer(workspace), workspace_bytes, reinterpret_cast<cudaStream_t>(stream)),
          "matmul");
}

}  // namespace nbits::blas
