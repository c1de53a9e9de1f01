#include "nbits/ops/matmul_nbits.hpp"

#include "nbits/jit/environment.hpp"

#include <limits>

namespace nbits::ops {
namespace {

// Rust's `str::parse::<u32>()`: an optional '+', then at least one ASCII
// digit and nothing else, within u32.
std::optional<std::uint32_t> parse_u32(const std::string& text)
{
    std::size_t position = text.size() > 1 && text[0] == '+' ? 1 : 0;
    if (position == text.size()) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    for (; position < text.size(); ++position) {
        const char c = text[position];
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
        if (value > std::numeric_limits<std::uint32_t>::max()) {
            return std::nullopt;
        }
    }
    return static_cast<std::uint32_t>(value);
}

}  // namespace

PlanOverrides PlanOverrides::parse(const std::optional<std::string>& down_columns,
                                   const std::optional<std::string>& accuracy4_warps)
{
    PlanOverrides overrides;
    // The original matches the exact strings "8", "4" and "2" (no sign, no padding).
    if (down_columns && (*down_columns == "8" || *down_columns == "4" || *down_columns == "2")) {
        overrides.down_columns = std::stoi(*down_columns);
    }
    if (accuracy4_warps) {
        const std::optional<std::uint32_t> warps = parse_u32(*accuracy4_warps);
        if (warps && (*warps == 1 || *warps == 2 || *warps == 4 || *warps == 8)) {
            overrides.accuracy4_warps = static_cast<int>(*warps);
        }
    }
    return overrides;
}

PlanOverrides PlanOverrides::from_environment()
{
    const jit::EnvLookup environment = jit::process_environment();
    return parse(environment(kDownColumnsEnv), environment(kAccuracy4WarpsEnv));
}

}  // namespace nbits::ops
