#pragma once

// The three paths of the original's run(), chosen by the activation dtype and
// the gate/up marker. Each validates its tensors, then decides the launches.

#include "ops/plan_request.hpp"

#include <string>

namespace nbits::ops::detail {

LaunchPlan plan_f32(const PlanRequest& request);
LaunchPlan plan_f16(const PlanRequest& request);
LaunchPlan plan_gate_up_swiglu(const PlanRequest& request);

// A plan that launches nothing: the output is empty (M == 0).
LaunchPlan empty_plan(std::string variant, std::string reason);
// record_kernel_variant!
void set_variant(LaunchPlan& plan, std::string variant, std::string reason);
// record_kernel_variant_stage!("bias", ...) for the fp16 decode GEMVs.
void record_bias_stage(LaunchPlan& plan, bool has_bias, bool fold_bias_post_round);
// The f32 and fp16 metric: 2·M·N·K, plus M·N for a bias.
std::uint64_t matmul_flops(std::size_t m, std::size_t n, std::size_t k, bool has_bias);
// The paired gate/up metric: 4·M·N·K + 5·M·N.
std::uint64_t gate_up_flops(std::size_t m, std::size_t n, std::size_t k);
// `flops` plus the RMS-norm prologue's 4·M·K + 4·M.
std::uint64_t with_rmsnorm_flops(std::uint64_t flops, std::size_t m, std::size_t k);
// The fused RMS-norm reduces K in 128-element chunks with no tail: K % 128 == 0.
void require_rmsnorm_width(std::size_t k);

}  // namespace nbits::ops::detail
