#pragma once

// Shared builders of the MatMulNBits CPU tests: node attributes, tensor
// descriptors of a well-formed node, and the plan for an injected device.

#include "nbits/error.hpp"
#include "nbits/matmul_nbits.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

namespace nbits::test {

inline NodeAttributes node(std::int64_t k, std::int64_t n, std::int64_t bits = 4, std::int64_t block_size = 32,
                           std::int64_t accuracy_level = 0)
{
    NodeAttributes attributes;
    attributes.set("K", k).set("N", n).set("bits", bits).set("block_size", block_size);
    attributes.set("accuracy_level", accuracy_level);
    return attributes;
}

inline NodeAttributes marked(NodeAttributes attributes, const char* marker)
{
    attributes.set(marker, std::int64_t{1});
    return attributes;
}

inline TensorDesc desc(DataType dtype, std::vector<std::size_t> shape)
{
    TensorDesc d;
    d.dtype = dtype;
    d.shape = std::move(shape);
    return d;
}

inline TensorDesc absent(DataType dtype = DataType::Float32)
{
    TensorDesc d;
    d.dtype = dtype;
    d.present = false;
    return d;
}

// Which optional tensors a well-formed node carries.
struct Shapes {
    std::size_t m = 1;
    DataType activation = DataType::Float16;
    std::optional<DataType> scales;  // default: the activation's dtype
    bool zero_points = false;
    bool g_idx = false;
    bool bias = false;
    std::optional<DataType> gamma;
};

// One node with its tensors and the device it is planned for.
struct Problem {
    ops::MatMulNBitsConfig config;
    std::vector<TensorDesc> inputs;
    std::vector<TensorDesc> outputs;
    ops::PlanContext context;

    ops::LaunchPlan plan() const { return ops::plan_matmul_nbits(config, inputs, outputs, context); }
};

inline ops::PlanContext context_for(const Capabilities& device, const ops::MatMulNBitsConfig& config)
{
    ops::PlanContext context;
    context.capabilities = device;
    const std::size_t block_size = config.block_size;
    context.read_g_idx = [block_size](const TensorDesc& g_idx) {
        std::vector<std::int32_t> groups(g_idx.numel());
        for (std::size_t i = 0; i < groups.size(); ++i) {
            groups[i] = static_cast<std::int32_t>(i / block_size);
        }
        return groups;
    };
    return context;
}

// Inputs in the ONNX order [A, B, scales, zero_points, g_idx, bias, gamma], or
// the paired node's [A, W_gate, scales_gate, W_up, scales_up, gamma, zp_gate, zp_up].
inline Problem problem(const NodeAttributes& attributes, const Shapes& shapes = {},
                       const Capabilities& device = Capabilities::h200())
{
    Problem p;
    p.config = ops::MatMulNBitsConfig::from_attributes(attributes);
    const ops::MatMulNBitsConfig& c = p.config;
    const DataType scales = shapes.scales.value_or(shapes.activation);
    const TensorDesc weight = desc(DataType::Uint8, {c.n, c.k_blocks(), c.blob_size()});
    const TensorDesc scale = desc(scales, {c.n, c.k_blocks()});
    const TensorDesc zero_points =
        shapes.zero_points ? desc(DataType::Uint8, {c.n, c.zp_row_bytes()}) : absent(DataType::Uint8);
    const TensorDesc gamma = shapes.gamma ? desc(*shapes.gamma, {c.k}) : absent(DataType::Float16);
    p.inputs = {desc(shapes.activation, {shapes.m, c.k}), weight, scale};
    if (c.gate_up_swiglu) {
        p.inputs.insert(p.inputs.end(), {weight, scale, gamma, zero_points, zero_points});
    } else {
        p.inputs.insert(p.inputs.end(),
                        {zero_points, shapes.g_idx ? desc(DataType::Int32, {c.k}) : absent(DataType::Int32),
                         shapes.bias ? desc(shapes.activation, {c.n}) : absent(shapes.activation), gamma});
    }
    p.outputs = {desc(shapes.activation, {shapes.m, c.n})};
    p.context = context_for(device, c);
    return p;
}

inline std::string error_message(const Problem& p)
{
    try {
        p.plan();
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

// The kind of the error planning `p` throws; fails the test when it plans.
inline ErrorKind error_kind(const Problem& p)
{
    try {
        p.plan();
    } catch (const Error& error) {
        return error.kind();
    }
    FAIL("the plan succeeded");
    return ErrorKind::Internal;
}

inline std::string prefixed(const std::string& message) { return "cuda_ep MatMulNBits: " + message; }

inline const ops::KernelStep& kernel_step(const ops::LaunchPlan& plan, std::size_t index)
{
    REQUIRE(index < plan.steps.size());
    const auto* step = std::get_if<ops::KernelStep>(&plan.steps[index]);
    REQUIRE(step != nullptr);
    return *step;
}

// The i32 scalars of a step, in order (pointers and floats skipped).
inline std::vector<std::int32_t> int_args(const ops::KernelStep& step)
{
    std::vector<std::int32_t> values;
    for (const ops::KernelArg& arg : step.args) {
        if (const auto* value = std::get_if<std::int32_t>(&arg)) {
            values.push_back(*value);
        }
    }
    return values;
}

inline std::vector<ops::BufferRef> pointer_args(const ops::KernelStep& step)
{
    std::vector<ops::BufferRef> refs;
    for (const ops::KernelArg& arg : step.args) {
        if (const auto* ref = std::get_if<ops::BufferRef>(&arg)) {
            refs.push_back(*ref);
        }
    }
    return refs;
}

}  // namespace nbits::test
