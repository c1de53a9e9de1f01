#pragma once

// The operator's error vocabulary and the original's tensor checks, with its
// exact messages. Every MatMulNBits message carries the original's
// "cuda_ep MatMulNBits: " prefix so logs and tests match it.

#include "nbits/error.hpp"
#include "nbits/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nbits::ops {
struct MatMulNBitsConfig;
}

namespace nbits::ops::detail {

struct PlanRequest;
using Shape = std::vector<std::size_t>;

std::string prefixed(std::string_view message);

// A tensor or attribute the caller got wrong.
[[noreturn]] void fail(std::string_view message);
// A valid request this implementation cannot serve (too large, unsupported layout).
[[noreturn]] void fail_unsupported(std::string_view message);
// A defect in nbits (a launch that does not match its kernel's declaration).
[[noreturn]] void fail_internal(std::string_view message);

// Kernel scalars are 32-bit: "{name}={value} exceeds the 32-bit int range".
std::int32_t as_i32(std::string_view name, std::size_t value);
// a * b, or Error(Unsupported) naming `what` when it overflows 64 bits.
std::size_t checked_product(std::size_t a, std::size_t b, std::string_view what);

void require_dtype(std::string_view name, DataType got, DataType expected);
// The RMS-norm gamma may be fp16 or fp32 (or bf16 with bf16 activations).
void require_gamma_dtype(DataType got, DataType activation);
void require_shape(std::string_view name, const Shape& got, const Shape& expected);
// [rows * columns] or [rows, columns].
void require_flat_or_matrix_shape(std::string_view name, const Shape& got, std::size_t rows, std::size_t columns);
// Each (name, contiguous) in order; the first false one is the error.
void require_contiguous(std::initializer_list<std::pair<std::string_view, bool>> tensors);
bool contiguous_or_absent(const TensorDesc* tensor);
// A tensor the operator reads or writes must be present, and its element
// count and byte size must fit in 64 bits.
void require_present(std::string_view name, const TensorDesc& tensor);

// A has rank >= 1 and last dimension K, Y is A's leading dimensions then N.
// Returns M, the product of A's leading dimensions.
std::size_t require_activation_and_output(const TensorDesc& a, const TensorDesc& y, std::size_t k, std::size_t n);

// B [N, K blocks, blob], scales [N * K blocks] or [N, K blocks], and the
// optional uint8 zero points (input 3), which it returns.
const TensorDesc* require_quantized_weights(const PlanRequest& request);

}  // namespace nbits::ops::detail
