#pragma once

#include "nbits/options.hpp"
#include "nbits/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace nbits {

struct Dim3 {
    std::uint32_t x = 1;
    std::uint32_t y = 1;
    std::uint32_t z = 1;
    bool operator==(const Dim3& o) const { return x == o.x && y == o.y && z == o.z; }
    bool operator!=(const Dim3& o) const { return !(*this == o); }
};

struct LaunchConfig {
    Dim3 grid;
    Dim3 block;
    std::uint32_t dynamic_shared_bytes = 0;
    // Launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    // (compute capability 9.0 and newer): the kernel may start before the one
    // before it on the stream ends, and its griddepcontrol.wait orders what
    // it reads and writes after that kernel.
    bool programmatic_dependent = false;
};

namespace ops {

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
    // The operator's persistent accuracy-level-4 workspace.
    static BufferRef workspace(std::size_t offset = 0) { return {Kind::Workspace, 0, offset}; }
    BufferRef at(std::size_t bytes) const { return {kind, index, offset + bytes}; }
    bool is_null() const { return kind == Kind::Null; }
    bool operator==(const BufferRef& o) const { return kind == o.kind && index == o.index && offset == o.offset; }
};

// A CUtensorMap (cuTensorMapEncodeTiled) of a row-major 2-D tensor at `base`,
// encoded when the plan runs, since the address is known only then: `width`
// elements a row, `rows` rows `row_bytes` apart, copied in boxes of
// box_width x box_rows elements, zeros outside the tensor.
struct TensorMapArg {
    enum class Element { UInt8, Float16, BFloat16 };
    BufferRef base;
    Element element = Element::UInt8;
    std::uint64_t width = 0;
    std::uint64_t rows = 0;
    std::uint64_t row_bytes = 0;
    std::uint32_t box_width = 0;
    std::uint32_t box_rows = 0;
    bool swizzle_128b = false;  // CU_TENSOR_MAP_SWIZZLE_128B (a box row of 128 bytes)
    bool operator==(const TensorMapArg& o) const
    {
        return base == o.base && element == o.element && width == o.width && rows == o.rows &&
               row_bytes == o.row_bytes && box_width == o.box_width && box_rows == o.box_rows &&
               swizzle_128b == o.swizzle_128b;
    }
};

using KernelArg = std::variant<BufferRef, std::int32_t, float, TensorMapArg>;

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

// One kernel launch: an entry of an embedded kernels_cu source specialised by
// `defines`, its launch geometry and its arguments in the entry's parameter
// order.
struct KernelStep {
    std::string source;                // kernels_cu file stem, e.g. "gemv_f16"
    std::string entry;                 // e.g. "matmul_nbits_gemv_f16_scales_f16"
    std::vector<std::string> defines;  // NVRTC -D specialisation, e.g. "NBITS_K=4096"
    LaunchConfig config;
    // Dynamic shared memory above the default budget is opted into first,
    // never launched blind.
    bool configure_shared_memory = false;
    // Compiled for the GPU's arch-specific target (compute_90a: wgmma), which
    // loads on that architecture only.
    bool arch_specific = false;
    std::vector<KernelArg> args;
    std::string what;                  // names the launch in errors
    // Inputs and outputs the entry needs aligned beyond one byte (scratch
    // comes 256-byte aligned by construction).
    std::vector<AlignmentRequirement> alignment;
};

// Row-major Y = A · W (+ bias) through cuBLASLt with fp32 compute.
struct GemmStep {
    enum class WeightLayout {
        KxN,  // W[K, N] row-major (the dequantized f32 weight of the original)
        NxK,  // W[N, K] row-major: Y = A · Wᵀ (nbits' dequantized half weights)
    };
    DataType dtype = DataType::Float32;  // A, W and bias, and Y unless y_dtype says otherwise
    // Y's dtype when it differs from A's: Float32, for an fp32 intermediate that a later pass rounds once.
    std::optional<DataType> y_dtype;
    WeightLayout weight_layout = WeightLayout::KxN;
    BufferRef a, w, y, bias;
    std::size_t m = 0, k = 0, n = 0;
    std::size_t ldy = 0;  // Y's row stride in elements; 0: n
    BufferRef workspace;
    std::size_t workspace_bytes = 0;
};

using PlanStep = std::variant<KernelStep, GemmStep>;

// Everything one run decides, made without touching a GPU: which kernels,
// with which geometry and arguments, through which scratch.
struct LaunchPlan {
    KernelPolicy policy = KernelPolicy::Original;
    std::string variant;  // e.g. "gemv_f16_down_projection" (the original's names under Original)
    std::optional<std::string> bias_stage;  // "qkv_bias_fused" or "bias_native"
    std::optional<std::string> bias_stage_reason;
    bool capture_safe = false;
    // g_idx is range-checked against the device data before every run (a
    // device-to-host read, which is why such a plan is not capture-safe).
    bool checks_group_indices = false;
    std::vector<std::size_t> scratch_bytes;  // per run, from the caller's workspace or nbits' pool
    std::vector<PlanStep> steps;
    std::uint64_t flops = 0;                 // the original's metric formula

    // The human reason for the choice. Built on first use: cached plans are
    // reused by every run, which never formats text.
    const std::string& reason() const;
    void set_reason(std::function<std::string()> build);
    void set_reason(std::string text);

    // True when nothing is launched (an empty output: M == 0).
    bool empty() const { return steps.empty(); }
    // The scratch buffers laid out one after another, each 256-byte aligned:
    // the workspace a caller passes in RunOptions.
    std::size_t workspace_bytes() const;
    std::size_t scratch_offset(int buffer) const;

    // Human-readable and JSON renderings (nbits-plan, nbits-bench --plan).
    std::string describe() const;
    std::string to_json() const;

private:
    struct LazyText;
    std::shared_ptr<LazyText> reason_;
};

}  // namespace ops
}  // namespace nbits
