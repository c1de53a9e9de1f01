#pragma once

// The original's tensor checks, with its exact messages.

#include "nbits/ops/tensor.hpp"
#include "ops/plan_request.hpp"

#include <cstddef>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

namespace nbits::ops::detail {

using Shape = std::vector<std::size_t>;

void require_dtype(std::string_view name, DataType got, DataType expected);
// The RMS-norm gamma may be fp16 or fp32.
void require_gamma_dtype(DataType got);
void require_shape(std::string_view name, const Shape& got, const Shape& expected);
// [rows * columns] or [rows, columns].
void require_flat_or_matrix_shape(std::string_view name, const Shape& got, std::size_t rows, std::size_t columns);
// Each (name, contiguous) in order; the first false one is the error.
void require_contiguous(std::initializer_list<std::pair<std::string_view, bool>> tensors);
bool contiguous_or_absent(const TensorDesc* tensor);

// A has rank >= 1 and last dimension K, Y is A's leading dimensions then N.
// Returns M, the product of A's leading dimensions.
std::size_t require_activation_and_output(const TensorDesc& a, const TensorDesc& y, std::size_t k, std::size_t n);

// B [N, K blocks, blob], scales [N * K blocks] or [N, K blocks], and the
// optional uint8 zero points (input 3), which it returns.
const TensorDesc* require_quantized_weights(const PlanRequest& request);

}  // namespace nbits::ops::detail
