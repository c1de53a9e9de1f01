// KernelPolicy::Fastest for M > 1 (half-precision activations): the fused
// dequantising tensor-core GEMM of matmul_prefill.cu (mma.sync, and on sm_90
// warpgroup MMA with compute_90a), or past its M range the weights
// dequantised in chunks of columns into scratch, each multiplied by cuBLASLt.
// On sm_90 the fused GEMMs split K over thread block clusters where the H200
// measured it faster (measured_split_k); NBITS_PREFILL_SPLIT_K overrides the
// split, NBITS_PREFILL_WGMMA_MIN_M the smallest M of the wgmma GEMM, and
// NBITS_PREFILL_WGMMA_TILE_N=256 (256 weight rows a CTA, measured slower, so
// not a default) its width, NBITS_PREFILL_WGMMA_TILE_M (128 or 256 tokens a
// tile, any M past 64) its height. The RMS-norm prologue normalises chunks of
// rows into scratch first. Scratch never exceeds kWorkspaceBudget, whatever
// the shape.

#include "ops/plan_fastest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

namespace nbits::ops::detail {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
// The most scratch a Fastest run takes: chunks are sized to fit.
constexpr std::size_t kWorkspaceBudget = 64 * kMiB;
// The algorithms cuBLASLt picks for the dequantised chunks ask for at most 4 bytes of workspace on the H200, bar
// split-K ones for chunks too narrow to fill the SMs (5-7 MB), which the wave-aligned widths avoid; the rest of
// the budget widens the chunks.
constexpr std::size_t kGemmWorkspaceBytes = 4 * kMiB;
constexpr std::size_t kNormalizedBudget = 8 * kMiB;
// The paired node's gate and up projections of a chunk, in fp32 (8 bytes a row and column) so that its SwiGLU pass
// rounds once. At M = 2048 it holds 2048 columns, whose cuBLASLt GEMMs fill one wave of the H200's SMs.
constexpr std::size_t kSwigluBudget = 32 * kMiB;
constexpr std::size_t kSwigluBytes = 2 * sizeof(float);

// Bytes of one fp32 projection of `rows` x `columns`, a whole number of 256 bytes: the up projection follows the
// gate's at the alignment cuBLASLt's heuristic assumes of every matrix.
std::size_t projection_bytes(std::size_t rows, std::size_t columns)
{
    return (rows * columns * sizeof(float) + 255) / 256 * 256;
}

// Columns of a dequantised weight chunk are a multiple of this (cuBLASLt tiles).
constexpr std::size_t kChunkColumns = 64;
constexpr std::size_t kFusedMaxM = 128;
// The most launches one prefill plan holds. Realistic prompts stay far below
// (a 70B gate/up node with its RMS-norm, M = 32768, takes about 6,000); a
// node beyond it would spend more host time and memory on the plan than the
// launches are worth, so the original's path (a few launches) takes it.
constexpr std::size_t kMaxPrefillSteps = std::size_t{1} << 16;
constexpr std::uint32_t kElementwiseThreads = 256;
constexpr std::size_t kElementwiseUnit = 8;  // elements of a row each thread of an epilogue takes at a time
constexpr std::uint32_t kDequantizeThreads = 256;
constexpr std::uint32_t kDequantizeUnits = 4;
constexpr std::uint32_t kNormThreads = 256;

constexpr int kGammaSlot = 6;

// Tokens a tile of the wgmma GEMM takes up to M = 64 (m64n64k16).
constexpr std::size_t kWgmmaSmallTileM = 64;

// A tile configuration of the fused prefill GEMM (matmul_prefill.cu).
struct PrefillTiles {
    int tile_n, tile_m, tile_k, warps_n, warps_m, warps_k, stages, min_ctas;
    bool wgmma = false;  // NBITS_WGMMA: sm_90a warpgroup MMA main loop
    int split_k = 1;     // NBITS_SPLIT_K: CTAs of a cluster sharing one output tile's K
    int producer_warps = 0;  // NBITS_PRODUCER_WARPS: wgmma only, warps that only copy
    bool tma = false;        // NBITS_TMA: the producers' copies by the tensor memory accelerator
    // With split_k > 1: the column tile from which K is split (a second launch after the whole waves of
    // unsplit tiles, NBITS_PREFILL_TAIL_SPLIT); 0: every tile's K is split.
    std::size_t split_from_column_tile = 0;
    bool stream_k = false;  // NBITS_STREAM_K: a grid of one CTA a slot sharing the tiles' k tiles evenly
    // The wgmma GEMM's 64-token tiles (M <= 64), which take producer warps and split K from fewer weights.
    bool small_wgmma_tiles() const { return wgmma && tile_m == static_cast<int>(kWgmmaSmallTileM); }
    std::uint32_t threads() const
    {
        return static_cast<std::uint32_t>(32 * (warps_n * warps_m * warps_k + producer_warps));
    }
};

// The wgmma configuration: two warpgroups of 64 weight rows, 128 tokens, two
// CTAs an SM (the register cap of 128 that allows: at 129 and more one CTA
// ran, 8B gate/up M = 128 117 against 89 us). Five stages keep three k tiles
// of copies in flight, as the last wgmma of a tile still reads its stage
// while the next tile is computed (fewer where two CTAs would not fit).
constexpr PrefillTiles kWgmmaTiles{128, 128, 64, 8, 1, 1, 5, 2, true};
// NBITS_PREFILL_WGMMA_TILE_N=256: four warpgroups over 256 weight rows, one
// CTA an SM; each activation stage (read from L2 once per column tile) feeds
// twice the rows.
constexpr PrefillTiles kWgmmaWideTiles{256, 128, 64, 16, 1, 1, 4, 1, true};
// 256 tokens of 128 weight rows: two m64n128k16 a warpgroup and k16 step, so
// each dequantised A fragment feeds twice the tokens; 128 accumulators a
// thread (190 registers) leave one CTA an SM.
constexpr PrefillTiles kWgmmaTallTiles{128, 256, 64, 8, 1, 1, 5, 1, true};
constexpr std::size_t kWgmmaMinM = 33;
constexpr std::size_t kWgmmaMaxM = 256;
// Past this M the wgmma GEMM fed by the tensor memory accelerator takes 256-token tiles (see wgmma_tiles).
constexpr std::size_t kWgmmaTallMinM = 128;
// Past kWgmmaMaxM the wgmma GEMM (128-token tiles) still beats dequantise + cuBLASLt up to this M where its grid
// covers every CTA slot (see wgmma_prefill); the paired gate/up node, whose dequantised route takes two GEMMs and
// a SwiGLU pass per chunk, up to the second, and past it while M x K stays below the third (see wgmma_max_m).
constexpr std::size_t kWgmmaFullGridMaxM = 512;
constexpr std::size_t kWgmmaPairedFullGridMaxM = 1024;
constexpr std::size_t kWgmmaPairedMaxMK = std::size_t{1} << 23;
// Producer warps of the 64-token wgmma tiles (NBITS_PRODUCER_WARPS): the H200, fp16 int4 block 32, against every
// warp copying and computing (same call): Llama-3-8B up M = 40 36.59 -> 35.23 us, M = 64 37.36 -> 36.29,
// Llama-3-70B up M = 40 122.51 -> 114.02, M = 64 123.46 -> 115.12; Qwen2.5-7B up (53.18 -> 53.36 at M = 64),
// Llama-3-8B qkv and down within 1%. 2 producer warps (an earlier call): 36.34, 117.81, 53.74 at M = 64.
constexpr int kWgmmaProducerWarps = 4;
// Weights (K x N) from which the split wgmma GEMM beats dequantise + cuBLASLt
// (128-token tiles) and the mma.sync GEMM (64-token tiles) on the H200 (see
// measured_split_k): just below the smallest node measured to gain, Qwen2.5-7B
// o (12.8 M); Phi-3.5-mini o (9.4 M) lost.
constexpr std::size_t kSplitWgmmaMinWeights = 12000000;
// The same bound for two rows of 64-token tiles at M = 65..128 (two_rows_of_small_tiles_pay): just below
// Phi-3.5-mini o (9.4 M), the smallest node measured to gain in every layout there; 2944 x 3072 (9.0 M) gained
// in fp16 and lost in bf16 with zero points. Below kSplitWgmmaMinWeights they split only where a CTA keeps at most
// kSmallSplitMaxKTiles k tiles: the dequantise + cuBLASLt route takes these nodes about 20 us whatever their
// shape, and a two-rows CTA of 11 or 12 k tiles (2048 x 4608 split 3, 3072 x 3072 split 4) beat it in every
// layout, one of 16 (2048 x 5120 split 2) only in fp16.
constexpr std::size_t kSplitTwoRowsMinWeights = 9200000;
constexpr std::size_t kSmallSplitMaxKTiles = 12;

// Tiles of 128 weight rows for M = 12..32 (kWideTilesMinM..kWideTilesMaxM): each stage of 16 or 32 tokens feeds
// twice the rows of the presets' 64, K split over two warps.
constexpr PrefillTiles kWideSmallTiles{128, 16, 128, 4, 1, 2, 4, 2};
constexpr std::size_t kWideTilesMinM = 12;
constexpr std::size_t kWideTilesMaxM = 32;
// The least K at which the mma.sync GEMM splits a grid short of the SMs over clusters of 4 (measured_split_k).
constexpr std::size_t kDeepSplitMinK = 8192;

// The K split of kWideSmallTiles where they take the node (wide_small_tiles_pay): 1 by the measured rule below,
// 2 (clusters of 2 CTAs) with NBITS_PREFILL_WIDE_SPLIT=1 where only the split grid fills four fifths of a round
// (Llama-3-8B up, 112 tiles: 224 CTAs on the H200's 264 slots); 0 where they do not take it.
int wide_small_tiles_split(const FastestRequest& fastest)
{
    const Capabilities& device = fastest.request.context.capabilities;
    const MatMulNBitsConfig& config = fastest.request.config;
    const DataType act = fastest.operands.activation_type;
    if (device.compute_major != 9 || device.compute_minor != 0 || device.multiprocessor_count == 0 ||
        fastest.up != nullptr || fastest.gamma != nullptr || fastest.operands.has_zero_points() ||
        config.bits != 4 || (act != DataType::Float16 && act != DataType::BFloat16) ||
        fastest.m < kWideTilesMinM || fastest.m > kWideTilesMaxM) {
        return 0;
    }
    const std::size_t slots = 2 * std::size_t{device.multiprocessor_count};
    const std::size_t tiles = div_ceil(config.n, static_cast<std::size_t>(kWideSmallTiles.tile_n));
    if (tiles >= 3 * slots || (5 * tiles >= 4 * slots && tiles <= slots)) {
        return 1;
    }
    const bool split_fills = 5 * 2 * tiles >= 4 * slots && 2 * tiles <= slots &&
                             config.k > static_cast<std::size_t>(kWideSmallTiles.tile_k);
    return fastest.request.context.overrides.prefill_wide_split == 1 && split_fills ? 2 : 0;
}

}  // namespace

// Whether the fused GEMM on kWideSmallTiles beats the decode kernel (M = 12..16) and the preset's 64-row tiles
// (M = 17..32): int4, symmetric, one weight set, no RMS-norm prologue, on sm_90, where the grid of 128-row
// tiles (two CTAs an SM) either fills at least four fifths of one round or spans three rounds and more. Measured
// on the H200 (fp16 int4 block 32, `nbits-bench --sweep decode --shape ...`, plan -> these tiles, same call, us):
// lm_head 3584 x 152064 (4.5 rounds) M = 12 136.48 -> 123.39, M = 16 145.98 -> 124.97, M = 32 168.37 -> 149.75;
// 4096 x 128256 (3.8) M = 16 136.48 -> 123.89, M = 32 170.80 -> 154.48 (bf16 M = 16 141.25 -> 125.77); 8192 x
// 128256 M = 16 267.97 -> 248.91, M = 32 332.12 -> 299.65; 896 x 151936 M = 16 39.86 -> 33.52, M = 32 57.75 ->
// 44.84; 3072 x 32064 (0.95) M = 16 29.16 -> 26.15, M = 32 35.45 -> 32.05; 4096 x 28672 (0.85) M = 16 37.23 ->
// 34.59, M = 32 45.91 -> 42.19. Slower where the last round is partial: 8192 x 57344 (1.7 rounds) M = 16 122.43 ->
// 126.10, M = 32 149.45 -> 154.69; 3584 x 37888 (1.12) M = 12 39.49 -> 41.84, M = 32 50.89 -> 54.41; and on every
// node of fewer columns (Llama-3-8B down M = 16 19.81 -> 38.40, qkv 9.77 -> 15.00), at M = 9 (lm_head 118.38 ->
// 121.55) and with zero points (lm_head M = 12 143.33 -> 148.33, M = 16 149.93 -> 149.51).
bool wide_small_tiles_pay(const FastestRequest& fastest)
{
    return wide_small_tiles_split(fastest) > 0;
}

namespace {

// The presets that measured fastest on an H200 by M (the harness of
// matmul_prefill.cu), before the constraints of the node and the device.
PrefillTiles preset_for(const FastestRequest& fastest, std::size_t m)
{
    const std::size_t k = fastest.request.config.k;
    if (wide_small_tiles_pay(fastest)) {
        PrefillTiles tiles = kWideSmallTiles;
        tiles.tile_m = m <= 16 ? 16 : 32;
        return tiles;
    }
    if (m <= 16) {
        return {64, 16, 256, 4, 1, 2, 4, 1};
    }
    if (m <= 32) {
        return {64, 32, 256, 4, 1, 2, 4, 1};
    }
    if (m <= 64) {
        return k >= 4096 ? PrefillTiles{128, 64, 128, 4, 1, 2, 4, 1} : PrefillTiles{64, 32, 128, 4, 1, 1, 4, 1};
    }
    return {128, 128, 64, 4, 2, 1, 4, 2};
}

// The dynamic shared memory of a fused prefill CTA, as matmul_prefill.cu
// computes it (kSmemBytes).
std::size_t prefill_shared_bytes(const PrefillTiles& t, const MatMulNBitsConfig& config, std::size_t scale_bytes,
                                 bool zero_points)
{
    const std::size_t tile_k = static_cast<std::size_t>(t.tile_k);
    const std::size_t blocks_per_stage = tile_k >= config.block_size ? tile_k / config.block_size : 1;
    const std::size_t k_blocks = (config.k + config.block_size - 1) / config.block_size;
    // The 4-byte words of a row's scales (zero points) a stage holds (meta_words).
    const auto meta_words = [](std::size_t row_bytes, std::size_t bytes, std::size_t unit) {
        if (row_bytes % 4 == 0 && (bytes % 4 == 0 || 4 % bytes == 0)) {
            return (bytes + 3) / 4;
        }
        return ((unit >= 4 ? 0 : 4 - unit) + bytes - 1) / 4 + 1;
    };
    const std::size_t scale_words = meta_words(k_blocks * scale_bytes, blocks_per_stage * scale_bytes, scale_bytes);
    const std::size_t zp_words =
        config.bits == 4 ? meta_words((k_blocks + 1) / 2, blocks_per_stage == 1 ? 1 : blocks_per_stage / 2, 1)
                         : meta_words(k_blocks, blocks_per_stage, 1);
    const std::size_t raw = static_cast<std::size_t>(t.tile_n) * tile_k * config.bits / 8 +
                            static_cast<std::size_t>(t.tile_m) * tile_k * 2 +
                            static_cast<std::size_t>(t.tile_n) * 4 * (scale_words + (zero_points ? zp_words : 0));
    // wgmma stages start on 1024-byte swizzle atoms, and the kernel aligns its
    // dynamic shared memory up to one.
    const std::size_t align = t.wgmma ? 1024 : 16;
    const std::size_t stage = (raw + align - 1) / align * align;
    const std::size_t reduction = static_cast<std::size_t>(t.warps_k) * t.tile_m * (t.tile_n + 4) * 4;
    // Producer warps (or the tensor memory accelerator) hand the stages over through a full and an empty mbarrier
    // each.
    const std::size_t barriers = t.producer_warps > 0 || t.tma ? 16 * static_cast<std::size_t>(t.stages) : 0;
    return std::max(static_cast<std::size_t>(t.stages) * stage, reduction) + barriers + (t.wgmma ? 1024 : 0);
}

// The preset adapted to the node and the device: a thread's k range must lie
// in one quantization block, and the stages must fit the opt-in shared memory.
std::optional<PrefillTiles> fit_tiles(PrefillTiles t, const FastestRequest& fastest, std::size_t& shared_bytes)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    while (8 * (t.tile_k / t.warps_k / 32) > static_cast<int>(config.block_size)) {
        if (t.tile_k > 64) {
            t.tile_k /= 2;
        } else if (t.warps_k > 1) {
            t.warps_k /= 2;
        } else {
            return std::nullopt;
        }
    }
    const std::size_t scale_bytes = element_size(fastest.operands.scale_type);
    const Capabilities& device = fastest.request.context.capabilities;
    for (; t.stages >= (t.wgmma ? 3 : 2); --t.stages) {
        shared_bytes = prefill_shared_bytes(t, config, scale_bytes, fastest.operands.has_zero_points());
        // The wgmma tiles must also keep MIN_CTAS of them resident on an SM: a fifth stage that left one CTA an
        // SM would cost more than it hides.
        const bool resident = !t.wgmma || resident_on_sm(device, static_cast<std::size_t>(t.min_ctas), shared_bytes);
        if (shared_bytes <= device.max_shared_memory_per_block_optin && resident) {
            return t;
        }
    }
    return std::nullopt;
}

void tile_defines(StepBuilder& step, const PrefillTiles& t)
{
    step.define("NBITS_TILE_N", t.tile_n)
        .define("NBITS_TILE_M", t.tile_m)
        .define("NBITS_TILE_K", t.tile_k)
        .define("NBITS_WARPS_N", t.warps_n)
        .define("NBITS_WARPS_M", t.warps_m)
        .define("NBITS_WARPS_K", t.warps_k)
        .define("NBITS_STAGES", t.stages)
        .define("NBITS_MIN_CTAS", t.min_ctas)
        .define("NBITS_WGMMA", t.wgmma ? 1 : 0)
        .arch_specific(t.wgmma);
    if (t.split_k > 1) {
        step.define("NBITS_SPLIT_K", t.split_k);
    }
    if (t.producer_warps > 0) {
        step.define("NBITS_PRODUCER_WARPS", t.producer_warps);
    }
    if (t.tma) {
        step.define("NBITS_TMA", 1);
    }
}

// NBITS_PREFILL_REGISTER_HANDBACK=1: where the producer warps lend registers to the computing warps (TMA-fed, four
// producer warps, one CTA an SM), they stop retrying setmaxnreg.inc while the computing warps run. Nsight Compute
// on the H100 (Qwen2.5-7B qkv at M = 512, the stream-K grid) counted 276,433 such retries, 1.1 M of the kernel's
// 10.5 M warp instructions, issued on the computing warps' schedulers. Off unless asked: removing them moved 21
// prefill rows by -1.0% to +0.6% on the H100 (the computing warps wait on latency, not on issue slots).
bool register_handback(const FastestRequest& fastest, const PrefillTiles& t)
{
    const bool lends_registers = t.wgmma && t.tma && t.producer_warps == 4 && t.min_ctas == 1;
    return lends_registers && fastest.request.context.overrides.prefill_register_handback == 1;
}

// Tensor maps of the TMA-fed wgmma GEMM (NBITS_TMA): rows [row, row + rows)
// of A in boxes of a k tile by the tile's tokens, 128B-swizzled as wgmma
// reads them, and a weight set's rows in boxes of a k tile's bytes by
// `box_rows` rows.
TensorMapArg activation_map(const FastestRequest& fastest, BufferRef activation, std::size_t rows,
                            const PrefillTiles& tiles)
{
    const std::size_t k = fastest.request.config.k;
    TensorMapArg map;
    map.base = activation;
    map.element = fastest.operands.activation_type == DataType::BFloat16 ? TensorMapArg::Element::BFloat16
                                                                           : TensorMapArg::Element::Float16;
    map.width = k;
    map.rows = rows;
    map.row_bytes = k * 2;
    map.box_width = static_cast<std::uint32_t>(tiles.tile_k);
    map.box_rows = static_cast<std::uint32_t>(tiles.tile_m);
    map.swizzle_128b = true;
    return map;
}

TensorMapArg weight_map(const FastestRequest& fastest, BufferRef packed, const PrefillTiles& tiles,
                        std::uint32_t box_rows)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    TensorMapArg map;
    map.base = packed;
    map.width = config.k_blocks() * config.blob_size();
    map.rows = config.n;
    map.row_bytes = map.width;
    map.box_width = static_cast<std::uint32_t>(static_cast<std::size_t>(tiles.tile_k) * config.bits / 8);
    map.box_rows = box_rows;
    return map;
}

// Column tiles of a fused GEMM grid with `tiles` (half as many columns a CTA for the paired node).
std::size_t prefill_column_tiles(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const std::size_t columns_per_cta = static_cast<std::size_t>(fastest.up != nullptr ? tiles.tile_n / 2 : tiles.tile_n);
    return div_ceil(fastest.request.config.n, columns_per_cta);
}

// Output tiles of a fused GEMM grid with `tiles` over `rows` rows (the node's M unless a pass takes fewer): column
// tiles x row tiles.
std::size_t prefill_output_tiles(const FastestRequest& fastest, const PrefillTiles& tiles, std::size_t rows)
{
    return prefill_column_tiles(fastest, tiles) * div_ceil(rows, static_cast<std::size_t>(tiles.tile_m));
}

std::size_t prefill_output_tiles(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    return prefill_output_tiles(fastest, tiles, fastest.m);
}

// The CTAs of `tiles` the device runs at once: min_ctas an SM.
std::size_t cta_slots(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    return static_cast<std::size_t>(tiles.min_ctas) * fastest.request.context.capabilities.multiprocessor_count;
}

// Whether a wgmma grid of `ctas` CTAs of `tiles` keeps enough of the device busy to beat dequantise + cuBLASLt
// and the mma.sync GEMM: seven tenths of the SMs up to M = 128, three quarters up to M = 256, every CTA slot past
// it (see wgmma_prefill). At M <= 128 the grids of 93 to 98 CTAs that seven tenths admits are the split ones of 24
// and 32 column tiles, 96 CTAs a CTA an SM, which measured faster than what three quarters left them (H100 80GB
// HBM3, fp16 int4 block 32, one call, two processes each, M = 33 / 48 / 64 / 96 / 128, us): Llama-3-8B o split
// 4 -> 3 (past M = 64 two rows of 64-token tiles split 2 -> one row of 128 split 3) 19.95 / 20.48 / 20.69 / 20.46
// / 20.64 -> 16.35 / 16.40 / 16.69 / 19.31 / 20.18, down 48.19 / 48.58 / 48.26 / 51.01 / 50.93 -> 36.93 / 37.20
// / 37.39 / 45.54 / 46.54; Phi-3.5-mini down (mma.sync split 4 up to M = 64, two rows split 4 past it -> one row
// split 4) 24.18 / 25.79 / 26.14 / 32.19 / 32.24 -> 20.64 / 20.82 / 21.68 / 24.93 / 25.87; bf16 with block 128
// zero points alike (8B down M = 64 55.84 -> 42.48, Phi-3.5-mini down M = 128 37.33 -> 30.54).
bool wgmma_grid_fills(const FastestRequest& fastest, const PrefillTiles& tiles, std::size_t ctas)
{
    const std::size_t sms = fastest.request.context.capabilities.multiprocessor_count;
    if (fastest.m > kWgmmaMaxM) {
        return ctas >= cta_slots(fastest, tiles);
    }
    return fastest.m > kWgmmaTallMinM ? 4 * ctas >= 3 * sms : 10 * ctas >= 7 * sms;
}

// The cheapest split of a wgmma grid of `tiles` over clusters of 4, 3 or 2 CTAs (measured_split_k): of those
// whose clusters run in one round and whose grid keeps the wgmma route (wgmma_grid_fills), the fewest
// k tiles a CTA, a k tile costing 5/3 where the clusters need a second CTA on some SMs, and a 128-token k tile
// 4/3 of a 64-token one (see wgmma_tiles). Split 1 and cost 0 where none qualifies: nodes of fewer than
// kSplitWgmmaMinWeights weights (kSplitTwoRowsMinWeights for two rows, whose CTAs then keep at most
// kSmallSplitMaxKTiles k tiles), and grids of more than one row tile but the 64-token tiles' two at M = 65..128.
struct WgmmaSplit {
    std::size_t split = 1;
    std::size_t cost = 0;
};

WgmmaSplit cheapest_wgmma_split(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const Capabilities& device = fastest.request.context.capabilities;
    const std::size_t row_tiles = div_ceil(fastest.m, static_cast<std::size_t>(tiles.tile_m));
    const bool small_pair = tiles.small_wgmma_tiles() && row_tiles == 2;
    const std::size_t weights = config.k * config.n;
    if ((row_tiles != 1 && !small_pair) ||
        weights < (small_pair ? kSplitTwoRowsMinWeights : kSplitWgmmaMinWeights)) {
        return {};
    }
    const std::size_t output_tiles = prefill_output_tiles(fastest, tiles);
    const std::size_t k_tiles = div_ceil(config.k, static_cast<std::size_t>(tiles.tile_k));
    const std::size_t max_cta_k_tiles = weights < kSplitWgmmaMinWeights ? kSmallSplitMaxKTiles : k_tiles;
    const std::size_t tile_cost = tiles.small_wgmma_tiles() ? 3 : 4;
    WgmmaSplit best;
    for (const std::size_t split : {std::size_t{4}, std::size_t{3}, std::size_t{2}}) {
        const std::size_t lone = device.clusters_at_once(split);
        if (output_tiles > lone * static_cast<std::size_t>(tiles.min_ctas) ||
            !wgmma_grid_fills(fastest, tiles, output_tiles * split)) {
            continue;
        }
        const std::size_t cta_k_tiles = div_ceil(k_tiles, split);
        if (cta_k_tiles > max_cta_k_tiles) {
            continue;
        }
        const std::size_t cost = cta_k_tiles * (output_tiles > lone ? 5 : 3) * tile_cost;
        if (best.cost == 0 || cost < best.cost) {
            best = {split, cost};
        }
    }
    return best;
}

// The split the H200 measured fastest for a grid of `output_tiles` short of
// the SMs (nbits-bench, fp16 int4 block 32, Llama-3-8B, split 1/2/4/8 each):
// - mma.sync GEMM (M <= 64, two CTAs an SM): 2 while two CTAs a tile fit in
//   1.5x the SMs, else none. qkv M = 64 (48 tiles) 42.1 -> 25.5 us, down
//   M = 64 (32) 137.9 -> 69.3, o M = 32 (64) 19.4 -> 14.1; 4 was slower on
//   each (34.1, 76.1, 21.1: 32 clusters of 4 and more, past the 30 that run a
//   CTA an SM), as was 2 on up M = 64 (112 tiles, 43.2 -> 48.5). At M = 33..64
//   and K >= 8192, 4 where the clusters run a CTA an SM (H100 80GB HBM3, four
//   processes, split 2 -> 4, M = 33 / 64, us): Phi-3.5-mini down (24 tiles,
//   K = 8192) fp16 37.76 / 38.62 -> 23.97 / 25.90 (another process, M = 48 / 64:
//   38.53 / 38.64 -> 26.05 / 26.35), bf16 block 128 zero points 39.87 / 42.51
//   -> 25.01 / 27.57, int8 40.86 / 42.06 -> 25.97 / 27.82; not at K = 3072
//   (Phi-3.5-mini o, 24 tiles, M = 64: fp16 14.85 -> 16.24, int8 16.11 ->
//   20.53).
// - wgmma GEMM with one row tile (M <= 128; two of 64 tokens at M = 65..128,
//   see two_rows_of_small_tiles_pay): cheapest_wgmma_split, of 4, 3 and 2,
//   whose clusters run in one round and whose grid keeps the wgmma route
//   (seven tenths of the SMs, wgmma_grid_fills), the fewest k tiles a CTA,
//   weighed by the SMs given two CTAs (clusters of 3 and the rounds of
//   clusters below).
//   qkv M = 128 (48 tiles) 31.4 us split 4 against 38.4 dequantised, down
//   (32) 80.0 against 101.7, up (112) 48.4 split 2 against 59.0. With
//   two row tiles the split lost or tied (down M = 256: 4 gave 129.9 against
//   115.5 dequantised; up 92.4 against 85.1). Below 12 M weights the
//   competing route stays ahead. At M = 65..128 (128-token tiles, against
//   dequantise + cuBLASLt; one call on the kernels of 1d5f8f2, M = 80 / 128,
//   us): Qwen2.5-7B o (12.8 M) 23.2 / 22.0 -> 16.3 / 17.3 split 4, Qwen2.5-7B
//   qkv (16.5 M) 25.8 / 26.6 -> 24.2 / 25.9, Llama-3-8B o (16.8 M) 29.0 /
//   29.1 -> 25.9 / 27.3; Phi-3.5-mini o (9.4 M) 19.9 / 19.1 dequantised
//   against 22.4 / 23.3 (its split grid short of the SMs, the mma.sync GEMM).
//   On the 64-token tiles (M = 33..64, with producer warps), against the
//   mma.sync GEMM (same call, M = 33 / 48 / 64, us, before 1d5f8f2):
//   Qwen2.5-7B qkv 28.64 / 28.62 / 28.80 -> 20.35 / 20.67 / 21.23 split 4,
//   Qwen2.5-7B o 22.02 / 22.02 / 22.19 -> 14.30 / 14.46 / 15.30, Llama-3-8B o
//   24.11 / 24.86 / 25.23 -> 22.27 / 22.61 / 23.22.
//   Clusters of 3 (H100 80GB HBM3, 132 SMs as the H200; one process, fp16 int4
//   block 32 unless named, split 4 or 2 as before -> 3, us): clusters past
//   those that run a CTA an SM put two CTAs on some SMs (Nsight
//   Compute, Qwen2.5-7B qkv M = 128 split 4: 0 to 2 CTAs an SM, the busiest
//   SM active 40.8 K cycles against 26.4 K on average). Qwen2.5-7B qkv (36
//   tiles) 4 -> 3, M = 40 / 64 / 96 / 128: 18.54 / 19.22 / 23.28 / 24.69 ->
//   15.06 / 15.30 / 18.67 / 19.47 (bf16, block 128, zero points, M = 64:
//   21.60 -> 17.14); Phi-3.5-mini qkv (72 tiles) 2 -> 3: 24.43 / 24.61 /
//   28.70 / 29.42 -> 20.42 / 21.34 / 26.46 / 27.22 (bf16 zero points M = 64
//   28.21 -> 23.39). Kept: Llama-3-8B qkv (48 tiles) 4 (3: 21.39 -> 24.85 at
//   M = 64, 27.44 -> 30.06 at 128), Llama-3-70B qkv (80 tiles) 2 (3, 80
//   clusters past 79: 53.50 -> 56.96, 61.97 -> 73.26), Qwen2.5-7B o (28 tiles)
//   4 (5: 13.42 -> 17.90 at M = 40).
//   Rounds of clusters (H100 80GB HBM3, 132 SMs; cudaOccupancyMaxActiveClusters
//   of a kernel of 120 KB of shared memory, one CTA an SM, and of 108 KB, two):
//   a cluster's CTAs share a GPC, so 66 clusters of 2 run at once one CTA an SM
//   (132 CTAs), 39 of 3 (117) and 30 of 4 (120); two an SM 132, 79 and 62. The
//   grids the rule took past those waited for a second round or doubled up SMs
//   (one process, fp16 int4 block 32, M = 48 / 64 / 128, split 4 -> 2, us):
//   Llama-3-70B o (64 tiles: 64 clusters of 4, two over 62) 47.02 / 47.95 /
//   61.95 -> 34.08 / 34.58 / 40.24, down 134.38 / 134.51 / 172.16 -> 100.27 /
//   100.27 / 117.89 (split 3: 40.37 / 40.35 / 49.18 and 115.10 / 114.16 /
//   138.27). A k tile on an SM given two CTAs costs ~5/3 of a lone CTA's
//   there (Qwen2.5-7B qkv 15.62 us split 3 a CTA an SM, 19.26 split 4).
// - the 128-row tiles at M = 12..32: wide_small_tiles_split.
std::size_t measured_split_k(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const Capabilities& device = fastest.request.context.capabilities;
    const std::size_t sms = device.multiprocessor_count;
    if (device.compute_major != 9 || sms == 0) {
        return 1;  // measured on sm_90 only; the override reaches other cluster GPUs
    }
    if (!tiles.wgmma && tiles.tile_n == kWideSmallTiles.tile_n && fastest.m <= kWideTilesMaxM) {
        return wide_small_tiles_split(fastest) == 2 ? 2 : 1;
    }
    if (tiles.wgmma) {
        return cheapest_wgmma_split(fastest, tiles).split;
    }
    const std::size_t output_tiles = prefill_output_tiles(fastest, tiles);
    if (fastest.m > 64) {
        return 1;
    }
    if (fastest.m > kWideTilesMaxM && fastest.request.config.k >= kDeepSplitMinK &&
        output_tiles <= device.clusters_at_once(4)) {
        return 4;
    }
    return 4 * output_tiles <= 3 * sms ? 2 : 1;
}

// CTAs splitting the K of one output tile of `tiles`: a thread block cluster
// of at most 8 (the portable cluster size), so compute capability 9.0 and
// newer, and at most one CTA per k tile. NBITS_PREFILL_SPLIT_K overrides the
// measured choice.
std::size_t split_k_for(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const PlanContext& context = fastest.request.context;
    if (context.capabilities.compute_major < 9 || tiles.stream_k) {
        return 1;
    }
    const std::optional<int> split = context.overrides.prefill_split_k;
    const bool overridden = split && *split >= 1 && *split <= 8;
    return std::min(overridden ? static_cast<std::size_t>(*split) : measured_split_k(fastest, tiles),
                    div_ceil(fastest.request.config.k, static_cast<std::size_t>(tiles.tile_k)));
}

// NBITS_PREFILL_WGMMA_TILE_M where it is 64, 128 or 256 (a plan built from raw overrides may hold anything).
std::optional<int> wgmma_tile_m_override(const FastestRequest& fastest)
{
    const std::optional<int> tokens = fastest.request.context.overrides.prefill_wgmma_tile_m;
    return tokens == 64 || tokens == 128 || tokens == 256 ? tokens : std::nullopt;
}

// Whether the tensor maps can describe A and the weights of these tiles: rows of whole 16 bytes (K % 8 == 0, each
// weight row's blobs a multiple of 16 bytes) and tiles within the maps' 256-element boxes.
bool tma_describes(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    return config.k % 8 == 0 && config.k_blocks() * config.blob_size() % 16 == 0 && tiles.tile_m <= 256 &&
           tiles.tile_n <= 256;
}

// Whether the wgmma GEMM takes its k tiles by the tensor memory accelerator: where the tensor maps describe A and the
// weights (tma_describes), on the tiles of 128 and 256 tokens by 128 weight
// rows unless NBITS_PREFILL_TMA=0, on the others where NBITS_PREFILL_TMA=1. On the H200 (nbits-bench, fp16 int4 block
// 32, one call on dbf76f6, cp.async against TMA, us): 128-token tiles Llama-3-8B up M = 128 41.87 -> 36.61, M = 256
// 67.81 -> 58.00, M = 512 132.59 -> 114.66, Qwen2.5-7B up 58.80 / 88.64 / 140.37 -> 50.93 / 83.20 / 129.74, Llama-3-70B
// up 133.70 / 256.96 / 448.18 -> 114.82 / 218.70 / 430.24, the paired Llama-3-8B gate/up M = 512 / 1024 240.70 / 463.58
// -> 215.15 / 407.18; the 64-token tiles (one producer warp) slower at M = 40 and 64 (8B up 30.80 / 31.31 -> 34.43 /
// 35.14, Llama-3-70B up 107.49 / 101.41 -> 112.22 / 112.42).
bool tma_feeds(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const std::optional<int> forced = fastest.request.context.overrides.prefill_tma;
    const bool measured = tiles.tile_m >= 128 && tiles.tile_n == 128;
    return tma_describes(fastest, tiles) && (forced == 1 || (forced != 0 && measured));
}

std::size_t prefill_ctas(const FastestRequest& fastest, const PrefillTiles& tiles);

// Whether a stream-K grid runs the 256-token tiles (one CTA an SM, a warpgroup of producers): past M = 128 unless
// NBITS_PREFILL_WGMMA_TILE_M=128 asks for 128-token tiles, at M = 65..128 where NBITS_PREFILL_WGMMA_TILE_M=256 asks
// for those. Else the 64-token tiles up to M = 64 and the 128-token ones past it, two CTAs an SM, thread 0 issuing
// the tensor copies.
bool stream_k_tall(const FastestRequest& fastest)
{
    const std::optional<int> tokens = wgmma_tile_m_override(fastest);
    return fastest.m > kWgmmaTallMinM ? tokens != 128 && tokens != 64 : fastest.m > kWgmmaSmallTileM && tokens == 256;
}

// Whether the stream-K grid can take the node: sm_90, the wgmma GEMM's tiles of 128 weight rows (not
// NBITS_PREFILL_WGMMA_TILE_N=256), rows the tensor maps describe and NBITS_PREFILL_TMA not 0: it takes its k tiles
// by the tensor memory accelerator on every tile height (all of them within the maps' boxes, so the node's rows
// decide).
bool stream_k_fits(const FastestRequest& fastest)
{
    const Capabilities& device = fastest.request.context.capabilities;
    const PlanOverrides& overrides = fastest.request.context.overrides;
    return device.compute_major == 9 && device.compute_minor == 0 && device.multiprocessor_count > 0 &&
           overrides.prefill_wgmma_tile_n != 256 && overrides.prefill_tma != 0 &&
           tma_describes(fastest, kWgmmaTallTiles);
}

PrefillTiles wgmma_tiles(const FastestRequest& fastest, bool stream_k);
bool wgmma_grid_taken(const FastestRequest& fastest, const PrefillTiles& tiles);

// Where the plan takes the stream-K grid unasked: one weight set of at least 15 Mi weights past M = 128, whose grid of
// whole tiles either leaves it to dequantise + cuBLASLt (fewer tiles than three quarters of the SMs past M = 256), up
// to M = 1024 where the last 256-token tile is at least three quarters full and at K >= 8192 (many k tiles a tile for
// the grid to spread) up to M = 2048 at any fill, past 1024 while A holds at most 48 Mi elements; or, up to M = 512
// where the last 256-token tile is three quarters full and up to M = 1024 at any fill at K >= 8192, ends in a wave at
// most a quarter full (at K >= 8192 under half full), or, at K >= 8192 and the last tile three quarters full, has
// 128-token tiles (two CTAs an SM, some SMs with one). From two rounds of tiles on the grid runs all but its last round
// and the part-filled one whole (NBITS_STREAM_K_ROUNDS). On the H100 (nbits-bench, fp16 int4 block 32, whole tiles
// (NBITS_PREFILL_STREAM_K=0) against the grid, us; calls on f5b9070 and 9e9e37a): Llama-3-8B down M = 129 / 192 / 256 /
// 384 / 512 / 1024 122.00 / 128.66 / 132.32 / 154.32 / 171.02 / 207.22 -> 64.06 / 60.06 / 59.07 / 101.98 / 94.29 /
// 170.91, qkv M = 192 / 256 / 512 53.68 / 52.56 / 62.51 -> 40.69 / 35.42 / 51.23, o M = 256 / 512 37.74 / 43.81 ->
// 32.05 / 40.53; Qwen2.5-7B qkv M = 192 / 256 / 512 37.54 / 34.70 / 43.39 -> 33.92 / 31.73 / 39.68, down 159.20 /
// 162.90 / 217.65 -> 70.05 / 66.98 / 107.44 (M = 384 / 1024 212.16 / 285.49 -> 119.10 / 188.48), up (148 column tiles)
// M = 192 / 256 / 512 78.10 / 79.74 / 118.74 -> 68.19 / 67.06 / 116.19; Llama-3-70B down M = 384 / 512 / 1024 664.02 /
// 822.85 / 1126.51 -> 379.06 / 318.08 / 651.47, o 161.07 / 172.78 / 251.28 -> 120.43 / 105.01 / 194.77, qkv M = 512 /
// 1024 168.88 / 303.55 -> 129.84 / 243.71; on 128-token tiles 70B qkv M = 192 / 256 105.95 / 108.64 -> 83.41 / 73.73,
// down 221.90 / 221.02 -> 183.22 / 170.90, o M = 256 66.75 -> 62.24 (bf16 alike where measured). With whole rounds
// (H100, two calls): Llama-3-8B qkv M = 768 / 1024 76.19 / 93.17 -> 68.96 / 87.04, o M = 768 54.11 -> 50.94 (1024 63.89
// -> 63.78), Qwen2.5-7B qkv M = 768 58.54 -> 52.13 (1024 63.42 -> 63.28); at K >= 8192 M = 1536 / 2048: Llama-3-70B o
// 321.17 / 405.50 -> 278.80 / 372.85, qkv 395.04 / 504.99 -> 345.38 / 460.51, Llama-3-8B down 280.53 / 343.33 -> 248.66
// / 333.33, Qwen2.5-7B down 359.06 / 435.95 -> 281.02 / 380.42, Llama-3-70B down M = 1536 1140.21 -> 924.94;
// Llama-3-70B up M = 512 336.38 -> 322.83 (a last wave of 0.39). Slower: 70B o M = 192 66.38 -> 71.87 and 8B o M = 192
// 35.52 -> 37.28; fewer weights (Qwen2.5-7B o, 12.25 Mi, M = 192 / 256 / 512 31.47 / 28.21 / 34.43 -> 33.70 / 31.66 /
// 37.33); a last tile half empty at K < 8192 (M = 384: Qwen2.5-7B qkv 42.94 -> 46.90, up 120.98 -> 137.25, 8B qkv 57.25
// -> 59.65, o 40.03 -> 49.86; M = 129: Qwen2.5-7B up 81.12 -> 85.36, 8B o 35.90 -> 39.90); past M = 1024 at K < 8192 (M
// = 1536 / 2048: 8B qkv 123.31 / 154.38 -> 120.45 / 156.54, Qwen2.5-7B qkv 86.29 / 105.34 -> 86.66 / 108.19, 8B o 85.52
// / 105.84 -> 86.38 / 113.44) and wgmma tiles past M = 512 there (Qwen2.5-7B up M = 1024 193.50 -> 197.38); 70B down M
// = 2048 (A of 56 Mi elements) 1404.46 -> 1537.26; fuller last waves of 256-token tiles (Llama-3-8B up, 112 column
// tiles, M = 256 46.38 -> 59.10, M = 512 89.66 -> 99.17; Llama-3-70B up, 224, M = 256 167.70 -> 177.62, M = 1024 594.32
// -> 630.77, M = 2048 1202.86 -> 1256.10), and the 64- and 128-token tiles of M <= 128 (one call on 8ff898a: 8B up M =
// 128 39.17 -> 53.14).
bool stream_k_measured(const FastestRequest& fastest)
{
    constexpr std::size_t kStreamKMaxM = 512;
    constexpr std::size_t kStreamKDeepMaxM = 1024;
    constexpr std::size_t kStreamKDequantMaxM = 1024;
    constexpr std::size_t kStreamKDeepDequantMaxM = 2048;
    constexpr std::size_t kStreamKDeepDequantMaxActivations = std::size_t{48} << 20;
    constexpr std::size_t kStreamKDeepK = 8192;
    constexpr std::size_t kStreamKMinWeights = std::size_t{15} << 20;
    const std::size_t m = fastest.m;
    const std::size_t k = fastest.request.config.k;
    const bool deep = k >= kStreamKDeepK;
    if (fastest.up != nullptr || m <= kWgmmaTallMinM || m > (deep ? kStreamKDeepDequantMaxM : kStreamKDequantMaxM) ||
        wgmma_tile_m_override(fastest).has_value() || fastest.request.config.n < div_ceil(kStreamKMinWeights, k)) {
        return false;
    }
    constexpr auto kTokens = static_cast<std::size_t>(kWgmmaTallTiles.tile_m);
    const std::size_t last_tile_rows = m % kTokens == 0 ? kTokens : m % kTokens;
    const bool last_tile_full = 4 * last_tile_rows >= 3 * kTokens;
    if (!deep && !last_tile_full) {
        return false;
    }
    const PrefillTiles tiles = wgmma_tiles(fastest, false);
    if (!wgmma_grid_taken(fastest, tiles)) {
        // Past M = 1024 A bounded (m <= 2048 here, so the product cannot overflow).
        return m <= kStreamKDeepMaxM || m * k <= kStreamKDeepDequantMaxActivations;
    }
    if (m > (deep ? kStreamKDeepMaxM : kStreamKMaxM)) {
        return false;
    }
    if (deep && last_tile_full && tiles.tile_m == 128) {
        return true;
    }
    const std::size_t slots = cta_slots(fastest, tiles);
    const std::size_t ctas = prefill_ctas(fastest, tiles);
    const std::size_t last_wave = ctas % slots;
    return tiles.tile_m == 256 && ctas > slots && (deep ? 2 * last_wave < slots : 4 * last_wave <= slots);
}

// NBITS_PREFILL_STREAM_K=1 wherever the grid fits the node (the tiles then take it whatever their count), unset
// where stream_k_measured, 0 nowhere.
bool stream_k_requested(const FastestRequest& fastest)
{
    const std::optional<int> forced = fastest.request.context.overrides.prefill_stream_k;
    if (!stream_k_fits(fastest) || forced == 0) {
        return false;
    }
    return forced == 1 || stream_k_measured(fastest);
}

// The stream-K grid over `rows` rows: one CTA a slot (min_ctas an SM), no more than the units of work (an output
// tile's k tile each), so that every CTA takes at least one.
std::size_t stream_k_ctas(const FastestRequest& fastest, const PrefillTiles& tiles, std::size_t rows)
{
    const std::size_t slots = cta_slots(fastest, tiles);
    // Tiles times k tiles only while below the slots, so that no product of a hostile shape overflows.
    const std::size_t tiles_count = prefill_output_tiles(fastest, tiles, rows);
    if (tiles_count >= slots) {
        return slots;
    }
    return std::min(slots, tiles_count * div_ceil(fastest.request.config.k, static_cast<std::size_t>(tiles.tile_k)));
}

// Whether the stream-K grid's units over all M rows (output tiles x k tiles) stay below 2^31, as the kernel counts
// them; each product is bounded before the next factor multiplies it.
bool stream_k_units_fit(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    constexpr std::size_t kMaxUnits = std::numeric_limits<std::int32_t>::max();
    const std::size_t column_tiles = prefill_column_tiles(fastest, tiles);
    const std::size_t row_tiles = div_ceil(fastest.m, static_cast<std::size_t>(tiles.tile_m));
    const std::size_t k_tiles = div_ceil(fastest.request.config.k, static_cast<std::size_t>(tiles.tile_k));
    return column_tiles <= kMaxUnits / row_tiles && column_tiles * row_tiles <= kMaxUnits / k_tiles;
}

// Bytes of the stream-K scratch for a grid of `ctas`: a partial tile a CTA (each computing thread's fp32
// accumulators, tile_m / 2 of them), then a flag word a CTA.
std::size_t stream_k_partial_bytes(const PrefillTiles& tiles)
{
    return static_cast<std::size_t>(32 * tiles.warps_n) * static_cast<std::size_t>(tiles.tile_m / 2) * sizeof(float);
}

// At M = 65..128, two rows of 64-token tiles where their split costs less than one row of 128-token tiles' or
// only theirs keeps the wgmma route (cheapest_wgmma_split; not under NBITS_PREFILL_WGMMA_TILE_M or _TILE_N or a
// stream-K grid): the deep nodes too narrow for a split grid of 128-token tiles to fill seven tenths of the SMs,
// which would dequantise. A 128-token k tile costs 1.15-1.24x a 64-token one where the grids match (M = 128
// against 64, H100: Llama-3-8B up 37.84 / 31.87 us, Llama-3-70B o 39.74 / 34.42, down 118.05 / 100.62, Qwen2.5-7B
// o 17.79 / 14.35, Phi-3.5-mini up 20.85 / 17.22), counted 4/3. Measured on the H100 80GB HBM3 (one call, fp16
// int4 block 32, M = 65 / 96 / 128, us, dequantise + cuBLASLt -> two rows): Llama-3.2-1B down (8192 x 2048, 16
// column tiles, split 3) 32.51 / 33.65 / 34.90 -> 24.93 / 25.04 / 25.18, Qwen2.5-1.5B down (8960 x 1536, 12, split
// 4) 26.86 / 28.40 / 28.96 -> 21.14 / 21.42 / 21.94. Where the rule keeps one row, two rows forced were slower (M =
// 80 / 96 / 128, best split): Qwen2.5-7B o 18.29 / 18.32 / 18.29 against 17.06 / 16.96 / 17.94, qkv 22.48 / 22.82
// / 22.85 against 18.54 / 18.78 / 19.62, down 59.07 / 59.94 / 60.56 against 47.14 / 46.96 / 47.94, Llama-3-8B qkv
// 30.98 / 30.96 / 31.22 against 27.15 / 26.35 / 27.57; and on Llama-3-8B o and down and Phi-3.5-mini down, whose
// one row splits 3 or 4 under seven tenths (see wgmma_grid_fills), two rows split 2 or 4 took 20.6, 51.3 and 32.5
// against 19.3-20.2, 45.5-46.5 and 24.9-25.9. Phi-3.5-mini o (9.4 M weights, below kSplitWgmmaMinWeights but
// above kSplitTwoRowsMinWeights) takes two rows split 4 (24 column tiles, 48 clusters of 4), against dequantise +
// cuBLASLt (H100 80GB HBM3, one call, two runs each, M = 65 / 80 / 96 / 128, us): fp16 20.45 / 19.95 / 20.21 /
// 22.69 -> 17.71 / 17.65 / 17.86 / 17.94, bf16 19.92-22.59 -> 18.32-18.66, bf16 block 128 with zero points
// 19.82-22.78 -> 19.10-19.39, int8 21.44-24.14 -> 20.21-20.45. 2944 x 3072 (9.0 M), below: fp16 18.56-21.14 ->
// 17.50-17.78, but bf16 block 128 with zero points 18.35-18.99 -> 19.54-19.74 at M = 65..96.
bool two_rows_of_small_tiles_pay(const FastestRequest& fastest, const bool stream_k)
{
    const PlanOverrides& overrides = fastest.request.context.overrides;
    if (stream_k || fastest.m <= kWgmmaSmallTileM || fastest.m > 2 * kWgmmaSmallTileM ||
        overrides.prefill_wgmma_tile_n == 256 || wgmma_tile_m_override(fastest)) {
        return false;
    }
    PrefillTiles small = kWgmmaTiles;
    small.tile_m = static_cast<int>(kWgmmaSmallTileM);
    const WgmmaSplit two_rows = cheapest_wgmma_split(fastest, small);
    const WgmmaSplit one_row = cheapest_wgmma_split(fastest, kWgmmaTiles);
    return two_rows.cost > 0 && (one_row.cost == 0 || two_rows.cost < one_row.cost);
}

// The wgmma GEMM's tiles: 64 tokens (wgmma m64n64k16) of 128 weight rows for M <= 64; above, 128 tokens of
// 128 rows, or of 256 where NBITS_PREFILL_WGMMA_TILE_N asks for them, or 256 tokens of 128 rows where
// NBITS_PREFILL_WGMMA_TILE_M does or, past M = 128, where the tensor memory accelerator feeds them and their grid
// fills the device unsplit (one CTA an SM, a warpgroup of producers). On the H200 (nbits-bench, fp16 int4 block 32, one
// call on dbf76f6, TMA on 128-token tiles against TMA on 256-token tiles, us): Llama-3-8B up M = 256 58.00 ->
// 46.11, M = 512 114.66 -> 88.78 (cuBLASLt dense 85.95), Qwen2.5-7B up 83.20 / 129.74 -> 79.49 / 118.32,
// Llama-3-70B up 218.70 / 430.24 -> 167.55 / 339.58, the paired Llama-3-8B gate/up M = 512 / 1024 215.15 / 407.18
// -> 189.22 / 327.33; at M = 128 slower (8B up 36.61 -> 56.77: half of each tile empty).
PrefillTiles wgmma_tiles(const FastestRequest& fastest, const bool stream_k)
{
    PrefillTiles tiles = kWgmmaTiles;
    const PlanOverrides& overrides = fastest.request.context.overrides;
    if (fastest.m <= kWgmmaSmallTileM || wgmma_tile_m_override(fastest) == static_cast<int>(kWgmmaSmallTileM) ||
        two_rows_of_small_tiles_pay(fastest, stream_k)) {
        tiles.tile_m = static_cast<int>(kWgmmaSmallTileM);
    } else if (overrides.prefill_wgmma_tile_n == 256) {
        tiles = kWgmmaWideTiles;
    } else if (wgmma_tile_m_override(fastest) == 256 || (stream_k && stream_k_tall(fastest))) {
        tiles = kWgmmaTallTiles;
    } else if (!wgmma_tile_m_override(fastest) && fastest.m > kWgmmaTallMinM && tma_feeds(fastest, kWgmmaTallTiles)) {
        // Unsplit: with its K split the grid of a narrow node (Llama-3-8B o at M = 256, 32 column tiles split 4)
        // took 42.18 us against 31.46 dequantised.
        if (wgmma_grid_fills(fastest, kWgmmaTallTiles, prefill_output_tiles(fastest, kWgmmaTallTiles))) {
            tiles = kWgmmaTallTiles;
        }
    }
    // A warpgroup of producer warps on the 64-token tiles, none on the 128-token ones, whose 64 accumulators a
    // thread need more registers than two CTAs an SM leave beside producer warps (one CTA an SM ran slower).
    const bool small = tiles.small_wgmma_tiles();
    const std::optional<int> producers = fastest.request.context.overrides.prefill_producer_warps;
    const bool overridden = producers && (*producers == 0 || *producers == 1 || *producers == 2 || *producers == 4);
    tiles.producer_warps = overridden ? *producers : (small ? kWgmmaProducerWarps : 0);
    if (tma_feeds(fastest, tiles) || stream_k) {
        // One producer warp on the 64-token tiles. None on the 128-token (and 256-row) ones: thread 0 issues the
        // tensor copies, and two CTAs an SM keep their 64 accumulators a thread (with a producer warp ptxas caps
        // two CTAs of 288 threads at 96 registers, which spills and serialises the wgmmas; one CTA an SM with
        // NBITS_PREFILL_PRODUCER_WARPS=1). A warpgroup of them on the 256-token tiles, which hands its registers
        // to the computing warpgroups (setmaxnreg: 288 threads would cap those at 168, where ptxas serialises the
        // wgmmas). The override takes 0, 1 or 4.
        // A stream-K grid on the 64-token tiles: none, as on the 128-token ones (its pipeline has no producers).
        tiles.tma = true;
        tiles.producer_warps = overridden && *producers != 2 ? *producers
                               : tiles.tile_m == 256          ? 4
                               : small && !stream_k           ? 1
                                                              : 0;
    }
    if (tiles.producer_warps > 0 && !small) {
        tiles.min_ctas = 1;
    }
    // The stream-K entries: 256-token tiles with a warpgroup of producers, 64- and 128-token ones with none; their
    // units (output tiles x k tiles) count in 32 bits.
    tiles.stream_k = stream_k && tiles.tma && tiles.tile_n == 128 &&
                     ((tiles.tile_m == 256 && tiles.producer_warps == 4) ||
                      (tiles.tile_m <= 128 && tiles.producer_warps == 0)) &&
                     stream_k_units_fit(fastest, tiles);
    return tiles;
}

// The wgmma GEMM's tiles as planned (a stream-K grid where stream_k_requested).
PrefillTiles wgmma_tiles(const FastestRequest& fastest)
{
    return wgmma_tiles(fastest, stream_k_requested(fastest));
}

// Columns per dequantised chunk: whole cuBLASLt tiles of 64 where they fit,
// else a multiple of 8 (16-byte rows of Y), at least 8.
std::size_t whole_tiles(std::size_t columns)
{
    return columns >= kChunkColumns ? columns / kChunkColumns * kChunkColumns : std::max<std::size_t>(columns / 8 * 8, 8);
}

// The chunk width, at most `widest` columns, whose cuBLASLt GEMMs over `rows` rows take the fewest waves of
// output tiles in all, then the fewest chunks. cuBLASLt covers these shapes with 128 x 256 tiles, one CTA an SM,
// so a chunk's GEMM takes ceil(row tiles x column tiles / SMs) waves: at M = 2048 (16 row tiles) on 132 SMs a
// chunk of 2048 columns is one wave, one of 2304 two. Widths are whole tiles of 256 columns.
std::size_t wave_aligned_chunk(std::size_t n, std::size_t widest, std::size_t rows, std::size_t sms)
{
    constexpr std::size_t kTileRows = 128;
    constexpr std::size_t kTileColumns = 256;
    if (widest >= n || widest < kTileColumns || sms == 0) {
        return widest;
    }
    const std::size_t row_tiles = div_ceil(rows, kTileRows);
    const std::size_t column_tiles = div_ceil(n, kTileColumns);
    const auto waves = [&](std::size_t tiles) { return div_ceil(row_tiles * tiles, sms); };
    std::size_t best = widest;
    std::size_t best_waves = std::numeric_limits<std::size_t>::max();
    std::size_t best_chunks = std::numeric_limits<std::size_t>::max();
    for (std::size_t per_chunk = widest / kTileColumns; per_chunk >= 1; --per_chunk) {
        const std::size_t chunks = div_ceil(column_tiles, per_chunk);
        const std::size_t total = (chunks - 1) * waves(per_chunk) + waves(column_tiles - (chunks - 1) * per_chunk);
        if (total < best_waves || (total == best_waves && chunks < best_chunks)) {
            best = per_chunk * kTileColumns;
            best_waves = total;
            best_chunks = chunks;
        }
    }
    return best;
}

// Rows [row, row + rows) of a row-major tensor whose rows are `row_bytes` apart.
BufferRef rows_of(BufferRef tensor, std::size_t row, std::size_t row_bytes) { return tensor.at(row * row_bytes); }

// Normalises rows of A into `normalized` (RMS-norm prologue at prefill).
void add_rmsnorm_rows(LaunchPlan& plan, const FastestRequest& fastest, BufferRef activation, BufferRef normalized,
                      std::size_t rows)
{
    const Specialisation spec{fastest};
    StepBuilder step("nbits_rmsnorm_rows", "nbits RMS-norm rows");
    step.arg("a", activation)
        .arg("gamma", fastest.gamma->tensor)
        .arg("out", normalized)
        .size_arg("rows", rows, "M")
        .arg("epsilon", fastest.request.config.rmsnorm_epsilon)
        .define("NBITS_ACT_BF16", spec.act_bf16())
        .define("NBITS_GAMMA_F32", spec.gamma_f32() ? 1 : 0)
        .define("NBITS_K", static_cast<std::int64_t>(fastest.request.config.k))
        .define("NBITS_NORM_THREADS", kNormThreads)
        .grid(grid_extent(rows, 1, kMaxGridX, "M"))
        .block(kNormThreads)
        .add_to(plan, fastest.request);
}

// NBITS_PREFILL_TAIL_SPLIT: where the sm_90 wgmma GEMM's grid (split_k 1, min_ctas CTAs an SM) ends in a
// partial wave, the column tile from which a second launch takes the rest of the tiles with their K split over
// clusters of 2 to 4 CTAs, and that split: the one whose rounds of split CTAs (each a 1/split of a whole CTA's
// work) end soonest, if sooner than the partial wave itself. Nothing where the grid is one wave or less, or no
// split pays.
struct TailSplit {
    std::size_t first_column_tile = 0;
    int split = 1;
};
TailSplit tail_split_for(const FastestRequest& fastest, const PrefillTiles& tiles, std::size_t rows,
                         std::size_t column_tiles)
{
    const PlanContext& context = fastest.request.context;
    const std::size_t slots = cta_slots(fastest, tiles);
    if (context.overrides.prefill_tail_split != 1 || !tiles.wgmma || tiles.split_k != 1 || tiles.stream_k ||
        context.capabilities.compute_major < 9 || slots == 0) {
        return {};
    }
    const std::size_t row_tiles = div_ceil(rows, static_cast<std::size_t>(tiles.tile_m));
    const std::size_t ctas = column_tiles * row_tiles;
    const std::size_t whole = ctas / slots * slots / row_tiles;  // column tiles of the whole waves
    if (whole == 0 || whole == column_tiles) {
        return {};
    }
    const std::size_t tail_ctas = (column_tiles - whole) * row_tiles;
    const std::size_t k_tiles = div_ceil(fastest.request.config.k, static_cast<std::size_t>(tiles.tile_k));
    // The tail's time in whole CTAs, rounds / split, compared as fractions.
    std::size_t best_rounds = div_ceil(tail_ctas, slots);
    std::size_t best_split = 1;
    for (std::size_t split = 2; split <= 4 && split <= k_tiles; ++split) {
        const std::size_t rounds = div_ceil(tail_ctas * split, slots);
        if (rounds * best_split < best_rounds * split) {
            best_rounds = rounds;
            best_split = split;
        }
    }
    return best_split == 1 ? TailSplit{} : TailSplit{whole, static_cast<int>(best_split)};
}

// On compute capability 9.0 and newer the fused GEMMs launch as programmatic dependents of the kernel before them
// (NBITS_PREFILL_PDL=0 turns it off), as the decode kernels do: their CTAs are placed on the SMs that kernel's CTAs
// leave and wait (griddepcontrol.wait) before they touch memory, instead of starting after its last CTA and a launch
// gap; a stream-K grid so follows its flags' zeroing.
bool prefill_programmatic(const FastestRequest& fastest)
{
    const PlanContext& context = fastest.request.context;
    return programmatic_launch(context, context.overrides.prefill_programmatic);
}

// Zeroes `count` words from `words` (the stream-K flags) before the launch that raises them.
void add_zero_words(LaunchPlan& plan, const FastestRequest& fastest, BufferRef words, std::size_t count)
{
    constexpr std::uint32_t kThreads = 256;
    StepBuilder step("nbits_zero_words", "nbits zero the stream-K flags");
    step.arg("words", words)
        .size_arg("count", count, "stream-K CTAs")
        .grid(grid_extent(count, kThreads, kMaxGridX, "stream-K CTAs"))
        .block(kThreads)
        .add_to(plan, fastest.request);
}

// The fused GEMM (or the paired gate/up kernel) over `rows` rows; the tiles it
// launches with, or none when no tile configuration fits the device. A stream-K
// grid takes its partial tiles and flags from scratch buffer `stream_scratch`.
std::optional<PrefillTiles> add_fused_prefill(LaunchPlan& plan, const FastestRequest& fastest, BufferRef activation,
                                              std::size_t row, std::size_t rows, bool wgmma, int stream_scratch)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    std::size_t shared_bytes = 0;
    std::optional<PrefillTiles> tiles =
        fit_tiles(wgmma ? wgmma_tiles(fastest) : preset_for(fastest, rows), fastest, shared_bytes);
    if (!tiles) {
        return std::nullopt;
    }
    tiles->split_k = static_cast<int>(split_k_for(fastest, *tiles));
    const std::size_t y_row_bytes = config.n * element_size(fastest.operands.activation_type);
    const Specialisation spec{fastest};
    const HalfOperands& o = fastest.operands;
    const bool paired = fastest.up != nullptr;
    // A CTA takes `columns` of Y (half its weight rows for the paired node).
    const int columns = paired ? tiles->tile_n / 2 : tiles->tile_n;
    const std::uint32_t column_tiles = grid_extent(config.n, static_cast<std::size_t>(columns), kMaxGridX, "N");
    const TailSplit tail = tail_split_for(fastest, *tiles, rows, column_tiles);
    // One launch of `t` over `count` column tiles from `first`.
    auto add_step = [&](const PrefillTiles& t, std::size_t first, std::size_t count) {
        const char* entry = t.stream_k ? (paired ? "nbits_prefill_gate_up_stream_k" : "nbits_prefill_gemm_stream_k")
                            : t.tma    ? (paired ? "nbits_prefill_gate_up_tma" : "nbits_prefill_gemm_tma")
                                       : (paired ? "nbits_prefill_gate_up" : "nbits_prefill_gemm");
        StepBuilder step(entry,
                         paired ? "nbits fused gate/up SwiGLU prefill GEMM" : "nbits fused prefill GEMM");
        step.arg("a", activation)
            .arg("y", rows_of(o.output, row, y_row_bytes))
            .size_arg("m", rows, "M")
            .size_arg("n", config.n, "N");
        bind_weights(step, fastest);
        if (!paired) {
            const std::size_t bias_row_bytes = fastest.bias_row_stride * element_size(o.activation_type);
            step.arg("bias", o.has_bias() ? rows_of(o.bias, row, bias_row_bytes) : BufferRef::null())
                .size_arg("bias_row_stride", fastest.bias_row_stride, "bias row stride");
        }
        if (t.tma) {
            // A weight set's box: the rows of its columns of Y.
            const auto box_rows = static_cast<std::uint32_t>(columns);
            step.arg("act_map", activation_map(fastest, activation, rows, t));
            if (paired) {
                step.arg("gate_map", weight_map(fastest, o.packed, t, box_rows))
                    .arg("up_map", weight_map(fastest, fastest.up->packed, t, box_rows));
            } else {
                step.arg("b_map", weight_map(fastest, o.packed, t, box_rows));
            }
        }
        spec.common(step);
        tile_defines(step, t);
        if (register_handback(fastest, t)) {
            step.define("NBITS_REGISTER_HANDBACK", 1);
        }
        step.define("NBITS_BIAS_MODE", paired ? 0 : spec.bias_mode());
        if (first > 0) {
            step.define("NBITS_FIRST_COLUMN_TILE", static_cast<std::int64_t>(first));
        }
        if (t.stream_k) {
            const std::size_t ctas = stream_k_ctas(fastest, t, rows);
            const BufferRef flags = BufferRef::scratch(stream_scratch, ctas * stream_k_partial_bytes(t));
            add_zero_words(plan, fastest, flags, ctas);
            step.arg("partials", BufferRef::scratch(stream_scratch))
                .arg("flags", flags)
                .define("NBITS_STREAM_K", 1)
                .grid(static_cast<std::uint32_t>(ctas));
            // From two rounds of tiles on, all but the last round and the part-filled one run whole
            // (nbits_stream_k::shared_tiles); below, the kernel without that walk, as measured.
            if (prefill_output_tiles(fastest, t, rows) >= 2 * ctas) {
                step.define("NBITS_STREAM_K_ROUNDS", 1);
            }
        } else {
            step.grid(static_cast<std::uint32_t>(count),
                      grid_extent(rows, static_cast<std::size_t>(t.tile_m), kMaxGridYZ, "M"),
                      static_cast<std::uint32_t>(t.split_k));
        }
        if (prefill_programmatic(fastest)) {
            step.define("NBITS_PROGRAMMATIC", 1).programmatic_dependent(true);
        }
        step.block(t.threads())
            .shared_memory(static_cast<std::uint32_t>(shared_bytes), true)
            .add_to(plan, fastest.request);
    };
    if (tail.split == 1) {
        add_step(*tiles, 0, column_tiles);
        return tiles;
    }
    // The whole waves, then the rest split.
    add_step(*tiles, 0, tail.first_column_tile);
    tiles->split_k = tail.split;
    tiles->split_from_column_tile = tail.first_column_tile;
    add_step(*tiles, tail.first_column_tile, column_tiles - tail.first_column_tile);
    return tiles;
}

void add_dequantize(LaunchPlan& plan, const FastestRequest& fastest, const HalfOperands& weights, int scratch,
                    std::size_t first_column, std::size_t columns)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const std::size_t units = checked_product(columns, div_ceil(config.k, 8), "the dequantized chunk");
    StepBuilder step("nbits_dequantize", "nbits dequantize a weight chunk");
    step.arg("b", weights.packed)
        .arg("scales", weights.scales)
        .arg("zero_points", weights.zero_points)
        .arg("w", BufferRef::scratch(scratch))
        .size_arg("n_begin", first_column, "N")
        .size_arg("n_count", columns, "N");
    Specialisation{fastest}.common(step);
    step.define("NBITS_DEQ_THREADS", kDequantizeThreads)
        .define("NBITS_DEQ_UNITS", kDequantizeUnits)
        .grid(grid_extent(units, std::size_t{kDequantizeThreads} * kDequantizeUnits, kMaxGridX, "N"))
        .block(kDequantizeThreads)
        .add_to(plan, fastest.request);
}

// Y = A . W^T over a chunk of `columns` weights in scratch; Y in A's dtype unless `y_dtype` is given (Float32:
// the paired node's projections).
void add_gemm(LaunchPlan& plan, const FastestRequest& fastest, BufferRef a, int weights, BufferRef y,
              std::size_t ldy, BufferRef bias, std::size_t rows, std::size_t columns, int workspace,
              std::optional<DataType> y_dtype = std::nullopt)
{
    GemmStep gemm;
    gemm.dtype = fastest.operands.activation_type;
    gemm.y_dtype = y_dtype;
    gemm.weight_layout = GemmStep::WeightLayout::NxK;
    gemm.a = a;
    gemm.w = BufferRef::scratch(weights);
    gemm.y = y;
    gemm.bias = bias;
    gemm.m = rows;
    gemm.k = fastest.request.config.k;
    gemm.n = columns;
    gemm.ldy = ldy;
    gemm.workspace = BufferRef::scratch(workspace);
    gemm.workspace_bytes = kGemmWorkspaceBytes;
    plan.steps.push_back(gemm);
}

// An elementwise epilogue over `rows` x `columns` of Y (row pitch `ldy`): the shared tail of its parameters and a
// grid-stride loop over units of 8 elements of a row, a few waves of CTAs covering any size.
void add_row_epilogue(StepBuilder& step, LaunchPlan& plan, const FastestRequest& fastest, std::size_t ldy,
                      std::size_t rows, std::size_t columns)
{
    const std::size_t sms = std::max<std::uint32_t>(fastest.request.context.capabilities.multiprocessor_count, 1);
    const std::size_t wanted = div_ceil(rows * div_ceil(columns, kElementwiseUnit), kElementwiseThreads);
    step.size_arg("rows", rows, "M")
        .size_arg("n", columns, "N")
        .size_arg("ldy", ldy, "N")
        .define("NBITS_ACT_BF16", Specialisation{fastest}.act_bf16())
        .grid(static_cast<std::uint32_t>(std::clamp<std::size_t>(wanted, 1, sms * 8)))
        .block(kElementwiseThreads)
        .add_to(plan, fastest.request);
}

void add_bias_rows(LaunchPlan& plan, const FastestRequest& fastest, BufferRef y, std::size_t ldy, BufferRef bias,
                   std::size_t rows, std::size_t columns)
{
    StepBuilder step("nbits_bias_rows", "nbits bias epilogue");
    step.arg("y", y).arg("bias", bias).size_arg("bias_row_stride", fastest.bias_row_stride, "bias row stride");
    add_row_epilogue(step, plan, fastest, ldy, rows, columns);
}

void add_silu_mul_rows(LaunchPlan& plan, const FastestRequest& fastest, BufferRef gate, BufferRef up, BufferRef y,
                       std::size_t ldy, std::size_t rows, std::size_t columns)
{
    StepBuilder step("nbits_silu_mul_rows", "nbits SwiGLU epilogue");
    step.arg("gate", gate).arg("up", up).arg("y", y);
    add_row_epilogue(step, plan, fastest, ldy, rows, columns);
}

// Large M: columns of the weights dequantised chunk by chunk into scratch,
// each chunk multiplied by cuBLASLt (Y = A . W_chunk^T into Y's columns).
void add_dequantized_gemms(LaunchPlan& plan, const FastestRequest& fastest, BufferRef activation, std::size_t row,
                           std::size_t rows, int weights, int projections, std::size_t chunk_columns, int workspace)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const HalfOperands& o = fastest.operands;
    const std::size_t element = element_size(o.activation_type);
    const std::size_t y_row_bytes = config.n * element;
    const BufferRef y_rows = rows_of(o.output, row, y_row_bytes);
    // A bias of one row, folded or not, goes to cuBLASLt's epilogue: one rounding, T(acc + bias), within the
    // oracle's bounds like every Fastest path and closer to the exact sum than the folded Add's T(T(acc) + bias),
    // whose own pass over Y cost 12 us a 6144-column chunk at M = 2048 on the H200. A per-token bias takes the pass.
    const bool epilogue_bias = o.has_bias() && fastest.bias_row_stride != 0;
    for (std::size_t column = 0; column < config.n; column += chunk_columns) {
        const std::size_t columns = std::min(chunk_columns, config.n - column);
        const BufferRef y_chunk = y_rows.at(column * element);
        if (fastest.up != nullptr) {
            const BufferRef gate = BufferRef::scratch(projections);
            const BufferRef up = gate.at(projection_bytes(rows, columns));
            add_dequantize(plan, fastest, o, weights, column, columns);
            add_gemm(plan, fastest, activation, weights, gate, columns, BufferRef::null(), rows, columns, workspace,
                     DataType::Float32);
            add_dequantize(plan, fastest, *fastest.up, weights, column, columns);
            add_gemm(plan, fastest, activation, weights, up, columns, BufferRef::null(), rows, columns, workspace,
                     DataType::Float32);
            add_silu_mul_rows(plan, fastest, gate, up, y_chunk, config.n, rows, columns);
            continue;
        }
        add_dequantize(plan, fastest, o, weights, column, columns);
        const BufferRef gemm_bias = o.has_bias() && !epilogue_bias ? o.bias.at(column * element) : BufferRef::null();
        add_gemm(plan, fastest, activation, weights, y_chunk, config.n, gemm_bias, rows, columns, workspace);
        if (epilogue_bias) {
            const std::size_t bias_row_bytes = fastest.bias_row_stride * element;
            add_bias_rows(plan, fastest, y_chunk, config.n, rows_of(o.bias, row, bias_row_bytes).at(column * element),
                          rows, columns);
        }
    }
}

// CTAs of a fused GEMM grid with `tiles`: its output tiles times the split.
std::size_t prefill_ctas(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    return prefill_output_tiles(fastest, tiles) * split_k_for(fastest, tiles);
}

// Past M = 64 the fused kernel's 128 x 128 tiles run at about 1.75 TFLOP/s
// per CTA on the H200, so a grid that leaves most SMs idle loses to the
// dequantise + cuBLASLt route, whose cost is one pass over the weights plus a
// GEMM at dense speed: Qwen2.5-7B qkv (36 column tiles) took 66.4 us fused at
// M = 128 against 29.8 us dequantised at M = 256, while Llama-3-8B up (112
// tiles) took 77.6 us fused against an estimated 84 us dequantised.
bool fused_grid_fills_device(const FastestRequest& fastest)
{
    const std::size_t sms = fastest.request.context.capabilities.multiprocessor_count;
    if (fastest.m <= 64 || sms == 0) {
        return true;
    }
    return 2 * prefill_ctas(fastest, preset_for(fastest, fastest.m)) >= sms;
}

// The largest M the wgmma GEMM takes as planned. The paired node's dequantised route pays, per element of Y, fp32
// gate and up projections and a SwiGLU pass beside GEMMs of 2K multiply-adds, so the larger K, the smaller the M
// from which that route wins: past M = 1024 the wgmma GEMM stays while M x K < 2^23. On the H200 (fp16 int4
// block 32, one call, wgmma against dequantised, us): at M = 1280 / 1536 / 2048 Qwen2.5-0.5B gate/up 55.1 / 64.4 /
// 87.5 against 91.3 / 105.1 / 138.3, Phi-3.5-mini 246.4 / 292.6 / 388.3 against 284.8 / 346.0 / 402.3, Qwen2.5-7B 628.7 / 738.8 /
// 982.5 against 739.8 / 850.1 / 1054.5 (M = 4096: 1998.5 against 1980.4), Llama-3-8B 560.9 / 682.8 / 898.5
// against 596.2 / 708.2 / 856.3, Llama-3-70B 2166.1 / 2608.5 / 3494.8 against 2135.0 / 2403.0 / 3250.6.
std::size_t wgmma_max_m(const FastestRequest& fastest)
{
    if (fastest.up == nullptr) {
        return kWgmmaFullGridMaxM;
    }
    const std::size_t k = std::max<std::size_t>(fastest.request.config.k, 1);
    return std::max(kWgmmaPairedFullGridMaxM, (kWgmmaPairedMaxMK - 1) / k);
}

// sm_90 (wgmma is arch-specific: compute 9.0 exactly) for 32 < M <= 256 when
// the grid fills seven tenths of the SMs (three quarters past M = 128; see
// wgmma_grid_fills), and for 256 < M <= 512 (the
// paired gate/up node: see wgmma_max_m) when it covers every CTA slot (two an SM). On
// the H200 (nbits-bench, fp16 int4 block 32): Llama-3-8B up M = 128 58.5 us
// against 84.6 fused on mma.sync, M = 256 85.2 against 111.0 dequantised;
// Llama-3-70B up M = 128 161.9 against 263.9. At M = 512 (one call on the kernels of 1d5f8f2, wgmma
// against the dequantise route, us): Llama-3-70B up 446.4 against 521.6,
// Qwen2.5-7B up 140.3 against 163.5, the paired Llama-3-8B gate/up 240.7
// against 321.9, Llama-3-8B up 133.1 against 135.2, while Qwen2.5-7B qkv (144
// CTAs) took 56.9 against 40.1. Past M = 512 (one call on 0524999, M = 640 /
// 768 / 1024, dequantised against wgmma, us) the unpaired nodes tip over to
// dequantise + cuBLASLt (8B up 154.8 / 171.9 / 206.0 against 169.9 / 195.7 /
// 228.9, 70B up 601.8 / 663.0 / 797.6 against 565.8 / 680.2 / 864.2, Qwen2.5-7B
// up 185.7 / 194.5 / 235.7 against 163.5 / 190.2 / 240.7), while the paired
// node keeps gaining (8B gate/up 357.9 / 412.3 / 483.1 against 304.5 / 368.5 /
// 462.8, Qwen2.5-7B gate/up 455.4 / 524.7 / 591.7 against 333.5 / 388.2 /
// 496.0), with fp32 projections further (see wgmma_max_m); at M = 2048
// dequantise + cuBLASLt wins for one weight set (8B up 350.5 against 439.0),
// and a grid short of the SMs (8B qkv, N = 6144 at M = 128: 48 CTAs, 54 us in
// the lab against 25 dequantised) leaves too many idle. At 32 < M <= 64 its
// 64-token tiles beat the mma.sync GEMM's (one run, M = 40 / 64, fused
// against wgmma): 8B up 42.5 / 43.1 against 38.0 / 38.7 us, 70B up 155.0 /
// 158.5 against 131.8 / 132.1, 8B qkv 24.7 / 25.6 against 22.9 / 24.2, 8B
// down 67.4 / 69.5 against 59.2 / 60.8, Qwen2.5-7B up 63.1 / 64.5 against
// 56.3 / 56.5; at M = 32 the mma.sync GEMM's 32-token tiles win (8B up 30.3
// against 37.8, down 32.3 against 59.1).
bool wgmma_prefill(const FastestRequest& fastest)
{
    const Capabilities& device = fastest.request.context.capabilities;
    // NBITS_PREFILL_WGMMA_MIN_M moves the bound within 17..65; other values set by hand are ignored.
    const std::optional<int> lowered = fastest.request.context.overrides.prefill_wgmma_min_m;
    const std::size_t min_m =
        lowered && *lowered >= 17 && *lowered <= 65 ? static_cast<std::size_t>(*lowered) : kWgmmaMinM;
    if (device.compute_major != 9 || device.compute_minor != 0 || fastest.m < min_m) {
        return false;
    }
    // NBITS_PREFILL_WGMMA_TILE_M lifts the upper bound, and so do the 256-token tiles fed by the tensor memory
    // accelerator where one row of them covers three quarters of the SMs, the nodes on which they beat dequantise
    // + cuBLASLt at every M measured (112 to 224 column tiles; M = 1024 / 2048, us: Llama-3-8B up 201.50 / 350.10
    // -> 177.17 / 311.92, Qwen2.5-7B up 231.49 / 398.10 -> 194.72 / 353.63, Llama-3-70B up 792.51 / 1368.30 ->
    // 606.10 / 1220.21, the paired Llama-3-8B gate/up at M = 2048 843.09 -> 652.35). Narrower nodes keep the bound.
    const PrefillTiles tiles = wgmma_tiles(fastest);
    if (tiles.stream_k) {
        return stream_k_ctas(fastest, tiles, fastest.m) >= device.multiprocessor_count;  // every SM takes work
    }
    return wgmma_grid_taken(fastest, tiles);
}

// Whether the wgmma GEMM's grid of whole `tiles` (no stream-K grid) takes a node wgmma_prefill admits.
bool wgmma_grid_taken(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const Capabilities& device = fastest.request.context.capabilities;
    const bool overridden = wgmma_tile_m_override(fastest).has_value();
    const bool wide_tall = tiles.tile_m == 256 && tiles.tma &&
                           4 * prefill_column_tiles(fastest, tiles) >= 3 * device.multiprocessor_count;
    if (!overridden && !wide_tall && fastest.m > wgmma_max_m(fastest)) {
        return false;
    }
    // The override's grid needs three quarters of the SMs at any M.
    const std::size_t ctas = prefill_ctas(fastest, tiles);
    return overridden ? 4 * ctas >= 3 * device.multiprocessor_count : wgmma_grid_fills(fastest, tiles, ctas);
}

}  // namespace

bool plan_prefill(LaunchPlan& plan, const FastestRequest& fastest)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const std::size_t m = fastest.m;
    const std::size_t element = element_size(fastest.operands.activation_type);
    const std::size_t a_row_bytes = config.k * element;
    const bool paired = fastest.up != nullptr;
    const bool wgmma = wgmma_prefill(fastest);
    const bool fused = wgmma || (m <= kFusedMaxM && fused_grid_fills_device(fastest));
    const bool normalized = fastest.gamma != nullptr;

    // Rows per pass: all of them, unless a per-row scratch (the normalized rows, the gate projection) would
    // outgrow its budget.
    std::size_t rows_per_pass = m;
    if (normalized) {
        rows_per_pass = std::min(rows_per_pass, std::max<std::size_t>(kNormalizedBudget / a_row_bytes, 1));
    }
    std::size_t chunk_columns = 0;
    std::size_t weight_budget = kWorkspaceBudget - kGemmWorkspaceBytes - (normalized ? kNormalizedBudget : 0);
    if (!fused) {
        if (paired) {
            weight_budget -= kSwigluBudget;
            rows_per_pass =
                std::min(rows_per_pass, std::max<std::size_t>(kSwigluBudget / (kChunkColumns * kSwigluBytes), 1));
        }
        chunk_columns = whole_tiles(weight_budget / a_row_bytes);
        if (paired) {
            chunk_columns = std::min(chunk_columns, whole_tiles(kSwigluBudget / (rows_per_pass * kSwigluBytes)));
        }
        // NBITS_PREFILL_CHUNK_COLUMNS narrows the chunk, never past the budget.
        if (const std::optional<int> forced = fastest.request.context.overrides.prefill_chunk_columns) {
            chunk_columns = std::min(chunk_columns, whole_tiles(static_cast<std::size_t>(*forced)));
        } else {
            chunk_columns = wave_aligned_chunk(config.n, chunk_columns, rows_per_pass,
                                               fastest.request.context.capabilities.multiprocessor_count);
        }
        chunk_columns = std::min(chunk_columns, div_ceil(config.n, kChunkColumns) * kChunkColumns);
    }

    // Launches per pass: the RMS-norm, then the fused GEMM or, per chunk, dequantise + GEMM (+ bias rows), and
    // for the paired node dequantise + GEMM twice + SwiGLU.
    const std::size_t passes = div_ceil(m, rows_per_pass);
    const std::size_t per_pass =
        (normalized ? 1 : 0) + (fused ? 1 : div_ceil(config.n, chunk_columns) * (paired ? 5 : 3));
    if (passes > kMaxPrefillSteps / per_pass) {
        if (fastest.operands.activation_type == DataType::BFloat16) {
            fail_unsupported(fmt::format(
                "M={} rows of this BFloat16 prefill node would take {} passes of {} launches, beyond the {} "
                "launches one plan holds. How to fix: run the rows in batches of at most {}",
                m, passes, per_pass, kMaxPrefillSteps, (kMaxPrefillSteps / per_pass) * rows_per_pass));
        }
        return false;  // the original's path takes the node
    }

    // A K so large that one row or one chunk outgrows the budget: the original's path takes the node. Each size is
    // bounded by the budget before the next factor multiplies it.
    const std::size_t norm_bytes = normalized ? rows_per_pass * a_row_bytes : 0;
    std::size_t weight_bytes = 0;
    std::size_t projections_bytes = 0;
    if (!fused) {
        if (chunk_columns > kWorkspaceBudget / a_row_bytes) {
            return false;
        }
        weight_bytes = chunk_columns * a_row_bytes;
        projections_bytes = paired ? 2 * projection_bytes(rows_per_pass, chunk_columns) : 0;
    }
    // The stream-K grid's partial tiles and flags: at most a slot's worth each, 128 KiB a CTA of 256-token tiles
    // (64 KiB of 128-token ones, two CTAs an SM).
    std::size_t stream_bytes = 0;
    if (wgmma) {
        const PrefillTiles tiles = wgmma_tiles(fastest);
        if (tiles.stream_k) {
            stream_bytes = stream_k_ctas(fastest, tiles, rows_per_pass) * (stream_k_partial_bytes(tiles) + 4);
        }
    }
    const bool stream_k = stream_bytes > 0;
    if (norm_bytes > kWorkspaceBudget || projections_bytes > kWorkspaceBudget || stream_bytes > kWorkspaceBudget ||
        norm_bytes + weight_bytes + projections_bytes + stream_bytes + (fused ? 0 : kGemmWorkspaceBytes) >
            kWorkspaceBudget) {
        return false;
    }

    LaunchPlan candidate;
    const int norm_scratch =
        normalized ? add_scratch(candidate, fastest.request, norm_bytes, "the normalized rows") : -1;
    int weights = -1;
    int projections = -1;
    int workspace = -1;
    if (!fused) {
        weights = add_scratch(candidate, fastest.request, weight_bytes, "a dequantized weight chunk");
        if (paired) {
            projections =
                add_scratch(candidate, fastest.request, projections_bytes, "the gate and up projections of a chunk");
        }
        workspace = add_scratch(candidate, fastest.request, kGemmWorkspaceBytes, "the cuBLASLt workspace");
    }
    const int stream_scratch =
        stream_k ? add_scratch(candidate, fastest.request, stream_bytes, "the stream-K partial tiles and flags") : -1;
    int split_k = 1;  // the most CTAs a fused pass's clusters split K over
    bool split_tail = false;  // only the column tiles past the whole waves (NBITS_PREFILL_TAIL_SPLIT)
    for (std::size_t row = 0; row < m; row += rows_per_pass) {
        const std::size_t rows = std::min(rows_per_pass, m - row);
        BufferRef activation = rows_of(fastest.operands.activation, row, a_row_bytes);
        if (normalized) {
            add_rmsnorm_rows(candidate, fastest, activation, BufferRef::scratch(norm_scratch), rows);
            activation = BufferRef::scratch(norm_scratch);
        }
        if (fused) {
            const std::optional<PrefillTiles> tiles =
                add_fused_prefill(candidate, fastest, activation, row, rows, wgmma, stream_scratch);
            if (!tiles) {
                return false;
            }
            split_k = std::max(split_k, tiles->split_k);
            split_tail = split_tail || tiles->split_from_column_tile > 0;
        } else {
            add_dequantized_gemms(candidate, fastest, activation, row, rows, weights, projections, chunk_columns,
                                  workspace);
        }
    }
    const char* kind = paired ? "paired gate/up SwiGLU" : "MatMulNBits";
    set_variant(candidate,
                wgmma   ? "nbits_prefill_wgmma"
                : fused ? "nbits_prefill_fused"
                        : "nbits_prefill_dequantize_cublaslt",
                [m, kind, fused, wgmma, normalized, chunk_columns, rows_per_pass, split_k, split_tail, stream_k] {
                    if (fused) {
                        return fmt::format("M={} {} prefill{}: fused dequantising tensor-core GEMM ({}{}) over "
                                           "ONNX Runtime's layout, specialised on K, bits, block size and zero points",
                                           m, kind, normalized ? " with an RMS-norm pass over rows into scratch" : "",
                                           wgmma ? "sm_90a warpgroup MMA" : "mma.sync",
                                           stream_k ? ", a stream-K grid of one CTA a slot sharing the tiles' k tiles "
                                                      "evenly (fp32 partial tiles in scratch)"
                                           : split_k == 1 ? std::string()
                                           : split_tail
                                               ? fmt::format(", and in a second launch the column tiles past its "
                                                             "whole waves with K split over clusters of {} CTAs",
                                                             split_k)
                                               : fmt::format(", K split over clusters of {} CTAs", split_k));
                    }
                    return fmt::format("M={} {} prefill{}: weights dequantised in chunks of {} columns into scratch, "
                                       "each multiplied by cuBLASLt (rows per pass {})",
                                       m, kind, normalized ? " after an RMS-norm pass over rows" : "", chunk_columns,
                                       rows_per_pass);
                });
    plan = std::move(candidate);
    return true;
}

}  // namespace nbits::ops::detail
