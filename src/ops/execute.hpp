#pragma once

// Runs a LaunchPlan on a runtime: the only part of the operator that touches
// the GPU.

#include "jit/kernel_source.hpp"
#include "nbits/matmul_nbits.hpp"

#include <cuda.h>

#include <functional>
#include <vector>

namespace nbits::ops::detail {

// The device addresses a plan's BufferRefs resolve to.
struct PlanBindings {
    const std::vector<Tensor>& inputs;
    const std::vector<Tensor>& outputs;
    CUdeviceptr accuracy4_workspace = 0;  // the operator's persistent workspace, 0 when none
    bool gate_up_slots = false;           // name inputs as the paired gate/up node's in errors
};

// The loaded functions of a plan's kernel steps, in step order (nullptr for
// a cuBLASLt step), resolved once when the plan is cached.
using PlanFunctions = std::vector<CUfunction>;

// Replaces the kernel source of a step (tests run the original kernels
// through nbits' plans); nullptr keeps nbits' own.
using KernelSourceOverride = std::function<const jit::KernelSource*(const KernelStep& step)>;

// Compiles (or finds) and loads every kernel of the plan, opting into the
// dynamic shared memory each needs.
PlanFunctions load_plan_functions(CudaRuntime& runtime, const LaunchPlan& plan,
                                  const KernelSourceOverride& source_override = nullptr);

// Checks every address the steps use (present, aligned), takes the scratch
// from `options.workspace` or nbits' pool, and enqueues the steps in order on
// `stream`. Pool scratch is released on the stream on every path, errors
// included.
void execute_plan(CudaRuntime& runtime, const LaunchPlan& plan, const PlanFunctions& functions,
                  const PlanBindings& bindings, const RunOptions& options, CUstream stream);

// The address checks alone (no GPU), for tests: a null address of a non-empty
// tensor, a misaligned address, a missing workspace.
void check_addresses(const LaunchPlan& plan, const PlanBindings& bindings);

}  // namespace nbits::ops::detail
