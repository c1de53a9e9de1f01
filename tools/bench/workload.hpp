#pragma once

// A node's tensors on the device, with its weights rotated across enough
// copies that every timed launch reads them from DRAM rather than L2.

#include "host_data.hpp"

#include "nbits/tensor.hpp"
#include "nbits/runtime.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace nbits::bench {

struct Rotation {
    std::size_t copies = 1;
    std::size_t launches = 1;      // per timed sample: a whole number of rounds through the copies
    std::size_t working_set = 0;   // bytes the copies span together
    bool below_target = false;     // memory capped the copies short of the 4 x L2 working set

    // Empty, or why some launches may hit L2.
    std::string shortfall() const;
};

// At least two copies and at least 4 x L2 bytes of them, but no more than
// `budget` bytes in all. Throws Error(InvalidArgument) when one copy alone
// exceeds the budget.
Rotation plan_rotation(std::size_t bytes_per_copy, std::size_t l2_bytes, std::size_t budget,
                       std::size_t min_launches);

// Rounds up to the 256-byte alignment every device tensor gets here.
std::size_t aligned(std::size_t bytes);

// Fills [filled, total) of a device buffer by repeating its first `filled`
// bytes, doubling the copied span each time: copies of a weight, or a random
// pattern tiled over a large buffer, in log2(total / filled) copies.
void tile_device(CudaRuntime& runtime, CUdeviceptr base, std::size_t filled, std::size_t total);

// The bytes one rotated copy of the node's weights takes on the device.
std::size_t rotated_bytes_per_copy(const Node& node);

class DeviceNode {
public:
    DeviceNode(CudaRuntime& runtime, const HostData& host, std::size_t copies);

    // The node's inputs with its weights taken from copy `copy % copies()`.
    std::vector<Tensor> inputs(std::size_t copy) const;
    std::vector<Tensor> outputs() const;
    CUdeviceptr output() const { return output_.get(); }
    std::size_t copies() const { return copies_; }
    // Fills the output with NaN (all bits set) so that an unwritten element shows.
    void poison_output(CudaRuntime& runtime) const;

private:
    Node node_;
    std::size_t copies_ = 1;
    std::size_t stride_ = 0;
    std::vector<std::size_t> offsets_;  // per input slot: into a copy, or into the shared buffer
    DeviceBuffer rotated_;
    DeviceBuffer shared_;
    DeviceBuffer output_;
};

}  // namespace nbits::bench
