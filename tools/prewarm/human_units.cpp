#include "human_units.hpp"

#include <fmt/format.h>

namespace nbits::prewarm {

std::string human_bytes(std::uint64_t bytes)
{
    if (bytes < 1024) {
        return fmt::format("{} B", bytes);
    }
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes) / 1024.0;
    int unit = 0;
    while (value >= 1024.0 && unit < 3) {
        value /= 1024.0;
        ++unit;
    }
    return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string human_age(double seconds)
{
    if (seconds < 120) {
        return fmt::format("{:.0f} s", seconds);
    }
    if (seconds < 7200) {
        return fmt::format("{:.0f} min", seconds / 60);
    }
    if (seconds < 172800) {
        return fmt::format("{:.0f} h", seconds / 3600);
    }
    return fmt::format("{:.0f} d", seconds / 86400);
}

}  // namespace nbits::prewarm
