#include "ops/entries.hpp"
#include "ops/errors.hpp"
#include "ops/f16_launches.hpp"
#include "ops/plan_paths.hpp"
#include "ops/selection.hpp"
#include "ops/step_builder.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

// (A, B, scales, zero_points, bias, Y): the head of every fp16 GEMV's parameter list.
std::vector<BufferRef> gemv_pointers(const F16Operands& o)
{
    return {o.activation, o.packed, o.scales, o.zero_points, o.bias, o.output};
}

// The fused RMS-norm GEMVs take gamma between the zero points and the bias.
std::vector<BufferRef> rmsnorm_gemv_pointers(const F16Operands& o, const RmsNormGamma& gamma)
{
    return {o.activation, o.packed, o.scales, o.zero_points, gamma.tensor, o.bias, o.output};
}

bool bias_post_round(const PlanRequest& request, const F16Operands& operands)
{
    return request.config.fold_bias_post_round && operands.has_bias();
}

// The tuned block-32 entry of the general (not down-projection) class.
const char* general_block32_entry(const F16Operands& operands, bool use_splitk)
{
    if (!operands.scales_fp16) {
        return entry::gemv_f16;
    }
    if (!operands.has_zero_points()) {
        return entry::gemv_f16_scales_f16;
    }
    return use_splitk ? entry::gemv_f16_scales_f16_zp_splitk : entry::gemv_f16_scales_f16_zp;
}

const char* gemv_variant_name(const MatMulNBitsConfig& config, F16GemvVariant variant)
{
    if (config.block_size != 32) {
        return "gemv_f16_general_bs";
    }
    return variant == F16GemvVariant::DownProjection ? "gemv_f16_down_projection" : "gemv_f16_general";
}

}  // namespace

std::uint32_t staged_activation_bytes(const MatMulNBitsConfig& config)
{
    return static_cast<std::uint32_t>(config.k * 2);
}

void add_f16_gemv(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands)
{
    const MatMulNBitsConfig& config = request.config;
    const F16GemvSelection selection = select_f16_gemv_variant(config.k, config.n, config.block_size,
                                                               operands.scales_fp16, operands.has_zero_points());
    set_variant(plan, gemv_variant_name(config, selection.variant),
                fmt::format("fp16-activation x int{} M==1 decode GEMV: block_size={}; zero_points={}; {}",
                            config.bits, config.block_size, operands.has_zero_points(), selection.reason));
    record_bias_stage(plan, operands.has_bias(), config.fold_bias_post_round);
    require_half_headers(request.context, "MatMulNBits fp16 GEMV");

    // Split-K fills the grid of the grid-starved asymmetric block-32 GEMV; it
    // needs whole 256-wide K steps and the 256-thread block's warps.
    const bool use_splitk = config.block_size == 32 && operands.scales_fp16 && operands.has_zero_points() &&
                            selection.variant == F16GemvVariant::General && config.k % kSplitKStep == 0 &&
                            f16_gemv_uses_large_block(config.k, config.n);
    const DownColumns down =
        choose_down_columns(config.n, request.context.capabilities.multiprocessor_count, request.context.overrides);
    const bool general_block_size = config.block_size != 32;
    const char* entry_name = general_block_size ? entry::gemv_f16_general_bs
                             : selection.variant == F16GemvVariant::DownProjection
                                 ? down.entry
                                 : general_block32_entry(operands, use_splitk);

    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t block_size = as_i32("block_size", config.block_size);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    const std::int32_t blob_size = as_i32("block blob size", config.blob_size());
    const std::int32_t zp_row_bytes = as_i32("zero-point row byte count", config.zp_row_bytes());
    const std::int32_t bits = as_i32("bits", config.bits);

    std::uint32_t threads = kDownThreads;
    std::size_t columns_per_block = down.columns;
    if (selection.variant == F16GemvVariant::General) {
        threads = f16_gemv_threads(config.k, config.n);
        columns_per_block = threads / 32 / (use_splitk ? kSplitK : 1);
    }
    StepBuilder step(entry_name, fmt::format("MatMulNBits fp16 GEMV ({})", selection.reason));
    step.pointers(gemv_pointers(operands))
        .i32s({k, n, block_size, k_blocks, blob_size, zp_row_bytes})
        .flag(operands.scales_fp16)
        .flag(bias_post_round(request, operands));
    // Only the general-block-size entry selects the int4/int8 layout at run time.
    if (general_block_size) {
        step.i32(bits);
    }
    plan.steps.push_back(step.grid(grid_extent(config.n, columns_per_block)).block(threads).build());
}

void add_rmsnorm_gemv(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands,
                      const RmsNormGamma& gamma)
{
    const MatMulNBitsConfig& config = request.config;
    const bool int8 = config.bits == 8;
    const char* what =
        int8 ? "MatMulNBits int8 fp16 RMS-norm-prologue GEMV" : "MatMulNBits fp16 RMS-norm-prologue GEMV";
    require_half_headers(request.context, what);
    record_bias_stage(plan, operands.has_bias(), config.fold_bias_post_round);
    const char* entry_name = int8 ? (operands.has_zero_points() ? entry::gemv_int8_f16_rmsnorm_zp
                                                                : entry::gemv_int8_f16_rmsnorm)
                                  : (operands.has_zero_points() ? entry::gemv_f16_rmsnorm_zp : entry::gemv_f16_rmsnorm);
    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    StepBuilder step(entry_name, what);
    step.pointers(rmsnorm_gemv_pointers(operands, gamma)).i32s({k, n, k_blocks});
    // The int8 entry bakes in the block-32 byte layout; the int4 one takes it.
    if (!int8) {
        const std::int32_t blob_size = as_i32("block blob size", config.blob_size());
        const std::int32_t zp_row_bytes = as_i32("zero-point row byte count", config.zp_row_bytes());
        step.i32s({blob_size, zp_row_bytes});
    }
    const std::uint32_t threads = f16_gemv_threads(config.k, config.n);
    plan.steps.push_back(step.flag(bias_post_round(request, operands))
                             .flag(gamma.is_half)
                             .f32(config.rmsnorm_epsilon)
                             .grid(grid_extent(config.n, threads / 32))
                             .block(threads)
                             .shared_memory(staged_activation_bytes(config), true)
                             .build());
}

void add_int8_f16_gemv(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands)
{
    const MatMulNBitsConfig& config = request.config;
    require_half_headers(request.context, "MatMulNBits int8 fp16 GEMV");
    // Split-K only for asymmetric weights: symmetric int8 keeps the
    // byte-identical single-warp kernel.
    const bool use_splitk = operands.has_zero_points() && config.k % kSplitKStep == 0 &&
                            f16_gemv_uses_large_block(config.k, config.n);
    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    const std::uint32_t threads = f16_gemv_threads(config.k, config.n);
    const std::size_t columns_per_block = threads / 32 / (use_splitk ? kSplitK : 1);
    plan.steps.push_back(StepBuilder(use_splitk ? entry::gemv_int8_f16_splitk : entry::gemv_int8_f16,
                                     "MatMulNBits int8 fp16 GEMV")
                             .pointers(gemv_pointers(operands))
                             .i32s({k, n, k_blocks})
                             .flag(operands.scales_fp16)
                             .flag(bias_post_round(request, operands))
                             .grid(grid_extent(config.n, columns_per_block))
                             .block(threads)
                             .build());
}

}  // namespace nbits::ops::detail
