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

// Developer overrides of the launch geometry, read once per operator:
// NBITS_DOWN_COLS (8|4|2) and NBITS_ACC4_WARPS (1|2|4|8) for the original's
// decode GEMVs (ONNX_GENAI_DOWN_COLS and ONNX_GENAI_ACC4_WARPS are accepted as
// aliases), NBITS_PREFILL_SPLIT_K (1..8), NBITS_PREFILL_WGMMA_TILE_N (128|256),
// NBITS_PREFILL_WGMMA_MIN_M (17..65), NBITS_PREFILL_WGMMA_TILE_M (128|256) and
// NBITS_PREFILL_PRODUCER_WARPS (0|1|2|4), NBITS_PREFILL_TMA (0|1) and
// NBITS_PREFILL_TAIL_SPLIT (0|1), NBITS_PREFILL_WIDE_SPLIT (0|1) and
// NBITS_PREFILL_STREAM_K (0|1) for Fastest's fused prefill GEMM,
// NBITS_PREFILL_CHUNK_COLUMNS (64..1048576) for its dequantise + cuBLASLt
// route, NBITS_DECODE_PDL (0|1), NBITS_DECODE_STAGES (2..4), NBITS_DECODE_TILES
// (1|2), NBITS_DECODE_STAGE_ACTS (0|1), NBITS_DECODE_COL_WARPS (1|2|4),
// NBITS_DECODE_CLUSTER_K (1|2|4), NBITS_DECODE_CHUNKS (1|2),
// NBITS_DECODE_STAGE_META (0|1) and NBITS_DECODE_PREFETCH (0|1) for its
// decode kernels. Other values are ignored.
inline constexpr const char* kDownColumnsEnv = "NBITS_DOWN_COLS";
inline constexpr const char* kAccuracy4WarpsEnv = "NBITS_ACC4_WARPS";
inline constexpr const char* kDownColumnsAliasEnv = "ONNX_GENAI_DOWN_COLS";
inline constexpr const char* kAccuracy4WarpsAliasEnv = "ONNX_GENAI_ACC4_WARPS";
inline constexpr const char* kPrefillSplitKEnv = "NBITS_PREFILL_SPLIT_K";
inline constexpr const char* kPrefillWgmmaTileNEnv = "NBITS_PREFILL_WGMMA_TILE_N";
inline constexpr const char* kPrefillWgmmaMinMEnv = "NBITS_PREFILL_WGMMA_MIN_M";
inline constexpr const char* kPrefillWgmmaTileMEnv = "NBITS_PREFILL_WGMMA_TILE_M";
inline constexpr const char* kPrefillProducerWarpsEnv = "NBITS_PREFILL_PRODUCER_WARPS";
inline constexpr const char* kPrefillTmaEnv = "NBITS_PREFILL_TMA";
inline constexpr const char* kPrefillTailSplitEnv = "NBITS_PREFILL_TAIL_SPLIT";
inline constexpr const char* kPrefillWideSplitEnv = "NBITS_PREFILL_WIDE_SPLIT";
inline constexpr const char* kPrefillStreamKEnv = "NBITS_PREFILL_STREAM_K";
inline constexpr const char* kPrefillChunkColumnsEnv = "NBITS_PREFILL_CHUNK_COLUMNS";
inline constexpr const char* kDecodeProgrammaticEnv = "NBITS_DECODE_PDL";
inline constexpr const char* kDecodeStagesEnv = "NBITS_DECODE_STAGES";
inline constexpr const char* kDecodeTilesEnv = "NBITS_DECODE_TILES";
inline constexpr const char* kDecodeStageActsEnv = "NBITS_DECODE_STAGE_ACTS";
inline constexpr const char* kDecodeColWarpsEnv = "NBITS_DECODE_COL_WARPS";
inline constexpr const char* kDecodeClusterKEnv = "NBITS_DECODE_CLUSTER_K";
inline constexpr const char* kDecodeChunksEnv = "NBITS_DECODE_CHUNKS";
inline constexpr const char* kDecodeStageMetaEnv = "NBITS_DECODE_STAGE_META";
inline constexpr const char* kDecodePrefetchEnv = "NBITS_DECODE_PREFETCH";

struct PlanOverrides {
    std::optional<int> down_columns;
    std::optional<int> accuracy4_warps;
    // CTAs (a thread block cluster, compute capability 9.0 and newer) that
    // split the K of one output tile of the fused prefill GEMM; the wgmma
    // route then counts the split grid when it asks whether the SMs fill.
    // Unset: the split measured fastest on sm_90 (none elsewhere).
    std::optional<int> prefill_split_k;
    // Weight rows per CTA of the sm_90 wgmma GEMM: 128 (two warpgroups, two
    // CTAs an SM) or 256 (four warpgroups sharing each activation stage, one
    // CTA an SM). Unset: 128.
    std::optional<int> prefill_wgmma_tile_n;
    // The smallest M the sm_90 wgmma GEMM takes (17..65); up to M = 64 it
    // runs tiles of 64 tokens (wgmma m64n64k16), 65 keeps it above that.
    // Unset: 33, from where it measured faster than the mma.sync GEMM.
    std::optional<int> prefill_wgmma_min_m;
    // Tokens per CTA of the sm_90 wgmma GEMM above M = 64: 128 (m64n128k16,
    // two CTAs an SM) or 256 (two m64n128k16 a k step, one CTA an SM); either
    // lets the wgmma GEMM take any M from 65 on where its grid fills three
    // quarters of the SMs, instead of dequantise + cuBLASLt. Unset: 128, and
    // the plan's rule for M (see the README's routing table).
    std::optional<int> prefill_wgmma_tile_m;
    // Producer warps of the sm_90 wgmma GEMM (0, 1, 2 or 4): the warps that
    // issue every k tile's copies into the stages, handing them to the
    // computing warpgroups through mbarriers, so that those never wait on a
    // CTA barrier. 0: every warp copies and computes. Unset: the plan's rule.
    std::optional<int> prefill_producer_warps;
    // 1: the sm_90 wgmma GEMM's k tiles come by the tensor memory accelerator
    // (one thread or its producers issuing a tensor copy of the activations
    // and one of each weight set a k tile) where K and the weight rows allow
    // it, on every tile height; 0: by cp.async, on 128-token tiles up to
    // M = 512. Unset: by the tensor memory accelerator on 128-token tiles up
    // to M = 128 and 256-token tiles past it (measured faster), by cp.async on
    // the 64-token ones.
    std::optional<int> prefill_tma;
    // 1: where the sm_90 wgmma GEMM's grid ends in a partial wave of CTAs, a
    // first launch takes the column tiles of the whole waves and a second the
    // rest with their K split over clusters of 2 to 4 CTAs, as many as make
    // that tail shortest; 0: one launch. Unset: one launch (measured slower).
    std::optional<int> prefill_tail_split;
    // 1: on sm_90 at M = 12..32, a node whose 128-row tiles of the fused
    // GEMM fill at least four fifths of one round of CTAs only when their K
    // is split over clusters of 2 takes those tiles so split, instead of the
    // decode kernel (M <= 16) or the 64-row tiles; 0: the plan's rule. Unset:
    // the plan's rule (the split measured no faster).
    std::optional<int> prefill_wide_split;
    // 1: on sm_90 past M = 128, the wgmma GEMM's 256-token tiles fed by the
    // tensor memory accelerator (one weight set or the paired gate/up node)
    // run as a stream-K grid: one CTA an SM, sharing the output tiles' k
    // tiles evenly, the tiles split between CTAs summed through fp32
    // partials in scratch; also on nodes whose grid of whole tiles would not
    // fill the device. 0: the plan's rule. Unset: the plan's rule.
    std::optional<int> prefill_stream_k;
    // Columns of the weights Fastest's dequantise + cuBLASLt route
    // dequantises and multiplies at a time (64..1048576, rounded down to
    // whole tiles of 64 and capped by the scratch budget). Unset: the rule in
    // the plan (see the README's routing table).
    std::optional<int> prefill_chunk_columns;
    // 0: the tensor-core decode kernels launch as plain stream successors; 1:
    // on compute capability 9.0 and newer as programmatic dependents of the
    // kernel before them (programmatic dependent launch). Unset: 1.
    std::optional<int> decode_programmatic;
    // k steps each warp of the tensor-core decode kernels keeps in its
    // cp.async ring (2..4). Unset: 2, measured fastest on the H200.
    std::optional<int> decode_stages;
    // 16-column tiles a CTA of the tensor-core decode kernels takes per
    // column group (1 or 2; the paired node always 1). Unset: 2 when the
    // groups fill the grid, else 1.
    std::optional<int> decode_tiles;
    // 0: the tensor-core decode kernels load each k step's activations when
    // they compute it; 1: the rows of A go through the cp.async ring with the
    // weights wherever the kernel can (M <= 8, no RMS-norm prologue, K a
    // multiple of 8). Unset: where it measured faster on the H200 (M = 1;
    // M = 2..8 for one weight set of one column tile with K >= N).
    std::optional<int> decode_stage_acts;
    // Warps across a CTA's columns in the tensor-core decode kernels (1, 2 or
    // 4; at most the CTA's warps): the warps of one k step share its
    // activations through L1 and a CTA's column group grows by that factor.
    // Unset: the rule in the plan (see the README's routing table).
    std::optional<int> decode_col_warps;
    // CTAs of a thread block cluster (compute capability 9.0 and newer) that
    // split the K of each column group of the tensor-core decode kernels, 1, 2
    // or 4 (capped so that each warp keeps a k step). Unset: the rule in the
    // plan (see the README's routing table).
    std::optional<int> decode_cluster_k;
    // 16-byte chunks each lane of the int4 tensor-core decode kernels copies
    // per weight row and k step (1 or 2; the step grows to 128 or 256 codes):
    // two double the bytes a warp keeps in flight and halve its k steps.
    // Unset: the rule in the plan (see the README's routing table).
    std::optional<int> decode_chunks;
    // 1: the tensor-core decode kernels copy each k step's scales and zero
    // points into the cp.async ring with its weights where the kernel can
    // (exact mode, 16-bit scales: int4 from block 32, int8 from block 16; K
    // blocks a multiple of 4 at int4 block 32 and int8 block 16, else of 2;
    // zero-point rows of whole 4-byte words); 0: they load them into
    // registers a step ahead. Unset: the rule in the plan (staged where that
    // measured faster: int4 block 32, int8 block 16, and int8 block 32 at
    // M = 1 with two CTAs an SM).
    std::optional<int> decode_stage_meta;
    // 1: a tensor-core decode kernel launched as a programmatic dependent
    // asks L2 for the first k steps of its first column group (weights,
    // scales, zero points) while it waits for the kernel before it; 0: it
    // does not. Unset: 1.
    std::optional<int> decode_prefetch;
    // NBITS_* first, then the aliases.
    static PlanOverrides from_environment();
    // The same rules over given variables (environment name -> text; a name
    // left out is unset, and an alias counts where its NBITS_* name is left
    // out). DOWN_COLS must be exactly "8", "4" or "2"; the others are unsigned
    // decimals with an optional '+' ("+4" and "04" count): ACC4_WARPS 1, 2, 4
    // or 8, PREFILL_SPLIT_K 1 to 8, PREFILL_WGMMA_TILE_N 128 or 256,
    // PREFILL_WGMMA_MIN_M 17 to 65, PREFILL_WGMMA_TILE_M 128 or 256,
    // PREFILL_PRODUCER_WARPS 0, 1, 2 or 4, PREFILL_TMA, PREFILL_TAIL_SPLIT and
    // PREFILL_WIDE_SPLIT and PREFILL_STREAM_K 0 or 1, DECODE_PDL
    // 0 or 1, DECODE_STAGES 2 to 4, DECODE_TILES 1 or 2, DECODE_STAGE_ACTS 0 or
    // 1, DECODE_COL_WARPS 1, 2 or 4, PREFILL_CHUNK_COLUMNS 64 to 1048576,
    // DECODE_CLUSTER_K 1, 2 or 4, DECODE_CHUNKS 1 or 2, DECODE_STAGE_META and
    // DECODE_PREFETCH 0 or 1.
    static PlanOverrides parse(const std::map<std::string, std::string>& variables);
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
    // Checks the attributes, reads the environment overrides, and allocates
    // the persistent accuracy-level-4 workspace when the node needs one.
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
