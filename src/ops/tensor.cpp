#include "nbits/ops/tensor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

std::size_t TensorDesc::numel() const
{
    std::size_t count = 1;
    for (const std::size_t extent : shape) {
        count *= extent;
    }
    return count;
}

bool TensorDesc::is_contiguous() const
{
    if (strides.empty()) {
        return true;
    }
    if (strides.size() != shape.size()) {
        return false;
    }
    // An empty tensor addresses no element, so its strides cannot misplace one.
    if (numel() == 0) {
        return true;
    }
    std::int64_t dense = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] != 1 && strides[i] != dense) {
            return false;
        }
        dense *= static_cast<std::int64_t>(shape[i]);
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
