#pragma once

#include <string>
#include <string_view>

namespace nbits::prewarm {

// The parts of a canonical image key (jit::ImageKey::canonical) a person
// looks for in --list.
struct KeySummary {
    std::string target;   // "sm_90"
    std::string source;   // "gemv_f16", or "? 1a2b3c4d5e6f" for a source this build does not embed
    std::string entries;  // "matmul_nbits_gemv_f16", or "*" for the whole source
    std::string nvrtc;    // "13.0"
};

KeySummary summarize_key(std::string_view key_text);

}  // namespace nbits::prewarm
