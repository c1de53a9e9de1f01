// The original's bit-exactness tests, driven through the operator: each fused
// or specialized path against the reference sequence it replaces, compared
// byte for byte (the one exception, split-K, is the original's own).

#include "matmul_fixture.hpp"

#include "host_half.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

using namespace nbits;
using namespace nbits::test;

namespace {

constexpr float kEpsilon = 1e-5f;

std::vector<Tensor> pick(const DeviceTensors& tensors, std::initializer_list<std::size_t> slots)
{
    std::vector<Tensor> picked;
    for (const std::size_t slot : slots) {
        picked.push_back(tensors[slot]);
    }
    return picked;
}

// Draws block-32 weights in the original tests' order: codes, then fp16 scales.
QuantizedWeights draw_block32_weights(Lcg& lcg, std::size_t n, std::size_t k, std::size_t bits)
{
    QuantizedWeights weights;
    weights.k = k;
    weights.n = n;
    weights.bits = bits;
    weights.packed = pack_codes(lcg.codes(n * k, bits == 8 ? 255 : 15), n, k, 32, bits);
    weights.scales = half_values(lcg.half_scales(n * weights.k_blocks()));
    return weights;
}

// The original gate/up tests' data: the activation, then the gate and the up
// weights, drawn in that order.
struct GateUpProblem {
    std::size_t m;
    std::size_t k;
    std::size_t n;
    std::vector<std::uint16_t> activation;
    QuantizedWeights gate;
    QuantizedWeights up;

    std::string shape() const { return fmt::format("M={} K={} N={}", m, k, n); }
    // [A, W_gate, scales_gate, W_up, scales_up]
    std::vector<HostTensor> inputs() const
    {
        return {HostTensor::f16({m, k}, activation), gate.packed_tensor(), gate.scales_tensor(DataType::Float16),
                up.packed_tensor(), up.scales_tensor(DataType::Float16)};
    }
};

GateUpProblem draw_gate_up(Lcg& lcg, std::size_t m, std::size_t k, std::size_t n)
{
    GateUpProblem problem{m, k, n, lcg.halves(m * k), {}, {}};
    problem.gate = draw_block32_weights(lcg, n, k, 4);
    problem.up = draw_block32_weights(lcg, n, k, 4);
    return problem;
}

void check_same_bytes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& expected,
                      std::size_t element_size)
{
    const std::string difference = byte_difference(got, expected, element_size);
    CHECK_MESSAGE(difference.empty(), difference);
}

// The original's block-128 byte-identity harness: the operator's run against
// the other of {specialized entry, generic matmul_nbits_gemv_f32} launched
// directly on the same buffers. With zero points the operator selects the
// specialization; without (int8 only), the generic GEMV.
void check_block128_specialization_matches_generic(std::size_t bits, std::size_t k, std::size_t n, bool with_bias,
                                                   bool zero_points)
{
    CAPTURE(bits);
    CAPTURE(k);
    CAPTURE(n);
    CAPTURE(with_bias);
    CAPTURE(zero_points);
    Lcg lcg(0x0badc0de12345678ull);
    QuantizedWeights weights;
    weights.k = k;
    weights.n = n;
    weights.bits = bits;
    weights.block_size = 128;
    const std::vector<float> activation = lcg.floats(k);
    weights.packed = lcg.codes(n * weights.k_blocks() * weights.blob_size(), 255);
    if (zero_points) {
        weights.zero_points = lcg.codes(n * weights.zp_row_bytes(), 255);
    }
    weights.scales = lcg.scales(n * weights.k_blocks());
    const std::vector<float> bias = with_bias ? lcg.floats(n) : std::vector<float>{};

    std::vector<HostTensor> hosts = {HostTensor::f32({1, k}, activation), weights.packed_tensor(),
                                     weights.scales_tensor(DataType::Float32), weights.zero_points_tensor(),
                                     HostTensor::absent(DataType::Int32),
                                     with_bias ? HostTensor::f32({n}, bias) : HostTensor::absent(DataType::Float32)};
    trim_absent_tail(hosts);
    CudaRuntime& runtime = matmul_gpu();
    const DeviceTensors inputs(runtime, hosts);
    ops::MatMulNBits op(matmul_gpu_shared(), matmul_attributes(k, n, bits, 128, 4));
    DeviceOutput output(runtime, DataType::Float32, {1, n});
    const RunOutcome outcome = run_into(op, inputs.tensors(), output);

    const std::string specialized =
        bits == 8 ? "matmul_nbits_gemv_int8_f32_block128" : "matmul_nbits_gemv_int4_f32_block128";
    const std::string generic = "matmul_nbits_gemv_f32";
    const std::string selected = zero_points ? specialized : generic;
    REQUIRE(kernel_entries(outcome.plan) == std::vector<std::string>{selected});

    const auto int_of = [](std::size_t value) { return static_cast<std::int32_t>(value); };
    const CUdeviceptr bias_pointer = hosts.size() > 5 ? inputs[5].data : 0;
    DeviceOutput other(runtime, DataType::Float32, {1, n});
    KernelArgs args;
    args.ptr(inputs[0].data).ptr(inputs[1].data).ptr(inputs[2].data).ptr(zero_points ? inputs[3].data : 0);
    args.ptr(bias_pointer).ptr(other.tensor().data).i32(int_of(k)).i32(int_of(n));
    if (zero_points) {
        args.i32(128).i32(int_of(weights.k_blocks())).i32(int_of(weights.blob_size()));
        args.i32(int_of(weights.zp_row_bytes())).i32(int_of(bits));
    } else {
        args.i32(int_of(weights.k_blocks()));
    }
    reference::nbits_entry(runtime, zero_points ? generic : specialized,
                           LaunchConfig{{static_cast<std::uint32_t>(n), 1, 1}, {256, 1, 1}, 0}, args);

    const std::vector<float> values = output_values(DataType::Float32, outcome.bytes);
    CHECK(std::all_of(values.begin(), values.end(), [](float value) { return std::isfinite(value); }));
    check_same_bytes(outcome.bytes, other.bytes(), 4);
}

}  // namespace

TEST_CASE("the fp16 down projection is bit-exact to the original staged kernel")
{
    const ScopedEnv device_choice("ONNX_GENAI_DOWN_COLS", std::nullopt);
    CudaRuntime& runtime = matmul_gpu();
    for (const auto& [k, n] : {std::pair<std::size_t, std::size_t>{4864, 896}, {5632, 2048}, {16384, 8192}}) {
        CAPTURE(k);
        CAPTURE(n);
        const std::size_t k_blocks = k / 32;
        std::vector<std::uint16_t> activation(k);
        for (std::size_t i = 0; i < k; ++i) {
            activation[i] = float_to_half((static_cast<float>((i * 17) % 257) - 128.0f) / 128.0f);
        }
        std::vector<std::uint8_t> packed(n * k_blocks * 16);
        for (std::size_t i = 0; i < packed.size(); ++i) {
            packed[i] = static_cast<std::uint8_t>((i * 29 + i / 7 + 13) & 0xff);
        }
        std::vector<std::uint16_t> scales(n * k_blocks);
        for (std::size_t i = 0; i < scales.size(); ++i) {
            scales[i] = float_to_half(0.01f + static_cast<float>(i % 17) * 0.0005f);
        }
        const DeviceTensors inputs(runtime, {HostTensor::f16({1, k}, activation),
                                             HostTensor::u8({n, k_blocks, 16}, packed),
                                             HostTensor::f16({n, k_blocks}, scales)});
        ops::MatMulNBits op(matmul_gpu_shared(), matmul_attributes(k, n, 4, 32, 4));
        DeviceOutput down(runtime, DataType::Float16, {1, n});
        const RunOutcome outcome = run_into(op, inputs.tensors(), down);
        const std::vector<std::string> entries = kernel_entries(outcome.plan);
        CHECK(outcome.plan.variant == "gemv_f16_down_projection");
        REQUIRE(entries.size() == 1);
        CHECK(entries[0].rfind("matmul_nbits_gemv_f16_scales_f16_down", 0) == 0);
        MESSAGE(fmt::format("down projection K={} N={} ran {}", k, n, entries[0]));

        DeviceOutput staged(runtime, DataType::Float16, {1, n});
        reference::staged_down(runtime, inputs[0].data, inputs[1].data, inputs[2].data, staged.tensor().data,
                               static_cast<int>(k), static_cast<int>(n));
        check_same_bytes(outcome.bytes, staged.bytes(), 2);
    }
}

TEST_CASE("the int8 f32 block-128 specialization is bit-identical to the generic f32 GEMV")
{
    const std::pair<std::size_t, std::size_t> shapes[] = {
        {1024, 1024}, {3072, 1024}, {1024, 3072}, {1024, 1030}, {1000, 1024}, {896, 1027},
    };
    for (const auto& [k, n] : shapes) {
        for (const auto& [bias, zero_points] : {std::pair<bool, bool>{true, true}, {false, true}, {true, false}}) {
            check_block128_specialization_matches_generic(8, k, n, bias, zero_points);
        }
    }
}

TEST_CASE("the int4 f32 block-128 specialization is bit-identical to the generic f32 GEMV")
{
    check_block128_specialization_matches_generic(4, 259, 37, true, true);
}

TEST_CASE("a folded bias is bit-exact to the GEMV followed by a separate fp16 Add")
{
    GemvProblemSpec spec;
    spec.k = 896;
    spec.n = 1152;
    spec.bias = true;
    spec.bias_range = 4.0f;  // a wide range, so that the second fp16 rounding matters
    const GemvProblem problem = draw_gemv_problem(0x123456789abcdef0ull, spec);
    CudaRuntime& runtime = matmul_gpu();
    const DeviceTensors inputs(runtime, problem.inputs());
    ops::MatMulNBits plain(matmul_gpu_shared(), matmul_attributes(spec.k, spec.n, 4, 32, 4));
    ops::MatMulNBits folded(matmul_gpu_shared(),
                            matmul_attributes(spec.k, spec.n, 4, 32, 4).set(ops::kFoldedBiasAttr, std::int64_t{1}));
    DeviceOutput gemv_output(runtime, DataType::Float16, {1, spec.n});
    DeviceOutput folded_output(runtime, DataType::Float16, {1, spec.n});
    const RunOutcome gemv = run_into(plain, pick(inputs, {0, 1, 2}), gemv_output);
    const RunOutcome fused = run_into(folded, inputs.tensors(), folded_output);
    CHECK(kernel_entries(gemv.plan) == std::vector<std::string>{"matmul_nbits_gemv_f16_scales_f16"});
    CHECK(kernel_entries(fused.plan) == std::vector<std::string>{"matmul_nbits_gemv_f16_scales_f16"});
    CHECK(fused.plan.bias_stage.value_or("") == "qkv_bias_fused");

    // The two-op path: fp16(fp16(acc) + bias), the GEMV output being fp16(acc).
    const std::vector<float> accumulated = output_values(DataType::Float16, gemv.bytes);
    std::vector<std::uint16_t> two_op(spec.n);
    for (std::size_t column = 0; column < spec.n; ++column) {
        two_op[column] = float_to_half(accumulated[column] + problem.bias[column]);
    }
    check_same_bytes(fused.bytes, HostTensor::f16({spec.n}, two_op).bytes, 2);
}

TEST_CASE("the paired gate/up SwiGLU is bit-exact to two projections followed by silu_mul")
{
    CudaRuntime& runtime = matmul_gpu();
    const std::tuple<std::size_t, std::size_t, std::size_t> shapes[] = {
        {1, 896, 4864}, {1, 2048, 5632}, {5, 896, 4864}, {3, 96, 77}};
    for (const auto& [m, k, n] : shapes) {
        Lcg lcg(0x0badc0dedeadbeefull);
        const GateUpProblem problem = draw_gate_up(lcg, m, k, n);
        const std::string shape = problem.shape();
        CAPTURE(shape);
        const DeviceTensors inputs(runtime, problem.inputs());
        ops::MatMulNBits projection(matmul_gpu_shared(), matmul_attributes(k, n, 4, 32, 4));
        ops::MatMulNBits paired(matmul_gpu_shared(),
                                matmul_attributes(k, n, 4, 32, 4).set(ops::kGateUpSwigluAttr, std::int64_t{1}));
        DeviceOutput gate_output(runtime, DataType::Float16, {m, n});
        DeviceOutput up_output(runtime, DataType::Float16, {m, n});
        DeviceOutput reference_output(runtime, DataType::Float16, {m, n});
        DeviceOutput paired_output(runtime, DataType::Float16, {m, n});

        const RunOutcome gate_run = run_into(projection, pick(inputs, {0, 1, 2}), gate_output);
        run_into(projection, pick(inputs, {0, 3, 4}), up_output);
        if (m == 1) {
            CHECK(kernel_entries(gate_run.plan) == std::vector<std::string>{"matmul_nbits_gemv_f16_scales_f16"});
        }
        reference::silu_mul(runtime, gate_output.tensor().data, up_output.tensor().data,
                            reference_output.tensor().data, static_cast<int>(m * n));

        const RunOutcome fused = run_into(paired, inputs.tensors(), paired_output);
        CHECK(paired.capture_support().supported);
        check_same_bytes(fused.bytes, reference_output.bytes(), 2);
    }
}

namespace {

// The original's gate/up SwiGLU RMS-norm parity: the fused prologue against
// the original matmul_nbits_rmsnorm_f16_warp_half4 followed by the plain
// paired gate/up node on the normalized activation.
void check_fused_gate_up_rmsnorm(DataType gamma_dtype, bool zero_points)
{
    CudaRuntime& runtime = matmul_gpu();
    const std::tuple<std::size_t, std::size_t, std::size_t> shapes[] = {{1, 896, 2432}, {1, 3584, 4864}, {5, 896, 2432}};
    for (const auto& [m, k, n] : shapes) {
        Lcg lcg(0xf00d1ceb00da5555ull);
        GateUpProblem problem = draw_gate_up(lcg, m, k, n);
        const std::string shape = problem.shape();
        CAPTURE(shape);
        // Both zero-point sets are drawn whether or not they are used, as in the original.
        const std::size_t k_blocks = problem.gate.k_blocks();
        const std::vector<std::uint8_t> gate_zero_points = pack_int4_zero_points(lcg.codes(n * k_blocks, 15), n, k_blocks);
        const std::vector<std::uint8_t> up_zero_points = pack_int4_zero_points(lcg.codes(n * k_blocks, 15), n, k_blocks);
        const std::vector<float> gamma = lcg.gammas(k);
        if (zero_points) {
            problem.gate.zero_points = gate_zero_points;
            problem.up.zero_points = up_zero_points;
        }
        std::vector<HostTensor> hosts = problem.inputs();
        hosts.push_back(HostTensor::real(gamma_dtype, {k}, gamma));
        hosts.push_back(problem.gate.zero_points_tensor());
        hosts.push_back(problem.up.zero_points_tensor());
        const DeviceTensors inputs(runtime, hosts);

        DeviceOutput normalized(runtime, DataType::Float16, {m, k});
        reference::rmsnorm(runtime, inputs[0].data, inputs[5].data, gamma_dtype == DataType::Float16,
                           normalized.tensor().data, static_cast<int>(k), static_cast<int>(m), kEpsilon);
        std::vector<Tensor> reference_inputs = pick(inputs, {0, 1, 2, 3, 4});
        reference_inputs[0] = normalized.tensor();
        std::vector<Tensor> fused_inputs = pick(inputs, {0, 1, 2, 3, 4, 5});
        if (zero_points) {
            reference_inputs.push_back(Tensor::absent(DataType::Float16));
            for (const std::size_t slot : {6, 7}) {
                reference_inputs.push_back(inputs[slot]);
                fused_inputs.push_back(inputs[slot]);
            }
        }

        const NodeAttributes paired_attributes =
            matmul_attributes(k, n, 4, 32, 4).set(ops::kGateUpSwigluAttr, std::int64_t{1});
        ops::MatMulNBits paired(matmul_gpu_shared(), paired_attributes);
        ops::MatMulNBits fused(matmul_gpu_shared(), NodeAttributes(paired_attributes)
                                                        .set(ops::kRmsNormPrologueAttr, std::int64_t{1})
                                                        .set(ops::kRmsNormEpsilonAttr, kEpsilon));
        DeviceOutput reference_output(runtime, DataType::Float16, {m, n});
        DeviceOutput fused_output(runtime, DataType::Float16, {m, n});
        const RunOutcome expected = run_into(paired, reference_inputs, reference_output);
        const RunOutcome got = run_into(fused, fused_inputs, fused_output);
        CHECK(fused.capture_support().supported);
        check_same_bytes(got.bytes, expected.bytes, 2);
    }
}

// The original's SkipSimplifiedLayerNormalization fusion parity: preceding
// GEMV → skip RMS-norm → following GEMV against the preceding GEMV with the
// residual folded into its bias slot → the following GEMV with the RMS-norm
// prologue. The residual sum must match byte for byte; so must the final
// projection, except where the original's own reference runs the split-K
// int8 GEMV (int8 zero points at M = 1), which the original validated to
// tolerance.
void check_fused_skip_rmsnorm(DataType gamma_dtype, std::size_t bits, bool zero_points)
{
    const std::size_t hidden = bits == 8 ? 3072 : 896;
    const std::size_t pre_k = bits == 8 ? 8192 : 4864;
    const std::size_t post_n = bits == 8 ? 5120 : 1152;
    CudaRuntime& runtime = matmul_gpu();
    for (const auto& [m, following_bias] : {std::pair<std::size_t, bool>{1, false}, {1, true}, {5, true}}) {
        CAPTURE(m);
        CAPTURE(following_bias);
        Lcg lcg(0x51ced00df00d1234ull);
        const std::vector<std::uint16_t> activation = lcg.halves(m * pre_k);
        QuantizedWeights pre = draw_block32_weights(lcg, hidden, pre_k, bits);
        QuantizedWeights post = draw_block32_weights(lcg, post_n, hidden, bits);
        const std::vector<std::uint16_t> residual = lcg.halves(m * hidden);
        const std::vector<float> gamma = lcg.gammas(hidden);
        const std::vector<std::uint16_t> bias = lcg.halves(post_n);
        if (zero_points) {
            pre.zero_points = lcg.int8_zero_points(hidden * pre.k_blocks());
            post.zero_points = lcg.int8_zero_points(post_n * post.k_blocks());
        }
        enum Slot : std::size_t { A, PreB, PreScales, PreZp, PostB, PostScales, PostZp, Residual, Gamma, Bias };
        const DeviceTensors inputs(
            runtime, {HostTensor::f16({m, pre_k}, activation), pre.packed_tensor(), pre.scales_tensor(DataType::Float16),
                      pre.zero_points_tensor(), post.packed_tensor(), post.scales_tensor(DataType::Float16),
                      post.zero_points_tensor(), HostTensor::f16({m, hidden}, residual),
                      HostTensor::real(gamma_dtype, {hidden}, gamma), HostTensor::f16({post_n}, bias)});
        const Tensor no_g_idx = Tensor::absent(DataType::Int32);

        // The three-op reference.
        ops::MatMulNBits preceding(matmul_gpu_shared(), matmul_attributes(pre_k, hidden, bits, 32, 4));
        ops::MatMulNBits following(matmul_gpu_shared(), matmul_attributes(hidden, post_n, bits, 32, 4));
        DeviceOutput matmul_output(runtime, DataType::Float16, {m, hidden});
        DeviceOutput normalized(runtime, DataType::Float16, {m, hidden});
        DeviceOutput residual_sum(runtime, DataType::Float16, {m, hidden});
        DeviceOutput reference_output(runtime, DataType::Float16, {m, post_n});
        std::vector<Tensor> preceding_inputs = pick(inputs, {A, PreB, PreScales});
        if (zero_points) {
            preceding_inputs.push_back(inputs[PreZp]);
        }
        run_into(preceding, preceding_inputs, matmul_output);
        reference::skip_rmsnorm(runtime, matmul_output.tensor().data, inputs[Residual].data, inputs[Gamma].data,
                                gamma_dtype == DataType::Float16, normalized.tensor().data,
                                residual_sum.tensor().data, static_cast<int>(hidden), static_cast<int>(m), kEpsilon);
        std::vector<Tensor> following_inputs = {normalized.tensor(), inputs[PostB], inputs[PostScales]};
        if (zero_points || following_bias) {
            following_inputs.push_back(inputs[PostZp]);
        }
        if (following_bias) {
            following_inputs.push_back(no_g_idx);
            following_inputs.push_back(inputs[Bias]);
        }
        const RunOutcome expected = run_into(following, following_inputs, reference_output);

        // The fused pair.
        ops::MatMulNBits preceding_folded(
            matmul_gpu_shared(), matmul_attributes(pre_k, hidden, bits, 32, 4).set(ops::kFoldedBiasAttr, std::int64_t{1}));
        ops::MatMulNBits following_normalized(matmul_gpu_shared(),
                                              matmul_attributes(hidden, post_n, bits, 32, 4)
                                                  .set(ops::kRmsNormPrologueAttr, std::int64_t{1})
                                                  .set(ops::kRmsNormEpsilonAttr, kEpsilon));
        DeviceOutput folded_output(runtime, DataType::Float16, {m, hidden});
        DeviceOutput fused_output(runtime, DataType::Float16, {m, post_n});
        const RunOutcome folded = run_into(
            preceding_folded, {inputs[A], inputs[PreB], inputs[PreScales], inputs[PreZp], no_g_idx, inputs[Residual]},
            folded_output);
        const RunOutcome got = run_into(following_normalized,
                                        {folded_output.tensor(), inputs[PostB], inputs[PostScales], inputs[PostZp],
                                         no_g_idx, following_bias ? inputs[Bias] : Tensor::absent(DataType::Float16),
                                         inputs[Gamma]},
                                        fused_output);

        check_same_bytes(folded.bytes, residual_sum.bytes(), 2);
        if (bits == 8 && zero_points && m == 1) {
            // The original validated this path to tolerance: its reference
            // GEMV takes split-K, which sums the fp32 partials in another order.
            const std::vector<float> fused = output_values(DataType::Float16, got.bytes);
            const std::vector<float> reference = output_values(DataType::Float16, expected.bytes);
            float max_abs = 0.0f;
            float worst = 0.0f;
            bool all_finite = true;
            for (std::size_t i = 0; i < fused.size(); ++i) {
                all_finite = all_finite && std::isfinite(fused[i]);
                max_abs = std::max(max_abs, std::fabs(reference[i]));
                worst = std::max(worst, std::fabs(fused[i] - reference[i]));
            }
            const float bound = std::max(max_abs * 2e-3f, 1e-3f);
            MESSAGE(fmt::format("split-K int8 skip-rmsnorm parity M={} bias={}: max_abs_diff={:.3e} bound={:.3e}", m,
                                following_bias, worst, bound));
            CHECK(all_finite);
            CHECK(worst < bound);
        } else {
            check_same_bytes(got.bytes, expected.bytes, 2);
        }
    }
}

}  // namespace

TEST_CASE("the fused gate/up SwiGLU RMS-norm prologue is bit-exact to normalizing first")
{
    check_fused_gate_up_rmsnorm(DataType::Float16, false);
}

TEST_CASE("the fused gate/up SwiGLU RMS-norm prologue with an fp32 gamma is bit-exact to normalizing first")
{
    check_fused_gate_up_rmsnorm(DataType::Float32, false);
}

TEST_CASE("the fused gate/up SwiGLU RMS-norm prologue with zero points is bit-exact to normalizing first")
{
    check_fused_gate_up_rmsnorm(DataType::Float32, true);
}

TEST_CASE("the fused skip RMS-norm is bit-exact to GEMV, SkipSimplifiedLayerNormalization, GEMV")
{
    check_fused_skip_rmsnorm(DataType::Float16, 4, false);
}

TEST_CASE("the fused skip RMS-norm with an fp32 gamma is bit-exact to the three-op path")
{
    check_fused_skip_rmsnorm(DataType::Float32, 4, false);
}

TEST_CASE("the fused skip RMS-norm over asymmetric int8 weights matches the three-op path")
{
    check_fused_skip_rmsnorm(DataType::Float32, 8, true);
}
