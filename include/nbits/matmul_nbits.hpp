#pragma once

#include "nbits/attributes.hpp"
#include "nbits/capabilities.hpp"
#include "nbits/error.hpp"
#include "nbits/launch_plan.hpp"
#include "nbits/options.hpp"
#include "nbits/runtime.hpp"
#include "nbits/tensor.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace nbits::ops {

// Private attributes the fusing graph optimizer sets on MatMulNBits nodes.
inline constexpr const char* kFoldedBiasAttr = "_cuda_matmul_nbits_folded_bias";
inline constexpr const char* kGateUpSwigluAttr = "_cuda_gate_up_swiglu";
inline constexpr const char* kRmsNormPrologueAttr = "_cuda_matmul_nbits_rmsnorm_prologue";
inline constexpr const char* kRmsNormEpsilonAttr = "_cuda_matmul_nbits_rmsnorm_epsilon";

// The node's attributes, checked: K, N, bits (4 or 8, default 4),
// block_size (power of two >= 16), weight_prepacked (0 only),
// accuracy_level (default 0) and the optimizer markers.
struct MatMulNBitsConfig {
    std::size_t k = 0;
    std::size_t n = 0;
    std::size_t bits = 4;
    std::size_t block_size = 0;
    std::int64_t accuracy_level = 0;
    bool fold_bias_post_round = false;
    bool gate_up_swiglu = false;
    bool rmsnorm_prologue = false;
    float rmsnorm_epsilon = 1e-5f;

    // Throws Error(InvalidArgument) with the original's reason and fix.
    static MatMulNBitsConfig from_attributes(const NodeAttributes& attributes);
    // The same checks on a config built by hand (the planner runs them
    // first): K and N in 1..2^31-1, bits 4 or 8, block_size a power of two
    // in 16..2^30.
    void validate() const;

    std::size_t k_blocks() const { return (k + block_size - 1) / block_size; }
    std::size_t padded_k() const { return k_blocks() * block_size; }
    std::size_t blob_size() const { return block_size * bits / 8; }
    std::size_t zp_row_bytes() const { return (k_blocks() * bits + 7) / 8; }
    // The persistent accuracy-level-4 activation workspace (bits 4, level 4):
    // padded_k int8 values, then one fp32 scale per K block. Zero otherwise.
    std::size_t accuracy4_workspace_bytes() const;
};

// What the plan may know about the machine, injected so that it stays pure.
struct PlanContext {
    Capabilities capabilities;
    PlanOverrides overrides;
    KernelPolicy policy = KernelPolicy::Original;
    // Reads g_idx (input 4) from the device for its range check; called only
    // when a g_idx tensor is present (f32 activations). Without one, such a
    // plan fails with a message saying how to supply the data.
    std::function<std::vector<std::int32_t>(const TensorDesc& g_idx)> read_g_idx;
};

// Validates the tensors exactly like the original and decides every launch.
// Throws Error with the original's messages (prefixed "cuda_ep MatMulNBits: ").
LaunchPlan plan_matmul_nbits(const MatMulNBitsConfig& config, const std::vector<TensorDesc>& inputs,
                             const std::vector<TensorDesc>& outputs, const PlanContext& context);

struct CaptureSupport {
    bool supported = false;
    std::string reason;  // why not, when not
};

// Why the last run could not be captured into a CUDA graph: it range-checked
// g_idx, which reads device memory back to the host.
inline constexpr const char* kCaptureUnsupportedReason =
    "requires a run without group_indices: g_idx is range-checked by a device-to-host read before every run";

// Receives each run's plan (variant, reason, bias stage, policy).
using TraceHook = std::function<void(const LaunchPlan& plan)>;

struct PlanCacheStats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::size_t entries = 0;
};

namespace detail {
struct OperatorAccess;
class PlanCache;
}

// com.microsoft::MatMulNBits on one runtime: Y = A · dequant(B)ᵀ (+ bias).
// Thread-safe: several threads may run one operator.
class MatMulNBits {
public:
    // Checks the attributes, takes options.overrides (else reads the
    // environment's), and allocates the persistent accuracy-level-4
    // workspace when the node needs one.
    MatMulNBits(std::shared_ptr<CudaRuntime> runtime, const NodeAttributes& attributes,
                const MatMulNBitsOptions& options = {});
    ~MatMulNBits();
    MatMulNBits(const MatMulNBits&) = delete;
    MatMulNBits& operator=(const MatMulNBits&) = delete;

    const MatMulNBitsConfig& config() const { return config_; }
    KernelPolicy policy() const { return options_.policy; }

    // The plan `run` would execute for these tensors, without running it.
    // From descriptors alone a present g_idx cannot be range-checked: that
    // plan fails and says to use plan_tensors instead.
    LaunchPlan plan(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs) const;
    // The same for device tensors: a present g_idx is copied to the host
    // (after synchronizing the runtime's stream) and range-checked, as run() does.
    LaunchPlan plan_tensors(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const;
    // The device scratch a run on these tensors needs: pass at least this
    // much in RunOptions::workspace, or let nbits' pool provide it.
    std::size_t workspace_bytes(const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs) const;

    // Validates, plans (once per tensor signature) and enqueues the work on
    // `options.stream`. Inputs follow the ONNX order [A, B, scales,
    // zero_points, g_idx, bias] plus gamma at 6 for the RMS-norm prologue;
    // the paired gate/up node takes [A, W_gate, scales_gate, W_up, scales_up,
    // (gamma), (zp_gate), (zp_up)]. Returns the executed plan (no steps for an
    // empty output, M == 0). On error nothing stays allocated and
    // capture_support() says Unsupported.
    std::shared_ptr<const LaunchPlan> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                                          const RunOptions& options = {});

    // Whether the last run took a path that may be captured into a CUDA graph.
    CaptureSupport capture_support() const;

    void set_trace(TraceHook hook);

    // Plans are cached by the tensors' dtypes, shapes, strides and presence;
    // these drop them (a later run plans afresh) and count hits and misses.
    void clear_plan_cache();
    PlanCacheStats plan_cache_stats() const;

private:
    friend struct detail::OperatorAccess;
    PlanContext context(const std::vector<Tensor>* tensors, CUstream stream) const;

    std::shared_ptr<CudaRuntime> runtime_;
    MatMulNBitsConfig config_;
    MatMulNBitsOptions options_;
    PlanOverrides overrides_;
    DeviceBuffer accuracy4_workspace_;
    mutable std::mutex mutex_;
    bool last_capture_safe_ = false;
    TraceHook trace_;
    std::unique_ptr<detail::PlanCache> plans_;
};

}  // namespace nbits::ops
