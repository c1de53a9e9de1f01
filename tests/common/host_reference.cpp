#include "host_reference.hpp"

#include "host_half.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

namespace nbits::test {

float Lcg::next()
{
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<float>(state_ >> 33) / static_cast<float>(std::numeric_limits<std::uint32_t>::max())) * 2.0f -
           1.0f;
}

std::vector<std::uint8_t> Lcg::codes(std::size_t count, int max)
{
    const float top = static_cast<float>(max);
    std::vector<std::uint8_t> values(count);
    for (auto& value : values) {
        value = static_cast<std::uint8_t>(std::clamp(std::round(unit() * top), 0.0f, top));
    }
    return values;
}

std::vector<std::uint16_t> Lcg::halves(std::size_t count, float range)
{
    std::vector<std::uint16_t> values(count);
    for (auto& value : values) {
        value = float_to_half(next() * range);
    }
    return values;
}

std::vector<float> Lcg::floats(std::size_t count)
{
    std::vector<float> values(count);
    for (auto& value : values) {
        value = next();
    }
    return values;
}

std::vector<float> Lcg::scales(std::size_t count)
{
    std::vector<float> values(count);
    for (auto& value : values) {
        value = 0.015f + 0.01f * unit();
    }
    return values;
}

std::vector<std::uint16_t> Lcg::half_scales(std::size_t count) { return to_halves(scales(count)); }

std::vector<float> Lcg::gammas(std::size_t count)
{
    std::vector<float> values(count);
    for (auto& value : values) {
        value = 0.5f + 0.5f * unit();
    }
    return values;
}

std::vector<std::uint8_t> Lcg::int8_zero_points(std::size_t count)
{
    std::vector<std::uint8_t> values(count);
    for (auto& value : values) {
        value = static_cast<std::uint8_t>(std::clamp(std::round(128.0f + next() * 16.0f), 96.0f, 160.0f));
    }
    return values;
}

std::vector<float> half_values(const std::vector<std::uint16_t>& halves)
{
    std::vector<float> values(halves.size());
    std::transform(halves.begin(), halves.end(), values.begin(), half_to_float);
    return values;
}

std::vector<std::uint16_t> to_halves(const std::vector<float>& values)
{
    std::vector<std::uint16_t> halves(values.size());
    std::transform(values.begin(), values.end(), halves.begin(), float_to_half);
    return halves;
}

std::uint16_t float_to_bfloat16(float value)
{
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // keep it a NaN, quiet
    }
    // Adding 0x7fff plus the kept part's lowest bit rounds half to even; a
    // carry into the exponent is the correct rounding, up to infinity.
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}

float bfloat16_to_float(std::uint16_t bits)
{
    const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &widened, sizeof(value));
    return value;
}

std::vector<float> bfloat16_values(const std::vector<std::uint16_t>& bits)
{
    std::vector<float> values(bits.size());
    std::transform(bits.begin(), bits.end(), values.begin(), bfloat16_to_float);
    return values;
}

std::vector<std::uint16_t> to_bfloat16s(const std::vector<float>& values)
{
    std::vector<std::uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(), float_to_bfloat16);
    return bits;
}

namespace {

template <typename T>
std::vector<std::uint8_t> raw_bytes(const std::vector<T>& values)
{
    std::vector<std::uint8_t> bytes(values.size() * sizeof(T));
    if (!bytes.empty()) {
        std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    return bytes;
}

template <typename T>
std::vector<T> from_bytes(const std::vector<std::uint8_t>& bytes)
{
    std::vector<T> values(bytes.size() / sizeof(T));
    if (!values.empty()) {
        std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
    }
    return values;
}

}  // namespace

std::vector<float> real_values(DataType dtype, const std::vector<std::uint8_t>& bytes)
{
    switch (dtype) {
    case DataType::Float16: return half_values(from_bytes<std::uint16_t>(bytes));
    case DataType::BFloat16: return bfloat16_values(from_bytes<std::uint16_t>(bytes));
    case DataType::Float32: return from_bytes<float>(bytes);
    default: throw std::invalid_argument(std::string("real_values: ") + to_string(dtype) + " holds no real values");
    }
}

std::vector<float> stored_values(DataType dtype, const std::vector<float>& values)
{
    switch (dtype) {
    case DataType::Float16: return half_values(to_halves(values));
    case DataType::BFloat16: return bfloat16_values(to_bfloat16s(values));
    default: return values;
    }
}

HostTensor HostTensor::absent(DataType dtype) { return HostTensor{dtype, {}, {}, false}; }

HostTensor HostTensor::f16(std::vector<std::size_t> shape, const std::vector<std::uint16_t>& halves)
{
    return HostTensor{DataType::Float16, std::move(shape), raw_bytes(halves), true};
}

HostTensor HostTensor::bf16(std::vector<std::size_t> shape, const std::vector<std::uint16_t>& bits)
{
    return HostTensor{DataType::BFloat16, std::move(shape), raw_bytes(bits), true};
}

HostTensor HostTensor::f32(std::vector<std::size_t> shape, const std::vector<float>& values)
{
    return HostTensor{DataType::Float32, std::move(shape), raw_bytes(values), true};
}

HostTensor HostTensor::u8(std::vector<std::size_t> shape, std::vector<std::uint8_t> values)
{
    return HostTensor{DataType::Uint8, std::move(shape), std::move(values), true};
}

HostTensor HostTensor::i32(std::vector<std::size_t> shape, const std::vector<std::int32_t>& values)
{
    return HostTensor{DataType::Int32, std::move(shape), raw_bytes(values), true};
}

HostTensor HostTensor::real(DataType dtype, std::vector<std::size_t> shape, const std::vector<float>& values)
{
    if (dtype == DataType::Float16) {
        return f16(std::move(shape), to_halves(values));
    }
    if (dtype == DataType::BFloat16) {
        return bf16(std::move(shape), to_bfloat16s(values));
    }
    return f32(std::move(shape), values);
}

void trim_absent_tail(std::vector<HostTensor>& inputs)
{
    while (!inputs.empty() && !inputs.back().present) {
        inputs.pop_back();
    }
}

int QuantizedWeights::code(std::size_t column, std::size_t depth) const
{
    const std::size_t block = depth / block_size;
    const std::size_t within = depth % block_size;
    const std::size_t base = (column * k_blocks() + block) * blob_size();
    if (bits == 8) {
        return packed[base + within];
    }
    const std::uint8_t byte = packed[base + within / 2];
    return (within & 1) ? byte >> 4 : byte & 15;
}

int QuantizedWeights::zero_point(std::size_t column, std::size_t group) const
{
    if (zero_points.empty()) {
        return bits == 8 ? 128 : 8;
    }
    if (bits == 8) {
        return zero_points[column * zp_row_bytes() + group];
    }
    const std::uint8_t byte = zero_points[column * zp_row_bytes() + group / 2];
    return (group & 1) ? byte >> 4 : byte & 15;
}

double QuantizedWeights::weight(std::size_t column, std::size_t depth) const
{
    const std::size_t group = depth / block_size;
    return static_cast<double>(code(column, depth) - zero_point(column, group)) *
           static_cast<double>(scales[column * k_blocks() + group]);
}

HostTensor QuantizedWeights::packed_tensor() const { return HostTensor::u8({n, k_blocks(), blob_size()}, packed); }

HostTensor QuantizedWeights::scales_tensor(DataType dtype) const
{
    return HostTensor::real(dtype, {n, k_blocks()}, scales);
}

HostTensor QuantizedWeights::zero_points_tensor() const
{
    return zero_points.empty() ? HostTensor::absent(DataType::Uint8)
                               : HostTensor::u8({n, zp_row_bytes()}, zero_points);
}

std::vector<std::uint8_t> pack_codes(const std::vector<std::uint8_t>& codes, std::size_t n, std::size_t k,
                                     std::size_t block_size, std::size_t bits)
{
    if (bits == 8) {
        return codes;  // one byte per weight: [n, k_blocks, block_size] is [n][k]
    }
    const std::size_t k_blocks = k / block_size;
    const std::size_t blob_size = block_size / 2;
    std::vector<std::uint8_t> packed(n * k_blocks * blob_size);
    for (std::size_t column = 0; column < n; ++column) {
        for (std::size_t block = 0; block < k_blocks; ++block) {
            for (std::size_t pair = 0; pair < blob_size; ++pair) {
                const std::size_t depth = block * block_size + pair * 2;
                const std::uint8_t low = codes[column * k + depth] & 15;
                const std::uint8_t high = codes[column * k + depth + 1] & 15;
                packed[(column * k_blocks + block) * blob_size + pair] = static_cast<std::uint8_t>(low | (high << 4));
            }
        }
    }
    return packed;
}

std::vector<std::uint8_t> pack_int4_zero_points(const std::vector<std::uint8_t>& codes, std::size_t n,
                                                std::size_t k_blocks)
{
    const std::size_t row_bytes = (k_blocks + 1) / 2;
    std::vector<std::uint8_t> packed(n * row_bytes, 0);
    for (std::size_t column = 0; column < n; ++column) {
        for (std::size_t block = 0; block < k_blocks; ++block) {
            const std::uint8_t code = codes[column * k_blocks + block] & 15;
            std::uint8_t& byte = packed[column * row_bytes + block / 2];
            byte = (block & 1) ? static_cast<std::uint8_t>((byte & 0x0f) | (code << 4))
                               : static_cast<std::uint8_t>((byte & 0xf0) | code);
        }
    }
    return packed;
}

std::vector<float> oracle_matmul(const std::vector<float>& activation, std::size_t m, const QuantizedWeights& weights,
                                 const std::vector<float>& bias, const std::vector<std::int32_t>& g_idx)
{
    const std::size_t k = weights.k;
    const std::size_t n = weights.n;
    const std::size_t k_blocks = weights.k_blocks();
    std::vector<float> expected(m * n);
    for (std::size_t column = 0; column < n; ++column) {
        for (std::size_t row = 0; row < m; ++row) {
            double acc = 0.0;
            for (std::size_t depth = 0; depth < k; ++depth) {
                const std::size_t group = g_idx.empty() ? depth / weights.block_size : static_cast<std::size_t>(g_idx[depth]);
                const int q = weights.code(column, depth) - weights.zero_point(column, group);
                acc += static_cast<double>(activation[row * k + depth]) * static_cast<double>(q) *
                       static_cast<double>(weights.scales[column * k_blocks + group]);
            }
            if (!bias.empty()) {
                acc += static_cast<double>(bias[column]);
            }
            expected[row * n + column] = static_cast<float>(acc);
        }
    }
    return expected;
}

void OracleError::merge(const OracleError& other)
{
    max_abs = std::max(max_abs, other.max_abs);
    max_rel = std::max(max_rel, other.max_rel);
    max_out = std::max(max_out, other.max_out);
    all_finite = all_finite && other.all_finite;
}

std::string OracleError::describe() const
{
    return fmt::format("max_abs={:.3e} max_rel={:.3e} max_out={:.3e}", max_abs, max_rel, max_out);
}

OracleError oracle_error(const std::vector<float>& got, const std::vector<float>& expected)
{
    OracleError error;
    for (std::size_t i = 0; i < got.size() && i < expected.size(); ++i) {
        if (!std::isfinite(got[i])) {
            error.all_finite = false;
        }
        const float abs = std::fabs(got[i] - expected[i]);
        const float rel = abs / std::max(std::fabs(expected[i]), 1e-1f);
        error.max_abs = std::max(error.max_abs, abs);
        error.max_rel = std::max(error.max_rel, rel);
        error.max_out = std::max(error.max_out, std::fabs(expected[i]));
    }
    if (got.size() != expected.size()) {
        error.all_finite = false;
    }
    return error;
}

float oracle_bound(const OracleError& error, float relative) { return std::max(error.max_out * relative, 1e-3f); }

bool within_oracle_bound(const OracleError& error, float relative)
{
    return error.all_finite && error.max_abs < oracle_bound(error, relative) && error.max_rel < 5e-2f;
}

namespace {

// Row `row` of A as the matrix product sees it: RMS-normalized and scaled by
// gamma when the node has the prologue.
std::vector<double> effective_row(const OracleNode& node, std::size_t row)
{
    const std::size_t k = node.weights->k;
    std::vector<double> a(k);
    for (std::size_t depth = 0; depth < k; ++depth) {
        a[depth] = static_cast<double>((*node.activation)[row * k + depth]);
    }
    if (node.gamma != nullptr) {
        double sum_of_squares = 0.0;
        for (const double value : a) {
            sum_of_squares += value * value;
        }
        const double inverse_rms =
            1.0 / std::sqrt(sum_of_squares / static_cast<double>(k) + static_cast<double>(node.epsilon));
        for (std::size_t depth = 0; depth < k; ++depth) {
            a[depth] *= inverse_rms * static_cast<double>((*node.gamma)[depth]);
        }
    }
    return a;
}

// W's dequantised values at `column`, in K order.
std::vector<double> dequantised_column(const QuantizedWeights& weights, std::size_t column)
{
    std::vector<double> values(weights.k);
    for (std::size_t depth = 0; depth < weights.k; ++depth) {
        values[depth] = weights.weight(column, depth);
    }
    return values;
}

double dot(const std::vector<double>& a, const std::vector<double>& w)
{
    double sum = 0.0;
    for (std::size_t depth = 0; depth < a.size(); ++depth) {
        sum += a[depth] * w[depth];
    }
    return sum;
}

}  // namespace

std::vector<float> oracle_at(const OracleNode& node, const std::vector<std::size_t>& rows,
                             const std::vector<std::size_t>& columns)
{
    std::vector<std::vector<double>> a;
    a.reserve(rows.size());
    for (const std::size_t row : rows) {
        a.push_back(effective_row(node, row));
    }
    std::vector<float> expected(rows.size() * columns.size());
    // Each column is dequantised once for all rows; columns are shared out
    // over the host's cores (a prefill node is M x N x K in float64).
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t c = next++; c < columns.size(); c = next++) {
            const std::size_t column = columns[c];
            const std::vector<double> gate = dequantised_column(*node.weights, column);
            const std::vector<double> up =
                node.up != nullptr ? dequantised_column(*node.up, column) : std::vector<double>{};
            for (std::size_t r = 0; r < rows.size(); ++r) {
                double y = dot(a[r], gate);
                if (node.up != nullptr) {
                    y = y / (1.0 + std::exp(-y)) * dot(a[r], up);
                }
                if (node.bias != nullptr) {
                    y += static_cast<double>((*node.bias)[column]);
                }
                expected[r * columns.size() + c] = static_cast<float>(y);
            }
        }
    };
    const std::size_t work_per_thread = 1u << 22;  // multiply-adds worth a thread
    const std::size_t wanted = std::max<std::size_t>(1, rows.size() * columns.size() * node.weights->k / work_per_thread);
    const std::size_t threads = std::min<std::size_t>({wanted, columns.size(),
                                                       std::max(1u, std::thread::hardware_concurrency())});
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) {
        pool.emplace_back(work);
    }
    work();
    for (std::thread& thread : pool) {
        thread.join();
    }
    return expected;
}

std::vector<HostTensor> GemvProblem::inputs() const
{
    const std::size_t k = spec.k;
    const std::size_t n = spec.n;
    std::vector<HostTensor> inputs;
    inputs.push_back(HostTensor::real(spec.activation, {1, k}, activation));
    inputs.push_back(weights.packed_tensor());
    inputs.push_back(weights.scales_tensor(spec.scales));
    inputs.push_back(weights.zero_points_tensor());
    inputs.push_back(HostTensor::absent(DataType::Int32));
    inputs.push_back(bias.empty() ? HostTensor::absent(spec.activation) : HostTensor::real(spec.activation, {n}, bias));
    trim_absent_tail(inputs);
    return inputs;
}

GemvProblem draw_gemv_problem(std::uint64_t seed, const GemvProblemSpec& spec)
{
    Lcg lcg(seed);
    GemvProblem problem;
    problem.spec = spec;
    const bool f16_activation = spec.activation == DataType::Float16;
    problem.activation = f16_activation ? half_values(lcg.halves(spec.k)) : lcg.floats(spec.k);

    QuantizedWeights& weights = problem.weights;
    weights.k = spec.k;
    weights.n = spec.n;
    weights.bits = spec.bits;
    weights.block_size = spec.block_size;
    const int top = spec.bits == 8 ? 255 : 15;
    weights.packed = pack_codes(lcg.codes(spec.n * spec.k, top), spec.n, spec.k, spec.block_size, spec.bits);
    if (spec.zero_points) {
        const std::vector<std::uint8_t> codes = lcg.codes(spec.n * weights.k_blocks(), top);
        weights.zero_points = spec.bits == 8 ? codes : pack_int4_zero_points(codes, spec.n, weights.k_blocks());
    }
    weights.scales = lcg.scales(spec.n * weights.k_blocks());
    if (spec.scales == DataType::Float16) {
        weights.scales = half_values(to_halves(weights.scales));
    }
    if (spec.bias) {
        problem.bias = f16_activation ? half_values(lcg.halves(spec.n, spec.bias_range)) : lcg.floats(spec.n);
    }
    return problem;
}

}  // namespace nbits::test
