#include "ops/errors.hpp"
#include "ops/entries.hpp"
#include "ops/f32_launches.hpp"
#include "ops/plan_paths.hpp"
#include "ops/validate.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

// The original copies g_idx to the host and checks every group index.
void require_group_indices_in_range(const PlanRequest& request, const TensorDesc& g_idx)
{
    const MatMulNBitsConfig& config = request.config;
    if (!request.context.read_g_idx) {
        fail(
            "g_idx (input 4) must be read from the device for its range check, but this plan was built from tensor "
            "descriptors alone. Why: an out-of-range group index would make the dequantization read outside "
            "scales. How to fix: plan with the tensors themselves (MatMulNBits::plan_tensors or run), or set "
            "PlanContext::read_g_idx");
    }
    const std::vector<std::int32_t> groups = request.context.read_g_idx(g_idx);
    const std::size_t k_blocks = config.k_blocks();
    for (std::size_t index = 0; index < groups.size(); ++index) {
        const std::int32_t group = groups[index];
        if (group < 0 || static_cast<std::size_t>(group) >= k_blocks) {
            fail(fmt::format("g_idx[{}]={} is outside 0..{}", index, group, k_blocks));
        }
    }
}

void validate_group_indices(const PlanRequest& request, const TensorDesc& g_idx)
{
    const MatMulNBitsConfig& config = request.config;
    require_dtype("g_idx", g_idx.dtype, DataType::Int32);
    if (!g_idx.is_contiguous()) {
        fail("g_idx must be contiguous on the CUDA execution provider");
    }
    if (g_idx.shape != Shape{config.k} && g_idx.shape != Shape{config.padded_k()}) {
        fail(fmt::format("g_idx must have shape [{}] or [{}], got {}", config.k, config.padded_k(),
                         format_shape(g_idx.shape)));
    }
    require_group_indices_in_range(request, g_idx);
}

// The M == 1 decode ladder without g_idx, in the original's order.
LaunchPlan plan_f32_decode(const PlanRequest& request, bool has_zero_points)
{
    const MatMulNBitsConfig& config = request.config;
    LaunchPlan plan;
    if (config.bits == 4 && config.block_size == 128 && has_zero_points) {
        set_variant(plan, "gemv_int4_f32_block128",
                    "M==1 decode: bits=4, block_size=128, asymmetric → specialized shift-indexed int4 f32 GEMV "
                    "(bit-identical to the generic path)");
        add_f32_fixed_layout_gemv(plan, request, entry::gemv_int4_f32_block128,
                                  "MatMulNBits int4 f32 block-128 GEMV");
    } else if (config.bits == 8 && config.block_size == 128 && has_zero_points) {
        set_variant(plan, "gemv_int8_f32_block128",
                    "M==1 decode: bits=8, block_size=128, asymmetric → specialized shift-indexed int8 f32 GEMV "
                    "(bit-identical to the generic path)");
        add_f32_fixed_layout_gemv(plan, request, entry::gemv_int8_f32_block128,
                                  "MatMulNBits int8 f32 block-128 GEMV");
    } else if (config.bits == 8 && config.block_size == 32) {
        set_variant(plan, "gemv_int8_f32", "M==1 decode: bits=8, block_size=32 → direct capture-safe f32 GEMV");
        add_f32_fixed_layout_gemv(plan, request, entry::gemv_int8_f32, "MatMulNBits int8 f32 GEMV");
    } else if (config.bits == 8) {
        set_variant(plan, "gemv_f32_general_bs_int8",
                    fmt::format("M==1 decode: bits=8, block_size={} → model-agnostic f32 GEMV (fp32 accumulation, "
                                "any power-of-two block_size)",
                                config.block_size));
        add_f32_gemv(plan, request);
    } else if (config.accuracy_level == 4 && config.block_size == 32 && !has_zero_points) {
        set_variant(plan, "gemv_accuracy4_int8",
                    "M==1 decode: accuracy_level==4, block_size==32, symmetric (no zero_points) → "
                    "int8-quantized-activation capture-safe GEMV");
        add_accuracy4_gemv(plan, request);
    } else if (config.accuracy_level == 4 && config.block_size == 32) {
        set_variant(plan, "gemv_accuracy4_blockwise_int8",
                    "M==1 decode: bits=4, accuracy_level==4, block_size=32 → int8-quantized activation quantized "
                    "ONCE then parallelized blockwise GEMV (grid filled from the device SM count; bit-identical to "
                    "the tiled accuracy4 GEMM)");
        add_accuracy4_gemv_blockwise(plan, request);
    } else if (config.accuracy_level == 4) {
        set_variant(plan, "gemv_f32_general_bs_int4",
                    fmt::format("M==1 decode: bits=4, accuracy_level==4, block_size={} (≠32) → model-agnostic f32 "
                                "GEMV (fp32 activations, higher precision than the int8-activation reference)",
                                config.block_size));
        add_f32_gemv(plan, request);
    } else {
        set_variant(plan, "gemv_f32",
                    fmt::format("M==1 decode: accuracy_level={} (non-accuracy4) → direct f32 GEMV",
                                config.accuracy_level));
        add_f32_gemv(plan, request);
    }
    return plan;
}

}  // namespace

LaunchPlan plan_f32(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const std::vector<TensorDesc>& inputs = request.inputs;
    require_dtype("A", inputs[0].dtype, DataType::Float32);
    require_dtype("B", inputs[1].dtype, DataType::Uint8);
    require_dtype("scales", inputs[2].dtype, DataType::Float32);
    require_dtype("Y", request.output().dtype, DataType::Float32);
    const std::size_t m = require_activation_and_output(inputs[0], request.output(), config.k, config.n);
    const TensorDesc* zero_points = require_quantized_weights(request);
    const TensorDesc* g_idx = request.optional_input(4);
    if (g_idx != nullptr) {
        validate_group_indices(request, *g_idx);
    }
    const TensorDesc* bias = request.optional_input(5);
    if (bias != nullptr) {
        require_dtype("bias", bias->dtype, DataType::Float32);
        require_shape("bias", bias->shape, {config.n});
    }
    require_contiguous({{"A", inputs[0].is_contiguous()},
                        {"B", inputs[1].is_contiguous()},
                        {"scales", inputs[2].is_contiguous()},
                        {"zero_points", contiguous_or_absent(zero_points)},
                        {"g_idx", contiguous_or_absent(g_idx)},
                        {"bias", contiguous_or_absent(bias)},
                        {"Y", request.output().is_contiguous()}});

    const std::uint64_t flops = matmul_flops(m, config.n, config.k, bias != nullptr);
    if (m == 0) {
        LaunchPlan plan = empty_plan(
            "matmul_nbits_f32_empty",
            "M=0 f32 MatMulNBits has an empty output and requires no CUDA launch (the dequantize + cuBLASLt path "
            "would reject the degenerate GEMM)");
        plan.flops = flops;
        return plan;
    }
    LaunchPlan plan;
    if (m == 1 && g_idx == nullptr) {
        plan = plan_f32_decode(request, zero_points != nullptr);
    } else if (config.bits == 4 && config.accuracy_level == 4 && config.block_size == 32 && g_idx == nullptr) {
        set_variant(plan, "gemm_tiled_accuracy4",
                    fmt::format("M={} (GEMV requires M==1), accuracy_level==4, block_size=32, no g_idx → tiled "
                                "accuracy4 GEMM (int8-quantized activations)",
                                m));
        add_accuracy4_tiled(plan, request, m);
    } else {
        set_variant(plan, "dequant_cublas_gemm",
                    fmt::format("M={}, accuracy_level={}, g_idx={} → dequantize weights to f32 then cuBLAS GEMM "
                                "(general prefill / grouped path)",
                                m, config.accuracy_level, g_idx != nullptr));
        add_dequant_gemm(plan, request, m);
    }
    plan.flops = flops;
    plan.capture_safe = m == 1 && g_idx == nullptr;
    return plan;
}

}  // namespace nbits::ops::detail
