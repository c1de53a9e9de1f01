// KernelPolicy::Fastest for M <= 16: the decode kernels of matmul_decode.cu,
// one pass over the weights for all rows (tensor cores for fp16 and bf16,
// CUDA cores for fp32), with the RMS-norm prologue and the paired gate/up
// SwiGLU fused, their geometry taken from the device's SMs and shared memory.

#include "ops/plan_fastest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace nbits::ops::detail {
namespace {

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
// So did one chunk in three stages on the paired node at M = 1, which gains on
// the H100 (see decode_geometry).
constexpr std::uint32_t kDecodeStages = 2;

// The ring's depth: kDecodeStages, or NBITS_DECODE_STAGES (2..4).
std::uint32_t decode_stages(const FastestRequest& fastest)
{
    const std::optional<int> stages = fastest.request.context.overrides.decode_stages;
    return stages ? static_cast<std::uint32_t>(*stages) : kDecodeStages;
}

// Codes of K a warp's k step covers: four lanes a row, `chunks` 16-byte chunks
// each (kStepCodes in matmul_decode.cu).
std::size_t decode_step_codes(const MatMulNBitsConfig& config, int chunks)
{
    return (config.bits == 4 ? 128 : 64) * static_cast<std::size_t>(chunks);
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
    const std::size_t step = decode_step_codes(config, geometry.chunks);
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
    // K of each column group split over a thread block cluster (compute capability 9.0 and newer, every warp of
    // the cluster keeping a k step): the grid's CTAs form grid / cluster_k clusters, each taking one group at a
    // time. It pays where the groups leave CTA slots idle: the largest of 4 and 2 whose clusters still cover every
    // group in one round, counting the clusters the GPCs run at once (Capabilities::clusters_at_once). Measured
    // on the H200 (same call, against one CTA a group): Qwen2.5-0.5B down (56 groups) at M = 8 5.72 -> 4.25 us
    // with 4, 4.90 with 2, at M = 16 7.43 -> 5.70; where the split adds rounds (every other node of the sweep) 2
    // was slower by 2-60% (lm_head at M = 1 77.1 -> 92.5, Phi-3.5 o 4.07 -> 7.15), the cluster's barrier and
    // exchange coming once a group.
    auto splits_k = [&](int cluster_k, std::size_t k_warps) {
        return static_cast<std::size_t>(cluster_k) * k_warps <= steps;
    };
    auto measured_cluster_k = [&](std::size_t groups, std::size_t blocks, std::size_t k_warps) {
        for (const int cluster_k : {4, 2}) {
            if (splits_k(cluster_k, k_warps) &&
                groups <= device.clusters_at_once(static_cast<std::size_t>(cluster_k)) * blocks) {
                return cluster_k;
            }
        }
        return 1;
    };
    // Two batch tiles (M = 9..16) of one symmetric int4 weight set on sm_90: each CTA reads every row of A for its
    // group's K (M x K x 2 bytes a group, loaded as computed), so A's traffic from L2 is 2 M / (16-column tiles a
    // group) times the weights' bytes. Wider groups (two tiles, then two column warps of two tiles: 32 and 64
    // columns) cut it where their K split over clusters of 2 still fills three quarters of the CTA slots in one
    // round and leaves each warp of the cluster at least 7 k steps. Measured on the H100 (80GB HBM3, 132 SMs; int4
    // block 32), against the plan without this rule in the same process: fp16 at M = 9 / 12 / 16 Qwen2.5-7B down
    // 23.31 / 24.05 / 25.96 -> 21.53 / 21.85 / 22.25 us, Llama-3-8B down 18.73 / 19.35 / 19.98 -> 18.01 / 18.26 /
    // 18.56 (two tiles), Llama-3-70B down 66.56 / 69.09 / 70.36 -> 57.21 / 58.14 / 59.40 and o 20.66 / 21.25 /
    // 21.73 -> 19.86 / 20.00 / 20.29 (two column warps of two tiles; in a second process o within 1%, the others
    // 1-11% faster); bf16 at M = 12 / 16 2-12% faster (70B down 72.21 -> 63.68 at M = 16). Lost where the warps
    // keep 4 steps (fp16, M = 16, an earlier call: Phi-3.5-mini down 11.19 -> 11.76 with two tiles, 12.79 with two
    // column warps) or 2 (Llama-3-8B o 7.21 -> 8.67, Qwen2.5-7B o 6.84 -> 8.15), and with zero points (block 32:
    // Llama-3-8B down 24.96 -> 27.36 at M = 12, the others within 2%).
    const std::optional<int> forced_cluster_k = fastest.request.context.overrides.decode_cluster_k;
    const bool overridden = forced_tiles || forced_col_warps || forced_cluster_k;
    if (m_tiles == 2 && sets == 1 && config.bits == 4 && !has_zp && device.compute_major == 9 && !overridden &&
        !geometry.stage_acts && geometry.warps == 8 && fits(base_blocks, 2)) {
        for (const auto& [tiles, col_warps] : {std::pair{2, 2}, std::pair{2, 1}}) {
            if (tiles * col_warps <= geometry.tiles * geometry.col_warps) {
                break;  // no wider than the groups chosen above
            }
            const std::size_t wide_groups = groups_of(tiles, col_warps);
            const std::size_t wide_blocks = choose_blocks(tiles, col_warps).blocks;
            const std::size_t wide_slots = sms * wide_blocks;
            const std::size_t k_warps = geometry.warps / static_cast<std::uint32_t>(col_warps);
            // Clusters of 2 (as measured_cluster_k takes them) filling three quarters of the slots.
            if (measured_cluster_k(wide_groups, wide_blocks, k_warps) == 2 && 8 * wide_groups >= 3 * wide_slots &&
                steps >= 7 * 2 * k_warps) {
                geometry.tiles = tiles;
                geometry.col_warps = col_warps;
                break;
            }
        }
    }
    Blocks chosen = choose_blocks(geometry.tiles, geometry.col_warps);
    if (geometry.stage_meta && !forced_stage_meta && two_scales && chosen.blocks > 2) {
        geometry.stage_meta = false;  // int8 block 32 staged lost where three CTAs an SM run (above)
        chosen = choose_blocks(geometry.tiles, geometry.col_warps);
    }
    geometry.min_blocks = chosen.blocks;
    geometry.shared_bytes = shared(geometry.tiles);
    // The cluster measured_cluster_k takes, or the override's.
    const std::size_t groups = groups_of(geometry.tiles, geometry.col_warps);
    const std::size_t slots = sms * geometry.min_blocks;
    const std::size_t k_warps = geometry.warps / static_cast<std::uint32_t>(geometry.col_warps);
    geometry.cluster_k = 1;
    if (device.compute_major >= 9) {
        if (forced_cluster_k) {
            geometry.cluster_k = *forced_cluster_k;
            while (geometry.cluster_k > 1 && !splits_k(geometry.cluster_k, k_warps)) {
                geometry.cluster_k /= 2;
            }
        } else if (device.compute_major == 9) {  // measured on sm_90 only; the override reaches other cluster GPUs
            geometry.cluster_k = measured_cluster_k(groups, geometry.min_blocks, k_warps);
        }
    }
    // One CTA (or cluster) a group, at most as many as the slots hold.
    const auto cluster_k = static_cast<std::size_t>(geometry.cluster_k);
    geometry.grid =
        static_cast<std::uint32_t>(std::min(groups, std::max<std::size_t>(slots / cluster_k, 1)) * cluster_k);
    return geometry;
}

// Memory bandwidth an SM from which the paired node at M = 1 pays for two
// chunks a lane (see decode_geometry).
constexpr std::uint32_t kPairedTwoChunksGbPerSm = 30;

// True where the bandwidth is unknown (the plan then follows the H200).
bool two_chunks_pay_paired_single_row(const Capabilities& device)
{
    const std::uint64_t sms = std::max<std::uint32_t>(device.multiprocessor_count, 1);
    const std::uint64_t bandwidth = device.memory_bandwidth_gb_per_s;
    return bandwidth == 0 || bandwidth >= kPairedTwoChunksGbPerSm * sms;
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
// One chunk in a ring of three stages (the same bytes in flight a warp, in
// finer steps) lost to two chunks on the paired node at M = 1 on the H200
// (fp16, one call, three stages as then planned against `nbits-bench --sweep
// decode --m 1 --overrides s2c2:NBITS_DECODE_STAGES=2,NBITS_DECODE_CHUNKS=2`;
// us, two chunks -> three stages): Llama-3-70B 66.46 -> 71.44, Qwen2.5-7B
// 22.79 -> 25.30, Llama-3-8B 21.26 -> 23.16. The H100 ranks them the other way
// (70B 91.50 -> 89.59, Qwen2.5-7B 30.01 -> 29.21, 8B 26.49 -> 26.28; one chunk
// in two stages faster still, 88.46, 28.88, 25.48; bf16 92.44 -> 89.61, 30.44
// -> 29.64, 27.29 -> 26.15), most likely because a GPU of less bandwidth an SM
// keeps its memory busy with fewer bytes in flight (Little's law: the H100 SXM
// has 25 GB/s an SM, the H200 37). So the paired node at M = 1 keeps one chunk
// in two stages where the device's bandwidth is known and below 30 GB/s an SM
// (kPairedTwoChunksGbPerSm; other GPUs than these two unmeasured).
// A single weight set at M = 1 whose K gives 8 warps fewer than 4 k steps of
// one chunk each takes two chunks also where one chunk would take two tiles or
// three CTAs an SM (int4 block 32, symmetric: as measured). Same call, one
// chunk -> two: Phi-3.5-mini qkv (3072 x 9216, two tiles) 7.53 -> 6.86 us
// (H100 8.62 -> 7.64, bf16 8.43 -> 7.19), Qwen2.5-7B qkv (3584 x 4608, three
// CTAs) 5.92 -> 5.21 (H100 5.98 -> 5.57, bf16 6.19 -> 5.80). From K = 4096 the
// second tile or CTA paid: Llama-3-8B qkv 6.40 -> 6.49 (H100 6.41 -> 7.39),
// lm_head 76.49 -> 80.77, Llama-3-70B qkv 16.04 -> 16.86, down 34.96 -> 36.39.
// int8 weights take two chunks (k steps of 128 codes) under the same conditions for one symmetric weight set
// whose K leaves each warp at least 3 such steps. Measured on the H100 (block 32, `nbits-bench --sweep decode
// --bits 8 --overrides c2:NBITS_DECODE_CHUNKS=2`, one chunk -> two, us; M = 1, 2, 8): Qwen2.5-7B down 28.59 ->
// 27.03, 31.87 -> 27.06, 32.26 -> 27.56; Llama-3-8B down 23.90 -> 22.80, 24.82 -> 22.80, 25.39 -> 23.29;
// Llama-3-8B o 7.71 -> 7.06, 7.83 -> 7.35, 7.96 -> 7.61; Qwen2.5-7B o 6.46 -> 5.83; Phi-3.5-mini down 11.90 ->
// 11.08, o 5.43 -> 5.50 (M = 1), 5.74 -> 4.99 (M = 2); bf16 at M = 1 Phi-3.5 down 13.03 -> 11.17, 8B o 8.01 ->
// 7.31. Slower on a short K (Qwen2.5-0.5B qkv, K = 896: 2.14 -> 2.38 at M = 1, 2.58 -> 3.04 at M = 8), for the
// paired node (Llama-3-70B gate+up 165.55 -> 173.60, bf16 166.37 -> 183.28; within 1% at M = 2 and 8) and where
// it costs the second tile or the third CTA (Llama-3-70B qkv 34.10 -> 38.24 at M = 8, Phi-3.5 qkv 13.64 ->
// 16.04). Not with zero points (not measured). The H200 gains more (fp16, one chunk -> two at M = 1, 2, 8):
// Qwen2.5-7B down 24.23 -> 20.13, 28.65 -> 21.32, 29.08 -> 21.62; Llama-3-8B down 19.47 -> 16.79, 20.78 -> 17.43,
// 21.28 -> 17.98; bf16 at M = 1 Qwen2.5-7B down 27.8% and Llama-3-8B down 24.1% faster.
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
    // Two chunks where they still take one tile, 16 warps an SM and no cluster, else one.
    auto two_where_it_takes_two = [&] {
        const DecodeGeometry two = decode_geometry_for(fastest, 2);
        return takes_two(two) ? two : one;
    };
    if (fastest.m > 8) {
        return one;
    }
    if (config.bits != 4) {
        // int8: one symmetric weight set whose K leaves each of the warps 3 k steps of two chunks or more.
        const bool steps_left = div_ceil(config.k, decode_step_codes(config, 2)) >= 3 * std::size_t{one.warps};
        const bool pays = !paired && !fastest.operands.has_zero_points() && takes_two(one) && steps_left;
        return pays ? two_where_it_takes_two() : one;
    }
    if (paired && fastest.operands.has_zero_points()) {
        return one;
    }
    if (paired && fastest.m == 1 && !two_chunks_pay_paired_single_row(fastest.request.context.capabilities)) {
        return one;
    }
    if (takes_two(one) && (!paired || config.k >= 3584)) {
        return two_where_it_takes_two();
    }
    const bool short_k =
        one.warps == 8 && div_ceil(config.k, decode_step_codes(config, 1)) < 4 * std::size_t{one.warps};
    const bool symmetric_block_32 = config.block_size == 32 && !fastest.operands.has_zero_points();
    if (fastest.m == 1 && !paired && symmetric_block_32 && short_k && one.cluster_k == 1) {
        const DecodeGeometry two = decode_geometry_for(fastest, 2);
        if (two.cluster_k == 1) {
            return two;
        }
    }
    // A single-row down projection of one tile keeps two also in a cluster (K split over fewer CTAs).
    const bool single_row_down = fastest.m == 1 && !paired && config.k > config.n && one.tiles == 1;
    return single_row_down ? decode_geometry_for(fastest, 2) : one;
}

// Where a k step's activations are loaded, NBITS_EARLY_ACTS in matmul_decode.cu (0: as it is computed, 1: as mma
// operands before the warp waits for its weights); staged ones are in the ring. It pays at M = 9..16 (two batch
// tiles, whose loads of A hold most of the warps' stalls) for int4 block 32 where the registers stand it:
// - the paired gate/up node, symmetric or with zero points. Measured on the H100 (fp16 and bf16, `nbits-bench
//   --sweep decode --m 2,8,16 --policy fastest --no-dense --overrides early:NBITS_DECODE_EARLY_ACTS=1`, one call),
//   at M = 16, fp16 / bf16: Llama-3-70B 131.73 -> 117.51 / 129.69 -> 122.70 us, Llama-3-8B 38.20 -> 35.84 / 38.81
//   -> 36.83, Qwen2.5-7B 43.75 -> 41.74 / 44.03 -> 42.72, Phi-3.5-mini 16.67 -> 16.24 / 17.28 -> 16.52; at M = 9 /
//   12 (fp16, a later call, off -> on) 70B 116.40 -> 112.03 / 125.12 -> 114.97, 8B 36.29 -> 34.19 / 37.38 -> 34.81,
//   Phi-3.5 16.29 -> 15.42 / 16.55 -> 15.75; with zero points at M = 16 70B 150.60 -> 132.87, 8B 42.13 -> 39.91,
//   Qwen2.5-7B 49.24 -> 45.54, Qwen2.5-0.5B 6.87 -> 6.43. ptxas spills 16 bytes without it (32 with zero points),
//   none with it.
// - one weight set on one column warp, no cluster, two CTAs of 8 warps an SM, and at least 4 k steps a warp and
//   group or every group in one round (same later call, fp16, M = 9 / 12, off -> on): Llama-3-8B o 6.97 -> 6.65 /
//   7.10 -> 6.79, Phi-3.5-mini o 5.91 -> 5.71 / 6.01 -> 5.89 (3 steps, but its 192 groups take one round) and
//   down 10.99 -> 10.61 / 11.13 -> 10.86, Llama-3-70B qkv 30.06 -> 28.50 / 30.56 -> 29.37, Qwen2.5-7B o 6.37 ->
//   6.29 / 6.56 -> 6.58, lm_head (two tiles) 128.52 -> 119.50 at M = 9. Slower elsewhere: three CTAs an SM, whose 80
//   registers do not stand it (Qwen2.5-7B qkv 8.29 -> 9.01 / 8.50 -> 9.19, Llama-3-8B qkv 9.38 -> 9.70), two
//   column warps or clusters (Llama-3-8B down 17.83 -> 18.77, Llama-3-70B down 55.98 -> 58.82, o 19.70
//   -> 20.25), 4 warps (Qwen2.5-0.5B qkv 3.14 -> 3.25), Phi-3.5-mini qkv (3 steps over 2.2 rounds, 12.57 -> 12.99
//   at M = 12).
// Not at M = 8 (the paired Llama-3-70B 95.26 -> 102.72, where it spills instead) nor with block 128: with zero points
// the paired Llama-3-8B at M = 16 30.57 -> 31.77 (no spills either way), symmetric mixed (paired at M = 16
// Qwen2.5-7B 36.58 -> 34.56, Llama-3-8B 29.57 -> 29.64; at M = 9 Llama-3-8B 28.62 -> 29.61).
int decode_early_acts(const FastestRequest& fastest, const DecodeGeometry& geometry)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const std::optional<int> forced = fastest.request.context.overrides.decode_early_acts;
    if (geometry.stage_acts) {
        return 0;
    }
    if (forced) {
        return *forced;
    }
    if (fastest.m <= 8 || config.bits != 4 || config.block_size != 32) {
        return 0;
    }
    if (fastest.up != nullptr) {
        return 1;
    }
    const bool two_ctas_of_one_column_warp = geometry.col_warps == 1 && geometry.cluster_k == 1 &&
                                             geometry.chunks == 1 && geometry.warps == 8 && geometry.min_blocks == 2;
    const std::size_t groups = div_ceil(config.n, 16 * static_cast<std::size_t>(geometry.tiles));
    const std::size_t sms = fastest.request.context.capabilities.multiprocessor_count;
    const std::size_t slots = sms * geometry.min_blocks;
    const std::size_t steps_a_warp =
        div_ceil(div_ceil(config.k, decode_step_codes(config, 1)), std::size_t{geometry.warps});
    const bool steps_or_one_round = steps_a_warp >= 4 || groups <= slots;
    return !fastest.operands.has_zero_points() && two_ctas_of_one_column_warp && steps_or_one_round ? 1 : 0;
}

// Offset codes (NBITS_OFFSET_CODES in matmul_decode.cu): int4 in exact mode
// (blocks of 32 codes and more) multiplies the codes as the magic number
// leaves them and corrects each block's result by the offset's share, from
// one mma of a constant operand over the block's activations a chunk index,
// shared by every tile and weight set. That trades each word's zero-point
// subtractions (bf16: four, fp16: two) for a few mmas. Off unless
// NBITS_DECODE_OFFSET_CODES asks (1 starts the block's accumulator at the
// offset's share, 2 adds it after the block's mmas): measured on the H100 at
// M = 1 (`nbits-bench --sweep decode --m 1 --policy fastest --no-dense
// --overrides oc:NBITS_DECODE_OFFSET_CODES=1`), slower on 19 of 21 bf16 nodes
// (median +2.9%) and 20 of 21 fp16 (+3.0%), where the kernel waits on its
// loads, not on its issue slots; faster only with bf16 block 128 and zero
// points on the long nodes (-0.8% to -3.8%, one call), too narrow a rule to
// take from one machine without the H200's figures.
int decode_offset_codes(const FastestRequest& fastest)
{
    const MatMulNBitsConfig& config = fastest.request.config;
    const std::optional<int> forced = fastest.request.context.overrides.decode_offset_codes;
    const bool applies = config.bits == 4 && config.block_size >= 32;
    return applies && forced && (*forced == 1 || *forced == 2) ? *forced : 0;
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
    return programmatic_launch(context, context.overrides.decode_programmatic);
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

}  // namespace

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
    int early_acts = 0;
    int offset_codes = 0;
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
        early_acts = decode_early_acts(fastest, geometry);
        offset_codes = decode_offset_codes(fastest);
        programmatic = decode_programmatic(fastest);
        if (programmatic) {
            shared_bytes = programmatic_shared_bytes(fastest, min_blocks, shared_bytes);
        }
    }
    const char* entry = paired ? "nbits_decode_gate_up" : "nbits_decode_matmul";
    StepBuilder step(entry, paired ? "nbits decode gate/up SwiGLU GEMV" : "nbits decode GEMV");
    step.arg("a", o.activation);
    bind_weights(step, fastest);
    if (!paired) {
        step.arg("bias", o.bias)
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
        if (early_acts != 0) {
            step.define("NBITS_EARLY_ACTS", early_acts);
        }
        if (offset_codes != 0) {
            step.define("NBITS_OFFSET_CODES", offset_codes);
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
                [m, warps, grid, tiles, col_warps, cluster_k, f32, programmatic, stage_acts, stage_meta, offset_codes,
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
                                       f32 ? "CUDA cores"
                                           : fmt::format("tensor cores with exact {}codes and fp32 block scales",
                                                         offset_codes != 0 ? "offset " : ""),
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

}  // namespace nbits::ops::detail
