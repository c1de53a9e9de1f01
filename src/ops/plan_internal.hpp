#pragma once

// What the planning code shares: the request every path reads, the one way
// to write a kernel launch into a plan (bound to the entry's declaration by
// parameter name), the original's structural choices, and the paths.

#include "nbits/matmul_nbits.hpp"
#include "blas/gemm.hpp"
#include "ops/validate.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace nbits::ops::detail {

struct PlanRequest {
    const MatMulNBitsConfig& config;
    const std::vector<TensorDesc>& inputs;
    const std::vector<TensorDesc>& outputs;
    const PlanContext& context;

    // The original's `optional_input`: a slot past the end or an absent tensor is none.
    const TensorDesc* optional_input(std::size_t slot) const
    {
        return slot < inputs.size() && inputs[slot].present ? &inputs[slot] : nullptr;
    }
    const TensorDesc& output() const { return outputs[0]; }
    // The paired gate/up node names its input slots differently.
    bool gate_up_slots() const { return config.gate_up_swiglu && inputs[0].dtype != DataType::Float32; }
    bool fastest() const { return context.policy == KernelPolicy::Fastest; }
};

// The ONNX slot of `tensor` as a kernel argument, or a null pointer when absent.
inline BufferRef optional_ref(const TensorDesc* tensor, int slot)
{
    return tensor != nullptr ? BufferRef::input(slot) : BufferRef::null();
}

// "A (input 0)", "W_gate (input 1)", "Y (output 0)": how errors name a slot.
std::string tensor_label(const BufferRef& ref, bool gate_up);

// One kernel launch, its arguments bound by the parameter names of the
// entry's declaration in kernels_cu (so a launch cannot drift from the
// kernel's parameter list), its geometry, and its specialisation.
class StepBuilder {
public:
    // Throws Error(Internal) when no embedded source declares `entry`.
    StepBuilder(std::string_view entry, std::string what);

    StepBuilder& arg(std::string_view parameter, BufferRef value);
    StepBuilder& arg(std::string_view parameter, std::int32_t value);
    StepBuilder& arg(std::string_view parameter, float value);
    StepBuilder& arg(std::string_view parameter, const TensorMapArg& value);
    StepBuilder& flag(std::string_view parameter, bool value) { return arg(parameter, std::int32_t{value ? 1 : 0}); }
    // A size as a 32-bit kernel scalar: "{name}={value} exceeds the 32-bit int range" beyond it.
    StepBuilder& size_arg(std::string_view parameter, std::size_t value, std::string_view name);
    StepBuilder& define(std::string name, std::int64_t value);
    StepBuilder& grid(std::uint32_t x, std::uint32_t y = 1, std::uint32_t z = 1);
    StepBuilder& block(std::uint32_t x, std::uint32_t y = 1);
    // Dynamic shared memory; `configure` opts into more than the default
    // budget first (and fails cleanly beyond the opt-in one).
    StepBuilder& shared_memory(std::uint32_t bytes, bool configure);
    // Compile for the device's arch-specific target (sm_90a instructions).
    StepBuilder& arch_specific(bool value)
    {
        step_.arch_specific = value;
        return *this;
    }
    // Launch as a programmatic dependent of the previous kernel (LaunchConfig).
    StepBuilder& programmatic_dependent(bool value)
    {
        step_.config.programmatic_dependent = value;
        return *this;
    }

    // Checks that every parameter is bound exactly once with its kind and
    // that the geometry fits the device, derives the alignment each bound
    // tensor needs (element size, and the declaration's `// align N`), and
    // appends the step. Throws Error(Internal) for a binding that does not
    // match the declaration, Error(Unsupported) for geometry the device
    // cannot launch.
    void add_to(LaunchPlan& plan, const PlanRequest& request);

private:
    KernelStep step_;
    const void* declaration_ = nullptr;
    std::vector<bool> bound_;
    std::vector<KernelArg> values_;
    void bind(std::string_view parameter, KernelArg value, int kind);
};

inline std::size_t div_ceil(std::size_t value, std::size_t divisor) { return (value + divisor - 1) / divisor; }

// ceil(value / divisor) as a grid extent; Error(Unsupported) naming `what`
// beyond `limit` (65535 for grid.y and grid.z, 2^31-1 for grid.x).
std::uint32_t grid_extent(std::size_t value, std::size_t divisor, std::uint32_t limit, std::string_view what);
// ceil(value / divisor) clamped to [1, 65535], the original's 1-D grid rule.
std::uint32_t clamped_grid(std::size_t value, std::size_t divisor);
inline constexpr std::uint32_t kMaxGridX = 0x7fffffffu;
inline constexpr std::uint32_t kMaxGridYZ = 65535;

// Launch geometry constants of the original.
inline constexpr std::uint32_t kBlockThreads = 256;               // f32 GEMVs, dequant, tiled accuracy4
inline constexpr std::uint32_t kAccuracy4GemvThreads = 256;
inline constexpr std::size_t kAccuracy4ColumnsPerBlock = 8;
inline constexpr std::uint32_t kAccuracy4SharedBytes = 32 * 32;
inline constexpr std::uint32_t kAccuracy4Stage64SharedBytes = 64 * 32;
inline constexpr std::size_t kAccuracy4FillCtasPerSm = 12;
inline constexpr std::size_t kGemmF16Tile = 16;
inline constexpr std::uint32_t kGemvF16SmallThreads = 64;
inline constexpr std::uint32_t kGemvF16LargeThreads = 256;
inline constexpr std::size_t kGemvF16SmallNMax = 1152;
inline constexpr std::size_t kDownBlockSize = 32;
inline constexpr std::uint32_t kDownThreads = 256;
inline constexpr std::size_t kDownColumnsPerBlock = 8;
inline constexpr std::size_t kDownFillCtasPerSm = 12;
inline constexpr std::size_t kSplitK = 2;                          // warps per column of the split-K entries
inline constexpr std::size_t kSplitKStep = 256;                    // split-K needs K % 256 == 0
inline constexpr std::uint32_t kGateUpThreads = 256;
inline constexpr std::uint32_t kRmsNormPrefillThreads = 32;
inline constexpr std::uint32_t kSiluMulThreads = 256;
inline constexpr std::size_t kBlasWorkspaceBytes = blas::kWorkspaceBytes;

enum class F16GemvVariant { General, DownProjection };

struct F16GemvSelection {
    F16GemvVariant variant = F16GemvVariant::General;
    const char* reason = "";
};

// Down projection only for the tall-skinny (K > N) block-32, fp16-scale,
// symmetric class with whole K blocks; everything else is the general GEMV.
F16GemvSelection select_f16_gemv_variant(std::size_t k, std::size_t n, std::size_t block_size, bool scales_fp16,
                                         bool has_zero_points);

struct DownColumns {
    std::size_t columns = kDownColumnsPerBlock;
    const char* entry = "";
    bool operator==(const DownColumns& o) const;
};

// The widest of 8 / 4 columns per CTA whose grid reaches 12 CTAs per SM; 2 otherwise.
DownColumns select_down_columns(std::size_t n, std::uint32_t multiprocessor_count);
// NBITS_DOWN_COLS, when set to 8, 4 or 2, wins over the device choice.
DownColumns choose_down_columns(std::size_t n, std::uint32_t multiprocessor_count, const PlanOverrides& overrides);

// Warps per CTA of the accuracy-4 blockwise GEMV: 8, 4, 2 until the grid
// reaches 12 CTAs per SM, else 1; NBITS_ACC4_WARPS wins when set.
std::uint32_t select_accuracy4_gemv_warps(std::size_t n, std::uint32_t multiprocessor_count,
                                          const PlanOverrides& overrides);

// The 64-block activation stage only when the 8-column block-32 grid is below
// one resident wave (the device's resident warps per SM) and the opt-in
// shared memory holds it.
bool use_accuracy4_stage64(std::size_t n, const Capabilities& device);

// 64 threads for small shapes (N and K both <= 1152), 256 otherwise.
std::uint32_t f16_gemv_threads(std::size_t k, std::size_t n);
bool f16_gemv_uses_large_block(std::size_t k, std::size_t n);

// The tensors of one half-precision projection as kernel arguments.
struct HalfOperands {
    BufferRef activation = BufferRef::input(0);
    BufferRef packed = BufferRef::input(1);
    BufferRef scales = BufferRef::input(2);
    BufferRef zero_points;  // null: symmetric weights
    BufferRef bias;         // null: no bias
    BufferRef output = BufferRef::output(0);
    DataType activation_type = DataType::Float16;  // A, bias and Y
    DataType scale_type = DataType::Float16;

    bool has_zero_points() const { return !zero_points.is_null(); }
    bool has_bias() const { return !bias.is_null(); }
    bool scales_fp16() const { return scale_type == DataType::Float16; }
};

// The RMS-norm weight, of the activation type or fp32.
struct RmsNormGamma {
    BufferRef tensor;
    DataType type = DataType::Float16;
    bool is_half() const { return type != DataType::Float32; }
};

// The paths of run(), chosen by the activation dtype and the gate/up marker.
// Each validates its tensors (identically under both policies), then decides
// the launches of the context's policy.
LaunchPlan plan_f32(const PlanRequest& request);
LaunchPlan plan_half(const PlanRequest& request);
LaunchPlan plan_gate_up_swiglu(const PlanRequest& request);

// What the validated paths hand to nbits' own kernels (Fastest).
struct FastestRequest {
    const PlanRequest& request;
    HalfOperands operands;
    std::size_t m = 0;
    std::size_t bias_row_stride = 0;
    const RmsNormGamma* gamma = nullptr;            // RMS-norm prologue
    // The paired gate/up node: the up projection's weights (operands hold the gate's).
    const HalfOperands* up = nullptr;
};

// nbits' own kernels for a validated request, or false when none covers it
// (the caller then plans the original's launches).
bool plan_fastest(LaunchPlan& plan, const FastestRequest& fastest);

// Every g_idx value must name a K block: 0 <= g < k_blocks.
void check_group_index_range(const MatMulNBitsConfig& config, const std::vector<std::int32_t>& groups);

// A plan that launches nothing: the output is empty (M == 0).
LaunchPlan empty_plan(std::string variant, std::string reason);
// The variant name and its lazily formatted reason.
void set_variant(LaunchPlan& plan, std::string variant, std::function<std::string()> reason);
// record_kernel_variant_stage!("bias", ...) for the fp16 decode GEMVs.
void record_bias_stage(LaunchPlan& plan, bool has_bias, bool fold_bias_post_round);
// The f32 and fp16 metric: 2·M·N·K, plus M·N for a bias.
std::uint64_t matmul_flops(std::size_t m, std::size_t n, std::size_t k, bool has_bias);
// The paired gate/up metric: 4·M·N·K + 5·M·N.
std::uint64_t gate_up_flops(std::size_t m, std::size_t n, std::size_t k);
// `flops` plus the RMS-norm prologue's 4·M·K + 4·M.
std::uint64_t with_rmsnorm_flops(std::uint64_t flops, std::size_t m, std::size_t k);
// The fused RMS-norm reduces K in 128-element chunks with no tail: K % 128 == 0.
void require_rmsnorm_width(std::size_t k);
// Adds a scratch buffer of `bytes` (bounded by the device's memory, with a
// message naming `what` beyond it) and returns its number.
int add_scratch(LaunchPlan& plan, const PlanRequest& request, std::size_t bytes, std::string_view what);

}  // namespace nbits::ops::detail
