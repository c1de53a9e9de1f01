#pragma once

// The MatMulNBits node one shape hands to the operator: its attributes and
// its tensors in the operator's input order, each tagged with what it holds,
// so that host data, device buffers and the reference agree on every slot.

#include "options.hpp"
#include "shapes.hpp"

#include "nbits/attributes.hpp"
#include "nbits/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nbits::bench {

enum class Role { Activation, Packed, Scales, ZeroPoints, GroupIndex, Bias, Gamma };

// One input slot. `projection` tells the paired node's gate (0) and up (1)
// weights apart; a slot the node leaves empty has desc.present == false.
struct NodeInput {
    Role role = Role::Activation;
    int projection = 0;
    TensorDesc desc;

    // Weights, scales and zero points are rotated across copies so that each
    // launch reads them from DRAM; the rest is shared by every launch.
    bool rotated() const { return desc.present && (role == Role::Packed || role == Role::Scales || role == Role::ZeroPoints); }
};

// The quantized layout of one K x N weight.
struct QuantLayout {
    std::size_t k = 0;
    std::size_t n = 0;
    std::size_t bits = 4;
    std::size_t block_size = 32;

    std::size_t k_blocks() const { return (k + block_size - 1) / block_size; }
    std::size_t blob_size() const { return block_size * bits / 8; }
    std::size_t zp_row_bytes() const { return (k_blocks() * bits + 7) / 8; }
};

struct Node {
    BenchShape shape;
    PathConfig path;
    QuantLayout layout;
    NodeAttributes attributes;
    std::vector<NodeInput> inputs;  // trailing empty slots dropped
    TensorDesc output;

    std::vector<TensorDesc> input_descs() const;
    // The bytes a perfect kernel moves through memory: every weight, scale,
    // zero point, activation, bias and gamma read once, the output written once.
    std::uint64_t minimum_bytes() const;
    // 2·M·K·(weight columns): the multiply-adds of the matrix products.
    double flops() const;
};

Node make_node(const BenchShape& shape, const PathConfig& path);

}  // namespace nbits::bench
