// fp32 activations: the original's validation (g_idx range-checked against
// the device data), its M == 1 GEMV ladder, the tiled accuracy-level-4 GEMM,
// and dequantize-then-cuBLASLt for everything else; nbits' own decode kernel
// under KernelPolicy::Fastest.

#include "ops/plan_internal.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

constexpr int kZeroPointsSlot = 3;
constexpr int kGroupIndexSlot = 4;
constexpr int kBiasSlot = 5;

BufferRef zero_points_ref(const PlanRequest& request)
{
    return optional_ref(request.optional_input(kZeroPointsSlot), kZeroPointsSlot);
}

BufferRef bias_ref(const PlanRequest& request) { return optional_ref(request.optional_input(kBiasSlot), kBiasSlot); }

// (activation, packed, scales, zero_points, bias, output): the head of every f32 GEMV's parameter list.
void bind_gemv_operands(StepBuilder& step, const PlanRequest& request)
{
    step.arg("activation", BufferRef::input(0))
        .arg("packed", BufferRef::input(1))
        .arg("scales", BufferRef::input(2))
        .arg("zero_points", zero_points_ref(request))
        .arg("bias", bias_ref(request))
        .arg("output", BufferRef::output(0));
}

// The block-layout scalars of the block-general f32 entries, converted in the
// original's order: K, N, block_size, K blocks, blob size, zero-point row size.
void bind_block_layout(StepBuilder& step, const MatMulNBitsConfig& config)
{
    step.size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("block_size", config.block_size, "block_size")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .size_arg("blob_size", config.blob_size(), "block blob size")
        .size_arg("zp_row_bytes", config.zp_row_bytes(), "zero-point row size");
}

// The persistent accuracy-4 workspace: padded_k int8 activations, then the per-block scales.
BufferRef quantized_activation() { return BufferRef::workspace(0); }
BufferRef activation_scales(const MatMulNBitsConfig& config) { return BufferRef::workspace(config.padded_k()); }

// gemv_int8_f32, gemv_int8_f32_block128, gemv_int4_f32_block128: one CTA per
// column and the (K, N, K blocks) scalars.
void add_f32_fixed_layout_gemv(LaunchPlan& plan, const PlanRequest& request, const char* entry, const char* what)
{
    const MatMulNBitsConfig& config = request.config;
    StepBuilder step(entry, what);
    bind_gemv_operands(step, request);
    step.size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .grid(grid_extent(config.n, 1, kMaxGridX, "N"))
        .block(kBlockThreads)
        .add_to(plan, request);
}

// matmul_nbits_gemv_f32: any block size, int4 or int8.
void add_f32_gemv(LaunchPlan& plan, const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    StepBuilder step("matmul_nbits_gemv_f32", "MatMulNBits f32 GEMV");
    bind_gemv_operands(step, request);
    bind_block_layout(step, config);
    step.size_arg("bits", config.bits, "bits")
        .grid(grid_extent(config.n, 1, kMaxGridX, "N"))
        .block(kBlockThreads)
        .add_to(plan, request);
}

// Block-32 symmetric accuracy-level-4: quantize the activation, then the
// 8-column GEMV (the 64-block stage when the grid is below one wave).
void add_accuracy4_gemv(LaunchPlan& plan, const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const bool stage64 = use_accuracy4_stage64(config.n, request.context.capabilities);
    // One warp quantizes one 32-wide K block.
    StepBuilder("matmul_nbits_quantize_accuracy4_block32", "MatMulNBits accuracy_level=4 quantization")
        .arg("activation", BufferRef::input(0))
        .arg("quantized_activation", quantized_activation())
        .arg("activation_scale_out", activation_scales(config))
        .size_arg("k", config.k, "K")
        .size_arg("padded_k", config.padded_k(), "padded K")
        .grid(grid_extent(config.padded_k(), 32, kMaxGridX, "K"))
        .block(32)
        .add_to(plan, request);
    StepBuilder(stage64 ? "matmul_nbits_gemv_accuracy4_block32_stage64" : "matmul_nbits_gemv_accuracy4_block32",
                "MatMulNBits accuracy_level=4 GEMV")
        .arg("quantized_activation", quantized_activation())
        .arg("activation_scale_ptr", activation_scales(config))
        .arg("packed", BufferRef::input(1))
        .arg("scales", BufferRef::input(2))
        .arg("bias", bias_ref(request))
        .arg("output", BufferRef::output(0))
        .size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .grid(grid_extent(config.n, kAccuracy4ColumnsPerBlock, kMaxGridX, "N"))
        .block(kAccuracy4GemvThreads)
        .shared_memory(stage64 ? kAccuracy4Stage64SharedBytes : kAccuracy4SharedBytes, false)
        .add_to(plan, request);
}

// Any block size accuracy-level-4: quantize per K block, then the warp-per-column GEMV.
void add_accuracy4_gemv_blockwise(LaunchPlan& plan, const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    // One warp quantizes one K block of any width.
    StepBuilder("matmul_nbits_quantize_accuracy4_blockwise", "MatMulNBits accuracy_level=4 blockwise quantization")
        .arg("activation", BufferRef::input(0))
        .arg("quantized_activation", quantized_activation())
        .arg("activation_scale_out", activation_scales(config))
        .size_arg("k", config.k, "K")
        .size_arg("block_size", config.block_size, "block_size")
        .size_arg("padded_k", config.padded_k(), "padded K")
        .grid(grid_extent(config.k_blocks(), 1, kMaxGridX, "K block count"))
        .block(32)
        .add_to(plan, request);
    const std::uint32_t warps = select_accuracy4_gemv_warps(
        config.n, request.context.capabilities.multiprocessor_count, request.context.overrides);
    StepBuilder step("matmul_nbits_gemv_accuracy4_blockwise", "MatMulNBits accuracy_level=4 blockwise GEMV");
    step.arg("quantized_activation", quantized_activation())
        .arg("activation_scale_ptr", activation_scales(config))
        .arg("packed", BufferRef::input(1))
        .arg("scales", BufferRef::input(2))
        .arg("zero_points", zero_points_ref(request))
        .arg("bias", bias_ref(request))
        .arg("output", BufferRef::output(0));
    bind_block_layout(step, config);
    step.grid(grid_extent(config.n, warps, kMaxGridX, "N")).block(warps * 32).add_to(plan, request);
}

// The tiled accuracy-level-4 GEMM for M != 1.
void add_accuracy4_tiled(LaunchPlan& plan, const PlanRequest& request, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    const std::size_t outputs = checked_product(m, config.n, "the accuracy_level=4 output size");
    StepBuilder step("matmul_nbits_accuracy4", "MatMulNBits accuracy_level=4");
    step.arg("a", BufferRef::input(0))
        .arg("packed", BufferRef::input(1))
        .arg("scales", BufferRef::input(2))
        .arg("zero_points", zero_points_ref(request))
        .arg("bias", bias_ref(request))
        .arg("y", BufferRef::output(0))
        .size_arg("m", m, "M");
    bind_block_layout(step, config);
    step.grid(clamped_grid(outputs, kBlockThreads)).block(kBlockThreads).add_to(plan, request);
}

// Dequantize B to a K x N fp32 scratch, then cuBLASLt.
void add_dequant_gemm(LaunchPlan& plan, const PlanRequest& request, std::size_t m)
{
    const MatMulNBitsConfig& config = request.config;
    // cuBLASLt takes 64-bit dimensions, but its kernels index rows with 32-bit grids.
    as_i32("M", m);
    const std::size_t weight_bytes =
        checked_product(checked_product(config.k, config.n, "the dequantized weight"), sizeof(float),
                        "the dequantized weight");
    const int weight = add_scratch(plan, request, weight_bytes, "the dequantized f32 weight");
    const int workspace = add_scratch(plan, request, kBlasWorkspaceBytes, "the cuBLASLt workspace");

    StepBuilder("matmul_nbits_dequant_f32", "MatMulNBits dequant")
        .arg("packed", BufferRef::input(1))
        .arg("scales", BufferRef::input(2))
        .arg("zero_points", zero_points_ref(request))
        .arg("group_indices", optional_ref(request.optional_input(kGroupIndexSlot), kGroupIndexSlot))
        .arg("weight_kn", BufferRef::scratch(weight))
        .size_arg("k", config.k, "K")
        .size_arg("n", config.n, "N")
        .size_arg("block_size", config.block_size, "block_size")
        .size_arg("k_blocks", config.k_blocks(), "K block count")
        .size_arg("blob_size", config.blob_size(), "block blob size")
        .size_arg("zp_row_bytes", config.zp_row_bytes(), "zero-point row size")
        .size_arg("bits", config.bits, "bits")
        .grid(clamped_grid(config.k * config.n, kBlockThreads))
        .block(kBlockThreads)
        .add_to(plan, request);
    GemmStep gemm;
    gemm.dtype = DataType::Float32;
    gemm.weight_layout = GemmStep::WeightLayout::KxN;
    gemm.a = BufferRef::input(0);
    gemm.w = BufferRef::scratch(weight);
    gemm.y = BufferRef::output(0);
    gemm.bias = bias_ref(request);
    gemm.m = m;
    gemm.k = config.k;
    gemm.n = config.n;
    gemm.workspace = BufferRef::scratch(workspace);
    gemm.workspace_bytes = kBlasWorkspaceBytes;
    plan.steps.push_back(gemm);
}

// The original copies g_idx to the host and checks every group index.
void require_group_indices_in_range(const PlanRequest& request, const TensorDesc& g_idx)
{
    if (!request.context.read_g_idx) {
        fail(
            "g_idx (input 4) must be read from the device for its range check, but this plan was built from tensor "
            "descriptors alone. Why: an out-of-range group index would make the dequantization read outside "
            "scales. How to fix: plan with the tensors themselves (MatMulNBits::plan_tensors or run), or set "
            "PlanContext::read_g_idx");
    }
    check_group_index_range(request.config, request.context.read_g_idx(g_idx));
}

void validate_group_indices(const PlanRequest& request, const TensorDesc& g_idx)
{
    const MatMulNBitsConfig& config = request.config;
    require_dtype("g_idx", g_idx.dtype, DataType::Int32);
    if (!g_idx.is_contiguous()) {
        fail("g_idx must be contiguous on the CUDA execution provider");
    }
    if (g_idx.shape != Shape{config.k} && g_idx.shape != Shape{config.padded_k()}) {
        fail(fmt::format("g_idx must have shape [{}] or [{}], got {}", config.k, config.padded_k(),
                         format_shape(g_idx.shape)));
    }
    require_group_indices_in_range(request, g_idx);
}

// The M == 1 decode ladder without g_idx, in the original's order.
LaunchPlan plan_f32_decode(const PlanRequest& request, bool has_zero_points)
{
    const MatMulNBitsConfig& config = request.config;
    LaunchPlan plan;
    if (config.bits == 4 && config.block_size == 128 && has_zero_points) {
        set_variant(plan, "gemv_int4_f32_block128", [] {
            return "M==1 decode: bits=4, block_size=128, asymmetric → specialized shift-indexed int4 f32 GEMV "
                   "(bit-identical to the generic path)";
        });
        add_f32_fixed_layout_gemv(plan, request, "matmul_nbits_gemv_int4_f32_block128",
                                  "MatMulNBits int4 f32 block-128 GEMV");
    } else if (config.bits == 8 && config.block_size == 128 && has_zero_points) {
        set_variant(plan, "gemv_int8_f32_block128", [] {
            return "M==1 decode: bits=8, block_size=128, asymmetric → specialized shift-indexed int8 f32 GEMV "
                   "(bit-identical to the generic path)";
        });
        add_f32_fixed_layout_gemv(plan, request, "matmul_nbits_gemv_int8_f32_block128",
                                  "MatMulNBits int8 f32 block-128 GEMV");
    } else if (config.bits == 8 && config.block_size == 32) {
        set_variant(plan, "gemv_int8_f32",
                    [] { return "M==1 decode: bits=8, block_size=32 → direct capture-safe f32 GEMV"; });
        add_f32_fixed_layout_gemv(plan, request, "matmul_nbits_gemv_int8_f32", "MatMulNBits int8 f32 GEMV");
    } else if (config.bits == 8) {
        set_variant(plan, "gemv_f32_general_bs_int8", [block_size = config.block_size] {
            return fmt::format("M==1 decode: bits=8, block_size={} → model-agnostic f32 GEMV (fp32 accumulation, "
                               "any power-of-two block_size)",
                               block_size);
        });
        add_f32_gemv(plan, request);
    } else if (config.accuracy_level == 4 && config.block_size == 32 && !has_zero_points) {
        set_variant(plan, "gemv_accuracy4_int8", [] {
            return "M==1 decode: accuracy_level==4, block_size==32, symmetric (no zero_points) → "
                   "int8-quantized-activation capture-safe GEMV";
        });
        add_accuracy4_gemv(plan, request);
    } else if (config.accuracy_level == 4 && config.block_size == 32) {
        set_variant(plan, "gemv_accuracy4_blockwise_int8", [] {
            return "M==1 decode: bits=4, accuracy_level==4, block_size=32 → int8-quantized activation quantized "
                   "ONCE then parallelized blockwise GEMV (grid filled from the device SM count; bit-identical to "
                   "the tiled accuracy4 GEMM)";
        });
        add_accuracy4_gemv_blockwise(plan, request);
    } else if (config.accuracy_level == 4) {
        set_variant(plan, "gemv_f32_general_bs_int4", [block_size = config.block_size] {
            return fmt::format("M==1 decode: bits=4, accuracy_level==4, block_size={} (≠32) → model-agnostic f32 "
                               "GEMV (fp32 activations, higher precision than the int8-activation reference)",
                               block_size);
        });
        add_f32_gemv(plan, request);
    } else {
        set_variant(plan, "gemv_f32", [level = config.accuracy_level] {
            return fmt::format("M==1 decode: accuracy_level={} (non-accuracy4) → direct f32 GEMV", level);
        });
        add_f32_gemv(plan, request);
    }
    return plan;
}

}  // namespace

void check_group_index_range(const MatMulNBitsConfig& config, const std::vector<std::int32_t>& groups)
{
    const std::size_t k_blocks = config.k_blocks();
    for (std::size_t index = 0; index < groups.size(); ++index) {
        const std::int32_t group = groups[index];
        if (group < 0 || static_cast<std::size_t>(group) >= k_blocks) {
            fail(fmt::format("g_idx[{}]={} is outside 0..{}", index, group, k_blocks));
        }
    }
}

LaunchPlan plan_f32(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    const std::vector<TensorDesc>& inputs = request.inputs;
    require_dtype("A", inputs[0].dtype, DataType::Float32);
    // The fusions' kernels are half-precision only. A Float32 node marked with one would otherwise run as a plain
    // MatMulNBits, leaving gamma (or W_up) unread and Y silently wrong.
    if (config.rmsnorm_prologue || config.gate_up_swiglu) {
        fail_unsupported(fmt::format(
            "the {} fusion has no kernel for Float32 activations: Y would be computed without {}. How to fix: pass "
            "Float16 (or, under KernelPolicy::Fastest, BFloat16) activations, or run {} as its own node",
            config.gate_up_swiglu ? "gate/up SwiGLU" : "rmsnorm_prologue",
            config.gate_up_swiglu ? "the up projection and SwiGLU" : "the normalization weight at input 6",
            config.gate_up_swiglu ? "the gate and up MatMulNBits and the SiLU-multiply"
                                  : "SimplifiedLayerNormalization"));
    }
    require_dtype("B", inputs[1].dtype, DataType::Uint8);
    require_dtype("scales", inputs[2].dtype, DataType::Float32);
    require_dtype("Y", request.output().dtype, DataType::Float32);
    const std::size_t m = require_activation_and_output(inputs[0], request.output(), config.k, config.n);
    const TensorDesc* zero_points = require_quantized_weights(request);
    const TensorDesc* g_idx = request.optional_input(kGroupIndexSlot);
    if (g_idx != nullptr) {
        validate_group_indices(request, *g_idx);
    }
    const TensorDesc* bias = request.optional_input(kBiasSlot);
    if (bias != nullptr) {
        require_dtype("bias", bias->dtype, DataType::Float32);
        require_shape("bias", bias->shape, {config.n});
    }
    require_contiguous({{"A", inputs[0].is_contiguous()},
                        {"B", inputs[1].is_contiguous()},
                        {"scales", inputs[2].is_contiguous()},
                        {"zero_points", contiguous_or_absent(zero_points)},
                        {"g_idx", contiguous_or_absent(g_idx)},
                        {"bias", contiguous_or_absent(bias)},
                        {"Y", request.output().is_contiguous()}});

    const std::uint64_t flops = matmul_flops(m, config.n, config.k, bias != nullptr);
    if (m == 0) {
        LaunchPlan plan = empty_plan(
            "matmul_nbits_f32_empty",
            "M=0 f32 MatMulNBits has an empty output and requires no CUDA launch (the dequantize + cuBLASLt path "
            "would reject the degenerate GEMM)");
        plan.flops = flops;
        return plan;
    }
    LaunchPlan plan;
    HalfOperands operands;
    operands.zero_points = zero_points_ref(request);
    operands.bias = bias_ref(request);
    operands.activation_type = DataType::Float32;
    operands.scale_type = DataType::Float32;
    const FastestRequest fastest{request, operands, m, 0, nullptr, nullptr};
    if (g_idx == nullptr && request.fastest() && plan_fastest(plan, fastest)) {
        // nbits' own kernels
    } else if (m == 1 && g_idx == nullptr) {
        plan = plan_f32_decode(request, zero_points != nullptr);
    } else if (config.bits == 4 && config.accuracy_level == 4 && config.block_size == 32 && g_idx == nullptr) {
        set_variant(plan, "gemm_tiled_accuracy4", [m] {
            return fmt::format("M={} (GEMV requires M==1), accuracy_level==4, block_size=32, no g_idx → tiled "
                               "accuracy4 GEMM (int8-quantized activations)",
                               m);
        });
        add_accuracy4_tiled(plan, request, m);
    } else {
        set_variant(plan, "dequant_cublas_gemm", [m, level = config.accuracy_level, grouped = g_idx != nullptr] {
            return fmt::format("M={}, accuracy_level={}, g_idx={} → dequantize weights to f32 then cuBLAS GEMM "
                               "(general prefill / grouped path)",
                               m, level, grouped);
        });
        add_dequant_gemm(plan, request, m);
    }
    plan.flops = flops;
    plan.checks_group_indices = g_idx != nullptr;
    plan.capture_safe = g_idx == nullptr;
    return plan;
}

}  // namespace nbits::ops::detail
