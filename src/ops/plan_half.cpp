// Half-precision activations (fp16; bf16 under KernelPolicy::Fastest): the
// original's validation, then nbits' own kernels (Fastest) or the original's
// launches: the M == 1 GEMV ladder, the fused RMS-norm GEMVs, the tiled
// prefill GEMM, and the paired gate/up SwiGLU node.

#include "ops/plan_internal.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

constexpr int kZeroPointsSlot = 3;
constexpr int kBiasSlot = 5;
constexpr int kGammaSlot = 6;

// [x, W_gate, scales_gate, W_up, scales_up, (gamma), (zp_gate), (zp_up)]
constexpr int kGateWeightSlot = 1;
constexpr int kGateScalesSlot = 2;
constexpr int kUpWeightSlot = 3;
constexpr int kUpScalesSlot = 4;
constexpr int kGateUpGammaSlot = 5;
constexpr int kGateZeroPointsSlot = 6;
constexpr int kUpZeroPointsSlot = 7;

constexpr const char* kFp16ScalesRequired =
    "rmsnorm_prologue fusion requires fp16 scales (the fused kernel replicates the fp16 general scales path)";

const char* type_word(DataType activation) { return activation == DataType::BFloat16 ? "BFloat16" : "fp16"; }

// The scales of a half-precision node: the activation type, or fp32.
DataType require_half_or_f32_scales(DataType got, DataType activation)
{
    if (got == activation || got == DataType::Float32) {
        return got;
    }
    fail(fmt::format("scales must have dtype {} or Float32 for {} activations, got {}", to_string(activation),
                     type_word(activation), to_string(got)));
}

void require_bias_elements(const TensorDesc& bias, std::size_t n, std::size_t rows)
{
    // A folded residual epilogue binds a per-token [1, S, N] residual to the bias slot.
    const std::size_t elements = bias.numel();
    if (elements != n && (rows == 0 || elements / rows != n || elements % rows != 0)) {
        fail(fmt::format("bias must have {} elements (broadcast [N]) or {} elements (per-token [1, S, N] residual), "
                         "got {}",
                         n, rows * n, format_shape(bias.shape)));
    }
}

// The fused decode kernels implement only the block-32 int4 and int8 layouts.
void require_block32_for_fused_decode(const MatMulNBitsConfig& config)
{
    if (config.block_size != 32) {
        fail(fmt::format(
            "rmsnorm_prologue fusion at M=1 requires block_size=32, got bits={} and block_size={}. Why: the fused "
            "RMS-norm decode GEMVs implement only the block-32 int4 and int8 layouts of B, and would misread this "
            "one. How to fix: export B with block_size=32, keep SkipSimplifiedLayerNormalization as its own node "
            "(drop the {} marker), or use KernelPolicy::Fastest",
            config.bits, config.block_size, kRmsNormPrologueAttr));
    }
}

bool bias_post_round(const PlanRequest& request, const HalfOperands& operands)
{
    return request.config.fold_bias_post_round && operands.has_bias();
}

// Binds (activation, packed, scales, zero_points, bias, output): the head of
// every fp16 GEMV's parameter list.
void bind_gemv_operands(StepBuilder& step, const HalfOperands& o)
{
    step.arg("activation", o.activation)
        .arg("packed", o.packed)
        .arg("scales", o.scales)
        .arg("zero_points", o.zero_points)
        .arg("bias", o.bias)
        .arg("output", o.output);
}

// The fused RMS-norm decode kernels stage the normalized row in K halves of
// dynamic shared memory (opting into more than 48 KiB where the device allows).
std::uint32_t staged_activation_bytes(const MatMulNBitsConfig& config)
{
    return static_cast<std::uint32_t>(std::min<std::size_t>(config.k * 2, std::uint32_t{0xffffffffu}));
}

// The tuned block-32 entry of the general (not down-projection) class.
const char* general_block32_entry(const HalfOperands& operands, bool use_splitk)
{
    if (!operands.scales_fp16()) {
        return "matmul_nbits_gemv_f16";
    }
    if (!operands.has_zero_points()) {
        return "matmul_nbits_gemv_f16_scales_f16";
    }
    return use_splitk ? "matmul_nbits_gemv_f16_scales_f16_zp_splitk" : "matmul_nbits_gemv_f16_scales_f16_zp";
}

const char* gemv_variant_name(const MatMulNBitsConfig& config, F16GemvVariant variant)
{
    if (config.block_size != 32) {
        return "gemv_f16_general_bs";
    }
    return variant == F16GemvVariant::DownProjection ? "gemv_f16_down_projection" : "gemv_f16_general";
}

// M == 1: the int4 GEMV ladder; records the variant and the bias stage.
void add_f16_gemv(LaunchPlan& plan, const PlanRequest& request, const HalfOperands& operands)
{
    const MatMulNBitsConfig& config = request.config;
    const F16GemvSelection selection = select_f16_gemv_variant(config.k, config.n, config.block_size,
                                                               operands.scales_fp16(), operands.has_zero_points());
    set_variant(plan, gemv_variant_name(config, selection.variant),
                [bits = config.bits, block_size = config.block_size, zp = operands.has_zero_points(),
                 reason = selection.reason] {
                    return fmt::format("fp16-activation x int{} M==1 decode GEMV: block_size={}; zero_points={}; {}",
                                       bits, block_size, zp, reason);
                });
    record_bias_stage(plan, operands.has_bias(), config.fold_bias_post_round);

    // Split-K fills the grid of the grid-starved asymmetric block-32 GEMV; it
    // needs whole 256-wide K steps and the 256-thread block's warps.
    const bool use_splitk = config.block_size == 32 && operands.scales_fp16() && operands.has_zero_points() &&
                            selection.variant == F16GemvVariant::General && config.k % kSplitKStep == 0 &&
                            f16_gemv_uses_large_block(config.k, config.n);
    const DownColumns down =
        choose_down_columns(config.n, request.context.capabilities.multiprocessor_count, request.context.overrides);
    const bool general_block_size = config.block_size != 32;
    const char* entry_name = general_block_size ? "matmul_nbits_gemv_f16_general_bs"
                             : selection.variant == F16GemvVariant::DownProjection
                                 ? down.entry
                                 : general_block32_entry(operands, use_splitk);

    std::uint32_t threads = kDownThreads;
    std::size_t columns_per_block = down.columns;
    if (selection.variant == F16GemvVariant::General) {
        threads = f16_gemv_threads(config.k, config.n);
        columns_per_block = threads / 32 / (use_splitk ? kSplitK : 1);
    }
    StepBuilder step(entry_name, fmt::format("MatMulNBits fp16 GEMV ({})", selection.reason));
    bind_gemv_operands(step, operands);
    step.size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("block_size", config.block_size, "block_size")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .size_arg("blob_size", config.blob_size(), "block blob size")
        .size_arg("zp_row_bytes", config.zp_row_bytes(), "zero-point row byte count")
        .flag("scales_fp16", operands.scales_fp16())
        .flag("bias_post_round", bias_post_round(request, operands));
    // Only the general-block-size entry selects the int4/int8 layout at run time.
    if (general_block_size) {
        step.size_arg("bits", config.bits, "bits");
    }
    step.grid(grid_extent(config.n, columns_per_block, kMaxGridX, "N")).block(threads).add_to(plan, request);
}

// M == 1 int8 block-32.
void add_int8_f16_gemv(LaunchPlan& plan, const PlanRequest& request, const HalfOperands& operands)
{
    const MatMulNBitsConfig& config = request.config;
    // Split-K only for asymmetric weights: symmetric int8 keeps the
    // byte-identical single-warp kernel.
    const bool use_splitk = operands.has_zero_points() && config.k % kSplitKStep == 0 &&
                            f16_gemv_uses_large_block(config.k, config.n);
    const std::uint32_t threads = f16_gemv_threads(config.k, config.n);
    const std::size_t columns_per_block = threads / 32 / (use_splitk ? kSplitK : 1);
    StepBuilder step(use_splitk ? "matmul_nbits_gemv_int8_f16_splitk" : "matmul_nbits_gemv_int8_f16",
                     "MatMulNBits int8 fp16 GEMV");
    bind_gemv_operands(step, operands);
    step.size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .flag("scales_fp16", operands.scales_fp16())
        .flag("bias_post_round", bias_post_round(request, operands))
        .grid(grid_extent(config.n, columns_per_block, kMaxGridX, "N"))
        .block(threads)
        .add_to(plan, request);
}

// M == 1: the block-32 GEMV with the RMS norm fused in front (int8 for
// bits == 8, int4 otherwise); records the bias stage.
void add_rmsnorm_gemv(LaunchPlan& plan, const PlanRequest& request, const HalfOperands& operands,
                      const RmsNormGamma& gamma)
{
    const MatMulNBitsConfig& config = request.config;
    const bool int8 = config.bits == 8;
    const char* what =
        int8 ? "MatMulNBits int8 fp16 RMS-norm-prologue GEMV" : "MatMulNBits fp16 RMS-norm-prologue GEMV";
    record_bias_stage(plan, operands.has_bias(), config.fold_bias_post_round);
    const char* entry_name =
        int8 ? (operands.has_zero_points() ? "matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp"
                                           : "matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm")
             : (operands.has_zero_points() ? "matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp"
                                           : "matmul_nbits_gemv_f16_scales_f16_rmsnorm");
    StepBuilder step(entry_name, what);
    bind_gemv_operands(step, operands);
    step.arg("gamma", gamma.tensor)
        .size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("k_blocks", config.k_blocks(), "K block count");
    // The int8 entry bakes in the block-32 byte layout; the int4 one takes it.
    if (!int8) {
        step.size_arg("blob_size", config.blob_size(), "block blob size")
            .size_arg("zp_row_bytes", config.zp_row_bytes(), "zero-point row byte count");
    }
    const std::uint32_t threads = f16_gemv_threads(config.k, config.n);
    step.flag("bias_post_round", bias_post_round(request, operands))
        .flag("gamma_is_half", gamma.is_half())
        .arg("epsilon", config.rmsnorm_epsilon)
        .grid(grid_extent(config.n, threads / 32, kMaxGridX, "N"))
        .block(threads)
        .shared_memory(staged_activation_bytes(config), true)
        .add_to(plan, request);
}

// M > 1: the portable 16x16 tiled GEMM (the general-block-size entry unless block_size == 32).
void add_f16_gemm(LaunchPlan& plan, const PlanRequest& request, const HalfOperands& operands, std::size_t m,
                  std::size_t bias_row_stride)
{
    const MatMulNBitsConfig& config = request.config;
    const bool general_block_size = config.block_size != 32;
    StepBuilder step(general_block_size ? "matmul_nbits_gemm_f16_general_bs" : "matmul_nbits_gemm_f16",
                     "MatMulNBits fp16 prefill GEMM");
    bind_gemv_operands(step, operands);
    step.size_arg("m", m, "M")
        .size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .size_arg("bits", config.bits, "bits")
        .flag("scales_fp16", operands.scales_fp16())
        .flag("bias_post_round", config.fold_bias_post_round && operands.has_bias())
        .size_arg("bias_row_stride", bias_row_stride, "bias row stride");
    // Only the general-block-size entry derives the packed layout at run time.
    if (general_block_size) {
        step.size_arg("block_size", config.block_size, "block_size")
            .size_arg("blob_size", config.blob_size(), "block blob size");
    }
    step.grid(grid_extent(config.n, kGemmF16Tile, kMaxGridX, "N"), grid_extent(m, kGemmF16Tile, kMaxGridYZ, "M"))
        .block(static_cast<std::uint32_t>(kGemmF16Tile), static_cast<std::uint32_t>(kGemmF16Tile))
        .add_to(plan, request);
}

// y = fp16(silu(a) * b) over n elements.
void add_silu_mul(LaunchPlan& plan, const PlanRequest& request, BufferRef a, BufferRef b, BufferRef y, std::size_t n)
{
    // The kernel walks half2 pairs with a grid-stride loop.
    const std::size_t pairs = (n + 1) / 2;
    StepBuilder("matmul_nbits_silu_mul_f16", "MatMulNBits fp16 SiluMul")
        .arg("a", a)
        .arg("b", b)
        .arg("y", y)
        .size_arg("n", n, "SiluMul element count")
        .grid(clamped_grid(pairs, kSiluMulThreads))
        .block(kSiluMulThreads)
        .add_to(plan, request);
}

RmsNormGamma gamma_at(const PlanRequest& request, int slot)
{
    return {BufferRef::input(slot), request.inputs[static_cast<std::size_t>(slot)].dtype};
}

// M > 1: one warp RMS-normalizes each row of the activation (input 0) with
// the gamma of input `gamma_slot` into a scratch buffer, which it returns.
BufferRef add_rmsnorm_prefill(LaunchPlan& plan, const PlanRequest& request, int gamma_slot, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    const BufferRef normalized = BufferRef::scratch(add_scratch(
        plan, request, checked_product(m, config.k * 2, "the normalized activation"), "the RMS-normalized activation"));
    const RmsNormGamma gamma = gamma_at(request, gamma_slot);
    StepBuilder("matmul_nbits_rmsnorm_f16_warp_half4", "MatMulNBits fp16 RMS-norm prefill prologue")
        .arg("activation", BufferRef::input(0))
        .arg("gamma", gamma.tensor)
        .arg("normalized", normalized)
        .size_arg("norm_size", config.k, "K")
        .size_arg("num_groups", m, "M")
        .flag("gamma_is_half", gamma.is_half())
        .arg("epsilon", config.rmsnorm_epsilon)
        .grid(grid_extent(m, 1, kMaxGridX, "M"))
        .block(kRmsNormPrefillThreads)
        .add_to(plan, request);
    return normalized;
}

// M > 1: the tiled GEMM, behind a per-row RMS norm into scratch when fused.
LaunchPlan plan_f16_prefill(const PlanRequest& request, HalfOperands operands, std::size_t m,
                            std::size_t bias_row_stride)
{
    const MatMulNBitsConfig& config = request.config;
    LaunchPlan plan;
    if (config.rmsnorm_prologue) {
        set_variant(plan, "gemm_f16_tiled_rmsnorm", [m] {
            return fmt::format("M={} prefill: RMS-normalization prologue (SkipSimplifiedLayerNormalization folded) "
                               "into a per-token scratch, then portable 16x16 tiled GEMM with fp32 accumulation",
                               m);
        });
        operands.activation = add_rmsnorm_prefill(plan, request, kGammaSlot, m);
        add_f16_gemm(plan, request, operands, m, bias_row_stride);
        return plan;
    }
    set_variant(plan, "gemm_f16_tiled",
                [m, bits = config.bits, block_size = config.block_size, zp = operands.has_zero_points(),
                 scales = operands.scales_fp16() ? "fp16" : "fp32"] {
                    return fmt::format("M={} prefill: fp16 activation, bits={}, block_size={}, zero_points={}, "
                                       "scales={} → portable 16x16 CUDA-core tiled GEMM with fp32 accumulation",
                                       m, bits, block_size, zp, scales);
                });
    add_f16_gemm(plan, request, operands, m, bias_row_stride);
    return plan;
}

// M == 1: the fused RMS-norm GEMVs, the int8 block-32 GEMV, or the int4 ladder.
LaunchPlan plan_f16_decode(const PlanRequest& request, const HalfOperands& operands)
{
    const MatMulNBitsConfig& config = request.config;
    LaunchPlan plan;
    if (config.rmsnorm_prologue) {
        const bool int8 = config.bits == 8 && config.block_size == 32;
        if (!int8) {
            require_block32_for_fused_decode(config);
        }
        set_variant(plan, int8 ? "gemv_int8_f16_scales_f16_rmsnorm" : "gemv_f16_scales_f16_rmsnorm",
                    [bits = config.bits, zp = operands.has_zero_points(), int8] {
                        return fmt::format(
                            "M==1 decode: fp16 activation, bits={}, block_size=32, fp16 scales, zero_points={} → "
                            "{} GEMV with fused RMS-normalization prologue (SkipSimplifiedLayerNormalization folded)",
                            bits, zp, int8 ? "int8" : "general");
                    });
        add_rmsnorm_gemv(plan, request, operands, gamma_at(request, kGammaSlot));
    } else if (config.bits == 8 && config.block_size == 32) {
        set_variant(plan, "gemv_int8_f16", [zp = operands.has_zero_points()] {
            return fmt::format("M==1 decode: fp16 activation, bits=8, block_size=32, zero_points={} → direct "
                               "capture-safe GEMV",
                               zp);
        });
        add_int8_f16_gemv(plan, request, operands);
    } else {
        add_f16_gemv(plan, request, operands);
    }
    return plan;
}

// bf16 runs only on nbits' own kernels.
[[noreturn]] void fail_no_bf16_kernel(const char* what)
{
    fail_unsupported(fmt::format("BFloat16 activations have no kernel for {}. How to fix: use Float16 activations, "
                                 "or the layouts nbits' own kernels cover (KernelPolicy::Fastest)",
                                 what));
}

HalfOperands gate_up_projection(BufferRef packed, BufferRef scales, BufferRef zero_points, BufferRef activation,
                                BufferRef output, DataType activation_type)
{
    HalfOperands operands;
    operands.activation = activation;
    operands.packed = packed;
    operands.scales = scales;
    operands.zero_points = zero_points;
    operands.output = output;
    operands.activation_type = activation_type;
    operands.scale_type = activation_type;
    return operands;
}

// The original's paired kernels implement only the block-32 int4 layout.
void require_gate_up_layout(const MatMulNBitsConfig& config)
{
    if (config.block_size != 32 || config.bits != 4) {
        fail_unsupported(fmt::format("gate/up SwiGLU fusion received bits={} and block_size={}. Why: the fused fp16 path "
                         "implements the block-32 packed int4 layout. How to fix: export 4-bit MatMulNBits weights "
                         "with block_size=32, use KernelPolicy::Fastest, or disable this fusion",
                         config.bits, config.block_size));
    }
}

struct GateUpTensors {
    const TensorDesc* gamma = nullptr;
    const TensorDesc* zp_gate = nullptr;
    const TensorDesc* zp_up = nullptr;
};

// Prefill: gate GEMM into a scratch of Y's size, up GEMM into Y, then
// Y = silu(gate) * Y. `activation` is A or its RMS-normalized copy.
void add_gate_up_prefill(LaunchPlan& plan, const PlanRequest& request, const GateUpTensors& tensors,
                         BufferRef activation, std::size_t m)
{
    const int gate = add_scratch(plan, request, request.output().byte_size(), "the gate projection");
    add_f16_gemm(plan, request,
                 gate_up_projection(BufferRef::input(kGateWeightSlot), BufferRef::input(kGateScalesSlot),
                                    optional_ref(tensors.zp_gate, kGateZeroPointsSlot), activation,
                                    BufferRef::scratch(gate), DataType::Float16),
                 m, 0);
    add_f16_gemm(plan, request,
                 gate_up_projection(BufferRef::input(kUpWeightSlot), BufferRef::input(kUpScalesSlot),
                                    optional_ref(tensors.zp_up, kUpZeroPointsSlot), activation, BufferRef::output(0),
                                    DataType::Float16),
                 m, 0);
    add_silu_mul(plan, request, BufferRef::scratch(gate), BufferRef::output(0), BufferRef::output(0),
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
    // Symmetric weights take the entry without the per-block zero-point load.
    const bool zero_points = tensors.zp_gate != nullptr || tensors.zp_up != nullptr;
    const char* entry_name = fused_norm ? (zero_points ? "matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp"
                                                       : "matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm")
                                        : (zero_points ? "matmul_nbits_gemv_f16_gate_up_swiglu_zp"
                                                       : "matmul_nbits_gemv_f16_gate_up_swiglu");
    StepBuilder step(entry_name, what);
    step.arg("activation", BufferRef::input(0))
        .arg("packed_gate", BufferRef::input(kGateWeightSlot))
        .arg("scales_gate", BufferRef::input(kGateScalesSlot))
        .arg("packed_up", BufferRef::input(kUpWeightSlot))
        .arg("scales_up", BufferRef::input(kUpScalesSlot))
        .arg("zero_points_gate", optional_ref(tensors.zp_gate, kGateZeroPointsSlot))
        .arg("zero_points_up", optional_ref(tensors.zp_up, kUpZeroPointsSlot))
        .arg("output", BufferRef::output(0))
        .size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .size_arg("blob_size", config.block_size / 2, "block blob size")
        .size_arg("zp_row_bytes", config.zp_row_bytes(), "zero-point row byte count");
    if (fused_norm) {
        step.arg("gamma", BufferRef::input(kGateUpGammaSlot))
            .flag("gamma_is_half", tensors.gamma->dtype != DataType::Float32)
            .arg("epsilon", config.rmsnorm_epsilon)
            .shared_memory(staged_activation_bytes(config), true);
    }
    step.grid(grid_extent(config.n, kGateUpThreads / 32, kMaxGridX, "N")).block(kGateUpThreads).add_to(plan, request);
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
    const DataType activation = inputs[0].dtype;
    require_dtype("A", activation, activation);
    require_dtype("W_gate", inputs[kGateWeightSlot].dtype, DataType::Uint8);
    require_dtype("scales_gate", inputs[kGateScalesSlot].dtype, activation);
    require_dtype("W_up", inputs[kUpWeightSlot].dtype, DataType::Uint8);
    require_dtype("scales_up", inputs[kUpScalesSlot].dtype, activation);
    require_dtype("Y", request.output().dtype, activation);
    GateUpTensors tensors;
    if (config.rmsnorm_prologue) {
        tensors.gamma = request.optional_input(kGateUpGammaSlot);
        if (tensors.gamma == nullptr) {
            fail("rmsnorm_prologue fusion requires the normalization weight at input 5");
        }
        require_gamma_dtype(tensors.gamma->dtype, activation);
        require_shape("gamma", tensors.gamma->shape, {config.k});
        if (!tensors.gamma->is_contiguous()) {
            fail("gamma must be contiguous on the CUDA execution provider");
        }
        if (!request.fastest()) {
            require_rmsnorm_width(config.k);
        }
    }
    m = require_activation_and_output(inputs[0], request.output(), config.k, config.n);
    if (!request.fastest()) {
        require_gate_up_layout(config);
    }
    const Shape weight_shape{config.n, config.k_blocks(), config.blob_size()};
    require_shape("W_gate", inputs[kGateWeightSlot].shape, weight_shape);
    require_shape("W_up", inputs[kUpWeightSlot].shape, weight_shape);
    require_flat_or_matrix_shape("scales_gate", inputs[kGateScalesSlot].shape, config.n, config.k_blocks());
    require_flat_or_matrix_shape("scales_up", inputs[kUpScalesSlot].shape, config.n, config.k_blocks());
    for (const int slot : {kGateWeightSlot, kGateScalesSlot, kUpWeightSlot, kUpScalesSlot}) {
        require_present(tensor_label(BufferRef::input(slot), true), inputs[static_cast<std::size_t>(slot)]);
    }

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

LaunchPlan plan_half(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const std::vector<TensorDesc>& inputs = request.inputs;
    const DataType activation = inputs[0].dtype;
    require_dtype("A", activation, activation);
    require_dtype("B", inputs[1].dtype, DataType::Uint8);
    const DataType scale_type = require_half_or_f32_scales(inputs[2].dtype, activation);
    require_dtype("Y", request.output().dtype, activation);
    const std::size_t m = require_activation_and_output(inputs[0], request.output(), config.k, config.n);
    const TensorDesc* zero_points = require_quantized_weights(request);
    const TensorDesc* g_idx = request.optional_input(4);
    const TensorDesc* bias = request.optional_input(kBiasSlot);
    if (bias != nullptr) {
        require_dtype("bias", bias->dtype, activation);
        require_bias_elements(*bias, config.n, m);
    }
    const TensorDesc* gamma = request.optional_input(kGammaSlot);
    if (config.rmsnorm_prologue) {
        if (gamma == nullptr) {
            fail("rmsnorm_prologue fusion requires the normalization weight at input 6");
        }
        require_gamma_dtype(gamma->dtype, activation);
        require_shape("gamma", gamma->shape, {config.k});
        if (!request.fastest()) {
            require_rmsnorm_width(config.k);
        }
    }
    require_contiguous({{"A", inputs[0].is_contiguous()},
                        {"B", inputs[1].is_contiguous()},
                        {"scales", inputs[2].is_contiguous()},
                        {"zero_points", contiguous_or_absent(zero_points)},
                        {"bias", contiguous_or_absent(bias)},
                        {"gamma", contiguous_or_absent(gamma)},
                        {"Y", request.output().is_contiguous()}});

    std::uint64_t flops = matmul_flops(m, config.n, config.k, bias != nullptr);
    if (config.rmsnorm_prologue) {
        flops = with_rmsnorm_flops(flops, m, config.k);
    }
    if (g_idx != nullptr) {
        fail_unsupported(
            "MatMulNBits CUDA fp16 activations do not support g_idx. Why: the block-32 fp16 kernels map each K "
            "block directly to its scale and zero point and do not implement group remapping. How to fix: omit "
            "g_idx, provide f32 activations, or select another execution provider");
    }
    // At M = 1 the original refuses fp32 scales here; nbits refuses them at every M,
    // since the prefill GEMM would read them as fp16.
    if (config.rmsnorm_prologue && scale_type != activation && !request.fastest()) {
        fail(kFp16ScalesRequired);
    }
    // The original would take the decode path and write N outputs into an empty Y.
    if (m == 0) {
        LaunchPlan plan =
            empty_plan("matmul_nbits_f16_empty", "M=0 fp16 MatMulNBits has an empty output and requires no CUDA launch");
        plan.flops = flops;
        return plan;
    }

    HalfOperands operands;
    operands.zero_points = optional_ref(zero_points, kZeroPointsSlot);
    operands.bias = optional_ref(bias, kBiasSlot);
    operands.activation_type = activation;
    operands.scale_type = scale_type;
    // A per-token residual in the bias slot is indexed with row stride N; a broadcast bias with 0.
    const std::size_t bias_row_stride = bias != nullptr && bias->numel() != config.n ? config.n : 0;

    LaunchPlan plan;
    const RmsNormGamma norm = gamma != nullptr ? gamma_at(request, kGammaSlot) : RmsNormGamma{};
    FastestRequest fastest{request, operands, m, bias_row_stride, config.rmsnorm_prologue ? &norm : nullptr,
                               nullptr};
    if (request.fastest() && plan_fastest(plan, fastest)) {
        // nbits' own kernels
    } else if (activation == DataType::BFloat16) {
        fail_no_bf16_kernel(m == 1 ? "this decode node" : "this prefill node");
    } else {
        if (config.rmsnorm_prologue) {
            // Under Fastest these were left to nbits' own kernels, which did not take the node.
            require_rmsnorm_width(config.k);
            if (scale_type != activation) {
                fail(kFp16ScalesRequired);
            }
        }
        plan = m > 1 ? plan_f16_prefill(request, operands, m, bias_row_stride) : plan_f16_decode(request, operands);
    }
    plan.flops = flops;
    plan.capture_safe = true;
    return plan;
}

LaunchPlan plan_gate_up_swiglu(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    std::size_t m = 0;
    const GateUpTensors tensors = validate_gate_up(request, m);
    std::uint64_t flops = gate_up_flops(m, config.n, config.k);
    if (config.rmsnorm_prologue) {
        flops = with_rmsnorm_flops(flops, m, config.k);
    }
    const DataType activation = request.inputs[0].dtype;

    LaunchPlan plan;
    if (m == 0) {
        plan = empty_plan("gate_up_swiglu_empty", "M=0 gate/up SwiGLU has an empty output and requires no CUDA launch");
        plan.flops = flops;
        return plan;
    }
    const HalfOperands gate =
        gate_up_projection(BufferRef::input(kGateWeightSlot), BufferRef::input(kGateScalesSlot),
                           optional_ref(tensors.zp_gate, kGateZeroPointsSlot), BufferRef::input(0),
                           BufferRef::output(0), activation);
    const HalfOperands up = gate_up_projection(BufferRef::input(kUpWeightSlot), BufferRef::input(kUpScalesSlot),
                                               optional_ref(tensors.zp_up, kUpZeroPointsSlot), BufferRef::input(0),
                                               BufferRef::output(0), activation);
    const RmsNormGamma norm = tensors.gamma != nullptr ? gamma_at(request, kGateUpGammaSlot) : RmsNormGamma{};
    FastestRequest fastest{request, gate, m, 0, tensors.gamma != nullptr ? &norm : nullptr, &up};
    if (request.fastest() && plan_fastest(plan, fastest)) {
        // nbits' own kernels
    } else if (activation == DataType::BFloat16) {
        fail_no_bf16_kernel("this gate/up node");
    } else if (require_gate_up_layout(config); config.rmsnorm_prologue && config.k % 128 != 0) {
        require_rmsnorm_width(config.k);
    } else if (m > 1 && tensors.gamma != nullptr) {
        set_variant(plan, "gate_up_swiglu_rmsnorm_prefill", [m] {
            return fmt::format("M={} prefill: RMS-normalization prologue into scratch, then two portable block-32 "
                               "int4 fp16 tiled GEMMs with fp32 accumulation, followed by fp16 SiluMul",
                               m);
        });
        add_gate_up_prefill(plan, request, tensors, add_rmsnorm_prefill(plan, request, kGateUpGammaSlot, m), m);
    } else if (m > 1) {
        set_variant(plan, "gate_up_swiglu_prefill", [m] {
            return fmt::format("M={} prefill: two portable block-32 int4 fp16 tiled GEMMs with fp32 accumulation, "
                               "followed by fp16 SiluMul",
                               m);
        });
        add_gate_up_prefill(plan, request, tensors, BufferRef::input(0), m);
    } else if (tensors.gamma != nullptr) {
        set_variant(plan, "gate_up_swiglu_rmsnorm_fused", [] {
            return "fp16 block-32 M==1 decode: fused RMS-normalization prologue + paired gate/up int4 GEMV + SwiGLU "
                   "(silu(gate)*up) in one capture-safe kernel; the RMS reduction runs once for both projections "
                   "and reproduces the standalone norm plus two-op fp16 rounding for byte-identical greedy tokens";
        });
        add_gate_up_decode(plan, request, tensors);
    } else {
        set_variant(plan, "gate_up_swiglu_fused", [] {
            return "fp16 block-32 M==1 decode: fused paired gate/up int4 GEMV + SwiGLU (silu(gate)*up) in one "
                   "capture-safe kernel; reproduces the two-op fp16 rounding for byte-identical greedy tokens";
        });
        add_gate_up_decode(plan, request, tensors);
    }
    plan.flops = flops;
    plan.capture_safe = true;
    return plan;
}

}  // namespace nbits::ops::detail
