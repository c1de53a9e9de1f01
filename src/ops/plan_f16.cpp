#include "ops/errors.hpp"
#include "ops/f16_launches.hpp"
#include "ops/plan_paths.hpp"
#include "ops/validate.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

constexpr int kZeroPointsSlot = 3;
constexpr int kBiasSlot = 5;
constexpr int kGammaSlot = 6;

constexpr const char* kFp16ScalesRequired =
    "rmsnorm_prologue fusion requires fp16 scales (the fused kernel replicates the fp16 general scales path)";

bool require_fp16_or_fp32_scales(DataType dtype)
{
    if (dtype == DataType::Float16) {
        return true;
    }
    if (dtype == DataType::Float32) {
        return false;
    }
    fail(fmt::format("scales must have dtype Float16 or Float32 for fp16 activations, got {}", to_string(dtype)));
}

void require_bias_elements(const TensorDesc& bias, std::size_t n, std::size_t rows)
{
    // A folded residual epilogue binds a per-token [1, S, N] residual to the bias slot.
    if (bias.numel() != n && bias.numel() != rows * n) {
        fail(fmt::format("bias must have {} elements (broadcast [N]) or {} elements (per-token [1, S, N] residual), "
                         "got {}",
                         n, rows * n, format_shape(bias.shape)));
    }
}

// The fused decode kernels implement only the block-32 int4 and int8 layouts.
void require_block32_for_fused_decode(const MatMulNBitsConfig& config)
{
    if (config.block_size != 32) {
        fail(fmt::format(
            "rmsnorm_prologue fusion at M=1 requires block_size=32, got bits={} and block_size={}. Why: the fused "
            "RMS-norm decode GEMVs implement only the block-32 int4 and int8 layouts of B, and would misread this "
            "one. How to fix: export B with block_size=32, or keep SkipSimplifiedLayerNormalization as its own node "
            "(drop the {} marker)",
            config.bits, config.block_size, kRmsNormPrologueAttr));
    }
}

RmsNormGamma gamma_of(const PlanRequest& request)
{
    return {BufferRef::input(kGammaSlot), request.inputs[kGammaSlot].dtype == DataType::Float16};
}

// M > 1: the tiled GEMM, behind a per-row RMS norm into scratch when fused.
LaunchPlan plan_f16_prefill(const PlanRequest& request, F16Operands operands, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    const TensorDesc* bias = request.optional_input(kBiasSlot);
    // A per-token residual in the bias slot is indexed with row stride N; a broadcast bias with 0.
    const std::size_t bias_row_stride =
        bias != nullptr && bias->numel() == m * config.n && m * config.n != config.n ? config.n : 0;
    LaunchPlan plan;
    if (config.rmsnorm_prologue) {
        set_variant(plan, "gemm_f16_tiled_rmsnorm",
                    fmt::format("M={} prefill: RMS-normalization prologue (SkipSimplifiedLayerNormalization folded) "
                                "into a per-token scratch, then portable 16x16 tiled GEMM with fp32 accumulation; not "
                                "advertised as CUDA-graph capture-safe",
                                m));
        plan.scratch_bytes.push_back(m * config.k * 2);
        add_rmsnorm_prefill(plan, request, BufferRef::input(0), gamma_of(request), BufferRef::scratch(0), m);
        operands.activation = BufferRef::scratch(0);
        add_f16_gemm(plan, request, operands, m, bias_row_stride);
        return plan;
    }
    set_variant(plan, "gemm_f16_tiled",
                fmt::format("M={} prefill: fp16 activation, bits={}, block_size={}, zero_points={}, scales={} → "
                            "portable 16x16 CUDA-core tiled GEMM with fp32 accumulation; not advertised as "
                            "CUDA-graph capture-safe",
                            m, config.bits, config.block_size, operands.has_zero_points(),
                            operands.scales_fp16 ? "fp16" : "fp32"));
    add_f16_gemm(plan, request, operands, m, bias_row_stride);
    return plan;
}

// M == 1: the fused RMS-norm GEMVs, the int8 block-32 GEMV, or the int4 ladder.
LaunchPlan plan_f16_decode(const PlanRequest& request, const F16Operands& operands)
{
    const MatMulNBitsConfig& config = request.config;
    LaunchPlan plan;
    if (config.rmsnorm_prologue) {
        const bool int8 = config.bits == 8 && config.block_size == 32;
        if (!int8) {
            require_block32_for_fused_decode(config);
        }
        set_variant(plan, int8 ? "gemv_int8_f16_scales_f16_rmsnorm" : "gemv_f16_scales_f16_rmsnorm",
                    fmt::format("M==1 decode: fp16 activation, bits={}, block_size=32, fp16 scales, zero_points={} → "
                                "{} GEMV with fused RMS-normalization prologue (SkipSimplifiedLayerNormalization "
                                "folded)",
                                config.bits, operands.has_zero_points(), int8 ? "int8" : "general"));
        add_rmsnorm_gemv(plan, request, operands, gamma_of(request));
    } else if (config.bits == 8 && config.block_size == 32) {
        set_variant(plan, "gemv_int8_f16",
                    fmt::format("M==1 decode: fp16 activation, bits=8, block_size=32, zero_points={} → direct "
                                "capture-safe GEMV",
                                operands.has_zero_points()));
        add_int8_f16_gemv(plan, request, operands);
    } else {
        add_f16_gemv(plan, request, operands);
    }
    return plan;
}

}  // namespace

LaunchPlan plan_f16(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const std::vector<TensorDesc>& inputs = request.inputs;
    require_dtype("A", inputs[0].dtype, DataType::Float16);
    require_dtype("B", inputs[1].dtype, DataType::Uint8);
    const bool scales_fp16 = require_fp16_or_fp32_scales(inputs[2].dtype);
    require_dtype("Y", request.output().dtype, DataType::Float16);
    const std::size_t m = require_activation_and_output(inputs[0], request.output(), config.k, config.n);
    const TensorDesc* zero_points = require_quantized_weights(request);
    const TensorDesc* g_idx = request.optional_input(4);
    const TensorDesc* bias = request.optional_input(kBiasSlot);
    if (bias != nullptr) {
        require_dtype("bias", bias->dtype, DataType::Float16);
        require_bias_elements(*bias, config.n, m);
    }
    const TensorDesc* gamma = request.optional_input(kGammaSlot);
    if (config.rmsnorm_prologue) {
        if (gamma == nullptr) {
            fail("rmsnorm_prologue fusion requires the normalization weight at input 6");
        }
        require_gamma_dtype(gamma->dtype);
        require_shape("gamma", gamma->shape, {config.k});
        require_rmsnorm_width(config.k);
    }
    require_contiguous({{"A", inputs[0].is_contiguous()},
                        {"B", inputs[1].is_contiguous()},
                        {"scales", inputs[2].is_contiguous()},
                        {"zero_points", contiguous_or_absent(zero_points)},
                        {"bias", contiguous_or_absent(bias)},
                        {"gamma", contiguous_or_absent(gamma)},
                        {"Y", request.output().is_contiguous()}});

    std::uint64_t flops = matmul_flops(m, config.n, config.k, bias != nullptr);
    if (config.rmsnorm_prologue) {
        flops = with_rmsnorm_flops(flops, m, config.k);
    }
    if (g_idx != nullptr) {
        fail_unsupported(
            "MatMulNBits CUDA fp16 activations do not support g_idx. Why: the block-32 fp16 kernels map each K "
            "block directly to its scale and zero point and do not implement group remapping. How to fix: omit "
            "g_idx, provide f32 activations, or select another execution provider");
    }
    // At M = 1 the original refuses fp32 scales here; nbits refuses them at every M,
    // since the prefill GEMM would read them as fp16.
    if (config.rmsnorm_prologue && !scales_fp16) {
        fail(kFp16ScalesRequired);
    }
    // The original would take the decode path and write N outputs into an empty Y.
    if (m == 0) {
        LaunchPlan plan =
            empty_plan("matmul_nbits_f16_empty", "M=0 fp16 MatMulNBits has an empty output and requires no CUDA launch");
        plan.flops = flops;
        return plan;
    }

    F16Operands operands;
    operands.zero_points = optional_ref(zero_points, kZeroPointsSlot);
    operands.bias = optional_ref(bias, kBiasSlot);
    operands.scales_fp16 = scales_fp16;
    LaunchPlan plan = m > 1 ? plan_f16_prefill(request, operands, m) : plan_f16_decode(request, operands);
    plan.flops = flops;
    plan.capture_safe = m == 1;
    return plan;
}

}  // namespace nbits::ops::detail
