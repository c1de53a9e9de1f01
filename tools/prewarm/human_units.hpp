#pragma once

#include <cstdint>
#include <string>

namespace nbits::prewarm {

std::string human_bytes(std::uint64_t bytes);  // "812 B", "210.4 KiB", "23.4 MiB"
std::string human_age(double seconds);         // "12 s", "3 min", "5 h", "2 d"

}  // namespace nbits::prewarm
