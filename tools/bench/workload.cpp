#include "workload.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace nbits::bench {
namespace {

constexpr std::size_t kAlignment = 256;
constexpr std::size_t kL2Multiple = 4;
constexpr std::size_t kMinCopies = 2;

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

Rotation plan_rotation(std::size_t bytes_per_copy, std::size_t l2_bytes, std::size_t budget, std::size_t min_launches)
{
    const std::size_t copy = std::max<std::size_t>(bytes_per_copy, 1);
    if (copy > budget) {
        throw Error(ErrorKind::InvalidArgument,
                    fmt::format("one copy of the weights takes {:.0f} MiB, more than the {:.0f} MiB this shape may "
                                "use (free device memory, --max-weight-gib)",
                                static_cast<double>(copy) / kMiB, static_cast<double>(budget) / kMiB));
    }
    const std::size_t target = kL2Multiple * l2_bytes;
    const std::size_t wanted = std::max(kMinCopies, (target + copy - 1) / copy);
    Rotation rotation;
    rotation.copies = std::min(wanted, budget / copy);
    rotation.working_set = rotation.copies * copy;
    rotation.below_target = rotation.working_set < target;
    const std::size_t rounds = (std::max<std::size_t>(min_launches, 1) + rotation.copies - 1) / rotation.copies;
    rotation.launches = rounds * rotation.copies;
    return rotation;
}

std::string Rotation::shortfall() const
{
    if (!below_target) {
        return "";
    }
    return fmt::format("memory allowed only {} weight copies ({:.0f} MiB), short of 4 x L2: some reads may hit L2",
                       copies, static_cast<double>(working_set) / kMiB);
}

void tile_device(CudaRuntime& runtime, CUdeviceptr base, std::size_t filled, std::size_t total)
{
    if (filled == 0) {
        throw Error(ErrorKind::InvalidArgument, "tile_device needs a filled prefix to repeat");
    }
    while (filled < total) {
        const std::size_t span = std::min(filled, total - filled);
        runtime.dtod(base + filled, base, span);
        filled += span;
    }
}

std::size_t rotated_bytes_per_copy(const Node& node)
{
    std::size_t bytes = 0;
    for (const NodeInput& input : node.inputs) {
        if (input.rotated()) {
            bytes += aligned(input.desc.byte_size());
        }
    }
    return bytes;
}

DeviceNode::DeviceNode(CudaRuntime& runtime, const HostData& host, std::size_t copies)
    : node_(host.node()), copies_(std::max<std::size_t>(copies, 1)), offsets_(node_.inputs.size(), 0)
{
    // Offsets first: rotated slots within one copy, the others in one shared buffer.
    std::size_t shared_bytes = 0;
    for (std::size_t i = 0; i < node_.inputs.size(); ++i) {
        const NodeInput& input = node_.inputs[i];
        if (!input.desc.present) {
            continue;
        }
        std::size_t& end = input.rotated() ? stride_ : shared_bytes;
        offsets_[i] = end;
        end += aligned(input.desc.byte_size());
    }
    rotated_ = DeviceBuffer(runtime, stride_ * copies_);
    shared_ = DeviceBuffer(runtime, shared_bytes);
    output_ = DeviceBuffer(runtime, node_.output.byte_size());

    for (std::size_t i = 0; i < node_.inputs.size(); ++i) {
        const NodeInput& input = node_.inputs[i];
        if (!input.desc.present) {
            continue;
        }
        const CUdeviceptr base = input.rotated() ? rotated_.get() : shared_.get();
        runtime.htod(base + offsets_[i], host.bytes(i).data(), host.bytes(i).size());
    }
    if (stride_ > 0) {
        tile_device(runtime, rotated_.get(), stride_, stride_ * copies_);
    }
}

std::vector<Tensor> DeviceNode::inputs(std::size_t copy) const
{
    std::vector<Tensor> tensors;
    tensors.reserve(node_.inputs.size());
    const CUdeviceptr copy_base = rotated_.get() + (copy % copies_) * stride_;
    for (std::size_t i = 0; i < node_.inputs.size(); ++i) {
        const NodeInput& input = node_.inputs[i];
        Tensor tensor;
        static_cast<TensorDesc&>(tensor) = input.desc;
        if (input.desc.present) {
            tensor.data = (input.rotated() ? copy_base : shared_.get()) + offsets_[i];
        }
        tensors.push_back(std::move(tensor));
    }
    return tensors;
}

std::vector<Tensor> DeviceNode::outputs() const
{
    Tensor output;
    static_cast<TensorDesc&>(output) = node_.output;
    output.data = output_.get();
    return {output};
}

void DeviceNode::poison_output(CudaRuntime& runtime) const
{
    runtime.memset_async(output_.get(), 0xFF, node_.output.byte_size());
    runtime.synchronize();
}

}  // namespace nbits::bench
