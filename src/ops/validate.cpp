#include "ops/validate.hpp"

#include "ops/plan_internal.hpp"

#include <fmt/format.h>

#include <limits>

namespace nbits::ops::detail {

std::string prefixed(std::string_view message) { return fmt::format("cuda_ep MatMulNBits: {}", message); }

void fail(std::string_view message) { throw Error(ErrorKind::InvalidArgument, prefixed(message)); }

void fail_unsupported(std::string_view message) { throw Error(ErrorKind::Unsupported, prefixed(message)); }

void fail_internal(std::string_view message) { throw Error(ErrorKind::Internal, prefixed(message)); }

std::int32_t as_i32(std::string_view name, std::size_t value)
{
    if (value > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        fail_unsupported(fmt::format("{}={} exceeds the 32-bit int range of the kernel arguments", name, value));
    }
    return static_cast<std::int32_t>(value);
}

std::size_t checked_product(std::size_t a, std::size_t b, std::string_view what)
{
    if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) {
        fail_unsupported(fmt::format("{} = {} * {} overflows a 64-bit size", what, a, b));
    }
    return a * b;
}

void require_dtype(std::string_view name, DataType got, DataType expected)
{
    if (got != expected) {
        fail(fmt::format("{} must have dtype {}, got {}", name, to_string(expected), to_string(got)));
    }
}

void require_gamma_dtype(DataType got, DataType activation)
{
    if (activation == DataType::BFloat16) {
        if (got != DataType::BFloat16 && got != DataType::Float32) {
            fail(fmt::format("gamma must have dtype BFloat16 or Float, got {}", to_string(got)));
        }
        return;
    }
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

void require_present(std::string_view name, const TensorDesc& tensor)
{
    if (!tensor.present) {
        fail(fmt::format("{} is required but was passed as absent. How to fix: pass the tensor (Tensor::dense); "
                         "only optional inputs may be Tensor::absent",
                         name));
    }
    if (!tensor.byte_count()) {
        fail(fmt::format("{} of shape {} and dtype {} holds more bytes than a 64-bit size can count", name,
                         format_shape(tensor.shape), to_string(tensor.dtype)));
    }
}

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
    require_present("A", a);
    require_present("Y", y);
    std::size_t rows = 1;
    for (std::size_t i = 0; i + 1 < a.shape.size(); ++i) {
        rows *= a.shape[i];  // cannot overflow: A's element count fits (require_present)
    }
    return rows;
}

const TensorDesc* require_quantized_weights(const PlanRequest& request)
{
    const MatMulNBitsConfig& config = request.config;
    require_shape("B", request.inputs[1].shape, {config.n, config.k_blocks(), config.blob_size()});
    require_flat_or_matrix_shape("scales", request.inputs[2].shape, config.n, config.k_blocks());
    require_present("B", request.inputs[1]);
    require_present("scales", request.inputs[2]);
    const TensorDesc* zero_points = request.optional_input(3);
    if (zero_points != nullptr) {
        require_dtype("zero_points", zero_points->dtype, DataType::Uint8);
        require_flat_or_matrix_shape("zero_points", zero_points->shape, config.n, config.zp_row_bytes());
    }
    return zero_points;
}

}  // namespace nbits::ops::detail
