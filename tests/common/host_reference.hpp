#pragma once

// Host-side data of MatMulNBits, shared by the GPU tests and nbits-bench: the
// original tests' generator, fp16 and bf16 host conversion, the packed layouts
// the kernels read, and the float64 oracle Y = A · dequant(B)ᵀ (+ bias), with
// the paired gate/up SwiGLU and the RMS-norm prologue.

#include "nbits/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nbits::test {

// The original tests' generator: a 64-bit LCG whose next() maps the top 31
// bits of the state to f32 exactly as they computed it. Their formula divides
// by 2^32 - 1, so next() covers [-1, 0] only, and unit() [0, 0.5].
class Lcg {
public:
    explicit Lcg(std::uint64_t seed) : state_(seed) {}

    float next();
    float unit() { return next() * 0.5f + 0.5f; }  // [0, 0.5], see next()

    // Quantization codes round(unit() * max), clamped to [0, max] (so at most
    // max / 2 rounded, see next()).
    std::vector<std::uint8_t> codes(std::size_t count, int max);
    // fp16 bits of next() * range.
    std::vector<std::uint16_t> halves(std::size_t count, float range = 1.0f);
    std::vector<float> floats(std::size_t count);
    // Weight scales 0.015 + 0.01 * unit() (so [0.015, 0.02]), as f32 and as fp16 bits.
    std::vector<float> scales(std::size_t count);
    std::vector<std::uint16_t> half_scales(std::size_t count);
    // RMS-norm weights 0.5 + 0.5 * unit() (so [0.5, 0.75]).
    std::vector<float> gammas(std::size_t count);
    // Asymmetric int8 zero points round(128 + 16 * next()), clamped to [96, 160]
    // (so [112, 128], see next()).
    std::vector<std::uint8_t> int8_zero_points(std::size_t count);

private:
    std::uint64_t state_;
};

std::vector<float> half_values(const std::vector<std::uint16_t>& halves);
std::vector<std::uint16_t> to_halves(const std::vector<float>& values);

// bfloat16 bits of a float, rounded to nearest even (as __float2bfloat16_rn);
// a NaN stays a (quiet) NaN.
std::uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(std::uint16_t bits);
std::vector<float> bfloat16_values(const std::vector<std::uint16_t>& bits);
std::vector<std::uint16_t> to_bfloat16s(const std::vector<float>& values);

// The float values of Float16, BFloat16 or Float32 bytes (a device output, a
// host tensor). Throws std::invalid_argument for any other dtype.
std::vector<float> real_values(DataType dtype, const std::vector<std::uint8_t>& bytes);
// `values` as a `dtype` tensor holds them: Float16 and BFloat16 round to
// nearest even, Float32 keeps them.
std::vector<float> stored_values(DataType dtype, const std::vector<float>& values);

// An operator input as host data, or an absent optional input.
struct HostTensor {
    DataType dtype = DataType::Float32;
    std::vector<std::size_t> shape;
    std::vector<std::uint8_t> bytes;
    bool present = true;

    static HostTensor absent(DataType dtype);
    static HostTensor f16(std::vector<std::size_t> shape, const std::vector<std::uint16_t>& halves);
    static HostTensor bf16(std::vector<std::size_t> shape, const std::vector<std::uint16_t>& bits);
    static HostTensor f32(std::vector<std::size_t> shape, const std::vector<float>& values);
    static HostTensor u8(std::vector<std::size_t> shape, std::vector<std::uint8_t> values);
    static HostTensor i32(std::vector<std::size_t> shape, const std::vector<std::int32_t>& values);
    // Float values stored as `dtype` (Float16 and BFloat16 round to nearest
    // even; any other dtype stores Float32).
    static HostTensor real(DataType dtype, std::vector<std::size_t> shape, const std::vector<float>& values);
};

// Drops the absent inputs after the last present one, as the original tests
// passed only the slots up to the last optional input they used.
void trim_absent_tail(std::vector<HostTensor>& inputs);

// Block-quantized weights in MatMulNBits' layout: B [n, k_blocks, blob] with
// int4 codes two per byte (low nibble first) or int8 codes one per byte;
// scales [n, k_blocks]; zero points [n, zp_row_bytes], int4 two block nibbles
// per byte (even block in the low nibble), int8 one byte per block.
struct QuantizedWeights {
    std::size_t k = 0;
    std::size_t n = 0;
    std::size_t bits = 4;
    std::size_t block_size = 32;
    std::vector<std::uint8_t> packed;
    std::vector<float> scales;              // the values the kernels read
    std::vector<std::uint8_t> zero_points;  // empty: symmetric (8 or 128)

    std::size_t k_blocks() const { return (k + block_size - 1) / block_size; }
    std::size_t blob_size() const { return block_size * bits / 8; }
    std::size_t zp_row_bytes() const { return (k_blocks() * bits + 7) / 8; }
    int code(std::size_t column, std::size_t depth) const;
    int zero_point(std::size_t column, std::size_t group) const;
    // (code - zero point) * scale at (column, depth), block-wise, in float64.
    double weight(std::size_t column, std::size_t depth) const;

    HostTensor packed_tensor() const;
    HostTensor scales_tensor(DataType dtype) const;
    HostTensor zero_points_tensor() const;  // absent when symmetric
};

// Codes [n][k] (each column's depths in order) packed block-wise; k must be a
// multiple of block_size.
std::vector<std::uint8_t> pack_codes(const std::vector<std::uint8_t>& codes, std::size_t n, std::size_t k,
                                     std::size_t block_size, std::size_t bits);
// Int4 zero-point codes [n][k_blocks] packed two block nibbles per byte.
std::vector<std::uint8_t> pack_int4_zero_points(const std::vector<std::uint8_t>& codes, std::size_t n,
                                                std::size_t k_blocks);

// Y[m, n] = A[m, k] · dequant(W)ᵀ (+ bias[n]) in float64, rounded to f32 at
// the end. Dequantization follows the original: the code at depth d comes from
// block d / block_size, its scale and zero point from group g_idx[d] (that
// block when there is no g_idx); each term is a * (q - zp) * scale.
std::vector<float> oracle_matmul(const std::vector<float>& activation, std::size_t m, const QuantizedWeights& weights,
                                 const std::vector<float>& bias = {}, const std::vector<std::int32_t>& g_idx = {});

// The original parity tests' error measures against the oracle: absolute, and
// relative to max(|expected|, 0.1) so that near-zero outputs do not dominate.
struct OracleError {
    float max_abs = 0.0f;
    float max_rel = 0.0f;
    float max_out = 0.0f;  // the largest |expected|
    bool all_finite = true;

    void merge(const OracleError& other);
    std::string describe() const;
};

OracleError oracle_error(const std::vector<float>& got, const std::vector<float>& expected);

// The original parity tests' bound: every output finite, max_abs below
// max(max_out * relative, 1e-3), and max_rel below 5e-2. `relative` was 1e-3
// for its int4 fp16 GEMVs and 2e-3 for int8 and f32.
float oracle_bound(const OracleError& error, float relative);
bool within_oracle_bound(const OracleError& error, float relative);

// One node for the float64 oracle at chosen output elements. A is
// RMS-normalized first when `gamma` is given: a * gamma / sqrt(mean(a^2) + epsilon)
// per row. Y = A · dequant(W)ᵀ (+ bias), or for the paired gate/up node
// (`up` given) Y = silu(A · dequant(W_gate)ᵀ) * (A · dequant(W_up)ᵀ).
struct OracleNode {
    const std::vector<float>* activation = nullptr;  // [m, k], the values the kernels read
    std::size_t m = 0;
    const QuantizedWeights* weights = nullptr;       // W, or W_gate
    const QuantizedWeights* up = nullptr;            // W_up of the paired node
    const std::vector<float>* bias = nullptr;        // [n]
    const std::vector<float>* gamma = nullptr;       // [k]
    float epsilon = 1e-5f;
};

// Y at every (row, column) of rows x columns, row-major, in float64 rounded to
// f32 at the end. Cost: rows x columns x K per projection, so a large node is
// checked on a sample.
std::vector<float> oracle_at(const OracleNode& node, const std::vector<std::size_t>& rows,
                             const std::vector<std::size_t>& columns);

// The original M = 1 GEMV parity problem, drawn in its order: activation,
// codes, zero points (when explicit), scales, bias (when present).
struct GemvProblemSpec {
    std::size_t k = 0;
    std::size_t n = 0;
    std::size_t block_size = 32;
    std::size_t bits = 4;
    DataType activation = DataType::Float16;
    DataType scales = DataType::Float16;
    bool zero_points = false;
    bool bias = false;
    float bias_range = 1.0f;  // an fp16 bias is fp16(next() * bias_range)
};

struct GemvProblem {
    GemvProblemSpec spec;
    std::vector<float> activation;  // the values the kernels read
    QuantizedWeights weights;
    std::vector<float> bias;        // empty without a bias

    // [A, B, scales, (zero_points), (g_idx absent, bias)] as the original passed them.
    std::vector<HostTensor> inputs() const;
    std::vector<float> oracle() const { return oracle_matmul(activation, 1, weights, bias); }
};

GemvProblem draw_gemv_problem(std::uint64_t seed, const GemvProblemSpec& spec);

}  // namespace nbits::test
