#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace nbits {

// How much one NVRTC compilation covers: the requested entry alone (fastest
// first launch) or the whole kernel source (one compile serves every entry).
enum class CompileGranularity { Entry, Source };

const char* to_string(CompileGranularity granularity);  // "entry" or "source"
std::optional<CompileGranularity> parse_granularity(std::string_view text);

// What the runtime compiles a kernel to when no cached image serves: PTX for
// compute_XY, which the driver translates to the GPU's machine code when it
// loads the module, or a CUBIN for the GPU's sm_XY, which NVRTC assembles in
// the compiling thread (CudaRuntime::prepare then assembles in parallel, and
// a later process loads the stored CUBIN without the driver's translation).
enum class JitImage { Ptx, Cubin };

const char* to_string(JitImage image);  // "ptx" or "cubin"
std::optional<JitImage> parse_jit_image(std::string_view text);

inline constexpr std::uint64_t kDefaultCacheMaxBytes = 1ull << 30;

// Where compiled kernel images persist between processes. An explicit option
// wins over the environment, the environment over the defaults.
struct DiskCacheOptions {
    // false, or NBITS_CACHE=off|0|false|no, keeps images in memory only.
    bool enabled = true;
    // Empty: $NBITS_CACHE_DIR, else $XDG_CACHE_HOME/nbits, else $HOME/.cache/nbits.
    std::string directory;
    // 0: $NBITS_CACHE_MAX_BYTES (a byte count, or with a K, M or G suffix),
    // else kDefaultCacheMaxBytes. Least recently used images go beyond it.
    std::uint64_t max_bytes = 0;
};

struct RuntimeOptions {
    int device = 0;
    CompileGranularity granularity = CompileGranularity::Entry;
    // PTX by default: on the H200 CUBIN loaded a decode step faster through
    // CudaRuntime::prepare (its compiles assemble in parallel) and slower one
    // entry after the other. Either way a driver that rejects this toolkit's
    // PTX makes the runtime switch to CUBIN.
    JitImage jit_image = JitImage::Ptx;
    DiskCacheOptions disk_cache;
};

// Which kernels an operator launches. Validation and error messages are the
// same under both; only the choice of launches differs.
enum class KernelPolicy {
    // The original operator's entries, geometry and output bytes.
    Original,
    // nbits' own kernels where they exist, the original's elsewhere.
    Fastest,
};

const char* to_string(KernelPolicy policy);  // "original" or "fastest"
std::optional<KernelPolicy> parse_kernel_policy(std::string_view text);

namespace ops {

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
// NBITS_DECODE_STAGE_META (0|1), NBITS_DECODE_PREFETCH (0|1),
// NBITS_DECODE_EARLY_ACTS (0|1) and NBITS_DECODE_OFFSET_CODES (0|1|2) for its
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
inline constexpr const char* kPrefillProgrammaticEnv = "NBITS_PREFILL_PDL";
inline constexpr const char* kPrefillRegisterHandbackEnv = "NBITS_PREFILL_REGISTER_HANDBACK";
inline constexpr const char* kDecodeProgrammaticEnv = "NBITS_DECODE_PDL";
inline constexpr const char* kDecodeStagesEnv = "NBITS_DECODE_STAGES";
inline constexpr const char* kDecodeTilesEnv = "NBITS_DECODE_TILES";
inline constexpr const char* kDecodeStageActsEnv = "NBITS_DECODE_STAGE_ACTS";
inline constexpr const char* kDecodeColWarpsEnv = "NBITS_DECODE_COL_WARPS";
inline constexpr const char* kDecodeClusterKEnv = "NBITS_DECODE_CLUSTER_K";
inline constexpr const char* kDecodeChunksEnv = "NBITS_DECODE_CHUNKS";
inline constexpr const char* kDecodeStageMetaEnv = "NBITS_DECODE_STAGE_META";
inline constexpr const char* kDecodePrefetchEnv = "NBITS_DECODE_PREFETCH";
inline constexpr const char* kDecodeEarlyActsEnv = "NBITS_DECODE_EARLY_ACTS";
inline constexpr const char* kDecodeOffsetCodesEnv = "NBITS_DECODE_OFFSET_CODES";

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
    // 1: on sm_90, wherever the wgmma GEMM runs (from M = 33; one weight set
    // or the paired gate/up node), its tiles fed by the tensor memory
    // accelerator run as a stream-K grid: one CTA a slot (64- and 128-token
    // tiles two an SM up to M = 128, 256-token tiles one an SM past it),
    // sharing the output tiles' k tiles evenly, the tiles split between CTAs
    // summed through fp32 partials in scratch; also on nodes whose grid of
    // whole tiles would not fill the device. 0: the plan's rule. Unset: the
    // plan's rule.
    std::optional<int> prefill_stream_k;
    // Columns of the weights Fastest's dequantise + cuBLASLt route
    // dequantises and multiplies at a time (64..1048576, rounded down to
    // whole tiles of 64 and capped by the scratch budget). Unset: the rule in
    // the plan (see the README's routing table).
    std::optional<int> prefill_chunk_columns;
    // 0: the fused prefill GEMMs launch as plain stream successors; 1: on
    // compute capability 9.0 and newer as programmatic dependents of the
    // kernel before them, as the decode kernels do. Unset: 1.
    std::optional<int> prefill_programmatic;
    // 1: in the wgmma GEMMs whose producer warps (fed by the tensor memory
    // accelerator, one CTA an SM) lend registers to the computing warps, the
    // producers no longer retry taking them back while the computing warps
    // still run: the stream-K producers exit with what they kept, the others
    // wait on a barrier the computing warps arrive at once they have released
    // theirs. Unset or 0: the retries, as measured so far.
    std::optional<int> prefill_register_handback;
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
    // Where the tensor-core decode kernels that load the activations from L2
    // (not staged with the weights) load a k step's: 0 as they compute it, 1
    // before they wait for its weights, made mma operands there. Unset: the
    // rule in the plan (1 at M = 9..16 of int4 block 32 for the paired
    // gate/up node and for one symmetric weight set of one column warp on two
    // CTAs of 8 warps an SM, else 0).
    std::optional<int> decode_early_acts;
    // Whether the tensor-core decode kernels' int4 mma takes the weights'
    // codes as the magic-number conversion leaves them (bf16 128 + q, fp16
    // 1024 + q), its accumulator starting at minus that offset (and the zero
    // point) times the block's sum of activations, instead of subtracting the
    // zero point from every code: 1 (the offset starts the block's mma
    // accumulator) or 2 (it is added after the block's mmas), 0 off. Unset:
    // the rule in the plan.
    std::optional<int> decode_offset_codes;
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
    // DECODE_CLUSTER_K 1, 2 or 4, DECODE_CHUNKS 1 or 2, DECODE_STAGE_META,
    // DECODE_PREFETCH and DECODE_EARLY_ACTS 0 or 1, DECODE_OFFSET_CODES 0, 1 or 2.
    static PlanOverrides parse(const std::map<std::string, std::string>& variables);
    // Whether any override is set.
    bool any() const;
    // Every override `over` sets replaces this one's; the others stay.
    void merge(const PlanOverrides& over);
};

}  // namespace ops

struct MatMulNBitsOptions {
    KernelPolicy policy = KernelPolicy::Original;
    // The developer overrides this operator plans with. Unset: the NBITS_*
    // environment variables as the operator is created
    // (ops::PlanOverrides::from_environment(), which a caller may merge its
    // own into); set: these alone, whatever the environment says.
    std::optional<ops::PlanOverrides> overrides = std::nullopt;
};

// Per call: where the work is ordered and where its scratch comes from.
struct RunOptions {
    // A stream of the runtime's context; every launch, copy and cuBLASLt call
    // of the run is ordered on it. nullptr: the runtime's own stream (pass
    // CU_STREAM_LEGACY for the legacy default stream).
    CUstream stream = nullptr;
    // Device scratch of the caller, at least MatMulNBits::workspace_bytes()
    // for the same tensors and 256-byte aligned. 0: nbits takes scratch from
    // its stream-ordered pool.
    CUdeviceptr workspace = 0;
    std::size_t workspace_bytes = 0;
};

}  // namespace nbits
