#pragma once

// The original's structural kernel choices: pure functions of the shape and
// the device, never of a particular model's dimensions.

#include "nbits/ops/matmul_nbits.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace nbits::ops::detail {

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
inline constexpr std::uint32_t kMaxGridX = 65535;                  // the original's clamp of 1-D grids

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
// ONNX_GENAI_DOWN_COLS, when set to 8, 4 or 2, wins over the device choice.
DownColumns choose_down_columns(std::size_t n, std::uint32_t multiprocessor_count, const PlanOverrides& overrides);

// Warps per CTA of the accuracy-4 blockwise GEMV: 8, 4, 2 until the grid
// reaches 12 CTAs per SM, else 1; ONNX_GENAI_ACC4_WARPS wins when set.
std::uint32_t select_accuracy4_gemv_warps(std::size_t n, std::uint32_t multiprocessor_count,
                                          const PlanOverrides& overrides);

// The 64-block activation stage only when the 8-column block-32 grid is below
// one resident wave (64 warps/SM on sm_80 and sm_90+, 48 elsewhere) and the
// opt-in shared memory holds it.
bool use_accuracy4_stage64(std::size_t n, std::uint32_t multiprocessor_count, int compute_major, int compute_minor,
                           std::uint32_t max_shared_memory_per_block);

// 64 threads for small shapes (N and K both <= 1152), 256 otherwise.
std::uint32_t f16_gemv_threads(std::size_t k, std::size_t n);
bool f16_gemv_uses_large_block(std::size_t k, std::size_t n);

}  // namespace nbits::ops::detail
