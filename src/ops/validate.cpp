#include "ops/validate.hpp"

#include "ops/errors.hpp"

#include <fmt/format.h>

#include <limits>

namespace nbits::ops::detail {

void require_dtype(std::string_view name, DataType got, DataType expected)
{
    if (got != expected) {
        fail(fmt::format("{} must have dtype {}, got {}", name, to_string(expected), to_string(got)));
    }
}

void require_gamma_dtype(DataType got)
{
    if (got != DataType::Float16 && got != DataType::Float32) {
        fail(fmt::format("gamma must have dtype Float16 or Float, got {}", to_string(got)));
    }
}

void require_shape(std::string_view name, const Shape& got, const Shape& expected)
{
    if (got != expected) {
        fail(fmt::format("{} must have shape {}, got {}", name, format_shape(expected), format_shape(got)));
    }
}

void require_flat_or_matrix_shape(std::string_view name, const Shape& got, std::size_t rows, std::size_t columns)
{
    if (got != Shape{rows * columns} && got != Shape{rows, columns}) {
        fail(fmt::format("{} must have shape [{}] or [{}, {}], got {}", name, rows * columns, rows, columns,
                         format_shape(got)));
    }
}

void require_contiguous(std::initializer_list<std::pair<std::string_view, bool>> tensors)
{
    for (const auto& [name, contiguous] : tensors) {
        if (!contiguous) {
            fail(fmt::format("{} must be contiguous on the CUDA execution provider", name));
        }
    }
}

bool contiguous_or_absent(const TensorDesc* tensor) { return tensor == nullptr || tensor->is_contiguous(); }

std::size_t require_activation_and_output(const TensorDesc& a, const TensorDesc& y, std::size_t k, std::size_t n)
{
    if (a.shape.empty() || a.shape.back() != k) {
        fail(fmt::format("A must have rank >= 1 and last dimension K={}, got {}", k, format_shape(a.shape)));
    }
    Shape expected(a.shape.begin(), a.shape.end() - 1);
    expected.push_back(n);
    if (y.shape != expected) {
        fail(fmt::format("Y must have shape {}, got {}", format_shape(expected), format_shape(y.shape)));
    }
    std::size_t rows = 1;
    for (std::size_t i = 0; i + 1 < a.shape.size(); ++i) {
        if (a.shape[i] != 0 && rows > std::numeric_limits<std::size_t>::max() / a.shape[i]) {
            fail(fmt::format("A of shape {} has more rows than a 64-bit count holds", format_shape(a.shape)));
        }
        rows *= a.shape[i];
    }
    return rows;
}

const TensorDesc* require_quantized_weights(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    require_shape("B", request.inputs[1].shape, {config.n, config.k_blocks(), config.blob_size()});
    require_flat_or_matrix_shape("scales", request.inputs[2].shape, config.n, config.k_blocks());
    const TensorDesc* zero_points = request.optional_input(3);
    if (zero_points != nullptr) {
        require_dtype("zero_points", zero_points->dtype, DataType::Uint8);
        require_flat_or_matrix_shape("zero_points", zero_points->shape, config.n, config.zp_row_bytes());
    }
    return zero_points;
}

}  // namespace nbits::ops::detail
