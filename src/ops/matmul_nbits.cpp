#include "nbits/ops/matmul_nbits.hpp"

#include "ops/errors.hpp"
#include "ops/execute.hpp"

#include <fmt/format.h>

namespace nbits::ops {
namespace {

constexpr std::size_t kGroupIndexSlot = 4;

std::vector<TensorDesc> descriptors(const std::vector<Tensor>& tensors)
{
    return std::vector<TensorDesc>(tensors.begin(), tensors.end());
}

}  // namespace

MatMulNBits::MatMulNBits(std::shared_ptr<CudaRuntime> runtime, const NodeAttributes& attributes)
    : runtime_(std::move(runtime))
{
    if (!runtime_) {
        throw Error(ErrorKind::InvalidArgument,
                    detail::prefixed("the operator needs a CudaRuntime, got none. How to fix: create one "
                                     "CudaRuntime per device and pass it to every operator on that device"));
    }
    config_ = MatMulNBitsConfig::from_attributes(attributes);
    if (config_.workspace_bytes() != 0) {
        workspace_ = DeviceBuffer(*runtime_, config_.workspace_bytes());
    }
}

MatMulNBits::~MatMulNBits() = default;

PlanContext MatMulNBits::context(const std::vector<Tensor>* tensors) const
{
    PlanContext context;
    context.capabilities = runtime_->capabilities();
    context.overrides = PlanOverrides::from_environment();
    context.half_headers_available = !runtime_->include_dirs().empty();
    if (tensors != nullptr && tensors->size() > kGroupIndexSlot) {
        CudaRuntime* runtime = runtime_.get();
        const CUdeviceptr data = (*tensors)[kGroupIndexSlot].data;
        context.read_g_idx = [runtime, data](const TensorDesc& g_idx) {
            std::vector<std::int32_t> groups(g_idx.numel());
            if (groups.empty()) {
                return groups;
            }
            if (data == 0) {
                detail::fail("g_idx (input 4) has no device address, so its group indices cannot be checked. How "
                             "to fix: pass the tensor's device pointer in Tensor::data");
            }
            // Synchronizes the stream first, as the original's dtoh did.
            runtime->dtoh(groups.data(), data, groups.size() * sizeof(std::int32_t));
            return groups;
        };
    }
    return context;
}

LaunchPlan MatMulNBits::plan(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs) const
{
    return plan_matmul_nbits(config_, inputs, outputs, context(nullptr));
}

LaunchPlan MatMulNBits::plan_tensors(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const
{
    return plan_matmul_nbits(config_, descriptors(inputs), descriptors(outputs), context(&inputs));
}

LaunchPlan MatMulNBits::run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                            const RunOptions& options)
{
    std::lock_guard<std::mutex> lock(mutex_);
    last_capture_safe_ = false;
    const LaunchPlan plan = plan_matmul_nbits(config_, descriptors(inputs), descriptors(outputs), context(&inputs));
    if (trace_) {
        trace_(plan);
    }
    const bool gate_up_slots = config_.gate_up_swiglu && inputs[0].dtype == DataType::Float16;
    detail::execute_plan(*runtime_, plan, {inputs, outputs, workspace_.get(), gate_up_slots}, options);
    last_capture_safe_ = plan.capture_safe;
    return plan;
}

CaptureSupport MatMulNBits::capture_support() const
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_capture_safe_) {
        return {true, ""};
    }
    return {false, kCaptureUnsupportedReason};
}

}  // namespace nbits::ops
