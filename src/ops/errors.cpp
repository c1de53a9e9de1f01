#include "ops/errors.hpp"

#include <fmt/format.h>

#include <limits>

namespace nbits::ops::detail {

std::string prefixed(std::string_view message) { return fmt::format("cuda_ep MatMulNBits: {}", message); }

void fail(std::string_view message) { throw Error(ErrorKind::InvalidArgument, prefixed(message)); }

void fail_unsupported(std::string_view message) { throw Error(ErrorKind::Unsupported, prefixed(message)); }

std::int32_t as_i32(std::string_view name, std::size_t value)
{
    if (value > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        fail_unsupported(fmt::format("{}={} exceeds i32", name, value));
    }
    return static_cast<std::int32_t>(value);
}

}  // namespace nbits::ops::detail
