#include "ops/execute.hpp"

#include "blas/gemm.hpp"
#include "ops/plan_internal.hpp"
#include "runtime/internals.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

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
        fail_internal(fmt::format("the plan refers to {} slot {}, but only {} were given",
                                  ref.kind == BufferRef::Kind::Input ? "input" : "output", slot, tensors->size()));
    }
    return &(*tensors)[slot];
}

// Where the plan's scratch buffers live for one run.
struct Scratch {
    CUdeviceptr base = 0;
    const LaunchPlan* plan = nullptr;
};

CUdeviceptr resolve(const BufferRef& ref, const PlanBindings& bindings, const Scratch& scratch)
{
    switch (ref.kind) {
    case BufferRef::Kind::Null: return 0;
    case BufferRef::Kind::Input:
    case BufferRef::Kind::Output: return bound_tensor(ref, bindings)->data + ref.offset;
    case BufferRef::Kind::Scratch: return scratch.base + scratch.plan->scratch_offset(ref.index) + ref.offset;
    case BufferRef::Kind::Workspace: return bindings.accuracy4_workspace + ref.offset;
    }
    return 0;
}

void check_present(const BufferRef& ref, const PlanBindings& bindings, const std::string& what)
{
    if (ref.kind == BufferRef::Kind::Workspace && bindings.accuracy4_workspace == 0) {
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

void launch(CudaRuntime::Internals& runtime, const KernelStep& step, CUfunction function,
            const PlanBindings& bindings, const Scratch& scratch, CUstream stream)
{
    // The driver encodes tensor maps in the current context.
    std::optional<CudaRuntime::Internals::ScopedContext> scope;
    if (std::any_of(step.args.begin(), step.args.end(),
                    [](const KernelArg& arg) { return std::holds_alternative<TensorMapArg>(arg); })) {
        scope.emplace(runtime);
    }
    KernelArgs args = kernel_args(step, [&](const BufferRef& ref) { return resolve(ref, bindings, scratch); });
    runtime.launch(function, step.config, args, stream, step.what);
}

void gemm(CudaRuntime& runtime, const GemmStep& step, const PlanBindings& bindings, const Scratch& scratch,
          CUstream stream)
{
    const blas::GemmParams params =
        blas::gemm_params(step, [&](const BufferRef& ref) { return resolve(ref, bindings, scratch); });
    blas::gemm(runtime, params, resolve(step.workspace, bindings, scratch), step.workspace_bytes, stream);
}

// Pool scratch of one run, released on the run's stream however the run ends.
class PooledScratch {
public:
    PooledScratch(CudaRuntime::Internals& runtime, std::size_t bytes, CUstream stream)
        : runtime_(runtime), stream_(stream), pointer_(runtime.allocate_async(bytes, stream))
    {
    }
    ~PooledScratch()
    {
        try {
            runtime_.release_async(pointer_, stream_);
        } catch (...) {
            // A destructor cannot report; a failed release means the context is already broken.
        }
    }
    PooledScratch(const PooledScratch&) = delete;
    PooledScratch& operator=(const PooledScratch&) = delete;
    CUdeviceptr get() const { return pointer_; }

private:
    CudaRuntime::Internals& runtime_;
    CUstream stream_;
    CUdeviceptr pointer_;
};

void enqueue_steps(CudaRuntime& runtime, const LaunchPlan& plan, const PlanFunctions& functions,
                   const PlanBindings& bindings, const Scratch& scratch, CUstream stream)
{
    CudaRuntime::Internals& internals = runtime.internals();
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
        if (const auto* step = std::get_if<KernelStep>(&plan.steps[i])) {
            launch(internals, *step, functions[i], bindings, scratch, stream);
        } else {
            gemm(runtime, std::get<GemmStep>(plan.steps[i]), bindings, scratch, stream);
        }
    }
}

}  // namespace

PlanFunctions load_plan_functions(CudaRuntime& runtime, const LaunchPlan& plan,
                                  const KernelSourceOverride& source_override)
{
    CudaRuntime::Internals& internals = runtime.internals();
    PlanFunctions functions;
    functions.reserve(plan.steps.size());
    for (const PlanStep& planned : plan.steps) {
        const auto* step = std::get_if<KernelStep>(&planned);
        if (step == nullptr) {
            functions.push_back(nullptr);
            continue;
        }
        functions.push_back(internals.step_function(*step, source_override ? source_override(*step) : nullptr));
    }
    return functions;
}

void check_addresses(const LaunchPlan& plan, const PlanBindings& bindings)
{
    for (const PlanStep& planned : plan.steps) {
        if (const auto* step = std::get_if<KernelStep>(&planned)) {
            for (const KernelArg& arg : step->args) {
                if (const auto* ref = std::get_if<BufferRef>(&arg)) {
                    check_present(*ref, bindings, step->entry);
                } else if (const auto* map = std::get_if<TensorMapArg>(&arg)) {
                    check_present(map->base, bindings, step->entry);
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

void execute_plan(CudaRuntime& runtime, const LaunchPlan& plan, const PlanFunctions& functions,
                  const PlanBindings& bindings, const RunOptions& options, CUstream stream)
{
    check_addresses(plan, bindings);
    const std::size_t scratch_bytes = plan.workspace_bytes();
    if (scratch_bytes == 0) {
        enqueue_steps(runtime, plan, functions, bindings, {0, &plan}, stream);
        return;
    }
    if (options.workspace != 0) {
        if (options.workspace_bytes < scratch_bytes) {
            fail(fmt::format("RunOptions::workspace holds {} bytes, but this run needs {}. How to fix: size the "
                             "workspace with MatMulNBits::workspace_bytes for the same tensors, or pass none and let "
                             "nbits take scratch from its pool",
                             options.workspace_bytes, scratch_bytes));
        }
        if (options.workspace % 256 != 0) {
            fail(fmt::format("RunOptions::workspace is at device address {:#x}, which is not 256-byte aligned. How "
                             "to fix: pass the start of a cuMemAlloc/cudaMalloc allocation or an offset that is a "
                             "multiple of 256",
                             options.workspace));
        }
        enqueue_steps(runtime, plan, functions, bindings, {options.workspace, &plan}, stream);
        return;
    }
    const PooledScratch scratch(runtime.internals(), scratch_bytes, stream);
    enqueue_steps(runtime, plan, functions, bindings, {scratch.get(), &plan}, stream);
}

}  // namespace nbits::ops::detail
