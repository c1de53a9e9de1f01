#include "ops/execute.hpp"

#include "ops/alignment.hpp"
#include "ops/errors.hpp"
#include "nbits/kernels.hpp"

#include <fmt/format.h>

namespace nbits::ops::detail {
namespace {

const Tensor* bound_tensor(const BufferRef& ref, const PlanBindings& bindings)
{
    const auto slot = static_cast<std::size_t>(ref.index);
    const std::vector<Tensor>* tensors = ref.kind == BufferRef::Kind::Input    ? &bindings.inputs
                                         : ref.kind == BufferRef::Kind::Output ? &bindings.outputs
                                                                               : nullptr;
    if (tensors == nullptr) {
        return nullptr;
    }
    if (slot >= tensors->size()) {
        // The plan was validated against these tensors: a slot past the end is a bug here.
        throw Error(ErrorKind::InvalidArgument,
                    prefixed(fmt::format("the plan refers to {} slot {}, but only {} were given",
                                         ref.kind == BufferRef::Kind::Input ? "input" : "output", slot,
                                         tensors->size())));
    }
    return &(*tensors)[slot];
}

CUdeviceptr resolve(const BufferRef& ref, const PlanBindings& bindings, const std::vector<DeviceBuffer>& scratch)
{
    switch (ref.kind) {
    case BufferRef::Kind::Null: return 0;
    case BufferRef::Kind::Input:
    case BufferRef::Kind::Output: return bound_tensor(ref, bindings)->data + ref.offset;
    case BufferRef::Kind::Scratch: return scratch.at(static_cast<std::size_t>(ref.index)).get() + ref.offset;
    case BufferRef::Kind::Workspace: return bindings.workspace + ref.offset;
    }
    return 0;
}

void check_present(const BufferRef& ref, const PlanBindings& bindings, const std::string& what)
{
    if (ref.kind == BufferRef::Kind::Workspace && bindings.workspace == 0) {
        fail("accuracy_level=4 GEMV workspace is unavailable");
    }
    const Tensor* tensor = bound_tensor(ref, bindings);
    if (tensor != nullptr && tensor->data == 0 && tensor->byte_size() != 0) {
        fail(fmt::format("{} holds {} bytes but its device address is null. Why: {} would dereference address 0 "
                         "and fault the CUDA context. How to fix: pass the tensor's device pointer in Tensor::data",
                         tensor_label(ref, bindings.gate_up_slots), tensor->byte_size(), what));
    }
}

void check_alignment(const AlignmentRequirement& requirement, CUdeviceptr address, const KernelStep& step)
{
    if (address % requirement.bytes != 0) {
        fail(fmt::format("{} is at device address {:#x}, which is not {}-byte aligned. Why: {} reads it in "
                         "{}-byte loads, and a misaligned load faults the CUDA context. How to fix: pass {} at an "
                         "address that is a multiple of {} (cuMemAlloc returns 256-byte aligned memory; a view at an "
                         "offset into a larger buffer may not be)",
                         requirement.tensor, address, requirement.bytes, step.entry, requirement.bytes,
                         requirement.tensor, requirement.bytes));
    }
}

const jit::KernelSource& source_for(const KernelStep& step, const RunOptions& options)
{
    if (options.kernel_source_override) {
        if (const jit::KernelSource* replaced = options.kernel_source_override(step)) {
            return *replaced;
        }
    }
    return kernels::source(step.source);
}

void launch(CudaRuntime& runtime, const KernelStep& step, const PlanBindings& bindings,
            const std::vector<DeviceBuffer>& scratch, const RunOptions& options)
{
    const CUfunction function = runtime.function(source_for(step, options), step.entry);
    if (step.configure_shared_memory) {
        runtime.configure_dynamic_shared_memory(function, step.config.dynamic_shared_bytes, step.what);
    }
    KernelArgs args;
    for (const KernelArg& arg : step.args) {
        if (const auto* ref = std::get_if<BufferRef>(&arg)) {
            args.ptr(resolve(*ref, bindings, scratch));
        } else if (const auto* value = std::get_if<std::int32_t>(&arg)) {
            args.i32(*value);
        } else {
            args.f32(std::get<float>(arg));
        }
    }
    runtime.launch(function, step.config, args, step.what);
}

void gemm(CudaRuntime& runtime, const GemmStep& step, const PlanBindings& bindings,
          const std::vector<DeviceBuffer>& scratch)
{
    blas::GemmParams params;
    params.dtype = step.dtype;
    params.a = resolve(step.a, bindings, scratch);
    params.w = resolve(step.w, bindings, scratch);
    params.y = resolve(step.y, bindings, scratch);
    params.bias = resolve(step.bias, bindings, scratch);
    params.m = step.m;
    params.k = step.k;
    params.n = step.n;
    blas::gemm(runtime, params, resolve(step.workspace, bindings, scratch), step.workspace_bytes);
}

}  // namespace

void check_addresses(const LaunchPlan& plan, const PlanBindings& bindings)
{
    for (const PlanStep& planned : plan.steps) {
        if (const auto* step = std::get_if<KernelStep>(&planned)) {
            for (const KernelArg& arg : step->args) {
                if (const auto* ref = std::get_if<BufferRef>(&arg)) {
                    check_present(*ref, bindings, step->entry);
                }
            }
            for (const AlignmentRequirement& requirement : step->alignment) {
                if (const Tensor* tensor = bound_tensor(requirement.buffer, bindings)) {
                    check_alignment(requirement, tensor->data + requirement.buffer.offset, *step);
                }
            }
        } else {
            const auto& gemm_step = std::get<GemmStep>(planned);
            for (const BufferRef* ref : {&gemm_step.a, &gemm_step.w, &gemm_step.y, &gemm_step.bias}) {
                check_present(*ref, bindings, "the cuBLASLt GEMM");
            }
        }
    }
}

void execute_plan(CudaRuntime& runtime, const LaunchPlan& plan, const PlanBindings& bindings,
                  const RunOptions& options)
{
    check_addresses(plan, bindings);
    std::vector<DeviceBuffer> scratch;
    scratch.reserve(plan.scratch_bytes.size());
    for (const std::size_t bytes : plan.scratch_bytes) {
        scratch.emplace_back(runtime, bytes);
    }
    for (const PlanStep& planned : plan.steps) {
        if (const auto* step = std::get_if<KernelStep>(&planned)) {
            launch(runtime, *step, bindings, scratch, options);
        } else {
            gemm(runtime, std::get<GemmStep>(planned), bindings, scratch);
        }
    }
    if (plan.synchronize_after) {
        runtime.synchronize();
    }
}

}  // namespace nbits::ops::detail
