#pragma once

// What every planning step reads: the checked attributes, the tensors'
// descriptors, and the injected device facts.

#include "nbits/ops/matmul_nbits.hpp"

#include <cstddef>
#include <vector>

namespace nbits::ops::detail {

struct PlanRequest {
    const MatMulNBitsConfig& config;
    const std::vector<TensorDesc>& inputs;
    const std::vector<TensorDesc>& outputs;
    const PlanContext& context;

    // The original's `optional_input`: a slot past the end or an absent tensor is none.
    const TensorDesc* optional_input(std::size_t slot) const
    {
        return slot < inputs.size() && inputs[slot].present ? &inputs[slot] : nullptr;
    }
    const TensorDesc& output() const { return outputs[0]; }
};

// The ONNX slot of `tensor` as a kernel argument, or a null pointer when absent.
inline BufferRef optional_ref(const TensorDesc* tensor, int slot)
{
    return tensor != nullptr ? BufferRef::input(slot) : BufferRef::null();
}

// Throws Error(MissingHeaders), naming `op`, where the original calls
// require_nvrtc_half_headers: NVRTC cannot compile fp16 kernels without cuda_fp16.h.
void require_half_headers(const PlanContext& context, const char* op);

}  // namespace nbits::ops::detail
