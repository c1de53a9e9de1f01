#pragma once

// The operator's error vocabulary: every MatMulNBits message carries the
// original's "cuda_ep MatMulNBits: " prefix so logs and tests match it.

#include "nbits/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nbits::ops::detail {

std::string prefixed(std::string_view message);

// A tensor or attribute the caller got wrong.
[[noreturn]] void fail(std::string_view message);
// A valid request this implementation cannot serve (too large, unsupported layout).
[[noreturn]] void fail_unsupported(std::string_view message);

// The original's `as_i32`: kernel scalars are 32-bit; "{name}={value} exceeds i32".
std::int32_t as_i32(std::string_view name, std::size_t value);

}  // namespace nbits::ops::detail
