#include "ops/selection.hpp"

#include "ops/entries.hpp"

#include <algorithm>
#include <cstring>

namespace nbits::ops::detail {
namespace {

std::size_t div_ceil(std::size_t value, std::size_t divisor) { return (value + divisor - 1) / divisor; }

std::size_t wave_target(std::uint32_t multiprocessor_count, std::size_t ctas_per_sm)
{
    return static_cast<std::size_t>(std::max<std::uint32_t>(multiprocessor_count, 1)) * ctas_per_sm;
}

std::optional<DownColumns> down_columns_of(int columns)
{
    switch (columns) {
    case 8: return DownColumns{8, entry::gemv_f16_down};
    case 4: return DownColumns{4, entry::gemv_f16_down_c4};
    case 2: return DownColumns{2, entry::gemv_f16_down_c2};
    default: return std::nullopt;
    }
}

}  // namespace

bool DownColumns::operator==(const DownColumns& o) const
{
    return columns == o.columns && std::strcmp(entry, o.entry) == 0;
}

F16GemvSelection select_f16_gemv_variant(std::size_t k, std::size_t n, std::size_t block_size, bool scales_fp16,
                                         bool has_zero_points)
{
    const bool down_eligible =
        !has_zero_points && scales_fp16 && block_size == kDownBlockSize && k % kDownBlockSize == 0 && k > n;
    if (down_eligible) {
        return {F16GemvVariant::DownProjection,
                "variant=down_projection;class=tall_skinny(K>N);block_size=32;scales=fp16;K%32==0"};
    }
    return {F16GemvVariant::General,
            has_zero_points ? "variant=general;zero_points=explicit;down_projection requires symmetric zp=8"
                            : "variant=general;class=not(tall_skinny K>N & block_size=32 & scales=fp16 & K%32==0)"};
}

DownColumns select_down_columns(std::size_t n, std::uint32_t multiprocessor_count)
{
    const std::size_t target = wave_target(multiprocessor_count, kDownFillCtasPerSm);
    for (const int columns : {8, 4}) {
        if (div_ceil(n, static_cast<std::size_t>(columns)) >= target) {
            return *down_columns_of(columns);
        }
    }
    return *down_columns_of(2);
}

DownColumns choose_down_columns(std::size_t n, std::uint32_t multiprocessor_count, const PlanOverrides& overrides)
{
    if (overrides.down_columns) {
        if (const std::optional<DownColumns> forced = down_columns_of(*overrides.down_columns)) {
            return *forced;
        }
    }
    return select_down_columns(n, multiprocessor_count);
}

std::uint32_t select_accuracy4_gemv_warps(std::size_t n, std::uint32_t multiprocessor_count,
                                          const PlanOverrides& overrides)
{
    if (overrides.accuracy4_warps) {
        const int forced = *overrides.accuracy4_warps;
        if (forced == 1 || forced == 2 || forced == 4 || forced == 8) {
            return static_cast<std::uint32_t>(forced);
        }
    }
    const std::size_t target = wave_target(multiprocessor_count, kAccuracy4FillCtasPerSm);
    for (const std::uint32_t warps : {8u, 4u, 2u}) {
        if (div_ceil(n, warps) >= target) {
            return warps;
        }
    }
    return 1;
}

bool use_accuracy4_stage64(std::size_t n, std::uint32_t multiprocessor_count, int compute_major, int compute_minor,
                           std::uint32_t max_shared_memory_per_block)
{
    if (max_shared_memory_per_block < kAccuracy4Stage64SharedBytes) {
        return false;
    }
    const bool datacenter = (compute_major == 8 && compute_minor == 0) || compute_major >= 9;
    const std::size_t resident_warps = datacenter ? 64 : 48;
    const std::size_t resident_ctas = resident_warps / (kAccuracy4GemvThreads / 32);
    const std::size_t one_wave = wave_target(multiprocessor_count, resident_ctas);
    return div_ceil(n, kAccuracy4ColumnsPerBlock) < one_wave;
}

bool f16_gemv_uses_large_block(std::size_t k, std::size_t n)
{
    return !(n <= kGemvF16SmallNMax && k <= kGemvF16SmallNMax);
}

std::uint32_t f16_gemv_threads(std::size_t k, std::size_t n)
{
    return f16_gemv_uses_large_block(k, n) ? kGemvF16LargeThreads : kGemvF16SmallThreads;
}

}  // namespace nbits::ops::detail
