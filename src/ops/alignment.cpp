#include "ops/alignment.hpp"

#include "ops/entries.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace nbits::ops::detail {
namespace {

// A vector load of `bytes` through parameter `parameter` of `entry`, when
// `applies` (some loads exist only for one layout).
struct VectorLoad {
    const char* entry;
    int parameter;
    std::uint32_t bytes;
    bool (*applies)(const MatMulNBitsConfig& config, DataType tensor);
};

bool always(const MatMulNBitsConfig&, DataType) { return true; }
bool int4_weights(const MatMulNBitsConfig& config, DataType) { return config.bits == 4; }
bool block128(const MatMulNBitsConfig& config, DataType) { return config.block_size == 128; }
bool half_tensor(const MatMulNBitsConfig&, DataType tensor) { return tensor == DataType::Float16; }

// Taken from the loads in kernels_cu: activation uint4 (16), packed int4
// words (4), packed int8 uint2 (8), packed block-32 int4 blobs uint4 (16), RMS
// rows and fp16 gamma as half4 (8).
constexpr VectorLoad kVectorLoads[] = {
    {entry::gemv_int4_f32_block128, 1, 4, always},
    {entry::gemv_accuracy4_block32, 2, 16, always},
    {entry::gemv_accuracy4_block32_stage64, 2, 16, always},
    {entry::gemv_accuracy4_blockwise, 2, 2, block128},
    {entry::gemv_int8_f16, 0, 16, always},
    {entry::gemv_int8_f16, 1, 8, always},
    {entry::gemv_int8_f16_splitk, 0, 16, always},
    {entry::gemv_int8_f16_splitk, 1, 8, always},
    {entry::gemv_f16, 0, 16, always},
    {entry::gemv_f16, 1, 4, always},
    {entry::gemv_f16_general_bs, 1, 4, int4_weights},
    {entry::gemv_f16_scales_f16, 0, 16, always},
    {entry::gemv_f16_scales_f16, 1, 4, always},
    {entry::gemv_f16_scales_f16_zp, 0, 16, always},
    {entry::gemv_f16_scales_f16_zp, 1, 4, always},
    {entry::gemv_f16_scales_f16_zp_splitk, 0, 16, always},
    {entry::gemv_f16_scales_f16_zp_splitk, 1, 4, always},
    {entry::gemv_f16_down, 0, 16, always},
    {entry::gemv_f16_down, 1, 16, always},
    {entry::gemv_f16_down_c4, 0, 16, always},
    {entry::gemv_f16_down_c4, 1, 16, always},
    {entry::gemv_f16_down_c2, 0, 16, always},
    {entry::gemv_f16_down_c2, 1, 16, always},
    {entry::gemv_f16_rmsnorm, 0, 8, always},
    {entry::gemv_f16_rmsnorm, 1, 4, always},
    {entry::gemv_f16_rmsnorm_zp, 0, 8, always},
    {entry::gemv_f16_rmsnorm_zp, 1, 4, always},
    {entry::gemv_int8_f16_rmsnorm, 0, 8, always},
    {entry::gemv_int8_f16_rmsnorm, 1, 8, always},
    {entry::gemv_int8_f16_rmsnorm_zp, 0, 8, always},
    {entry::gemv_int8_f16_rmsnorm_zp, 1, 8, always},
    {entry::rmsnorm_prefill, 0, 8, always},
    {entry::rmsnorm_prefill, 1, 8, half_tensor},
    {entry::gate_up_swiglu, 0, 16, always},
    {entry::gate_up_swiglu, 1, 4, always},
    {entry::gate_up_swiglu, 3, 4, always},
    {entry::gate_up_swiglu_zp, 0, 16, always},
    {entry::gate_up_swiglu_zp, 1, 4, always},
    {entry::gate_up_swiglu_zp, 3, 4, always},
    {entry::gate_up_swiglu_rmsnorm, 0, 8, always},
    {entry::gate_up_swiglu_rmsnorm, 1, 4, always},
    {entry::gate_up_swiglu_rmsnorm, 3, 4, always},
    {entry::gate_up_swiglu_rmsnorm_zp, 0, 8, always},
    {entry::gate_up_swiglu_rmsnorm_zp, 1, 4, always},
    {entry::gate_up_swiglu_rmsnorm_zp, 3, 4, always},
};

constexpr const char* kInputNames[] = {"A", "B", "scales", "zero_points", "g_idx", "bias", "gamma"};
constexpr const char* kGateUpInputNames[] = {"A",         "W_gate", "scales_gate", "W_up",
                                             "scales_up", "gamma",  "zp_gate",     "zp_up"};

const TensorDesc* referenced_tensor(const BufferRef& ref, const PlanRequest& request)
{
    const auto slot = static_cast<std::size_t>(ref.index);
    if (ref.kind == BufferRef::Kind::Input && slot < request.inputs.size()) {
        return &request.inputs[slot];
    }
    if (ref.kind == BufferRef::Kind::Output && slot < request.outputs.size()) {
        return &request.outputs[slot];
    }
    return nullptr;
}

std::uint32_t vector_load_bytes(const KernelStep& step, int parameter, const MatMulNBitsConfig& config,
                                DataType tensor)
{
    std::uint32_t bytes = 1;
    for (const VectorLoad& load : kVectorLoads) {
        if (step.entry == load.entry && load.parameter == parameter && load.applies(config, tensor)) {
            bytes = std::max(bytes, load.bytes);
        }
    }
    return bytes;
}

}  // namespace

std::string tensor_label(const BufferRef& ref, bool gate_up)
{
    switch (ref.kind) {
    case BufferRef::Kind::Input: {
        const auto slot = static_cast<std::size_t>(ref.index);
        const std::size_t count = gate_up ? std::size(kGateUpInputNames) : std::size(kInputNames);
        const char* name = slot < count ? (gate_up ? kGateUpInputNames[slot] : kInputNames[slot]) : "input";
        return fmt::format("{} (input {})", name, ref.index);
    }
    case BufferRef::Kind::Output: return fmt::format("Y (output {})", ref.index);
    case BufferRef::Kind::Scratch: return fmt::format("scratch buffer {}", ref.index);
    case BufferRef::Kind::Workspace: return "the accuracy-level-4 workspace";
    case BufferRef::Kind::Null: break;
    }
    return "null";
}

void attach_alignment(LaunchPlan& plan, const PlanRequest& request)
{
    // The paired node names its slots differently, but only on the fp16 path it takes.
    const bool gate_up = request.config.gate_up_swiglu && request.inputs[0].dtype == DataType::Float16;
    for (PlanStep& planned : plan.steps) {
        auto* step = std::get_if<KernelStep>(&planned);
        if (step == nullptr) {
            continue;
        }
        for (std::size_t parameter = 0; parameter < step->args.size(); ++parameter) {
            const auto* ref = std::get_if<BufferRef>(&step->args[parameter]);
            const TensorDesc* tensor = ref != nullptr ? referenced_tensor(*ref, request) : nullptr;
            if (tensor == nullptr) {
                continue;  // null, scratch and workspace pointers come aligned from cuMemAlloc
            }
            const std::uint32_t bytes =
                std::max(static_cast<std::uint32_t>(element_size(tensor->dtype)),
                         vector_load_bytes(*step, static_cast<int>(parameter), request.config, tensor->dtype));
            const AlignmentRequirement requirement{*ref, bytes, tensor_label(*ref, gate_up)};
            const bool listed = std::find(step->alignment.begin(), step->alignment.end(), requirement) !=
                                step->alignment.end();
            if (bytes > 1 && !listed) {
                step->alignment.push_back(requirement);
            }
        }
    }
}

}  // namespace nbits::ops::detail
