// KernelPolicy::Fastest: which of nbits' own kernels a node gets, by M, dtype
// and device, with what specialisation, and that its scratch stays bounded.

#include "matmul_nbits_fixtures.hpp"

#include "jit/compile.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

using namespace nbits;
using namespace nbits::ops;
using test::node;

namespace {

test::Problem fastest(const NodeAttributes& attributes, test::Shapes shapes,
                      const Capabilities& device = Capabilities::h200())
{
    test::Problem p = test::problem(attributes, shapes, device);
    p.context.policy = KernelPolicy::Fastest;
    return p;
}

// `p` with one developer override of its plan context set.
test::Problem with_override(test::Problem p, std::optional<int> PlanOverrides::*field, std::optional<int> value);

// The plan where the tensor memory accelerator does not feed the sm_90 wgmma GEMM (NBITS_PREFILL_TMA=0), as for
// a node whose rows the tensor maps cannot describe: cp.async tiles of 128 tokens, and dequantise + cuBLASLt past
// the wgmma GEMM's M range.
test::Problem without_tma(const NodeAttributes& attributes, test::Shapes shapes,
                          const Capabilities& device = Capabilities::h200())
{
    return with_override(fastest(attributes, std::move(shapes), device), &PlanOverrides::prefill_tma, 0);
}

// `p` with one developer override of its plan context set.
test::Problem with_override(test::Problem p, std::optional<int> PlanOverrides::*field, std::optional<int> value)
{
    p.context.overrides.*field = value;
    return p;
}

// `p` planned with grids of whole tiles only (NBITS_PREFILL_STREAM_K=0).
test::Problem without_stream_k(test::Problem p)
{
    return with_override(std::move(p), &PlanOverrides::prefill_stream_k, 0);
}

test::Shapes rows(std::size_t m, DataType activation = DataType::Float16)
{
    test::Shapes shapes;
    shapes.m = m;
    shapes.activation = activation;
    return shapes;
}

std::vector<std::string> entries(const LaunchPlan& plan)
{
    std::vector<std::string> names;
    for (const PlanStep& step : plan.steps) {
        if (const auto* kernel = std::get_if<KernelStep>(&step)) {
            names.push_back(kernel->entry);
        } else {
            names.push_back("cuBLASLt");
        }
    }
    return names;
}

bool defines(const KernelStep& step, const std::string& define)
{
    return std::find(step.defines.begin(), step.defines.end(), define) != step.defines.end();
}

// Whether the step sets macro `name` to any value.
bool sets(const KernelStep& step, const std::string& name)
{
    return std::any_of(step.defines.begin(), step.defines.end(),
                       [&](const std::string& define) { return define.rfind(name + "=", 0) == 0; });
}

// The integer the step sets macro `name` to, or nullopt where it sets none.
std::optional<long long> define_value(const KernelStep& step, const std::string& name)
{
    for (const std::string& define : step.defines) {
        if (define.rfind(name + "=", 0) == 0) {
            return std::stoll(define.substr(name.size() + 1));
        }
    }
    return std::nullopt;
}

}  // namespace

TEST_CASE("Fastest prefill: the fused tensor-core GEMM up to M = 128, specialised on the node")
{
    for (const std::size_t m : {17, 32, 64, 128}) {
        CAPTURE(m);
        // Not sm_90, whose wgmma GEMM takes M = 128 of this node (below).
        const LaunchPlan plan = fastest(node(4096, 14336), rows(m), Capabilities::a100()).plan();
        CHECK(plan.variant == "nbits_prefill_fused");
        REQUIRE(entries(plan) == std::vector<std::string>{"nbits_prefill_gemm"});
        const KernelStep& step = test::kernel_step(plan, 0);
        CHECK(defines(step, "NBITS_K=4096"));
        CHECK(defines(step, "NBITS_BITS=4"));
        CHECK(defines(step, "NBITS_BLOCK_SIZE=32"));
        CHECK(defines(step, "NBITS_HAS_ZP=0"));
        CHECK(defines(step, "NBITS_ACT_BF16=0"));
        CHECK(defines(step, "NBITS_WGMMA=0"));
        CHECK_FALSE(step.arch_specific);
        CHECK(step.configure_shared_memory);
        CHECK(step.config.dynamic_shared_bytes <= Capabilities::a100().max_shared_memory_per_block_optin);
        CHECK(plan.scratch_bytes.empty());
        CHECK(plan.capture_safe);
    }
    // M = 64 at K >= 4096 takes the 128 x 64 tile: 112 column tiles, one row tile (the A100: no wgmma, no split).
    const LaunchPlan m64_plan = fastest(node(4096, 14336), rows(64), Capabilities::a100()).plan();
    const KernelStep& m64 = test::kernel_step(m64_plan, 0);
    CHECK(m64.config.grid == Dim3{112, 1, 1});
    CHECK(m64.config.block == Dim3{256, 1, 1});
    // Four stages of 128 weight rows x 64 bytes, 64 tokens x 128 k x 2 bytes and a row's four fp16 scales in two
    // words (they start on a multiple of 8 bytes of a row of 256).
    CHECK(m64.config.dynamic_shared_bytes == 4 * (128 * 64 + 64 * 128 * 2 + 128 * 2 * 4));
}

TEST_CASE("Fastest on sm_90 at M = 12..32: the fused GEMM's 128-row tiles where their grid fills a round or spans three")
{
    auto tiles_of = [](const test::Problem& problem) {
        const LaunchPlan plan = problem.plan();
        const KernelStep& step = test::kernel_step(plan, 0);
        if (step.entry != "nbits_prefill_gemm") {
            return step.entry;
        }
        for (const char* tiles : {"NBITS_TILE_N=128", "NBITS_TILE_N=64"}) {
            if (defines(step, tiles)) {
                return std::string(tiles) + (defines(step, "NBITS_TILE_M=16") ? " x 16" : " x 32");
            }
        }
        return std::string("other tiles");
    };
    // lm_head (1002 tiles of 128 rows: 3.8 rounds of 264 CTAs) from M = 12, the decode kernel below.
    CHECK(tiles_of(fastest(node(4096, 128256), rows(9))) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(node(4096, 128256), rows(11))) == "nbits_decode_matmul");
    for (const std::size_t m : {12, 16}) {
        CAPTURE(m);
        const test::Problem lm_head = fastest(node(4096, 128256), rows(m));
        CHECK(tiles_of(lm_head) == "NBITS_TILE_N=128 x 16");
        const LaunchPlan plan = lm_head.plan();
        CHECK(plan.variant == "nbits_prefill_fused");
        const KernelStep& step = test::kernel_step(plan, 0);
        CHECK(step.config.grid == Dim3{1002, 1, 1});
        CHECK(step.config.block == Dim3{256, 1, 1});
        CHECK(defines(step, "NBITS_WARPS_K=2"));
        CHECK(defines(step, "NBITS_MIN_CTAS=2"));
        CHECK_FALSE(defines(step, "NBITS_SPLIT_K=2"));
        CHECK(2 * (step.config.dynamic_shared_bytes + 1024) <=
              Capabilities::h200().max_shared_memory_per_block_optin + 1024);
        CHECK(plan.capture_safe);
        CHECK(plan.scratch_bytes.empty());
        CHECK(tiles_of(fastest(node(4096, 128256), rows(m, DataType::BFloat16))) == "NBITS_TILE_N=128 x 16");
    }
    CHECK(tiles_of(fastest(node(4096, 128256), rows(32))) == "NBITS_TILE_N=128 x 32");
    // One round at least four fifths full: Llama-3-70B up (224 tiles), Phi-3.5-mini lm_head (251).
    CHECK(tiles_of(fastest(node(8192, 28672), rows(16))) == "NBITS_TILE_N=128 x 16");
    CHECK(tiles_of(fastest(node(3072, 32064), rows(24))) == "NBITS_TILE_N=128 x 32");
    // A partial last round keeps the decode kernel and the preset's 64-row tiles: Llama-3-70B gate/up unpaired (448
    // tiles), Qwen2.5-7B's (296), Llama-3-8B up (112).
    CHECK(tiles_of(fastest(node(8192, 57344), rows(16))) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(node(8192, 57344), rows(32))) == "NBITS_TILE_N=64 x 32");
    CHECK(tiles_of(fastest(node(3584, 37888), rows(12))) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(node(4096, 14336), rows(16))) == "nbits_decode_matmul");
    // Not measured faster with zero points, int8 weights, the paired node or the RMS-norm prologue, nor off sm_90.
    test::Shapes zp = rows(16);
    zp.zero_points = true;
    CHECK(tiles_of(fastest(node(4096, 128256), zp)) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(node(4096, 128256, 8), rows(16))) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(test::marked(node(4096, 128256), kGateUpSwigluAttr), rows(16))) == "nbits_decode_gate_up");
    test::Shapes normed = rows(16);
    normed.gamma = DataType::Float16;
    CHECK(tiles_of(fastest(test::marked(node(4096, 128256), kRmsNormPrologueAttr), normed)) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(node(4096, 128256), rows(16), Capabilities::a100())) == "nbits_decode_matmul");
    CHECK(tiles_of(fastest(node(4096, 128256), rows(32), Capabilities::a100())) == "NBITS_TILE_N=64 x 32");
    // Where the tiles do not fit the device's shared memory, the decode kernel's refusal stands.
    Capabilities small = Capabilities::h200();
    small.max_shared_memory_per_block_optin = 24 * 1024;
    CHECK_THROWS_WITH_AS(fastest(node(4096, 128256), rows(16), small).plan(),
                         doctest::Contains("decode kernel needs"), Error);
}

TEST_CASE("Fastest prefill on sm_90: the tensor memory accelerator feeds the wgmma GEMM's 128-token tiles up to "
          "M = 128 and 256-token tiles past it, at any M where their grid fills the device")
{
    struct Tiles {
        std::string entry;
        int tokens = 0;
        bool tma = false;
        std::string variant;
        bool operator==(const Tiles& o) const
        {
            return entry == o.entry && tokens == o.tokens && tma == o.tma && variant == o.variant;
        }
    };
    auto tiles_of = [](const test::Problem& problem) {
        const LaunchPlan plan = problem.plan();
        Tiles t;
        t.variant = plan.variant;
        for (const PlanStep& step : plan.steps) {
            const auto* kernel = std::get_if<KernelStep>(&step);
            if (kernel != nullptr && kernel->entry.rfind("nbits_prefill_g", 0) == 0) {
                t.entry = kernel->entry;
                for (const int tokens : {64, 128, 256}) {
                    t.tokens = defines(*kernel, "NBITS_TILE_M=" + std::to_string(tokens)) ? tokens : t.tokens;
                }
                t.tma = defines(*kernel, "NBITS_TMA=1");
            }
        }
        return t;
    };
    const std::string wgmma = "nbits_prefill_wgmma";
    // Llama-3-8B up: cp.async on the 64-token tiles, TMA on 128 tokens at M = 128, on 256 past it, to any M.
    CHECK(tiles_of(fastest(node(4096, 14336), rows(64))) == Tiles{"nbits_prefill_gemm", 64, false, wgmma});
    CHECK(tiles_of(fastest(node(4096, 14336), rows(128))) == Tiles{"nbits_prefill_gemm_tma", 128, true, wgmma});
    for (const std::size_t m : {129, 256, 512, 1024, 2048, 8192}) {
        CAPTURE(m);
        CHECK(tiles_of(fastest(node(4096, 14336), rows(m))) == Tiles{"nbits_prefill_gemm_tma", 256, true, wgmma});
        CHECK(tiles_of(fastest(node(4096, 14336), rows(m, DataType::BFloat16))) ==
              Tiles{"nbits_prefill_gemm_tma", 256, true, wgmma});
    }
    const KernelStep tall = test::kernel_step(fastest(node(4096, 14336), rows(2048)).plan(), 0);
    CHECK(defines(tall, "NBITS_PRODUCER_WARPS=4"));
    CHECK(defines(tall, "NBITS_MIN_CTAS=1"));
    CHECK(tall.config.grid == Dim3{112, 8, 1});
    CHECK(tall.config.block == Dim3{384, 1, 1});
    // The paired node, int8 weights and zero points alike.
    CHECK(tiles_of(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(2048))) ==
          Tiles{"nbits_prefill_gate_up_tma", 256, true, wgmma});
    test::Shapes zp = rows(512, DataType::BFloat16);
    zp.zero_points = true;
    CHECK(tiles_of(fastest(node(4096, 14336, 8, 128), zp)) == Tiles{"nbits_prefill_gemm_tma", 256, true, wgmma});
    // Llama-3-8B qkv (48 column tiles): at M = 256 neither grid of whole tiles fills the device (dequantise +
    // cuBLASLt, where the stream-K grid does not take it); at M = 512 the 128-token grid alone would (192 CTAs) but
    // is short of the slots; past M = 512 the bound stands for a node whose row of tiles covers less than three
    // quarters of the SMs.
    CHECK(tiles_of(without_stream_k(fastest(node(4096, 6144), rows(256)))).variant ==
          "nbits_prefill_dequantize_cublaslt");
    // Nor does a grid that fills it only with K split (Llama-3-8B o at M = 256: 32 column tiles split 4).
    CHECK(tiles_of(without_stream_k(fastest(node(4096, 4096), rows(256)))).variant ==
          "nbits_prefill_dequantize_cublaslt");
    CHECK(tiles_of(without_stream_k(fastest(node(4096, 6144), rows(512)))).variant ==
          "nbits_prefill_dequantize_cublaslt");
    CHECK(tiles_of(fastest(node(4096, 6144), rows(2048))).variant == "nbits_prefill_dequantize_cublaslt");
    // Llama-3-70B qkv (80 column tiles, 0.6 of the SMs) too; Qwen2.5-7B up (148) takes them at any M.
    CHECK(tiles_of(without_stream_k(fastest(node(8192, 10240), rows(1024)))).variant ==
          "nbits_prefill_dequantize_cublaslt");
    CHECK(tiles_of(fastest(node(3584, 18944), rows(4096))) == Tiles{"nbits_prefill_gemm_tma", 256, true, wgmma});
    // Where the 256-token grid is short of the SMs and the 128-token one is not: 128 tokens (70 column tiles at
    // M = 200: 70 CTAs of 256 tokens, 140 of 128).
    CHECK(tiles_of(fastest(node(4096, 8960), rows(200))) == Tiles{"nbits_prefill_gemm_tma", 128, true, wgmma});
    // Rows the tensor maps cannot describe (K % 8 != 0), or NBITS_PREFILL_TMA=0: the cp.async tiles of 128 tokens
    // and dequantise + cuBLASLt past M = 512.
    CHECK(tiles_of(fastest(node(4100, 14336), rows(256))) == Tiles{"nbits_prefill_gemm", 128, false, wgmma});
    CHECK(tiles_of(fastest(node(4100, 14336), rows(1024))).variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(tiles_of(without_tma(node(4096, 14336), rows(256))) == Tiles{"nbits_prefill_gemm", 128, false, wgmma});
    CHECK(tiles_of(without_tma(node(4096, 14336), rows(2048))).variant == "nbits_prefill_dequantize_cublaslt");
    // NBITS_PREFILL_WGMMA_TILE_M=128 keeps 128-token tiles, fed by TMA.
    CHECK(tiles_of(with_override(fastest(node(4096, 14336), rows(512)), &PlanOverrides::prefill_wgmma_tile_m, 128)) ==
          Tiles{"nbits_prefill_gemm_tma", 128, true, wgmma});
    // Not on other GPUs.
    CHECK(tiles_of(fastest(node(4096, 14336), rows(2048), Capabilities::a100())).variant ==
          "nbits_prefill_dequantize_cublaslt");
}

TEST_CASE("Fastest on sm_90 with NBITS_PREFILL_WIDE_SPLIT: the 128-row tiles at M = 12..32 where their grid fills a "
          "round only with K split over clusters of 2")
{
    auto wide_split = [](test::Problem p) { return with_override(std::move(p), &PlanOverrides::prefill_wide_split, 1); };
    auto split_of = [](const test::Problem& problem) {
        const LaunchPlan plan = problem.plan();
        const KernelStep& step = test::kernel_step(plan, 0);
        if (step.entry != "nbits_prefill_gemm" || !defines(step, "NBITS_TILE_N=128")) {
            return step.entry + " (not the 128-row tiles)";
        }
        return std::string(defines(step, "NBITS_SPLIT_K=2") ? "split 2" : sets(step, "NBITS_SPLIT_K") ? "other split"
                                                                                                      : "unsplit");
    };
    // Llama-3-8B up (112 tiles): 224 CTAs on the H200's 264 slots, at M = 12, 16 and 32, fp16 and bf16.
    for (const std::size_t m : {12, 16, 32}) {
        CAPTURE(m);
        CHECK(split_of(wide_split(fastest(node(4096, 14336), rows(m)))) == "split 2");
        CHECK(split_of(wide_split(fastest(node(4096, 14336), rows(m, DataType::BFloat16)))) == "split 2");
        const LaunchPlan plan = wide_split(fastest(node(4096, 14336), rows(m))).plan();
        CHECK(plan.variant == "nbits_prefill_fused");
        CHECK(plan.capture_safe);
        CHECK(plan.scratch_bytes.empty());
        const KernelStep& step = test::kernel_step(plan, 0);
        CHECK(step.config.grid == Dim3{112, 1, 2});
        CHECK(defines(step, m <= 16 ? "NBITS_TILE_M=16" : "NBITS_TILE_M=32"));
        CHECK(defines(step, "NBITS_WGMMA=0"));
    }
    // Without the override: the decode kernel, and the preset's 64-row tiles at M = 32.
    CHECK(split_of(fastest(node(4096, 14336), rows(16))) == "nbits_decode_matmul (not the 128-row tiles)");
    CHECK(split_of(fastest(node(4096, 14336), rows(32))) == "nbits_prefill_gemm (not the 128-row tiles)");
    CHECK(split_of(with_override(fastest(node(4096, 14336), rows(16)), &PlanOverrides::prefill_wide_split, 0)) ==
          "nbits_decode_matmul (not the 128-row tiles)");
    // Below M = 12 and past 32 the override changes nothing.
    CHECK(split_of(wide_split(fastest(node(4096, 14336), rows(11)))) == "nbits_decode_matmul (not the 128-row tiles)");
    CHECK(wide_split(fastest(node(4096, 14336), rows(33))).plan().variant ==
          fastest(node(4096, 14336), rows(33)).plan().variant);
    // Grids that fill a round unsplit keep it unsplit (Llama-3-70B up, 224 tiles; lm_head, 1002).
    CHECK(split_of(wide_split(fastest(node(8192, 28672), rows(16)))) == "unsplit");
    CHECK(split_of(wide_split(fastest(node(4096, 128256), rows(16)))) == "unsplit");
    // Split grids short of four fifths of a round, or past one, keep the plan's rule: Llama-3-8B qkv (48 tiles, 96
    // CTAs), Qwen2.5-7B up (148 tiles, 296 CTAs).
    CHECK(split_of(wide_split(fastest(node(4096, 6144), rows(16)))) == "nbits_decode_matmul (not the 128-row tiles)");
    CHECK(split_of(wide_split(fastest(node(3584, 18944), rows(16)))) == "nbits_decode_matmul (not the 128-row tiles)");
    // Nor off sm_90, with zero points, or for the paired node.
    CHECK(split_of(wide_split(fastest(node(4096, 14336), rows(16), Capabilities::a100()))) ==
          "nbits_decode_matmul (not the 128-row tiles)");
    test::Shapes zp = rows(16);
    zp.zero_points = true;
    CHECK(split_of(wide_split(fastest(node(4096, 14336), zp))) == "nbits_decode_matmul (not the 128-row tiles)");
    CHECK(split_of(wide_split(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(16)))) ==
          "nbits_decode_gate_up (not the 128-row tiles)");
}

TEST_CASE("Fastest prefill past M = 64 fuses only when the fused grid fills half the SMs")
{
    // The A100 (108 SMs, no wgmma, no clusters): Qwen2.5-7B qkv's 36 column tiles of 128 leave most SMs idle.
    const Capabilities a100 = Capabilities::a100();
    CHECK(fastest(node(3584, 4608), rows(128), a100).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(fastest(node(3584, 4608), rows(65), a100).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(fastest(node(3584, 4608), rows(64), a100).plan().variant == "nbits_prefill_fused");
    // ... and fill a 46-SM part.
    CHECK(fastest(node(3584, 4608), rows(128), Capabilities::sm89_46()).plan().variant == "nbits_prefill_fused");
    // Llama-3-8B up: 112 tiles; the paired gate/up node has twice the CTAs of its N.
    CHECK(fastest(node(4096, 14336), rows(128), a100).plan().variant == "nbits_prefill_fused");
    CHECK(fastest(node(4096, 6144), rows(128), a100).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(fastest(test::marked(node(3584, 4608), kGateUpSwigluAttr), rows(128), a100).plan().variant ==
          "nbits_prefill_fused");
    CHECK(fastest(test::marked(node(3584, 2048), kGateUpSwigluAttr), rows(128), a100).plan().variant ==
          "nbits_prefill_dequantize_cublaslt");
    // On the H200 the wgmma GEMM splits K to fill the SMs from 12 M weights (Qwen2.5-7B o, 12.8 M; qkv 16.5 M;
    // Llama-3-8B o 16.8 M, qkv 25.2 M; Phi-3.5-mini qkv 28.3 M; Llama-3-70B qkv 83.9 M); below (Phi-3.5-mini o,
    // 9.4 M) the dequantise + cuBLASLt route measured faster. Of clusters of 4, 3 and 2 that run in one round
    // on the H200's 132 SMs (30, 39 and 66 a CTA an SM, twice as many two an SM) and keep three quarters of
    // the SMs busy, the fewest k tiles a CTA, weighed 5/3 where SMs take two CTAs: 4 where that keeps a CTA an
    // SM (Qwen2.5-7B o, 28 clusters) or halves a CTA's k tiles against 2 (Llama-3-8B qkv: 48 clusters); 3
    // where 4 would put two CTAs on some SMs (Qwen2.5-7B qkv, 36 clusters) or need a second round (Phi-3.5-mini
    // qkv: 72 clusters, 62 of 4 fit); 2 where 3 and 4 would need a second round (Llama-3-70B qkv, 80 clusters)
    // or only 2 keeps a CTA an SM (Llama-3-70B o and down: 64 clusters); Llama-3-8B o (32 tiles) 3, whose 96
    // CTAs keep seven tenths of the SMs (the bound up to M = 128), where 4 would put two CTAs on some SMs.
    for (const auto& [k, n, tiles, split] :
         {std::tuple{3584, 3584, 28, 4}, std::tuple{3584, 4608, 36, 3}, std::tuple{4096, 4096, 32, 3},
          std::tuple{4096, 6144, 48, 4}, std::tuple{3072, 9216, 72, 3}, std::tuple{8192, 10240, 80, 2},
          std::tuple{8192, 8192, 64, 2}, std::tuple{28672, 8192, 64, 2}}) {
        CAPTURE(n);
        for (const std::size_t m : {40, 64, 128}) {
            CAPTURE(m);
            const LaunchPlan h200 = fastest(node(k, n), rows(m)).plan();
            CHECK(h200.variant == "nbits_prefill_wgmma");
            const Dim3 grid{static_cast<std::uint32_t>(tiles), 1, static_cast<std::uint32_t>(split)};
            CHECK(test::kernel_step(h200, 0).config.grid == grid);
            CHECK(test::kernel_step(fastest(node(k, n), rows(m, DataType::BFloat16)).plan(), 0).config.grid == grid);
        }
    }
    // At M = 65..128 two rows of 64-token tiles where their split costs less (a 64-token k tile 3/4 of a
    // 128-token one) or only they keep the wgmma route: Llama-3.2-1B down (8192 x 2048, 16 column tiles: 64 CTAs
    // of 128 tokens split 4, short of seven tenths of the SMs; 32 clusters of 3 of 64 tokens run a CTA an SM),
    // Qwen2.5-1.5B down (8960 x 1536, 12: 24 clusters of 4) and Phi-3.5-mini o (3072 x 3072, 24: 48 clusters of 4;
    // 9.4 M weights, above two rows' bound of 9.2 M, below one row's 12 M).
    for (const auto& [k, n, tiles, split] :
         {std::tuple{8192, 2048, 16, 3}, std::tuple{8960, 1536, 12, 4}, std::tuple{3072, 3072, 24, 4}}) {
        CAPTURE(k);
        CAPTURE(n);
        for (const std::size_t m : {65, 96, 128}) {
            CAPTURE(m);
            for (const DataType activation : {DataType::Float16, DataType::BFloat16}) {
                const LaunchPlan h200 = fastest(node(k, n), rows(m, activation)).plan();
                CHECK(h200.variant == "nbits_prefill_wgmma");
                const KernelStep& step = test::kernel_step(h200, 0);
                const Dim3 grid{static_cast<std::uint32_t>(tiles), 2, static_cast<std::uint32_t>(split)};
                CHECK(step.config.grid == grid);
                CHECK(defines(step, "NBITS_TILE_M=64"));
                CHECK(defines(step, "NBITS_PRODUCER_WARPS=4"));
            }
        }
        // One row of 128-token tiles under NBITS_PREFILL_WGMMA_TILE_M=128, and past M = 128.
        const test::Problem one_row =
            with_override(fastest(node(k, n), rows(128)), &PlanOverrides::prefill_wgmma_tile_m, 128);
        CHECK_FALSE(defines(test::kernel_step(one_row.plan(), 0), "NBITS_TILE_M=64"));
        CHECK_FALSE(defines(test::kernel_step(fastest(node(k, n), rows(129)).plan(), 0), "NBITS_TILE_M=64"));
    }
    // The clusters a GPU runs at once as its driver counts them, where it does: a GPU of the H200's 132 SMs whose
    // GPCs run 60 pairs a CTA an SM puts Llama-3-70B o's 64 clusters of 2 two an SM on some SMs, so 3 (22 k tiles
    // a CTA there against 32) costs less.
    Capabilities fewer_pairs = Capabilities::h200();
    fewer_pairs.clusters_a_cta_an_sm = {60, 0, 0};
    CHECK(test::kernel_step(fastest(node(8192, 8192), rows(64), fewer_pairs).plan(), 0).config.grid == Dim3{64, 1, 3});
    // Below two rows' 9.2 M weights (2944 x 3072, 9.0 M) the dequantise + cuBLASLt route stays, and below 12 M
    // where a CTA would keep more than 12 k tiles: 2048 x 5120 (10.5 M, 80 tiles split 2: 16 k tiles a CTA), not
    // 2048 x 4608 (9.4 M, 72 tiles split 3: 11).
    for (const std::size_t m : {80, 128}) {
        CAPTURE(m);
        CHECK(fastest(node(2944, 3072), rows(m)).plan().variant == "nbits_prefill_dequantize_cublaslt");
        CHECK(fastest(node(2048, 5120), rows(m)).plan().variant == "nbits_prefill_dequantize_cublaslt");
        const LaunchPlan split3 = fastest(node(2048, 4608), rows(m)).plan();
        CHECK(split3.variant == "nbits_prefill_wgmma");
        CHECK(test::kernel_step(split3, 0).config.grid == Dim3{36, 2, 3});
    }
    // Phi-3.5-mini down (24 column tiles) takes the wgmma GEMM split 4 (96 CTAs, 24 clusters a CTA an SM) at
    // M = 33..128 and Llama-3-8B down (32) split 3; Llama-3.2-1B down (8192 x 2048, 16 column tiles), whose wgmma
    // grid stays short of seven tenths of the SMs, the mma.sync GEMM, which splits K = 8192 over clusters of 4 at
    // M = 33..64 (16 of them run a CTA an SM), over 2 below; Phi-3.5-mini o (K = 3072) keeps 2.
    for (const std::size_t m : {33, 48, 64, 65, 96, 128}) {
        CAPTURE(m);
        const LaunchPlan down = fastest(node(8192, 3072), rows(m)).plan();
        CHECK(down.variant == "nbits_prefill_wgmma");
        CHECK(test::kernel_step(down, 0).config.grid == Dim3{24, 1, 4});
        CHECK(test::kernel_step(fastest(node(14336, 4096), rows(m)).plan(), 0).config.grid == Dim3{32, 1, 3});
    }
    for (const std::size_t m : {33, 48, 64}) {
        CAPTURE(m);
        const LaunchPlan down = fastest(node(8192, 2048), rows(m)).plan();
        CHECK(down.variant == "nbits_prefill_fused");
        CHECK(test::kernel_step(down, 0).config.grid == Dim3{16, 1, 4});
    }
    CHECK(test::kernel_step(fastest(node(8192, 3072), rows(32)).plan(), 0).config.grid == Dim3{48, 1, 2});
    CHECK(test::kernel_step(fastest(node(3072, 3072), rows(48)).plan(), 0).config.grid == Dim3{48, 2, 2});
}

TEST_CASE("Fastest prefill on sm_90: the wgmma GEMM for 32 < M <= 256 when its grid fills three quarters of the SMs, "
          "up to M = 512 (paired: 1024) when it covers every CTA slot")
{
    for (const std::size_t m : {65, 128, 200, 256}) {
        CAPTURE(m);
        const LaunchPlan plan = without_tma(node(4096, 14336), rows(m)).plan();
        CHECK(plan.variant == "nbits_prefill_wgmma");
        REQUIRE(entries(plan) == std::vector<std::string>{"nbits_prefill_gemm"});
        const KernelStep& step = test::kernel_step(plan, 0);
        CHECK(step.arch_specific);
        CHECK(defines(step, "NBITS_WGMMA=1"));
        CHECK(defines(step, "NBITS_TILE_N=128"));
        CHECK(defines(step, "NBITS_TILE_M=128"));
        CHECK(defines(step, "NBITS_TILE_K=64"));
        CHECK(defines(step, "NBITS_WARPS_N=8"));
        // One row tile (M <= 128): 2 CTAs a tile fill the 264 resident on 132 SMs (the measured split).
        const std::uint32_t row_tiles = static_cast<std::uint32_t>((m + 127) / 128);
        CHECK(step.config.grid == Dim3{112, row_tiles, row_tiles == 1 ? 2u : 1u});
        CHECK(step.config.block == Dim3{256, 1, 1});
        // Five stages of 21504 bytes (1024-aligned) plus 1024 to align the base; two CTAs fit an SM.
        CHECK(defines(step, "NBITS_STAGES=5"));
        CHECK(step.config.dynamic_shared_bytes == 108544);
        CHECK(step.configure_shared_memory);
        CHECK(plan.scratch_bytes.empty());
        CHECK(plan.capture_safe);
    }
    // int8 weights make a stage of 25600 bytes: five would leave one CTA an SM, so four (2 x 104448 bytes fit).
    const KernelStep int8 = test::kernel_step(without_tma(node(4096, 14336, 8), rows(128)).plan(), 0);
    CHECK(defines(int8, "NBITS_STAGES=4"));
    CHECK(int8.config.dynamic_shared_bytes == 103424);
    // Either side of the range: the mma.sync GEMM, the dequantised chunks; 33..64 on 64-token tiles (below).
    CHECK(without_tma(node(4096, 14336), rows(32)).plan().variant == "nbits_prefill_fused");
    CHECK(without_tma(node(4096, 14336), rows(33)).plan().variant == "nbits_prefill_wgmma");
    CHECK(without_tma(node(4096, 14336), rows(64)).plan().variant == "nbits_prefill_wgmma");
    // Past M = 256 while the grid covers the 264 CTA slots (two an SM), up to M = 512: Llama-3-8B up at M = 512
    // has 448 CTAs, Qwen2.5-7B qkv (36 column tiles) 144; the paired Llama-3-8B gate/up 896.
    CHECK(test::kernel_step(without_tma(node(4096, 14336), rows(257)).plan(), 0).config.grid == Dim3{112, 3, 1});
    CHECK(test::kernel_step(without_tma(node(4096, 14336), rows(512)).plan(), 0).config.grid == Dim3{112, 4, 1});
    CHECK(without_tma(node(4096, 14336), rows(513)).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(without_tma(node(3584, 4608), rows(512)).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(without_tma(node(3584, 4608), rows(256)).plan().variant == "nbits_prefill_dequantize_cublaslt");
    const LaunchPlan paired_512 = without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(512)).plan();
    CHECK(paired_512.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(paired_512, 0).config.grid == Dim3{224, 4, 1});
    // The paired node up to M = 1024, past it while M x K < 2^23, then dequantised chunks: Llama-3-8B gate/up
    // (K = 4096) up to M = 2047, Llama-3-70B (K = 8192) to 1024, Qwen2.5-7B (K = 3584) to 2340.
    auto paired_route = [](std::size_t k, std::size_t n, std::size_t m) {
        return without_tma(test::marked(node(k, n), kGateUpSwigluAttr), rows(m)).plan().variant;
    };
    const LaunchPlan paired_1024 = without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(1024)).plan();
    CHECK(paired_1024.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(paired_1024, 0).config.grid == Dim3{224, 8, 1});
    CHECK(paired_route(4096, 14336, 2047) == "nbits_prefill_wgmma");
    CHECK(paired_route(4096, 14336, 2048) == "nbits_prefill_dequantize_cublaslt");
    CHECK(paired_route(8192, 28672, 1024) == "nbits_prefill_wgmma");
    CHECK(paired_route(8192, 28672, 1025) == "nbits_prefill_dequantize_cublaslt");
    CHECK(paired_route(3584, 18944, 2340) == "nbits_prefill_wgmma");
    CHECK(paired_route(3584, 18944, 2341) == "nbits_prefill_dequantize_cublaslt");
    // 48 column tiles (Llama-3-8B qkv): at M = 128 split over clusters of 4 (192 CTAs); at M = 256 (two row
    // tiles, not split) 96 CTAs leave too many of the 132 SMs idle.
    CHECK(test::kernel_step(without_tma(node(4096, 6144), rows(128)).plan(), 0).config.grid == Dim3{48, 1, 4});
    CHECK(without_tma(node(4096, 6144), rows(256)).plan().variant == "nbits_prefill_dequantize_cublaslt");
    // Compute capability 9.0 only: sm_80, sm_89 and sm_120 keep their routes.
    for (const Capabilities& device : {Capabilities::a100(), Capabilities::rtx4090(), Capabilities::rtx5090()}) {
        CAPTURE(device.name);
        CHECK(without_tma(node(4096, 14336), rows(128), device).plan().variant != "nbits_prefill_wgmma");
    }
    // The paired gate/up node (64 output columns a CTA) and the RMS-norm prologue.
    const LaunchPlan paired = without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(128)).plan();
    CHECK(paired.variant == "nbits_prefill_wgmma");
    REQUIRE(entries(paired) == std::vector<std::string>{"nbits_prefill_gate_up"});
    CHECK(test::kernel_step(paired, 0).arch_specific);
    CHECK(test::kernel_step(paired, 0).config.grid == Dim3{224, 1, 1});
    test::Shapes normalized = rows(200);
    normalized.gamma = DataType::Float16;
    const LaunchPlan norm = without_tma(test::marked(node(4096, 14336), kRmsNormPrologueAttr), normalized).plan();
    CHECK(entries(norm) == std::vector<std::string>{"nbits_rmsnorm_rows", "nbits_prefill_gemm"});
    CHECK_FALSE(test::kernel_step(norm, 0).arch_specific);
    CHECK(test::kernel_step(norm, 1).arch_specific);
}

TEST_CASE("Fastest prefill split-K (NBITS_PREFILL_SPLIT_K): clusters along z on compute capability 9.0 and newer")
{
    auto split = [](test::Problem p, int value) {
        return with_override(std::move(p), &PlanOverrides::prefill_split_k, value);
    };
    auto split_of = [](const KernelStep& step) {
        for (const std::string& define : step.defines) {
            if (define.rfind("NBITS_SPLIT_K=", 0) == 0) {
                return std::stoi(define.substr(14));
            }
        }
        return 1;
    };
    // Llama-3-8B up at M = 128: the wgmma GEMM, its 112 tiles each shared by 2 CTAs.
    const LaunchPlan up = split(without_tma(node(4096, 14336), rows(128)), 2).plan();
    CHECK(up.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(up, 0).config.grid == Dim3{112, 1, 2});
    CHECK(split_of(test::kernel_step(up, 0)) == 2);
    CHECK(up.reason().find("K split over clusters of 2 CTAs") != std::string::npos);
    CHECK(up.scratch_bytes.empty());
    CHECK(up.capture_safe);
    // Split grids count when the routes ask whether the SMs fill: Llama-3-8B qkv (48 tiles) at M = 128 takes
    // dequantise + cuBLASLt unsplit, the wgmma GEMM with 2 CTAs a tile (96 of 132 SMs: seven tenths) and with
    // 4 (192).
    CHECK(split(without_tma(node(4096, 6144), rows(128)), 1).plan().variant == "nbits_prefill_dequantize_cublaslt");
    const LaunchPlan qkv2 = split(without_tma(node(4096, 6144), rows(128)), 2).plan();
    CHECK(qkv2.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(qkv2, 0).config.grid == Dim3{48, 1, 2});
    const LaunchPlan qkv4 = split(without_tma(node(4096, 6144), rows(128)), 4).plan();
    CHECK(qkv4.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(qkv4, 0).config.grid == Dim3{48, 1, 4});
    // The paired node and the mma.sync GEMM at M <= 32.
    const LaunchPlan paired = split(without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(24)), 3).plan();
    CHECK(paired.variant == "nbits_prefill_fused");
    CHECK(test::kernel_step(paired, 0).entry == "nbits_prefill_gate_up");
    CHECK(test::kernel_step(paired, 0).config.grid.z == 3);
    CHECK(split_of(test::kernel_step(paired, 0)) == 3);
    // At most one k tile per CTA: K = 200 is 4 tiles of 64 in the wgmma GEMM, 1 of 256 in the M <= 32 preset.
    CHECK(test::kernel_step(split(without_tma(node(200, 14336), rows(128)), 8).plan(), 0).config.grid.z == 4);
    const KernelStep one_tile = test::kernel_step(split(without_tma(node(200, 14336), rows(20)), 8).plan(), 0);
    CHECK(one_tile.config.grid.z == 1);
    CHECK(split_of(one_tile) == 1);
    // The decode kernel and the dequantise route are not split.
    CHECK(test::kernel_step(split(without_tma(node(4096, 14336), rows(8)), 4).plan(), 0).config.grid.z == 1);
    CHECK(entries(split(without_tma(node(4096, 14336), rows(2048)), 4).plan())[0] == "nbits_dequantize");
    // Clusters need compute capability 9.0: sm_80 and sm_89 ignore it, sm_120 has them.
    for (const Capabilities& device : {Capabilities::a100(), Capabilities::rtx4090()}) {
        CAPTURE(device.name);
        const KernelStep step = test::kernel_step(split(without_tma(node(4096, 14336), rows(64), device), 4).plan(), 0);
        CHECK(step.config.grid.z == 1);
        CHECK(split_of(step) == 1);
    }
    CHECK(test::kernel_step(split(without_tma(node(4096, 14336), rows(64), Capabilities::rtx5090()), 4).plan(), 0)
              .config.grid.z == 4);
    // Values outside 1..8 set by hand (not through parse) are ignored: the measured split stays (2 here).
    const KernelStep measured = test::kernel_step(without_tma(node(4096, 14336), rows(128)).plan(), 0);
    CHECK(measured.config.grid.z == 2);
    for (const int ignored : {0, -1, 9, 1 << 30}) {
        CAPTURE(ignored);
        const KernelStep step = test::kernel_step(split(without_tma(node(4096, 14336), rows(128)), ignored).plan(), 0);
        CHECK(step.config.grid == measured.config.grid);
        CHECK(step.defines == measured.defines);
    }
    // A split of 1 defines nothing: the unsplit kernel.
    const KernelStep unsplit = test::kernel_step(split(without_tma(node(4096, 14336), rows(128)), 1).plan(), 0);
    CHECK(unsplit.config.grid.z == 1);
    CHECK(split_of(unsplit) == 1);
    CHECK(std::none_of(unsplit.defines.begin(), unsplit.defines.end(),
                       [](const std::string& define) { return define.rfind("NBITS_SPLIT_K", 0) == 0; }));
}

TEST_CASE("Fastest prefill on sm_90: the wgmma GEMM over 64-token tiles from M = 33 (NBITS_PREFILL_WGMMA_MIN_M: 17..65)")
{
    auto from = [](test::Problem p, int min_m) {
        return with_override(std::move(p), &PlanOverrides::prefill_wgmma_min_m, min_m);
    };
    // Llama-3-8B qkv at M = 64: 48 column tiles of 128 weight rows and 64 tokens, K split over 4 (25.2 M weights).
    const LaunchPlan qkv = from(fastest(node(4096, 6144), rows(64)), 17).plan();
    CHECK(qkv.variant == "nbits_prefill_wgmma");
    REQUIRE(entries(qkv) == std::vector<std::string>{"nbits_prefill_gemm"});
    const KernelStep& step = test::kernel_step(qkv, 0);
    CHECK(step.arch_specific);
    CHECK(defines(step, "NBITS_WGMMA=1"));
    CHECK(defines(step, "NBITS_TILE_M=64"));
    CHECK(defines(step, "NBITS_TILE_N=128"));
    CHECK(step.config.grid == Dim3{48, 1, 4});
    // Two warpgroups computing and one of producer warps.
    CHECK(defines(step, "NBITS_PRODUCER_WARPS=4"));
    CHECK(step.config.block == Dim3{384, 1, 1});
    // Five stages of 13312 bytes (4096 of weights, 8192 of activations, 1024 of scales), their ten mbarriers,
    // plus 1024 to align.
    CHECK(step.config.dynamic_shared_bytes == 67664);
    // From the given M: 32 rows take it with 17, not with 33; M = 16 stays the decode kernel.
    CHECK(from(fastest(node(4096, 6144), rows(32)), 17).plan().variant == "nbits_prefill_wgmma");
    CHECK(from(fastest(node(4096, 6144), rows(32)), 33).plan().variant == "nbits_prefill_fused");
    CHECK(from(fastest(node(4096, 6144), rows(16)), 17).plan().variant == "nbits_decode");
    // 65 and up keeps 128-token tiles; without the override M <= 32 is the mma.sync GEMM's, 33..64 this one's,
    // and 65 keeps it above M = 64.
    CHECK(defines(test::kernel_step(from(fastest(node(4096, 14336), rows(65)), 17).plan(), 0), "NBITS_TILE_M=128"));
    CHECK(fastest(node(4096, 6144), rows(32)).plan().variant == "nbits_prefill_fused");
    CHECK(fastest(node(4096, 6144), rows(33)).plan().variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(fastest(node(4096, 6144), rows(64)).plan(), 0).defines == step.defines);
    CHECK(from(fastest(node(4096, 6144), rows(64)), 65).plan().variant == "nbits_prefill_fused");
    // From 12 M weights the 64-token tiles split K (Llama-3-8B o, 16.8 M: 32 tiles over clusters of 3). A grid
    // short of the SMs even split over four keeps the mma.sync GEMM (Phi-3.5-mini o: 24 tiles), as do other GPUs;
    // the paired node runs 64 gate and 64 up rows a CTA.
    const LaunchPlan o_proj = fastest(node(4096, 4096), rows(64)).plan();
    CHECK(o_proj.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(o_proj, 0).config.grid == Dim3{32, 1, 3});
    // Below 12 M weights the 64-token tiles are not split either (Qwen2.5-0.5B up, 4.4 M: 38 tiles).
    CHECK(fastest(node(896, 4864), rows(64)).plan().variant == "nbits_prefill_fused");
    CHECK(from(fastest(node(3072, 3072), rows(64)), 17).plan().variant == "nbits_prefill_fused");
    CHECK(from(fastest(node(4096, 6144), rows(64), Capabilities::a100()), 17).plan().variant != "nbits_prefill_wgmma");
    const LaunchPlan paired = from(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(48)), 17).plan();
    CHECK(paired.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(paired, 0).entry == "nbits_prefill_gate_up");
    CHECK(defines(test::kernel_step(paired, 0), "NBITS_TILE_M=64"));
    CHECK(test::kernel_step(paired, 0).config.grid == Dim3{224, 1, 1});
    // Values outside 17..65 set by hand (not through parse) are ignored: the default of 33 stays.
    for (const int ignored : {0, 1, 16, 66, -1, 1 << 30}) {
        CAPTURE(ignored);
        CHECK(from(fastest(node(4096, 6144), rows(32)), ignored).plan().variant == "nbits_prefill_fused");
        CHECK(from(fastest(node(4096, 6144), rows(64)), ignored).plan().variant == "nbits_prefill_wgmma");
    }
}

TEST_CASE("the fused prefill GEMM's planned dynamic shared memory is what the kernel lays out (every tile kind)")
{
    // The kernel places its mbarriers after the stages (kSmemBytes, exported as nbits_prefill_smem_bytes): a
    // host formula short of it would let a CTA write past its shared memory, which only a GPU would notice.
    using Override = std::optional<int> PlanOverrides::*;
    struct Planned {
        std::string name;
        test::Problem problem;
    };
    auto with = [](test::Problem p, std::initializer_list<std::pair<Override, int>> overrides) {
        for (const auto& [field, value] : overrides) {
            p = with_override(std::move(p), field, value);
        }
        return p;
    };
    test::Shapes bf16_zp = rows(128, DataType::BFloat16);
    bf16_zp.zero_points = true;
    test::Shapes f32_scales = rows(48);
    f32_scales.scales = DataType::Float32;
    f32_scales.zero_points = true;
    const NodeAttributes paired_int8 = test::marked(node(4096, 14336, 8, 128), kGateUpSwigluAttr);
    const std::vector<Planned> planned = {
        {"mma.sync M = 20", fastest(node(4096, 14336), rows(20))},
        {"mma.sync M = 32, fp32 scales, zero points", fastest(node(4096, 6144, 4, 16), f32_scales)},
        {"mma.sync M = 100 on the A100", fastest(node(4096, 14336), rows(100), Capabilities::a100())},
        {"mma.sync paired int8 M = 24", fastest(paired_int8, rows(24))},
        {"wgmma 64-token tiles, producer warps", fastest(node(4096, 14336), rows(64))},
        {"wgmma 128-token tiles, bf16 zero points", fastest(node(4096, 14336), bf16_zp)},
        {"wgmma 128-token tiles, bf16 zero points, rows of scales and zero points off 4 bytes",
         fastest(node(4000, 14336), bf16_zp)},
        {"wgmma 256-token tiles", with(fastest(node(4096, 14336), rows(512)), {{&PlanOverrides::prefill_wgmma_tile_m, 256}})},
        {"wgmma 256-row tiles", with(fastest(node(4096, 14336), rows(256)), {{&PlanOverrides::prefill_wgmma_tile_n, 256}})},
        {"wgmma split over 2, one producer warp",
         with(fastest(node(4096, 14336), rows(200)),
              {{&PlanOverrides::prefill_split_k, 2}, {&PlanOverrides::prefill_producer_warps, 1}})},
        {"TMA 64-token tiles, int8", with(fastest(node(4096, 14336, 8), rows(64)), {{&PlanOverrides::prefill_tma, 1}})},
        {"TMA 128-token tiles", with(fastest(node(4096, 14336), rows(512)), {{&PlanOverrides::prefill_tma, 1}})},
        {"TMA 128-token tiles, a producer warp",
         with(fastest(node(4096, 14336), rows(512)),
              {{&PlanOverrides::prefill_tma, 1}, {&PlanOverrides::prefill_producer_warps, 1}})},
        {"TMA 256-token tiles, paired int8",
         with(fastest(paired_int8, rows(1024)),
              {{&PlanOverrides::prefill_tma, 1}, {&PlanOverrides::prefill_wgmma_tile_m, 256}})},
        {"TMA 256-row tiles, bf16 zero points",
         with(fastest(node(4096, 14336), bf16_zp),
              {{&PlanOverrides::prefill_tma, 1}, {&PlanOverrides::prefill_wgmma_tile_n, 256}})},
        {"stream-K 256-token tiles, bf16 zero points",
         with(fastest(node(4096, 14336), rows(300, DataType::BFloat16)), {{&PlanOverrides::prefill_stream_k, 1}})},
        {"stream-K 256-token tiles, paired int8",
         with(fastest(paired_int8, rows(512)), {{&PlanOverrides::prefill_stream_k, 1}})},
        {"stream-K 128-token tiles, bf16 zero points", with(fastest(node(4096, 14336), bf16_zp),
                                                            {{&PlanOverrides::prefill_stream_k, 1}})},
        {"stream-K 128-token tiles, paired int8",
         with(fastest(paired_int8, rows(100)), {{&PlanOverrides::prefill_stream_k, 1}})},
        {"stream-K 64-token tiles, int8", with(fastest(node(4096, 14336, 8), rows(64)),
                                               {{&PlanOverrides::prefill_stream_k, 1}})},
        {"stream-K 64-token tiles, paired int8",
         with(fastest(paired_int8, rows(40)), {{&PlanOverrides::prefill_stream_k, 1}})},
    };
    const std::string symbol = ".u32 nbits_prefill_smem_bytes = ";
    for (const Planned& p : planned) {
        CAPTURE(p.name);
        const LaunchPlan plan = p.problem.plan();
        CAPTURE(plan.variant);
        const auto step = std::find_if(plan.steps.begin(), plan.steps.end(), [](const PlanStep& s) {
            const auto* kernel = std::get_if<KernelStep>(&s);
            return kernel != nullptr && kernel->entry.rfind("nbits_prefill_g", 0) == 0;
        });
        REQUIRE(step != plan.steps.end());
        const KernelStep& kernel = std::get<KernelStep>(*step);
        CAPTURE(kernel.entry);
        jit::CompileRequest request;
        request.source = &kernels::source_of_entry(kernel.entry);
        request.entries = {kernel.entry};
        request.defines = kernel.defines;
        // A programmatic launch's griddepcontrol needs compute_90; the other mma.sync kernels build for compute_80.
        request.target = kernel.arch_specific                       ? jit::Target::ptx(9, 0, true)
                         : defines(kernel, "NBITS_PROGRAMMATIC=1") ? jit::Target::ptx(9, 0)
                                                                    : jit::Target::ptx(8, 0);
        const std::string ptx = jit::compile(request).image;
        const std::size_t at = ptx.find(symbol);
        REQUIRE(at != std::string::npos);
        CHECK(std::stoul(ptx.substr(at + symbol.size())) == kernel.config.dynamic_shared_bytes);
    }
}

TEST_CASE("the planned sm_90 wgmma steps assemble for sm_90a without spills and without serialised wgmmas")
{
    // ptxas serialises the wgmmas of a pipeline whose accumulators another instruction defines (its C7515
    // note), which would silently cost the GEMM its overlap; under the 128-register cap of two CTAs an SM the
    // A fragments and accumulators must also fit without spilling.
    struct Planned {
        const char* name;
        NodeAttributes attributes;
        test::Shapes shapes;
    };
    test::Shapes bf16_zp = rows(128, DataType::BFloat16);
    bf16_zp.zero_points = true;
    test::Shapes zp64 = rows(64);
    zp64.zero_points = true;
    test::Shapes f32_scales = rows(200);
    f32_scales.scales = DataType::Float32;
    const std::vector<Planned> planned = {
        {"fp16 int4 M = 128, split 2", node(4096, 14336), rows(128)},
        {"fp16 int4 zero points M = 64 (64-token tiles)", node(4096, 14336), zp64},
        {"bf16 int4 zero points M = 128", node(4096, 14336), bf16_zp},
        {"fp16 int8 M = 128 (four stages)", node(4096, 14336, 8), rows(128)},
        {"fp16 int4 block 128, fp32 scales, M = 200 (two row tiles)", node(4096, 14336, 4, 128), f32_scales},
        {"paired gate/up bf16 int8 M = 48", test::marked(node(4096, 14336, 8), kGateUpSwigluAttr),
         rows(48, DataType::BFloat16)},
    };
    // NBITS_PREFILL_TMA on each tile height; the 256-token tiles hand the producers' registers to the computing
    // warpgroups (setmaxnreg), without which ptxas serialised their wgmmas under the cap of 288 threads.
    auto tma = [](test::Problem p, std::optional<int> tokens = std::nullopt) {
        return with_override(with_override(std::move(p), &PlanOverrides::prefill_tma, 1),
                             &PlanOverrides::prefill_wgmma_tile_m, tokens);
    };
    test::Shapes bf16_512 = rows(512, DataType::BFloat16);
    bf16_512.zero_points = true;
    test::Shapes zp300 = rows(300);
    zp300.zero_points = true;
    test::Shapes bf16_zp_bias = bf16_zp;
    bf16_zp_bias.bias = true;
    test::Shapes f32_zp96 = rows(96);
    f32_zp96.scales = DataType::Float32;
    f32_zp96.zero_points = true;
    test::Shapes zp80 = rows(80);
    zp80.zero_points = true;
    test::Shapes zp40 = rows(40);
    zp40.zero_points = true;
    const std::vector<std::pair<const char*, test::Problem>> problems = {
        {"TMA, fp16 int4 M = 64 (64-token tiles)", tma(without_tma(node(4096, 14336), rows(64)))},
        {"TMA, fp16 int4 M = 128", tma(without_tma(node(4096, 14336), rows(128)))},
        {"TMA, bf16 int4 zero points M = 512", tma(without_tma(node(4096, 14336), bf16_512))},
        {"TMA, paired gate/up int8 M = 256", tma(without_tma(test::marked(node(4096, 14336, 8), kGateUpSwigluAttr), rows(256)))},
        {"TMA, fp16 int4 M = 256, 256-row tiles",
         with_override(tma(without_tma(node(4096, 14336), rows(256))), &PlanOverrides::prefill_wgmma_tile_n, 256)},
        {"TMA, fp16 int4 M = 512, 256-token tiles", tma(without_tma(node(4096, 14336), rows(512)), 256)},
        {"TMA, bf16 int4 zero points M = 512, 256-token tiles", tma(without_tma(node(4096, 14336), bf16_512), 256)},
        {"TMA, paired gate/up int8 M = 1024, 256-token tiles",
         tma(without_tma(test::marked(node(4096, 14336, 8), kGateUpSwigluAttr), rows(1024)), 256)},
        {"TMA stream-K, fp16 int4 M = 512", with_override(fastest(node(4096, 14336), rows(512)),
                                                          &PlanOverrides::prefill_stream_k, 1)},
        {"TMA stream-K, fp16 int8 block 128 M = 200, fp32 scales",
         with_override(fastest(node(4096, 14336, 8, 128), f32_scales), &PlanOverrides::prefill_stream_k, 1)},
        // The producers' loop over segments spilled at 40 registers here (now 56).
        {"TMA stream-K, paired gate/up int8 block 16 zero points M = 300",
         with_override(fastest(test::marked(node(4096, 14336, 8, 16), kGateUpSwigluAttr), zp300),
                       &PlanOverrides::prefill_stream_k, 1)},
        // The 128-token tiles under the 128-register cap of two CTAs an SM (the partials' sum in chunks of four
        // float4s: eight spilled 200 bytes).
        {"TMA stream-K, fp16 int4 M = 128 (128-token tiles)",
         with_override(fastest(node(4096, 14336), rows(128)), &PlanOverrides::prefill_stream_k, 1)},
        {"TMA stream-K, bf16 int4 zero points M = 128, a bias",
         with_override(fastest(node(4096, 14336), bf16_zp_bias), &PlanOverrides::prefill_stream_k, 1)},
        {"TMA stream-K, fp16 int8 block 16 zero points M = 96, fp32 scales",
         with_override(fastest(node(4096, 14336, 8, 16), f32_zp96), &PlanOverrides::prefill_stream_k, 1)},
        // Two registers short here while the refilled stage had a ring of its own.
        {"TMA stream-K, fp16 int4 block 16 zero points M = 96, fp32 scales",
         with_override(fastest(node(4096, 14336, 4, 16), f32_zp96), &PlanOverrides::prefill_stream_k, 1)},
        {"TMA stream-K, paired gate/up int8 block 16 zero points M = 80",
         with_override(fastest(test::marked(node(4096, 14336, 8, 16), kGateUpSwigluAttr), zp80),
                       &PlanOverrides::prefill_stream_k, 1)},
        {"TMA stream-K, paired gate/up bf16 int4 M = 128",
         with_override(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(128, DataType::BFloat16)),
                       &PlanOverrides::prefill_stream_k, 1)},
        // The 64-token tiles, two CTAs an SM as well.
        {"TMA stream-K, fp16 int4 zero points M = 64 (64-token tiles)",
         with_override(fastest(node(4096, 14336), zp64), &PlanOverrides::prefill_stream_k, 1)},
        {"TMA stream-K, paired gate/up int8 block 16 zero points M = 40",
         with_override(fastest(test::marked(node(4096, 14336, 8, 16), kGateUpSwigluAttr), zp40),
                       &PlanOverrides::prefill_stream_k, 1)},
        // The producers' register hand-back on both kernels that lend registers.
        {"TMA, bf16 int4 zero points M = 512, 256-token tiles, register hand-back",
         with_override(tma(without_tma(node(4096, 14336), bf16_512), 256), &PlanOverrides::prefill_register_handback,
                       1)},
        {"TMA, paired gate/up int8 M = 1024, 256-token tiles, register hand-back",
         with_override(tma(without_tma(test::marked(node(4096, 14336, 8), kGateUpSwigluAttr), rows(1024)), 256),
                       &PlanOverrides::prefill_register_handback, 1)},
        {"TMA stream-K, paired gate/up int8 block 16 zero points M = 300, register hand-back",
         with_override(with_override(fastest(test::marked(node(4096, 14336, 8, 16), kGateUpSwigluAttr), zp300),
                                     &PlanOverrides::prefill_stream_k, 1),
                       &PlanOverrides::prefill_register_handback, 1)},
    };
    std::vector<std::pair<std::string, LaunchPlan>> plans;
    for (const Planned& p : planned) {
        plans.emplace_back(p.name, without_tma(p.attributes, p.shapes).plan());
    }
    for (const auto& [name, problem] : problems) {
        plans.emplace_back(name, problem.plan());
    }
    for (const auto& [name, plan] : plans) {
        CAPTURE(name);
        REQUIRE(plan.variant == "nbits_prefill_wgmma");
        const bool streamed = name.rfind("TMA stream-K", 0) == 0;
        // A stream-K grid's flags are zeroed first.
        const KernelStep& step = test::kernel_step(plan, streamed ? 1 : 0);
        CHECK((step.entry.find(streamed ? "_stream_k" : "_tma") != std::string::npos) == (name.rfind("TMA", 0) == 0));
        jit::CompileRequest request;
        request.source = &kernels::source_of_entry(step.entry);
        request.entries = {step.entry};
        request.defines = step.defines;
        request.target = jit::Target::cubin(9, 0, true);
        request.assembler_report = true;
        const jit::CompiledImage image = jit::compile(request);
        INFO(image.log);
        CHECK(image.log.find("Used ") != std::string::npos);  // the report is there
        CHECK(image.log.find("C7515") == std::string::npos);
        CHECK(image.log.find("serialized") == std::string::npos);
        CHECK(image.log.find(" 0 bytes spill stores") != std::string::npos);
        // A runtime that compiles whole sources (and nbits-prewarm --granularity source) builds every entry of the
        // source under the step's defines, the entries this node never launches among them.
        request.entries.clear();
        request.target = jit::Target::ptx(9, 0, true);
        request.assembler_report = false;
        CHECK_NOTHROW(jit::compile(request));
    }
}

TEST_CASE("Fastest prefill on sm_90 with NBITS_PREFILL_REGISTER_HANDBACK=1: only the kernels whose producers lend "
          "registers hand them back through a barrier")
{
    auto handback = [](test::Problem p) {
        return with_override(std::move(p), &PlanOverrides::prefill_register_handback, 1);
    };
    auto step_of = [](const LaunchPlan& plan) -> const KernelStep& {
        return test::kernel_step(plan, plan.steps.size() - 1);
    };
    // Qwen2.5-7B qkv at M = 512: the stream-K grid of 256-token tiles, four producer warps, one CTA an SM.
    const LaunchPlan streamed = handback(fastest(node(3584, 4608), rows(512))).plan();
    REQUIRE(streamed.variant == "nbits_prefill_wgmma");
    CHECK(step_of(streamed).entry == "nbits_prefill_gemm_stream_k");
    CHECK(defines(step_of(streamed), "NBITS_REGISTER_HANDBACK=1"));
    // Without the override, the same plan without the define.
    const LaunchPlan plain = fastest(node(3584, 4608), rows(512)).plan();
    CHECK_FALSE(defines(step_of(plain), "NBITS_REGISTER_HANDBACK=1"));
    CHECK(step_of(plain).defines.size() + 1 == step_of(streamed).defines.size());
    // Llama-3-8B up at M = 512: whole 256-token tiles fed by TMA.
    const LaunchPlan whole = handback(fastest(node(4096, 14336), rows(512))).plan();
    CHECK(step_of(whole).entry == "nbits_prefill_gemm_tma");
    CHECK(defines(step_of(whole), "NBITS_REGISTER_HANDBACK=1"));
    // Two CTAs an SM lend nothing: the 128-token tiles (M = 128) and the 64-token ones (M = 64) keep their defines.
    for (const std::size_t m : {std::size_t{64}, std::size_t{128}}) {
        CAPTURE(m);
        const LaunchPlan two = handback(fastest(node(4096, 14336), rows(m))).plan();
        REQUIRE(two.variant == "nbits_prefill_wgmma");
        CHECK_FALSE(defines(step_of(two), "NBITS_REGISTER_HANDBACK=1"));
    }
}

TEST_CASE("Fastest prefill on sm_90 with NBITS_PREFILL_WGMMA_TILE_N=256: four warpgroups over 256 weight rows")
{
    auto wide = [](test::Problem p, std::optional<int> split = std::nullopt) {
        return with_override(with_override(std::move(p), &PlanOverrides::prefill_wgmma_tile_n, 256),
                             &PlanOverrides::prefill_split_k, split);
    };
    // Llama-3-70B up at M = 128: 112 column tiles of 256 rows, one CTA of 512 threads an SM.
    const LaunchPlan up = wide(fastest(node(8192, 28672), rows(128))).plan();
    CHECK(up.variant == "nbits_prefill_wgmma");
    const KernelStep& step = test::kernel_step(up, 0);
    CHECK(defines(step, "NBITS_TILE_N=256"));
    CHECK(defines(step, "NBITS_WARPS_N=16"));
    CHECK(defines(step, "NBITS_MIN_CTAS=1"));
    CHECK(step.arch_specific);
    CHECK(step.config.grid == Dim3{112, 1, 1});
    CHECK(step.config.block == Dim3{512, 1, 1});
    // Four stages of 26624 bytes, below the staged fp32 tile: 128 tokens x 260 floats, plus 1024 to align.
    CHECK(step.config.dynamic_shared_bytes == 134144);
    // Llama-3-8B up at M = 128 has 56 such tiles: too few for the SMs unless split, by default over 2 CTAs
    // (4 would exceed the one CTA an SM that is resident).
    CHECK(wide(fastest(node(4096, 14336), rows(128)), 1).plan().variant == "nbits_prefill_fused");
    const LaunchPlan split = wide(fastest(node(4096, 14336), rows(128))).plan();
    CHECK(split.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(split, 0).config.grid == Dim3{56, 1, 2});
    // The paired node: 128 gate and 128 up rows a CTA.
    const LaunchPlan paired = wide(fastest(test::marked(node(8192, 28672), kGateUpSwigluAttr), rows(128))).plan();
    CHECK(paired.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(paired, 0).config.grid == Dim3{224, 1, 1});
    CHECK(defines(test::kernel_step(paired, 0), "NBITS_TILE_N=256"));
    // Other devices, the mma.sync GEMM and the 64-token tiles (M <= 64) are unaffected.
    const KernelStep narrow = test::kernel_step(wide(fastest(node(4096, 14336), rows(64))).plan(), 0);
    CHECK(narrow.config.block == Dim3{384, 1, 1});
    CHECK(defines(narrow, "NBITS_TILE_N=128"));
    CHECK(defines(narrow, "NBITS_TILE_M=64"));
    CHECK(test::kernel_step(wide(fastest(node(4096, 14336), rows(32))).plan(), 0).config.block == Dim3{256, 1, 1});
    CHECK(wide(fastest(node(8192, 28672), rows(128), Capabilities::a100())).plan().variant != "nbits_prefill_wgmma");
}

TEST_CASE("Fastest prefill on sm_90 with NBITS_PREFILL_WGMMA_TILE_M: 128 or 256 tokens a wgmma tile, at any M past 64")
{
    auto tall = [](test::Problem p, int tokens) {
        return with_override(std::move(p), &PlanOverrides::prefill_wgmma_tile_m, tokens);
    };
    // Llama-3-8B up at M = 512: 112 column tiles x 2 token tiles of 256, one CTA of two warpgroups an SM.
    const LaunchPlan up = tall(without_tma(node(4096, 14336), rows(512)), 256).plan();
    CHECK(up.variant == "nbits_prefill_wgmma");
    CHECK(up.scratch_bytes.empty());
    const KernelStep& step = test::kernel_step(up, 0);
    CHECK(defines(step, "NBITS_TILE_M=256"));
    CHECK(defines(step, "NBITS_TILE_N=128"));
    CHECK(defines(step, "NBITS_MIN_CTAS=1"));
    CHECK(defines(step, "NBITS_STAGES=5"));
    CHECK(step.config.grid == Dim3{112, 2, 1});
    CHECK(step.config.block == Dim3{256, 1, 1});
    // Five stages of 37888 bytes (4096 of weights, 32768 of activations, 1024 of scales) and 1024 to align.
    CHECK(step.config.dynamic_shared_bytes == 190464);
    // 128 keeps two CTAs an SM, also past M = 256.
    const KernelStep wide = test::kernel_step(tall(without_tma(node(4096, 14336), rows(2048)), 128).plan(), 0);
    CHECK(defines(wide, "NBITS_TILE_M=128"));
    CHECK(wide.config.grid == Dim3{112, 16, 1});
    // Unset or another value: M = 2048 takes dequantise + cuBLASLt, M <= 64 the 64-token tiles, other devices
    // no wgmma.
    CHECK(without_tma(node(4096, 14336), rows(2048)).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(tall(without_tma(node(4096, 14336), rows(2048)), 512).plan().variant == "nbits_prefill_dequantize_cublaslt");
    CHECK(defines(test::kernel_step(tall(without_tma(node(4096, 14336), rows(64)), 256).plan(), 0), "NBITS_TILE_M=64"));
    CHECK(tall(without_tma(node(4096, 14336), rows(512), Capabilities::a100()), 256).plan().variant !=
          "nbits_prefill_wgmma");
    // The paired node: 64 gate and 64 up rows of 256 tokens.
    const LaunchPlan paired =
        tall(without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(1024)), 256).plan();
    CHECK(paired.variant == "nbits_prefill_wgmma");
    CHECK(test::kernel_step(paired, 0).config.grid == Dim3{224, 4, 1});
}

TEST_CASE("Fastest prefill on sm_90 with NBITS_PREFILL_TAIL_SPLIT: the whole waves of tiles, then the rest with K split")
{
    auto tail = [](test::Problem p) {
        return with_override(without_stream_k(std::move(p)), &PlanOverrides::prefill_tail_split, 1);
    };
    // Column tiles of each fused GEMM launch, its split and its first column tile.
    struct Launch {
        std::uint32_t column_tiles;
        std::uint32_t split;
        std::string first;  // NBITS_FIRST_COLUMN_TILE's define, "" when absent
    };
    auto launches = [](const LaunchPlan& plan) {
        std::vector<Launch> found;
        for (const PlanStep& step : plan.steps) {
            const auto* kernel = std::get_if<KernelStep>(&step);
            if (kernel == nullptr || kernel->entry.rfind("nbits_prefill_g", 0) != 0) {
                continue;
            }
            std::string first;
            for (const std::string& define : kernel->defines) {
                if (define.rfind("NBITS_FIRST_COLUMN_TILE=", 0) == 0) {
                    first = define;
                }
            }
            found.push_back({kernel->config.grid.x, kernel->config.grid.z, first});
        }
        return found;
    };
    // Llama-3-8B up at M = 512: 112 column tiles of 4 token tiles on 264 CTA slots; 66 fill one wave, the other
    // 46 (184 CTAs) end soonest split 4 (736 CTAs, three rounds of a quarter).
    const LaunchPlan up = tail(fastest(node(4096, 14336), rows(512))).plan();
    CHECK(up.variant == "nbits_prefill_wgmma");
    CHECK(up.reason().find("second launch") != std::string::npos);
    const std::vector<Launch> up_launches = launches(up);
    REQUIRE(up_launches.size() == 2);
    CHECK((up_launches[0].column_tiles == 66 && up_launches[0].split == 1 && up_launches[0].first.empty()));
    CHECK((up_launches[1].column_tiles == 46 && up_launches[1].split == 4));
    CHECK(up_launches[1].first == "NBITS_FIRST_COLUMN_TILE=66");
    CHECK(defines(test::kernel_step(up, 1), "NBITS_SPLIT_K=4"));
    // Qwen2.5-7B up: 148 column tiles, two whole waves (132), 16 left (64 CTAs: one round split 4).
    const std::vector<Launch> qwen = launches(tail(fastest(node(3584, 18944), rows(512))).plan());
    REQUIRE(qwen.size() == 2);
    CHECK((qwen[0].column_tiles == 132 && qwen[1].column_tiles == 16 && qwen[1].split == 4));
    // Llama-3-70B up: 224 column tiles, three whole waves (198), 26 left (104 CTAs): split 2 takes one round of
    // halves, as short as 4's two rounds of quarters; the smaller split wins the tie.
    const std::vector<Launch> big = launches(tail(fastest(node(8192, 28672), rows(512))).plan());
    REQUIRE(big.size() == 2);
    CHECK((big[0].column_tiles == 198 && big[1].column_tiles == 26 && big[1].split == 2));
    // 256-token tiles, one CTA an SM: 66 column tiles of 2 fill 132 slots; with TMA both launches take the maps.
    const LaunchPlan tall =
        with_override(with_override(tail(fastest(node(4096, 14336), rows(512))), &PlanOverrides::prefill_wgmma_tile_m,
                                    256),
                      &PlanOverrides::prefill_tma, 1)
            .plan();
    const std::vector<Launch> tall_launches = launches(tall);
    REQUIRE(tall_launches.size() == 2);
    CHECK((tall_launches[0].column_tiles == 66 && tall_launches[1].column_tiles == 46));
    CHECK(test::kernel_step(tall, 0).entry == "nbits_prefill_gemm_tma");
    CHECK(test::kernel_step(tall, 1).entry == "nbits_prefill_gemm_tma");
    CHECK(test::kernel_step(tall, 0).args == test::kernel_step(tall, 1).args);
    // One launch: the paired node at M = 1024 (1792 CTAs: its last wave 208 of 264, no split ends it sooner), a
    // grid of less than one wave (M = 200), the override unset, a GPU without clusters.
    CHECK(launches(tail(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(1024))).plan()).size() == 1);
    CHECK(launches(tail(fastest(node(4096, 14336), rows(200))).plan()).size() == 1);
    CHECK(launches(fastest(node(4096, 14336), rows(512)).plan()).size() == 1);
    for (const auto& planned : tail(fastest(node(4096, 14336), rows(512), Capabilities::a100())).plan().steps) {
        if (const auto* kernel = std::get_if<KernelStep>(&planned)) {
            CHECK(!sets(*kernel, "NBITS_FIRST_COLUMN_TILE"));
        }
    }
}

TEST_CASE("Fastest prefill on sm_90 with NBITS_PREFILL_STREAM_K: one CTA a slot sharing the 256-token tiles' k tiles "
          "past M = 128, the 128-token tiles' up to it and the 64-token tiles' up to M = 64, one weight set or the "
          "paired gate/up node")
{
    auto streamed = [](test::Problem p) { return with_override(std::move(p), &PlanOverrides::prefill_stream_k, 1); };
    // Llama-3-8B up at M = 512: 224 tiles of 64 k tiles over the H200's 132 SMs, after a step that zeroes the
    // grid's flags; the scratch holds a partial tile a CTA (256 threads x 128 fp32 accumulators) and a flag each.
    const LaunchPlan up = streamed(fastest(node(4096, 14336), rows(512))).plan();
    CHECK(up.variant == "nbits_prefill_wgmma");
    CHECK(up.reason().find("stream-K") != std::string::npos);
    CHECK(up.capture_safe);
    CHECK(entries(up) == std::vector<std::string>{"nbits_zero_words", "nbits_prefill_gemm_stream_k"});
    REQUIRE(up.scratch_bytes.size() == 1);
    CHECK(up.scratch_bytes[0] == 132 * (256 * 128 * 4 + 4));
    const KernelStep& zero = test::kernel_step(up, 0);
    const KernelStep& gemm = test::kernel_step(up, 1);
    CHECK(gemm.config.grid == Dim3{132, 1, 1});
    CHECK(gemm.config.block == Dim3{384, 1, 1});
    CHECK(defines(gemm, "NBITS_STREAM_K=1"));
    CHECK(defines(gemm, "NBITS_TILE_M=256"));
    CHECK(defines(gemm, "NBITS_TMA=1"));
    CHECK(defines(gemm, "NBITS_PRODUCER_WARPS=4"));
    CHECK(defines(gemm, "NBITS_MIN_CTAS=1"));
    CHECK(!sets(gemm, "NBITS_SPLIT_K"));
    // The zeroed words are the GEMM's flags, after the partial tiles.
    const BufferRef flags = BufferRef::scratch(0, 132 * 256 * 128 * 4);
    CHECK(std::get<BufferRef>(zero.args[0]) == flags);
    CHECK(std::get<std::int32_t>(zero.args[1]) == 132);
    CHECK(std::get<BufferRef>(gemm.args[gemm.args.size() - 2]) == BufferRef::scratch(0));
    CHECK(std::get<BufferRef>(gemm.args.back()) == flags);
    // Narrow nodes past M = 128 whose grid of whole tiles would not fill the device take it too (Llama-3-8B o at
    // M = 256: 32 tiles; Qwen2.5-7B qkv at M = 512: 72), as does M = 129 (one partial token tile), bf16 with zero
    // points, and a bias.
    test::Shapes bf16_zp = rows(129, DataType::BFloat16);
    bf16_zp.zero_points = true;
    test::Shapes biased = rows(2048);
    biased.bias = true;
    for (const auto& [k, n, shapes] : {std::tuple{4096, 4096, rows(256)}, std::tuple{3584, 4608, rows(512)},
                                       std::tuple{4096, 14336, bf16_zp}, std::tuple{8192, 28672, biased}}) {
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(shapes.m);
        const LaunchPlan plan = streamed(fastest(node(k, n), shapes)).plan();
        CHECK(plan.variant == "nbits_prefill_wgmma");
        CHECK(entries(plan) == std::vector<std::string>{"nbits_zero_words", "nbits_prefill_gemm_stream_k"});
        CHECK(test::kernel_step(plan, 1).config.grid == Dim3{132, 1, 1});
    }
    CHECK(without_stream_k(fastest(node(4096, 4096), rows(256))).plan().variant == "nbits_prefill_dequantize_cublaslt");
    // A grid of fewer units than SMs takes one CTA a unit: 1 column tile of K = 512 (8 k tiles) stays off it.
    CHECK(streamed(fastest(node(512, 128), rows(256))).plan().variant != "nbits_prefill_wgmma");
    // The paired gate/up node: 64 columns of Y a tile (the gate and up rows of each), Llama-3-8B at M = 512 224
    // column tiles of two token tiles.
    const LaunchPlan paired = streamed(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(512))).plan();
    CHECK(paired.variant == "nbits_prefill_wgmma");
    CHECK(entries(paired) == std::vector<std::string>{"nbits_zero_words", "nbits_prefill_gate_up_stream_k"});
    CHECK(test::kernel_step(paired, 1).config.grid == Dim3{132, 1, 1});
    CHECK(paired.scratch_bytes == up.scratch_bytes);
    // Up to M = 128 the 64- and 128-token tiles, two CTAs an SM (264 on the H200) without producer warps, by the
    // tensor memory accelerator (which the plan's own 64-token tiles do not take): a partial tile of 256 threads x
    // tokens / 2 fp32 accumulators a CTA. The 128-token ones also where NBITS_PREFILL_WGMMA_TILE_M=128 asks for them
    // past M = 128.
    const NodeAttributes gate_up = test::marked(node(4096, 14336), kGateUpSwigluAttr);
    const std::vector<std::pair<int, test::Problem>> two_an_sm = {
        {128, streamed(fastest(node(4096, 14336), rows(128)))},
        {128, streamed(fastest(node(4096, 14336), rows(65)))},
        {128,
         with_override(streamed(fastest(node(4096, 14336), rows(512))), &PlanOverrides::prefill_wgmma_tile_m, 128)},
        {128, streamed(fastest(gate_up, rows(128)))},
        {64, streamed(fastest(node(4096, 14336), rows(33)))},
        {64, streamed(fastest(node(4096, 14336), rows(64)))},
        {64, streamed(fastest(gate_up, rows(48)))},
    };
    for (const auto& [tokens, problem] : two_an_sm) {
        const LaunchPlan plan = problem.plan();
        CAPTURE(plan.reason());
        CHECK(plan.variant == "nbits_prefill_wgmma");
        REQUIRE(plan.steps.size() == 2);
        const KernelStep& tiles = test::kernel_step(plan, 1);
        CHECK(tiles.entry.find("_stream_k") != std::string::npos);
        CHECK(tiles.config.grid == Dim3{264, 1, 1});
        CHECK(tiles.config.block == Dim3{256, 1, 1});
        CHECK(defines(tiles, "NBITS_TILE_M=" + std::to_string(tokens)));
        CHECK(defines(tiles, "NBITS_MIN_CTAS=2"));
        CHECK(defines(tiles, "NBITS_TMA=1"));
        CHECK(!sets(tiles, "NBITS_PRODUCER_WARPS"));
        const std::size_t partial = 256 * static_cast<std::size_t>(tokens / 2) * 4;
        CHECK(plan.scratch_bytes == std::vector<std::size_t>{264 * (partial + 4)});
        CHECK(std::get<std::int32_t>(test::kernel_step(plan, 0).args[1]) == 264);
    }
    // Not below the wgmma GEMM (M <= 32), where the tensor maps cannot describe the rows (K % 8 != 0), off sm_90,
    // nor with the override 0 or unset.
    auto no_stream = [](const test::Problem& p) {
        for (const std::string& name : entries(p.plan())) {
            if (name.find("_stream_k") != std::string::npos) {
                return false;
            }
        }
        return true;
    };
    CHECK(no_stream(streamed(fastest(node(4096, 14336), rows(32)))));
    CHECK(no_stream(streamed(fastest(node(4100, 14336), rows(512)))));
    CHECK(no_stream(streamed(fastest(node(4100, 14336), rows(64)))));
    CHECK(no_stream(streamed(fastest(node(4100, 14336), rows(128)))));
    // Nor where its units would not count in 32 bits, as the kernel counts them: K = N = 2^20 at M = 4096 makes
    // 8192 column tiles x 16 token tiles x 16384 k tiles = 2^31 units; at M = 128, 2^27.
    CHECK(no_stream(streamed(fastest(node(1 << 20, 1 << 20), rows(4096)))));
    CHECK_FALSE(no_stream(streamed(fastest(node(1 << 20, 1 << 20), rows(128)))));
    CHECK(no_stream(streamed(fastest(node(4096, 14336), rows(512), Capabilities::a100()))));
    CHECK(no_stream(with_override(fastest(node(4096, 14336), rows(512)), &PlanOverrides::prefill_stream_k, 0)));
    CHECK(no_stream(fastest(node(4096, 14336), rows(512))));
    // Nor with the cp.async pipeline (NBITS_PREFILL_TMA=0), other producers or 256 weight rows asked for.
    for (const std::size_t m : {64, 128, 512}) {
        CAPTURE(m);
        const test::Problem p = streamed(fastest(node(4096, 14336), rows(m)));
        CHECK(no_stream(with_override(p, &PlanOverrides::prefill_tma, 0)));
        CHECK(no_stream(with_override(p, &PlanOverrides::prefill_producer_warps, 1)));
        CHECK(no_stream(with_override(p, &PlanOverrides::prefill_wgmma_tile_n, 256)));
    }
}

TEST_CASE("Fastest prefill on sm_90 takes the stream-K grid unasked for one weight set past M = 128 where whole "
          "tiles leave the node to dequantise + cuBLASLt or end in a part-filled wave, as measured")
{
    const auto streamed = [](const test::Problem& p) {
        const LaunchPlan plan = p.plan();
        return plan.variant == "nbits_prefill_wgmma" &&
               entries(plan) == std::vector<std::string>{"nbits_zero_words", "nbits_prefill_gemm_stream_k"};
    };
    struct Node {
        const char* name;
        std::size_t k;
        std::size_t n;
    };
    const Node down{"Llama-3-8B down", 14336, 4096};
    const Node qkv{"Llama-3-8B qkv", 4096, 6144};
    const Node o{"Llama-3-8B o", 4096, 4096};
    const Node qwen_qkv{"Qwen2.5-7B qkv", 3584, 4608};
    const Node qwen_up{"Qwen2.5-7B up", 3584, 18944};
    const Node up{"Llama-3-8B up", 4096, 14336};
    const Node big_up{"Llama-3-70B up", 8192, 28672};
    const Node big_qkv{"Llama-3-70B qkv", 8192, 10240};
    const Node big_o{"Llama-3-70B o", 8192, 8192};
    const Node big_down{"Llama-3-70B down", 28672, 8192};
    const Node qwen_o{"Qwen2.5-7B o", 3584, 3584};
    const Node qwen_down{"Qwen2.5-7B down", 18944, 3584};
    // The rows measured faster on the grid (fp16, and bf16 with a bias and zero points alike, each also kept to
    // whole tiles by NBITS_PREFILL_STREAM_K=0).
    const std::vector<std::pair<Node, std::size_t>> taken = {
        {down, 129}, {down, 192},     {down, 256},     {down, 384},     {down, 512},    {down, 1024},
        {qkv, 192},  {qkv, 256},      {qkv, 512},      {o, 256},        {o, 512},       {qwen_qkv, 192},
        {qwen_qkv, 256}, {qwen_qkv, 512}, {qwen_up, 192}, {qwen_up, 256}, {qwen_up, 512},
        {qwen_down, 192}, {qwen_down, 384}, {qwen_down, 1024}, {big_qkv, 192}, {big_qkv, 256}, {big_qkv, 512},
        {big_qkv, 1024}, {big_o, 256},    {big_o, 384},     {big_o, 1024},    {big_down, 192}, {big_down, 512},
        {big_down, 1024}, {qkv, 768},     {qkv, 1024},      {o, 768},         {qwen_qkv, 768}, {big_up, 512},
        {big_o, 1536},   {big_o, 2048},   {big_qkv, 1536},  {big_qkv, 2048},  {down, 1536},    {down, 2048},
        {qwen_down, 1536}, {qwen_down, 2048}, {big_down, 1536}};
    // The rows measured slower: a last token tile half empty at K < 8192, past M = 1024 at K < 8192 and its wgmma
    // tiles past M = 512, 70B down at M = 2048 (A of 56 Mi elements), last waves of 256-token tiles fuller (8B up:
    // 112 column tiles, one wave of 0.85; 70B up: 224, last waves of 0.7 and more), the 64- and 128-token tiles, and
    // a node of fewer than 15 Mi weights (Qwen2.5-7B o).
    const std::vector<std::pair<Node, std::size_t>> kept = {
        {qwen_up, 129},  {o, 129},       {qwen_qkv, 129}, {qwen_qkv, 384}, {qwen_up, 384}, {qkv, 384},   {o, 384},
        {qkv, 1536},     {qwen_qkv, 2048}, {o, 2048},     {qwen_up, 1024}, {big_down, 2048}, {up, 256},   {up, 512},
        {big_up, 256},   {big_up, 1024}, {big_up, 2048},  {up, 128},      {qwen_up, 48},  {down, 64},    {qkv, 96},
        {qwen_o, 192},   {qwen_o, 256},  {qwen_o, 512},   {big_up, 192}};
    for (const auto& [measured, taken_here] : {std::pair{&taken, true}, std::pair{&kept, false}}) {
        for (const auto& [at, m] : *measured) {
            CAPTURE(at.name);
            CAPTURE(m);
            CHECK(streamed(fastest(node(at.k, at.n), rows(m))) == taken_here);
            if (!taken_here) {
                continue;
            }
            test::Shapes features = rows(m, DataType::BFloat16);
            features.zero_points = true;
            features.bias = true;
            CHECK(streamed(fastest(node(at.k, at.n), features)));
            // NBITS_PREFILL_STREAM_K=0 keeps whole tiles.
            const LaunchPlan whole = without_stream_k(fastest(node(at.k, at.n), rows(m))).plan();
            for (const std::string& entry : entries(whole)) {
                CHECK(entry.find("stream_k") == std::string::npos);
            }
        }
    }
    // Nor the paired gate/up node, a node the tensor maps cannot describe (K % 8 != 0), NBITS_PREFILL_TMA=0,
    // NBITS_PREFILL_WGMMA_TILE_M or _TILE_N, or a GPU other than sm_90.
    const test::Problem paired = fastest(test::marked(node(3584, 18944), kGateUpSwigluAttr), rows(256));
    CHECK(entries(paired.plan()) == std::vector<std::string>{"nbits_prefill_gate_up_tma"});
    CHECK_FALSE(streamed(fastest(node(14332, 4096), rows(256))));
    CHECK_FALSE(streamed(without_tma(node(14336, 4096), rows(256))));
    const test::Problem down_256 = fastest(node(14336, 4096), rows(256));
    CHECK_FALSE(streamed(with_override(down_256, &PlanOverrides::prefill_wgmma_tile_m, 256)));
    CHECK_FALSE(streamed(with_override(down_256, &PlanOverrides::prefill_wgmma_tile_n, 256)));
    CHECK_FALSE(streamed(fastest(node(14336, 4096), rows(256), Capabilities::a100())));
    // From two rounds of tiles on (Qwen2.5-7B up at M = 512: 296 tiles of 256 tokens on 132 SMs) the kernel is the
    // one that runs all but the last round and the part-filled one whole; below (148 tiles at M = 256), the one
    // without that walk.
    for (const auto& [m, rounds] : {std::pair{std::size_t{512}, true}, std::pair{std::size_t{256}, false}}) {
        CAPTURE(m);
        const LaunchPlan plan = fastest(node(qwen_up.k, qwen_up.n), rows(m)).plan();
        REQUIRE(entries(plan) == std::vector<std::string>{"nbits_zero_words", "nbits_prefill_gemm_stream_k"});
        CHECK(defines(test::kernel_step(plan, 1), "NBITS_STREAM_K_ROUNDS=1") == rounds);
    }
    // The grid is one CTA an SM of the part at hand (H100 PCIe 114, H20 78), with as many partial slots and flags.
    for (const Capabilities& device : {Capabilities::h100_pcie(), Capabilities::h20()}) {
        CAPTURE(device.name);
        const LaunchPlan plan = fastest(node(14336, 4096), rows(256), device).plan();
        REQUIRE(entries(plan) == std::vector<std::string>{"nbits_zero_words", "nbits_prefill_gemm_stream_k"});
        const std::uint32_t sms = device.multiprocessor_count;
        CHECK(test::kernel_step(plan, 1).config.grid == Dim3{sms, 1, 1});
        CHECK(plan.scratch_bytes == std::vector<std::size_t>{sms * ((std::size_t{128} << 10) + 4)});
    }
}

TEST_CASE("Fastest prefill on sm_90 with NBITS_PREFILL_TMA: the copies' issuers and tensor maps of A and the weights")
{
    auto tma = [](test::Problem p) { return with_override(std::move(p), &PlanOverrides::prefill_tma, 1); };
    // Llama-3-8B up at M = 512 on 256-token tiles: the *_tma entry, a warpgroup of producers, one CTA an SM.
    const LaunchPlan up =
        tma(with_override(without_tma(node(4096, 14336), rows(512)), &PlanOverrides::prefill_wgmma_tile_m, 256)).plan();
    CHECK(up.variant == "nbits_prefill_wgmma");
    const KernelStep& step = test::kernel_step(up, 0);
    CHECK(step.entry == "nbits_prefill_gemm_tma");
    CHECK(defines(step, "NBITS_TMA=1"));
    CHECK(defines(step, "NBITS_PRODUCER_WARPS=4"));
    CHECK(defines(step, "NBITS_MIN_CTAS=1"));
    CHECK(step.config.block == Dim3{384, 1, 1});
    CHECK(step.config.grid == Dim3{112, 2, 1});
    // The stages of the cp.async tiles and their mbarriers.
    CHECK(step.config.dynamic_shared_bytes == 190464 + 80);
    const auto& act = std::get<TensorMapArg>(step.args[step.args.size() - 2]);
    CHECK(act.base == BufferRef::input(0));
    CHECK(act.element == TensorMapArg::Element::Float16);
    CHECK((act.width == 4096 && act.rows == 512 && act.row_bytes == 8192));
    CHECK((act.box_width == 64 && act.box_rows == 256 && act.swizzle_128b));
    const auto& weights = std::get<TensorMapArg>(step.args.back());
    CHECK(weights.base == BufferRef::input(1));
    CHECK(weights.element == TensorMapArg::Element::UInt8);
    CHECK((weights.width == 2048 && weights.rows == 14336 && weights.row_bytes == 2048));
    CHECK((weights.box_width == 32 && weights.box_rows == 128 && !weights.swizzle_128b));
    // The paired node: a map of each weight set, 64 rows a box; bf16 activations; int8 rows of 64 bytes a tile.
    const KernelStep paired = test::kernel_step(
        tma(without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(1024, DataType::BFloat16))).plan(), 0);
    CHECK(paired.entry == "nbits_prefill_gate_up_tma");
    const std::size_t maps = paired.args.size() - 3;  // act_map, gate_map, up_map after the 10 parameters
    CHECK(std::get<TensorMapArg>(paired.args[maps]).element == TensorMapArg::Element::BFloat16);
    CHECK(std::get<TensorMapArg>(paired.args[maps + 1]).base == std::get<BufferRef>(paired.args[1]));  // b_gate
    CHECK(std::get<TensorMapArg>(paired.args[maps + 2]).base == std::get<BufferRef>(paired.args[4]));  // b_up
    CHECK(std::get<TensorMapArg>(paired.args[maps + 1]).box_rows == 64);
    CHECK(std::get<TensorMapArg>(paired.args[maps + 2]).box_rows == 64);
    const KernelStep int8 = test::kernel_step(tma(without_tma(node(4096, 14336, 8), rows(64))).plan(), 0);
    CHECK(int8.entry == "nbits_prefill_gemm_tma");
    CHECK(defines(int8, "NBITS_PRODUCER_WARPS=1"));
    CHECK(defines(int8, "NBITS_MIN_CTAS=2"));
    CHECK(int8.config.block == Dim3{288, 1, 1});
    CHECK(std::get<TensorMapArg>(int8.args.back()).box_width == 64);
    // The 128-token tiles: thread 0 issues the tensor copies, two CTAs an SM (the stages and their mbarriers);
    // NBITS_PREFILL_PRODUCER_WARPS=1 gives them a producer warp, one CTA an SM.
    auto tokens = [](test::Problem p) { return with_override(std::move(p), &PlanOverrides::prefill_wgmma_tile_m, 128); };
    const KernelStep tokens128 = test::kernel_step(tokens(tma(without_tma(node(4096, 14336), rows(512)))).plan(), 0);
    CHECK(tokens128.entry == "nbits_prefill_gemm_tma");
    CHECK(!sets(tokens128, "NBITS_PRODUCER_WARPS"));
    CHECK(defines(tokens128, "NBITS_MIN_CTAS=2"));
    CHECK(tokens128.config.block == Dim3{256, 1, 1});
    CHECK(tokens128.config.grid == Dim3{112, 4, 1});
    CHECK(tokens128.config.dynamic_shared_bytes == 108544 + 80);
    const KernelStep producer128 = test::kernel_step(
        with_override(tokens(tma(without_tma(node(4096, 14336), rows(512)))), &PlanOverrides::prefill_producer_warps, 1)
            .plan(),
        0);
    CHECK(defines(producer128, "NBITS_PRODUCER_WARPS=1"));
    CHECK(defines(producer128, "NBITS_MIN_CTAS=1"));
    CHECK(producer128.config.block == Dim3{288, 1, 1});
    // Where a tensor map cannot describe A (K % 8 != 0), the cp.async copies; unset, 0, other GPUs: no maps.
    CHECK(test::kernel_step(tma(without_tma(node(4100, 14336), rows(512))).plan(), 0).entry.find("_tma") ==
          std::string::npos);
    CHECK(test::kernel_step(without_tma(node(4096, 14336), rows(512)).plan(), 0).entry == "nbits_prefill_gemm");
    CHECK(test::kernel_step(with_override(without_tma(node(4096, 14336), rows(512)), &PlanOverrides::prefill_tma, 0).plan(),
                            0)
              .entry == "nbits_prefill_gemm");
    for (const auto& planned : tma(without_tma(node(4096, 14336), rows(512), Capabilities::a100())).plan().steps) {
        if (const auto* kernel = std::get_if<KernelStep>(&planned)) {
            CHECK(kernel->entry.find("_tma") == std::string::npos);
        }
    }
}

TEST_CASE("Fastest prefill on sm_90: producer warps on the 64-token wgmma tiles, NBITS_PREFILL_PRODUCER_WARPS elsewhere")
{
    auto producers = [](test::Problem p, std::optional<int> warps) {
        return with_override(std::move(p), &PlanOverrides::prefill_producer_warps, warps);
    };
    auto step_of = [](test::Problem p) { return test::kernel_step(p.plan(), 0); };
    // Llama-3-8B up at M = 64: a warpgroup of producer warps beside the two computing ones, two CTAs an SM.
    const KernelStep small = step_of(without_tma(node(4096, 14336), rows(64)));
    CHECK(defines(small, "NBITS_PRODUCER_WARPS=4"));
    CHECK(defines(small, "NBITS_MIN_CTAS=2"));
    CHECK(small.config.block == Dim3{384, 1, 1});
    // At M = 128 none: the 128-token tile keeps two CTAs of 256 threads an SM.
    const KernelStep large = step_of(without_tma(node(4096, 14336), rows(128)));
    CHECK_FALSE(sets(large, "NBITS_PRODUCER_WARPS"));
    CHECK(large.config.block == Dim3{256, 1, 1});
    CHECK(large.config.dynamic_shared_bytes == 108544);
    // The override: 0 turns them off, 1 and 2 take fewer; on the 128-token tile they cost the second CTA an SM.
    const KernelStep off = step_of(producers(without_tma(node(4096, 14336), rows(64)), 0));
    CHECK_FALSE(sets(off, "NBITS_PRODUCER_WARPS"));
    CHECK(off.config.block == Dim3{256, 1, 1});
    CHECK(off.config.dynamic_shared_bytes == 67584);
    CHECK(step_of(producers(without_tma(node(4096, 14336), rows(64)), 2)).config.block == Dim3{320, 1, 1});
    const KernelStep one = step_of(producers(without_tma(node(4096, 14336), rows(128)), 1));
    CHECK(defines(one, "NBITS_PRODUCER_WARPS=1"));
    CHECK(defines(one, "NBITS_MIN_CTAS=1"));
    CHECK(one.config.block == Dim3{288, 1, 1});
    CHECK(one.config.dynamic_shared_bytes == 108544 + 80);
    // Values the kernel does not take are ignored; the mma.sync GEMM and other GPUs have none.
    for (const int ignored : {3, 8, -1}) {
        CAPTURE(ignored);
        CHECK(step_of(producers(without_tma(node(4096, 14336), rows(64)), ignored)).defines == small.defines);
    }
    CHECK_FALSE(sets(step_of(producers(without_tma(node(4096, 14336), rows(32)), 4)), "NBITS_PRODUCER_WARPS"));
    const LaunchPlan a100 = producers(without_tma(node(4096, 14336), rows(64), Capabilities::a100()), 4).plan();
    for (const auto& planned : a100.steps) {
        if (const auto* kernel = std::get_if<KernelStep>(&planned)) {
            CHECK_FALSE(sets(*kernel, "NBITS_PRODUCER_WARPS"));
        }
    }
}

TEST_CASE("Fastest prefill beyond M = 128: dequantised column chunks through cuBLASLt, scratch within 64 MiB")
{
    const LaunchPlan plan = without_tma(node(4096, 14336), rows(2048)).plan();
    CHECK(plan.variant == "nbits_prefill_dequantize_cublaslt");
    // 48 MiB of weights per chunk: 6144 columns of K = 4096, three chunks for N = 14336.
    CHECK(entries(plan) == std::vector<std::string>{"nbits_dequantize", "cuBLASLt", "nbits_dequantize", "cuBLASLt",
                                                    "nbits_dequantize", "cuBLASLt"});
    const auto& last = std::get<GemmStep>(plan.steps[5]);
    CHECK(last.n == 14336 - 2 * 6144);
    CHECK(last.ldy == 14336);
    CHECK(last.y == BufferRef::output(0).at(2 * 6144 * 2));
    CHECK(last.weight_layout == GemmStep::WeightLayout::NxK);
    CHECK(last.dtype == DataType::Float16);
    CHECK(plan.workspace_bytes() <= 64u << 20);
}

// The column widths of a dequantise + cuBLASLt plan's GEMMs, in order; its scratch within the budget.
std::vector<std::size_t> gemm_widths(test::Problem p)
{
    const LaunchPlan plan = p.plan();
    std::vector<std::size_t> widths;
    for (const PlanStep& step : plan.steps) {
        if (const auto* gemm = std::get_if<GemmStep>(&step)) {
            widths.push_back(gemm->n);
        }
    }
    CHECK(plan.workspace_bytes() <= 64u << 20);
    return widths;
}

TEST_CASE("Fastest prefill's dequantised chunks take the fewest waves of cuBLASLt tiles the budget allows")
{
    using Widths = std::vector<std::size_t>;
    // Llama-3-8B up at M = 2048: 24 tiles of 256 columns a chunk (3 waves of 16 x 24 tiles on 132 SMs), not the
    // 30 the budget holds (4 waves).
    CHECK(gemm_widths(without_tma(node(4096, 14336), rows(2048))) == Widths{6144, 6144, 2048});
    CHECK(gemm_widths(without_tma(node(4096, 14336), rows(1024))) == Widths{7680, 6656});
    // Qwen2.5-7B up: 33 tiles fill 4 waves exactly.
    CHECK(gemm_widths(without_tma(node(3584, 18944), rows(2048))) == Widths{8448, 8448, 2048});
    // Llama-3-70B up: one wave a chunk of 2048 columns at M = 2048; at M = 1024 the widest chunks, two waves each.
    CHECK(gemm_widths(without_tma(node(8192, 28672), rows(2048))) == Widths(14, 2048));
    CHECK(gemm_widths(without_tma(node(8192, 28672), rows(1024))) ==
          Widths{3840, 3840, 3840, 3840, 3840, 3840, 3840, 1792});
    // Llama-3-8B down: two chunks of one wave instead of 2176 + 1920 columns, the first two waves at M = 2048.
    CHECK(gemm_widths(without_tma(node(14336, 4096), rows(2048))) == Widths{2048, 2048});
    CHECK(gemm_widths(without_tma(node(14336, 4096), rows(512))) == Widths{2048, 2048});
    // The SMs count: the A100's 108 take a wave of 6 column tiles at M = 2048.
    CHECK(gemm_widths(without_tma(node(14336, 4096), rows(2048), Capabilities::a100())) == Widths{1536, 1536, 1024});
    // A node whose weights fit the budget takes one chunk.
    CHECK(gemm_widths(without_tma(node(3584, 4608), rows(2048))) == Widths{4608});
}

TEST_CASE("Fastest prefill's dequantised chunks add a bias of one row, folded or not, in cuBLASLt's epilogue and a "
          "per-token bias in a pass over Y")
{
    // Per chunk: whether its GEMM adds a bias, and whether an nbits_bias_rows pass follows it.
    auto bias_stages = [](const test::Problem& p) {
        std::vector<std::pair<bool, bool>> stages;
        for (const PlanStep& step : p.plan().steps) {
            if (const auto* gemm = std::get_if<GemmStep>(&step)) {
                stages.emplace_back(!gemm->bias.is_null(), false);
            } else if (const auto* kernel = std::get_if<KernelStep>(&step);
                       kernel != nullptr && kernel->entry == "nbits_bias_rows") {
                REQUIRE(!stages.empty());
                stages.back().second = true;
            }
        }
        return stages;
    };
    using Stages = std::vector<std::pair<bool, bool>>;
    test::Shapes biased = rows(2048);
    biased.bias = true;
    const Stages in_gemm(3, {true, false});
    CHECK(bias_stages(without_tma(node(4096, 14336), biased)) == in_gemm);
    CHECK(bias_stages(without_tma(test::marked(node(4096, 14336), kFoldedBiasAttr), biased)) == in_gemm);
    test::Problem per_token = without_tma(node(4096, 14336), biased);
    per_token.inputs[5] = test::desc(DataType::Float16, {2048, 14336});
    CHECK(bias_stages(per_token) == Stages(3, {false, true}));
}

TEST_CASE("the paired node's dequantised chunks keep the gate and up projections in fp32 for one rounding in SwiGLU")
{
    const LaunchPlan plan = without_tma(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(2048)).plan();
    REQUIRE(plan.variant == "nbits_prefill_dequantize_cublaslt");
    // Per chunk of 2048 columns (32 MiB of fp32 projections at M = 2048): dequantise and multiply the gate, the
    // same for up, then SwiGLU into Y.
    const std::vector<std::string> chunk{"nbits_dequantize", "cuBLASLt", "nbits_dequantize", "cuBLASLt",
                                         "nbits_silu_mul_rows"};
    std::vector<std::string> expected;
    for (int i = 0; i < 7; ++i) {
        expected.insert(expected.end(), chunk.begin(), chunk.end());
    }
    REQUIRE(entries(plan) == expected);
    const auto& gate = std::get<GemmStep>(plan.steps[1]);
    const auto& up = std::get<GemmStep>(plan.steps[3]);
    for (const GemmStep* projection : {&gate, &up}) {
        CHECK(projection->dtype == DataType::Float16);
        CHECK(projection->y_dtype == DataType::Float32);
        CHECK(projection->n == 2048);
        CHECK(projection->ldy == 2048);
        CHECK(projection->y.kind == BufferRef::Kind::Scratch);
    }
    CHECK(up.y == gate.y.at(std::size_t{2048} * 2048 * sizeof(float)));
    const KernelStep& swiglu = test::kernel_step(plan, 4);
    REQUIRE(swiglu.args.size() >= 3);
    CHECK(std::get<BufferRef>(swiglu.args[0]) == gate.y);
    CHECK(std::get<BufferRef>(swiglu.args[1]) == up.y);
    CHECK(std::get<BufferRef>(swiglu.args[2]) == BufferRef::output(0));
    CHECK(plan.workspace_bytes() <= 64u << 20);
    // The unpaired node's GEMMs write Y in its own dtype.
    const LaunchPlan unpaired = without_tma(node(4096, 14336), rows(2048)).plan();
    CHECK_FALSE(std::get<GemmStep>(unpaired.steps[1]).y_dtype.has_value());
}

TEST_CASE("Fastest prefill's dequantised chunks narrow to NBITS_PREFILL_CHUNK_COLUMNS (64..1048576), never past the budget")
{
    auto chunked = [](const std::optional<std::string>& text) {
        test::Problem p = without_tma(node(4096, 14336), rows(2048));
        p.context.overrides =
            text ? PlanOverrides::parse({{kPrefillChunkColumnsEnv, *text}, {kPrefillTmaEnv, "0"}})
                 : PlanOverrides::parse({{kPrefillTmaEnv, "0"}});
        return gemm_widths(p);
    };
    CHECK(chunked(std::nullopt) == std::vector<std::size_t>{6144, 6144, 2048});
    CHECK(chunked("4096") == std::vector<std::size_t>{4096, 4096, 4096, 2048});
    // Whole tiles of 64 columns: 3000 -> 2944.
    CHECK(chunked("3000") == std::vector<std::size_t>{2944, 2944, 2944, 2944, 2560});
    // The budget (60 MiB of K = 4096 weights, 7680 columns) caps a wider request.
    CHECK(chunked("16384") == std::vector<std::size_t>{7680, 6656});
    for (const char* ignored : {"63", "0", "1048577", "-4096", " 4096", "", "wide"}) {
        CAPTURE(ignored);
        CHECK(chunked(std::string(ignored)) == std::vector<std::size_t>{6144, 6144, 2048});
    }
    ::setenv(kPrefillChunkColumnsEnv, "2048", 1);
    CHECK(PlanOverrides::from_environment().prefill_chunk_columns == 2048);
    ::unsetenv(kPrefillChunkColumnsEnv);
    CHECK_FALSE(PlanOverrides::from_environment().prefill_chunk_columns.has_value());
}

TEST_CASE("Fastest scratch stays within 64 MiB whatever the shape")
{
    test::Shapes gamma = rows(1);
    gamma.gamma = DataType::Float16;
    for (const std::size_t m : {std::size_t{17}, std::size_t{129}, std::size_t{2048}, std::size_t{100000}}) {
        for (const auto& [k, n] : {std::pair{std::int64_t{4096}, std::int64_t{14336}},
                                   std::pair{std::int64_t{28672}, std::int64_t{8192}},
                                   std::pair{std::int64_t{262144}, std::int64_t{128}}}) {
            for (const int kind : {0, 1, 2}) {
                CAPTURE(m);
                CAPTURE(k);
                CAPTURE(kind);
                NodeAttributes attributes = node(k, n);
                test::Shapes shapes = rows(m);
                if (kind == 1) {
                    attributes = test::marked(attributes, kRmsNormPrologueAttr);
                    shapes.gamma = DataType::Float16;
                } else if (kind == 2) {
                    attributes = test::marked(attributes, kGateUpSwigluAttr);
                }
                const LaunchPlan plan = fastest(attributes, shapes).plan();
                CHECK(plan.workspace_bytes() <= 64u << 20);
                CHECK_FALSE(plan.steps.empty());
            }
        }
    }
}

TEST_CASE("Fastest prefill of the paired gate/up node: one fused kernel, or chunks with a SwiGLU epilogue")
{
    const NodeAttributes paired = test::marked(node(4096, 14336), kGateUpSwigluAttr);
    const LaunchPlan small = without_tma(paired, rows(32)).plan();
    CHECK(entries(small) == std::vector<std::string>{"nbits_prefill_gate_up"});
    const LaunchPlan large = without_tma(paired, rows(2048)).plan();
    const std::vector<std::string> names = entries(large);
    REQUIRE(names.size() >= 5);
    CHECK(std::vector<std::string>(names.begin(), names.begin() + 5) ==
          std::vector<std::string>{"nbits_dequantize", "cuBLASLt", "nbits_dequantize", "cuBLASLt",
                                   "nbits_silu_mul_rows"});
    CHECK(large.workspace_bytes() <= 64u << 20);
}

TEST_CASE("Fastest prefill with the RMS-norm prologue normalises rows into scratch, no K limit")
{
    test::Shapes shapes = rows(64);
    shapes.gamma = DataType::Float32;
    // K = 1000 is no multiple of 128: the original's fused kernels refuse it, nbits' do not.
    const LaunchPlan plan = fastest(test::marked(node(1000, 512), kRmsNormPrologueAttr), shapes).plan();
    CHECK(entries(plan) == std::vector<std::string>{"nbits_rmsnorm_rows", "nbits_prefill_gemm"});
    CHECK(defines(test::kernel_step(plan, 0), "NBITS_GAMMA_F32=1"));
    CHECK(test::kernel_step(plan, 1).args[0] == KernelArg{BufferRef::scratch(0)});
}

TEST_CASE("Fastest takes bf16 activations, with bf16 or fp32 scales")
{
    test::Shapes shapes = rows(64, DataType::BFloat16);
    const LaunchPlan plan = fastest(node(4096, 4096), shapes).plan();
    CHECK(defines(test::kernel_step(plan, 0), "NBITS_ACT_BF16=1"));
    shapes.scales = DataType::Float32;
    CHECK(defines(test::kernel_step(fastest(node(4096, 4096), shapes).plan(), 0), "NBITS_SCALE_F32=1"));
    shapes.scales = DataType::Float16;
    CHECK(test::error_message(fastest(node(4096, 4096), shapes)) ==
          test::prefixed("scales must have dtype BFloat16 or Float32 for BFloat16 activations, got Float16"));
    const LaunchPlan large = fastest(node(4096, 4096), rows(2048, DataType::BFloat16)).plan();
    CHECK(std::get<GemmStep>(large.steps[1]).dtype == DataType::BFloat16);
}

TEST_CASE("Fastest fits the fused kernel to the device and the block size")
{
    // 99 KiB of opt-in shared memory (sm_86): fewer pipeline stages than on an H200.
    const LaunchPlan h200 = fastest(node(4096, 4096, 8), rows(32)).plan();
    const LaunchPlan sm86 = fastest(node(4096, 4096, 8), rows(32), Capabilities::sm86_28()).plan();
    CHECK(defines(test::kernel_step(h200, 0), "NBITS_STAGES=4"));
    CHECK_FALSE(defines(test::kernel_step(sm86, 0), "NBITS_STAGES=4"));
    CHECK(test::kernel_step(sm86, 0).config.dynamic_shared_bytes <=
          Capabilities::sm86_28().max_shared_memory_per_block_optin);
    // Block 16: a thread's 8-k units must stay inside one block, so the stage's k shrinks.
    const LaunchPlan block16 = fastest(node(4096, 4096, 4, 16), rows(32)).plan();
    CHECK(defines(test::kernel_step(block16, 0), "NBITS_TILE_K=128"));
}

TEST_CASE("Original plans stay the original's where Fastest takes nbits' kernels")
{
    test::Problem original = test::problem(node(4096, 14336), rows(32));
    CHECK(original.plan().variant == "gemm_f16_tiled");
    test::Problem own = original;
    own.context.policy = KernelPolicy::Fastest;
    CHECK(own.plan().variant == "nbits_prefill_fused");
    // f32 activations keep the original's paths under both policies.
    test::Shapes f32 = rows(64, DataType::Float32);
    CHECK(fastest(node(4096, 4096), f32).plan().variant == "dequant_cublas_gemm");
}

TEST_CASE("Fastest decode: one persistent pass over the weights for M = 1..16, geometry from the SM count")
{
    const LaunchPlan lm_head = fastest(node(4096, 128256), rows(1)).plan();
    CHECK(lm_head.variant == "nbits_decode");
    const KernelStep& step = test::kernel_step(lm_head, 0);
    CHECK(step.entry == "nbits_decode_matmul");
    // 32 k steps of 128 codes: 8 warps split K, 2 CTAs of them per SM, two 16-column tiles per CTA.
    CHECK(step.config.block == Dim3{256, 1, 1});
    CHECK(step.config.grid == Dim3{264, 1, 1});
    CHECK(defines(step, "NBITS_TILES=2"));
    CHECK(defines(step, "NBITS_M_TILES=1"));
    CHECK(defines(step, "NBITS_ACT=0"));
    CHECK(lm_head.capture_safe);
    CHECK(lm_head.scratch_bytes.empty());
    // A 46-SM part gets a smaller persistent grid.
    const LaunchPlan small = fastest(node(4096, 128256), rows(1), Capabilities::sm89_46()).plan();
    CHECK(test::kernel_step(small, 0).config.grid == Dim3{92, 1, 1});
    // Two batch tiles past M = 8; one tile per CTA when the columns do not fill the grid, and then the 56 groups'
    // K split over clusters of 4 CTAs (the GPCs of 132 SMs run 30 of them a CTA an SM, 60 two an SM) ...
    const LaunchPlan m16 = fastest(node(8192, 896), rows(16)).plan();
    CHECK(defines(test::kernel_step(m16, 0), "NBITS_M_TILES=2"));
    CHECK(defines(test::kernel_step(m16, 0), "NBITS_TILES=1"));
    CHECK(defines(test::kernel_step(m16, 0), "NBITS_CLUSTER_K=4"));
    CHECK(test::kernel_step(m16, 0).config.grid == Dim3{4 * 56, 1, 1});
    // ... and 64 groups over clusters of 2, as 64 clusters of 4 would not run in one round.
    const LaunchPlan m16_wide = fastest(node(8192, 1024), rows(16)).plan();
    CHECK(defines(test::kernel_step(m16_wide, 0), "NBITS_CLUSTER_K=2"));
    CHECK(test::kernel_step(m16_wide, 0).config.grid == Dim3{2 * 64, 1, 1});
    // int8: 64-code steps; K = 128 gives 2 of them, so 2 warps.
    const LaunchPlan int8 = fastest(node(128, 512, 8), rows(1)).plan();
    CHECK(test::kernel_step(int8, 0).config.block == Dim3{64, 1, 1});
}

TEST_CASE("Fastest decode sizes its cp.async ring and CTAs per SM to the device")
{
    // Llama-3-8B qkv: 384 column groups. Three CTAs per SM cover them in one round (396 slots); two would take
    // two rounds of 264.
    const KernelStep qkv = test::kernel_step(fastest(node(4096, 6144), rows(1)).plan(), 0);
    CHECK(defines(qkv, "NBITS_MIN_BLOCKS=3"));
    CHECK(qkv.config.grid == Dim3{384, 1, 1});
    CHECK(defines(qkv, "NBITS_STAGES=2"));
    CHECK(defines(qkv, "NBITS_SINGLE_ROW=1"));
    // Dynamic shared memory: 8 warps x 2 stages x (1 tile x 2 row halves x 512 bytes of weights, the step's 128
    // activations and the 2 row halves' scales, 8 rows of 16 bytes each), the double-buffered partial sums (2 x 4
    // values x 8 warps x 32 lanes x 4 bytes) and the unused RMS squares (2 floats), 16-byte rounded.
    CHECK(defines(qkv, "NBITS_STAGE_ACTS=1"));
    CHECK(defines(qkv, "NBITS_STAGE_META=1"));
    CHECK(qkv.config.dynamic_shared_bytes == 8 * 2 * (2 * 512 + 128 * 2 + 2 * 128) + 2 * 4 * 8 * 32 * 4 + 16);
    CHECK(qkv.configure_shared_memory);
    // A third CTA per SM caps registers at 80: not for the paired node (Qwen2.5-7B gate/up, 1184 groups, would
    // save a round) nor for two tiles of two batch tiles (lm_head at M = 9; from M = 12 the fused GEMM takes it).
    const KernelStep paired =
        test::kernel_step(fastest(test::marked(node(3584, 18944), kGateUpSwigluAttr), rows(1)).plan(), 0);
    CHECK(defines(paired, "NBITS_MIN_BLOCKS=2"));
    const KernelStep lm_head_m9 = test::kernel_step(fastest(node(4096, 128256), rows(9)).plan(), 0);
    CHECK(defines(lm_head_m9, "NBITS_M_TILES=2"));
    CHECK(defines(lm_head_m9, "NBITS_TILES=2"));
    CHECK(defines(lm_head_m9, "NBITS_MIN_BLOCKS=2"));
    // Two batch tiles take one column tile a CTA where its rounds cost less than 10/6 of two tiles' rounds:
    // Llama-3-70B qkv, 320 two-tile groups on 264 CTAs (2 rounds) or 640 one-tile groups (3 rounds, 3 x 0.6 < 2);
    // Llama-3-70B down keeps two (256 groups in 1 round against 512 in 2).
    const KernelStep qkv70_m16 = test::kernel_step(fastest(node(8192, 10240), rows(16)).plan(), 0);
    CHECK(defines(qkv70_m16, "NBITS_TILES=1"));
    CHECK(defines(qkv70_m16, "NBITS_MIN_BLOCKS=2"));
    CHECK(defines(test::kernel_step(fastest(node(28672, 8192), rows(16)).plan(), 0), "NBITS_TILES=2"));
    CHECK(defines(test::kernel_step(fastest(node(8192, 10240), rows(8)).plan(), 0), "NBITS_TILES=2"));
    CHECK(defines(test::kernel_step(fastest(node(8192, 10240), rows(1)).plan(), 0), "NBITS_MIN_BLOCKS=3"));
    CHECK(defines(test::kernel_step(fastest(node(4096, 6144), rows(16)).plan(), 0), "NBITS_MIN_BLOCKS=3"));
    // lm_head: 4008 groups; a third CTA per SM saves no round per CTA (11 x 3 against 16 x 2), so two.
    const KernelStep lm_head = test::kernel_step(fastest(node(4096, 128256), rows(1)).plan(), 0);
    CHECK(defines(lm_head, "NBITS_MIN_BLOCKS=2"));
    CHECK(defines(lm_head, "NBITS_TILES=2"));
    // A single-row int4 down projection (K > N) takes two chunks a lane per k step, with a ring twice as deep in
    // bytes: 8 warps x 2 stages x (1 tile x 2 chunks x 2 row halves x 512 bytes, 256 activations and 2 x 2 slots
    // of scales), plus the partial sums.
    const KernelStep down = test::kernel_step(fastest(node(14336, 4096), rows(1)).plan(), 0);
    CHECK(defines(down, "NBITS_CHUNKS=2"));
    CHECK(down.config.dynamic_shared_bytes ==
          8 * 2 * (2 * 2 * 512 + 256 * 2 + 2 * 2 * 128) + 2 * 4 * 8 * 32 * 4 + 16);
    CHECK(defines(qkv, "NBITS_CHUNKS=1"));
    // Where the columns fill the grid with two tiles of one chunk, those (Llama-3-70B down: 256 groups of 32
    // columns in one round, against 512 of 16 in two).
    const KernelStep down70 = test::kernel_step(fastest(node(28672, 8192), rows(1)).plan(), 0);
    CHECK(defines(down70, "NBITS_CHUNKS=1"));
    CHECK(defines(down70, "NBITS_TILES=2"));
    CHECK(down70.config.grid == Dim3{256, 1, 1});
    CHECK(defines(test::kernel_step(fastest(node(14336, 4096), rows(2)).plan(), 0), "NBITS_CHUNKS=2"));
    CHECK(defines(test::kernel_step(fastest(node(14336, 4096, 8), rows(1)).plan(), 0), "NBITS_CHUNKS=2"));
    CHECK(defines(test::kernel_step(fastest(node(28672, 8192, 8), rows(1)).plan(), 0), "NBITS_CHUNKS=1"));
    // M = 2..16 accumulates every batch row.
    CHECK(defines(test::kernel_step(fastest(node(4096, 6144), rows(2)).plan(), 0), "NBITS_SINGLE_ROW=0"));
    // A device whose blocks cannot hold even one ring is refused with the reason, not launched.
    Capabilities small = Capabilities::h200();
    small.max_shared_memory_per_block_optin = 24 * 1024;
    const test::Problem refused = fastest(node(4096, 128256), rows(16), small);
    CHECK(test::error_kind(refused) == ErrorKind::Unsupported);
    CHECK_THROWS_WITH_AS(refused.plan(), doctest::Contains("decode kernel needs"), Error);
    // The staged rows of A give way where two CTAs of them would not fit an SM (sm_86: 100 KiB an SM).
    CHECK(defines(test::kernel_step(fastest(node(14336, 4096), rows(8)).plan(), 0), "NBITS_STAGE_ACTS=1"));
    CHECK(defines(test::kernel_step(fastest(node(14336, 4096), rows(8), Capabilities::sm86_28()).plan(), 0),
                  "NBITS_STAGE_ACTS=0"));
    // Every device's plan fits its SMs' shared memory min_blocks times over (1 KiB reserved per block); the fused
    // GEMM that takes lm_head from M = 12 on the H200 its MIN_CTAS.
    for (const Capabilities& device : {Capabilities::h200(), Capabilities::h100_pcie(), Capabilities::h20(),
                                       Capabilities::rtx4090(), Capabilities::l4(), Capabilities::sm86_28(),
                                       Capabilities::a100(), Capabilities::rtx5090()}) {
        for (std::size_t m : {1, 8, 16}) {
            for (const NodeAttributes& attributes :
                 {node(4096, 128256), test::marked(node(4096, 14336), kGateUpSwigluAttr), node(14336, 4096)}) {
                const bool paired = attributes.has(kGateUpSwigluAttr);
                const KernelStep step = test::kernel_step(fastest(attributes, rows(m), device).plan(), 0);
                std::uint32_t blocks = 0;
                for (std::uint32_t b = 1; b <= 6; ++b) {
                    if (defines(step, "NBITS_MIN_BLOCKS=" + std::to_string(b)) ||
                        defines(step, "NBITS_MIN_CTAS=" + std::to_string(b))) {
                        blocks = b;
                    }
                }
                INFO(device.name << " M=" << m << " paired=" << paired);
                REQUIRE(blocks > 0);
                CHECK(blocks * (step.config.dynamic_shared_bytes + 1024) <=
                      device.max_shared_memory_per_block_optin + 1024);
            }
        }
    }
}

TEST_CASE("Fastest decode loads the activations before the weights' wait at M = 9..16, int4 block 32, for the paired "
          "node and one weight set of one tile a CTA, unless NBITS_DECODE_EARLY_ACTS says")
{
    auto early_of = [](const test::Problem& problem) {
        const KernelStep step = test::kernel_step(problem.plan(), 0);
        REQUIRE(step.entry.rfind("nbits_decode", 0) == 0);
        return defines(step, "NBITS_EARLY_ACTS=1") ? 1 : 0;
    };
    auto paired = [](std::size_t k, std::size_t n, std::size_t bits = 4, std::size_t block = 32) {
        return test::marked(node(k, n, bits, block), kGateUpSwigluAttr);
    };
    test::Shapes zp = rows(16);
    zp.zero_points = true;
    // The paired node at M = 9..16, fp16 and bf16, symmetric and with zero points.
    CHECK(early_of(fastest(paired(4096, 14336), rows(16))) == 1);
    CHECK(early_of(fastest(paired(8192, 28672), rows(9))) == 1);
    CHECK(early_of(fastest(paired(3584, 18944), rows(12, DataType::BFloat16))) == 1);
    CHECK(early_of(fastest(paired(4096, 14336), zp)) == 1);
    // One weight set on one tile a CTA, two CTAs of 8 warps an SM (H200: 264 slots), with at least 4 k steps a warp
    // (K >= 3584) or every group in one round.
    CHECK(early_of(fastest(node(4096, 4096), rows(12))) == 1);
    CHECK(early_of(fastest(node(8192, 10240), rows(16, DataType::BFloat16))) == 1);
    CHECK(early_of(fastest(node(4096, 128256), rows(9))) == 1);
    CHECK(early_of(fastest(node(3072, 3072), rows(9))) == 1);
    CHECK(early_of(fastest(node(3072, 9216), rows(12))) == 0);  // 3 steps, 576 groups
    CHECK(early_of(fastest(node(3584, 4608), rows(16))) == 0);  // three CTAs an SM
    CHECK(early_of(fastest(node(14336, 4096), rows(16))) == 0);  // two tiles in clusters of 2
    CHECK(early_of(fastest(node(896, 1152), rows(16))) == 0);  // 4 warps
    test::Shapes zp12 = rows(12);
    zp12.zero_points = true;
    CHECK(early_of(fastest(node(4096, 4096), zp12)) == 0);
    // Not at one batch tile, nor int8 or another block size.
    CHECK(early_of(fastest(paired(4096, 14336), rows(8))) == 0);
    CHECK(early_of(fastest(node(4096, 4096), rows(8))) == 0);
    CHECK(early_of(fastest(paired(4096, 14336, 8), rows(16))) == 0);
    CHECK(early_of(fastest(paired(4096, 14336, 4, 128), zp)) == 0);
    CHECK(early_of(fastest(node(4096, 4096, 4, 128), rows(16))) == 0);
    // NBITS_DECODE_EARLY_ACTS sets it where the activations are loaded from L2, not where they are staged with the
    // weights (M = 1).
    auto forced = [](test::Problem p, int mode) {
        return with_override(std::move(p), &PlanOverrides::decode_early_acts, mode);
    };
    CHECK(early_of(forced(fastest(node(4096, 128256), rows(8)), 1)) == 1);
    CHECK(early_of(forced(fastest(node(3584, 4608), rows(16)), 1)) == 1);
    CHECK(early_of(forced(fastest(paired(4096, 14336), rows(16)), 0)) == 0);
    CHECK(early_of(forced(fastest(node(4096, 128256), rows(1)), 1)) == 0);
}

TEST_CASE("Fastest decode copies two chunks a lane per k step where a CTA takes one tile, unless NBITS_DECODE_CHUNKS says")
{
    auto chunks_of = [](const test::Problem& problem) {
        const KernelStep step = test::kernel_step(problem.plan(), 0);
        return defines(step, "NBITS_CHUNKS=2") ? 2 : defines(step, "NBITS_CHUNKS=1") ? 1 : 0;
    };
    auto paired = [](std::size_t k, std::size_t n) { return test::marked(node(k, n), kGateUpSwigluAttr); };
    // One tile a CTA, two CTAs of 8 warps an SM, one CTA a group, int4, M <= 8: two chunks in a ring of two
    // stages (Llama-3-8B o and down, Qwen2.5-0.5B qkv with 4 warps and 4 CTAs an SM; the paired node from K = 3584
    // on, fp16 and bf16).
    auto stages_of = [](const test::Problem& problem) {
        const KernelStep step = test::kernel_step(problem.plan(), 0);
        return defines(step, "NBITS_STAGES=3") ? 3 : defines(step, "NBITS_STAGES=2") ? 2 : 0;
    };
    for (const test::Problem& two : {fastest(node(4096, 4096), rows(1)), fastest(node(4096, 4096), rows(8)),
                                     fastest(node(14336, 4096), rows(1)), fastest(node(896, 1152), rows(1)),
                                     fastest(paired(8192, 28672), rows(1)), fastest(paired(8192, 28672), rows(2)),
                                     fastest(paired(3584, 18944), rows(1, DataType::BFloat16)),
                                     fastest(paired(3584, 18944), rows(8))}) {
        CHECK(chunks_of(two) == 2);
        CHECK(stages_of(two) == 2);
    }
    // NBITS_DECODE_STAGES deepens the ring; the paired node then keeps one chunk, as two chunks of both weight sets
    // in three stages leave an SM room for one CTA.
    test::Problem deeper = fastest(paired(8192, 28672), rows(1));
    deeper.context.overrides = PlanOverrides::parse({{kDecodeStagesEnv, "3"}});
    CHECK(chunks_of(deeper) == 1);
    CHECK(stages_of(deeper) == 3);
    CHECK(defines(test::kernel_step(deeper.plan(), 0), "NBITS_MIN_BLOCKS=2"));
    // Where the device's bandwidth is below 30 GB/s an SM (the H100 SXM: 3352 GB/s over 132 SMs; the H100 PCIe,
    // the A100) the paired node at M = 1 keeps one chunk in two stages, exactly as NBITS_DECODE_CHUNKS=1 plans it;
    // at M = 2 it keeps two, and so does a device that reports no bandwidth (as the H200, 4916 GB/s, and the H20).
    CHECK(Capabilities::h100().memory_bandwidth_gb_per_s == 3352);
    CHECK(Capabilities::h200().memory_bandwidth_gb_per_s == 4916);
    for (const Capabilities& device : {Capabilities::h100(), Capabilities::h100_pcie(), Capabilities::a100()}) {
        for (const DataType act : {DataType::Float16, DataType::BFloat16}) {
            const test::Problem slower = fastest(paired(8192, 28672), rows(1, act), device);
            test::Problem forced = slower;
            forced.context.overrides = PlanOverrides::parse({{kDecodeChunksEnv, "1"}});
            const KernelStep planned = test::kernel_step(slower.plan(), 0);
            const KernelStep as_forced = test::kernel_step(forced.plan(), 0);
            CHECK(chunks_of(slower) == 1);
            CHECK(stages_of(slower) == 2);
            CHECK(planned.defines == as_forced.defines);
            CHECK(planned.config.grid == as_forced.config.grid);
            CHECK(planned.config.dynamic_shared_bytes == as_forced.config.dynamic_shared_bytes);
        }
        CHECK(chunks_of(fastest(paired(8192, 28672), rows(2), device)) == 2);
    }
    for (const Capabilities& device : {Capabilities::h200(), Capabilities::h20()}) {
        CHECK(chunks_of(fastest(paired(3584, 18944), rows(1), device)) == 2);
    }
    Capabilities unreported = Capabilities::h100();
    unreported.memory_bandwidth_gb_per_s = 0;
    CHECK(chunks_of(fastest(paired(8192, 28672), rows(1), unreported)) == 2);
    // A single symmetric block-32 weight set at M = 1 whose K leaves 8 warps fewer than 4 k steps of one chunk
    // takes two also where one chunk would take two tiles (Phi-3.5-mini qkv) or three CTAs an SM (Qwen2.5-7B qkv),
    // each as NBITS_DECODE_CHUNKS=2 plans it; not from K = 4096 (Llama-3-8B qkv, below), at M = 2, with zero
    // points or block 128.
    for (const test::Problem& short_k : {fastest(node(3072, 9216), rows(1)), fastest(node(3584, 4608), rows(1)),
                                         fastest(node(3584, 4608), rows(1, DataType::BFloat16))}) {
        CHECK(chunks_of(short_k) == 2);
        test::Problem forced = short_k;
        forced.context.overrides = PlanOverrides::parse({{kDecodeChunksEnv, "2"}});
        const KernelStep planned = test::kernel_step(short_k.plan(), 0);
        const KernelStep as_forced = test::kernel_step(forced.plan(), 0);
        CHECK(planned.defines == as_forced.defines);
        CHECK(planned.config.grid == as_forced.config.grid);
        CHECK(planned.config.dynamic_shared_bytes == as_forced.config.dynamic_shared_bytes);
    }
    CHECK(defines(test::kernel_step(fastest(node(3072, 9216), rows(1)).plan(), 0), "NBITS_TILES=1"));
    CHECK(defines(test::kernel_step(fastest(node(3584, 4608), rows(1)).plan(), 0), "NBITS_MIN_BLOCKS=3"));
    CHECK(chunks_of(fastest(node(3072, 9216), rows(2))) == 1);
    CHECK(chunks_of(fastest(node(3072, 9216, 4, 128), rows(1))) == 1);
    test::Shapes short_k_zp = rows(1);
    short_k_zp.zero_points = true;
    CHECK(chunks_of(fastest(node(3584, 4608), short_k_zp)) == 1);
    // A single-row down projection of one tile keeps two chunks in a cluster (Qwen2.5-0.5B down, bf16, M = 1).
    CHECK(chunks_of(fastest(node(4864, 896), rows(1, DataType::BFloat16))) == 2);
    // Not where it would cost the second tile (lm_head, Llama-3-70B qkv and down), the third CTA an SM
    // (Llama-3-8B qkv), a cluster (Qwen2.5-0.5B down at M = 8), a short paired K (Phi-3.5 gate/up, K = 3072, in a
    // ring of two stages) or two batch tiles (M = 9).
    CHECK(chunks_of(fastest(node(4096, 128256), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(8192, 10240), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(28672, 8192), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(4096, 6144), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(4864, 896), rows(8))) == 1);
    CHECK(chunks_of(fastest(paired(3072, 8192), rows(1))) == 1);
    CHECK(stages_of(fastest(paired(3072, 8192), rows(1))) == 2);
    CHECK(chunks_of(fastest(node(4096, 4096), rows(9))) == 1);
    // int8: one symmetric weight set of one tile whose K leaves each warp 3 k steps of 128 codes or more takes two
    // (Llama-3-8B o and down, Qwen2.5-7B down, Phi-3.5-mini o, K = 3072: 24 steps over 8 warps), as
    // NBITS_DECODE_CHUNKS=2 plans it; not on a short K (Qwen2.5-0.5B qkv), with zero points, for the paired node,
    // over two tiles (Llama-3-70B down) or three CTAs an SM (Llama-3-8B qkv), nor at M = 9.
    for (const test::Problem& int8 : {fastest(node(4096, 4096, 8), rows(1)), fastest(node(14336, 4096, 8), rows(8)),
                                      fastest(node(18944, 3584, 8), rows(2, DataType::BFloat16)),
                                      fastest(node(3072, 3072, 8), rows(1))}) {
        CHECK(chunks_of(int8) == 2);
        test::Problem forced = int8;
        forced.context.overrides = PlanOverrides::parse({{kDecodeChunksEnv, "2"}});
        CHECK(test::kernel_step(int8.plan(), 0).defines == test::kernel_step(forced.plan(), 0).defines);
        CHECK(test::kernel_step(int8.plan(), 0).config.grid == test::kernel_step(forced.plan(), 0).config.grid);
    }
    CHECK(chunks_of(fastest(node(896, 1152, 8), rows(1))) == 1);
    test::Shapes int8_zp = rows(1);
    int8_zp.zero_points = true;
    CHECK(chunks_of(fastest(node(14336, 4096, 8), int8_zp)) == 1);
    CHECK(chunks_of(fastest(test::marked(node(4096, 14336, 8), kGateUpSwigluAttr), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(28672, 8192, 8), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(4096, 6144, 8), rows(1))) == 1);
    CHECK(chunks_of(fastest(node(4096, 4096, 8), rows(9))) == 1);
    // Nor for the paired node with zero points (two sets' scales and zero points of two chunks spill); the unpaired
    // node with zero points keeps two.
    test::Shapes zp = rows(1);
    zp.zero_points = true;
    CHECK(chunks_of(fastest(paired(8192, 28672), zp)) == 1);
    CHECK(chunks_of(fastest(node(14336, 4096), zp)) == 2);
    // Two chunks double each warp's ring: 8 warps x 2 stages x (2 chunks x 2 row halves x 512 bytes, the step's
    // 256 activations and their scales) plus the partial sums.
    CHECK(test::kernel_step(fastest(node(4096, 4096), rows(1)).plan(), 0).config.dynamic_shared_bytes ==
          8 * 2 * (2 * 2 * 512 + 256 * 2 + 2 * 2 * 128) + 2 * 4 * 8 * 32 * 4 + 16);
    // NBITS_DECODE_CHUNKS forces either (two chunks take one tile a CTA); other values are ignored.
    auto chunks = [](const char* value) {
        return PlanOverrides::parse({{kDecodeChunksEnv, value}});
    };
    test::Problem lm_head = fastest(node(4096, 128256), rows(1));
    lm_head.context.overrides = chunks("2");
    CHECK(chunks_of(lm_head) == 2);
    CHECK(defines(test::kernel_step(lm_head.plan(), 0), "NBITS_TILES=1"));
    test::Problem down = fastest(node(14336, 4096), rows(1));
    down.context.overrides = chunks("1");
    CHECK(chunks_of(down) == 1);
    test::Problem int8 = fastest(node(4096, 4096, 8), rows(4));
    int8.context.overrides = chunks("2");
    CHECK(chunks_of(int8) == 2);
    CHECK(chunks("2").decode_chunks == 2);
    CHECK_FALSE(chunks("0").decode_chunks.has_value());
    CHECK_FALSE(chunks("3").decode_chunks.has_value());
}

TEST_CASE("Fastest decode fuses the RMS norm and the paired gate/up node into one launch, no K limit")
{
    test::Shapes shapes = rows(4);
    shapes.gamma = DataType::Float32;
    const LaunchPlan norm = fastest(test::marked(node(1000, 512, 4, 64), kRmsNormPrologueAttr), shapes).plan();
    REQUIRE(entries(norm) == std::vector<std::string>{"nbits_decode_matmul"});
    CHECK(defines(test::kernel_step(norm, 0), "NBITS_RMSNORM=1"));
    CHECK(defines(test::kernel_step(norm, 0), "NBITS_GAMMA_F32=1"));
    const LaunchPlan paired = fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(1)).plan();
    CHECK(entries(paired) == std::vector<std::string>{"nbits_decode_gate_up"});
    CHECK(paired.variant == "nbits_decode_gate_up");
}

TEST_CASE("Fastest decode of fp32 activations runs on CUDA cores; accuracy level 4 keeps the original's path")
{
    const LaunchPlan f32 = fastest(node(4096, 4096), rows(1, DataType::Float32)).plan();
    REQUIRE(entries(f32) == std::vector<std::string>{"nbits_decode_matmul"});
    CHECK(defines(test::kernel_step(f32, 0), "NBITS_ACT=2"));
    CHECK(defines(test::kernel_step(f32, 0), "NBITS_COLS_PER_WARP=4"));
    CHECK(test::kernel_step(f32, 0).config.grid == Dim3{256, 1, 1});
    CHECK(fastest(node(4096, 4096, 4, 32, 4), rows(1, DataType::Float32)).plan().variant == "gemv_accuracy4_int8");
}

TEST_CASE("Fastest keeps the original's int4 down-projection GEMV only where the decode grid would leave SMs idle")
{
    // Qwen2.5-0.5B down (N = 896: 56 column groups on 132 SMs): the original's staged down-projection kernel.
    const LaunchPlan narrow = fastest(node(4864, 896), rows(1)).plan();
    CHECK(narrow.variant == "gemv_f16_down_projection");
    // The same node on a 46-SM part fills it: the decode kernel.
    CHECK(entries(fastest(node(4864, 896), rows(1), Capabilities::sm89_46()).plan()) ==
          std::vector<std::string>{"nbits_decode_matmul"});
    // Llama-3-70B down (512 groups): the decode kernel, int4 and int8 (the original's int8 is plain gemv_int8_f16).
    CHECK(test::problem(node(28672, 8192), rows(1)).plan().variant == "gemv_f16_down_projection");
    CHECK(entries(fastest(node(28672, 8192), rows(1)).plan()) == std::vector<std::string>{"nbits_decode_matmul"});
    CHECK(entries(fastest(node(28672, 8192, 8), rows(1)).plan()) == std::vector<std::string>{"nbits_decode_matmul"});
    CHECK(entries(test::problem(node(28672, 8192, 8), rows(1)).plan()) ==
          std::vector<std::string>{"matmul_nbits_gemv_int8_f16"});
    // From M = 2 every down projection takes the decode kernel.
    CHECK(entries(fastest(node(4864, 896), rows(2)).plan()) == std::vector<std::string>{"nbits_decode_matmul"});
}

TEST_CASE("Fastest decode on sm_90 launches as a programmatic dependent of the kernel before it (NBITS_DECODE_PDL)")
{
    const KernelStep lm_head = test::kernel_step(fastest(node(4096, 128256), rows(1)).plan(), 0);
    CHECK(lm_head.config.programmatic_dependent);
    CHECK(defines(lm_head, "NBITS_PROGRAMMATIC=1"));
    const KernelStep paired =
        test::kernel_step(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(16)).plan(), 0);
    CHECK(paired.config.programmatic_dependent);
    CHECK(fastest(node(4096, 128256), rows(1)).plan().describe().find("programmatic dependent launch") !=
          std::string::npos);
    // NBITS_DECODE_PDL=0 turns it off; other values are ignored.
    test::Problem off = fastest(node(4096, 128256), rows(1));
    auto decode_pdl = [](const char* value) {
        return PlanOverrides::parse({{kDecodeProgrammaticEnv, value}});
    };
    off.context.overrides = decode_pdl("0");
    CHECK_FALSE(test::kernel_step(off.plan(), 0).config.programmatic_dependent);
    CHECK_FALSE(defines(test::kernel_step(off.plan(), 0), "NBITS_PROGRAMMATIC=1"));
    // Only a programmatic launch prefetches its first k steps into L2 while it waits (the kernel refuses
    // NBITS_PREFETCH_FIRST without NBITS_PROGRAMMATIC).
    CHECK(defines(lm_head, "NBITS_PREFETCH_FIRST=1"));
    CHECK(defines(paired, "NBITS_PREFETCH_FIRST=1"));
    CHECK_FALSE(defines(test::kernel_step(off.plan(), 0), "NBITS_PREFETCH_FIRST=1"));
    CHECK(decode_pdl("1").decode_programmatic == 1);
    CHECK_FALSE(decode_pdl("2").decode_programmatic.has_value());
    CHECK_FALSE(decode_pdl("on").decode_programmatic.has_value());
    // NBITS_DECODE_PREFETCH=0 keeps the programmatic launch without the prefetch.
    test::Problem unprefetched = fastest(node(4096, 128256), rows(1));
    unprefetched.context.overrides = PlanOverrides::parse({{kDecodePrefetchEnv, "0"}});
    const KernelStep waiting = test::kernel_step(unprefetched.plan(), 0);
    CHECK(waiting.config.programmatic_dependent);
    CHECK(defines(waiting, "NBITS_PROGRAMMATIC=1"));
    CHECK_FALSE(defines(waiting, "NBITS_PREFETCH_FIRST=1"));
    // int8 too, its launches reserving shared memory so that no more CTAs share an SM than the plan counts on
    // (its registers would let a third in): 2 on lm_head, 3 on Llama-3-70B qkv. Launched plainly they need none.
    const std::size_t sm_bytes = std::size_t{Capabilities::h200().max_shared_memory_per_block_optin} + 1024;
    for (const auto& [k, n, blocks] : {std::tuple{4096, 128256, 2}, std::tuple{8192, 10240, 3}}) {
        CAPTURE(n);
        const KernelStep int8 = test::kernel_step(fastest(node(k, n, 8), rows(1)).plan(), 0);
        CHECK(int8.config.programmatic_dependent);
        CHECK(defines(int8, "NBITS_MIN_BLOCKS=" + std::to_string(blocks)));
        const std::size_t reserved = int8.config.dynamic_shared_bytes;
        CHECK(reserved % 16 == 0);
        CHECK(blocks * (reserved + 1024) <= sm_bytes);
        CHECK((blocks + 1) * (reserved + 1024) > sm_bytes);
        test::Problem plain = fastest(node(k, n, 8), rows(1));
        plain.context.overrides = decode_pdl("0");
        const KernelStep unreserved = test::kernel_step(plain.plan(), 0);
        CHECK_FALSE(unreserved.config.programmatic_dependent);
        CHECK(unreserved.config.dynamic_shared_bytes < reserved);
    }
    // int4 kernels keep the shared memory their stages need.
    test::Problem int4_plain = fastest(node(4096, 128256), rows(1));
    int4_plain.context.overrides = decode_pdl("0");
    CHECK(lm_head.config.dynamic_shared_bytes == test::kernel_step(int4_plain.plan(), 0).config.dynamic_shared_bytes);
    // Not before sm_90 (no griddepcontrol), not on CUDA cores, not under the original policy.
    CHECK_FALSE(test::kernel_step(fastest(node(4096, 128256), rows(1), Capabilities::a100()).plan(), 0)
                    .config.programmatic_dependent);
    CHECK_FALSE(test::kernel_step(fastest(node(4096, 4096), rows(1, DataType::Float32)).plan(), 0)
                    .config.programmatic_dependent);
    test::Problem original = fastest(node(4096, 128256), rows(1));
    original.context.policy = KernelPolicy::Original;
    CHECK_FALSE(test::kernel_step(original.plan(), 0).config.programmatic_dependent);
}

TEST_CASE("Fastest prefill GEMMs on sm_90 launch as programmatic dependents of the kernel before them, the stream-K "
          "grid's flag zeroing and the dequantise + cuBLASLt route plainly (NBITS_PREFILL_PDL)")
{
    // Each kernel step: its entry, whether it launches as a programmatic dependent and defines NBITS_PROGRAMMATIC=1.
    auto launches = [](const test::Problem& p) {
        std::vector<std::tuple<std::string, bool, bool>> found;
        for (const PlanStep& step : p.plan().steps) {
            if (const auto* kernel = std::get_if<KernelStep>(&step)) {
                found.emplace_back(kernel->entry, kernel->config.programmatic_dependent,
                                   defines(*kernel, "NBITS_PROGRAMMATIC=1"));
            }
        }
        return found;
    };
    using Launches = std::vector<std::tuple<std::string, bool, bool>>;
    auto prefill_pdl = [](test::Problem p, const char* value) {
        p.context.overrides = PlanOverrides::parse({{kPrefillProgrammaticEnv, value}});
        return p;
    };
    // The mma.sync GEMM at M = 16 (128-row tiles), the wgmma GEMM at M = 64 (split-K clusters), the paired node
    // on TMA-fed tiles, a stream-K grid.
    CHECK(launches(fastest(node(4096, 128256), rows(16))) == Launches{{"nbits_prefill_gemm", true, true}});
    CHECK(launches(fastest(node(4096, 14336), rows(64))) == Launches{{"nbits_prefill_gemm", true, true}});
    CHECK(launches(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(512))) ==
          Launches{{"nbits_prefill_gate_up_tma", true, true}});
    const test::Problem grid = fastest(node(3584, 18944), rows(512));
    CHECK(launches(grid) ==
          Launches{{"nbits_zero_words", false, false}, {"nbits_prefill_gemm_stream_k", true, true}});
    CHECK(grid.plan().describe().find("programmatic dependent launch") != std::string::npos);
    // NBITS_PREFILL_PDL=0 launches them plainly, =1 as planned; other values are ignored.
    CHECK(launches(prefill_pdl(grid, "0")) ==
          Launches{{"nbits_zero_words", false, false}, {"nbits_prefill_gemm_stream_k", false, false}});
    CHECK(launches(prefill_pdl(grid, "1")) == launches(grid));
    CHECK(launches(prefill_pdl(grid, "yes")) == launches(grid));
    // The decode override leaves them alone.
    test::Problem decode_off = grid;
    decode_off.context.overrides = PlanOverrides::parse({{kDecodeProgrammaticEnv, "0"}});
    CHECK(launches(decode_off) == launches(grid));
    // Not before sm_90 (no griddepcontrol), not the dequantise + cuBLASLt route's kernels, not under the original
    // policy.
    for (const auto& [entry, programmatic, defined] : launches(fastest(node(4096, 14336), rows(64), Capabilities::a100()))) {
        CAPTURE(entry);
        CHECK_FALSE(programmatic);
        CHECK_FALSE(defined);
    }
    for (const auto& [entry, programmatic, defined] : launches(fastest(node(4096, 1024), rows(2048)))) {
        CAPTURE(entry);
        CHECK(entry.rfind("nbits_prefill_gemm", 0) != 0);
        CHECK_FALSE(programmatic);
    }
    test::Problem original = fastest(node(4096, 14336), rows(64));
    original.context.policy = KernelPolicy::Original;
    for (const auto& [entry, programmatic, defined] : launches(original)) {
        CHECK_FALSE(programmatic);
    }
}

TEST_CASE("Fastest decode stages the scales and zero points at M = 1 where the kernel can and it measured faster, "
          "with the stage bytes they need, unless NBITS_DECODE_STAGE_META says")
{
    auto staged = [](test::Problem p) { return with_override(std::move(p), &PlanOverrides::decode_stage_meta, 1); };
    auto unstaged = [](test::Problem p) {
        return with_override(std::move(p), &PlanOverrides::decode_stage_meta, 0);
    };
    test::Shapes zp = rows(1);
    zp.zero_points = true;
    const test::Problem lm_head = fastest(node(4096, 128256), zp);
    const KernelStep as_planned = test::kernel_step(lm_head.plan(), 0);
    const KernelStep plain = test::kernel_step(unstaged(lm_head).plan(), 0);
    CHECK(defines(as_planned, "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(plain, "NBITS_STAGE_META=1"));
    // 8 warps, 2 stages, 2 tiles, 2 row halves: 4 slots of 8 rows of 16 bytes a stage.
    CHECK(as_planned.config.dynamic_shared_bytes == plain.config.dynamic_shared_bytes + 8 * 2 * (2 * 2 * 8 * 16));
    // The paired node with zero points, or with two chunks a lane (from K = 3584); not symmetric with one chunk,
    // not at M > 1, where it measured slower; each of them when asked.
    auto paired = [](std::size_t k, const test::Shapes& shapes) {
        return fastest(test::marked(node(k, 14336), kGateUpSwigluAttr), shapes);
    };
    CHECK(defines(test::kernel_step(paired(4096, rows(1)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(paired(4096, rows(1)).plan(), 0), "NBITS_CHUNKS=2"));
    CHECK_FALSE(defines(test::kernel_step(unstaged(paired(4096, rows(1))).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(paired(4096, zp).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(paired(3072, zp).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(unstaged(paired(4096, zp)).plan(), 0), "NBITS_STAGE_META=1"));
    test::Shapes zp2 = rows(2);
    zp2.zero_points = true;
    // At M = 2..8 the paired node of one chunk up to K = 4096 and two tiles of one weight set where two column warps
    // do not pay, with the rows of A (see the activations' test); not the paired node of K = 8192, not one tile of
    // one chunk, not where two column warps pay (Llama-3-8B up, lm_head).
    CHECK(defines(test::kernel_step(paired(4096, zp2).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(paired(4096, zp2).plan(), 0), "NBITS_STAGE_ACTS=1"));
    CHECK_FALSE(defines(test::kernel_step(paired(8192, zp2).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(paired(3072, rows(1)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(staged(paired(3072, rows(1))).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(fastest(node(8192, 10240), rows(8)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(fastest(node(4096, 14336), rows(8)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(fastest(node(4096, 6144), rows(8)).plan(), 0), "NBITS_STAGE_META=1"));
    // At M = 2..8 a down projection (K > N) with zero points; not symmetric, not one tile of K <= N, not M = 9..16.
    test::Shapes zp8 = rows(8);
    zp8.zero_points = true;
    CHECK(defines(test::kernel_step(fastest(node(14336, 4096), zp8).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(fastest(node(14336, 4096), rows(8)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(fastest(node(4096, 6144), zp8).plan(), 0), "NBITS_STAGE_META=1"));
    test::Shapes zp16 = rows(16);
    zp16.zero_points = true;
    CHECK_FALSE(defines(test::kernel_step(fastest(node(14336, 4096), zp16).plan(), 0), "NBITS_STAGE_META=1"));
    const test::Problem int8_m8 = fastest(node(4096, 14336, 8, 16), rows(8));
    CHECK_FALSE(defines(test::kernel_step(int8_m8.plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(staged(int8_m8).plan(), 0), "NBITS_STAGE_META=1"));
    // int8 block 32 (two scales a chunk index) at M = 1 where two CTAs an SM run; not where three do (Llama-3-70B
    // qkv), not at M = 8; each of them when asked.
    const test::Problem int8_lm_head = fastest(node(4096, 128256, 8, 32), rows(1));
    const KernelStep int8_staged = test::kernel_step(int8_lm_head.plan(), 0);
    CHECK(defines(int8_staged, "NBITS_STAGE_META=1"));
    CHECK(defines(int8_staged, "NBITS_MIN_BLOCKS=2"));
    // The stage bytes, counted on plain launches (a programmatic int8 launch reserves more, see NBITS_DECODE_PDL).
    auto plain_launch = [](test::Problem p) {
        return with_override(std::move(p), &PlanOverrides::decode_programmatic, 0);
    };
    CHECK(test::kernel_step(plain_launch(int8_lm_head).plan(), 0).config.dynamic_shared_bytes ==
          test::kernel_step(plain_launch(unstaged(int8_lm_head)).plan(), 0).config.dynamic_shared_bytes +
              8 * 2 * (2 * 2 * 8 * 16));
    CHECK(defines(test::kernel_step(fastest(node(18944, 3584, 8, 32), zp).plan(), 0), "NBITS_STAGE_META=1"));
    const test::Problem int8_qkv = fastest(node(8192, 10240, 8, 32), rows(1));
    CHECK_FALSE(defines(test::kernel_step(int8_qkv.plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(int8_qkv.plan(), 0), "NBITS_MIN_BLOCKS=3"));
    CHECK(defines(test::kernel_step(staged(int8_qkv).plan(), 0), "NBITS_STAGE_META=1"));
    const test::Problem int8_down_m8 = fastest(node(18944, 3584, 8, 32), zp8);
    CHECK_FALSE(defines(test::kernel_step(int8_down_m8.plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(staged(int8_down_m8).plan(), 0), "NBITS_STAGE_META=1"));
    // One scale a chunk index (block 128) and two of int4 (block 64) only when asked: block 128 measured slower.
    const test::Problem block128 = fastest(node(4096, 128256, 4, 128), zp);
    CHECK_FALSE(defines(test::kernel_step(block128.plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(staged(block128).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(fastest(node(14336, 4096, 4, 64), rows(1)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(staged(fastest(node(14336, 4096, 4, 64), rows(1))).plan(), 0),
                  "NBITS_STAGE_META=1"));
    // Not where the kernel cannot: fp32 scales, K blocks not a multiple of 4 (four scales a chunk index) or of 2,
    // zero-point rows of part words, int4 block 16.
    CHECK_FALSE(defines(test::kernel_step(staged(fastest(node(4224, 14336, 4, 128), rows(1))).plan(), 0),
                        "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(staged(fastest(node(4096, 14336, 4, 16), rows(1))).plan(), 0),
                        "NBITS_STAGE_META=1"));
    test::Shapes f32_scales = rows(1);
    f32_scales.scales = DataType::Float32;
    CHECK_FALSE(defines(test::kernel_step(staged(fastest(node(4096, 14336), f32_scales)).plan(), 0),
                        "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(staged(fastest(node(4000, 14336), rows(1))).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK_FALSE(defines(test::kernel_step(staged(fastest(node(4224, 14336), zp)).plan(), 0), "NBITS_STAGE_META=1"));
    CHECK(defines(test::kernel_step(staged(fastest(node(4224, 14336), rows(1))).plan(), 0), "NBITS_STAGE_META=1"));
}

namespace {

// A node of the ptxas-report tests, named for the failure message.
struct NamedProblem {
    std::string name;
    test::Problem problem;
};

// ptxas's report on the kernel of `step` compiled for sm_90: no stack frame, no spills.
void check_no_spills(const KernelStep& step)
{
    jit::CompileRequest request;
    request.source = &kernels::source_of_entry(step.entry);
    request.entries = {step.entry};
    request.defines = step.defines;
    request.target = jit::Target::cubin(9, 0);
    request.assembler_report = true;
    const jit::CompiledImage image = jit::compile(request);
    INFO(image.log);
    CHECK(image.log.find("Used ") != std::string::npos);  // the report is there
    CHECK(image.log.find(" 0 bytes stack frame") != std::string::npos);
    CHECK(image.log.find(" 0 bytes spill stores") != std::string::npos);
}

}  // namespace

TEST_CASE("the decode kernels with staged scales keep their pointers in registers: no stack frame, no spills "
          "(ptxas report, sm_90)")
{
    // The planned staged kernels and a forced one, two of them with a weight set that depends on the lane (two
    // sets of one tile and one chunk: each lane of a quad copies one set's slot), which once picked the set's
    // pointers through a reference that ptxas kept in local memory.
    auto staged = [](test::Problem p) { return with_override(std::move(p), &PlanOverrides::decode_stage_meta, 1); };
    auto paired = [](std::size_t k, std::size_t n, const test::Shapes& shapes) {
        return fastest(test::marked(node(k, n), kGateUpSwigluAttr), shapes);
    };
    test::Shapes zp1 = rows(1);
    zp1.zero_points = true;
    test::Shapes zp8 = rows(8);
    zp8.zero_points = true;
    const std::vector<NamedProblem> cases = {
        {"lm_head, zero points, M = 1", fastest(node(4096, 128256), zp1)},
        {"down projection, zero points, M = 8", fastest(node(14336, 4096), zp8)},
        {"paired gate/up, two chunks, M = 1", paired(4096, 14336, rows(1))},
        {"paired gate/up, zero points, M = 1", paired(8192, 28672, zp1)},
        {"paired gate/up, K = 3072, one chunk, forced", staged(paired(3072, 8192, rows(1)))},
        {"two tiles with the rows of A, M = 8", fastest(node(8192, 10240), rows(8))},
        {"paired gate/up, K = 3072, with the rows of A, M = 8", paired(3072, 8192, rows(8))},
        {"int8 block 32 (two scales a chunk index), zero points, M = 1", fastest(node(18944, 3584, 8, 32), zp1)},
        {"block 128 (one scale), zero points, M = 1, forced", staged(fastest(node(4096, 128256, 4, 128), zp1))},
        {"paired gate/up, int8 block 64 (one scale), zero points, M = 1, forced",
         staged(fastest(test::marked(node(4096, 14336, 8, 64), kGateUpSwigluAttr), zp1))},
    };
    for (const NamedProblem& k : cases) {
        CAPTURE(k.name);
        const KernelStep step = test::kernel_step(k.problem.plan(), 0);
        REQUIRE(defines(step, "NBITS_STAGE_META=1"));
        check_no_spills(step);
    }
}

TEST_CASE("Fastest decode's ring depth follows NBITS_DECODE_STAGES (2..4)")
{
    auto stages = [](const char* value) {
        return PlanOverrides::parse({{kDecodeStagesEnv, value}});
    };
    test::Problem deep = fastest(node(14336, 4096), rows(1));
    deep.context.overrides = stages("4");
    const KernelStep down = test::kernel_step(deep.plan(), 0);
    CHECK(defines(down, "NBITS_STAGES=4"));
    // 8 warps x 4 stages x 1 tile x 2 chunks x 2 row halves x (512 bytes and 128 of scales) and the step's 256
    // activations, plus the partial sums.
    CHECK(down.config.dynamic_shared_bytes ==
          8 * 4 * (2 * 2 * (512 + 128) + 256 * 2) + 2 * 4 * 8 * 32 * 4 + 16);
    CHECK_FALSE(stages("5").decode_stages.has_value());
    CHECK_FALSE(stages("1").decode_stages.has_value());
    CHECK(stages("3").decode_stages == 3);
}

TEST_CASE("Fastest decode's column tiles per CTA follow NBITS_DECODE_TILES (1|2; the paired node keeps 1)")
{
    auto tiles = [](const char* value) {
        return PlanOverrides::parse({{kDecodeTilesEnv, value}});
    };
    test::Problem one = fastest(node(4096, 128256), rows(1));
    one.context.overrides = tiles("1");
    CHECK(defines(test::kernel_step(one.plan(), 0), "NBITS_TILES=1"));
    test::Problem two = fastest(node(14336, 4096), rows(1));
    two.context.overrides = tiles("2");
    CHECK(defines(test::kernel_step(two.plan(), 0), "NBITS_TILES=2"));
    test::Problem paired = fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(1));
    paired.context.overrides = tiles("2");
    CHECK(defines(test::kernel_step(paired.plan(), 0), "NBITS_TILES=1"));
    CHECK_FALSE(tiles("3").decode_tiles.has_value());
}

TEST_CASE("Fastest decode puts two warps across the columns where A is loaded as computed (NBITS_DECODE_COL_WARPS)")
{
    auto col_warps = [](const char* value) {
        return PlanOverrides::parse({{kDecodeColWarpsEnv, value}});
    };
    auto step_of = [](const test::Problem& problem) { return test::kernel_step(problem.plan(), 0); };
    // A loaded as computed: one weight set of two tiles where two column warps do not pay stages it at M = 2..8 (see
    // the activations' test).
    auto unstaged = [](test::Problem p) {
        return with_override(std::move(p), &PlanOverrides::decode_stage_acts, 0);
    };
    // Llama-3-8B up at M = 8: 448 two-tile groups take 2 rounds of 264 CTAs, 224 groups of twice the columns
    // one round of twice the work, so the wider groups win the tie.
    const KernelStep up = step_of(fastest(node(4096, 14336), rows(8)));
    CHECK(defines(up, "NBITS_COL_WARPS=2"));
    CHECK(defines(up, "NBITS_TILES=2"));
    CHECK(up.config.grid == Dim3{224, 1, 1});
    CHECK(up.config.block == Dim3{256, 1, 1});
    // The shared memory does not change: each warp keeps its ring and its partial sums (8 warps x 2 stages x 2
    // tiles x 2 row halves x 512 bytes; 2 x 2 tiles x 4 values x 8 warps x 32 lanes x 4 bytes).
    CHECK(up.config.dynamic_shared_bytes == 8 * 2 * 2 * 2 * 512 + 2 * 2 * 4 * 8 * 32 * 4 + 16);
    CHECK(defines(step_of(fastest(node(4096, 128256), rows(8))), "NBITS_COL_WARPS=2"));
    // The paired node at M = 8 and at M = 16 (Llama-3-8B gate/up: 896 groups in 4 rounds, 448 in 2).
    CHECK(defines(step_of(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(8))), "NBITS_COL_WARPS=2"));
    CHECK(defines(step_of(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(16))), "NBITS_COL_WARPS=2"));
    // Not for one weight set of two batch tiles (lm_head at M = 16 measured slower, M = 9 here; Llama-3-8B up alike), not where the
    // wider groups would cost rounds (Llama-3-70B down at M = 8: 256 groups in one round against 128 groups of
    // twice the work; the paired Qwen2.5-7B gate/up: 5 rounds against 3 of twice the work), not with A staged
    // with the weights (M = 1, Llama-3-8B down at M = 8).
    CHECK(defines(step_of(fastest(node(4096, 128256), rows(9))), "NBITS_COL_WARPS=1"));
    CHECK(defines(step_of(fastest(node(4096, 14336), rows(16))), "NBITS_COL_WARPS=1"));
    CHECK(defines(step_of(unstaged(fastest(node(28672, 8192), rows(8)))), "NBITS_COL_WARPS=1"));
    CHECK(defines(step_of(fastest(test::marked(node(3584, 18944), kGateUpSwigluAttr), rows(16))), "NBITS_COL_WARPS=1"));
    CHECK(defines(step_of(fastest(node(14336, 4096), rows(8))), "NBITS_COL_WARPS=1"));
    CHECK(defines(step_of(fastest(node(4096, 128256), rows(1))), "NBITS_COL_WARPS=1"));
    // Nor where the wider groups would need 1.5x the CTAs an SM: two column warps keep two CTAs, whose 296 groups
    // of Qwen2.5-7B up (3584 x 18944) at M = 8 then take 2 rounds against 3 of 592 half-width groups, so one
    // column warp on 264 CTAs (measured faster on the H200 than two on 296 CTAs, three an SM).
    const KernelStep qwen_up = step_of(fastest(node(3584, 18944), rows(8)));
    CHECK(defines(qwen_up, "NBITS_COL_WARPS=1"));
    CHECK(defines(qwen_up, "NBITS_MIN_BLOCKS=2"));
    CHECK(qwen_up.config.grid == Dim3{264, 1, 1});
    test::Problem qwen_two = fastest(node(3584, 18944), rows(8));
    qwen_two.context.overrides = col_warps("2");
    CHECK(defines(step_of(qwen_two), "NBITS_MIN_BLOCKS=2"));
    CHECK(step_of(qwen_two).config.grid == Dim3{264, 1, 1});
    // Forced: 4 warps across lm_head's columns at M = 1 (128-column groups), capped by the CTA's warps (K = 256:
    // two k steps, two warps).
    test::Problem forced = fastest(node(4096, 128256), rows(1));
    forced.context.overrides = col_warps("4");
    const KernelStep four = step_of(forced);
    CHECK(defines(four, "NBITS_COL_WARPS=4"));
    CHECK(four.config.grid == Dim3{264, 1, 1});
    test::Problem short_k = fastest(node(256, 4096), rows(4));
    short_k.context.overrides = col_warps("4");
    CHECK(defines(step_of(short_k), "NBITS_WARPS=2"));
    CHECK(defines(step_of(short_k), "NBITS_COL_WARPS=2"));
    test::Problem off = fastest(node(4096, 14336), rows(8));
    off.context.overrides = col_warps("1");
    CHECK(defines(step_of(off), "NBITS_COL_WARPS=1"));
    CHECK(step_of(off).config.grid == Dim3{264, 1, 1});
    CHECK(col_warps("4").decode_col_warps == 4);
    CHECK_FALSE(col_warps("3").decode_col_warps.has_value());
    CHECK_FALSE(col_warps("8").decode_col_warps.has_value());
}

TEST_CASE("Fastest decode splits each column group's K over a thread block cluster on sm_90 where the groups leave CTA slots idle (NBITS_DECODE_CLUSTER_K)")
{
    auto cluster_k = [](const char* value) {
        return PlanOverrides::parse({{kDecodeClusterKEnv, value}});
    };
    auto step_of = [](const test::Problem& problem) { return test::kernel_step(problem.plan(), 0); };
    // Where the groups fill the CTA slots, none (lm_head, Llama-3-8B down, Phi-3.5 o's 192 groups on 264 slots).
    CHECK(defines(step_of(fastest(node(4096, 128256), rows(1))), "NBITS_CLUSTER_K=1"));
    CHECK(defines(step_of(fastest(node(14336, 4096), rows(8))), "NBITS_CLUSTER_K=1"));
    CHECK(defines(step_of(fastest(node(3072, 3072), rows(1))), "NBITS_CLUSTER_K=1"));
    // Where they leave slots idle, the largest of 4 and 2 that covers them in one round with a k step a warp:
    // Qwen2.5-0.5B down (56 groups) at M = 8 and 16 in clusters of 4, at M = 1 (bf16; 19 steps of 256 codes) of 2;
    // its qkv (K = 896, 7 steps over 4 warps) none.
    const KernelStep qwen_down = step_of(fastest(node(4864, 896), rows(8)));
    CHECK(defines(qwen_down, "NBITS_CLUSTER_K=4"));
    CHECK(qwen_down.config.grid == Dim3{4 * 56, 1, 1});
    CHECK(defines(step_of(fastest(node(4864, 896), rows(16))), "NBITS_CLUSTER_K=4"));
    CHECK(defines(step_of(fastest(node(4864, 896), rows(1, DataType::BFloat16))), "NBITS_CLUSTER_K=2"));
    CHECK(defines(step_of(fastest(node(896, 1152), rows(8))), "NBITS_CLUSTER_K=1"));
    CHECK(defines(step_of(fastest(node(4864, 896), rows(8), Capabilities::a100())), "NBITS_CLUSTER_K=1"));
    // The rule is the H200's: other cluster GPUs (sm_120) split only when asked.
    CHECK(defines(step_of(fastest(node(4864, 896), rows(8), Capabilities::rtx5090())), "NBITS_CLUSTER_K=1"));
    test::Problem asked = fastest(node(4864, 896), rows(8), Capabilities::rtx5090());
    asked.context.overrides = cluster_k("4");
    CHECK(defines(step_of(asked), "NBITS_CLUSTER_K=4"));
    // Forced: lm_head's 4008 groups over 132 clusters of 2 (the 264 CTAs of two an SM); 4 at M = 9.
    test::Problem lm_head = fastest(node(4096, 128256), rows(1));
    lm_head.context.overrides = cluster_k("2");
    const KernelStep two = step_of(lm_head);
    CHECK(defines(two, "NBITS_CLUSTER_K=2"));
    CHECK(two.config.grid == Dim3{264, 1, 1});
    CHECK(two.config.dynamic_shared_bytes == step_of(fastest(node(4096, 128256), rows(1))).config.dynamic_shared_bytes);
    test::Problem m9 = fastest(node(4096, 128256), rows(9));
    m9.context.overrides = cluster_k("4");
    CHECK(defines(step_of(m9), "NBITS_CLUSTER_K=4"));
    CHECK(step_of(m9).config.grid.x % 4 == 0);
    // Fewer groups than clusters: one cluster a group (Llama-3-8B down at M = 8, 256 groups of 16 columns).
    test::Problem down = fastest(node(14336, 4096), rows(8));
    down.context.overrides = cluster_k("4");
    CHECK(step_of(down).config.grid == Dim3{4 * 66, 1, 1});
    // Capped so that every warp of the cluster keeps a k step: K = 4096 in two chunks a lane takes 16 steps of
    // 256 codes over 8 warps (2 CTAs); K = 1024 at M = 4, 8 steps over 8 warps (1 CTA).
    test::Problem capped = fastest(node(4096, 2048), rows(1, DataType::BFloat16));
    capped.context.overrides = cluster_k("4");
    capped.context.overrides.decode_chunks = 2;
    CHECK(defines(step_of(capped), "NBITS_CLUSTER_K=2"));
    capped.context.overrides.decode_chunks = 1;
    CHECK(defines(step_of(capped), "NBITS_CLUSTER_K=4"));
    test::Problem short_k = fastest(node(1024, 4096), rows(4));
    short_k.context.overrides = cluster_k("2");
    CHECK(defines(step_of(short_k), "NBITS_CLUSTER_K=1"));
    // No clusters before compute capability 9.0.
    test::Problem a100 = fastest(node(4096, 128256), rows(1), Capabilities::a100());
    a100.context.overrides = cluster_k("2");
    CHECK(defines(step_of(a100), "NBITS_CLUSTER_K=1"));
    CHECK(cluster_k("4").decode_cluster_k == 4);
    CHECK_FALSE(cluster_k("3").decode_cluster_k.has_value());
    CHECK_FALSE(cluster_k("8").decode_cluster_k.has_value());
}

TEST_CASE("Fastest decode at M = 9..16 widens the column groups of long-K symmetric int4 nodes into clusters of 2 on "
          "sm_90, unless an override sets the geometry")
{
    auto step_of = [](const test::Problem& problem) { return test::kernel_step(problem.plan(), 0); };
    using Geometry = std::tuple<std::optional<long long>, std::optional<long long>, std::optional<long long>>;
    // Tiles, column warps and cluster size of the decode step.
    auto geometry = [&](const test::Problem& problem) {
        const KernelStep step = step_of(problem);
        return Geometry{define_value(step, "NBITS_TILES"), define_value(step, "NBITS_COL_WARPS"),
                        define_value(step, "NBITS_CLUSTER_K")};
    };
    for (const std::size_t m : {9, 12, 16}) {
        CAPTURE(m);
        // Qwen2.5-7B down: 112 groups of two tiles in clusters of 2 (224 of 264 slots, 9 k steps a warp);
        // Llama-3-8B down: 128 such groups (256 slots, 7 steps).
        const test::Problem qwen_down = fastest(node(18944, 3584), rows(m));
        CHECK(geometry(qwen_down) == Geometry{2, 1, 2});
        CHECK(step_of(qwen_down).config.grid == Dim3{224, 1, 1});
        CHECK(geometry(fastest(node(14336, 4096), rows(m))) == Geometry{2, 1, 2});
        // Llama-3-70B down and o: 128 groups of 64 columns (two column warps of two tiles; 28 and 8 steps).
        const test::Problem down_70b = fastest(node(28672, 8192), rows(m));
        CHECK(geometry(down_70b) == Geometry{2, 2, 2});
        CHECK(step_of(down_70b).config.grid == Dim3{256, 1, 1});
        CHECK(geometry(fastest(node(8192, 8192), rows(m))) == Geometry{2, 2, 2});
        // bf16 alike; not with zero points (measured slower).
        CHECK(geometry(fastest(node(14336, 4096), rows(m, DataType::BFloat16))) == Geometry{2, 1, 2});
        test::Shapes zp = rows(m);
        zp.zero_points = true;
        CHECK(std::get<2>(geometry(fastest(node(14336, 4096), zp))) == 1);
        CHECK(std::get<2>(geometry(fastest(node(28672, 8192), zp))) == 1);
        // Not where a warp would keep fewer than 7 k steps (Phi-3.5-mini down: 4; Llama-3-8B o: 2), not where the
        // groups already fill the slots or the clusters would not cover them in one round (Llama-3-70B qkv, 8B up),
        // not where clusters of 4 would (Qwen2.5-0.5B down), not int8, not the paired node.
        CHECK(geometry(fastest(node(8192, 3072), rows(m))) == Geometry{1, 1, 1});
        CHECK(geometry(fastest(node(4096, 4096), rows(m))) == Geometry{1, 1, 1});
        CHECK(geometry(fastest(node(8192, 10240), rows(m))) == Geometry{1, 1, 1});
        CHECK(geometry(fastest(node(4096, 14336), rows(m))) == Geometry{2, 1, 1});
        CHECK(geometry(fastest(node(4864, 896), rows(m))) == Geometry{1, 1, 4});
        CHECK(std::get<2>(geometry(fastest(node(14336, 4096, 8), rows(m)))) == 1);
        CHECK(std::get<2>(geometry(fastest(test::marked(node(14336, 4096), kGateUpSwigluAttr), rows(m)))) == 1);
        // Not before sm_90.
        CHECK(std::get<2>(geometry(fastest(node(14336, 4096), rows(m), Capabilities::a100()))) == 1);
        // A tiles, column warps or cluster override sets the geometry instead.
        CHECK(geometry(with_override(fastest(node(14336, 4096), rows(m)), &PlanOverrides::decode_tiles, 1)) ==
              Geometry{1, 1, 1});
        CHECK(geometry(with_override(fastest(node(28672, 8192), rows(m)), &PlanOverrides::decode_col_warps, 1)) ==
              Geometry{2, 1, 1});
        CHECK(geometry(with_override(fastest(node(18944, 3584), rows(m)), &PlanOverrides::decode_cluster_k, 1)) ==
              Geometry{1, 1, 1});
    }
    // M <= 8 keeps its rules (Llama-3-8B down at M = 8: one tile, no cluster, the rows of A staged).
    CHECK(geometry(fastest(node(14336, 4096), rows(8))) == Geometry{1, 1, 1});
}

TEST_CASE("Fastest decode stages the activations with the weights up to M = 8 unless NBITS_DECODE_STAGE_ACTS=0, up to M = 16 when it is 1")
{
    auto stage_acts = [](const char* value) {
        return PlanOverrides::parse({{kDecodeStageActsEnv, value}});
    };
    auto staged = [](const test::Problem& problem) {
        return defines(test::kernel_step(problem.plan(), 0), "NBITS_STAGE_ACTS=1");
    };
    CHECK(staged(fastest(node(4096, 128256), rows(1))));
    CHECK(staged(fastest(node(4096, 128256), rows(1, DataType::BFloat16))));
    CHECK(staged(fastest(node(8192, 14336, 8), rows(1))));
    CHECK(staged(fastest(test::marked(node(8192, 28672), kGateUpSwigluAttr), rows(1))));
    // M = 2..8 where one weight set of one column tile meets K >= N (Llama-3-8B down and o), and with the scales
    // for int4 two tiles of one chunk where two column warps do not pay (Llama-3-70B qkv and down) and the paired
    // node of one chunk up to K = 4096; not where two column warps pay (lm_head), the paired node of two chunks or
    // K = 8192, int8, or N > K of one tile (Llama-3-8B qkv), unless forced.
    CHECK(staged(fastest(node(14336, 4096), rows(2))));
    CHECK(staged(fastest(node(4096, 4096), rows(8))));
    CHECK(staged(fastest(node(8192, 10240), rows(2))));
    CHECK_FALSE(staged(fastest(node(4096, 128256), rows(2))));
    CHECK(staged(fastest(node(28672, 8192), rows(8))));
    CHECK(staged(fastest(test::marked(node(3072, 8192), kGateUpSwigluAttr), rows(8))));
    CHECK_FALSE(staged(fastest(test::marked(node(4096, 14336), kGateUpSwigluAttr), rows(8))));
    CHECK_FALSE(staged(fastest(test::marked(node(8192, 14336), kGateUpSwigluAttr), rows(2))));
    CHECK_FALSE(staged(fastest(node(4096, 14336, 8, 16), rows(8))));
    CHECK_FALSE(staged(fastest(node(4096, 6144), rows(8))));
    // Forced: the 8 rows of the batch tile, each 128 codes of a step plus 64 bytes of padding, in each of the 2
    // stages of the 8 warps, beside 2 tiles x 2 row halves x 512 bytes of weights; then the partial sums of 2 tiles.
    test::Problem forced = fastest(node(4096, 128256), rows(8));
    forced.context.overrides = stage_acts("1");
    const KernelStep m8 = test::kernel_step(forced.plan(), 0);
    CHECK(defines(m8, "NBITS_STAGE_ACTS=1"));
    CHECK(defines(m8, "NBITS_TILES=2"));
    CHECK(m8.config.dynamic_shared_bytes == 8 * 2 * (2 * 2 * 512 + 8 * (128 * 2 + 64)) + 2 * 8 * 8 * 32 * 4 + 16);
    // Two batch tiles (M > 8) only when forced: the 16 rows in each stage, beside one tile's weights, two CTAs an
    // SM still fit.
    CHECK_FALSE(staged(fastest(node(4096, 4096), rows(9))));
    CHECK_FALSE(staged(fastest(node(4096, 128256), rows(16))));
    test::Problem forced_m9 = fastest(node(4096, 4096), rows(9));
    forced_m9.context.overrides = stage_acts("1");
    const KernelStep m9 = test::kernel_step(forced_m9.plan(), 0);
    CHECK(defines(m9, "NBITS_STAGE_ACTS=1"));
    CHECK(defines(m9, "NBITS_M_TILES=2"));
    CHECK(defines(m9, "NBITS_TILES=1"));
    CHECK(defines(m9, "NBITS_MIN_BLOCKS=2"));
    CHECK(m9.config.dynamic_shared_bytes == 8 * 2 * (2 * 512 + 16 * (128 * 2 + 64)) + 2 * 2 * 4 * 8 * 32 * 4 + 16);
    // The RMS-norm prologue (its squares come from the loaded rows) and a K of partial 16-byte pieces load the
    // activations when they compute, forced or not.
    test::Shapes normalized = rows(1);
    normalized.gamma = DataType::Float16;
    CHECK_FALSE(staged(fastest(test::marked(node(4096, 6144), kRmsNormPrologueAttr), normalized)));
    CHECK_FALSE(staged(fastest(node(4100, 6144), rows(1))));
    test::Problem off = fastest(node(28672, 8192), rows(1));
    off.context.overrides = stage_acts("0");
    const KernelStep plain = test::kernel_step(off.plan(), 0);
    CHECK(defines(plain, "NBITS_STAGE_ACTS=0"));
    // Two tiles, each with its scales staged.
    CHECK(plain.config.dynamic_shared_bytes == 8 * 2 * 2 * 2 * (512 + 128) + 2 * 2 * 4 * 8 * 32 * 4 + 16);
    CHECK(stage_acts("1").decode_stage_acts == 1);
    CHECK_FALSE(stage_acts("2").decode_stage_acts.has_value());
}

TEST_CASE("Fastest decode multiplies offset codes where NBITS_DECODE_OFFSET_CODES=1 asks and the kernel can (int4, "
          "blocks of 32 codes and more, tensor cores): no stack frame, no spills (ptxas report, sm_90)")
{
    auto offset = [](test::Problem p, std::optional<int> value = 1) {
        return with_override(std::move(p), &PlanOverrides::decode_offset_codes, value);
    };
    auto offset_codes = [](const test::Problem& problem) {
        return defines(test::kernel_step(problem.plan(), 0), "NBITS_OFFSET_CODES=1");
    };
    auto paired = [](std::size_t k, std::size_t n, const test::Shapes& shapes, int block = 32) {
        return fastest(test::marked(node(k, n, 4, block), kGateUpSwigluAttr), shapes);
    };
    test::Shapes zp1 = rows(1, DataType::BFloat16);
    zp1.zero_points = true;
    test::Shapes zp16 = rows(16);
    zp16.zero_points = true;
    test::Shapes zp8 = rows(8, DataType::BFloat16);
    zp8.zero_points = true;
    // Large register sets: zero points (each block's start from two sums), two batch tiles (an offset for each),
    // the staged scales of one chunk index's four blocks, two weight sets.
    const std::vector<NamedProblem> on = {
        {"lm_head, bf16, M = 1", offset(fastest(node(4096, 128256), rows(1, DataType::BFloat16)))},
        {"lm_head, fp16, M = 1", offset(fastest(node(4096, 128256), rows(1)))},
        {"down projection, bf16, zero points, M = 1", offset(fastest(node(18944, 3584), zp1))},
        {"down projection, fp16, zero points, M = 16", offset(fastest(node(14336, 4096), zp16))},
        {"block 128, bf16, zero points, M = 8", offset(fastest(node(8192, 8192, 4, 128), zp8))},
        {"block 64, fp16, M = 4", offset(fastest(node(4096, 4096, 4, 64), rows(4)))},
        {"paired gate/up, block 128, bf16, zero points, M = 1", offset(paired(8192, 28672, zp1, 128))},
    };
    // Two weight sets of two chunks at M = 1 and of zero points at M = 16 fill the 128 registers of two CTAs an SM
    // and spill (4 and 116 bytes).
    CHECK(offset_codes(offset(paired(4096, 14336, rows(1, DataType::BFloat16)))));
    CHECK(offset_codes(offset(paired(4096, 14336, zp16))));
    for (const NamedProblem& c : on) {
        CAPTURE(c.name);
        const KernelStep step = test::kernel_step(c.problem.plan(), 0);
        REQUIRE(defines(step, "NBITS_OFFSET_CODES=1"));
        CHECK(step.entry.rfind("nbits_decode", 0) == 0);
        check_no_spills(step);
    }
    // Not where the kernel has no exact int4 blocks of whole chunks (block 16, int8), on CUDA cores (fp32), nor
    // when the override says 0.
    CHECK_FALSE(offset_codes(offset(fastest(node(4096, 4096, 4, 16), rows(1)))));
    CHECK_FALSE(offset_codes(offset(fastest(node(4096, 4096, 8, 32), rows(1, DataType::BFloat16)))));
    CHECK_FALSE(offset_codes(offset(fastest(node(4096, 4096), rows(1, DataType::Float32)))));
    CHECK_FALSE(offset_codes(offset(fastest(node(4096, 4096), rows(1, DataType::BFloat16)), 0)));
    // 2: the offset's share added after the block's mmas.
    const KernelStep after = test::kernel_step(offset(fastest(node(18944, 3584), zp1), 2).plan(), 0);
    CHECK(defines(after, "NBITS_OFFSET_CODES=2"));
    check_no_spills(after);
}
