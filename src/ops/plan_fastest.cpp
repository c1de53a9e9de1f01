// KernelPolicy::Fastest: nbits' own kernels, specialised by the JIT on the
// node (K, bits, block size, zero points, dtypes, bias, fusions) and on the
// GPU, reading ONNX Runtime's weight layout as handed over.
//   M <= 16         matmul_decode.cu: one pass over the weights for all rows
//                   (tensor cores for fp16/bf16, CUDA cores for fp32)
//   16 < M <= 128   matmul_prefill.cu: fused dequantising tensor-core GEMM (past M = 64
//                   only when its grid fills half the SMs)
//   32 < M <= 512   on sm_90: the same GEMM on warpgroup MMA (wgmma, compute_90a; tiles of
//                   64 tokens up to M = 64, of 128 above) when its grid fills three quarters
//                   of the SMs (past M = 256: every CTA slot; the paired node up to 1024, and on
//                   while M x K < 2^23)
//   otherwise       matmul_prefill.cu: dequantise chunks of columns into scratch, then cuBLASLt
// On sm_90 the fused GEMMs split K over thread block clusters where the H200
// measured it faster (measured_split_k); NBITS_PREFILL_SPLIT_K overrides the
// split, NBITS_PREFILL_WGMMA_MIN_M the smallest M of the wgmma GEMM, and
// NBITS_PREFILL_WGMMA_TILE_N=256 (256 weight rows a CTA, measured slower, so
// not a default) its width, NBITS_PREFILL_WGMMA_TILE_M (128 or 256 tokens a
// tile, any M past 64) its height.
// The RMS-norm prologue is fused into the decode kernel; at prefill it
// normalises chunks of rows into scratch first. Scratch never exceeds
// kWorkspaceBudget, whatever the shape.

#include "ops/plan_internal.hpp"

#include <fmt/format.h>

#include <algorithm>
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
constexpr std::size_t kDecodeMaxM = 16;
constexpr std::uint32_t kElementwiseThreads = 256;
constexpr std::size_t kElementwiseUnit = 8;  // elements of a row each thread of an epilogue takes at a time
constexpr std::uint32_t kDequantizeThreads = 256;
constexpr std::uint32_t kDequantizeUnits = 4;
constexpr std::uint32_t kNormThreads = 256;

constexpr int kGammaSlot = 6;

std::size_t div_ceil(std::size_t value, std::size_t divisor) { return (value + divisor - 1) / divisor; }

// The -D specialisation every nbits kernel reads.
struct Specialisation {
    const FastestRequest& fastest;

    void common(StepBuilder& step) const
    {
        const MatMulNBitsConfig& config = fastest.request.config;
        step.define("NBITS_ACT_BF16", act_bf16())
            .define("NBITS_SCALE_F32", fastest.operands.scale_type == DataType::Float32 ? 1 : 0)
            .define("NBITS_BITS", static_cast<std::int64_t>(config.bits))
            .define("NBITS_BLOCK_SIZE", static_cast<std::int64_t>(config.block_size))
            .define("NBITS_K", static_cast<std::int64_t>(config.k))
            .define("NBITS_HAS_ZP", fastest.operands.has_zero_points() ? 1 : 0);
    }
    // 0 none, 1 plain y = T(acc + bias), 2 folded y = T(T(acc) + bias).
    int bias_mode() const
    {
        if (!fastest.operands.has_bias()) {
            return 0;
        }
        return fastest.request.config.fold_bias_post_round ? 2 : 1;
    }
    bool gamma_f32() const { return fastest.gamma != nullptr && fastest.gamma->type == DataType::Float32; }
    int act_bf16() const { return fastest.operands.activation_type == DataType::BFloat16 ? 1 : 0; }
};

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

// Tiles of 128 weight rows for M = 12..32 (kWideTilesMinM..kWideTilesMaxM): each stage of 16 or 32 tokens feeds
// twice the rows of the presets' 64, K split over two warps.
constexpr PrefillTiles kWideSmallTiles{128, 16, 128, 4, 1, 2, 4, 2};
constexpr std::size_t kWideTilesMinM = 12;
constexpr std::size_t kWideTilesMaxM = 32;

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
    const Capabilities& device = fastest.request.context.capabilities;
    const MatMulNBitsConfig& config = fastest.request.config;
    const DataType act = fastest.operands.activation_type;
    if (device.compute_major != 9 || device.compute_minor != 0 || device.multiprocessor_count == 0 ||
        fastest.up != nullptr || fastest.gamma != nullptr || fastest.operands.has_zero_points() ||
        config.bits != 4 || (act != DataType::Float16 && act != DataType::BFloat16) ||
        fastest.m < kWideTilesMinM || fastest.m > kWideTilesMaxM) {
        return false;
    }
    const std::size_t slots = 2 * std::size_t{device.multiprocessor_count};
    const std::size_t tiles = div_ceil(config.n, static_cast<std::size_t>(kWideSmallTiles.tile_n));
    return tiles >= 3 * slots || (5 * tiles >= 4 * slots && tiles <= slots);
}

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
    const std::size_t scale_words = ((scale_bytes >= 4 ? 0 : 4 - scale_bytes) + blocks_per_stage * scale_bytes - 1) / 4 + 1;
    const std::size_t zp_bytes =
        config.bits == 4 ? (blocks_per_stage == 1 ? 1 : blocks_per_stage / 2 + 1) : blocks_per_stage;
    const std::size_t zp_words = (zp_bytes + 2) / 4 + 1;
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

// Whether `blocks` CTAs with `shared_bytes` of dynamic shared memory each are
// resident on one SM of `device` at once: an SM has the opt-in per-block limit
// plus 1 KiB, and each block reserves 1 KiB beyond its own (sm_80 and later).
constexpr std::size_t kReservedPerBlock = 1024;
bool resident_on_sm(const Capabilities& device, std::size_t blocks, std::size_t shared_bytes)
{
    return blocks * (shared_bytes + kReservedPerBlock) <=
           std::size_t{device.max_shared_memory_per_block_optin} + kReservedPerBlock;
}

// The least dynamic shared memory (a multiple of 16 bytes) with which no more
// than `blocks` CTAs fit one SM of `device`, whatever their registers allow.
std::size_t shared_bytes_capping_residency(const Capabilities& device, std::size_t blocks)
{
    const std::size_t sm_bytes = std::size_t{device.max_shared_memory_per_block_optin} + kReservedPerBlock;
    const std::size_t over = sm_bytes / (blocks + 1) + 1;  // blocks + 1 CTAs of this much do not fit
    return (over > kReservedPerBlock ? over - kReservedPerBlock + 15 : 0) / 16 * 16;
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

// Output tiles of a fused GEMM grid with `tiles` over the node's M rows:
// column tiles (half as many columns a CTA for the paired node) x row tiles.
std::size_t prefill_output_tiles(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const std::size_t columns_per_cta = static_cast<std::size_t>(fastest.up != nullptr ? tiles.tile_n / 2 : tiles.tile_n);
    return div_ceil(fastest.request.config.n, columns_per_cta) *
           div_ceil(fastest.m, static_cast<std::size_t>(tiles.tile_m));
}

// The split the H200 measured fastest for a grid of `output_tiles` short of
// the SMs (nbits-bench, fp16 int4 block 32, Llama-3-8B, split 1/2/4/8 each):
// - mma.sync GEMM (M <= 64, two CTAs an SM): 2 while two CTAs a tile fit in
//   1.5x the SMs, else none. qkv M = 64 (48 tiles) 42.1 -> 25.5 us, down
//   M = 64 (32) 137.9 -> 69.3, o M = 32 (64) 19.4 -> 14.1; 4 was slower on
//   each (34.1, 76.1, 21.1), as was 2 on up M = 64 (112 tiles, 43.2 -> 48.5).
// - wgmma GEMM with one row tile (M <= 128): the largest of 4 and 2 that keeps
//   the grid within the CTAs resident at once (two an SM for 128 weight
//   rows). qkv M = 128 (48 tiles) 31.4 us split 4 against 38.4 dequantised,
//   down (32) 80.0 against 101.7, up (112) 48.4 split 2 against 59.0. With
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
std::size_t measured_split_k(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const Capabilities& device = fastest.request.context.capabilities;
    const std::size_t sms = device.multiprocessor_count;
    if (device.compute_major != 9 || sms == 0) {
        return 1;  // measured on sm_90 only; the override reaches other cluster GPUs
    }
    const std::size_t output_tiles = prefill_output_tiles(fastest, tiles);
    if (tiles.wgmma) {
        const MatMulNBitsConfig& config = fastest.request.config;
        if (div_ceil(fastest.m, static_cast<std::size_t>(tiles.tile_m)) != 1 ||
            config.k * config.n < kSplitWgmmaMinWeights) {
            return 1;
        }
        for (const std::size_t split : {std::size_t{4}, std::size_t{2}}) {
            if (output_tiles * split <= static_cast<std::size_t>(tiles.min_ctas) * sms) {
                return split;
            }
        }
        return 1;
    }
    return fastest.m <= 64 && 4 * output_tiles <= 3 * sms ? 2 : 1;
}

// CTAs splitting the K of one output tile of `tiles`: a thread block cluster
// of at most 8 (the portable cluster size), so compute capability 9.0 and
// newer, and at most one CTA per k tile. NBITS_PREFILL_SPLIT_K overrides the
// measured choice.
std::size_t split_k_for(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const PlanContext& context = fastest.request.context;
    if (context.capabilities.compute_major < 9) {
        return 1;
    }
    const std::optional<int> split = context.overrides.prefill_split_k;
    const bool overridden = split && *split >= 1 && *split <= 8;
    return std::min(overridden ? static_cast<std::size_t>(*split) : measured_split_k(fastest, tiles),
                    div_ceil(fastest.request.config.k, static_cast<std::size_t>(tiles.tile_k)));
}

// NBITS_PREFILL_WGMMA_TILE_M where it is 128 or 256 (a plan built from raw overrides may hold anything).
std::optional<int> wgmma_tile_m_override(const FastestRequest& fastest)
{
    const std::optional<int> tokens = fastest.request.context.overrides.prefill_wgmma_tile_m;
    return tokens == 128 || tokens == 256 ? tokens : std::nullopt;
}

// Whether the wgmma GEMM takes its k tiles by the tensor memory accelerator:
// where the tensor maps can describe A and the weights (rows of whole 16
// bytes, K % 8 == 0) and NBITS_PREFILL_TMA asks for it.
bool tma_feeds(const FastestRequest& fastest, const PrefillTiles& tiles)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const bool describable = config.k % 8 == 0 && config.k_blocks() * config.blob_size() % 16 == 0 &&
                             tiles.tile_m <= 256 && tiles.tile_n <= 256;
    return describable && fastest.request.context.overrides.prefill_tma == 1;
}

// The wgmma GEMM's tiles: 64 tokens (wgmma m64n64k16) of 128 weight rows for M <= 64; above, 128 tokens of
// 128 rows, or of 256 where NBITS_PREFILL_WGMMA_TILE_N asks for them, or 256 tokens of 128 rows where
// NBITS_PREFILL_WGMMA_TILE_M does.
PrefillTiles wgmma_tiles(const FastestRequest& fastest)
{
    PrefillTiles tiles = kWgmmaTiles;
    if (fastest.m <= kWgmmaSmallTileM) {
        tiles.tile_m = static_cast<int>(kWgmmaSmallTileM);
    } else if (fastest.request.context.overrides.prefill_wgmma_tile_n == 256) {
        tiles = kWgmmaWideTiles;
    } else if (wgmma_tile_m_override(fastest) == 256) {
        tiles = kWgmmaTallTiles;
    }
    // A warpgroup of producer warps on the 64-token tiles, none on the 128-token ones, whose 64 accumulators a
    // thread need more registers than two CTAs an SM leave beside producer warps (one CTA an SM ran slower).
    const bool small = tiles.small_wgmma_tiles();
    const std::optional<int> producers = fastest.request.context.overrides.prefill_producer_warps;
    const bool overridden = producers && (*producers == 0 || *producers == 1 || *producers == 2 || *producers == 4);
    tiles.producer_warps = overridden ? *producers : (small ? kWgmmaProducerWarps : 0);
    if (tma_feeds(fastest, tiles)) {
        // One producer warp on the 64-token tiles. None on the 128-token (and 256-row) ones: thread 0 issues the
        // tensor copies, and two CTAs an SM keep their 64 accumulators a thread (with a producer warp ptxas caps
        // two CTAs of 288 threads at 96 registers, which spills and serialises the wgmmas; one CTA an SM with
        // NBITS_PREFILL_PRODUCER_WARPS=1). A warpgroup of them on the 256-token tiles, which hands its registers
        // to the computing warpgroups (setmaxnreg: 288 threads would cap those at 168, where ptxas serialises the
        // wgmmas). The override takes 0, 1 or 4.
        tiles.tma = true;
        tiles.producer_warps = overridden && *producers != 2 ? *producers : tiles.tile_m == 256 ? 4 : small ? 1 : 0;
    }
    if (tiles.producer_warps > 0 && !small) {
        tiles.min_ctas = 1;
    }
    return tiles;
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
    const std::size_t slots = static_cast<std::size_t>(tiles.min_ctas) * context.capabilities.multiprocessor_count;
    if (context.overrides.prefill_tail_split != 1 || !tiles.wgmma || tiles.split_k != 1 ||
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

// The fused GEMM (or the paired gate/up kernel) over `rows` rows; the tiles it
// launches with, or none when no tile configuration fits the device.
std::optional<PrefillTiles> add_fused_prefill(LaunchPlan& plan, const FastestRequest& fastest, BufferRef activation,
                                              std::size_t row, std::size_t rows, bool wgmma)
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
        StepBuilder step(paired ? (t.tma ? "nbits_prefill_gate_up_tma" : "nbits_prefill_gate_up")
                                : (t.tma ? "nbits_prefill_gemm_tma" : "nbits_prefill_gemm"),
                         paired ? "nbits fused gate/up SwiGLU prefill GEMM" : "nbits fused prefill GEMM");
        step.arg("a", activation)
            .arg("y", rows_of(o.output, row, y_row_bytes))
            .size_arg("m", rows, "M")
            .size_arg("n", config.n, "N");
        if (paired) {
            step.arg("b_gate", o.packed)
                .arg("scales_gate", o.scales)
                .arg("zp_gate", o.zero_points)
                .arg("b_up", fastest.up->packed)
                .arg("scales_up", fastest.up->scales)
                .arg("zp_up", fastest.up->zero_points);
        } else {
            const std::size_t bias_row_bytes = fastest.bias_row_stride * element_size(o.activation_type);
            step.arg("b", o.packed)
                .arg("scales", o.scales)
                .arg("zero_points", o.zero_points)
                .arg("bias", o.has_bias() ? rows_of(o.bias, row, bias_row_bytes) : BufferRef::null())
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
        step.define("NBITS_BIAS_MODE", paired ? 0 : spec.bias_mode());
        if (first > 0) {
            step.define("NBITS_FIRST_COLUMN_TILE", static_cast<std::int64_t>(first));
        }
        step.grid(static_cast<std::uint32_t>(count),
                  grid_extent(rows, static_cast<std::size_t>(t.tile_m), kMaxGridYZ, "M"),
                  static_cast<std::uint32_t>(t.split_k))
            .block(t.threads())
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
// the grid fills three quarters of the SMs, and for 256 < M <= 512 (the
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
    // NBITS_PREFILL_WGMMA_TILE_M lifts the upper bound.
    const bool unbounded = wgmma_tile_m_override(fastest).has_value();
    const std::size_t max_m = unbounded ? std::numeric_limits<std::size_t>::max() : wgmma_max_m(fastest);
    if (device.compute_major != 9 || device.compute_minor != 0 || fastest.m < min_m || fastest.m > max_m) {
        return false;
    }
    const PrefillTiles tiles = wgmma_tiles(fastest);
    const std::size_t ctas = prefill_ctas(fastest, tiles);
    if (fastest.m > kWgmmaMaxM && !unbounded) {
        return ctas >= static_cast<std::size_t>(tiles.min_ctas) * device.multiprocessor_count;
    }
    return 4 * ctas >= 3 * device.multiprocessor_count;
}

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
    if (norm_bytes > kWorkspaceBudget || projections_bytes > kWorkspaceBudget ||
        norm_bytes + weight_bytes + projections_bytes + (fused ? 0 : kGemmWorkspaceBytes) > kWorkspaceBudget) {
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
            const std::optional<PrefillTiles> tiles = add_fused_prefill(candidate, fastest, activation, row, rows, wgmma);
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
                [m, kind, fused, wgmma, normalized, chunk_columns, rows_per_pass, split_k, split_tail] {
                    if (fused) {
                        return fmt::format("M={} {} prefill{}: fused dequantising tensor-core GEMM ({}{}) over "
                                           "ONNX Runtime's layout, specialised on K, bits, block size and zero points",
                                           m, kind, normalized ? " with an RMS-norm pass over rows into scratch" : "",
                                           wgmma ? "sm_90a warpgroup MMA" : "mma.sync",
                                           split_k == 1 ? std::string()
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

// Tensor-core decode geometry: warps split K, a persistent grid of SMs x
// min_blocks CTAs walks the column groups (16 x tiles columns each), and each
// warp keeps kDecodeStages k steps of weights in a cp.async ring.
struct DecodeGeometry {
    std::uint32_t stages;
    std::uint32_t warps;
    std::uint32_t min_blocks;
    int tiles;
    int col_warps;
    int cluster_k;  // CTAs of a thread block cluster splitting each column group's K
    int chunks;
    bool stage_acts;
    bool stage_meta;  // scales and zero points through the ring (NBITS_DECODE_STAGE_META)
    std::uint32_t grid;
    std::uint32_t shared_bytes;
};

// Measured on the H200 (Llama-3 lm_head, down, qkv, gate/up; int4 and int8):
// two stages beat three and four, whose extra ring and unrolled code cost
// more than the depth gains once the weights no longer pass through registers.
constexpr std::uint32_t kDecodeStages = 2;

// The ring's depth: kDecodeStages, or NBITS_DECODE_STAGES (2..4).
std::uint32_t decode_stages(const FastestRequest& fastest)
{
    const std::optional<int> stages = fastest.request.context.overrides.decode_stages;
    return stages ? static_cast<std::uint32_t>(*stages) : kDecodeStages;
}

// Dynamic shared memory of nbits_decode_*: the layout of TcShared in
// matmul_decode.cu (stages of the weights and the extra_step_bytes of a
// step's staged activations and scales, then the cross-warp partial sums and
// the RMS squares, each double-buffered).
std::uint32_t decode_shared_bytes(std::uint32_t stage_count, std::uint32_t warps, int tiles, int chunks, int m_tiles,
                                  int sets, bool rms, std::size_t extra_step_bytes)
{
    const std::size_t stages =
        std::size_t{warps} * stage_count * (std::size_t(sets) * tiles * chunks * 2 * 512 + extra_step_bytes);
    const std::size_t partial = 2 * std::size_t(sets) * tiles * m_tiles * 4 * warps * 32 * 4;
    const std::size_t squares = 2 * (rms ? std::size_t{warps} * 8 * m_tiles : 1) * 4;
    return static_cast<std::uint32_t>((stages + partial + squares + 15) / 16 * 16);
}

// The geometry of the launch rule in matmul_decode.cu, chosen for the device:
// K split over up to 8 warps; min_blocks from {16 / warps, 1.5x that}, the one
// with fewer CTA rounds times CTAs per SM (a grid that covers the column
// groups in one round beats a smaller one that needs two: Llama-3-8B qkv,
// 384 groups, 7.9 against 9.6 us on the H200); two tiles per CTA when the
// columns fill the grid. The 1.5x option caps registers at 80 a thread, which
// only one weight set with at most two 16 x 8 accumulator tiles per warp
// stands (the paired gate/up node at M = 16 ran 56 against 30 us at M = 8
// under it; Llama-3-70B qkv at M = 16, two tiles of two batch tiles, 39.7
// against 33.9 us). `chunks` 16-byte chunks a lane and row per k step (see
// decode_geometry); two chunks take one tile a CTA: two tiles of two chunks
// reach the 128-register cap and spill (Llama-3-70B down 42.5 against 41.5 us
// with one tile, same run). It must fit the SM's shared memory: a device with
// less (sm_86/89: 100 KiB) gets fewer tiles or CTAs per SM.
DecodeGeometry decode_geometry_for(const FastestRequest& fastest, int chunks)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const Capabilities& device = fastest.request.context.capabilities;
    const bool paired = fastest.up != nullptr;
    const int sets = paired ? 2 : 1;
    const int m_tiles = fastest.m <= 8 ? 1 : 2;
    const bool rms = fastest.gamma != nullptr;
    const std::size_t sms = std::max<std::uint32_t>(device.multiprocessor_count, 1);

    DecodeGeometry geometry{};
    geometry.stages = decode_stages(fastest);
    geometry.chunks = chunks;
    const std::size_t step = (config.bits == 4 ? 128 : 64) * static_cast<std::size_t>(geometry.chunks);
    const std::size_t steps = div_ceil(config.k, step);
    geometry.warps = steps >= 8 ? 8 : steps >= 4 ? 4 : steps >= 2 ? 2 : 1;
    const std::uint32_t base_blocks = 16 / geometry.warps;
    geometry.tiles = !paired && geometry.chunks == 1 && 10 * div_ceil(config.n, 32) >= 9 * sms * base_blocks ? 2 : 1;
    const std::optional<int> forced_tiles = fastest.request.context.overrides.decode_tiles;
    if (forced_tiles) {
        geometry.tiles = paired ? 1 : *forced_tiles;
    }
    const std::size_t word_codes = config.bits == 4 ? 8 : 4;
    const std::size_t act_stage_bytes =
        fastest.m == 1 ? step * 2 : 8 * static_cast<std::size_t>(m_tiles) * (step * 2 + 8 * word_codes);
    const std::size_t chunk_codes = config.bits == 4 ? 32 : 16;
    const bool f32_scales = fastest.operands.scale_type == DataType::Float32;
    const bool has_zp = fastest.operands.has_zero_points();
    // The shared memory of a CTA and the CTAs an SM, as staged so far (nothing yet while the staging is chosen).
    auto shared = [&](int tiles) {
        const std::size_t meta_bytes =
            geometry.stage_meta ? std::size_t(sets) * tiles * geometry.chunks * 2 * 8 * 16 : 0;
        return decode_shared_bytes(geometry.stages, geometry.warps, tiles, geometry.chunks, m_tiles, sets, rms,
                                   (geometry.stage_acts ? act_stage_bytes : 0) + meta_bytes);
    };
    auto fits = [&](std::uint32_t blocks, int tiles) {
        return resident_on_sm(device, blocks, shared(tiles));
    };
    // CTAs per SM for `tiles` of `col_warps` warps across the columns: base_blocks (fewer where shared memory is
    // short), or with one column warp 1.5x that where it costs fewer CTA rounds times CTAs per SM (the time of a
    // round grows with the CTAs sharing an SM). Two column warps keep base_blocks: Qwen2.5-7B up (3584 x 18944),
    // the one node of the bench's models that took 1.5x CTAs with them (296 CTAs of 64 columns), ran slower than
    // with one column warp on 264 CTAs of 32 (H200, fp16, same call: M = 2 21.10 -> 19.23 us, M = 4 22.02 ->
    // 19.62, M = 8 23.79 -> 19.84).
    struct Blocks {
        std::uint32_t blocks;
        std::size_t cost;
    };
    // Column groups of `tiles` 16-column tiles for each of `col_warps` parts.
    auto groups_of = [&](int tiles, int col_warps) {
        return div_ceil(config.n, 16 * static_cast<std::size_t>(tiles * col_warps));
    };
    auto choose_blocks = [&](int tiles, int col_warps) {
        const std::size_t groups = groups_of(tiles, col_warps);
        auto cost = [&](std::uint32_t blocks) {
            const std::size_t ctas = std::min<std::size_t>(groups, sms * blocks);
            return div_ceil(groups, ctas) * blocks;
        };
        std::uint32_t blocks = base_blocks;
        while (blocks > 1 && !fits(blocks, tiles)) {
            --blocks;
        }
        const std::uint32_t more = base_blocks + base_blocks / 2;
        const bool few_accumulators = sets == 1 && tiles * m_tiles <= 2;
        if (blocks == base_blocks && more > base_blocks && col_warps == 1 && few_accumulators && fits(more, tiles) &&
            cost(more) < cost(blocks)) {
            blocks = more;
        }
        return Blocks{blocks, cost(blocks)};
    };
    // Whether two column warps' wider groups cost no more CTA rounds times columns than one warp's.
    auto two_col_warps_pay = [&](int tiles) {
        return 2 * choose_blocks(tiles, 2).cost <= choose_blocks(tiles, 1).cost;
    };
    // Rows of A staged with the weights (M <= 8, see kActRowStride in matmul_decode.cu): the single row, or the 8
    // rows of the batch tile, each padded by the 8 * word codes its quads read. Measured on the H200 against
    // loading them as each step is computed (same run): M = 1 faster on every node (lm_head 80.7 -> 79.5 us,
    // Llama-3-70B down 41.5 -> 39.4, 70B qkv 18.6 -> 16.7, 8B down 13.4 -> 11.6); at M = 8 faster where one
    // weight set of one tile meets a K >= N (8B down 16.3 -> 15.6, 8B o 6.25 -> 5.76), slower elsewhere (the
    // paired 70B gate/up 91.2 -> 98.3, 70B qkv 20.9 -> 22.4, lm_head 100.8 -> 102.9).
    // Two batch tiles (M = 9..16) are staged only when NBITS_DECODE_STAGE_ACTS=1 asks, then with as few CTAs an SM
    // as their rows leave room for.
    // At M = 2..8 the rows of A pay together with the scales (see stage_meta below), not alone, where a lane takes
    // one chunk of int4 codes: for two tiles of one weight set where two column warps (which need A loaded as
    // computed) do not pay, and for the paired node up to K = 4096 (int8 not measured). Measured on the H200 (fp16
    // int4 block 32, one call on commit 3a9cc13, plan -> rows of A alone / scales alone / both, M = 2 and 8, us):
    // Llama-3-70B qkv 19.05 -> 19.63 / 18.13 / 17.52 and 20.02 -> 20.16 / 19.18 / 18.34, o 14.19 -> 13.94 / 14.28 /
    // 12.50 and 14.43 -> 14.30 / 14.83 / 12.99, down 41.41 -> 41.34 / 41.09 / 37.47 and 42.47 -> 41.85 / 42.62 /
    // 39.23, Phi-3.5 qkv 9.05 -> 9.10 / 8.90 / 8.11 and 9.39 -> 9.27 / 9.42 / 8.24, the paired Phi-3.5 gate/up 11.43
    // -> 12.06 / 12.04 / 10.66 and 11.76 -> 12.12 / 12.43 / 10.82, lm_head 86.81 -> 92.33 / 87.70 / 87.23 and 93.62
    // -> 95.71 / 93.49 / 91.37; with zero points (plan -> both) 70B qkv 22.37 -> 20.83 and 23.90 -> 22.34, Phi-3.5
    // qkv 10.12 -> 8.86 and 10.33 -> 9.10, the paired Qwen2.5-7B gate/up 32.05 -> 29.38 and 33.16 -> 30.02, Llama-3-8B
    // 28.48 -> 25.82 and 29.44 -> 29.38, but Llama-3-70B (K = 8192) 93.41 -> 96.83 and 99.06 -> 100.41. Elsewhere
    // both lost: one tile of one chunk at 1.5x the CTAs (Llama-3-8B qkv 7.04 -> 7.12 and 7.24 -> 8.00), and where a
    // lane takes two chunks, the scales alone (Llama-3-8B o 5.08 -> 5.91, Phi-3.5 o 4.48 -> 5.20 at M = 8). In bf16
    // (next call, plan -> both, lm_head included) 70B qkv 19.54 -> 18.67 and 20.73 ->
    // 19.35, o 14.27 -> 13.62 and 14.69 -> 14.03, Phi-3.5 qkv 9.48 -> 8.31 and 9.72 -> 8.46, gate/up 11.67 -> 11.29
    // and 11.93 -> 11.50, but lm_head, whose plan takes two column warps there, 93.07 -> 96.19 and 98.81 -> 100.56:
    // where two column warps pay (lm_head, Llama-3-8B and 70B up) A stays loaded as computed. Two-tile nodes of one
    // column warp outside the sweep (Qwen2.5-7B up, its unpaired gate/up) take the rule unmeasured.
    const bool stage_rows_and_meta_pay =
        config.bits == 4 && fastest.m > 1 && m_tiles == 1 && geometry.chunks == 1 &&
        (paired ? config.k <= 4096 : geometry.tiles == 2 && !two_col_warps_pay(geometry.tiles));
    const std::optional<int> forced_stage_acts = fastest.request.context.overrides.decode_stage_acts;
    const bool stage_acts_pays = fastest.m == 1 ||
                                 (m_tiles == 1 && !paired && geometry.tiles == 1 && config.k >= config.n) ||
                                 stage_rows_and_meta_pay;
    geometry.stage_acts =
        !rms && config.k % 8 == 0 && (forced_stage_acts ? *forced_stage_acts == 1 : stage_acts_pays);
    // Scales and zero points through the ring (kStageMeta in matmul_decode.cu), 8 rows of 16 bytes a slot and stage,
    // where the kernel can (exact mode with four 16-bit scales a chunk index: int4 block 32, int8 block 16; K blocks a
    // multiple of 4, zero-point rows of whole words): at M = 1 for one weight set, and for the paired node with zero
    // points or where a lane takes two chunks; at M = 2..8 for a down projection (one weight set, K > N) with zero points,
    // and with the rows of A where those are staged for their pairing (stage_rows_and_meta_pay, above); or as
    // NBITS_DECODE_STAGE_META says. Measured on the H200 (int4 block 32, M = 1, one call, register loads ->
    // staged, us): fp16 Llama-3-8B down 11.66 -> 10.90, o 5.05 -> 4.79, Qwen2.5-7B down 14.23 -> 13.70, Llama-3-70B qkv
    // 16.46 -> 16.23, o 11.92 -> 11.75, the paired 8B gate/up 22.24 -> 21.35 and Qwen2.5-7B 25.03 -> 24.02; with zero
    // points 8B down 15.26 -> 12.84, 70B down 48.17 -> 42.24, lm_head 102.74 -> 93.35, 70B qkv 21.52 -> 20.11; bf16 70B
    // qkv 18.10 -> 17.35, down 39.43 -> 38.03, the paired 8B gate/up 23.14 -> 21.04. Slower by up to 2.4% on 7 of the
    // other 15 unpaired nodes (Phi-3.5 o 3.95 -> 4.04, Qwen2.5-7B o 4.57 -> 4.65; bf16 up to 4%), and at M = 8 on 14
    // of 21 nodes (8B qkv 7.27 -> 8.14, Phi-3.5 o 4.49 -> 5.19). The paired node with zero points, whose kernel
    // keeps the lane-dependent weight set's pointers in registers (no stack frame), gained at M = 1 (one call on
    // commit 3312b93, fp16 / bf16): 70B gate/up 97.37 -> 86.94 / 102.03 -> 92.27, 8B 29.13 -> 24.93 / 30.45 -> 25.01,
    // Qwen2.5-7B 32.62 -> 26.63 / 34.02 -> 27.81, Phi-3.5 13.08 -> 11.78 / 13.89 -> 12.18, Qwen2.5-0.5B 4.38 -> 4.37;
    // the symmetric paired node of one chunk a lane did not (Phi-3.5 10.11 -> 10.02, Qwen2.5-0.5B 3.91 -> 4.57), nor
    // the paired node with zero points at M = 2..8 (8B gate/up 28.49 -> 28.70 at M = 2, Phi-3.5 12.63 -> 13.18).
    // With zero points at M = 2..8 every down projection gained but Phi-3.5's at M = 4 (same call, unstaged ->
    // staged: 8B 16.23 / 16.31 / 17.66 -> 15.04 / 15.21 / 15.89 at M = 2 / 4 / 8, Qwen2.5-7B 19.62 / 20.11 / 21.71 ->
    // 17.93 / 18.50 / 19.76, 70B 46.21 / 46.94 / 48.86 -> 46.03 / 46.68 / 47.49, Phi-3.5 9.78 / 9.95 / 10.79 -> 9.53 /
    // 10.00 / 10.33) while most other nodes lost (an earlier call at M = 8: 8B qkv 8.10 -> 8.55, Phi-3.5 o 4.80 ->
    // 5.46); M = 9..16 moved by -4..+5% with no rule (lm_head 150.68 -> 145.61).
    // The kernel also stages two scales a chunk index (int4 block 64, int8 block 32) and one (larger blocks, as the
    // 4-byte word holding it). The rule takes int8 block 32 at M = 1 (below, only where two CTAs an SM run); the
    // others only when asked. Measured on the H200 (fp16, M = 1, one call on the kernels of this rule, register
    // loads -> staged, us): int8 block 32 Qwen2.5-7B down 28.58 -> 24.49, Llama-3-8B down 21.08 -> 20.04, lm_head
    // 133.63 -> 130.25 (94.3% of the read ceiling), Qwen2.5-7B o 7.29 -> 6.74, Llama-3-70B o 20.10 -> 19.76; with
    // zero points Qwen2.5-7B down 32.81 -> 26.00, the paired Qwen2.5-7B gate/up 44.94 -> 40.72, Llama-3-70B 138.55 ->
    // 135.37, 8B down 23.26 -> 21.68. Slower where three CTAs an SM run (70B qkv 24.62 -> 26.51, Phi-3.5 qkv 10.77 ->
    // 11.37, 8B qkv 9.53 -> 9.62) and at M = 8 on the 70B down with zero points (78.64 -> 83.04, where Qwen2.5-7B
    // down gained, 34.18 -> 27.22). Block 128 lost nearly everywhere, symmetric (Llama-3-70B down 33.26 -> 46.91, o
    // 11.01 -> 15.61, lm_head 70.06 -> 73.54) and with zero points (8B gate/up 23.73 -> 30.38, qkv 6.70 -> 8.57,
    // Phi-3.5 gate/up 10.56 -> 14.24; bf16 70B down 42.23 -> 56.11), gaining only on the 8B down (12.91 -> 11.90).
    const bool two_scales = config.block_size == 2 * chunk_codes;
    const bool meta_layout_pays = config.block_size == chunk_codes || (config.bits == 8 && two_scales && fastest.m == 1);
    const std::optional<int> forced_stage_meta = fastest.request.context.overrides.decode_stage_meta;
    const bool meta_alone_pays = (fastest.m == 1 && (sets == 1 || has_zp || geometry.chunks == 2)) ||
                                 (m_tiles == 1 && sets == 1 && has_zp && config.k > config.n);
    // The scales' staging follows the rows of A where it pays only beside them.
    auto stage_meta = [&] {
        const bool pays = meta_layout_pays && (meta_alone_pays || (stage_rows_and_meta_pay && geometry.stage_acts));
        return (forced_stage_meta ? *forced_stage_meta == 1 : pays) && config.block_size >= chunk_codes &&
               !f32_scales && config.k_blocks() % (config.block_size == chunk_codes ? 4 : 2) == 0 &&
               (!has_zp || config.zp_row_bytes() % 4 == 0);
    };
    geometry.stage_meta = stage_meta();
    // A device with too little shared memory for the staged rows loads them as it computes.
    if (geometry.stage_acts && !fits(m_tiles == 2 ? 1 : base_blocks, geometry.tiles)) {
        geometry.stage_acts = false;
        geometry.stage_meta = stage_meta();
    }
    if (geometry.tiles == 2 && !fits(base_blocks, 2)) {
        geometry.tiles = 1;
    }
    // Two batch tiles (M = 9..16): one column tile a CTA where its rounds cost less, a one-tile group taking 0.6
    // of a two-tile group's time (measured on the H200 at M = 16: lm_head 170.3 against 138.3 us for 31 against
    // 16 rounds, Llama-3-70B down 70.6 against 60.6 for 2 against 1). Llama-3-70B qkv (320 two-tile groups on
    // 264 CTAs: 2 rounds) then runs 3 rounds of 640 single-tile groups: 32.5 against 34.7 us.
    if (m_tiles == 2 && geometry.tiles == 2 && !forced_tiles && fits(1, 1) &&
        6 * choose_blocks(1, 1).cost < 10 * choose_blocks(2, 1).cost) {
        geometry.tiles = 1;
    }
    if (!fits(1, geometry.tiles)) {
        fail_unsupported(fmt::format(
            "the decode kernel needs {} bytes of shared memory per block for this node, but {} allows at most {}. "
            "Why: each warp keeps {} k steps of weights in flight there. How to fix: use a GPU of compute "
            "capability 8.0 or later, or KernelPolicy::Original",
            shared(geometry.tiles), device.name, device.max_shared_memory_per_block_optin, geometry.stages));
    }
    // Two warps across the columns where each k step's activations are loaded as it is computed, for the paired
    // node or one batch tile, and where the wider groups cost no more CTA rounds times columns: the two warps of a
    // step share its activations through L1 and a CTA covers twice the columns. Measured on the H200 in two runs
    // against one warp (same call each): the paired Llama-3-8B gate/up 36.3 -> 34.3 and 36.0 -> 34.3 us at
    // M = 16, Phi-3.5 gate/up 16.0 -> 15.3 twice, lm_head at M = 8 96.2 -> 93.5 and 95.3 -> 93.1; one weight
    // set of two batch tiles lost (lm_head at M = 16 137.7 -> 144.3 and 137.0 -> 144.1, Llama-3-70B qkv
    // 32.4 -> 32.9 and 32.2 -> 33.0). ncu on lm_head at M = 16: the warps wait on those activations' loads (the
    // first use of each step's A words holds 27% of the stall samples), and sharing them does not shorten that.
    const std::optional<int> forced_col_warps = fastest.request.context.overrides.decode_col_warps;
    if (forced_col_warps) {
        geometry.col_warps = std::min(*forced_col_warps, static_cast<int>(geometry.warps));
    } else {
        const bool loaded_as_computed = fastest.m > 1 && !geometry.stage_acts && geometry.warps >= 2;
        geometry.col_warps = loaded_as_computed && (paired || m_tiles == 1) && two_col_warps_pay(geometry.tiles) ? 2 : 1;
    }
    Blocks chosen = choose_blocks(geometry.tiles, geometry.col_warps);
    if (geometry.stage_meta && !forced_stage_meta && two_scales && chosen.blocks > 2) {
        geometry.stage_meta = false;  // int8 block 32 staged lost where three CTAs an SM run (above)
        chosen = choose_blocks(geometry.tiles, geometry.col_warps);
    }
    geometry.min_blocks = chosen.blocks;
    geometry.shared_bytes = shared(geometry.tiles);
    // K of each column group split over a thread block cluster (compute capability 9.0 and newer, every warp of
    // the cluster keeping a k step): the grid's CTAs form grid / cluster_k clusters, each taking one group at a
    // time. It pays where the groups leave CTA slots idle: the largest of 4 and 2 whose clusters still cover every
    // group in one round. Measured on the H200 (same call, against one CTA a group): Qwen2.5-0.5B down (56
    // groups) at M = 8 5.72 -> 4.25 us with 4, 4.90 with 2, at M = 16 7.43 -> 5.70; where the split adds rounds
    // (every other node of the sweep) 2 was slower by 2-60% (lm_head at M = 1 77.1 -> 92.5, Phi-3.5 o 4.07 ->
    // 7.15), the cluster's barrier and exchange coming once a group.
    const std::size_t groups = groups_of(geometry.tiles, geometry.col_warps);
    const std::size_t slots = sms * geometry.min_blocks;
    const std::size_t k_warps = geometry.warps / static_cast<std::uint32_t>(geometry.col_warps);
    auto splits_k = [&](int cluster_k) { return static_cast<std::size_t>(cluster_k) * k_warps <= steps; };
    geometry.cluster_k = 1;
    const std::optional<int> forced_cluster_k = fastest.request.context.overrides.decode_cluster_k;
    if (device.compute_major >= 9) {
        if (forced_cluster_k) {
            geometry.cluster_k = *forced_cluster_k;
            while (geometry.cluster_k > 1 && !splits_k(geometry.cluster_k)) {
                geometry.cluster_k /= 2;
            }
        } else if (device.compute_major == 9) {  // measured on sm_90 only; the override reaches other cluster GPUs
            for (const int cluster_k : {4, 2}) {
                if (splits_k(cluster_k) && groups * static_cast<std::size_t>(cluster_k) <= slots) {
                    geometry.cluster_k = cluster_k;
                    break;
                }
            }
        }
    }
    // One CTA (or cluster) a group, at most as many as the slots hold.
    const auto cluster_k = static_cast<std::size_t>(geometry.cluster_k);
    geometry.grid =
        static_cast<std::uint32_t>(std::min(groups, std::max<std::size_t>(slots / cluster_k, 1)) * cluster_k);
    return geometry;
}

// int4 weights with two 16-byte chunks a lane and row per k step (a k step of
// 256 codes): a warp keeps twice the bytes in flight and walks half the k
// steps, which pays where a CTA takes one column tile, an SM 16 warps and a
// group one CTA, at M <= 8, for the paired node from K = 3584 on. Measured on
// the H200 (fp16, block 32, graph replays, one call; one chunk -> two): at M =
// 1 Llama-3-8B o 6.26 -> 5.04 us, Qwen2.5-7B o 5.75 -> 4.53, Llama-3-70B
// gate+up 71.35 -> 66.94, Qwen2.5-7B gate+up 25.58 -> 25.00, 8B gate+up 22.43
// -> 22.21, 8B down 17.44 -> 11.66, Qwen2.5-7B down 22.56 -> 14.16; at M = 8
// 70B gate+up 86.26 -> 79.13, Qwen2.5-7B down 19.26 -> 18.29, 8B down 15.16 ->
// 14.63. Slower where it costs the second tile (more groups, more rounds:
// lm_head 76.79 -> 85.42, 70B qkv 16.47 -> 18.07, and 70B down, whose two tiles
// of one chunk take 35.98 against 39.46 us), the 1.5x CTAs (8B qkv 6.55 ->
// 6.96), the clusters at M > 1, which want more k steps (Qwen2.5-0.5B down at M
// = 8: 4.25 us in clusters of 4 against 4.83 in clusters of 2 with two chunks;
// at M = 1, bf16, 4.66 against 4.35, so a single-row down projection keeps
// two), and the paired node of a short K, whose steps leave warps idle (Phi-3.5
// gate+up, K = 3072, 10.15 -> 10.42; Qwen2.5-0.5B, K = 896, 3.90 -> 4.22). A
// second call, as planned against one chunk everywhere (M = 1, 2, 8):
// Llama-3-70B gate+up 71.07 -> 66.39 (M = 1), 80.78 -> 71.60 (M = 2);
// Llama-3-8B down 15.06 -> 12.51 (M = 2); within 1.5% where the rule keeps one.
// Not for the paired node with zero points: its two weight sets' scales and
// zero points of two chunks in flight take every register a thread has and
// spill (fp16, block 32, M = 1, same call, two -> one: Llama-3-70B gate+up
// 98.63 -> 97.36 us, Qwen2.5-7B 34.06 -> 32.61, Llama-3-8B 30.73 -> 29.12;
// the unpaired nodes keep two, 8B down 15.33 against 16.84 with one).
DecodeGeometry decode_geometry(const FastestRequest& fastest)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const std::optional<int> forced = fastest.request.context.overrides.decode_chunks;
    if (forced) {
        return decode_geometry_for(fastest, *forced);
    }
    const DecodeGeometry one = decode_geometry_for(fastest, 1);
    const bool paired = fastest.up != nullptr;
    // One tile a CTA, 16 warps an SM (not the 1.5x CTAs), no cluster.
    auto takes_two = [](const DecodeGeometry& g) {
        return g.tiles == 1 && g.min_blocks * g.warps == 16 && g.cluster_k == 1;
    };
    if (config.bits != 4 || fastest.m > 8) {
        return one;
    }
    if (paired && fastest.operands.has_zero_points()) {
        return one;
    }
    if (takes_two(one) && (!paired || config.k >= 3584)) {
        const DecodeGeometry two = decode_geometry_for(fastest, 2);
        return takes_two(two) ? two : one;
    }
    // A single-row down projection of one tile keeps two also in a cluster (K split over fewer CTAs).
    const bool single_row_down = fastest.m == 1 && !paired && config.k > config.n && one.tiles == 1;
    return single_row_down ? decode_geometry_for(fastest, 2) : one;
}

// On compute capability 9.0 and newer the tensor-core decode kernels launch
// as programmatic dependents of the kernel before them (NBITS_DECODE_PDL=0
// turns it off): their CTAs take the SMs that kernel's CTAs leave and wait
// for it (griddepcontrol.wait) before they touch memory, instead of starting
// after its last CTA and a launch gap. Measured on the H200 (M = 1, graph
// replays, same run): Llama-3-8B qkv 7.81 -> 6.93 us, down 14.20 -> 13.39,
// Llama-3-70B down 43.38 -> 42.66, lm_head 81.38 -> 80.89; faster on every
// M = 1 and M = 8 node of the sweep, on 17 of 21 at M = 16.
bool decode_programmatic(const FastestRequest& fastest)
{
    const PlanContext& context = fastest.request.context;
    const std::optional<int> forced = context.overrides.decode_programmatic;
    return (!forced || *forced == 1) && context.capabilities.compute_major >= 9;
}

// A programmatic launch's CTAs take whatever room an SM has left, so where
// registers let more than `blocks` CTAs share one (the int8 kernels), CTAs
// launched early pile onto the SMs that free first while others run one: the
// launch then reserves shared memory for no more than `blocks` an SM.
// Measured on the H200 (int8, programmatic, same call): lm_head at M = 1
// 158.7 us without the reservation, 128.0 with it; against plain launches
// (two runs, same call) faster on 54 of the decode sweep's 63 rows at M = 1,
// 8 and 16 (Llama-3-8B qkv 9.55 -> 8.75 us, Qwen2.5-7B down 24.50 -> 23.61,
// Llama-3-70B o 19.70 -> 19.08) and on all 21 with zero points at M = 1,
// slower on Llama-3-70B qkv at M = 1 (24.55 -> 25.71) and 8, lm_head at
// M = 8 (153.3 -> 156.9) and 16, and Qwen2.5-7B gate/up and Phi-3.5 qkv at
// M = 16. The int4 kernels' registers already hold two CTAs an SM; the same
// reservation there measured within 1% at M = 1 on every node, so it is left
// out (it only takes L1 from the loads at M = 9..16).
std::uint32_t programmatic_shared_bytes(const FastestRequest& fastest, std::uint32_t blocks, std::uint32_t shared_bytes)
{
    const Capabilities& device = fastest.request.context.capabilities;
    if (fastest.request.config.bits != 8) {
        return shared_bytes;
    }
    const std::size_t capped = shared_bytes_capping_residency(device, blocks);
    return resident_on_sm(device, blocks, capped) ? std::max(shared_bytes, static_cast<std::uint32_t>(capped))
                                                  : shared_bytes;
}

// M <= 16: matmul_decode.cu, one pass over the weights for all rows, with the
// RMS norm fused in (its sum of squares taken from the activations the kernel
// loads anyway), on the geometry above (fp32: CUDA cores, a warp per column
// set).
bool plan_decode(LaunchPlan& plan, const FastestRequest& fastest)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const HalfOperands& o = fastest.operands;
    const bool f32 = o.activation_type == DataType::Float32;
    const bool paired = fastest.up != nullptr;
    const std::size_t m = fastest.m;
    const Specialisation spec{fastest};

    std::uint32_t warps = 4;
    std::uint32_t min_blocks = 4;
    std::uint32_t grid = 0;
    std::uint32_t shared_bytes = 0;
    int tiles = 1;
    int col_warps = 1;
    int cluster_k = 1;
    int chunks = 1;
    bool stage_acts = false;
    bool stage_meta = false;
    std::uint32_t stages = kDecodeStages;
    int cols_per_warp = 1;
    std::size_t max_m = 1;
    bool programmatic = false;
    if (f32) {
        while (max_m < m) {
            max_m *= 2;
        }
        cols_per_warp = max_m <= 2 ? 4 : max_m <= 8 ? 2 : 1;
        grid = grid_extent(config.n, std::size_t{warps} * static_cast<std::size_t>(cols_per_warp), kMaxGridX, "N");
    } else {
        const DecodeGeometry geometry = decode_geometry(fastest);
        warps = geometry.warps;
        min_blocks = geometry.min_blocks;
        tiles = geometry.tiles;
        col_warps = geometry.col_warps;
        cluster_k = geometry.cluster_k;
        chunks = geometry.chunks;
        stage_acts = geometry.stage_acts;
        stage_meta = geometry.stage_meta;
        stages = geometry.stages;
        grid = geometry.grid;
        shared_bytes = geometry.shared_bytes;
        programmatic = decode_programmatic(fastest);
        if (programmatic) {
            shared_bytes = programmatic_shared_bytes(fastest, min_blocks, shared_bytes);
        }
    }
    const char* entry = paired ? "nbits_decode_gate_up" : "nbits_decode_matmul";
    StepBuilder step(entry, paired ? "nbits decode gate/up SwiGLU GEMV" : "nbits decode GEMV");
    step.arg("a", o.activation);
    if (paired) {
        step.arg("b_gate", o.packed)
            .arg("scales_gate", o.scales)
            .arg("zp_gate", o.zero_points)
            .arg("b_up", fastest.up->packed)
            .arg("scales_up", fastest.up->scales)
            .arg("zp_up", fastest.up->zero_points);
    } else {
        step.arg("b", o.packed)
            .arg("scales", o.scales)
            .arg("zero_points", o.zero_points)
            .arg("bias", o.bias)
            .size_arg("bias_row_stride", fastest.bias_row_stride, "bias row stride");
    }
    step.arg("gamma", fastest.gamma != nullptr ? fastest.gamma->tensor : BufferRef::null())
        .arg("y", o.output)
        .size_arg("m", m, "M")
        .size_arg("n", config.n, "N")
        .arg("epsilon", config.rmsnorm_epsilon)
        .define("NBITS_ACT", f32 ? 2 : o.activation_type == DataType::BFloat16 ? 1 : 0)
        .define("NBITS_SCALE_F32", !f32 && o.scale_type == DataType::Float32 ? 1 : 0)
        .define("NBITS_GAMMA_F32", spec.gamma_f32() ? 1 : 0)
        .define("NBITS_BITS", static_cast<std::int64_t>(config.bits))
        .define("NBITS_BLOCK_SIZE", static_cast<std::int64_t>(config.block_size))
        .define("NBITS_K", static_cast<std::int64_t>(config.k))
        .define("NBITS_HAS_ZP", o.has_zero_points() ? 1 : 0)
        .define("NBITS_BIAS", spec.bias_mode())
        .define("NBITS_RMSNORM", fastest.gamma != nullptr ? 1 : 0)
        .define("NBITS_WARPS", warps)
        .define("NBITS_MIN_BLOCKS", min_blocks);
    if (f32) {
        step.define("NBITS_COLS_PER_WARP", cols_per_warp).define("NBITS_MAX_M", static_cast<std::int64_t>(max_m));
    } else {
        step.define("NBITS_TILES", tiles)
            .define("NBITS_COL_WARPS", col_warps)
            .define("NBITS_CLUSTER_K", cluster_k)
            .define("NBITS_M_TILES", m <= 8 ? 1 : 2)
            .define("NBITS_SINGLE_ROW", m == 1 ? 1 : 0)
            .define("NBITS_STAGES", stages)
            .define("NBITS_CHUNKS", chunks)
            .define("NBITS_STAGE_ACTS", stage_acts ? 1 : 0)
            .shared_memory(shared_bytes, true);
        if (stage_meta) {
            step.define("NBITS_STAGE_META", 1);
        }
        if (programmatic) {
            step.define("NBITS_PROGRAMMATIC", 1).programmatic_dependent(true);
            const std::optional<int> prefetch = fastest.request.context.overrides.decode_prefetch;
            if (!prefetch || *prefetch == 1) {
                step.define("NBITS_PREFETCH_FIRST", 1);
            }
        }
    }
    step.grid(grid).block(32 * warps).add_to(plan, fastest.request);
    set_variant(plan, paired ? "nbits_decode_gate_up" : "nbits_decode",
                [m, warps, grid, tiles, col_warps, cluster_k, f32, programmatic, stage_acts, stage_meta,
                 normalized = fastest.gamma != nullptr] {
                    const char* staged = stage_acts && stage_meta
                                             ? ", the rows of A and the scales staged with the weights"
                                         : stage_acts ? ", the rows of A staged with the weights"
                                         : stage_meta ? ", the scales staged with the weights"
                                                      : "";
                    return fmt::format("M={} decode{}: one pass over the weights for every row on {} ({} warps split "
                                       "K{}, {} CTAs{} over {}-column groups{}), specialised on K, bits, block size "
                                       "and zero points{}",
                                       m, normalized ? " with the RMS norm fused" : "",
                                       f32 ? "CUDA cores" : "tensor cores with exact codes and fp32 block scales",
                                       warps / col_warps * cluster_k,
                                       col_warps > 1 ? fmt::format(" and {} the columns", col_warps) : std::string(),
                                       grid,
                                       cluster_k > 1 ? fmt::format(" in clusters of {}", cluster_k) : std::string(),
                                       16 * tiles * col_warps,
                                       staged,
                                       programmatic ? "; a programmatic dependent of the kernel before it" : "");
                });
    record_bias_stage(plan, o.has_bias(), config.fold_bias_post_round);
    return true;
}

// The original's down-projection GEMVs (fp16, K > N, block 32, fp16 scales,
// symmetric, int4) stage A in shared memory and run every column on its own
// warps, so on a node too narrow for the decode kernel's column groups to
// fill the SMs they are faster (Qwen2.5-0.5B down, 56 groups on 132 SMs:
// 3.9 against 6.9 us on the H200); Fastest keeps them there. A node whose
// groups fill the device takes the decode kernel (Llama-3-8B down 14.2
// against 17.3 us, Llama-3-70B down 43.4 against 51.5 us, Qwen2.5-7B down 16.7
// against 20.6 us).
bool original_down_projection_is_faster(const FastestRequest& fastest)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const HalfOperands& o = fastest.operands;
    const std::size_t sms = fastest.request.context.capabilities.multiprocessor_count;
    return fastest.m == 1 && config.bits == 4 && o.activation_type == DataType::Float16 && fastest.gamma == nullptr &&
           fastest.up == nullptr && div_ceil(config.n, 16) < sms &&
           select_f16_gemv_variant(config.k, config.n, config.block_size, o.scales_fp16(), o.has_zero_points())
                   .variant == F16GemvVariant::DownProjection;
}

}  // namespace

bool plan_fastest(LaunchPlan& plan, const FastestRequest& fastest)
{
    // nbits' kernels and its cuBLASLt GEMMs take M as a 32-bit int. Beyond it
    // the original's paths refuse the node, with the same message under both
    // policies; bf16, which has no original path, is refused here.
    if (fastest.m > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        if (fastest.operands.activation_type == DataType::BFloat16) {
            as_i32("M", fastest.m);
        }
        return false;
    }
    if (original_down_projection_is_faster(fastest)) {
        return false;
    }
    if (fastest.m <= kDecodeMaxM) {
        // fp32 at accuracy level 4 keeps the original's int8-activation GEMV.
        if (fastest.operands.activation_type == DataType::Float32 && fastest.request.config.accuracy_level == 4) {
            return false;
        }
        // The fused GEMM's wide tiles where they measured faster and fit the device, else the decode kernel.
        return (wide_small_tiles_pay(fastest) && plan_prefill(plan, fastest)) || plan_decode(plan, fastest);
    }
    // fp32 prefill keeps the original's paths.
    return fastest.operands.activation_type != DataType::Float32 && plan_prefill(plan, fastest);
}

}  // namespace nbits::ops::detail
