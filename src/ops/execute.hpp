#pragma once

// Runs a LaunchPlan on a runtime: the only part of the operator that touches
// the GPU.

#include "nbits/ops/matmul_nbits.hpp"

#include <vector>

namespace nbits::ops::detail {

// The device addresses a plan's BufferRefs resolve to.
struct PlanBindings {
    const std::vector<Tensor>& inputs;
    const std::vector<Tensor>& outputs;
    CUdeviceptr workspace = 0;  // the persistent accuracy-level-4 workspace, 0 when none
    bool gate_up_slots = false; // name inputs as the paired gate/up node's in errors
};

// Checks every address the steps use (present, aligned), allocates the
// scratch, enqueues the steps in order on the runtime's stream and, when the
// plan asks, waits for them. Scratch is freed on every path, errors included.
void execute_plan(CudaRuntime& runtime, const LaunchPlan& plan, const PlanBindings& bindings,
                  const RunOptions& options);

// The address checks alone (no GPU), for tests: a null address of a non-empty
// tensor, a misaligned address, a missing workspace.
void check_addresses(const LaunchPlan& plan, const PlanBindings& bindings);

}  // namespace nbits::ops::detail
