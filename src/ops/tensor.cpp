#include "nbits/tensor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

namespace nbits {

const char* to_string(DataType dtype)
{
    switch (dtype) {
    case DataType::Float32: return "Float32";
    case DataType::Float16: return "Float16";
    case DataType::BFloat16: return "BFloat16";
    case DataType::Uint8: return "Uint8";
    case DataType::Int8: return "Int8";
    case DataType::Int32: return "Int32";
    case DataType::Int64: return "Int64";
    }
    return "Unknown";
}

std::size_t element_size(DataType dtype)
{
    switch (dtype) {
    case DataType::Float32: return 4;
    case DataType::Float16: return 2;
    case DataType::BFloat16: return 2;
    case DataType::Uint8: return 1;
    case DataType::Int8: return 1;
    case DataType::Int32: return 4;
    case DataType::Int64: return 8;
    }
    return 1;
}

std::optional<std::size_t> TensorDesc::element_count() const
{
    std::size_t count = 1;
    bool overflowed = false;
    for (const std::size_t extent : shape) {
        if (extent == 0) {
            return 0;  // an empty tensor, whatever its other extents
        }
        if (count > std::numeric_limits<std::size_t>::max() / extent) {
            overflowed = true;
        }
        count *= extent;
    }
    if (overflowed) {
        return std::nullopt;
    }
    return count;
}

std::optional<std::size_t> TensorDesc::byte_count() const
{
    const std::optional<std::size_t> count = element_count();
    const std::size_t size = element_size(dtype);
    if (!count || *count > std::numeric_limits<std::size_t>::max() / size) {
        return std::nullopt;
    }
    return *count * size;
}

std::size_t TensorDesc::numel() const { return element_count().value_or(std::numeric_limits<std::size_t>::max()); }

std::size_t TensorDesc::byte_size() const { return byte_count().value_or(std::numeric_limits<std::size_t>::max()); }

bool TensorDesc::is_contiguous() const
{
    if (strides.empty()) {
        return true;
    }
    if (strides.size() != shape.size()) {
        return false;
    }
    const std::optional<std::size_t> count = element_count();
    if (!count) {
        return false;
    }
    // An empty tensor addresses no element, so its strides cannot misplace one.
    if (*count == 0) {
        return true;
    }
    // Dense strides are partial products of the extents, bounded by the
    // element count, which fits: no step below overflows.
    std::uint64_t dense = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] != 1 && (strides[i] < 0 || static_cast<std::uint64_t>(strides[i]) != dense)) {
            return false;
        }
        dense *= shape[i];
    }
    return true;
}

Tensor Tensor::dense(CUdeviceptr data, DataType dtype, std::vector<std::size_t> shape)
{
    Tensor tensor;
    tensor.dtype = dtype;
    tensor.shape = std::move(shape);
    tensor.data = data;
    return tensor;
}

Tensor Tensor::absent(DataType dtype)
{
    Tensor tensor;
    tensor.dtype = dtype;
    tensor.present = false;
    return tensor;
}

std::string format_shape(const std::vector<std::size_t>& shape)
{
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace nbits
