// One row per decision of the original's run(): the variant it records and
// every launch it makes (entry, grid, block, dynamic shared memory), on
// injected devices.

#include "matmul_nbits_fixtures.hpp"

#include <set>

using namespace nbits;
using namespace nbits::ops;

namespace {

constexpr const char* kCublas = "cuBLASLt";

struct Launch {
    const char* entry;
    Dim3 grid;
    Dim3 block;
    std::uint32_t shared = 0;
};

struct VariantCase {
    const char* title;
    Capabilities device;
    NodeAttributes attributes;
    test::Shapes shapes;
    const char* variant;
    bool capture_safe;
    std::vector<Launch> launches;
};

test::Shapes f32(std::size_t m = 1, bool zero_points = false)
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.m = m;
    shapes.zero_points = zero_points;
    return shapes;
}

test::Shapes f16(std::size_t m = 1, bool zero_points = false)
{
    test::Shapes shapes;
    shapes.m = m;
    shapes.zero_points = zero_points;
    return shapes;
}

test::Shapes with_gamma(test::Shapes shapes)
{
    shapes.gamma = DataType::Float16;
    return shapes;
}

test::Shapes with_scales(test::Shapes shapes, DataType scales)
{
    shapes.scales = scales;
    return shapes;
}

test::Shapes with_g_idx(test::Shapes shapes)
{
    shapes.g_idx = true;
    return shapes;
}

NodeAttributes rms(NodeAttributes attributes) { return test::marked(std::move(attributes), kRmsNormPrologueAttr); }
NodeAttributes gate_up(NodeAttributes attributes) { return test::marked(std::move(attributes), kGateUpSwigluAttr); }

const Capabilities h200 = Capabilities::h200();
const Capabilities sm89 = Capabilities::sm89_46();
const Capabilities sm86 = Capabilities::sm86_28();

std::vector<VariantCase> variant_cases()
{
    using test::node;
    return {
        // fp32 activations, M == 1
        {"int4 block-128 asymmetric decode", h200, node(4096, 1024, 4, 128), f32(1, true), "gemv_int4_f32_block128",
         true, {{"matmul_nbits_gemv_int4_f32_block128", {1024}, {256}}}},
        {"the int4 block-128 specialization wins over accuracy level 4", h200, node(4096, 1024, 4, 128, 4),
         f32(1, true), "gemv_int4_f32_block128", true, {{"matmul_nbits_gemv_int4_f32_block128", {1024}, {256}}}},
        {"int8 block-128 asymmetric decode", h200, node(4096, 1024, 8, 128), f32(1, true), "gemv_int8_f32_block128",
         true, {{"matmul_nbits_gemv_int8_f32_block128", {1024}, {256}}}},
        {"int8 block-32 decode", h200, node(4096, 1024, 8, 32), f32(), "gemv_int8_f32", true,
         {{"matmul_nbits_gemv_int8_f32", {1024}, {256}}}},
        {"int8 block-64 decode", h200, node(4096, 1024, 8, 64, 4), f32(), "gemv_f32_general_bs_int8", true,
         {{"matmul_nbits_gemv_f32", {1024}, {256}}}},
        {"accuracy-4 block-32 symmetric decode stages 64 blocks on a sub-wave H200 grid", h200,
         node(4096, 4096, 4, 32, 4), f32(), "gemv_accuracy4_int8", true,
         {{"matmul_nbits_quantize_accuracy4_block32", {128}, {32}},
          {"matmul_nbits_gemv_accuracy4_block32_stage64", {512}, {256}, 2048}}},
        {"accuracy-4 block-32 symmetric decode keeps the 32-block stage on sm_89", sm89, node(4096, 4096, 4, 32, 4),
         f32(), "gemv_accuracy4_int8", true,
         {{"matmul_nbits_quantize_accuracy4_block32", {128}, {32}},
          {"matmul_nbits_gemv_accuracy4_block32", {512}, {256}, 1024}}},
        {"accuracy-4 block-32 asymmetric decode takes 2 warps per CTA on H200", h200, node(4096, 4096, 4, 32, 4),
         f32(1, true), "gemv_accuracy4_blockwise_int8", true,
         {{"matmul_nbits_quantize_accuracy4_blockwise", {128}, {32}},
          {"matmul_nbits_gemv_accuracy4_blockwise", {2048}, {64}}}},
        {"accuracy-4 blockwise takes 4 warps per CTA on a 46-SM sm_89", sm89, node(4096, 4096, 4, 32, 4),
         f32(1, true), "gemv_accuracy4_blockwise_int8", true,
         {{"matmul_nbits_quantize_accuracy4_blockwise", {128}, {32}},
          {"matmul_nbits_gemv_accuracy4_blockwise", {1024}, {128}}}},
        {"accuracy-4 blockwise takes 8 warps per CTA on a 28-SM sm_86", sm86, node(4096, 4096, 4, 32, 4),
         f32(1, true), "gemv_accuracy4_blockwise_int8", true,
         {{"matmul_nbits_quantize_accuracy4_blockwise", {128}, {32}},
          {"matmul_nbits_gemv_accuracy4_blockwise", {512}, {256}}}},
        {"accuracy-4 at block 64 accumulates fp32 activations", h200, node(4096, 1024, 4, 64, 4), f32(),
         "gemv_f32_general_bs_int4", true, {{"matmul_nbits_gemv_f32", {1024}, {256}}}},
        {"plain int4 decode", h200, node(4096, 1024), f32(), "gemv_f32", true,
         {{"matmul_nbits_gemv_f32", {1024}, {256}}}},
        // fp32 activations, M != 1 or g_idx: capture-safe, with stream-ordered scratch, except where g_idx is
        // range-checked by a device-to-host read
        {"accuracy-4 block-32 prefill", h200, node(4096, 1024, 4, 32, 4), f32(5), "gemm_tiled_accuracy4", true,
         {{"matmul_nbits_accuracy4", {20}, {256}}}},
        {"f32 prefill dequantizes then runs cuBLASLt", h200, node(4096, 1024), f32(5), "dequant_cublas_gemm", true,
         {{"matmul_nbits_dequant_f32", {16384}, {256}}, {kCublas, {}, {}}}},
        {"f32 decode with g_idx dequantizes too", h200, node(4096, 1024, 4, 32, 4), with_g_idx(f32()),
         "dequant_cublas_gemm", false, {{"matmul_nbits_dequant_f32", {16384}, {256}}, {kCublas, {}, {}}}},
        {"f32 with an empty M launches nothing", h200, node(4096, 1024), f32(0), "matmul_nbits_f32_empty", false,
         {}},
        // fp16 activations, M > 1
        {"fp16 block-32 prefill", h200, node(896, 4864), f16(7), "gemm_f16_tiled", true,
         {{"matmul_nbits_gemm_f16", {304, 1}, {16, 16}}}},
        {"fp16 block-128 prefill uses the general-block-size GEMM", h200, node(896, 4864, 4, 128), f16(40),
         "gemm_f16_tiled", true, {{"matmul_nbits_gemm_f16_general_bs", {304, 3}, {16, 16}}}},
        {"fp16 RMS-norm prefill normalizes into scratch first", h200, rms(node(896, 4864)), with_gamma(f16(7)),
         "gemm_f16_tiled_rmsnorm", true,
         {{"matmul_nbits_rmsnorm_f16_warp_half4", {7}, {32}}, {"matmul_nbits_gemm_f16", {304, 1}, {16, 16}}}},
        // fp16 activations, M == 1
        {"int8 RMS-norm decode stages K halves in shared memory", h200, rms(node(3072, 9216, 8, 32)),
         with_gamma(f16()), "gemv_int8_f16_scales_f16_rmsnorm", true,
         {{"matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm", {1152}, {256}, 6144}}},
        {"int8 asymmetric RMS-norm decode", h200, rms(node(3072, 9216, 8, 32)), with_gamma(f16(1, true)),
         "gemv_int8_f16_scales_f16_rmsnorm", true,
         {{"matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp", {1152}, {256}, 6144}}},
        {"int8 symmetric decode", h200, node(3072, 3072, 8, 32), f16(), "gemv_int8_f16", true,
         {{"matmul_nbits_gemv_int8_f16", {384}, {256}}}},
        {"int8 asymmetric decode splits K across two warps", h200, node(3072, 3072, 8, 32), f16(1, true),
         "gemv_int8_f16", true, {{"matmul_nbits_gemv_int8_f16_splitk", {768}, {256}}}},
        {"small int8 asymmetric decode keeps one warp per column", h200, node(1024, 1024, 8, 32), f16(1, true),
         "gemv_int8_f16", true, {{"matmul_nbits_gemv_int8_f16", {512}, {64}}}},
        {"int4 RMS-norm decode", h200, rms(node(896, 1152)), with_gamma(f16()), "gemv_f16_scales_f16_rmsnorm", true,
         {{"matmul_nbits_gemv_f16_scales_f16_rmsnorm", {576}, {64}, 1792}}},
        {"int4 asymmetric RMS-norm decode", h200, rms(node(896, 1152)), with_gamma(f16(1, true)),
         "gemv_f16_scales_f16_rmsnorm", true, {{"matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp", {576}, {64}, 1792}}},
        {"int4 wide decode with fp16 scales", h200, node(896, 4864), f16(), "gemv_f16_general", true,
         {{"matmul_nbits_gemv_f16_scales_f16", {608}, {256}}}},
        {"int4 wide decode with fp32 scales", h200, node(896, 4864), with_scales(f16(), DataType::Float32),
         "gemv_f16_general", true, {{"matmul_nbits_gemv_f16", {608}, {256}}}},
        {"int4 asymmetric decode with K % 256 != 0", h200, node(896, 4864), f16(1, true), "gemv_f16_general", true,
         {{"matmul_nbits_gemv_f16_scales_f16_zp", {608}, {256}}}},
        {"int4 asymmetric decode splits K across two warps", h200, node(3072, 8192), f16(1, true),
         "gemv_f16_general", true, {{"matmul_nbits_gemv_f16_scales_f16_zp_splitk", {2048}, {256}}}},
        {"tall-skinny down projection on H200", h200, node(4864, 896), f16(), "gemv_f16_down_projection", true,
         {{"matmul_nbits_gemv_f16_scales_f16_down_c2", {448}, {256}}}},
        {"wide down projection keeps 8 columns on H200", h200, node(32768, 16384), f16(),
         "gemv_f16_down_projection", true, {{"matmul_nbits_gemv_f16_scales_f16_down", {2048}, {256}}}},
        {"mid-width down projection takes 4 columns on H200", h200, node(16384, 8192), f16(),
         "gemv_f16_down_projection", true, {{"matmul_nbits_gemv_f16_scales_f16_down_c4", {2048}, {256}}}},
        {"int4 block-128 decode", h200, node(4096, 4096, 4, 128), f16(), "gemv_f16_general_bs", true,
         {{"matmul_nbits_gemv_f16_general_bs", {512}, {256}}}},
        {"int8 block-64 decode", h200, node(896, 896, 8, 64), f16(), "gemv_f16_general_bs", true,
         {{"matmul_nbits_gemv_f16_general_bs", {448}, {64}}}},
        {"fp16 with an empty M launches nothing", h200, node(896, 4864), f16(0), "matmul_nbits_f16_empty", false, {}},
        // the paired gate/up node
        {"gate/up with an empty M launches nothing", h200, gate_up(node(896, 4864)), f16(0), "gate_up_swiglu_empty",
         false, {}},
        {"gate/up RMS-norm prefill", h200, rms(gate_up(node(896, 4864))), with_gamma(f16(7)),
         "gate_up_swiglu_rmsnorm_prefill", true,
         {{"matmul_nbits_rmsnorm_f16_warp_half4", {7}, {32}},
          {"matmul_nbits_gemm_f16", {304, 1}, {16, 16}},
          {"matmul_nbits_gemm_f16", {304, 1}, {16, 16}},
          {"matmul_nbits_silu_mul_f16", {67}, {256}}}},
        {"gate/up prefill", h200, gate_up(node(896, 4864)), f16(7), "gate_up_swiglu_prefill", true,
         {{"matmul_nbits_gemm_f16", {304, 1}, {16, 16}},
          {"matmul_nbits_gemm_f16", {304, 1}, {16, 16}},
          {"matmul_nbits_silu_mul_f16", {67}, {256}}}},
        {"gate/up RMS-norm decode", h200, rms(gate_up(node(896, 4864))), with_gamma(f16()),
         "gate_up_swiglu_rmsnorm_fused", true,
         {{"matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm", {608}, {256}, 1792}}},
        {"gate/up asymmetric RMS-norm decode", h200, rms(gate_up(node(896, 4864))), with_gamma(f16(1, true)),
         "gate_up_swiglu_rmsnorm_fused", true,
         {{"matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp", {608}, {256}, 1792}}},
        {"gate/up decode", h200, gate_up(node(896, 4864)), f16(), "gate_up_swiglu_fused", true,
         {{"matmul_nbits_gemv_f16_gate_up_swiglu", {608}, {256}}}},
        {"gate/up asymmetric decode", h200, gate_up(node(896, 4864)), f16(1, true), "gate_up_swiglu_fused", true,
         {{"matmul_nbits_gemv_f16_gate_up_swiglu_zp", {608}, {256}}}},
    };
}

void check_launches(const LaunchPlan& plan, const std::vector<Launch>& expected)
{
    REQUIRE(plan.steps.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        CAPTURE(i);
        if (std::string(expected[i].entry) == kCublas) {
            CHECK(std::holds_alternative<GemmStep>(plan.steps[i]));
            continue;
        }
        const KernelStep& step = test::kernel_step(plan, i);
        CHECK(step.entry == expected[i].entry);
        CHECK(step.config.grid == expected[i].grid);
        CHECK(step.config.block == expected[i].block);
        CHECK(step.config.dynamic_shared_bytes == expected[i].shared);
    }
}

}  // namespace

TEST_CASE("every variant of the original picks its entries, grids, blocks and shared memory")
{
    for (const VariantCase& c : variant_cases()) {
        INFO(c.title);
        const LaunchPlan plan = test::problem(c.attributes, c.shapes, c.device).plan();
        CHECK(plan.variant == c.variant);
        CHECK(plan.capture_safe == c.capture_safe);
        CHECK_FALSE(plan.reason().empty());
        check_launches(plan, c.launches);
    }
}

TEST_CASE("the table covers the original's 23 variant names and nbits' two empty-M names")
{
    const std::set<std::string> names = {
        "gemv_int4_f32_block128", "gemv_int8_f32_block128", "gemv_int8_f32", "gemv_f32_general_bs_int8",
        "gemv_accuracy4_int8", "gemv_accuracy4_blockwise_int8", "gemv_f32_general_bs_int4", "gemv_f32",
        "gemm_tiled_accuracy4", "dequant_cublas_gemm", "gemm_f16_tiled_rmsnorm", "gemm_f16_tiled",
        "gemv_int8_f16_scales_f16_rmsnorm", "gemv_int8_f16", "gemv_f16_scales_f16_rmsnorm", "gate_up_swiglu_empty",
        "gate_up_swiglu_rmsnorm_prefill", "gate_up_swiglu_prefill", "gate_up_swiglu_rmsnorm_fused",
        "gate_up_swiglu_fused", "gemv_f16_general_bs", "gemv_f16_down_projection", "gemv_f16_general",
        "matmul_nbits_f32_empty", "matmul_nbits_f16_empty"};
    CHECK(names.size() == 25);
    std::set<std::string> covered;
    for (const VariantCase& c : variant_cases()) {
        covered.insert(c.variant);
    }
    CHECK(covered == names);
}

TEST_CASE("variant reasons are formatted like the original's")
{
    using test::node;
    CHECK(test::problem(node(4096, 1024, 8, 64), f32()).plan().reason() ==
          "M==1 decode: bits=8, block_size=64 → model-agnostic f32 GEMV (fp32 accumulation, any power-of-two "
          "block_size)");
    CHECK(test::problem(node(4096, 1024, 4, 64, 4), f32()).plan().reason() ==
          "M==1 decode: bits=4, accuracy_level==4, block_size=64 (≠32) → model-agnostic f32 GEMV (fp32 activations, "
          "higher precision than the int8-activation reference)");
    CHECK(test::problem(node(4096, 1024, 4, 32, 3), f32()).plan().reason() ==
          "M==1 decode: accuracy_level=3 (non-accuracy4) → direct f32 GEMV");
    CHECK(test::problem(node(4096, 1024, 4, 32, 4), f32(5)).plan().reason() ==
          "M=5 (GEMV requires M==1), accuracy_level==4, block_size=32, no g_idx → tiled accuracy4 GEMM "
          "(int8-quantized activations)");
    CHECK(test::problem(node(4096, 1024, 4, 32, 4), with_g_idx(f32())).plan().reason() ==
          "M=1, accuracy_level=4, g_idx=true → dequantize weights to f32 then cuBLAS GEMM (general prefill / grouped "
          "path)");
    CHECK(test::problem(node(896, 4864, 8, 64), with_scales(f16(9, true), DataType::Float32)).plan().reason() ==
          "M=9 prefill: fp16 activation, bits=8, block_size=64, zero_points=true, scales=fp32 → portable 16x16 "
          "CUDA-core tiled GEMM with fp32 accumulation");
    CHECK(test::problem(rms(node(896, 4864)), with_gamma(f16(3))).plan().reason() ==
          "M=3 prefill: RMS-normalization prologue (SkipSimplifiedLayerNormalization folded) into a per-token "
          "scratch, then portable 16x16 tiled GEMM with fp32 accumulation");
    CHECK(test::problem(node(3072, 3072, 8, 32), f16(1, true)).plan().reason() ==
          "M==1 decode: fp16 activation, bits=8, block_size=32, zero_points=true → direct capture-safe GEMV");
    CHECK(test::problem(rms(node(3072, 3072, 8, 32)), with_gamma(f16())).plan().reason() ==
          "M==1 decode: fp16 activation, bits=8, block_size=32, fp16 scales, zero_points=false → int8 GEMV with "
          "fused RMS-normalization prologue (SkipSimplifiedLayerNormalization folded)");
    CHECK(test::problem(rms(node(896, 1152)), with_gamma(f16(1, true))).plan().reason() ==
          "M==1 decode: fp16 activation, bits=4, block_size=32, fp16 scales, zero_points=true → general GEMV with "
          "fused RMS-normalization prologue (SkipSimplifiedLayerNormalization folded)");
    CHECK(test::problem(node(4864, 896), f16()).plan().reason() ==
          "fp16-activation x int4 M==1 decode GEMV: block_size=32; zero_points=false; "
          "variant=down_projection;class=tall_skinny(K>N);block_size=32;scales=fp16;K%32==0");
    CHECK(test::problem(node(896, 896, 8, 64), f16(1, true)).plan().reason() ==
          "fp16-activation x int8 M==1 decode GEMV: block_size=64; zero_points=true; "
          "variant=general;zero_points=explicit;down_projection requires symmetric zp=8");
    CHECK(test::problem(gate_up(node(896, 4864)), f16(2)).plan().reason() ==
          "M=2 prefill: two portable block-32 int4 fp16 tiled GEMMs with fp32 accumulation, followed by fp16 "
          "SiluMul");
}

TEST_CASE("the bias stage is labelled where the original labels it")
{
    using test::node;
    test::Shapes biased = f16();
    biased.bias = true;
    const LaunchPlan native = test::problem(node(896, 4864), biased).plan();
    CHECK(native.bias_stage == std::optional<std::string>("bias_native"));
    CHECK(native.bias_stage_reason ==
          std::optional<std::string>("native MatMulNBits bias: single-round epilogue fp16(acc+bias)"));

    const LaunchPlan folded = test::problem(test::marked(node(896, 4864), kFoldedBiasAttr), biased).plan();
    CHECK(folded.bias_stage == std::optional<std::string>("qkv_bias_fused"));
    CHECK(folded.bias_stage_reason ==
          std::optional<std::string>("folded standalone Add(MatMulNBits, bias) into GEMV epilogue with "
                                     "fp16-after-round semantics fp16(fp16(acc)+bias) (token-identity preserved)"));

    biased.gamma = DataType::Float16;
    CHECK(test::problem(rms(node(896, 4864)), biased).plan().bias_stage == std::optional<std::string>("bias_native"));
    CHECK(test::problem(rms(node(896, 4864, 8, 32)), biased).plan().bias_stage ==
          std::optional<std::string>("bias_native"));

    // No label without a bias, and none on the paths the original does not label.
    CHECK_FALSE(test::problem(node(896, 4864), f16()).plan().bias_stage.has_value());
    biased.gamma.reset();
    CHECK_FALSE(test::problem(node(896, 4864, 8, 32), biased).plan().bias_stage.has_value());
    biased.m = 4;
    CHECK_FALSE(test::problem(node(896, 4864), biased).plan().bias_stage.has_value());
}

TEST_CASE("flops follow the original's metric formulas")
{
    using test::node;
    test::Shapes biased = f32(3);
    biased.bias = true;
    CHECK(test::problem(node(4096, 1024), biased).plan().flops == 2ull * 3 * 1024 * 4096 + 3 * 1024);
    CHECK(test::problem(node(896, 4864), f16(5)).plan().flops == 2ull * 5 * 4864 * 896);
    CHECK(test::problem(rms(node(896, 4864)), with_gamma(f16(5))).plan().flops ==
          2ull * 5 * 4864 * 896 + 4ull * 5 * 896 + 4 * 5);
    CHECK(test::problem(gate_up(node(896, 4864)), f16(5)).plan().flops == 4ull * 5 * 4864 * 896 + 5ull * 5 * 4864);
    CHECK(test::problem(rms(gate_up(node(896, 4864))), with_gamma(f16(1))).plan().flops ==
          4ull * 4864 * 896 + 5ull * 4864 + 4ull * 896 + 4);
}

TEST_CASE("scratch buffers: K x N fp32 weights and the cuBLASLt workspace, normalized rows, the gate projection")
{
    using test::node;
    const LaunchPlan dequant = test::problem(node(4096, 1024), f32(5)).plan();
    CHECK(dequant.scratch_bytes == std::vector<std::size_t>{4096 * 1024 * 4, 32u << 20});
    // Scratch is released stream-ordered: nothing waits for the GPU.
    CHECK(dequant.workspace_bytes() == 4096 * 1024 * 4 + (32u << 20));
    const GemmStep& gemm = std::get<GemmStep>(dequant.steps[1]);
    CHECK(gemm.a == BufferRef::input(0));
    CHECK(gemm.w == BufferRef::scratch(0));
    CHECK(gemm.y == BufferRef::output(0));
    CHECK(gemm.bias == BufferRef::null());
    CHECK(gemm.workspace == BufferRef::scratch(1));
    CHECK(gemm.workspace_bytes == 32u << 20);
    CHECK((gemm.m == 5 && gemm.k == 4096 && gemm.n == 1024));
    CHECK(gemm.dtype == DataType::Float32);
    CHECK(gemm.weight_layout == GemmStep::WeightLayout::KxN);

    CHECK(test::problem(rms(node(896, 4864)), with_gamma(f16(7))).plan().scratch_bytes ==
          std::vector<std::size_t>{7 * 896 * 2});
    CHECK(test::problem(gate_up(node(896, 4864)), f16(7)).plan().scratch_bytes ==
          std::vector<std::size_t>{7 * 4864 * 2});
    CHECK(test::problem(rms(gate_up(node(896, 4864))), with_gamma(f16(7))).plan().scratch_bytes ==
          std::vector<std::size_t>{7 * 896 * 2, 7 * 4864 * 2});
    const LaunchPlan decode = test::problem(node(896, 4864), f16()).plan();
    CHECK(decode.scratch_bytes.empty());
    CHECK(decode.workspace_bytes() == 0);
}

TEST_CASE("only the fused RMS-norm GEMVs opt into more dynamic shared memory")
{
    using test::node;
    for (const VariantCase& c : variant_cases()) {
        INFO(c.title);
        for (const PlanStep& planned : test::problem(c.attributes, c.shapes, c.device).plan().steps) {
            if (const auto* step = std::get_if<KernelStep>(&planned)) {
                const bool fused_norm = step->entry.find("rmsnorm") != std::string::npos &&
                                        step->entry != "matmul_nbits_rmsnorm_f16_warp_half4";
                CHECK(step->configure_shared_memory == fused_norm);
            }
        }
    }
}
