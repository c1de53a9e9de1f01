#pragma once

#include "jit/kernel_source.hpp"

#include <string_view>
#include <vector>

namespace nbits::kernels {

// The library's kernel sources (kernels_cu/*.cu), embedded at build time,
// each built once per process with its digest.
const std::vector<jit::KernelSource>& all();

// The source named `name` ("gemv_f16" for kernels_cu/gemv_f16.cu).
// Throws Error(InvalidArgument) for an unknown name.
const jit::KernelSource& source(std::string_view name);

// The source declaring `entry`. Throws Error(InvalidArgument) when none does.
const jit::KernelSource& source_of_entry(std::string_view entry);

}  // namespace nbits::kernels
