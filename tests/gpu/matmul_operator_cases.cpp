// The operator configurations the original-kernel parity and the capture
// tests walk. Together their plans launch all 33 entries; the expected entries
// are what the original's dispatch selects on an H200 (132 SMs, sm_90, 227 KiB
// opt-in shared memory). The down projection's 8/4/2 columns are forced
// through ONNX_GENAI_DOWN_COLS, so that they do not depend on the SM count.

#include "matmul_fixture.hpp"

#include <algorithm>
#include <cmath>

namespace nbits::test {

OperatorCase OperatorCase::f16(std::string name, std::size_t m, std::size_t k, std::size_t n)
{
    OperatorCase spec;
    spec.name = std::move(name);
    spec.m = m;
    spec.k = k;
    spec.n = n;
    return spec;
}

OperatorCase OperatorCase::f32(std::string name, std::size_t m, std::size_t k, std::size_t n)
{
    OperatorCase spec = f16(std::move(name), m, k, n);
    spec.activation = DataType::Float32;
    spec.scales = DataType::Float32;
    return spec;
}

OperatorCase& OperatorCase::int8()
{
    bits = 8;
    return *this;
}

OperatorCase& OperatorCase::block(std::size_t size)
{
    block_size = size;
    return *this;
}

OperatorCase& OperatorCase::accuracy4()
{
    accuracy_level = 4;
    return *this;
}

OperatorCase& OperatorCase::fp32_scales()
{
    scales = DataType::Float32;
    return *this;
}

OperatorCase& OperatorCase::with_zero_points()
{
    zero_points = true;
    return *this;
}

OperatorCase& OperatorCase::with_bias()
{
    bias = true;
    return *this;
}

OperatorCase& OperatorCase::with_folded_bias()
{
    bias = true;
    folded_bias = true;
    return *this;
}

OperatorCase& OperatorCase::with_folded_residual()
{
    per_token_bias = true;
    return with_folded_bias();
}

OperatorCase& OperatorCase::with_g_idx()
{
    g_idx = true;
    return *this;
}

OperatorCase& OperatorCase::rmsnorm(DataType gamma_dtype)
{
    gamma = gamma_dtype;
    return *this;
}

OperatorCase& OperatorCase::paired_gate_up()
{
    gate_up = true;
    return *this;
}

OperatorCase& OperatorCase::forced_down_columns(std::string columns)
{
    down_columns = std::move(columns);
    return *this;
}

OperatorCase& OperatorCase::launches(std::vector<std::string> kernel_entries, bool then_gemm)
{
    entries = std::move(kernel_entries);
    gemm = then_gemm;
    return *this;
}

NodeAttributes OperatorCase::attributes() const
{
    NodeAttributes attributes = matmul_attributes(k, n, bits, block_size, accuracy_level);
    if (folded_bias) {
        attributes.set(ops::kFoldedBiasAttr, std::int64_t{1});
    }
    if (gate_up) {
        attributes.set(ops::kGateUpSwigluAttr, std::int64_t{1});
    }
    if (gamma) {
        attributes.set(ops::kRmsNormPrologueAttr, std::int64_t{1});
        attributes.set(ops::kRmsNormEpsilonAttr, 1e-5f);
    }
    return attributes;
}

std::vector<HostTensor> OperatorCase::random_inputs(std::uint64_t seed) const
{
    Lcg lcg(seed);
    auto random_weights = [&] {
        QuantizedWeights weights;
        weights.k = k;
        weights.n = n;
        weights.bits = bits;
        weights.block_size = block_size;
        weights.packed = lcg.codes(n * weights.k_blocks() * weights.blob_size(), 255);
        weights.scales.resize(n * weights.k_blocks());
        for (float& scale : weights.scales) {
            scale = 0.01f + 0.02f * lcg.unit();
        }
        if (zero_points) {
            weights.zero_points = lcg.codes(n * weights.zp_row_bytes(), 255);
        }
        return weights;
    };
    auto random_reals = [&](DataType dtype, std::vector<std::size_t> shape, std::size_t count) {
        return dtype == DataType::Float16 ? HostTensor::f16(std::move(shape), lcg.halves(count))
                                          : HostTensor::f32(std::move(shape), lcg.floats(count));
    };

    std::vector<HostTensor> inputs;
    inputs.push_back(random_reals(activation, {m, k}, m * k));
    const HostTensor gamma_tensor =
        gamma ? HostTensor::real(*gamma, {k}, lcg.gammas(k)) : HostTensor::absent(DataType::Float16);
    if (gate_up) {
        const QuantizedWeights gate = random_weights();
        const QuantizedWeights up = random_weights();
        inputs.push_back(gate.packed_tensor());
        inputs.push_back(gate.scales_tensor(scales));
        inputs.push_back(up.packed_tensor());
        inputs.push_back(up.scales_tensor(scales));
        inputs.push_back(gamma_tensor);
        inputs.push_back(gate.zero_points_tensor());
        inputs.push_back(up.zero_points_tensor());
    } else {
        const QuantizedWeights weights = random_weights();
        inputs.push_back(weights.packed_tensor());
        inputs.push_back(weights.scales_tensor(scales));
        inputs.push_back(weights.zero_points_tensor());
        if (g_idx) {
            std::vector<std::int32_t> groups(k);
            const auto k_blocks = static_cast<float>(weights.k_blocks());
            for (std::int32_t& group : groups) {
                group = static_cast<std::int32_t>(std::min(std::floor(lcg.unit() * k_blocks), k_blocks - 1.0f));
            }
            inputs.push_back(HostTensor::i32({k}, groups));
        } else {
            inputs.push_back(HostTensor::absent(DataType::Int32));
        }
        if (per_token_bias) {
            inputs.push_back(random_reals(activation, {m, n}, m * n));
        } else if (bias) {
            inputs.push_back(random_reals(activation, {n}, n));
        } else {
            inputs.push_back(HostTensor::absent(activation));
        }
        inputs.push_back(gamma_tensor);
    }
    trim_absent_tail(inputs);
    return inputs;
}

const std::vector<OperatorCase>& operator_cases()
{
    using C = OperatorCase;
    const DataType f16 = DataType::Float16;
    const DataType f32 = DataType::Float32;
    static const std::vector<OperatorCase> cases = {
        // fp32 activations
        C::f32("f32 int4 block-128 zero-point decode with K and N tails", 1, 1000, 37)
            .block(128).with_zero_points().with_bias()
            .launches({"matmul_nbits_gemv_int4_f32_block128"}),
        C::f32("f32 int8 block-128 zero-point decode", 1, 1000, 77)
            .int8().block(128).with_zero_points()
            .launches({"matmul_nbits_gemv_int8_f32_block128"}),
        C::f32("f32 int8 block-32 decode with a K tail", 1, 1000, 77)
            .int8().with_zero_points().with_bias()
            .launches({"matmul_nbits_gemv_int8_f32"}),
        C::f32("f32 int8 block-64 decode on the general GEMV", 1, 1000, 77)
            .int8().block(64).with_bias()
            .launches({"matmul_nbits_gemv_f32"}),
        C::f32("f32 accuracy-4 block-32 symmetric decode on a sub-wave grid (stage64)", 1, 1000, 64)
            .accuracy4().with_bias()
            .launches({"matmul_nbits_quantize_accuracy4_block32", "matmul_nbits_gemv_accuracy4_block32_stage64"}),
        C::f32("f32 accuracy-4 block-32 symmetric decode on a full wave", 1, 256, 16384)
            .accuracy4()
            .launches({"matmul_nbits_quantize_accuracy4_block32", "matmul_nbits_gemv_accuracy4_block32"}),
        C::f32("f32 accuracy-4 block-32 zero-point decode (blockwise)", 1, 1000, 77)
            .accuracy4().with_zero_points().with_bias()
            .launches({"matmul_nbits_quantize_accuracy4_blockwise", "matmul_nbits_gemv_accuracy4_blockwise"}),
        C::f32("f32 accuracy-4 block-128 decode on the general f32 GEMV", 1, 1000, 77)
            .accuracy4().block(128)
            .launches({"matmul_nbits_gemv_f32"}),
        C::f32("f32 int4 block-16 zero-point decode at accuracy 0", 1, 1000, 77)
            .block(16).with_zero_points()
            .launches({"matmul_nbits_gemv_f32"}),
        C::f32("f32 accuracy-4 block-32 prefill with an M tail (tiled)", 5, 1000, 77)
            .accuracy4().with_zero_points().with_bias()
            .launches({"matmul_nbits_accuracy4"}),
        C::f32("f32 int8 prefill through dequantization and cuBLASLt", 3, 1000, 77)
            .int8().with_zero_points().with_bias()
            .launches({"matmul_nbits_dequant_f32"}, true),
        C::f32("f32 int4 decode with g_idx through dequantization and cuBLASLt", 1, 256, 48)
            .with_zero_points().with_g_idx()
            .launches({"matmul_nbits_dequant_f32"}, true),

        // fp16 activations, M = 1
        C::f16("fp16 int8 block-32 decode on 64 threads, K not a multiple of 8", 1, 1003, 77)
            .int8().with_bias()
            .launches({"matmul_nbits_gemv_int8_f16"}),
        C::f16("fp16 int8 block-32 zero-point decode split over K", 1, 2048, 1536)
            .int8().with_zero_points()
            .launches({"matmul_nbits_gemv_int8_f16_splitk"}),
        C::f16("fp16 int4 fp32-scale decode, K not a multiple of 8", 1, 1003, 77)
            .fp32_scales().with_bias()
            .launches({"matmul_nbits_gemv_f16"}),
        C::f16("fp16 int4 wide decode on 256 threads with an N tail and a folded bias", 1, 1000, 1155)
            .with_folded_bias()
            .launches({"matmul_nbits_gemv_f16_scales_f16"}),
        C::f16("fp16 int4 zero-point decode on 64 threads", 1, 1000, 77)
            .with_zero_points().with_bias()
            .launches({"matmul_nbits_gemv_f16_scales_f16_zp"}),
        C::f16("fp16 int4 zero-point decode split over K", 1, 2048, 1536)
            .with_zero_points()
            .launches({"matmul_nbits_gemv_f16_scales_f16_zp_splitk"}),
        C::f16("fp16 down projection on 8 columns per CTA with a folded bias", 1, 2048, 520)
            .with_folded_bias().forced_down_columns("8")
            .launches({"matmul_nbits_gemv_f16_scales_f16_down"}),
        C::f16("fp16 down projection on 4 columns per CTA", 1, 2048, 518)
            .forced_down_columns("4")
            .launches({"matmul_nbits_gemv_f16_scales_f16_down_c4"}),
        C::f16("fp16 down projection on 2 columns per CTA with a native bias", 1, 2048, 516)
            .with_bias().forced_down_columns("2")
            .launches({"matmul_nbits_gemv_f16_scales_f16_down_c2"}),
        C::f16("fp16 int4 block-16 zero-point decode", 1, 1000, 77)
            .block(16).with_zero_points()
            .launches({"matmul_nbits_gemv_f16_general_bs"}),
        C::f16("fp16 int8 block-64 decode", 1, 1000, 77)
            .int8().block(64).with_bias()
            .launches({"matmul_nbits_gemv_f16_general_bs"}),
        C::f16("fp16 int4 block-128 fp32-scale zero-point decode", 1, 1000, 77)
            .block(128).fp32_scales().with_zero_points()
            .launches({"matmul_nbits_gemv_f16_general_bs"}),
        C::f16("fp16 int4 RMS-norm prologue decode, fp16 gamma", 1, 1024, 77)
            .rmsnorm(f16)
            .launches({"matmul_nbits_gemv_f16_scales_f16_rmsnorm"}),
        C::f16("fp16 int4 zero-point RMS-norm prologue decode, fp32 gamma, native bias", 1, 1280, 77)
            .rmsnorm(f32).with_zero_points().with_bias()
            .launches({"matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp"}),
        C::f16("fp16 int8 RMS-norm prologue decode, fp16 gamma, folded bias", 1, 1024, 77)
            .int8().rmsnorm(f16).with_folded_bias()
            .launches({"matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm"}),
        C::f16("fp16 int8 zero-point RMS-norm prologue decode, fp32 gamma", 1, 2048, 1536)
            .int8().rmsnorm(f32).with_zero_points()
            .launches({"matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp"}),
        C::f16("paired gate/up SwiGLU decode", 1, 896, 77)
            .paired_gate_up()
            .launches({"matmul_nbits_gemv_f16_gate_up_swiglu"}),
        C::f16("paired gate/up SwiGLU zero-point decode", 1, 896, 77)
            .paired_gate_up().with_zero_points()
            .launches({"matmul_nbits_gemv_f16_gate_up_swiglu_zp"}),
        C::f16("paired gate/up SwiGLU RMS-norm decode, fp16 gamma", 1, 896, 77)
            .paired_gate_up().rmsnorm(f16)
            .launches({"matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm"}),
        C::f16("paired gate/up SwiGLU zero-point RMS-norm decode, fp32 gamma", 1, 896, 77)
            .paired_gate_up().rmsnorm(f32).with_zero_points()
            .launches({"matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp"}),

        // fp16 activations, M > 1
        C::f16("fp16 int4 block-32 fp32-scale zero-point prefill with M and N tails", 17, 1000, 77)
            .fp32_scales().with_zero_points().with_bias()
            .launches({"matmul_nbits_gemm_f16"}),
        C::f16("fp16 int8 block-64 zero-point prefill", 5, 1000, 77)
            .int8().block(64).with_zero_points()
            .launches({"matmul_nbits_gemm_f16_general_bs"}),
        C::f16("fp16 int4 block-16 prefill with a folded per-token residual", 3, 1000, 77)
            .block(16).with_folded_residual()
            .launches({"matmul_nbits_gemm_f16_general_bs"}),
        C::f16("fp16 int4 zero-point RMS-norm prologue prefill, fp32 gamma", 5, 1024, 77)
            .rmsnorm(f32).with_zero_points().with_bias()
            .launches({"matmul_nbits_rmsnorm_f16_warp_half4", "matmul_nbits_gemm_f16"}),
        C::f16("paired gate/up SwiGLU zero-point prefill", 3, 896, 77)
            .paired_gate_up().with_zero_points()
            .launches({"matmul_nbits_gemm_f16", "matmul_nbits_gemm_f16", "matmul_nbits_silu_mul_f16"}),
        C::f16("paired gate/up SwiGLU RMS-norm prefill, fp32 gamma", 5, 896, 77)
            .paired_gate_up().rmsnorm(f32)
            .launches({"matmul_nbits_rmsnorm_f16_warp_half4", "matmul_nbits_gemm_f16", "matmul_nbits_gemm_f16",
                       "matmul_nbits_silu_mul_f16"}),
    };
    return cases;
}

const std::set<std::string>& all_kernel_entries()
{
    static const std::set<std::string> entries = {
        "matmul_nbits_dequant_f32",
        "matmul_nbits_accuracy4",
        "matmul_nbits_gemv_f32",
        "matmul_nbits_gemv_int8_f32",
        "matmul_nbits_gemv_int8_f32_block128",
        "matmul_nbits_gemv_int4_f32_block128",
        "matmul_nbits_quantize_accuracy4_block32",
        "matmul_nbits_gemv_accuracy4_block32",
        "matmul_nbits_gemv_accuracy4_block32_stage64",
        "matmul_nbits_quantize_accuracy4_blockwise",
        "matmul_nbits_gemv_accuracy4_blockwise",
        "matmul_nbits_gemv_int8_f16",
        "matmul_nbits_gemv_int8_f16_splitk",
        "matmul_nbits_gemm_f16",
        "matmul_nbits_gemv_f16",
        "matmul_nbits_gemv_f16_scales_f16",
        "matmul_nbits_gemv_f16_scales_f16_zp",
        "matmul_nbits_gemv_f16_scales_f16_zp_splitk",
        "matmul_nbits_gemv_f16_scales_f16_rmsnorm",
        "matmul_nbits_gemv_f16_scales_f16_rmsnorm_zp",
        "matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm",
        "matmul_nbits_gemv_int8_f16_scales_f16_rmsnorm_zp",
        "matmul_nbits_rmsnorm_f16_warp_half4",
        "matmul_nbits_gemv_f16_gate_up_swiglu",
        "matmul_nbits_gemv_f16_gate_up_swiglu_zp",
        "matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm",
        "matmul_nbits_gemv_f16_gate_up_swiglu_rmsnorm_zp",
        "matmul_nbits_gemv_f16_scales_f16_down",
        "matmul_nbits_gemv_f16_scales_f16_down_c4",
        "matmul_nbits_gemv_f16_scales_f16_down_c2",
        "matmul_nbits_gemv_f16_general_bs",
        "matmul_nbits_gemm_f16_general_bs",
        "matmul_nbits_silu_mul_f16",
    };
    return entries;
}

}  // namespace nbits::test
