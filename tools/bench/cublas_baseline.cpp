#include "cublas_baseline.hpp"

#include "host_data.hpp"
#include "workload.hpp"

#include "blas/gemm.hpp"
#include "host_half.hpp"

#include <algorithm>
#include <vector>

namespace nbits::bench {
namespace {

// Random fp16 values in [-range, range), tiled over the rest of a buffer: the
// baseline's arithmetic is not checked, so its data only has to be non-zero
// and finite, and uploading a gigabyte of fresh random data would dominate
// the run.
constexpr std::size_t kPatternBytes = std::size_t{8} << 20;

void fill_random_f16(CudaRuntime& runtime, CUdeviceptr base, std::size_t bytes, double range, Rng& rng)
{
    const std::size_t pattern_bytes = std::min(kPatternBytes, bytes) / 2 * 2;
    std::vector<std::uint16_t> pattern(pattern_bytes / 2);
    for (std::uint16_t& value : pattern) {
        value = float_to_half(static_cast<float>(rng.uniform(-range, range)));
    }
    runtime.htod(base, pattern.data(), pattern_bytes);
    tile_device(runtime, base, pattern_bytes, bytes / 2 * 2);
}

}  // namespace

BaselineResult time_cublas_f16(CudaRuntime& runtime, std::size_t m, std::size_t k, std::size_t n, const Method& method,
                               std::uint64_t seed)
{
    const bool decode = m == 1;
    const std::size_t weight_bytes = k * n * 2;
    const std::size_t stride = aligned(weight_bytes);
    const Rotation rotation = method.rotation(runtime, stride, decode);

    Rng rng(seed);
    DeviceBuffer weights(runtime, stride * rotation.copies);
    DeviceBuffer activation(runtime, m * k * 2);
    DeviceBuffer output(runtime, m * n * 2);
    DeviceBuffer workspace(runtime, blas::kWorkspaceBytes);
    fill_random_f16(runtime, weights.get(), stride * rotation.copies, 0.05, rng);
    fill_random_f16(runtime, activation.get(), m * k * 2, 1.0, rng);

    auto enqueue = [&](std::size_t index) {
        blas::GemmParams params;
        params.dtype = DataType::Float16;
        params.a = activation.get();
        params.w = weights.get() + (index % rotation.copies) * stride;
        params.y = output.get();
        params.m = m;
        params.k = k;
        params.n = n;
        blas::gemm(runtime, params, workspace.get(), blas::kWorkspaceBytes, runtime.stream());
    };
    // Handle creation and the first heuristic query happen here, outside any capture.
    enqueue(0);
    runtime.synchronize();

    BaselineResult result;
    result.timing = time_launches(runtime, enqueue, decode, true, rotation, method, &result.note);
    if (result.note.empty()) {
        result.note = rotation.shortfall();
    }
    result.bytes = static_cast<std::uint64_t>(weight_bytes) + m * k * 2 + m * n * 2;
    return result;
}

}  // namespace nbits::bench
