// The original's float64-oracle parity tests, driven through the operator: the
// same shapes, the same generator and seeds, the same bounds. The original
// validated these paths to tolerance (its kernels accumulate in fp32, some in
// half2, and round the output to fp16), so they are checked to tolerance here;
// the bit-exact guarantees live in matmul_nbits_bit_exact_test.cpp and
// matmul_nbits_original_kernels_test.cpp. Each test prints its worst error.

#include "matmul_fixture.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>

using namespace nbits;
using namespace nbits::test;

namespace {

// The generator seeds of the original's int4 fp16, int8 fp16 and int8 f32 harnesses.
constexpr std::uint64_t kInt4F16Seed = 0x9e3779b97f4a7c15ull;
constexpr std::uint64_t kInt8F16Seed = 0x243f6a8885a308d3ull;
constexpr std::uint64_t kInt8F32Seed = 0x123456789abcdef0ull;

struct OracleRun {
    OracleError error;
    std::vector<std::string> entries;
};

// One of the original M = 1 GEMV parity problems through the operator, built
// with accuracy_level 4 as the original built its kernel, against the oracle.
OracleRun run_against_oracle(std::uint64_t seed, const GemvProblemSpec& spec)
{
    const GemvProblem problem = draw_gemv_problem(seed, spec);
    CudaRuntime& runtime = matmul_gpu();
    ops::MatMulNBits op(matmul_gpu_shared(), matmul_attributes(spec.k, spec.n, spec.bits, spec.block_size, 4));
    const DeviceTensors inputs(runtime, problem.inputs());
    DeviceOutput output(runtime, spec.activation, {1, spec.n});
    const RunOutcome outcome = run_into(op, inputs.tensors(), output);
    CHECK_MESSAGE(outcome.plan.capture_safe, "a decode GEMV must be capture-safe");
    CHECK(op.capture_support().supported);
    return {oracle_error(output_values(spec.activation, outcome.bytes), problem.oracle()), kernel_entries(outcome.plan)};
}

// The original's bound: all outputs finite, max_abs < max(max_out * relative,
// 1e-3) and max_rel < 5e-2.
void check_oracle_bound(const std::string& label, const OracleError& error, float relative)
{
    const float bound = std::max(error.max_out * relative, 1e-3f);
    MESSAGE(label << ": " << error.describe() << fmt::format(" bound={:.3e}", bound));
    CHECK_MESSAGE(error.all_finite, label << " produced a non-finite output");
    CHECK_MESSAGE(error.max_abs < bound, label << " diverged from the oracle: " << error.describe());
    CHECK_MESSAGE(error.max_rel < 5e-2f, label << " diverged from the oracle: " << error.describe());
}

// An fp16-activation problem; tests switch to f32 activations themselves.
GemvProblemSpec gemv_spec(std::size_t bits, std::size_t k, std::size_t n, std::size_t block_size, bool fp16_scales,
                          bool bias, bool zero_points)
{
    GemvProblemSpec spec;
    spec.bits = bits;
    spec.k = k;
    spec.n = n;
    spec.block_size = block_size;
    spec.scales = fp16_scales ? DataType::Float16 : DataType::Float32;
    spec.bias = bias;
    spec.zero_points = zero_points;
    return spec;
}

using BlockShape = std::tuple<std::size_t, std::size_t, std::size_t>;  // block size, K, N
using Layout = std::tuple<bool, bool, bool>;                          // fp16 scales, bias, zero points

// The original's general-block-size parity: for each shape, every layout runs
// the general-block-size GEMV, and the worst error over the layouts meets the bound.
void check_general_block_size_gemv(std::size_t bits, std::uint64_t seed, const std::vector<BlockShape>& shapes,
                                   const std::vector<Layout>& layouts, float relative)
{
    for (const auto& [block_size, k, n] : shapes) {
        OracleError worst;
        for (const auto& [fp16_scales, bias, zero_points] : layouts) {
            const OracleRun run =
                run_against_oracle(seed, gemv_spec(bits, k, n, block_size, fp16_scales, bias, zero_points));
            CHECK(run.entries == std::vector<std::string>{"matmul_nbits_gemv_f16_general_bs"});
            worst.merge(run.error);
        }
        check_oracle_bound(fmt::format("{} GEMV block-{} parity K={} N={}", bits == 8 ? "int8 fp16" : "fp16",
                                       block_size, k, n),
                           worst, relative);
    }
}

// (fp16 scales, bias) of the original's block-32 parity tests.
const std::tuple<bool, bool> kScalesAndBias[] = {{false, false}, {true, false}, {true, true}};

}  // namespace

TEST_CASE("the fp16 GEMV matches the float64 dequantization oracle")
{
    OracleError worst;
    for (const auto& [fp16_scales, bias] : kScalesAndBias) {
        worst.merge(run_against_oracle(kInt4F16Seed, gemv_spec(4, 4096, 70, 32, fp16_scales, bias, false)).error);
    }
    check_oracle_bound("fp16 GEMV parity K=4096 N=70", worst, 1e-3f);
}

TEST_CASE("the fp16 GEMV matches the oracle at Qwen2.5-1.5B's gate/up and down dimensions")
{
    for (const auto& [k, n] : {std::pair<std::size_t, std::size_t>{1536, 8960}, {8960, 1536}}) {
        OracleError worst;
        for (const auto& [fp16_scales, bias] : kScalesAndBias) {
            worst.merge(run_against_oracle(kInt4F16Seed, gemv_spec(4, k, n, 32, fp16_scales, bias, false)).error);
        }
        check_oracle_bound(fmt::format("fp16 GEMV parity K={} N={}", k, n), worst, 1e-3f);
    }
}

TEST_CASE("the general-block-size fp16 GEMV matches the oracle at block sizes 128 and 64")
{
    check_general_block_size_gemv(4, kInt4F16Seed,
                                  {{128, 896, 896}, {128, 896, 4864}, {128, 4864, 896}, {128, 896, 70}, {64, 896, 896},
                                   {64, 896, 70}},
                                  {{false, false, false}, {true, false, false}, {true, true, false}, {false, false, true},
                                   {true, true, true}},
                                  1e-3f);
}

TEST_CASE("the asymmetric int4 fp16 GEMV matches the oracle at Phi-4-mini's dimensions")
{
    for (const auto& [k, n] : {std::pair<std::size_t, std::size_t>{3072, 3072}, {3072, 8192}}) {
        OracleError worst;
        for (const bool bias : {false, true}) {
            worst.merge(run_against_oracle(kInt4F16Seed, gemv_spec(4, k, n, 32, true, bias, true)).error);
        }
        check_oracle_bound(fmt::format("int4 asymmetric-zp GEMV parity K={} N={}", k, n), worst, 1e-3f);
    }
}

TEST_CASE("the int8 fp16 GEMV matches the oracle at Phi's dimensions, split-K included")
{
    // (K, N, fp16 scales, bias, zero points); K=8192 with zero points takes split-K.
    const std::tuple<std::size_t, std::size_t, bool, bool, bool> cases[] = {
        {3072, 5120, true, false, false}, {8192, 3072, true, false, false}, {3072, 5120, true, true, false},
        {3072, 5120, true, false, true},  {8192, 3072, true, false, true},  {3072, 5121, true, false, false},
        {8192, 3072, false, false, false},
    };
    OracleError worst;
    for (const auto& [k, n, fp16_scales, bias, zero_points] : cases) {
        worst.merge(run_against_oracle(kInt8F16Seed, gemv_spec(8, k, n, 32, fp16_scales, bias, zero_points)).error);
    }
    check_oracle_bound("int8 fp16 GEMV parity (Phi dims)", worst, 2e-3f);
}

TEST_CASE("the general-block-size int8 fp16 GEMV matches the oracle at block sizes 128 and 64")
{
    check_general_block_size_gemv(8, kInt8F16Seed,
                                  {{128, 1024, 1024}, {128, 3072, 1024}, {128, 1024, 3072}, {128, 1024, 1030},
                                   {64, 1024, 1024}},
                                  {{true, false, false}, {false, false, false}, {true, true, false}, {true, false, true}},
                                  2e-3f);
}

TEST_CASE("the int8 f32 GEMV matches the oracle at block sizes 128 and 64")
{
    const std::tuple<std::size_t, std::size_t, std::size_t> shapes[] = {
        {128, 1024, 1024}, {128, 3072, 1024}, {128, 1024, 3072}, {128, 1024, 1030}, {64, 1024, 1024},
    };
    for (const auto& [block_size, k, n] : shapes) {
        OracleError worst;
        for (const auto& [bias, zero_points] : {std::pair<bool, bool>{false, false}, {true, false}, {false, true}}) {
            GemvProblemSpec spec = gemv_spec(8, k, n, block_size, false, bias, zero_points);
            spec.activation = DataType::Float32;
            const OracleRun run = run_against_oracle(kInt8F32Seed, spec);
            const bool specialized = block_size == 128 && zero_points;
            CHECK(run.entries == std::vector<std::string>{specialized ? "matmul_nbits_gemv_int8_f32_block128"
                                                                      : "matmul_nbits_gemv_f32"});
            worst.merge(run.error);
        }
        check_oracle_bound(fmt::format("int8 f32 GEMV block-{} parity K={} N={}", block_size, k, n), worst, 2e-3f);
    }
}

TEST_CASE("an f32 prefill with a permuted g_idx matches the float64 oracle")
{
    // Not in the original's tests: the dequantize-then-cuBLASLt path with an
    // act-order g_idx. fp32 dequantization and an fp32 cuBLASLt GEMM over K=256
    // stay far inside a 1e-4 relative bound.
    const std::size_t m = 2;
    const std::size_t k = 256;
    const std::size_t n = 48;
    Lcg lcg(0x6a09e667f3bcc908ull);
    QuantizedWeights weights;
    weights.k = k;
    weights.n = n;
    const std::vector<float> activation = lcg.floats(m * k);
    weights.packed = lcg.codes(n * weights.k_blocks() * weights.blob_size(), 255);
    weights.scales = lcg.scales(n * weights.k_blocks());
    weights.zero_points = lcg.codes(n * weights.zp_row_bytes(), 255);
    const std::vector<float> bias = lcg.floats(n);
    std::vector<std::int32_t> g_idx(k);
    for (std::size_t depth = 0; depth < k; ++depth) {
        g_idx[depth] = static_cast<std::int32_t>((depth * 5 + 3) % weights.k_blocks());
    }

    CudaRuntime& runtime = matmul_gpu();
    ops::MatMulNBits op(matmul_gpu_shared(), matmul_attributes(k, n, 4, 32, 0));
    const DeviceTensors inputs(runtime, {HostTensor::f32({m, k}, activation), weights.packed_tensor(),
                                         weights.scales_tensor(DataType::Float32), weights.zero_points_tensor(),
                                         HostTensor::i32({k}, g_idx), HostTensor::f32({n}, bias)});
    DeviceOutput output(runtime, DataType::Float32, {m, n});
    const RunOutcome outcome = run_into(op, inputs.tensors(), output);
    CHECK(kernel_entries(outcome.plan) == std::vector<std::string>{"matmul_nbits_dequant_f32"});
    CHECK(has_gemm_step(outcome.plan));
    CHECK_FALSE(outcome.plan.capture_safe);
    CHECK_FALSE(op.capture_support().supported);

    const OracleError error = oracle_error(output_values(DataType::Float32, outcome.bytes),
                                           oracle_matmul(activation, m, weights, bias, g_idx));
    const float bound = std::max(error.max_out * 1e-4f, 1e-4f);
    MESSAGE("f32 g_idx dequant+cuBLASLt parity M=2 K=256 N=48: " << error.describe()
                                                                 << fmt::format(" bound={:.3e}", bound));
    CHECK(error.all_finite);
    CHECK(error.max_abs < bound);
    CHECK(error.max_rel < 1e-3f);
}
