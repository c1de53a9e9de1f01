#include "nbits/ops/matmul_nbits.hpp"
#include "ops/errors.hpp"

#include <fmt/format.h>

namespace nbits::ops {
namespace {

std::optional<std::int64_t> optional_int_attr(const NodeAttributes& attributes, const std::string& name)
{
    if (!attributes.has(name)) {
        return std::nullopt;
    }
    const std::optional<std::int64_t> value = attributes.as_int(name);
    if (!value) {
        detail::fail(fmt::format("attribute '{}' must be an integer", name));
    }
    return value;
}

std::size_t required_positive_attr(const NodeAttributes& attributes, const std::string& name)
{
    const std::optional<std::int64_t> value = optional_int_attr(attributes, name);
    if (!value) {
        detail::fail(fmt::format("missing required integer attribute '{}'", name));
    }
    if (*value <= 0) {
        detail::fail(fmt::format("attribute '{}' must be positive, got {}", name, *value));
    }
    return static_cast<std::size_t>(*value);
}

bool is_power_of_two(std::size_t value) { return value != 0 && (value & (value - 1)) == 0; }

// The optimizer's markers count only as the integer 1; anything else is "not marked".
bool marker_set(const NodeAttributes& attributes, const char* name) { return attributes.as_int(name) == 1; }

}  // namespace

// Checked in the original's order (K, N, bits, weight_prepacked, block_size)
// so that a node with several problems reports the same one first.
MatMulNBitsConfig MatMulNBitsConfig::from_attributes(const NodeAttributes& attributes)
{
    MatMulNBitsConfig config;
    config.k = required_positive_attr(attributes, "K");
    config.n = required_positive_attr(attributes, "N");
    const std::int64_t bits = optional_int_attr(attributes, "bits").value_or(4);
    if (bits != 4 && bits != 8) {
        detail::fail_unsupported(fmt::format(
            "MatMulNBits CUDA supports bits in {{4, 8}}, got bits={}. Why: the native kernels implement packed int4 "
            "and int8 layouts. How to fix: export bits=4 or bits=8, or select another execution provider",
            bits));
    }
    config.bits = static_cast<std::size_t>(bits);
    const std::int64_t weight_prepacked = optional_int_attr(attributes, "weight_prepacked").value_or(0);
    if (weight_prepacked != 0) {
        detail::fail_unsupported(fmt::format(
            "weight_prepacked={} is unsupported: CUDA only supports the standard (non-prepacked) layout",
            weight_prepacked));
    }
    config.block_size = required_positive_attr(attributes, "block_size");
    if (config.block_size < 16 || !is_power_of_two(config.block_size)) {
        detail::fail(fmt::format("block_size must be a power of two and at least 16, got {}", config.block_size));
    }
    // The original reads accuracy_level leniently: a non-integer value means 0.
    config.accuracy_level = attributes.as_int("accuracy_level").value_or(0);
    config.fold_bias_post_round = marker_set(attributes, kFoldedBiasAttr);
    config.gate_up_swiglu = marker_set(attributes, kGateUpSwigluAttr);
    config.rmsnorm_prologue = marker_set(attributes, kRmsNormPrologueAttr);
    config.rmsnorm_epsilon = attributes.as_float(kRmsNormEpsilonAttr).value_or(1e-5f);
    return config;
}

std::size_t MatMulNBitsConfig::workspace_bytes() const
{
    if (bits != 4 || accuracy_level != 4) {
        return 0;
    }
    return padded_k() + k_blocks() * sizeof(float);
}

}  // namespace nbits::ops
