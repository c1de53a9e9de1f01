// The original's pure selection tests, ported, plus the device cases the
// grid-fill rules exist for.

#include "matmul_nbits_fixtures.hpp"
#include "kernels.hpp"
#include "ops/plan_internal.hpp"

using namespace nbits;
using namespace nbits::ops;
using namespace nbits::ops::detail;

namespace {

// Qwen2.5-0.5B down projection (K = intermediate, N = hidden): a fixture for
// the tall-skinny class; the selection never keys on these values.
constexpr std::size_t kQwenDownK = 4864;
constexpr std::size_t kQwenDownN = 896;

}  // namespace

TEST_CASE("fp16 GEMV variant selection is structural, not keyed on a model's dimensions")
{
    const F16GemvSelection qwen = select_f16_gemv_variant(kQwenDownK, kQwenDownN, 32, true, false);
    CHECK(qwen.variant == F16GemvVariant::DownProjection);
    CHECK(std::string(qwen.reason) ==
          "variant=down_projection;class=tall_skinny(K>N);block_size=32;scales=fp16;K%32==0");

    // Other tall-skinny down/output projections, including contractions larger
    // than the former activation-staging limit, select it too.
    for (const auto& [k, n] : {std::pair<std::size_t, std::size_t>{5632, 2048},
                               {11008, 4096},
                               {2048, 512},
                               {4096, 4096 - 32},
                               {32768, 4096}}) {
        CAPTURE(k);
        CAPTURE(n);
        CHECK(select_f16_gemv_variant(k, n, 32, true, false).variant == F16GemvVariant::DownProjection);
    }

    // Wide (N >= K), K not a multiple of 32, and non-block-32 all stay general.
    struct General {
        std::size_t k, n, block_size;
    };
    for (const General& c : {General{896, 4864, 32},     // gate/up: N > K
                             General{896, 896, 32},      // square is not tall-skinny
                             General{896, 151936, 32},   // lm_head: N >> K
                             General{4880, 896, 32},     // 4880 % 32 != 0
                             General{4864, 896, 64}}) {  // block_size != 32
        CAPTURE(c.k);
        CAPTURE(c.n);
        CAPTURE(c.block_size);
        CHECK(select_f16_gemv_variant(c.k, c.n, c.block_size, true, false).variant == F16GemvVariant::General);
    }
    CHECK(std::string(select_f16_gemv_variant(896, 4864, 32, true, false).reason) ==
          "variant=general;class=not(tall_skinny K>N & block_size=32 & scales=fp16 & K%32==0)");

    // fp32 scales are never down-eligible, even for a tall-skinny shape.
    CHECK(select_f16_gemv_variant(kQwenDownK, kQwenDownN, 32, false, false).variant == F16GemvVariant::General);

    const F16GemvSelection asymmetric = select_f16_gemv_variant(kQwenDownK, kQwenDownN, 32, true, true);
    CHECK(asymmetric.variant == F16GemvVariant::General);
    CHECK(std::string(asymmetric.reason) ==
          "variant=general;zero_points=explicit;down_projection requires symmetric zp=8");
}

TEST_CASE("down columns fill the device and never undersplit")
{
    // Wide: the 8-column grid already meets the ~2-wave target.
    CHECK(select_down_columns(65536, 132) == DownColumns{8, "matmul_nbits_gemv_f16_scales_f16_down"});
    // Mid-width: 8 columns underfill, 4 columns meet it.
    CHECK(select_down_columns(8192, 132) == DownColumns{4, "matmul_nbits_gemv_f16_scales_f16_down_c4"});
    // Grid-starved (Qwen2.5-7B down, N = 3584, on 132 SMs): 2 columns per CTA.
    CHECK(select_down_columns(3584, 132) == DownColumns{2, "matmul_nbits_gemv_f16_scales_f16_down_c2"});
    // Never below 2 columns: 1-column launches re-read the activation 8x.
    CHECK(select_down_columns(64, 132).columns == 2);
    // A degenerate device (0 SMs reads as 1) keeps the cheapest launch.
    CHECK(select_down_columns(3584, 0) == DownColumns{8, "matmul_nbits_gemv_f16_scales_f16_down"});
}

TEST_CASE("down projection splits to two columns per CTA on a grid-starved H200")
{
    const test::Problem p = test::problem(test::node(18944, 3584));
    const LaunchPlan plan = p.plan();
    CHECK(plan.variant == "gemv_f16_down_projection");
    const KernelStep& step = test::kernel_step(plan, 0);
    CHECK(step.entry == "matmul_nbits_gemv_f16_scales_f16_down_c2");
    CHECK(step.config.grid == Dim3{1792, 1, 1});
    CHECK(step.config.block == Dim3{256, 1, 1});
}

TEST_CASE("the same down projection takes 4 columns on a 46-SM sm_89 and 8 on a 28-SM sm_86")
{
    const LaunchPlan sm89 = test::problem(test::node(18944, 3584), {}, Capabilities::sm89_46()).plan();
    CHECK(test::kernel_step(sm89, 0).entry == "matmul_nbits_gemv_f16_scales_f16_down_c4");
    CHECK(test::kernel_step(sm89, 0).config.grid.x == 896);
    const LaunchPlan sm86 = test::problem(test::node(18944, 3584), {}, Capabilities::sm86_28()).plan();
    CHECK(test::kernel_step(sm86, 0).entry == "matmul_nbits_gemv_f16_scales_f16_down");
    CHECK(test::kernel_step(sm86, 0).config.grid.x == 448);
}

TEST_CASE("ONNX_GENAI_DOWN_COLS forces the down columns through PlanOverrides, other values are ignored")
{
    test::Problem p = test::problem(test::node(18944, 3584));
    p.context.overrides = PlanOverrides::parse({{kDownColumnsEnv, "8"}});
    CHECK(test::kernel_step(p.plan(), 0).entry == "matmul_nbits_gemv_f16_scales_f16_down");
    CHECK(test::kernel_step(p.plan(), 0).config.grid.x == 448);
    p.context.overrides = PlanOverrides::parse({{kDownColumnsEnv, "4"}});
    CHECK(test::kernel_step(p.plan(), 0).entry == "matmul_nbits_gemv_f16_scales_f16_down_c4");
    p.context.overrides = PlanOverrides::parse({{kDownColumnsEnv, "1"}});
    CHECK(test::kernel_step(p.plan(), 0).entry == "matmul_nbits_gemv_f16_scales_f16_down_c2");
    // A forced value the original would never produce is ignored, too.
    p.context.overrides.down_columns = 3;
    CHECK(test::kernel_step(p.plan(), 0).entry == "matmul_nbits_gemv_f16_scales_f16_down_c2");
}

TEST_CASE("accuracy-4 GEMV warps halve until the grid reaches 12 CTAs per SM")
{
    const PlanOverrides none;
    CHECK(select_accuracy4_gemv_warps(4096, 132, none) == 2);
    CHECK(select_accuracy4_gemv_warps(4096, 46, none) == 4);
    CHECK(select_accuracy4_gemv_warps(4096, 28, none) == 8);
    CHECK(select_accuracy4_gemv_warps(1024, 132, none) == 1);
    CHECK(select_accuracy4_gemv_warps(151936, 132, none) == 8);
    CHECK(select_accuracy4_gemv_warps(4096, 0, none) == 8);
}

TEST_CASE("ONNX_GENAI_ACC4_WARPS forces the accuracy-4 warps through PlanOverrides, other values are ignored")
{
    test::Shapes shapes;
    shapes.activation = DataType::Float32;
    shapes.zero_points = true;
    test::Problem p = test::problem(test::node(4096, 4096, 4, 32, 4), shapes);
    CHECK(test::kernel_step(p.plan(), 1).config.block.x == 64);
    p.context.overrides = PlanOverrides::parse({{kAccuracy4WarpsEnv, "8"}});
    CHECK(test::kernel_step(p.plan(), 1).config.block.x == 256);
    CHECK(test::kernel_step(p.plan(), 1).config.grid.x == 512);
    p.context.overrides = PlanOverrides::parse({{kAccuracy4WarpsEnv, "+1"}});
    CHECK(test::kernel_step(p.plan(), 1).config.block.x == 32);
    CHECK(test::kernel_step(p.plan(), 1).config.grid.x == 4096);
    p.context.overrides = PlanOverrides::parse({{kAccuracy4WarpsEnv, "3"}});
    CHECK(test::kernel_step(p.plan(), 1).config.block.x == 64);
    p.context.overrides.accuracy4_warps = 16;
    CHECK(test::kernel_step(p.plan(), 1).config.block.x == 64);
}

TEST_CASE("accuracy-4 stage64 is limited to sub-wave block-32 grids of the device's resident warps")
{
    auto device = [](int major, int minor, std::uint32_t sms, std::uint32_t optin) {
        DeviceAttributes attributes;
        attributes.compute_major = major;
        attributes.compute_minor = minor;
        attributes.multiprocessor_count = static_cast<int>(sms);
        attributes.max_shared_memory_per_block_optin = static_cast<int>(optin);
        return Capabilities::from(attributes);
    };
    CHECK(use_accuracy4_stage64(4608, device(9, 0, 132, 64 * 1024)));
    CHECK_FALSE(use_accuracy4_stage64(4608, device(8, 9, 46, 48 * 1024)));
    CHECK_FALSE(use_accuracy4_stage64(4608, device(8, 6, 28, 48 * 1024)));
    CHECK_FALSE(use_accuracy4_stage64(65536, device(9, 0, 132, 64 * 1024)));
    // sm_80 has 64 resident warps per SM, sm_86/sm_89 48: the original's datacenter rule.
    CHECK(use_accuracy4_stage64(4608, device(8, 0, 108, 163 * 1024)));
    CHECK_FALSE(use_accuracy4_stage64(4608, device(8, 6, 72, 99 * 1024)));
    CHECK(use_accuracy4_stage64(4608, device(8, 6, 97, 99 * 1024)));
    // sm_120 class parts have 48 resident warps, not the 64 of sm_90: 576 CTAs
    // is one wave on 96 of them (6 CTAs each), below one on 97.
    CHECK_FALSE(use_accuracy4_stage64(4608, device(12, 0, 96, 99 * 1024)));
    CHECK(use_accuracy4_stage64(4608, device(12, 0, 97, 99 * 1024)));
    CHECK(Capabilities::rtx5090().resident_warps_per_multiprocessor() == 48);
    CHECK(Capabilities::h200().resident_warps_per_multiprocessor() == 64);
    // The driver's own figure wins over the compute-capability default.
    DeviceAttributes reported;
    reported.compute_major = 9;
    reported.max_threads_per_multiprocessor = 1024;
    CHECK(Capabilities::from(reported).resident_warps_per_multiprocessor() == 32);
}

TEST_CASE("fp16 GEMVs use 64 threads only when both N and K are at most 1152")
{
    CHECK(f16_gemv_threads(1152, 1152) == 64);
    CHECK(f16_gemv_threads(1153, 1152) == 256);
    CHECK(f16_gemv_threads(1152, 1153) == 256);
    CHECK(f16_gemv_threads(896, 896) == 64);
}

TEST_CASE("fp16 down projection loads the block activation directly into registers")
{
    // The ported down template is gemv_scales_f16_down<Cols>; the original's
    // test looked for the same intent in matmul_nbits_gemv_f16_scales_f16_down_tpl.
    const std::string& text = kernels::source("gemv_f16").text();
    const std::size_t start = text.find("void gemv_scales_f16_down(");
    REQUIRE_MESSAGE(start != std::string::npos, "the down-projection template must exist");
    const std::size_t end = text.find("\n}\n", start);
    REQUIRE_MESSAGE(end != std::string::npos, "the down-projection template must have a bounded body");
    const std::string body = text.substr(start, end - start);

    CHECK_MESSAGE(body.find("activation_shared") == std::string::npos,
                  "the down projection must not round-trip activations through shared memory");
    for (const char* offset :
         {"activation_block);", "activation_block + 8);", "activation_block + 16);", "activation_block + 24);"}) {
        CAPTURE(offset);
        CHECK_MESSAGE(body.find(offset) != std::string::npos,
                      "the down projection must load the block-32 activation directly at each offset");
    }
}
