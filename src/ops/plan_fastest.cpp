// KernelPolicy::Fastest: nbits' own kernels for the nodes they cover.

#include "ops/plan_internal.hpp"

namespace nbits::ops::detail {

bool plan_fastest(LaunchPlan& /*plan*/, const FastestRequest& /*fastest*/)
{
    return false;
}

}  // namespace nbits::ops::detail
