#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nbits {

// ONNX element types an operator may be handed.
enum class DataType { Float32, Float16, BFloat16, Uint8, Int8, Int32, Int64 };

// The original's spelling ("Float16", "Uint8", ...), used in error messages.
const char* to_string(DataType dtype);
std::size_t element_size(DataType dtype);

// What an operator knows about a tensor before touching it: dtype, shape and
// strides (in elements; empty means dense row-major). An absent optional
// input is `present == false`.
struct TensorDesc {
    DataType dtype = DataType::Float32;
    std::vector<std::size_t> shape;
    std::vector<std::int64_t> strides;
    bool present = true;

    // The element count and the byte size, or nothing when they overflow 64 bits.
    std::optional<std::size_t> element_count() const;
    std::optional<std::size_t> byte_count() const;
    // element_count() and byte_count(), saturated at SIZE_MAX on overflow.
    std::size_t numel() const;
    std::size_t byte_size() const;
    // Dense row-major (empty strides, or strides equal to the dense ones;
    // dimensions of extent 1 may carry any stride). False when the dense
    // strides overflow.
    bool is_contiguous() const;
};

// A device tensor: a descriptor plus its device address.
struct Tensor : TensorDesc {
    CUdeviceptr data = 0;

    static Tensor dense(CUdeviceptr data, DataType dtype, std::vector<std::size_t> shape);
    static Tensor absent(DataType dtype);
};

// "[1, 4096]", as the original formats shapes in its messages.
std::string format_shape(const std::vector<std::size_t>& shape);

}  // namespace nbits
