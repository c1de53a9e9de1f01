#pragma once

// The launches of the fp32-activation path (the original's launch_* for f32):
// each appends its steps, scratch and scalars to the plan.

#include "ops/plan_request.hpp"

namespace nbits::ops::detail {

// gemv_int8_f32, gemv_int8_f32_block128, gemv_int4_f32_block128: one CTA per
// column and the (K, N, K blocks) scalars.
void add_f32_fixed_layout_gemv(LaunchPlan& plan, const PlanRequest& request, const char* entry, const char* what);
// matmul_nbits_gemv_f32: any block size, int4 or int8.
void add_f32_gemv(LaunchPlan& plan, const PlanRequest& request);
// Block-32 symmetric accuracy-level-4: quantize the activation, then the
// 8-column GEMV (the 64-block stage when the grid is below one wave).
void add_accuracy4_gemv(LaunchPlan& plan, const PlanRequest& request);
// Any block size accuracy-level-4: quantize per K block, then the warp-per-column GEMV.
void add_accuracy4_gemv_blockwise(LaunchPlan& plan, const PlanRequest& request);
// The tiled accuracy-level-4 GEMM for M != 1.
void add_accuracy4_tiled(LaunchPlan& plan, const PlanRequest& request, std::size_t m);
// Dequantize B to a K x N fp32 scratch, then cuBLASLt, then wait before the scratch is freed.
void add_dequant_gemm(LaunchPlan& plan, const PlanRequest& request, std::size_t m);

}  // namespace nbits::ops::detail
