#pragma once

// The launches of the fp16-activation paths (the original's launch_* for
// fp16), shared by the plain node and the paired gate/up node.

#include "ops/plan_request.hpp"

#include <cstddef>

namespace nbits::ops::detail {

// The tensors of one fp16 projection as kernel arguments.
struct F16Operands {
    BufferRef activation = BufferRef::input(0);
    BufferRef packed = BufferRef::input(1);
    BufferRef scales = BufferRef::input(2);
    BufferRef zero_points;  // null: symmetric weights
    BufferRef bias;         // null: no bias
    BufferRef output = BufferRef::output(0);
    bool scales_fp16 = true;

    bool has_zero_points() const { return zero_points.kind != BufferRef::Kind::Null; }
    bool has_bias() const { return bias.kind != BufferRef::Kind::Null; }
};

// The RMS-norm weight: fp16 or fp32.
struct RmsNormGamma {
    BufferRef tensor;
    bool is_half = true;
};

// The fused RMS-norm decode kernels stage the normalized row in K halves of
// dynamic shared memory (opting into more than 48 KiB where the device allows).
std::uint32_t staged_activation_bytes(const MatMulNBitsConfig& config);

// M > 1: the portable 16x16 tiled GEMM (the general-block-size entry unless block_size == 32).
void add_f16_gemm(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands, std::size_t m,
                  std::size_t bias_row_stride);
// M > 1: one warp RMS-normalizes each row of `activation` into `normalized`.
void add_rmsnorm_prefill(LaunchPlan& plan, const PlanRequest& request, BufferRef activation, const RmsNormGamma& gamma,
                         BufferRef normalized, std::size_t m);
// y = fp16(silu(a) * b) over n elements.
void add_silu_mul(LaunchPlan& plan, BufferRef a, BufferRef b, BufferRef y, std::size_t n);

// M == 1 decode GEMVs. add_f16_gemv also records the variant (general,
// down projection or general block size) and the bias stage.
void add_f16_gemv(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands);
void add_int8_f16_gemv(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands);
// The block-32 GEMV with the RMS norm fused in front (int8 for bits == 8,
// int4 otherwise); records the bias stage.
void add_rmsnorm_gemv(LaunchPlan& plan, const PlanRequest& request, const F16Operands& operands,
                      const RmsNormGamma& gamma);

}  // namespace nbits::ops::detail
