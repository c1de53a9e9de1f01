// KernelPolicy::Fastest: nbits' own kernels, specialised by the JIT on the
// node (K, bits, block size, zero points, dtypes, bias, fusions) and on the
// GPU, reading ONNX Runtime's weight layout as handed over.
//   M <= 16         matmul_decode.cu: one pass over the weights for all rows
//                   (tensor cores for fp16/bf16, CUDA cores for fp32)
//   16 < M <= 128   matmul_prefill.cu: fused dequantising tensor-core GEMM (past M = 64
//                   only when its grid fills half the SMs)
//   M > 32          on sm_90: the same GEMM on warpgroup MMA (wgmma, compute_90a; tiles of
//                   64 tokens up to M = 64 (at M = 65..128 in two rows where their split costs
//                   less), of 128 up to M = 128 and of 256 past it, those two
//                   fed by the tensor memory accelerator) when its grid fills seven tenths of
//                   the SMs up to M = 128, three quarters up to M = 256 (past it: every CTA
//                   slot); without the tensor memory
//                   accelerator 128-token tiles up to M = 512 (the paired node up to 1024, and
//                   on while M x K < 2^23)
//   otherwise       matmul_prefill.cu: dequantise chunks of columns into scratch, then cuBLASLt
// The decode path is plan_fastest_decode.cpp, the others
// plan_fastest_prefill.cpp.

#include "ops/plan_fastest.hpp"

#include <limits>

namespace nbits::ops::detail {

constexpr std::size_t kReservedPerBlock = 1024;

bool programmatic_launch(const PlanContext& context, std::optional<int> forced)
{
    return (!forced || *forced == 1) && context.capabilities.compute_major >= 9;
}

bool resident_on_sm(const Capabilities& device, std::size_t blocks, std::size_t shared_bytes)
{
    return blocks * (shared_bytes + kReservedPerBlock) <=
           std::size_t{device.max_shared_memory_per_block_optin} + kReservedPerBlock;
}

std::size_t shared_bytes_capping_residency(const Capabilities& device, std::size_t blocks)
{
    const std::size_t sm_bytes = std::size_t{device.max_shared_memory_per_block_optin} + kReservedPerBlock;
    const std::size_t over = sm_bytes / (blocks + 1) + 1;  // blocks + 1 CTAs of this much do not fit
    return (over > kReservedPerBlock ? over - kReservedPerBlock + 15 : 0) / 16 * 16;
}

void bind_weights(StepBuilder& step, const FastestRequest& fastest)
{
    const HalfOperands& o = fastest.operands;
    if (fastest.up != nullptr) {
        step.arg("b_gate", o.packed)
            .arg("scales_gate", o.scales)
            .arg("zp_gate", o.zero_points)
            .arg("b_up", fastest.up->packed)
            .arg("scales_up", fastest.up->scales)
            .arg("zp_up", fastest.up->zero_points);
    } else {
        step.arg("b", o.packed).arg("scales", o.scales).arg("zero_points", o.zero_points);
    }
}

namespace {

constexpr std::size_t kDecodeMaxM = 16;

// The original's down-projection GEMVs (fp16, K > N, block 32, fp16 scales,
// symmetric, int4) stage A in shared memory and run every column on its own
// warps, so on a node too narrow for the decode kernel's column groups to
// fill the SMs they are faster (Qwen2.5-0.5B down, 56 groups on 132 SMs:
// 3.9 against 6.9 us on the H200); Fastest keeps them there. A node whose
// groups fill the device takes the decode kernel (Llama-3-8B down 14.2
// against 17.3 us, Llama-3-70B down 43.4 against 51.5 us, Qwen2.5-7B down 16.7
// against 20.6 us).
bool original_down_projection_is_faster(const FastestRequest& fastest)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const HalfOperands& o = fastest.operands;
    const std::size_t sms = fastest.request.context.capabilities.multiprocessor_count;
    return fastest.m == 1 && config.bits == 4 && o.activation_type == DataType::Float16 && fastest.gamma == nullptr &&
           fastest.up == nullptr && div_ceil(config.n, 16) < sms &&
           select_f16_gemv_variant(config.k, config.n, config.block_size, o.scales_fp16(), o.has_zero_points())
                   .variant == F16GemvVariant::DownProjection;
}

}  // namespace

bool plan_fastest(LaunchPlan& plan, const FastestRequest& fastest)
{
    // nbits' kernels and its cuBLASLt GEMMs take M as a 32-bit int. Beyond it
    // the original's paths refuse the node, with the same message under both
    // policies; bf16, which has no original path, is refused here.
    if (fastest.m > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        if (fastest.operands.activation_type == DataType::BFloat16) {
            as_i32("M", fastest.m);
        }
        return false;
    }
    if (original_down_projection_is_faster(fastest)) {
        return false;
    }
    if (fastest.m <= kDecodeMaxM) {
        // fp32 at accuracy level 4 keeps the original's int8-activation GEMV.
        if (fastest.operands.activation_type == DataType::Float32 && fastest.request.config.accuracy_level == 4) {
            return false;
        }
        // The fused GEMM's wide tiles where they measured faster and fit the device, else the decode kernel.
        return (wide_small_tiles_pay(fastest) && plan_prefill(plan, fastest)) || plan_decode(plan, fastest);
    }
    // fp32 prefill keeps the original's paths.
    return fastest.operands.activation_type != DataType::Float32 && plan_prefill(plan, fastest);
}

}  // namespace nbits::ops::detail
