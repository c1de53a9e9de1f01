#pragma once

// Which kernel arguments must be aligned beyond a byte, and why: every typed
// pointer to its element size, and the vector loads of each entry (uint4
// activations, u32/uint2/uint4 packed words, half4 rows) to their width.

#include "ops/plan_request.hpp"

#include <string>

namespace nbits::ops::detail {

// Fills KernelStep::alignment of every kernel step from the entry's loads and
// the referenced tensors' dtypes.
void attach_alignment(LaunchPlan& plan, const PlanRequest& request);

// "A (input 0)", "W_gate (input 1)", "Y (output 0)": how errors name a slot.
std::string tensor_label(const BufferRef& ref, bool gate_up);

}  // namespace nbits::ops::detail
