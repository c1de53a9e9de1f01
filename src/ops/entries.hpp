#pragma once

// The kernel entries the plan launches (the original's names, kept by the
// kernels_cu port) and the kernels_cu file that declares each one.

#include <string_view>
#include <vector>

namespace nbits::ops::detail::entry {

inline constexpr const char* dequant_f32 = "matmul_nbits_dequant_f32";

inline constexpr const char* gemv_f32 = "matmul_nbits_gemv_f32";
inline constexpr const char* gemv_int8_f32 = "matmul_nbits_gemv_int8_f32";
inline constexpr const char* gemv_int8_f32_block128 = "matmul_nbits_gemv_int8_f32_block128";
inline constexpr const char* gemv_int4_f32_block128 = "matmul_nbits_gemv_int4_f32_block128";

inline constexpr const char* quantize_accuracy4_block32 = "matmul_nbits_quantize_accuracy4_block32";
inline constexpr const char* gemv_accuracy4_block32 = "matmul_nbits_gemv_accuracy4_block32";
inline constexpr const char* gemv_accuracy4_block32_stage64 = "matmul_nbits_gemv_accuracy4_block32_stage64";
inline constexpr const char* quantize_accuracy4_blockwise = "matmul_nbits_quantize_accuracy4_blockwise";
inline constexpr const char* gemv_accuracy4_blockwise = "matmul_nbits_gemv_accuracy4_blockwise";
inline constexpr const char* accuracy4_tiled = "matmul_nbits_accuracy4";

inline constexpr const char* gemv_int8_f16 = "matmul_nbits_gemv_int8_f16";
inline constexpr const char* gemv_int8_f16_splitk = "matmul_nbits_gemv_int8_f16_splitk";
inline constexpr const char* gemv_f16 = "matmul_nbits_gemv_f16";
inline constexpr const char* gemv_f16_general_bs = "matmul_nbits_gemv_f16_general_bs";
inline constexpr const char* gemv_f16_scales_f16 = "matmul_nbits_gemv_f16_scales_f16";
inline constexpr const char* gemv_f16_scales_f16_zp = "matmul_nbits_gemv_f16_scales_f16_zp";
inline constexpr const char* gemv_f16_scales_f16_zp_splitk = "matmul_nbits_gemv_f16_scales_f16_zp_splitk";
inline constexpr const char* gemv_f16_down = "matmul_nbits_gemv_f16_scales_f16_down";
inline constexpr const char* gemv_f16_down_c4 = "matmul_nbits_gemv_f16_scales_f16_down_c4";
inline constexpr const char* gemv_f16_down_c2 = "matmul_nbits_gemv_f16_scales_f16_down_c2";

inline constexpr const char* gemm_f16 = "matmul_nbits_gemm_f16";
inline constexpr const char* gemm_f16_general_bs = "matmul_nbits_gemm_f16_general_bs";

inline constexpr const char* gemv_f16_rmsnorm = "matmul_nbits_gemv_f16_scales_f16_rmsnorm";
inline constexpr const char* gemv_f16_rmsnorm_zp = "matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp";
inline constexpr const char* gemv_int8_f16_rmsnorm = "matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm";
inline constexpr const char* gemv_int8_f16_rmsnorm_zp = "matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp";
inline constexpr const char* rmsnorm_prefill = "matmul_nbits_rmsnorm_f16_warp_half4";

inline constexpr const char* gate_up_swiglu = "matmul_nbits_gemv_f16_gate_up_swiglu";
inline constexpr const char* gate_up_swiglu_zp = "matmul_nbits_gemv_f16_gate_up_swiglu_zp";
inline constexpr const char* gate_up_swiglu_rmsnorm = "matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm";
inline constexpr const char* gate_up_swiglu_rmsnorm_zp = "matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp";

inline constexpr const char* silu_mul_f16 = "matmul_nbits_silu_mul_f16";

}  // namespace nbits::ops::detail::entry

namespace nbits::ops::detail {

// The kernels_cu file stem declaring `entry` ("gemv_f16"); a static table, so
// planning never scans kernel text. A CPU test checks it against the sources.
// Throws Error(InvalidArgument) for an entry the plan never launches.
const char* source_of_entry(std::string_view entry);

// Every entry of the table, for that test.
std::vector<std::string_view> planned_entries();

}  // namespace nbits::ops::detail
