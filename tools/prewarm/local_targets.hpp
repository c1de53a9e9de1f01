#pragma once

#include "jit/target.hpp"

#include <string>
#include <vector>

namespace nbits::prewarm {

struct LocalTargets {
    std::vector<jit::Target> targets;
    std::string note;  // how they were chosen, for the user
};

// A CUBIN target (sm_XY) per distinct compute capability among this
// machine's GPUs; sm_90 when there is no driver or no GPU.
LocalTargets local_targets();

}  // namespace nbits::prewarm
