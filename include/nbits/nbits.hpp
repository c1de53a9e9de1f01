#pragma once

// Everything an engine needs: the runtime, the MatMulNBits operator, the
// embedded kernels and the JIT.
#include "nbits/error.hpp"
#include "nbits/fp16.hpp"
#include "nbits/jit/compile.hpp"
#include "nbits/jit/disk_cache.hpp"
#include "nbits/kernels.hpp"
#include "nbits/runtime/cuda_runtime.hpp"

namespace nbits {

// "0.1.0"
const char* version();

}  // namespace nbits
