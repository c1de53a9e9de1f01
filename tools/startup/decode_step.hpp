#pragma once

#include <array>
#include <string_view>

namespace nbits::startup {

// The entries one decode step of a transformer layer launches (fp16
// activations, int4 block-32, fp16 scales, symmetric), first-launched first.
inline constexpr std::array<std::string_view, 3> kDecodeStepEntries = {
    "matmul_nbits_gemv_f16_scales_f16",         // qkv and o projections
    "matmul_nbits_gemv_f16_gate_up_swiglu",     // gate + up, fused SwiGLU
    "matmul_nbits_gemv_f16_scales_f16_down_c2", // down projection
};

}  // namespace nbits::startup
