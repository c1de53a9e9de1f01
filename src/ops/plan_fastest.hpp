#pragma once
// What the plans of KernelPolicy::Fastest share: the specialisation every
// nbits kernel reads, the residency arithmetic of an SM, and the two paths
// plan_fastest chooses between by M (plan_fastest_prefill.cpp for the fused
// GEMMs and the dequantise + cuBLASLt route, plan_fastest_decode.cpp for the
// decode kernels).
#include "ops/plan_internal.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace nbits::ops::detail {

// The -D specialisation every nbits kernel reads.
struct Specialisation {
    const FastestRequest& fastest;

    void common(StepBuilder& step) const
    {
        const MatMulNBitsConfig& config = fastest.request.config;
        step.define("NBITS_ACT_BF16", act_bf16())
            .define("NBITS_SCALE_F32", fastest.operands.scale_type == DataType::Float32 ? 1 : 0)
            .define("NBITS_BITS", static_cast<std::int64_t>(config.bits))
            .define("NBITS_BLOCK_SIZE", static_cast<std::int64_t>(config.block_size))
            .define("NBITS_K", static_cast<std::int64_t>(config.k))
            .define("NBITS_HAS_ZP", fastest.operands.has_zero_points() ? 1 : 0);
    }
    // 0 none, 1 plain y = T(acc + bias), 2 folded y = T(T(acc) + bias).
    int bias_mode() const
    {
        if (!fastest.operands.has_bias()) {
            return 0;
        }
        return fastest.request.config.fold_bias_post_round ? 2 : 1;
    }
    bool gamma_f32() const { return fastest.gamma != nullptr && fastest.gamma->type == DataType::Float32; }
    int act_bf16() const { return fastest.operands.activation_type == DataType::BFloat16 ? 1 : 0; }
};

// Binds the weights of a fused entry (matmul_decode.cu, matmul_prefill.cu): b_gate, scales_gate, zp_gate and
// b_up, scales_up, zp_up of the paired gate/up node, else b, scales and zero_points.
void bind_weights(StepBuilder& step, const FastestRequest& fastest);

// Whether `blocks` CTAs with `shared_bytes` of dynamic shared memory each are
// resident on one SM of `device` at once: an SM has the opt-in per-block limit
// plus 1 KiB, and each block reserves 1 KiB beyond its own (sm_80 and later).
bool resident_on_sm(const Capabilities& device, std::size_t blocks, std::size_t shared_bytes);

// The least dynamic shared memory (a multiple of 16 bytes) with which no more
// than `blocks` CTAs fit one SM of `device`, whatever their registers allow.
std::size_t shared_bytes_capping_residency(const Capabilities& device, std::size_t blocks);

// Whether a fused entry launches as a programmatic dependent of the kernel before it: on compute capability 9.0
// and newer (griddepcontrol), unless its override (NBITS_DECODE_PDL, NBITS_PREFILL_PDL) is 0.
bool programmatic_launch(const PlanContext& context, std::optional<int> forced);

// Whether the fused GEMM's wide 128-row tiles beat the decode kernel at M = 12..16 (see plan_fastest_prefill.cpp).
bool wide_small_tiles_pay(const FastestRequest& fastest);

// The fused prefill GEMM or the dequantise + cuBLASLt route for M > 1 (half-precision activations), or false
// when neither covers the node.
bool plan_prefill(LaunchPlan& plan, const FastestRequest& fastest);

// The decode kernels (M <= 16), or false when they do not cover the node.
bool plan_decode(LaunchPlan& plan, const FastestRequest& fastest);

}  // namespace nbits::ops::detail
