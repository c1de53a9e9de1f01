#include "node.hpp"

#include "nbits/matmul_nbits.hpp"

#include <stdexcept>

namespace nbits::bench {
namespace {

NodeInput slot(Role role, int projection, DataType dtype, std::vector<std::size_t> shape)
{
    NodeInput input;
    input.role = role;
    input.projection = projection;
    input.desc.dtype = dtype;
    input.desc.shape = std::move(shape);
    return input;
}

NodeInput empty_slot(Role role, int projection, DataType dtype)
{
    NodeInput input = slot(role, projection, dtype, {});
    input.desc.present = false;
    return input;
}

NodeAttributes attributes_of(const BenchShape& shape, const PathConfig& path)
{
    NodeAttributes attributes;
    attributes.set("K", static_cast<std::int64_t>(shape.k))
        .set("N", static_cast<std::int64_t>(shape.n))
        .set("bits", static_cast<std::int64_t>(path.bits))
        .set("block_size", static_cast<std::int64_t>(path.block_size))
        .set("accuracy_level", static_cast<std::int64_t>(path.accuracy_level));
    if (shape.paired()) {
        attributes.set(ops::kGateUpSwigluAttr, std::int64_t{1});
    }
    if (path.rmsnorm_prologue) {
        attributes.set(ops::kRmsNormPrologueAttr, std::int64_t{1});
        attributes.set(ops::kRmsNormEpsilonAttr, path.rmsnorm_epsilon);
    }
    if (path.bias == BiasMode::Folded && !shape.paired()) {
        attributes.set(ops::kFoldedBiasAttr, std::int64_t{1});
    }
    return attributes;
}

}  // namespace

std::vector<TensorDesc> Node::input_descs() const
{
    std::vector<TensorDesc> descs;
    descs.reserve(inputs.size());
    for (const NodeInput& input : inputs) {
        descs.push_back(input.desc);
    }
    return descs;
}

std::uint64_t Node::minimum_bytes() const
{
    std::uint64_t bytes = output.byte_size();
    for (const NodeInput& input : inputs) {
        if (input.desc.present) {
            bytes += input.desc.byte_size();
        }
    }
    return bytes;
}

double Node::flops() const
{
    return 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.k) *
           static_cast<double>(shape.weight_columns());
}

Node make_node(const BenchShape& shape, const PathConfig& path)
{
    if (shape.paired() && (path.activation != DataType::Float16 || path.scales != DataType::Float16)) {
        // The operator would read the paired inputs as an f32 node's and
        // complain about a zero-point shape; say what is really wrong.
        throw std::invalid_argument(
            "the paired gate/up node takes fp16 activations and fp16 scales only; use gateup_unpaired for this path");
    }
    Node node;
    node.shape = shape;
    node.path = path;
    node.layout = {shape.k, shape.n, static_cast<std::size_t>(path.bits), static_cast<std::size_t>(path.block_size)};
    node.attributes = attributes_of(shape, path);

    const QuantLayout& q = node.layout;
    const DataType act = path.activation;
    const NodeInput activation = slot(Role::Activation, 0, act, {shape.m, shape.k});
    auto packed = [&](int p) { return slot(Role::Packed, p, DataType::Uint8, {q.n, q.k_blocks(), q.blob_size()}); };
    auto scales = [&](int p) { return slot(Role::Scales, p, path.scales, {q.n, q.k_blocks()}); };
    auto zero_points = [&](int p) {
        return path.zero_points ? slot(Role::ZeroPoints, p, DataType::Uint8, {q.n, q.zp_row_bytes()})
                                : empty_slot(Role::ZeroPoints, p, DataType::Uint8);
    };
    const NodeInput gamma = path.rmsnorm_prologue ? slot(Role::Gamma, 0, DataType::Float16, {shape.k})
                                                  : empty_slot(Role::Gamma, 0, DataType::Float16);

    if (shape.paired()) {
        // [x, W_gate, scales_gate, W_up, scales_up, (gamma), (zp_gate), (zp_up)]
        node.inputs = {activation, packed(0), scales(0), packed(1), scales(1), gamma, zero_points(0), zero_points(1)};
    } else {
        // [A, B, scales, zero_points, g_idx, bias, gamma]
        const NodeInput bias = path.bias != BiasMode::None ? slot(Role::Bias, 0, act, {shape.n})
                                                           : empty_slot(Role::Bias, 0, act);
        node.inputs = {activation, packed(0), scales(0), zero_points(0),
                       empty_slot(Role::GroupIndex, 0, DataType::Int32), bias, gamma};
    }
    while (!node.inputs.empty() && !node.inputs.back().desc.present) {
        node.inputs.pop_back();
    }
    node.output.dtype = act;
    node.output.shape = {shape.m, shape.n};
    return node;
}

}  // namespace nbits::bench
