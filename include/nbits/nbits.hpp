#pragma once

// The whole public API: the runtime of one GPU, the MatMulNBits operator,
// tensors, node attributes, options, the launch plan and errors.
#include "nbits/attributes.hpp"
#include "nbits/capabilities.hpp"
#include "nbits/error.hpp"
#include "nbits/launch_plan.hpp"
#include "nbits/matmul_nbits.hpp"
#include "nbits/options.hpp"
#include "nbits/runtime.hpp"
#include "nbits/tensor.hpp"

namespace nbits {

// "0.2.0"
const char* version();

}  // namespace nbits
