#include "ops/alignment.hpp"
#include "ops/errors.hpp"
#include "ops/plan_paths.hpp"

#include "nbits/jit/include_dirs.hpp"

#include <fmt/format.h>

#include <limits>

namespace nbits::ops {
namespace detail {
namespace {

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b)
{
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
        return std::numeric_limits<std::uint64_t>::max();
    }
    return a * b;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b)
{
    return b > std::numeric_limits<std::uint64_t>::max() - a ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

}  // namespace

void require_half_headers(const PlanContext& context, const char* op)
{
    if (!context.half_headers_available) {
        throw Error(ErrorKind::MissingHeaders, jit::missing_half_headers_message(op));
    }
}

LaunchPlan empty_plan(std::string variant, std::string reason)
{
    LaunchPlan plan;
    set_variant(plan, std::move(variant), std::move(reason));
    plan.capture_safe = false;
    return plan;
}

void set_variant(LaunchPlan& plan, std::string variant, std::string reason)
{
    plan.variant = std::move(variant);
    plan.reason = std::move(reason);
}

void record_bias_stage(LaunchPlan& plan, bool has_bias, bool fold_bias_post_round)
{
    if (!has_bias) {
        return;
    }
    if (fold_bias_post_round) {
        plan.bias_stage = "qkv_bias_fused";
        plan.bias_stage_reason =
            "folded standalone Add(MatMulNBits, bias) into GEMV epilogue with fp16-after-round semantics "
            "fp16(fp16(acc)+bias) (token-identity preserved)";
    } else {
        plan.bias_stage = "bias_native";
        plan.bias_stage_reason = "native MatMulNBits bias: single-round epilogue fp16(acc+bias)";
    }
}

std::uint64_t matmul_flops(std::size_t m, std::size_t n, std::size_t k, bool has_bias)
{
    std::uint64_t flops = saturating_mul(saturating_mul(saturating_mul(m, n), k), 2);
    if (has_bias) {
        flops = saturating_add(flops, saturating_mul(m, n));
    }
    return flops;
}

std::uint64_t with_rmsnorm_flops(std::uint64_t flops, std::size_t m, std::size_t k)
{
    return saturating_add(saturating_add(flops, saturating_mul(saturating_mul(m, k), 4)), saturating_mul(m, 4));
}

std::uint64_t gate_up_flops(std::size_t m, std::size_t n, std::size_t k)
{
    return saturating_add(saturating_mul(saturating_mul(saturating_mul(m, n), k), 4),
                          saturating_mul(saturating_mul(m, n), 5));
}

void require_rmsnorm_width(std::size_t k)
{
    if (k % 128 != 0) {
        fail(fmt::format(
            "rmsnorm_prologue fusion requires K to be a multiple of 128, got K={}. Why: the fused RMS "
            "normalization reduces each row of A in 128-element chunks (32 lanes x half4) and has no tail, so the "
            "last {} elements of every row would be left out of the norm. How to fix: fuse only hidden sizes that "
            "are multiples of 128, or run SkipSimplifiedLayerNormalization as its own node",
            k, k % 128));
    }
}

}  // namespace detail

LaunchPlan plan_matmul_nbits(const MatMulNBitsConfig& config, const std::vector<TensorDesc>& inputs,
                             const std::vector<TensorDesc>& outputs, const PlanContext& context)
{
    const std::size_t max_inputs = config.gate_up_swiglu ? 8 : 7;
    if (inputs.size() < 3 || inputs.size() > max_inputs || outputs.size() != 1) {
        detail::fail(fmt::format("expected 3 to {} inputs and 1 output, got {} inputs and {} outputs", max_inputs,
                                 inputs.size(), outputs.size()));
    }
    const detail::PlanRequest request{config, inputs, outputs, context};
    LaunchPlan plan;
    if (inputs[0].dtype == DataType::Float16) {
        plan = config.gate_up_swiglu ? detail::plan_gate_up_swiglu(request) : detail::plan_f16(request);
    } else {
        plan = detail::plan_f32(request);
    }
    detail::attach_alignment(plan, request);
    return plan;
}

}  // namespace nbits::ops
