#include "reference.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace nbits::bench {
namespace {

constexpr std::size_t kSampledColumns = 64;

// First, middle and last rows: the ends catch off-by-one row strides.
std::vector<std::size_t> sampled_rows(std::size_t m)
{
    std::vector<std::size_t> rows = {0, m / 2, m - 1};
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

// Evenly spread, always including the first and the last column.
std::vector<std::size_t> sampled_columns(std::size_t n)
{
    if (n <= kSampledColumns) {
        std::vector<std::size_t> all(n);
        for (std::size_t c = 0; c < n; ++c) {
            all[c] = c;
        }
        return all;
    }
    std::vector<std::size_t> columns(kSampledColumns);
    for (std::size_t i = 0; i < kSampledColumns; ++i) {
        columns[i] = i * (n - 1) / (kSampledColumns - 1);
    }
    return columns;
}

// The activation row the matrix product sees: RMS-normalized and scaled by
// gamma when the node carries the prologue.
std::vector<double> effective_activation(const HostData& host, std::size_t row)
{
    const Node& node = host.node();
    const std::size_t k = node.shape.k;
    const int slot = host.find(Role::Activation);
    std::vector<double> a(k);
    for (std::size_t d = 0; d < k; ++d) {
        a[d] = host.value(slot, row * k + d);
    }
    if (node.path.rmsnorm_prologue) {
        double sum_of_squares = 0.0;
        for (double value : a) {
            sum_of_squares += value * value;
        }
        const double inverse_rms =
            1.0 / std::sqrt(sum_of_squares / static_cast<double>(k) + static_cast<double>(node.path.rmsnorm_epsilon));
        const int gamma = host.find(Role::Gamma);
        for (std::size_t d = 0; d < k; ++d) {
            a[d] *= inverse_rms * host.value(gamma, d);
        }
    }
    return a;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

double tolerance_for(const PathConfig& path)
{
    if (path.activation == DataType::Float16) {
        return 2e-2;
    }
    if (path.accuracy_level == 4) {
        return 2e-2;
    }
    return 1e-3;
}

CheckResult check_output(CudaRuntime& runtime, const HostData& host, CUdeviceptr output)
{
    const Node& node = host.node();
    const std::size_t k = node.shape.k;
    const std::size_t n = node.shape.n;
    const std::size_t element = element_size(node.output.dtype);
    const std::vector<std::size_t> rows = sampled_rows(node.shape.m);
    const std::vector<std::size_t> columns = sampled_columns(n);
    const int projections = node.shape.paired() ? 2 : 1;
    const int bias = host.find(Role::Bias);

    // One dequantized column per projection, reused by every sampled row.
    std::vector<std::vector<std::vector<double>>> weights(columns.size());
    for (std::size_t c = 0; c < columns.size(); ++c) {
        weights[c].resize(static_cast<std::size_t>(projections));
        for (int p = 0; p < projections; ++p) {
            std::vector<double>& column = weights[c][static_cast<std::size_t>(p)];
            column.resize(k);
            for (std::size_t d = 0; d < k; ++d) {
                column[d] = host.weight(p, columns[c], d);
            }
        }
    }

    CheckResult result;
    result.tolerance = tolerance_for(node.path);
    double max_difference = 0.0;
    double max_reference = 0.0;
    std::vector<std::uint8_t> row_bytes(n * element);
    for (std::size_t row : rows) {
        runtime.dtoh(row_bytes.data(), output + row * n * element, row_bytes.size());
        for (std::size_t column = 0; column < n; ++column) {
            if (!std::isfinite(load_float(row_bytes.data(), node.output.dtype, column))) {
                ++result.non_finite;
            }
        }
        const std::vector<double> a = effective_activation(host, row);
        for (std::size_t c = 0; c < columns.size(); ++c) {
            double dots[2] = {0.0, 0.0};
            for (int p = 0; p < projections; ++p) {
                const std::vector<double>& w = weights[c][static_cast<std::size_t>(p)];
                double sum = 0.0;
                for (std::size_t d = 0; d < k; ++d) {
                    sum += a[d] * w[d];
                }
                dots[p] = sum;
            }
            double reference = node.shape.paired() ? silu(dots[0]) * dots[1] : dots[0];
            if (bias >= 0) {
                reference += host.value(bias, columns[c]);
            }
            const double got = load_float(row_bytes.data(), node.output.dtype, columns[c]);
            if (std::isfinite(got)) {
                max_difference = std::max(max_difference, std::fabs(got - reference));
            }
            max_reference = std::max(max_reference, std::fabs(reference));
            ++result.values_checked;
        }
    }
    result.max_error = max_difference / std::max(max_reference, 1e-30);
    result.passed = result.non_finite == 0 && result.max_error <= result.tolerance;
    result.summary = fmt::format("{} of {}x{} sampled values: max error {:.2e} of max |ref| {:.3g} (tolerance {:.0e}), "
                                 "{} non-finite in {} full rows",
                                 result.passed ? "ok" : "MISMATCH", rows.size(), columns.size(), result.max_error,
                                 max_reference, result.tolerance, result.non_finite, rows.size());
    return result;
}

}  // namespace nbits::bench
