#include "ops/f32_launches.hpp"

#include "ops/entries.hpp"
#include "ops/errors.hpp"
#include "ops/selection.hpp"
#include "ops/step_builder.hpp"

#include <fmt/format.h>

#include <limits>

namespace nbits::ops::detail {
namespace {

constexpr int kZeroPointsSlot = 3;
constexpr int kGroupIndexSlot = 4;
constexpr int kBiasSlot = 5;

BufferRef zero_points_ref(const PlanRequest& request)
{
    return optional_ref(request.optional_input(kZeroPointsSlot), kZeroPointsSlot);
}

BufferRef bias_ref(const PlanRequest& request) { return optional_ref(request.optional_input(kBiasSlot), kBiasSlot); }

// (A, B, scales, zero_points, bias, Y): the head of every f32 GEMV's parameter list.
std::vector<BufferRef> gemv_pointers(const PlanRequest& request)
{
    return {BufferRef::input(0), BufferRef::input(1), BufferRef::input(2), zero_points_ref(request),
            bias_ref(request), BufferRef::output(0)};
}

// The scalars of the block-general f32 entries, converted in the original's
// order: K, N, block_size, K blocks, blob size, zero-point row size.
struct BlockScalars {
    std::int32_t k, n, block_size, k_blocks, blob_size, zp_row_bytes;
};

BlockScalars block_scalars(const MatMulNBitsConfig& config)
{
    BlockScalars s{};
    s.k = as_i32("K", config.k);
    s.n = as_i32("N", config.n);
    s.block_size = as_i32("block_size", config.block_size);
    s.k_blocks = as_i32("K block count", config.k_blocks());
    s.blob_size = as_i32("block blob size", config.blob_size());
    s.zp_row_bytes = as_i32("zero-point row size", config.zp_row_bytes());
    return s;
}

// The persistent accuracy-4 workspace: padded_k int8 activations, then the per-block scales.
BufferRef quantized_activation() { return BufferRef::workspace(0); }
BufferRef activation_scales(const MatMulNBitsConfig& config) { return BufferRef::workspace(config.padded_k()); }

}  // namespace

void add_f32_fixed_layout_gemv(LaunchPlan& plan, const PlanRequest& request, const char* entry, const char* what)
{
    const MatMulNBitsConfig& config = request.config;
    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    plan.steps.push_back(StepBuilder(entry, what)
                             .pointers(gemv_pointers(request))
                             .i32s({k, n, k_blocks})
                             .grid(static_cast<std::uint32_t>(config.n))
                             .block(kBlockThreads)
                             .build());
}

void add_f32_gemv(LaunchPlan& plan, const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const BlockScalars s = block_scalars(config);
    const std::int32_t bits = as_i32("bits", config.bits);
    plan.steps.push_back(StepBuilder(entry::gemv_f32, "MatMulNBits f32 GEMV")
                             .pointers(gemv_pointers(request))
                             .i32s({s.k, s.n, s.block_size, s.k_blocks, s.blob_size, s.zp_row_bytes, bits})
                             .grid(static_cast<std::uint32_t>(config.n))
                             .block(kBlockThreads)
                             .build());
}

void add_accuracy4_gemv(LaunchPlan& plan, const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const Capabilities& device = request.context.capabilities;
    const bool stage64 = use_accuracy4_stage64(config.n, device.multiprocessor_count, device.compute_major,
                                               device.compute_minor, device.max_shared_memory_per_block_optin);
    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    const std::int32_t padded_k = as_i32("padded K", config.padded_k());

    // One warp quantizes one 32-wide K block.
    plan.steps.push_back(
        StepBuilder(entry::quantize_accuracy4_block32, "MatMulNBits accuracy_level=4 quantization")
            .pointers({BufferRef::input(0), quantized_activation(), activation_scales(config)})
            .i32s({k, padded_k})
            .grid(static_cast<std::uint32_t>(config.padded_k() / 32))
            .block(32)
            .build());
    plan.steps.push_back(
        StepBuilder(stage64 ? entry::gemv_accuracy4_block32_stage64 : entry::gemv_accuracy4_block32,
                    "MatMulNBits accuracy_level=4 GEMV")
            .pointers({quantized_activation(), activation_scales(config), BufferRef::input(1), BufferRef::input(2),
                       bias_ref(request), BufferRef::output(0)})
            .i32s({k, n, k_blocks})
            .grid(grid_extent(config.n, kAccuracy4ColumnsPerBlock))
            .block(kAccuracy4GemvThreads)
            .shared_memory(stage64 ? kAccuracy4Stage64SharedBytes : kAccuracy4SharedBytes, false)
            .build());
}

void add_accuracy4_gemv_blockwise(LaunchPlan& plan, const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const BlockScalars s = block_scalars(config);
    const std::int32_t padded_k = as_i32("padded K", config.padded_k());

    // One warp quantizes one K block of any width.
    plan.steps.push_back(
        StepBuilder(entry::quantize_accuracy4_blockwise, "MatMulNBits accuracy_level=4 blockwise quantization")
            .pointers({BufferRef::input(0), quantized_activation(), activation_scales(config)})
            .i32s({s.k, s.block_size, padded_k})
            .grid(static_cast<std::uint32_t>(config.k_blocks()))
            .block(32)
            .build());
    const std::uint32_t warps = select_accuracy4_gemv_warps(
        config.n, request.context.capabilities.multiprocessor_count, request.context.overrides);
    plan.steps.push_back(
        StepBuilder(entry::gemv_accuracy4_blockwise, "MatMulNBits accuracy_level=4 blockwise GEMV")
            .pointers({quantized_activation(), activation_scales(config), BufferRef::input(1), BufferRef::input(2),
                       zero_points_ref(request), bias_ref(request), BufferRef::output(0)})
            .i32s({s.k, s.n, s.k_blocks, s.block_size, s.blob_size, s.zp_row_bytes})
            .grid(grid_extent(config.n, warps))
            .block(warps * 32)
            .build());
}

void add_accuracy4_tiled(LaunchPlan& plan, const PlanRequest& request, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    if (config.n != 0 && m > std::numeric_limits<std::size_t>::max() / config.n) {
        fail_unsupported(fmt::format("accuracy_level=4 output size {} * {} overflows usize", m, config.n));
    }
    const std::uint32_t blocks = clamped_grid(m * config.n, kBlockThreads);
    const std::int32_t m_i32 = as_i32("M", m);
    const BlockScalars s = block_scalars(config);
    plan.steps.push_back(StepBuilder(entry::accuracy4_tiled, "MatMulNBits accuracy_level=4")
                             .pointers(gemv_pointers(request))
                             .i32s({m_i32, s.k, s.n, s.block_size, s.k_blocks, s.blob_size, s.zp_row_bytes})
                             .grid(blocks)
                             .block(kBlockThreads)
                             .build());
}

void add_dequant_gemm(LaunchPlan& plan, const PlanRequest& request, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    const BlockScalars s = block_scalars(config);
    const std::int32_t bits = as_i32("bits", config.bits);

    const int weight = static_cast<int>(plan.scratch_bytes.size());
    plan.scratch_bytes.push_back(config.k * config.n * sizeof(float));
    const int workspace = static_cast<int>(plan.scratch_bytes.size());
    plan.scratch_bytes.push_back(blas::kWorkspaceBytes);

    plan.steps.push_back(StepBuilder(entry::dequant_f32, "MatMulNBits dequant")
                             .pointers({BufferRef::input(1), BufferRef::input(2), zero_points_ref(request),
                                        optional_ref(request.optional_input(kGroupIndexSlot), kGroupIndexSlot),
                                        BufferRef::scratch(weight)})
                             .i32s({s.k, s.n, s.block_size, s.k_blocks, s.blob_size, s.zp_row_bytes, bits})
                             .grid(clamped_grid(config.k * config.n, kBlockThreads))
                             .block(kBlockThreads)
                             .build());
    GemmStep gemm;
    gemm.dtype = blas::GemmDtype::F32;
    gemm.a = BufferRef::input(0);
    gemm.w = BufferRef::scratch(weight);
    gemm.y = BufferRef::output(0);
    gemm.bias = bias_ref(request);
    gemm.m = m;
    gemm.k = config.k;
    gemm.n = config.n;
    gemm.workspace = BufferRef::scratch(workspace);
    gemm.workspace_bytes = blas::kWorkspaceBytes;
    plan.steps.push_back(gemm);
    // The scratch is freed right after the plan; the original waits for the GEMM first.
    plan.synchronize_after = true;
}

}  // namespace nbits::ops::detail
