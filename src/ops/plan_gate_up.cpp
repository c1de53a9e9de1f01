#include "ops/entries.hpp"
#include "ops/errors.hpp"
#include "ops/f16_launches.hpp"
#include "ops/plan_paths.hpp"
#include "ops/selection.hpp"
#include "ops/step_builder.hpp"
#include "ops/validate.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

// [x, W_gate, scales_gate, W_up, scales_up, (gamma), (zp_gate), (zp_up)]
constexpr int kGateWeightSlot = 1;
constexpr int kGateScalesSlot = 2;
constexpr int kUpWeightSlot = 3;
constexpr int kUpScalesSlot = 4;
constexpr int kGammaSlot = 5;
constexpr int kGateZeroPointsSlot = 6;
constexpr int kUpZeroPointsSlot = 7;

struct GateUpTensors {
    const TensorDesc* gamma = nullptr;
    const TensorDesc* zp_gate = nullptr;
    const TensorDesc* zp_up = nullptr;
};

F16Operands projection(BufferRef packed, BufferRef scales, BufferRef zero_points, BufferRef activation,
                       BufferRef output)
{
    F16Operands operands;
    operands.activation = activation;
    operands.packed = packed;
    operands.scales = scales;
    operands.zero_points = zero_points;
    operands.output = output;
    return operands;
}

RmsNormGamma gamma_of(const GateUpTensors& tensors)
{
    return {BufferRef::input(kGammaSlot), tensors.gamma->dtype == DataType::Float16};
}

// Prefill: gate GEMM into a scratch of Y's size, up GEMM into Y, then
// Y = silu(gate) * Y. `activation` is A or its RMS-normalized copy.
void add_gate_up_prefill(LaunchPlan& plan, const PlanRequest& request, const GateUpTensors& tensors,
                         BufferRef activation, std::size_t m)
{
    const int gate = static_cast<int>(plan.scratch_bytes.size());
    plan.scratch_bytes.push_back(request.output().byte_size());
    add_f16_gemm(plan, request,
                 projection(BufferRef::input(kGateWeightSlot), BufferRef::input(kGateScalesSlot),
                            optional_ref(tensors.zp_gate, kGateZeroPointsSlot), activation, BufferRef::scratch(gate)),
                 m, 0);
    add_f16_gemm(plan, request,
                 projection(BufferRef::input(kUpWeightSlot), BufferRef::input(kUpScalesSlot),
                            optional_ref(tensors.zp_up, kUpZeroPointsSlot), activation, BufferRef::output(0)),
                 m, 0);
    add_silu_mul(plan, BufferRef::scratch(gate), BufferRef::output(0), BufferRef::output(0),
                 request.output().numel());
}

// Decode: one kernel computes both projections and silu(gate) * up, with the
// RMS norm staged once in shared memory when fused.
void add_gate_up_decode(LaunchPlan& plan, const PlanRequest& request, const GateUpTensors& tensors)
{
    const MatMulNBitsConfig& config = request.config;
    const bool fused_norm = tensors.gamma != nullptr;
    const char* what =
        fused_norm ? "MatMulNBits fp16 gate/up SwiGLU RMS-norm GEMV" : "MatMulNBits fp16 gate/up SwiGLU GEMV";
    require_half_headers(request.context, what);
    // Symmetric weights take the entry without the per-block zero-point load.
    const bool zero_points = tensors.zp_gate != nullptr || tensors.zp_up != nullptr;
    const char* entry_name = fused_norm ? (zero_points ? entry::gate_up_swiglu_rmsnorm_zp : entry::gate_up_swiglu_rmsnorm)
                                        : (zero_points ? entry::gate_up_swiglu_zp : entry::gate_up_swiglu);
    const std::int32_t k = as_i32("K", config.k);
    const std::int32_t n = as_i32("N", config.n);
    const std::int32_t k_blocks = as_i32("K block count", config.k_blocks());
    const std::int32_t blob_size = as_i32("block blob size", config.block_size / 2);
    const std::int32_t zp_row_bytes = as_i32("zero-point row byte count", config.zp_row_bytes());

    StepBuilder step(entry_name, what);
    step.pointers({BufferRef::input(0), BufferRef::input(kGateWeightSlot), BufferRef::input(kGateScalesSlot),
                   BufferRef::input(kUpWeightSlot), BufferRef::input(kUpScalesSlot),
                   optional_ref(tensors.zp_gate, kGateZeroPointsSlot), optional_ref(tensors.zp_up, kUpZeroPointsSlot)});
    if (fused_norm) {
        step.pointers({BufferRef::input(kGammaSlot)});
    }
    step.pointers({BufferRef::output(0)}).i32s({k, n, k_blocks, blob_size, zp_row_bytes});
    if (fused_norm) {
        step.flag(gamma_of(tensors).is_half)
            .f32(config.rmsnorm_epsilon)
            .shared_memory(staged_activation_bytes(config), true);
    }
    plan.steps.push_back(step.grid(grid_extent(config.n, kGateUpThreads / 32)).block(kGateUpThreads).build());
}

GateUpTensors validate_gate_up(const PlanRequest& request, std::size_t& m)
{
    const MatMulNBitsConfig& config = request.config;
    const std::vector<TensorDesc>& inputs = request.inputs;
    if (inputs.size() < 5 || inputs.size() > 8 || request.outputs.size() != 1) {
        fail(fmt::format("gate/up SwiGLU fusion expects 5 to 8 inputs [x, W_gate, scales_gate, W_up, scales_up, "
                         "(gamma), (zp_gate, zp_up)] and 1 output, got {} inputs and {} outputs",
                         inputs.size(), request.outputs.size()));
    }
    require_dtype("A", inputs[0].dtype, DataType::Float16);
    require_dtype("W_gate", inputs[kGateWeightSlot].dtype, DataType::Uint8);
    require_dtype("scales_gate", inputs[kGateScalesSlot].dtype, DataType::Float16);
    require_dtype("W_up", inputs[kUpWeightSlot].dtype, DataType::Uint8);
    require_dtype("scales_up", inputs[kUpScalesSlot].dtype, DataType::Float16);
    require_dtype("Y", request.output().dtype, DataType::Float16);
    GateUpTensors tensors;
    if (config.rmsnorm_prologue) {
        tensors.gamma = request.optional_input(kGammaSlot);
        if (tensors.gamma == nullptr) {
            fail("rmsnorm_prologue fusion requires the normalization weight at input 5");
        }
        require_gamma_dtype(tensors.gamma->dtype);
        require_shape("gamma", tensors.gamma->shape, {config.k});
        if (!tensors.gamma->is_contiguous()) {
            fail("gamma must be contiguous on the CUDA execution provider");
        }
        require_rmsnorm_width(config.k);
    }
    m = require_activation_and_output(inputs[0], request.output(), config.k, config.n);
    if (config.block_size != 32 || config.bits != 4) {
        fail(fmt::format("gate/up SwiGLU fusion received bits={} and block_size={}. Why: the fused fp16 path "
                         "implements the block-32 packed int4 layout. How to fix: export 4-bit MatMulNBits weights "
                         "with block_size=32 or disable this fusion",
                         config.bits, config.block_size));
    }
    const Shape weight_shape{config.n, config.k_blocks(), config.block_size / 2};
    require_shape("W_gate", inputs[kGateWeightSlot].shape, weight_shape);
    require_shape("W_up", inputs[kUpWeightSlot].shape, weight_shape);
    require_flat_or_matrix_shape("scales_gate", inputs[kGateScalesSlot].shape, config.n, config.k_blocks());
    require_flat_or_matrix_shape("scales_up", inputs[kUpScalesSlot].shape, config.n, config.k_blocks());

    tensors.zp_gate = request.optional_input(kGateZeroPointsSlot);
    tensors.zp_up = request.optional_input(kUpZeroPointsSlot);
    if ((tensors.zp_gate != nullptr) != (tensors.zp_up != nullptr)) {
        fail("gate/up SwiGLU fusion requires zero points for both projections or neither");
    }
    for (const auto& [name, zp] : {std::pair{"zp_gate", tensors.zp_gate}, std::pair{"zp_up", tensors.zp_up}}) {
        if (zp != nullptr) {
            require_dtype(name, zp->dtype, DataType::Uint8);
            require_flat_or_matrix_shape(name, zp->shape, config.n, config.zp_row_bytes());
            require_contiguous({{name, zp->is_contiguous()}});
        }
    }
    require_contiguous({{"A", inputs[0].is_contiguous()},
                        {"W_gate", inputs[kGateWeightSlot].is_contiguous()},
                        {"scales_gate", inputs[kGateScalesSlot].is_contiguous()},
                        {"W_up", inputs[kUpWeightSlot].is_contiguous()},
                        {"scales_up", inputs[kUpScalesSlot].is_contiguous()},
                        {"Y", request.output().is_contiguous()}});
    return tensors;
}

}  // namespace

LaunchPlan plan_gate_up_swiglu(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    std::size_t m = 0;
    const GateUpTensors tensors = validate_gate_up(request, m);
    std::uint64_t flops = gate_up_flops(m, config.n, config.k);
    if (config.rmsnorm_prologue) {
        flops = with_rmsnorm_flops(flops, m, config.k);
    }

    LaunchPlan plan;
    if (m == 0) {
        plan = empty_plan("gate_up_swiglu_empty", "M=0 gate/up SwiGLU has an empty output and requires no CUDA launch");
    } else if (m > 1 && tensors.gamma != nullptr) {
        set_variant(plan, "gate_up_swiglu_rmsnorm_prefill",
                    fmt::format("M={} prefill: RMS-normalization prologue into scratch, then two portable block-32 "
                                "int4 fp16 tiled GEMMs with fp32 accumulation, followed by fp16 SiluMul; not "
                                "advertised as CUDA-graph capture-safe",
                                m));
        const int normalized = static_cast<int>(plan.scratch_bytes.size());
        plan.scratch_bytes.push_back(m * config.k * 2);
        add_rmsnorm_prefill(plan, request, BufferRef::input(0), gamma_of(tensors), BufferRef::scratch(normalized), m);
        add_gate_up_prefill(plan, request, tensors, BufferRef::scratch(normalized), m);
    } else if (m > 1) {
        set_variant(plan, "gate_up_swiglu_prefill",
                    fmt::format("M={} prefill: two portable block-32 int4 fp16 tiled GEMMs with fp32 accumulation, "
                                "followed by fp16 SiluMul; not advertised as CUDA-graph capture-safe",
                                m));
        add_gate_up_prefill(plan, request, tensors, BufferRef::input(0), m);
    } else if (tensors.gamma != nullptr) {
        set_variant(plan, "gate_up_swiglu_rmsnorm_fused",
                    "fp16 block-32 M==1 decode: fused RMS-normalization prologue + paired gate/up int4 GEMV + SwiGLU "
                    "(silu(gate)*up) in one capture-safe kernel; the RMS reduction runs once for both projections "
                    "and reproduces the standalone norm plus two-op fp16 rounding for byte-identical greedy tokens");
        add_gate_up_decode(plan, request, tensors);
    } else {
        set_variant(plan, "gate_up_swiglu_fused",
                    "fp16 block-32 M==1 decode: fused paired gate/up int4 GEMV + SwiGLU (silu(gate)*up) in one "
                    "capture-safe kernel; reproduces the two-op fp16 rounding for byte-identical greedy tokens");
        add_gate_up_decode(plan, request, tensors);
    }
    plan.flops = flops;
    plan.capture_safe = m == 1;
    return plan;
}

}  // namespace nbits::ops::detail
