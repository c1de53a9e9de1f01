#include "ops/entries.hpp"
#include "ops/errors.hpp"
#include "ops/f16_launches.hpp"
#include "ops/selection.hpp"
#include "ops/step_builder.hpp"

#include <fmt/format.h>

#include <limits>

namespace nbits::ops::detail {
namespace {

// The original's `u32::try_from` on a prefill grid extent.
std::uint32_t prefill_grid(std::size_t extent, const char* dimension, std::size_t value)
{
    const std::size_t tiles = (extent + kGemmF16Tile - 1) / kGemmF16Tile;
    if (tiles > std::numeric_limits<std::uint32_t>::max()) {
        fail_unsupported(fmt::format("{}={} exceeds CUDA prefill grid limits", dimension, value));
    }
    return static_cast<std::uint32_t>(tiles);
}

}  // namespace

void add_f16_gemm(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands, std::size_t m,
                  std::size_t bias_row_stride)
{
    const MatMulNBitsConfig& config = request.config;
    require_half_headers(request.context, "MatMulNBits fp16 prefill GEMM");
    const bool general_block_size = config.block_size != 32;
    const std::int32_t m_i32 = as_i32("M", m);
    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    const std::int32_t bits = as_i32("bits", config.bits);
    const std::int32_t bias_row_stride_i32 = as_i32("bias row stride", bias_row_stride);
    const std::int32_t block_size = as_i32("block_size", config.block_size);
    const std::int32_t blob_size = as_i32("block blob size", config.blob_size());
    const std::uint32_t grid_x = prefill_grid(config.n, "N", config.n);
    const std::uint32_t grid_y = prefill_grid(m, "M", m);

    StepBuilder step(general_block_size ? entry::gemm_f16_general_bs : entry::gemm_f16,
                     "MatMulNBits fp16 prefill GEMM");
    step.pointers({operands.activation, operands.packed, operands.scales, operands.zero_points, operands.bias,
                   operands.output})
        .i32s({m_i32, k, n, k_blocks, bits})
        .flag(operands.scales_fp16)
        .flag(config.fold_bias_post_round && operands.has_bias())
        .i32(bias_row_stride_i32);
    // Only the general-block-size entry derives the packed layout at run time.
    if (general_block_size) {
        step.i32s({block_size, blob_size});
    }
    plan.steps.push_back(step.grid(grid_x, grid_y)
                             .block(static_cast<std::uint32_t>(kGemmF16Tile), static_cast<std::uint32_t>(kGemmF16Tile))
                             .build());
}

void add_rmsnorm_prefill(LaunchPlan& plan, const PlanRequest& request, BufferRef activation, const RmsNormGamma& gamma,
                         BufferRef normalized, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    require_half_headers(request.context, "MatMulNBits fp16 RMS-norm prefill prologue");
    const std::int32_t norm_size = as_i32("K", config.k);
    const std::int32_t num_groups = as_i32("M", m);
    plan.steps.push_back(StepBuilder(entry::rmsnorm_prefill, "MatMulNBits fp16 RMS-norm prefill prologue")
                             .pointers({activation, gamma.tensor, normalized})
                             .i32s({norm_size, num_groups})
                             .flag(gamma.is_half)
                             .f32(config.rmsnorm_epsilon)
                             .grid(static_cast<std::uint32_t>(m))
                             .block(kRmsNormPrefillThreads)
                             .build());
}

void add_silu_mul(LaunchPlan& plan, BufferRef a, BufferRef b, BufferRef y, std::size_t n)
{
    const std::int32_t count = as_i32("SiluMul element count", n);
    // The kernel walks half2 pairs with a grid-stride loop.
    const std::size_t pairs = (n + 1) / 2;
    plan.steps.push_back(StepBuilder(entry::silu_mul_f16, "MatMulNBits fp16 SiluMul")
                             .pointers({a, b, y})
                             .i32(count)
                             .grid(clamped_grid(pairs, kSiluMulThreads))
                             .block(kSiluMulThreads)
                             .build());
}

}  // namespace nbits::ops::detail
