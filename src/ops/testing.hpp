#pragma once

// Test-only access to an operator: run the original kernels through nbits'
// plans, and make allocations fail on purpose. Not installed.

#include "nbits/matmul_nbits.hpp"
#include "ops/execute.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace nbits::ops::detail {

struct OperatorAccess {
    // run() with the kernel sources `sources` picks (nullptr: nbits' own),
    // planned afresh and not cached.
    static std::shared_ptr<const LaunchPlan> run_with_sources(MatMulNBits& op, const std::vector<Tensor>& inputs,
                                                              const std::vector<Tensor>& outputs,
                                                              const RunOptions& options,
                                                              const KernelSourceOverride& sources);
    // After `allocations` more successful device allocations on `runtime`,
    // every further one fails with Error(OutOfMemory); nullopt lifts it.
    static void set_allocation_budget(CudaRuntime& runtime, std::optional<std::uint64_t> allocations);
};

}  // namespace nbits::ops::detail
