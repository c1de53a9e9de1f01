#pragma once

#include "nbits/blas/gemm.hpp"
#include "nbits/runtime/launch.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace nbits::ops {

// Where a kernel argument's device address comes from when the plan runs.
struct BufferRef {
    enum class Kind { Null, Input, Output, Scratch, Workspace };
    Kind kind = Kind::Null;
    int index = 0;            // input or output slot, or scratch buffer number
    std::size_t offset = 0;   // bytes into that buffer

    static BufferRef null() { return {}; }
    static BufferRef input(int slot) { return {Kind::Input, slot, 0}; }
    static BufferRef output(int slot) { return {Kind::Output, slot, 0}; }
    static BufferRef scratch(int buffer, std::size_t offset = 0) { return {Kind::Scratch, buffer, offset}; }
    static BufferRef workspace(std::size_t offset = 0) { return {Kind::Workspace, 0, offset}; }
    bool operator==(const BufferRef& o) const { return kind == o.kind && index == o.index && offset == o.offset; }
};

using KernelArg = std::variant<BufferRef, std::int32_t, float>;

// A device address a kernel reads with vector (or plain element) loads must
// be a multiple of `bytes`; a misaligned load would fault the CUDA context,
// so the executor checks the real address before launching.
struct AlignmentRequirement {
    BufferRef buffer;
    std::uint32_t bytes = 1;
    std::string tensor;       // names it in the error, e.g. "A (input 0)"
    bool operator==(const AlignmentRequirement& o) const
    {
        return buffer == o.buffer && bytes == o.bytes && tensor == o.tensor;
    }
};

// One kernel launch: an entry of an embedded kernels_cu source, its launch
// geometry and its arguments in the entry's parameter order.
struct KernelStep {
    std::string source;       // kernels_cu file stem, e.g. "gemv_f16"
    std::string entry;        // e.g. "matmul_nbits_gemv_f16_scales_f16"
    LaunchConfig config;
    // Dynamic shared memory above the default budget is opted into first
    // (CudaRuntime::configure_dynamic_shared_memory), never launched blind.
    bool configure_shared_memory = false;
    std::vector<KernelArg> args;
    std::string what;         // names the launch in errors
    // Inputs and outputs the entry needs aligned beyond one byte (scratch and
    // the workspace come from cuMemAlloc and are aligned by construction).
    std::vector<AlignmentRequirement> alignment;
};

// Row-major Y = A · W (+ bias) through cuBLASLt (the dequantize-then-GEMM path).
struct GemmStep {
    blas::GemmDtype dtype = blas::GemmDtype::F32;
    BufferRef a, w, y, bias;
    std::size_t m = 0, k = 0, n = 0;
    BufferRef workspace;
    std::size_t workspace_bytes = 0;
};

using PlanStep = std::variant<KernelStep, GemmStep>;

// Everything one run decides, made without touching a GPU: what the original
// would launch, with which geometry and arguments, through which scratch.
struct LaunchPlan {
    std::string variant;  // the original's variant name, e.g. "gemv_f16_down_projection"
    std::string reason;   // the original's human reason
    std::optional<std::string> bias_stage;         // "qkv_bias_fused" or "bias_native"
    std::optional<std::string> bias_stage_reason;
    bool capture_safe = false;
    std::vector<std::size_t> scratch_bytes;        // allocated before the steps, freed after, always
    bool synchronize_after = false;                // the dequant path waits before freeing scratch
    std::vector<PlanStep> steps;
    std::uint64_t flops = 0;                       // the original's metric formula

    // True when nothing is launched (an empty output: M == 0).
    bool empty() const { return steps.empty(); }

    // Human-readable and JSON renderings (the plan dump of nbits-plan).
    std::string describe() const;
    std::string to_json() const;
};

}  // namespace nbits::ops
